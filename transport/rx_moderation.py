"""Receive moderation's policy (a NIC's ``rx-usecs``, Linux NAPI's poll mode).

With ``rx_holdoff`` > 0, after a wakeup that moved datagrams the plane
sockets are not watched; a timerfd ticking every poll interval polls them
(reads every plane first), and a poll that moves nothing watches them again
(idle: each arrival wakes at once). ``rx_holdoff`` bounds the interval, so it
bounds what moderation adds to a packet's host delay. Off (0) for a bare
``EndpointIO``; the daemon and the in-process endpoint take
``RX_HOLDOFF_HOST`` (docs/decisions/0026-adaptive-receive-moderation.md).
The I/O half lives in ``transport/aio.py`` (``EndpointIO._moderate``); this
module holds the numbers and the interval rule, free of clocks and sockets.
"""

from __future__ import annotations

import math

#: A bare ``EndpointIO``: every arrival wakes the loop.
RX_HOLDOFF = 0.0
#: The host default: at most 1 ms. At 2 x 100 Mbit/s a poll every 1 ms
#: carries ~16 datagrams and took the daemons' CPU per byte to 0.59x of
#: polling on every arrival (``braid bench paced``, idle machine).
RX_HOLDOFF_HOST = 1e-3
#: What ``rx_holdoff_us`` was first tried at: a packet time or two at 100 Mbit/s.
RX_HOLDOFF_TYPICAL = 200e-6
#: Adaptive interval: each poll moves the interval toward the one that would
#: have moved ``RX_POLL_TARGET`` datagrams (in and out), within
#: [``RX_POLL_MIN``, ``rx_holdoff``]. 16 is two spray runs, a GSO batch's
#: worth: a faster stream is polled more often (its polls stay short and its
#: packets wait less), a slower one every ``rx_holdoff``. 0: a fixed interval.
RX_POLL_TARGET = 16
RX_POLL_MIN = 50e-6


def next_poll_interval(every: float, moved: int, target: int, holdoff: float) -> float:
    """The poll interval after a poll that moved ``moved`` datagrams.

    It moves toward the interval that would have moved ``target`` datagrams
    by the square root of the ratio, one step per poll (a ratio taken whole
    chases every burst), clamped to [``RX_POLL_MIN``, ``holdoff``]; a change
    under 10% keeps ``every`` (re-arming a timerfd costs a system call).
    """
    if moved <= 0 or target <= 0:
        return every
    nxt = every * math.sqrt(target / moved)
    nxt = min(holdoff, max(min(RX_POLL_MIN, holdoff), nxt))
    return nxt if abs(nxt - every) > 0.1 * every else every
