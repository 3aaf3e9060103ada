"""The I/O layer's timer (transport/timerfd.py): a timerfd on the monotonic
clock wakes an epoll at its deadline, never before it, and a re-arm makes an
expiry not yet read stale. On a loaded machine it may wake late, never early."""

from __future__ import annotations

import asyncio
import select
import time

import pytest
from test_daemon import free_port

from transport.aio import EndpointIO
from transport.config import ConnectionConfig
from transport.endpoint import Endpoint
from transport.timerfd import TimerFd
from transport.udp import PeerTable, PlaneAddr


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


@pytest.mark.parametrize("settime", ["compiled", "ctypes"])
def test_a_periodic_timer_ticks_until_rearmed(settime: str) -> None:
    """Receive moderation polls on a ticking timerfd (no re-arm per pass);
    the compiled and the ctypes ``timerfd_settime`` do the same."""
    t = TimerFd.open()
    if settime == "ctypes":
        t._fast = None
    elif t._fast is None:
        t.close()
        pytest.skip("the wire extension is not built here (or BRAID_PURE is set)")
    ep = select.epoll()
    try:
        ep.register(t.fileno(), select.EPOLLIN)
        start = time.monotonic()
        t.set(start + 1e-3, every=1e-3)
        for _ in range(3):  # one arming, several expiries
            assert ep.poll(1.0), "never expired"
            assert t.expired()
        assert time.monotonic() >= start + 3e-3  # never early
        t.set(time.monotonic() + 60.0)  # a plain deadline: the ticking stops
        time.sleep(0.003)
        assert not ep.poll(0)
        t.set(None)
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


class _OneDeadline(Endpoint):
    """A real endpoint whose only timer is one fixed deadline; counts wakeups."""

    def __init__(self, deadline: float | None = None) -> None:
        super().__init__(config=ConnectionConfig(planes=1), secret=b"k" * 32)
        self.deadline: float | None = deadline
        self.wakeups = 0

    def next_timer(self) -> float | None:
        return self.deadline

    def handle_timer(self, now: float) -> None:
        self.wakeups += 1
        if self.deadline is not None and now >= self.deadline:
            self.deadline = None


def _wakeups(delay: float) -> tuple[int, bool]:
    """Wakeups of the I/O layer's timer for one deadline ``delay`` ahead, set
    from inside the running loop (uvloop, as the daemon runs), and whether the
    deadline went on the timerfd."""
    import uvloop

    port = free_port()
    loop = uvloop.new_event_loop()
    ep = _OneDeadline()
    io = EndpointIO(ep, [PlaneAddr("127.0.0.1", port)], PeerTable(1, [port]))
    on_tfd: list[bool] = []

    def arm() -> None:
        ep.deadline = time.monotonic() + delay
        io._arm()
        assert io._tfd is not None
        on_tfd.append(io._tfd.armed_at is not None)

    try:
        io.open(loop)

        async def main() -> None:
            await asyncio.sleep(0.01)  # the loop is warm
            loop.call_soon(arm)
            await asyncio.sleep(delay + 0.01)
            for _ in range(100):  # a loaded machine may run it late, never early
                if ep.deadline is None:
                    break
                await asyncio.sleep(0.01)

        loop.run_until_complete(main())
        # _OneDeadline clears the deadline only once a wakeup is at or past it.
        assert ep.deadline is None, "the deadline never fired"
        return ep.wakeups, on_tfd[0]
    finally:
        io.close()
        loop.close()


def test_a_sub_millisecond_deadline_costs_one_wakeup() -> None:
    # uvloop's call_later turns 400 us into call_soon: the old timer spun,
    # waking again and again until the deadline passed (85-91 wakeups here).
    # The timerfd wakes once, at or after the deadline, however loaded.
    assert _wakeups(400e-6) == (1, True)


def test_a_far_deadline_stays_on_the_loops_timer() -> None:
    # 5 ms ahead: the loop's own timer (cheaper to move); if it fires early,
    # the rest goes on the timerfd, and the deadline is still met, not missed.
    wakeups, on_tfd = _wakeups(5e-3)
    assert not on_tfd
    assert wakeups >= 1
