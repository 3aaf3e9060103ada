"""New-data runs sealed whole (``SealedRun``): the I/O layer's one-GSO-send
form must carry exactly the datagrams the packet-at-a-time form carries,
with the same flags, in the same order, and make the same decisions."""

from __future__ import annotations

import itertools
import random
from collections import deque
from typing import Any

import pytest
from sender_kit import new_sender

from transport.config import profile
from transport.datagram import RxInfo, SealedRun, unrun
from transport.endpoint import Endpoint
from transport.events import ConnectionEstablished, MessageDelivered
from transport.sender import Sender
from wire.codec import _DATA_HEADER, PySealer, peek_untrusted
from wire.constants import PacketType
from wire.keys import DirectionKeys

SECRET = b"sealed-runs-test-secret-32-bytes"
_DATA = int(PacketType.DATA)


def _transfer(sealed: bool, sizes: list[int], rate: float = 12.5e6, *, paced: bool = False,
              sends: list[int] | None = None, **overrides: Any
              ) -> tuple[list[bytes], list[bytes], int]:
    """Messages of ``sizes`` from a to b over 2 planes at ``rate`` bytes/s
    each (in memory, virtual time, a pass every 200 us): the DATA headers a
    sent, in order, the messages b delivered, and how many SealedRuns a
    handed out (each counted with its datagrams). ``paced``: both ends pace
    in runs (``paced_runs``); ``sends`` gets the DATA packets of each of a's
    sends (a SealedRun is one send); ``overrides``: of the host profile."""
    cfg = profile("host", plane_rate=rate, planes=2, **overrides)
    a = Endpoint(config=cfg, secret=SECRET, accept=False, rng=random.Random(1))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(2))
    a.sealed_runs = b.sealed_runs = sealed
    a.paced_runs = b.paced_runs = paced
    links: dict[str, list[deque[tuple[float, bytes]]]] = {
        "a": [deque(), deque()], "b": [deque(), deque()]}  # what reaches a / b, per plane
    free = {"a": [0.0, 0.0], "b": [0.0, 0.0]}
    msgs = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    conn = a.connect("b", 0.0)
    headers: list[bytes] = []
    got: list[bytes] = []
    runs = 0
    now = 0.0
    queued = False
    for _ in range(200_000):
        now += 200e-6
        for name, ep, peer in (("b", b, "a"), ("a", a, "b")):
            for plane, q in enumerate(links[name]):
                arrived = []
                while q and q[0][0] <= now:
                    arrived.append(q.popleft()[1])
                if arrived:
                    ep.receive_datagrams(arrived, RxInfo(plane), now, peer)
            ep.flush_acks(now)
            t = ep.next_timer()
            if t is not None and t <= now:
                ep.handle_timer(now)
            out = ep.runs_to_send(now)
            flat = unrun([(d, p) for _peer, d, p in out])
            runs += sum(1 for _peer, d, _p in out if isinstance(d, SealedRun))
            if sends is not None and ep is a:
                sends += [d.count if isinstance(d, SealedRun) else 1 for _peer, d, _p in out
                          if isinstance(d, SealedRun) or peek_untrusted(d).ptype == _DATA]
            dest = "b" if name == "a" else "a"
            for data, path in flat:
                start = max(now, free[dest][path.plane])
                free[dest][path.plane] = start + (len(data) + 42) / rate
                links[dest][path.plane].append((free[dest][path.plane] + 25e-6, data))
                if ep is a and peek_untrusted(data).ptype == _DATA:
                    headers.append(data[:_DATA_HEADER.size])
            while (ev := ep.next_event()) is not None:
                _c, e = ev
                if isinstance(e, MessageDelivered):
                    got.append(bytes(e.data))
                elif isinstance(e, ConnectionEstablished) and ep is a and not queued:
                    for m in msgs:
                        conn.send_message(m)
                    queued = True
        if len(got) == len(msgs):
            return headers, got, runs
    raise AssertionError(f"{len(got)} of {len(msgs)} messages in {now:.3f} s")


def test_sealed_runs_carry_the_same_datagrams_and_decisions() -> None:
    # Messages that end mid-run, a one-packet message, one of many runs.
    sizes = [300_000, 5_000, 1_000, 64_000, 1, 200_000]
    plain_h, plain_got, plain_runs = _transfer(False, sizes)
    run_h, run_got, run_runs = _transfer(True, sizes)
    assert plain_runs == 0 and run_runs > 50  # the runs were really handed out whole
    # Completion order (a short message overtakes a long one), the same in both.
    assert run_got == plain_got
    assert sorted(plain_got) == sorted(bytes([i % 251]) * n for i, n in enumerate(sizes))
    # Every DATA header (PSN, EV, plane, offsets, flags, counter, timestamp) alike.
    assert run_h == plain_h


