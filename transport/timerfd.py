"""The I/O layer's one deadline as a Linux timerfd, waited on in the loop's epoll.

Why not ``loop.call_later``: uvloop (libuv) keeps timers in whole
milliseconds. A delay under 0.5 ms becomes ``call_soon`` and a longer one is
rounded to the millisecond against a clock cached per loop iteration, so a
timer fires up to a millisecond early. The connection finds nothing due, the
I/O layer re-arms for the remaining few hundred microseconds, that is
``call_soon`` again, and the daemon spins without sleeping until the deadline
passes. Pacing gaps, the ACK delay and the loss timers are all that short:
measured on the claims fabric, a daemon sending 50 Mbit/s slept 2,700 times
a second and still used 0.57 of a core, and at 178 Mbit/s it never slept
(docs/daemon.md, "Timers").

A timerfd on ``CLOCK_MONOTONIC`` (the clock of ``time.monotonic``, the core's
clock) with an absolute expiry wakes the loop's epoll at the deadline to the
microsecond, and never before it. ``TimerFd.open`` raises ``OSError`` where
there is none (not Linux, another monotonic clock); the caller
falls back to ``call_later``.

Re-arming is a system call per service pass; ``wire._fastwire.timerfd_settime``
makes it where the extension is built (a ctypes call is several times
dearer: 9% of a paced sender's CPU), ctypes is the fallback.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TimerFd"]

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL:
    """The process's own C library (as testbed/nsutil.py loads it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "timerfd_create"):
        raise OSError("the C library has no timerfd_create")
    libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.timerfd_create.restype = ctypes.c_int
    libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int,
                                     ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    libc.timerfd_settime.restype = ctypes.c_int
    return libc


def _fast_settime() -> Callable[[int, int, int], None] | None:
    """The compiled ``timerfd_settime`` where the wire extension is in use."""
    from wire.codec import IMPLEMENTATION

    if IMPLEMENTATION != "c":
        return None
    from wire import _fastwire

    fn: Callable[[int, int, int], None] | None = getattr(_fastwire, "timerfd_settime", None)
    return fn


class TimerFd:
    """One absolute deadline on the monotonic clock; readable once it passed."""

    __slots__ = ("_fast", "_fd", "_settime", "_spec", "_spec_ref", "armed_at")

    def __init__(self, fd: int, settime: Callable[..., Any]) -> None:
        self._fd = fd
        self._settime = settime
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        #: ``wire._fastwire.timerfd_settime`` (None: the ctypes call).
        self._fast: Callable[[int, int, int], None] | None = None
        #: The deadline it is armed for (None: disarmed).
        self.armed_at: float | None = None

    @classmethod
    def open(cls) -> TimerFd:
        """A non-blocking, close-on-exec timerfd (OSError where there is none)."""
        tfd = cls._open_ctypes()
        fast = _fast_settime()
        if fast is not None:
            tfd._fast = fast
        return tfd

    @classmethod
    def _open_ctypes(cls) -> TimerFd:
        """The timerfd itself, with the ctypes ``timerfd_settime``."""
        info = time.get_clock_info("monotonic")
        if "CLOCK_MONOTONIC" not in info.implementation or "RAW" in info.implementation:
            raise OSError(f"time.monotonic is {info.implementation}, not CLOCK_MONOTONIC")
        libc = _libc()
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        return cls(fd, libc.timerfd_settime)

    def fileno(self) -> int:
        return self._fd

    def set(self, deadline: float | None, every: float | None = None) -> None:
        """Expire at ``deadline`` (``time.monotonic`` seconds; in the past:
        at once), then every ``every`` seconds if given, or never (None).
        Replaces the previous deadline and forgets an expiry not yet read."""
        fast = self._fast
        every_ns = 0 if every is None else max(int(every * 1e9), 1)
        if fast is not None:
            # Raises OSError itself; zero disarms, so a deadline is >= 1 ns.
            fast(self._fd, 0 if deadline is None else max(int(deadline * 1e9), 1), every_ns)
            self.armed_at = deadline
            return
        value = self._spec.it_value
        interval = self._spec.it_interval
        interval.tv_sec = interval.tv_nsec = 0
        if deadline is None:
            value.tv_sec = value.tv_nsec = 0  # an all-zero value disarms
        else:
            ns = max(int(deadline * 1e9), 1)  # zero would disarm
            value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
            interval.tv_sec, interval.tv_nsec = divmod(every_ns, 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None):
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.armed_at = deadline

    def expired(self) -> bool:
        """Read the expiry: True once per expiry, False when the wakeup is
        stale (re-armed after it fired, before the loop got to it)."""
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return False
        self.armed_at = None
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
