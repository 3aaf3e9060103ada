"""The I/O layer's timer (transport/timerfd.py): a timerfd on the monotonic
clock wakes an epoll at its deadline, never before it, and a re-arm makes an
expiry not yet read stale. On a loaded machine it may wake late, never early."""

from __future__ import annotations

import asyncio
import select
import time

from transport.aio import EndpointIO
from transport.timerfd import TimerFd


def test_timerfd_expires_at_its_deadline_not_before() -> None:
    t = TimerFd.open()
    ep = select.epoll()
    try:
        ep.register(t.fileno(), select.EPOLLIN)
        for delay in (20e-6, 300e-6, 2e-3):  # below, around and above uvloop's 1 ms
            deadline = time.monotonic() + delay
            t.set(deadline)
            assert ep.poll(1.0), "never expired"
            assert time.monotonic() >= deadline
            assert t.expired() and t.armed_at is None
            assert not ep.poll(0)  # read: no longer readable
        t.set(time.monotonic() - 1.0)  # in the past: at once
        assert ep.poll(1.0) and t.expired()
        t.set(time.monotonic() + 60.0)
        t.set(None)  # disarmed
        assert not ep.poll(0.01)
        assert not t.expired()  # a stale wakeup reads nothing
    finally:
        ep.close()
        t.close()


def test_a_rearm_makes_an_unread_expiry_stale() -> None:
    t = TimerFd.open()
    try:
        t.set(time.monotonic())
        time.sleep(0.002)  # expired, not read
        t.set(time.monotonic() + 60.0)  # re-armed before the loop got to it
        assert not t.expired()
    finally:
        t.close()


def test_endpoint_io_sleeps_on_a_timerfd() -> None:
    # The daemon's I/O layer uses the timerfd, and closing it closes it.
    from test_daemon import free_port

    from transport.config import ConnectionConfig
    from transport.endpoint import Endpoint
    from transport.udp import PeerTable, PlaneAddr

    port = free_port()
    ep = Endpoint(config=ConnectionConfig(planes=1), secret=b"k" * 32)
    io = EndpointIO(ep, [PlaneAddr("127.0.0.1", port)], PeerTable(1, [port]))
    loop = asyncio.new_event_loop()
    try:
        io.open(loop)
        assert io._tfd is not None and io._tfd.fileno() >= 0
    finally:
        io.close()
        loop.close()
    assert io._tfd is not None and io._tfd.fileno() == -1
