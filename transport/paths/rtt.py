"""What the connection measures about its paths, one owner per fact.

- ``RttEstimator``: the connection-wide round trip (RFC 6298 smoothing plus
  a windowless minimum).
- ``PathModel``: per plane, the smoothed RTT and the minimum (base) RTT of
  its SACK echoes, the smoothed time it takes to answer anything (SACK
  echoes and probe answers), and when anything was last heard from it; per
  EV, the smoothed RTT of the samples it triggered.

One smoothing rule for all of them (``smooth``, gains below), in this one
place. The sender feeds the samples at the moment it takes them (its loss
thresholds read them in the same SACK), the EV set's liveness rule reads
the per-plane RTT and the last-heard times, path health reads the
last-heard times, and the congestion controller reads the per-plane base
RTTs (``congestion.base.PlaneRtt``: ``base_rtt``/``bases`` and
``delay_base``; it is handed the model by ``congestion.registry.for_connection``).

Two per-plane minima, because they are two facts. ``plane_min`` is the
smallest SACK echo of the plane (including echoes of packets a faster
plane's SACK acknowledged first): its propagation, which sizes the pipe.
``delay_min`` is the smallest round trip of the samples the controller is
handed (each ACK's RTT sample, and, with NSCC's ``trim_base``, a trimmed
header's round trip): the zero of its per-packet queueing delay. The
controller feeds ``delay_min`` (``delay_sample``), since only it sees those
samples and decides which count.

Two per-plane round trips, because two questions are asked of a plane.
The loss thresholds ask how long *data* takes (``plane_srtt``: SACK echoes
only; a probe rides the control queue past the data queue, so its round
trip would call queued data lost). The liveness timers ask how long an
*answer* takes (``answer_srtt``: SACK echoes and probe answers alike, since
a liveness probe's answer is one of the answers they wait for). Both are
fed here, by the same samples, with the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: Smoothing gain of the connection's and each plane's RTT (RFC 6298's alpha).
PLANE_GAIN = 0.125
#: Smoothing gain of the RTT variation (RFC 6298's beta).
RTTVAR_GAIN = 0.25
#: Smoothing gain of each EV's RTT: an EV has few samples of its own (one
#: per SACK it triggers), so each counts more.
EV_GAIN = 0.25
#: Planes a peer's SACKs may name before further planes are not tracked
#: (the plane of a SACK echo is the peer's word).
MAX_PLANES = 64


def smooth(old: float, sample: float, gain: float) -> float:
    """The one smoothing rule: an exponentially weighted moving average."""
    return (1 - gain) * old + gain * sample


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
            self.rttvar = smooth(self.rttvar, abs(self.srtt - sample), RTTVAR_GAIN)
            self.srtt = smooth(self.srtt, sample, PLANE_GAIN)
        self.min_rtt = min(self.min_rtt, sample)


def ev_key(plane: int, value: int) -> int:
    """An EV's key in per-EV tables: (plane << 16) | value."""
    return (plane << 16) | value


class PathModel:
    """Per-plane and per-EV RTT, and when each plane was last heard from."""

    __slots__ = ("answer_srtt", "delay_min", "ev_srtt", "heard", "plane_min", "plane_srtt")

    def __init__(self, planes: int = 0) -> None:
        #: Smoothed RTT per plane (SACK echoes through it): the floor of every
        #: EV's loss threshold on it, and its silence timer. Most EVs have no
        #: sample of their own, and the connection's srtt mixes planes: on a
        #: plane 4x slower than the other every packet would look lost.
        self.plane_srtt: dict[int, float] = {}
        #: Smoothed round trip of anything the plane answers (SACK echoes
        #: and probe answers): what its liveness timers wait for.
        self.answer_srtt: dict[int, float] = {}
        #: Smallest SACK echo per plane (its base RTT).
        self.plane_min: dict[int, float] = {}
        #: Smallest round trip per plane of the congestion controller's delay
        #: samples (``delay_sample``): the zero of its queueing delay.
        self.delay_min: dict[int, float] = {}
        #: Smoothed RTT per EV, by ``ev_key``.
        self.ev_srtt: dict[int, float] = {}
        #: When anything (ACK, trim NACK, probe answer) last came back from
        #: each plane (-inf: never).
        self.heard: list[float] = [-math.inf] * planes

    def plane_sample(self, plane: int, rtt: float) -> None:
        """A round trip through ``plane`` (a SACK's echo)."""
        old = self.plane_srtt.get(plane)
        self.plane_srtt[plane] = rtt if old is None else smooth(old, rtt, PLANE_GAIN)
        if rtt < self.plane_min.get(plane, math.inf):
            self.plane_min[plane] = rtt
        self._answer(plane, rtt)

    def probe_sample(self, plane: int, rtt: float) -> None:
        """A probe of ``plane`` answered after ``rtt``: an answer time, not a
        data RTT (the probe skipped the data queue)."""
        if rtt > 0:
            self._answer(plane, rtt)

    def _answer(self, plane: int, rtt: float) -> None:
        old = self.answer_srtt.get(plane)
        self.answer_srtt[plane] = rtt if old is None else smooth(old, rtt, PLANE_GAIN)

    def tracks(self, plane: int) -> bool:
        """May a sample of ``plane`` (named by the peer) be recorded?"""
        return plane in self.plane_srtt or len(self.plane_srtt) < MAX_PLANES

    def ev_sample(self, key: int, rtt: float) -> None:
        """A round trip of a packet sent on the EV ``key`` (``ev_key``)."""
        old = self.ev_srtt.get(key)
        self.ev_srtt[key] = rtt if old is None else smooth(old, rtt, EV_GAIN)

    def plane_rtt(self, plane: int) -> float | None:
        return self.plane_srtt.get(plane)

    def base_rtt(self, plane: int) -> float | None:
        """The plane's smallest SACK echo (None: none yet)."""
        return self.plane_min.get(plane)

    def bases(self) -> Mapping[int, float]:
        """Every plane's smallest SACK echo, of the planes the connection has
        (a peer may name others in its SACKs: they are not its pipe)."""
        n = len(self.heard)
        pm = self.plane_min
        if n == 0 or all(p < n for p in pm):
            return pm
        return {p: v for p, v in pm.items() if p < n}

    def delay_sample(self, plane: int, rtt: float) -> float:
        """A delay sample of ``plane`` (an ACK's RTT, a trimmed header's
        round trip); returns the plane's ``delay_min`` after it."""
        base = self.delay_min.get(plane)
        if base is None or rtt < base:
            self.delay_min[plane] = base = rtt
        return base

    def delay_base(self, plane: int) -> float | None:
        """The plane's smallest delay sample (None: none yet)."""
        return self.delay_min.get(plane)

    def delay_bases(self) -> Mapping[int, float]:
        return self.delay_min

    def ev_rtt(self, plane: int, value: int) -> float | None:
        return self.ev_srtt.get(ev_key(plane, value))

    def heard_from(self, plane: int, now: float) -> None:
        self.heard[plane] = now

    def last_heard(self, plane: int) -> float:
        return self.heard[plane]
