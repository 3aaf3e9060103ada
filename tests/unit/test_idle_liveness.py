"""A connection that was idle for longer than ``idle_fail_timeout`` must carry
the next message, not fail on it (`braid bench claims` warms up every
connection and counts the sends that hit this: docs/claims.md).

The liveness clock (``Sender.last_progress``) only advances on acknowledgements,
so after idleness the first queued message finds it ``idle_fail_timeout``
old and the connection fails with "no acknowledgement for N s" at its next
timer, although the peer is alive, unless "no progress" counts only time
with something outstanding and new data into an empty pipeline restarts the
clock, as it does.
"""

from __future__ import annotations

import random

from transport.config import ConnectionConfig
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.events import ConnectionFailed, Event, MessageAcked

SECRET = bytes(range(32))
CFG = ConnectionConfig(planes=2, evs_per_plane=4, plane_rate=1.25e9, initial_rtt=100e-6,
                       min_rto=1e-3, handshake_timeout=0.05, idle_fail_timeout=0.5)


def _step(a: Endpoint, b: Endpoint, now: float, events: list[Event]) -> None:
    for src, dst, name in ((a, b, "a"), (b, a, "b")):
        for _peer, data, path in src.datagrams_to_send(now):
            dst.receive_datagram(data, RxInfo(path.plane), now, name)
        t = src.next_timer()
        if t is not None and t <= now:
            src.handle_timer(now)
    while (item := a.next_event()) is not None:
        events.append(item[1])
    while b.next_event() is not None:
        pass


def _run_until(a: Endpoint, b: Endpoint, now: float, events: list[Event], want: int) -> float:
    for _ in range(100_000):  # bounded: 1 s of virtual time in 10 us steps
        now += 10e-6
        _step(a, b, now, events)
        if sum(isinstance(e, MessageAcked) for e in events) >= want or any(
                isinstance(e, ConnectionFailed) for e in events):
            return now
    raise AssertionError("neither acknowledged nor failed")


def test_first_message_after_idleness_is_delivered() -> None:
    a = Endpoint(config=CFG, secret=SECRET, rng=random.Random(1))
    b = Endpoint(config=CFG, secret=SECRET, rng=random.Random(2))
    events: list[Event] = []
    conn = a.connect("b", 0.0)
    conn.send_message(b"before")
    now = _run_until(a, b, 0.0, events, 1)
    now += 5 * CFG.idle_fail_timeout  # idle: nothing queued, nothing in flight
    conn.send_message(b"after")
    _run_until(a, b, now, events, 2)
    assert not [e for e in events if isinstance(e, ConnectionFailed)]
    assert sum(isinstance(e, MessageAcked) for e in events) == 2
