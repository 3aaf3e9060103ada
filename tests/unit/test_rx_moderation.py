"""Receive moderation (``transport.rx_moderation``, Linux NAPI's poll mode):
while datagrams flow the plane sockets are unwatched and a ticking timer
polls them; an idle poll watches them again, so the next arrival after a
quiet spell wakes the endpoint at once. Real UDP sockets on loopback."""

from __future__ import annotations

import asyncio
import os

from test_aio import make_pair

from transport.connection import Connection
from transport.endpoint import PeerKey
from transport.eventloop import new_event_loop
from transport.events import Event, MessageDelivered
from transport.rx_moderation import RX_HOLDOFF_TYPICAL


def test_a_busy_endpoint_polls_and_an_idle_one_watches_its_sockets_again() -> None:
    got: list[bytes] = []
    arrived = asyncio.Event()

    def on_b(conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, MessageDelivered):
            got.append(ev.data)
            arrived.set()

    async def main() -> None:
        ia, ib = make_pair("127.0.0.2", "127.0.0.3", on_b=on_b)
        assert ia.rx_holdoff == 0 and ib.rx_holdoff == 0  # off by default
        ia.rx_holdoff = ib.rx_holdoff = RX_HOLDOFF_TYPICAL
        ia.open()
        ib.open()
        try:
            conn = ia.connect("b")
            big = os.urandom(8 << 20)
            conn.send_message(big)
            ia.kick()
            await asyncio.wait_for(arrived.wait(), 30)
            assert got == [big]
            # A stream this long was read by polls, both ways (DATA, SACKs).
            assert ib.wakeups["poll"] > 0 and ia.wakeups["poll"] > 0, (ia.wakeups,
                                                                      ib.wakeups)
            # Quiet: the next poll finds nothing and the sockets are watched.
            for _ in range(200):
                if ia._poll_at is None and ib._poll_at is None:
                    break
                await asyncio.sleep(0.005)
            assert ia._poll_at is None and ib._poll_at is None
            polls = ib.wakeups["poll"]
            await asyncio.sleep(0.05)
            # No polling while idle: a poll every holdoff would be hundreds
            # in 50 ms; a late datagram (a probe, its answer) may still start
            # a short spell that ends when its poll finds nothing.
            assert ib.wakeups["poll"] - polls <= 4, (polls, ib.wakeups)
            # A message after the quiet spell wakes the receiver by readiness.
            arrived.clear()
            readable = ib.wakeups["readable"]
            conn.send_message(b"after a quiet spell")
            ia.kick()
            await asyncio.wait_for(arrived.wait(), 5)
            assert got[-1] == b"after a quiet spell"
            assert ib.wakeups["readable"] > readable
        finally:
            ia.close()
            ib.close()

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_moderation_off_never_polls() -> None:
    got: list[bytes] = []
    arrived = asyncio.Event()

    def on_b(conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, MessageDelivered):
            got.append(ev.data)
            arrived.set()

    async def main() -> None:
        ia, ib = make_pair("127.0.0.2", "127.0.0.3", on_b=on_b)  # off by default
        ia.open()
        ib.open()
        try:
            conn = ia.connect("b")
            data = os.urandom(2 << 20)
            conn.send_message(data)
            ia.kick()
            await asyncio.wait_for(arrived.wait(), 30)
            assert got == [data]
            assert ia.wakeups["poll"] == 0 and ib.wakeups["poll"] == 0
            assert ib.wakeups["readable"] > 0
        finally:
            ia.close()
            ib.close()

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_poll_interval_moves_toward_the_target_by_square_roots_within_bounds() -> None:
    from transport.rx_moderation import RX_POLL_MIN, next_poll_interval
    # 4x the target: the interval halves (sqrt of 1/4), not quarters
    assert abs(next_poll_interval(1e-3, 64, 16, 1e-3) - 0.5e-3) < 1e-12
    # a slow stream never polls less often than the holdoff
    assert next_poll_interval(1e-3, 1, 16, 1e-3) == 1e-3
    # a flood never polls more often than RX_POLL_MIN
    assert next_poll_interval(RX_POLL_MIN, 10_000, 16, 1e-3) == RX_POLL_MIN
    # within 10%: kept (no timerfd re-arm); target 0: a fixed interval
    assert next_poll_interval(1e-3, 17, 16, 2e-3) == 1e-3
    assert next_poll_interval(1e-3, 64, 0, 1e-3) == 1e-3
