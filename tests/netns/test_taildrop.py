"""``taildrop = true`` links (examples/two-hosts-taildrop.toml): a plain tbf
tail-drops a burst, trims nothing and marks nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_helpers import ns_list
from test_fabric import HEADER_LEN, transfer

from testbed.fabric import Testbed
from wire.constants import Dscp

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-hosts-taildrop.toml"


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    bed = Testbed.up(EXAMPLE, name=f"td{os.getpid() % 100000}",
                     run_root=tmp_path_factory.mktemp("run"))
    try:
        yield bed
    finally:
        bed.down()
    assert not any(n.startswith(bed.prefix) for n in ns_list())


def test_built_without_elements(tb: Testbed) -> None:
    assert not any(n.startswith(tb.prefix) and n.endswith("-w") for n in ns_list())
    assert tb.port_stats() == {}  # no link element anywhere
    q = tb.qdisc_stats()
    assert set(q) == {f"h{i}:p{p}/{d}" for i in (0, 1) for p in (0, 1) for d in ("up", "down")}


def test_burst_is_tail_dropped_not_trimmed(tb: Testbed) -> None:
    before = tb.qdisc_stats()
    # 2,000 x 1,200 B at once (2.4 MB) into a 128 KB queue draining at 100 Mbit/s
    out = transfer(tb, "h0", "h1", 0, 2000, "--braid", "--size", "1200",
                   "--sports", "42000-42015", "--tos", hex(Dscp.DATA << 2 | 2))
    after = tb.qdisc_stats()
    drops = after["h0:p0/up"]["drops"] - before["h0:p0/up"]["drops"]
    sent = after["h0:p0/up"]["sent_packets"] - before["h0:p0/up"]["sent_packets"]
    assert drops > 0, after
    assert 0 < out["packets"] < 2000
    # what the tbf did not drop arrived whole: no trimmed header, no CE mark
    assert out["packets"] + drops >= 2000 * 0.99, (out["packets"], drops)
    assert sent >= out["packets"]
    assert str(HEADER_LEN) not in out["sizes"], out
    assert set(out["sizes"]) == {"1200"}, out
    assert set(out["tos"]) == {str(Dscp.DATA << 2 | 2)}, out
    # the plane's other links saw none of it
    assert after["h0:p1/up"]["drops"] == before["h0:p1/up"]["drops"]


def test_the_fidelity_monitor_samples_the_tbfs(tb: Testbed) -> None:
    # The monitor that `braid perf` and the demo use: with no link element
    # it samples every plain tbf (a sampler per node that has one) and
    # judges their lateness like an eBPF port's.
    from tools.claims.fidelity import Monitor

    ports = tb.shaped_ports()
    assert {name for ps in ports.values() for name, _i, _r in ps} == set(tb.qdisc_stats())
    assert all(r == 100_000_000 for ps in ports.values() for _n, _i, r in ps)
    mon = Monitor(tb).start()
    procs = [s.proc for s in mon._shapers.procs.values()]
    assert len(procs) == len(ports)
    transfer(tb, "h0", "h1", 0, 600, "--braid", "--size", "1200",
             "--sports", "42000-42015", "--tos", hex(Dscp.DATA << 2 | 2))
    fid = mon.stop()
    assert all(p.poll() is not None for p in procs)  # the samplers are gone
    late = fid["gaps"]["h0:p0/up"]["late"]
    assert late["frames"] > 100 and late["p99"] is not None and late["p99"] >= 0, fid
    assert fid["gaps"]["h0:p0/up"]["resolution_frames"] > 0
    assert "h0:p1/up" not in fid["gaps"]  # it sent nothing
    assert fid["faithful"] in (True, False)