def _established(cfg: Any, *, paced: bool = False) -> tuple[Endpoint, Any]:
    """Endpoint a (sealed runs; ``paced``: paced runs too) with a connection
    to b established in memory by 0.002 s: (a, the connection)."""
    a = Endpoint(config=cfg, secret=SECRET, accept=False, rng=random.Random(3))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(4))
    a.sealed_runs = True
    a.paced_runs = paced
    conn = a.connect("b", 0.0)
    init = a.runs_to_send(0.0)
    b.receive_datagrams([d for _p, d, _t in init], RxInfo(0), 0.001, "a")  # type: ignore[misc]
    b.flush_acks(0.001)
    a.receive_datagrams([d for _p, d, _t in b.datagrams_to_send(0.001)], RxInfo(0), 0.002, "b")
    assert conn.is_established
    return a, conn


def test_a_sealed_run_is_gso_shaped() -> None:
    """One path, consecutive PSNs and offsets, equal sizes but the last."""
    a, conn = _established(profile("host", plane_rate=12.5e6, planes=2))
    conn.send_message(b"\x07" * 100_000)
    out = a.runs_to_send(0.003)
    seen = [d for _p, d, _t in out if isinstance(d, SealedRun)]
    assert seen
    for r in seen:
        dgrams = r.datagrams()
        assert len(dgrams) == r.count > 1 and b"".join(dgrams) == r.buf
        assert all(len(d) == r.size for d in dgrams[:-1]) and len(dgrams[-1]) <= r.size
        fields = [_DATA_HEADER.unpack_from(d) for d in dgrams]
        psns = [f[6] for f in fields]
        assert psns == list(range(psns[0], psns[0] + len(psns)))


def test_take_is_next_new_repeated() -> None:
    """``take(n)`` leaves the queue as n ``next_new`` calls do, and its
    segments are theirs (no payload copied: each carries its message)."""
    def fresh() -> Sender:
        s = new_sender()
        for i, n in enumerate((2500, 1000, 10, 3000)):
            s.enqueue(bytes([i]) * n)
        s.credit_edge = 5200  # the credit stops it mid-message
        return s

    one, many = fresh(), fresh()
    want = []
    while (seg := one.next_new()) is not None:
        want.append(seg)
    got, more = many.take(100)
    assert [(p.psn, p.msg_id, p.offset, p.length, p.last) for p, _d, _m in want] == \
        [(p.psn, p.msg_id, p.offset, p.length, p.last) for p in got]
    assert [d for _p, d, _m in want] == [bytes(p.data[p.offset:p.offset + p.length])
                                         for p in got if p.data is not None]
    assert more == want[-1][2] is True
    assert (one.next_psn, one.new_bytes_sent) == (many.next_psn, many.new_bytes_sent)


@pytest.mark.parametrize("plaintext", [False, True])
@pytest.mark.parametrize(("length", "segment"), [(0, 100), (1, 100), (1000, 100), (1001, 100),
                                                 (5000, 1368), (300, 1)])
def test_reference_seal_data_run_is_consecutive_seal_data(plaintext: bool, length: int,
                                                          segment: int) -> None:
    """The reference ``seal_data_run`` (what BRAID_PURE=1 runs) against its
    own ``seal_data`` one slice at a time, from a view of a larger message."""
    keys = None if plaintext else DirectionKeys(bytes(range(32)), bytes(range(32, 64)))
    run, one = PySealer(keys, dcid=9), PySealer(keys, dcid=9)
    run.counter = one.counter = 5
    message = bytes(range(256)) * 40
    view = memoryview(message)[7:7 + length]
    buf, n, size = run.seal_data_run(0xFFFF_FFFE, 4, 1, 3, 7, len(message), 99, view, segment,
                                     2, 1)
    chunks = [view[i:i + segment] for i in range(0, length, segment)] or [view]
    want = [one.seal_data((0xFFFF_FFFE + i) & 0xFFFF_FFFF, 4, 1, 3, 7 + i * segment,
                          len(message), 99, bytes(c), 2 | (1 if i == len(chunks) - 1 else 0))
            for i, c in enumerate(chunks)]
    assert (buf, n, size) == (b"".join(want), len(want), len(want[0]))
    assert run.counter == one.counter == 5 + len(want)


