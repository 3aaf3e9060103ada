"""What the connection measures about its paths, one owner per fact.

``RttEstimator`` is the connection-wide round-trip estimate (RFC 6298).
"""

from __future__ import annotations


class RttEstimator:
    """RFC 6298 smoothing plus a windowless minimum (the base RTT)."""

    __slots__ = ("min_rtt", "rttvar", "srtt")

    def __init__(self, initial: float) -> None:
        self.srtt = initial
        self.rttvar = initial / 2
        self.min_rtt = float("inf")

    def update(self, sample: float) -> None:
        if self.min_rtt == float("inf"):
            self.srtt, self.rttvar = sample, sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        self.min_rtt = min(self.min_rtt, sample)
