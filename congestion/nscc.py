"""NSCC-style window congestion control (after UEC 1.0 NSCC and NDP).

Two signals are combined in four quadrants: ECN marks (a switch queue is
above its marking threshold *somewhere*) and queueing delay compared with a
target (how much queue *this* connection is seeing). Under packet spraying,
ECN in the core mostly means load imbalance, which the path policy fixes by
steering away; only ECN *with* high delay means the connection as a whole
sends too much. See PROTOCOL-NOTES.md, "Ultra Ethernet transport".

The window starts at one BDP (NDP: start at line rate, the fabric trims
instead of dropping, so a too-large first window costs headers, not RTOs).
"""

from __future__ import annotations

import math
from collections import deque

from congestion.base import AckSample, Pacer


class Nscc:
    """Window controller. Units: bytes, seconds, bytes/second.

    ``line_rate`` and ``base_rtt`` give the BDP; the window lives in
    [``mtu``, ``max_bdp_factor`` * BDP]. ``target_delay`` is the queueing
    delay the controller aims for (default base_rtt / 2). ``qa_delay`` is the
    queueing delay that triggers QuickAdapt (default 4 * target).
    """

    def __init__(
        self,
        *,
        mtu: int = 1500,
        base_rtt: float = 1e-3,
        line_rate: float = 125e6,
        target_delay: float | None = None,
        max_bdp_factor: float = 1.5,
        initial_window: int | None = None,
        md_gain: float = 0.8,
        md_floor: float = 0.5,
        pi_gain: float = 1.0,
        fi_gain: float = 1.0,
        qa_delay: float | None = None,
        delay_samples: int = 16,
        pacing_gain: float = 1.25,
        burst_packets: int = 4,
    ) -> None:
        if mtu <= 0 or base_rtt <= 0 or line_rate <= 0:
            raise ValueError("mtu, base_rtt and line_rate must be positive")
        if delay_samples < 1:
            raise ValueError("delay_samples must be at least 1")
        self.mtu = mtu
        self.base_rtt = base_rtt
        self.line_rate = line_rate
        self.bdp = max(line_rate * base_rtt, float(mtu))
        self.target_delay = base_rtt / 2 if target_delay is None else target_delay
        if self.target_delay <= 0:
            raise ValueError("target_delay must be positive")
        self.qa_delay = 4 * self.target_delay if qa_delay is None else qa_delay
        self.min_window = float(mtu)
        self.max_window = max(max_bdp_factor * self.bdp, self.min_window)
        self.md_gain = md_gain
        self.md_floor = md_floor
        self.pi_gain = pi_gain
        self.fi_gain = fi_gain
        self.pacing_gain = pacing_gain

        init = self.bdp if initial_window is None else float(initial_window)
        self._cwnd = self._clamp(init)
        self._srtt: float | None = None
        # Per-plane minimum RTT: planes are independent fabrics with their own
        # propagation delay, so one connection-wide minimum would read the
        # slower plane's propagation as queueing.
        self._plane_base: dict[int, float] = {}
        # Median of recent queueing-delay samples across all paths: a mean or
        # an EWMA is dragged by the one hot spine a few sprayed packets hit.
        self._delays: deque[float] = deque(maxlen=delay_samples)
        self._qdelay = 0.0
        self._delivered: deque[tuple[float, int]] = deque()
        self._last_md = -math.inf
        self._last_qa = -math.inf
        self._hold_until = -math.inf
        self._pacer = Pacer(rate=self._pacing_rate(), burst=burst_packets * mtu)
        self._counts: dict[str, float] = {
            "md": 0.0,
            "quick_adapt": 0.0,
            "proportional_inc": 0.0,
            "fair_inc": 0.0,
            "ecn_hold": 0.0,
            "acked_bytes": 0.0,
            "trimmed_bytes": 0.0,
            "lost_bytes": 0.0,
            "timeouts": 0.0,
        }

    # -- helpers ---------------------------------------------------------------

    def _clamp(self, w: float) -> float:
        return min(max(w, self.min_window), self.max_window)

    def _rtt_est(self) -> float:
        srtt = self.base_rtt if self._srtt is None else self._srtt
        return max(srtt, self.base_rtt)

    def _pacing_rate(self) -> float:
        srtt = self.base_rtt if self._srtt is None else self._srtt
        # Pacing faster than our own NIC only moves the queue into the NIC.
        return min(self._cwnd / srtt * self.pacing_gain, self.line_rate)

    def _update_pacer(self) -> None:
        self._pacer.rate = self._pacing_rate()

    def _delivered_last_rtt(self, now: float) -> int:
        start = now - self._rtt_est()
        return sum(b for t, b in self._delivered if t > start)

    def _quick_adapt(self, now: float) -> None:
        # QuickAdapt: the bytes that really got through in the last RTT are a
        # safe window; jumping there at once beats many MD steps when a
        # plane dies or an incast starts. Once per RTT, or a burst of loss
        # reports would ratchet the window to the minimum.
        rtt = self._rtt_est()
        if now - self._last_qa < rtt:
            return
        self._last_qa = now
        delivered = float(self._delivered_last_rtt(now))
        if delivered >= self._cwnd:
            return
        self._cwnd = self._clamp(delivered)
        self._counts["quick_adapt"] += 1
        # ACKs of the packets already in flight still describe the old queue
        # (UEC NSCC ignores them too): no increase, no MD, no delay samples
        # for one RTT, so the same queue is neither punished twice nor
        # "recovered" from before it drained.
        self._delays.clear()
        self._qdelay = 0.0
        self._hold_until = now + rtt
        self._update_pacer()

    # -- CongestionController ----------------------------------------------------

    @property
    def cwnd(self) -> int:
        return int(self._cwnd)

    @property
    def srtt(self) -> float | None:
        return self._srtt

    @property
    def qdelay(self) -> float:
        """Current robust queueing-delay estimate (seconds)."""
        return self._qdelay

    def on_ack(self, sample: AckSample) -> None:
        now = sample.now
        self._counts["acked_bytes"] += sample.acked_bytes
        self._delivered.append((now, sample.acked_bytes))
        horizon = now - 2 * self._rtt_est()
        while self._delivered and self._delivered[0][0] < horizon:
            self._delivered.popleft()

        rtt = sample.rtt
        if rtt is not None and rtt > 0:
            self._srtt = rtt if self._srtt is None else 0.875 * self._srtt + 0.125 * rtt
            base = self._plane_base.get(sample.plane)
            if base is None or rtt < base:
                self._plane_base[sample.plane] = base = rtt
            if now >= self._hold_until:
                self._delays.append(max(rtt - base, 0.0))
                ordered = sorted(self._delays)
                n = len(ordered)
                mid = n // 2
                self._qdelay = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2

        if now < self._hold_until:
            self._update_pacer()
            return
        d = self._qdelay
        target = self.target_delay
        if d > self.qa_delay:
            self._quick_adapt(now)
            return

        # Application-limited: a window the sender does not fill says nothing
        # about the network; growing it would only store a burst for later.
        limited = sample.in_flight < self._cwnd / 2
        if not sample.ecn:
            if limited:
                pass
            elif d <= target:
                # Proportional increase, floored by the fair increase so the
                # increase is continuous across the target.
                fair = self.fi_gain * self.mtu / self._cwnd
                prop = self.pi_gain * (target - d) / target
                self._cwnd = self._clamp(self._cwnd + sample.acked_bytes * (fair + prop))
                self._counts["proportional_inc"] += 1
            else:
                # Above target without marks: others share the bottleneck;
                # additive increase (~fi_gain MTU per RTT) converges to fairness.
                inc = self.fi_gain * self.mtu * sample.acked_bytes / self._cwnd
                self._cwnd = self._clamp(self._cwnd + inc)
                self._counts["fair_inc"] += 1
        elif d > target:
            # Marked and queued: really too much. Cut in proportion to how far
            # above target, at most once per base RTT (one RTT of marks
            # describes one queue, not many).
            if now - self._last_md >= self.base_rtt:
                factor = max(1.0 - self.md_gain * (d - target) / d, self.md_floor)
                self._cwnd = self._clamp(self._cwnd * factor)
                self._last_md = now
                self._counts["md"] += 1
        else:
            # Marked but little queue: an imbalanced core; the path policy
            # steers away, the window stays.
            self._counts["ecn_hold"] += 1
        self._update_pacer()

    def on_nack(self, *, now: float, trimmed_bytes: int, last_hop: bool) -> None:
        # A trim says exactly how many bytes the network could not take now;
        # at the last hop it is incast, in the fabric imbalance, and both
        # mean that much less should be in flight.
        self._counts["trimmed_bytes"] += trimmed_bytes
        self._cwnd = self._clamp(self._cwnd - trimmed_bytes)
        self._update_pacer()

    def on_loss(self, *, now: float, lost_bytes: int) -> None:
        self._counts["lost_bytes"] += lost_bytes
        self._quick_adapt(now)

    def on_timeout(self, *, now: float) -> None:
        self._counts["timeouts"] += 1
        self._quick_adapt(now)

    def can_send(self, *, in_flight: int, size: int) -> bool:
        return in_flight == 0 or in_flight + size <= self._cwnd

    def next_send_time(self, *, now: float, size: int) -> float:
        return self._pacer.next_send_time(now=now, size=size)

    def on_sent(self, *, now: float, size: int) -> None:
        self._pacer.on_sent(now=now, size=size)

    def stats(self) -> dict[str, float]:
        out = {
            "cwnd": self._cwnd,
            "srtt": math.nan if self._srtt is None else self._srtt,
            "qdelay": self._qdelay,
            "min_rtt": min(self._plane_base.values(), default=math.nan),
            "pacing_rate": self._pacer.rate,
            "bdp": self.bdp,
        }
        out.update(self._counts)
        return out