def test_a_spray_run_is_at_most_a_millisecond_of_its_planes_rate() -> None:
    """``spray_run_time``: a run lands in one plane's queue at once, so it
    is capped in time of the plane's rate: 8 packets at 100 Mbit/s, one at
    12 Mbit/s (8 packets there are 7 ms of one plane's queue), and the I/O
    layer's ``set_spray_run`` keeps the cap."""
    slow = profile("host", plane_rate=1.5e6, planes=2)
    assert slow.run_packets() == 1 and slow.run_packets(64) == 1
    assert profile("host", plane_rate=12.5e6, planes=2).run_packets() == 8
    assert profile("host", plane_rate=3.125e6, planes=2).run_packets() == 2
    assert profile("host", plane_rate=1.5e6, planes=2, spray_run_time=0).run_packets() == 8

    def same_ev_share(rate: float) -> float:
        headers, _got, _runs = _transfer(True, [400_000], rate=rate)
        evs = [_DATA_HEADER.unpack_from(h)[7:9] for h in headers]
        return sum(x == y for x, y in itertools.pairwise(evs)) / (len(evs) - 1)

    # Consecutive DATA packets on one EV: most of them in runs of 8, none
    # (beyond resends) in runs of one.
    assert same_ev_share(12.5e6) > 0.5
    assert same_ev_share(1.5e6) < 0.05
    a = Endpoint(config=slow, secret=SECRET, accept=False)
    conn = a.connect("b", 0.0)
    assert conn.paths.spray_run == 1
    a.set_spray_run(8)
    assert conn.paths.spray_run == 1


def test_paced_new_data_leaves_a_whole_run_at_a_time() -> None:
    """``paced_runs``: a pacer-bound sender waits for the tokens of a whole
    run per plane and sends each as one SealedRun (one GSO send), where the
    packet-at-a-time pacer sent whatever one or two packets its tokens held
    at each pass. Both deliver everything."""
    # Paced at half the line rate: the pacer, not the window, binds.
    slow = {"pace_headroom": 0.5}
    size = 3_000_000
    exact: list[int] = []
    whole: list[int] = []
    _h, got, _r = _transfer(True, [size], sends=exact, **slow)
    _h2, got2, _r2 = _transfer(True, [size], paced=True, sends=whole, **slow)
    assert got == got2 == [bytes([0]) * size]
    k = profile("host", plane_rate=12.5e6, planes=2).run_packets()
    assert k == 8
    # Runs cut short only by the message's end, a resend or the window.
    assert sum(n for n in whole if n == k) >= 0.9 * sum(whole)
    assert len(whole) < 0.5 * len(exact)
    assert sum(n for n in exact if n == k) < 0.5 * sum(exact)


def test_a_paced_run_is_due_when_its_tokens_are() -> None:
    """``next_timer`` of a connection waiting for its runs' tokens is the
    instant ``runs_to_send`` releases them: earlier nothing leaves, then a
    whole run on each plane does (a timer that fired without effect would
    spin)."""
    # A fixed window far above what the pacer lets out: the pacer alone binds.
    cfg = profile("host", plane_rate=12.5e6, planes=2, congestion="fixed",
                  congestion_params={"window": 4 << 20, "pacing_rate": 100e6,
                                     "burst_packets": 64})
    a, conn = _established(cfg, paced=True)
    conn.send_message(b"\x05" * 400_000)
    now = 0.003
    first = a.runs_to_send(now)  # the pacer's burst
    assert first
    k = cfg.run_packets()
    release_at: list[float] = []
    for _ in range(5):  # before any probe or loss timer of the silent peer
        t = a.next_timer()
        assert t is not None and t > now
        before = t - 20e-6
        if before > now:
            a.handle_timer(before)
            assert not a.runs_to_send(before)
        out: list[Any] = []
        for _tries in range(2):  # a token count a rounding short re-arms one ulp later
            now = t
            a.handle_timer(now)
            out = a.runs_to_send(now)
            t2 = a.next_timer()
            if out or t2 is None or t2 - now > 1e-12:
                break
            t = t2
        assert [d.count for _p, d, _t in out if isinstance(d, SealedRun)] == [k, k]
        assert {p.plane for _p, _d, p in out} == {0, 1}  # a run per plane
        release_at.append(now)
    # One release per 2 runs' worth of tokens at the pacing rate.
    gaps = [y - x for x, y in itertools.pairwise(release_at)]
    assert all(abs(g - 2 * k * cfg.payload_size / 100e6) < 1e-9 for g in gaps), gaps
    assert now < 0.005
