"""Loss inference once a read is over (``Endpoint.read_batches``).

The I/O layer drains one plane's socket after another. A SACK read from
the first acknowledges newer packets than a SACK still queued in another
plane's socket; judged per SACK, at the time of a read that came late (a
host stall), the older packets looked lost and their plane silent. With
``read_batches`` the sender infers losses once the whole read is in
(``end_read``, which the output and timer passes run first).
"""

from __future__ import annotations

import random
from typing import Any

from transport.config import profile
from transport.datagram import RxInfo, TxPath, unrun
from transport.endpoint import Endpoint

SECRET = b"read-batches-test-secret-32-byte"
T = 0.03  # after the warm-up


def _pair(read_batches: bool) -> tuple[Endpoint, Endpoint, Any]:
    """Sender a (``read_batches`` as given) and receiver b, connected in
    memory over two planes by 0.002 s: (a, b, a's connection)."""
    cfg = profile("host", plane_rate=12.5e6, planes=2)
    a = Endpoint(config=cfg, secret=SECRET, accept=False, rng=random.Random(5))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(6))
    a.sealed_runs = b.sealed_runs = True
    a.read_batches = read_batches
    conn = a.connect("b", 0.0)
    b.receive_datagrams([d for _p, d, _t in a.runs_to_send(0.0)], RxInfo(0), 0.001, "a")  # type: ignore[misc]
    b.flush_acks(0.001)
    a.receive_datagrams([d for _p, d, _t in b.datagrams_to_send(0.001)], RxInfo(0), 0.002, "b")
    a.flush_acks(0.002)
    assert conn.is_established
    # Warm up: round trips of 1 ms, so the time rule's threshold is ~2 ms.
    now = 0.002
    for _ in range(20):
        conn.send_message(b"\x01" * 4000)
        sacks = _sacks(b, _sent(a, now), now + 0.0005)
        now += 0.001
        _read(a, sacks, now)
    assert conn.sender.bytes_in_flight == 0 and conn.sender.rtt.srtt < 0.0015
    return a, b, conn


def _sent(a: Endpoint, now: float) -> list[tuple[bytes, TxPath]]:
    return unrun([(d, p) for _peer, d, p in a.runs_to_send(now)])


def _sacks(b: Endpoint, data: list[tuple[bytes, TxPath]], now: float) -> list[tuple[bytes, int]]:
    """b reads ``data`` (each on its plane) and answers: (SACK, plane) pairs."""
    for d, path in data:
        b.receive_datagrams([d], RxInfo(path.plane), now, "a")
    b.flush_acks(now)
    out = b.datagrams_to_send(now)
    b.handle_timer(now + 0.0005)  # a SACK held back at most 0.5 ms
    out += b.datagrams_to_send(now + 0.0005)
    return [(d, p.plane) for _peer, d, p in out]


def _read(a: Endpoint, sacks: list[tuple[bytes, int]], now: float) -> None:
    """a reads ``sacks`` at ``now`` (no receive stamps, the daemon's default:
    the read's lag unknown), then runs a pass as EndpointIO's timer does:
    the read is over, due timers, output."""
    for d, plane in sacks:
        a.receive_datagrams([d], RxInfo(plane), now, "b")
    a.flush_acks(now)
    a.handle_timer(now)
    a.runs_to_send(now)


def _late_read(read_batches: bool, *, drop_first: bool) -> Any:
    """a sends a window over both planes at T; b reads the later half of it
    first and answers, then (unless ``drop_first``) the earlier half and
    answers again. a reads both answers in one read at T + 6 ms (a host
    stall of 4 ms: past the time rule's threshold of ~2 ms), the newer
    first, as a drain of the newer answer's plane socket would."""
    a, b, conn = _pair(read_batches)
    t = T
    conn.send_message(b"\x05" * 40_000)
    out = _sent(a, t)
    planes = {p.plane for _d, p in out}
    assert planes == {0, 1} and len(out) >= 8
    half = len(out) // 2
    newer = _sacks(b, out[half:], t + 0.001)
    older = [] if drop_first else _sacks(b, out[:half], t + 0.0015)
    _read(a, newer + older, t + 0.006)
    return conn


def test_a_late_read_per_sack_declares_what_the_next_sack_acknowledges() -> None:
    """Without read batches: the problem this solves, shown."""
    conn = _late_read(False, drop_first=False)
    s = conn.sender
    assert s.lost_by_time + s.lost_by_ev_order > 0
    assert s.spurious_losses > 0


def test_a_late_read_infers_losses_once_it_is_over() -> None:
    conn = _late_read(True, drop_first=False)
    s = conn.sender
    assert s.lost_by_time + s.lost_by_ev_order == 0
    assert s.spurious_losses == 0 and not conn.paths.parked_planes()
    assert s.retransmissions == 0


def test_what_a_read_shows_lost_is_still_lost_and_resent() -> None:
    conn = _late_read(True, drop_first=True)
    s = conn.sender
    assert s.lost_by_time + s.lost_by_ev_order > 0  # inferred once the read was over
    assert s.retransmissions > 0  # and resent by it
    assert not conn.loss_check_pending


def test_a_timer_pass_infers_the_losses_of_a_read_first() -> None:
    """An I/O layer that runs timers after a read without ending it: the
    timer pass ends it first."""
    a, b, conn = _pair(True)
    conn.send_message(b"\x05" * 40_000)
    out = _sent(a, T)
    half = len(out) // 2
    for d, plane in _sacks(b, out[half:], T + 0.001):
        a.receive_datagrams([d], RxInfo(plane), T + 0.006, "b")
    assert conn.loss_check_pending
    a.handle_timer(T + 0.006)
    assert not conn.loss_check_pending
    assert conn.sender.lost_by_time + conn.sender.lost_by_ev_order > 0
