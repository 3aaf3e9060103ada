"""Pacing: when a controller lets the next bytes leave (a token bucket in
the connection's own time; the controllers own one each)."""

from __future__ import annotations

import math


class Pacer:
    """Token bucket in virtual time: rate in bytes/s, burst in bytes.

    A sender that releases a whole window at once builds a queue at its first
    switch even when the window is right; pacing spreads the window over the
    RTT. The bucket allows a bounded burst so a sender that was idle does not
    pay a full spacing delay on its first packet. A packet larger than the
    burst waits for a full bucket and drives the tokens negative, which keeps
    the long-run rate exact for any packet size.
    """

    __slots__ = ("_last", "_tokens", "burst", "rate")

    def __init__(self, *, rate: float, burst: int) -> None:
        if burst <= 0:
            raise ValueError("pacing burst must be positive")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._last = -math.inf

    def _tokens_at(self, now: float) -> float:
        if self._last == -math.inf:
            return float(self.burst)
        if self.rate <= 0 or math.isinf(self.rate):
            return float(self.burst)
        return min(float(self.burst), self._tokens + (now - self._last) * self.rate)

    def next_send_time(self, *, now: float, size: int) -> float:
        if self.rate <= 0 or math.isinf(self.rate):
            return now
        need = min(size, self.burst)
        tokens = self._tokens_at(now)
        if tokens >= need:
            return now
        return now + (need - tokens) / self.rate

    def on_sent(self, *, now: float, size: int) -> None:
        self._tokens = self._tokens_at(now) - size
        self._last = now

    def quota(self, *, now: float, size: int) -> tuple[float, float]:
        """``(tokens, need)``: packets of ``size`` may leave at ``now`` back to
        back while ``tokens >= need`` or ``now + (need - tokens) / rate <=
        now``, each taking its length from ``tokens`` (exactly what
        ``next_send_time`` / ``on_sent`` per packet decide: at one instant no
        tokens accrue between them). Unpaced: infinite tokens."""
        if self.rate <= 0 or math.isinf(self.rate):
            return math.inf, 0.0
        return self._tokens_at(now), float(min(size, self.burst))

    def on_sent_run(self, *, now: float, sizes: list[int]) -> None:
        """``on_sent`` for each of ``sizes`` at ``now``, in order."""
        if not sizes:
            return
        if self.rate <= 0 or math.isinf(self.rate):
            self._tokens = float(self.burst) - sizes[-1]
        else:
            tokens = self._tokens_at(now)
            for size in sizes:  # one subtraction each: the same float result
                tokens -= size
            self._tokens = tokens
        self._last = now

