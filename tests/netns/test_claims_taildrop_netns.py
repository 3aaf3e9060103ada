"""``braid bench claims --quick --rows taildrop``: the plain tail-drop row on
its own two-host testbed, every stack fault-free and with one link silent,
each figure present and sane, the link really silent, nothing left behind.
Speed is not asserted (the machine may be busy)."""

from __future__ import annotations

import json
from pathlib import Path

from netns_helpers import ns_list
from test_claims import _claims


def test_claims_taildrop_row(tmp_path: Path, unique_name: str) -> None:
    out = tmp_path / "o"
    r = _claims(["--quick", "--rows", "taildrop", "--out", str(out)], unique_name,
                timeout=300)
    assert "no claims fabric" in r.stderr  # only the row's own testbed came up
    assert not [n for n in ns_list() if n.startswith(f"br{unique_name[:10]}td-")]
    data = json.loads((out / "claims.json").read_text())
    row = data["rows"]["taildrop"]
    assert "error" not in row, row.get("error")
    assert data["hosts"] == 2 and row["topology"]["link"]["taildrop"] is True
    assert set(row["per_stack"]) == {"braid", "tcp", "mptcp"}
    for stack, cases in row["per_stack"].items():
        assert set(cases) == {"fault_free", "faulted"}, (stack, cases)
        for case, v in cases.items():
            assert v["complete"], (stack, case, v)  # byte-exact, nothing failed
            assert v["samples"] > 100, v  # the link counters were read through the run
            assert v["packets_sent"] > 0 and 0 <= v["resends"] <= v["packets_sent"], v
            assert 0.0 <= v["bins_at_rate_share"] <= 1.0, v
            assert 0 <= v["worst_bin_mbps"] <= v["median_bin_mbps"], v
            assert v["longest_gap_ms"] >= 0 and v["tail_drops"] >= 0, v
        fl = cases["faulted"]
        assert {"moved_ms", "hold_ms", "stall_ms", "fault_at_s", "short_bins_after"} <= set(fl), fl
        assert fl["moved_ms"] is None or fl["moved_ms"] >= 0, fl
        assert fl["hold_ms"] is None or fl["hold_ms"] >= 0, fl
    # the silent link carried no data after the fault (a few ms of the
    # step; a stray control frame of the link's own, ARP or neighbour
    # discovery, is shorter than one data frame), the survivor carried the
    # sprayers' traffic; TCP rode the dead link
    frame = 1500 + 14
    for stack in ("braid", "mptcp", "tcp"):
        fb = int((row["per_stack"][stack]["faulted"]["fault_at_s"] + 0.02) / 0.01)
        p0, p1 = row["series"][f"{stack}/faulted"]
        assert sum(p0[fb:]) < frame, (stack, p0[fb:])
        assert (sum(p1[fb:]) > 0) == (stack != "tcp"), (stack, p1)
    assert row["per_stack"]["tcp"]["faulted"]["moved_ms"] is None
    assert row["per_stack"]["braid"]["faulted"]["parked_after_ms"] is not None
    # every run recorded, judged for fidelity, and the report names the targets
    runs = [t for t in data["transfers"] if t["row"] == "taildrop"]
    assert len(runs) == 6 and all(t["fired"] for t in runs if t["run"] == "faulted")
    assert all(t["fidelity"]["faithful"] in (True, False, None) for t in runs)
    # the sender's shapers were read through every run and held against an
    # ideal link: each run's lateness is judged like an eBPF port's
    for t in runs:
        late = {k: v["late"] for k, v in (t["gaps"] or {}).items()}
        assert set(late) <= {"h0:p0/up", "h0:p1/up"} and late, t["gaps"]
        assert all(v["frames"] > 0 and v["p99"] is not None and v["p99"] >= 0
                   for v in late.values()), late
    for stack, cases in row["per_stack"].items():
        for case, v in cases.items():
            assert 0 <= v["emulator_short_bins"] <= v["bins"], (stack, case, v)
        assert cases["faulted"]["emulator_short_bins_after"] >= 0, cases["faulted"]
    lines = [t for t in data["targets"] if t[0].startswith("taildrop")]
    assert len(lines) == 3, data["targets"]
    md = (out / "claims.md").read_text()
    assert "2 plain tail-drop links" in md and "the survivor holds" in md
