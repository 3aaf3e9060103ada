"""A plain link's shaper read from rtnetlink (testbed/qdisc_nl.py) and held
against an ideal link (tools/claims/qdiscbins.py): the parser on crafted
messages and on the kernel's own dump, the ideal link's departures, the
lateness lower bound and the bins the emulator lost."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess

import pytest

from testbed import qdisc_nl as nl
from tools.claims import taildrop as td
from tools.claims.linkbins import link_bins
from tools.claims.qdiscbins import FRAME_BYTES, excused, ideal, lateness, resolution

RATE = 12.5e6  # bytes/s: 100 Mbit/s


def _rta(typ: int, payload: bytes) -> bytes:
    ln = 4 + len(payload)
    return struct.pack("=HH", ln, typ) + payload + b"\0" * ((-ln) % 4)


def _newqdisc(ifindex: int, kind: str, nbytes: int, backlog: int, parent: int = nl.TC_H_ROOT
              ) -> bytes:
    stats = (_rta(nl.TCA_STATS_BASIC, struct.pack("=QI", nbytes, 7))
             + _rta(nl.TCA_STATS_QUEUE, struct.pack("=IIIII", 3, backlog, 2, 0, 0)))
    body = (struct.pack("=BxxxiIII", 0, ifindex, 0x10000, parent, 0)
            + _rta(nl.TCA_KIND, kind.encode() + b"\0") + _rta(nl.TCA_STATS2 | 0x8000, stats))
    return struct.pack("=IHHII", 16 + len(body), nl.RTM_NEWQDISC, 2, 1, 0) + body


def _done() -> bytes:
    return struct.pack("=IHHII", 20, nl.NLMSG_DONE, 2, 1, 0) + b"\0" * 4


def test_parse_reads_kind_and_counters_of_each_qdisc_to_the_end() -> None:
    got, done = nl.parse(_newqdisc(3, "tbf", 123456789012, 4500)
                         + _newqdisc(3, "bfifo", 9, 9, parent=0x10001) + _done())
    assert done
    assert [(q.ifindex, q.kind, q.bytes, q.packets, q.backlog, q.qlen, q.drops, q.root)
            for q in got] == [(3, "tbf", 123456789012, 7, 4500, 3, 2, True),
                              (3, "bfifo", 9, 7, 9, 3, 2, False)]
    more, done = nl.parse(_newqdisc(1, "tbf", 1, 1))  # a dump's answer goes on
    assert len(more) == 1 and not done


def test_parse_raises_on_an_error_or_a_broken_frame() -> None:
    err = struct.pack("=IHHII", 36, nl.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1) + b"\0" * 16
    with pytest.raises(nl.QdiscError, match="Operation not permitted"):
        nl.parse(err)
    bad = bytearray(_newqdisc(3, "tbf", 1, 1))
    struct.pack_into("=I", bad, 0, 10_000)  # longer than what came
    with pytest.raises(nl.QdiscError, match="length"):
        nl.parse(bytes(bad))
    bad = bytearray(_newqdisc(3, "tbf", 1, 1))
    struct.pack_into("=H", bad, 16 + 20, 2)  # an attribute shorter than its header
    with pytest.raises(nl.QdiscError, match="rtattr"):
        nl.parse(bytes(bad))


@pytest.mark.skipif(shutil.which("tc") is None, reason="needs iproute2's tc")
def test_the_reader_sees_the_root_qdiscs_tc_sees() -> None:
    tc = json.loads(subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True,
                                   text=True, check=True).stdout or "[]")
    want = {(socket.if_nametoindex(q["dev"]), q["kind"]) for q in tc if q.get("root")}
    with nl.QdiscReader() as r:
        got = {(q.ifindex, q.kind) for q in r.read() if q.root}
        roots = r.roots(["lo", "no-such-if0"])
    assert got == want
    assert roots[1] is None
    assert roots[0] is None or roots[0].ifindex == socket.if_nametoindex("lo")


def _samples(step: float, n: int, sent: list[float], backlog: list[float]
             ) -> list[list[float]]:
    return [[i * step, sent[i], backlog[i]] for i in range(n)]


def test_a_link_at_its_rate_is_never_late() -> None:
    step, n = 0.002, 200
    per = RATE * step
    s = _samples(step, n, [per * i for i in range(n)], [40_000.0] * n)
    late = lateness(s, [RATE])[0]
    assert late["frames"] == round(per * (n - 1) / FRAME_BYTES)
    assert late["p99"] == 0 and late["max"] == 0
    deps, queues = ideal(s, [RATE])
    assert queues[0][-1] == pytest.approx(40_000.0)
    assert deps[-1][1] == pytest.approx(s[-1][1])  # it sent what the ideal link sent


def _stalled(step: float, n: int, stall: range, backlog: float) -> list[list[float]]:
    """Samples of a link the stack feeds at its rate throughout, which sends
    nothing over the sample intervals in ``stall``, at the rate otherwise."""
    per = RATE * step
    sent, queued, s_, b_ = [], [], 0.0, backlog
    for i in range(n):
        if i and i not in stall:
            s_ += per
        elif i:
            b_ += per
        sent.append(s_)
        queued.append(b_)
    return _samples(step, n, sent, queued)


def test_a_shaper_that_stalls_falls_behind_the_ideal_link() -> None:
    # 10 ms without a departure while the stack keeps sending at the rate:
    # afterwards the real queue is 125 KB above the ideal one (~83 frames).
    step, n = 0.001, 100
    per = RATE * step
    s = _stalled(step, n, range(40, 50), 30_000.0)
    late = lateness(s, [RATE])[0]
    assert late["p99"] == pytest.approx(10 * per / FRAME_BYTES, rel=0.05)
    assert late["p99_us"] == pytest.approx(10_000, rel=0.05)
    # only what was sent in the window counts
    assert lateness(s, [RATE], t1=0.039)[0]["max"] == 0


def test_a_burst_that_came_just_before_a_sample_is_not_lateness() -> None:
    # Everything arrives in one lump per 2 ms interval, just before the
    # sample, and is still queued there: taken as even arrivals it would read
    # as one interval of lateness; taken at the interval's end it reads 0.
    step, n = 0.002, 100
    per = RATE * step
    s = _samples(step, n, [per * max(0, i - 1) for i in range(n)], [per] * n)
    assert lateness(s, [RATE])[0]["max"] == 0
    assert resolution(RATE, s) == pytest.approx(per / FRAME_BYTES, abs=0.1)


def test_short_bins_are_excused_only_where_the_ideal_link_would_have_held() -> None:
    step, n = 0.002, 60  # 120 ms
    per = RATE * step
    # the stack supplies the rate throughout; the tbf stalls 40-60 ms
    s = _stalled(step, n, range(20, 30), 20_000.0)
    want = link_bins(ideal(s, [RATE])[0], 0.0, 12)[0]
    got = link_bins([[r[0], r[1]] for r in s], 0.0, 12)[0]
    target = 0.9 * RATE * 0.01
    lost = excused(got, want, target)
    assert lost == {3, 4, 5}, (lost, got, want)  # 38-60 ms without a departure
    # a stack that stopped sending: the ideal link is short too, nothing excused
    idle = _samples(step, n, [per * min(i, 20) for i in range(n)], [0.0] * n)
    ib = link_bins(ideal(idle, [RATE])[0], 0.0, 12)[0]
    assert excused(link_bins([[r[0], r[1]] for r in idle], 0.0, 12)[0], ib, target) == set()


def test_excused_bins_leave_the_figures_and_the_hold() -> None:
    target = 100
    bins = [200] * 5 + [200, 50, 200, 200, 40, 200, 200]
    f = td.bin_figures(bins, target, len(bins))
    assert f["bins_at_rate_share"] == pytest.approx(5 / 7) and f["emulator_short_bins"] == 0
    f = td.bin_figures(bins, target, len(bins), excused={6, 9})
    assert f["bins_at_rate_share"] == 1.0 and f["emulator_short_bins"] == 2
    assert f["worst_bin_mbps"] == 40 * 8 / 0.01 / 1e6  # every bin, as measured
    assert td.short_at_ms(bins, target, len(bins), {9}) == [60.0]
    # the fault at 25 ms: the short bin at 90 ms set the hold unless excused
    assert td.hold_ms(bins, 0.025, len(bins), target) == pytest.approx(75.0)
    assert td.hold_ms(bins, 0.025, len(bins), target, {9}) == pytest.approx(45.0)
    assert td.hold_ms(bins, 0.025, len(bins), target, {6, 9}) == pytest.approx(5.0)
    assert td.short_bins(bins, 0.025, len(bins), target, {9}) == 1
