"""`braid bench claims --quick` end to end: every row measured for every stack,
every transfer byte-exact or failed with a reason, nothing left behind.
Speed is not asserted (the machine may be busy): numbers go to the JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="braid bench claims needs root (namespaces)"),
]

ROWS = ["invisibility", "failover", "loss", "asymmetric", "compound", "incast", "fairness"]


def _numbers(obj: Any) -> int:
    if isinstance(obj, bool):
        return 0
    if isinstance(obj, int | float):
        return 1
    if isinstance(obj, dict):
        return sum(_numbers(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_numbers(v) for v in obj)
    return 0


BRAID = str(Path(sys.executable).parent / "braid")


def _claims(args: list[str], unique_name: str, timeout: float
            ) -> subprocess.CompletedProcess[str]:
    """``braid bench claims ARGS`` on testbed ``unique_name``; asserts it
    succeeded and left no namespace behind (and removes any it left)."""
    # A short run directory: the link elements' control sockets (and the fault
    # commands' reply sockets) live under it, and AF_UNIX paths end at 107 bytes.
    run_dir = Path(tempfile.mkdtemp(prefix="bc", dir="/tmp"))
    env = {**os.environ, "BRAID_RUN_DIR": str(run_dir)}
    try:
        r = subprocess.run([BRAID, "bench", "claims", *args, "--name", unique_name], env=env,
                           capture_output=True, text=True, timeout=timeout)
    finally:
        left = sorted(p.name for p in Path("/run/netns").glob(f"br{unique_name}-*")) \
            if Path("/run/netns").exists() else []
        if left:
            subprocess.run([BRAID, "testbed", "down", "--name", unique_name], env=env,
                           capture_output=True, timeout=60)
        shutil.rmtree(run_dir, ignore_errors=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert left == [], f"leftover namespaces: {left}"
    return r


def test_claims_quick(tmp_path: Path, unique_name: str) -> None:
    out = tmp_path / "o"
    r = _claims(["--quick", "--out", str(out)], unique_name, timeout=480)
    assert "row 1/7: invisibility" in r.stderr  # progress is shown

    data = json.loads((out / "claims.json").read_text())
    assert data["quick"] and data["stacks"] == ["braid", "tcp", "mptcp"]
    for row in ROWS:
        res = data["rows"][row]
        assert "error" not in res, (row, res.get("error"))
        for stack in data["stacks"]:
            assert stack in res["per_stack"], (row, stack)
            assert _numbers(res["per_stack"][stack]) > 0, (row, stack, res["per_stack"][stack])
    assert "braid-taildrop" in data["rows"]["incast"]["per_stack"]
    # the incast's controls: Braid's senders with the victim over kernel TCP,
    # and with no victim (what of the verdict is the host's)
    ctl = data["rows"]["incast"]["controls"]
    assert set(ctl) == {"braid, victim over tcp", "braid, no victim"}, ctl
    assert ctl["braid, victim over tcp"]["victim_stack"] == "tcp"
    assert ctl["braid, victim over tcp"]["victim_ratio"] is not None
    assert ctl["braid, no victim"]["victim_ratio"] is None
    assert all(c["bursts"] > 0 for c in ctl.values()), ctl
    assert {t["run"] for t in data["transfers"] if t["row"] == "incast"} >= {
        "control: victim over tcp", "control: no victim"}
    # the newcomer, timed by message arrivals (no 100 ms floor), every stack
    for stack in data["stacks"]:
        fa = data["rows"]["fairness"]["per_stack"][stack]["n=2"]
        assert len(fa["newcomer_share_ms"]) == 1, fa
        assert fa["newcomer_share_worst_ms"] is None or fa["newcomer_share_worst_ms"] > 0, fa
    # the fault figures: the link-down failover for every stack, when
    # Braid parked plane 0 (relative to the fault), the stall limit, and the
    # compound fault with CE marks instead of loss on the survivor (eBPF ports)
    fo, co = data["rows"]["failover"]["per_stack"], data["rows"]["compound"]["per_stack"]
    for stack in data["stacks"]:
        assert _numbers(fo[stack]["link_down"]) > 0, fo[stack]
        if data["rows"]["compound"]["ce_faults"]:  # the ports are eBPF ones
            assert _numbers(co[stack]["ce"]) > 0, co[stack]
    for planes in (fo["braid"]["faulted"]["planes"], fo["braid"]["link_down"]["planes"],
                   co["braid"]["planes"]):
        assert {"events", "parked_after_ms", "parked_after_srtt",
                "probe_interval_ms"} <= set(planes), planes
        assert planes["probe_interval_ms"] > 0
    assert co["braid"]["stall_limit_ms"] is None or co["braid"]["stall_limit_ms"] > 0
    # what limits the asymmetric stream: the sender's window and plane shares
    snd = data["rows"]["asymmetric"]["per_stack"]["braid"]["half_rate"]["sender"]
    assert snd["cwnd"] > 0 and snd["max_window"] >= snd["cwnd"], snd
    # ... and what its time rule waits (srtt, rttvar, the reorder allowance)
    assert snd["rttvar_ms"] > 0 and snd["reorder_extra_ms"] >= 0, snd
    assert isinstance(snd["twin_resends"], int) and snd["lost_by_time"] >= 0, snd
    assert len(snd["plane_weight"]) == 2 and max(snd["plane_weight"]) == 1.0, snd
    assert data["transfers"]
    for t in data["transfers"]:
        assert t["ok"] or t["reason"], t  # byte-exact, or failed with a reason
        assert t["bad_messages"] == 0, t  # never corrupt
        # every run says how busy the machine was, and what the project used
        c = t["cpu"]
        if t["ok"]:
            assert c is not None and c["cpus"] == os.cpu_count(), t
            assert 0.0 < c["busy"] <= 1.0 and 0.0 <= c["steal"] <= 1.0, c
            assert c["workers"] is not None and c["workers"] > 0, c
            if t["stack"].startswith("braid"):
                assert c["daemons"] is not None and c["daemons"] > 0, c
        # ... and whether the emulator kept up (docs/claims.md, Fidelity)
        f = t["fidelity"]
        assert f["faithful"] in (True, False, None) and isinstance(f["reasons"], list), f
        assert (f["faithful"] is False) == bool(f["reasons"]), f
        if t["ok"]:
            assert f["cpu_saturated_share"] is not None and f["faithful"] is not None, f
    # the ports timed departures on busy links (the incast's last hop at least)
    assert any(t["fidelity"]["busy_gaps"] > 0 for t in data["transfers"])
    assert any(t["gaps"] for t in data["transfers"])
    # a verdict is withheld exactly where a run it rests on was not faithful
    # (Braid's runs of the row; for a target that compares stacks, those of
    # the stacks it names: tools/claims/fidelity_report.rests_on.)
    from tools.claims.fidelity_report import rests_on

    def group(stack: str) -> str:
        return "braid" if stack.startswith("braid") else stack

    for target in data["targets"]:
        row = re.findall(r"^[a-z]*", target[0])[0]  # its first word, as the report reads it
        runs = [t for t in data["transfers"] if t["row"] == row]
        stacks = rests_on(target[0], sorted({group(t["stack"]) for t in runs}))
        if any(t["fidelity"]["faithful"] is False and group(t["stack"]) in stacks
               for t in runs) and target[3] != "-":
            assert target[3].startswith("no verdict: not faithful ("), target
        else:
            assert not target[3].startswith("no verdict"), target
    # the step-time CDF and a goodput-through-the-fault plot were drawn, in
    # the --out directory and named after the variant (a quick run is one)
    from tools.claims.naming import run_name

    stem = run_name(data)
    assert stem.endswith("-quick"), stem
    for name in (f"{stem}-step-cdf.png", f"{stem}-failover.png", f"{stem}-summary.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "claims.md").read_text()
    assert "invisibility" in md and data["commit"] in md
    assert "parked within 5 srtt" in md and "10 srtt + one probe interval" in md
    assert "carrier loss" in md
    assert "fidelity and CPU of each row's runs" in md and "machine busy %" in md


def test_claims_connection_setting_reaches_every_daemon(tmp_path: Path, unique_name: str
                                                        ) -> None:
    """``--connection KEY=VALUE`` is written into every daemon's config, named
    in the JSON and the report, and the run still moves its bytes. With
    ``--queue-wait`` every Braid run records how long the datagrams of its two
    ends sat in their socket queues."""
    out = tmp_path / "o"
    work = tmp_path / "w"
    _claims(["--quick", "--rows", "loss", "--stacks", "braid", "--connection", "ack_every=16",
             "--queue-wait", "--out", str(out), "--work", str(work)], unique_name, timeout=240)
    import tomllib

    configs = sorted(work.glob("h*.toml"))
    assert len(configs) == 4
    for c in configs:
        cfg = tomllib.loads(c.read_text())
        conn = cfg["connection"]
        assert conn["ack_every"] == 16 and conn["plane_rate"] > 0, (c, conn)
        assert cfg["queue_wait"] is True
    data = json.loads((out / "claims.json").read_text())
    assert data["queue_wait"] is True
    for t in data["transfers"]:  # the stream h0 -> h3: both ends read (DATA, SACKs)
        qw = t["queue_wait"]
        assert {"h0", "h3"} <= set(qw), qw
        assert all(v["reads"] > 0 and v["max_us"] >= v["mean_us"] >= 0 for v in qw.values()), qw
    assert "socket-queue waits of the Braid daemons" in (out / "claims.md").read_text()
    data = json.loads((out / "claims.json").read_text())
    assert data["connection"] == {"ack_every": 16}
    assert all(t["ok"] for t in data["transfers"]), data["transfers"]
    assert "daemon [connection] settings: ack_every = 16" in (out / "claims.md").read_text()

    # A key the daemon does not know fails before anything is built.
    bad = subprocess.run([BRAID, "bench", "claims", "--rows", "loss", "--connection",
                          "ack_evry=16", "--out", str(tmp_path / "bad")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown key 'ack_evry'" in bad.stderr, bad.stderr
    assert not (tmp_path / "bad" / "claims.json").exists()


def test_claims_rate_auto_probes_down_the_ladder(tmp_path: Path, unique_name: str) -> None:
    """``--rate auto`` probes Braid at 100, 50, 25, 12 Mbit/s per plane until a
    run is faithful, then runs the rows at that rate; the JSON, the report and
    the daemons' configs agree on it."""
    out, work = tmp_path / "o", tmp_path / "w"
    r = _claims(["--quick", "--rows", "loss", "--stacks", "braid", "--rate", "auto",
                 "--out", str(out), "--work", str(work)], unique_name, timeout=480)
    data = json.loads((out / "claims.json").read_text())
    ra = data["rate_auto"]
    rates = [p["rate_mbit"] for p in ra["probes"]]
    assert ra["ladder"] == [100, 50, 25, 12] and rates == ra["ladder"][:len(rates)], ra
    # it stops at the first faithful probe, else takes the lowest rung
    assert all(p["faithful"] is False for p in ra["probes"][:-1]), ra
    assert data["rate_mbit"] == ra["rate_mbit"] == rates[-1], ra
    assert ra["faithful"] == ra["probes"][-1]["faithful"], ra
    assert all(f"rate auto: {x} Mbit/s per plane: fidelity: " in r.stderr for x in rates)
    assert f"**--rate auto** chose {rates[-1]} Mbit/s" in (out / "claims.md").read_text()
    import tomllib

    conn = tomllib.loads((work / "h0.toml").read_text())["connection"]
    assert conn["plane_rate"] == rates[-1] * 1e6 / 8, conn  # bytes/s of the chosen rate
    assert all(t["ok"] for t in data["transfers"]), data["transfers"]
