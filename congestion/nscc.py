"""NSCC-style window congestion control (after UEC 1.0 NSCC and NDP).

Two signals are combined in four quadrants: ECN marks (a switch queue is
above its marking threshold *somewhere*) and queueing delay compared with a
target (how much queue *this* connection is seeing). Under packet spraying,
ECN in the core mostly means load imbalance, which the path policy fixes by
steering away; only ECN *with* high delay means the connection as a whole
sends too much. See PROTOCOL-NOTES.md, "Ultra Ethernet transport".

The window starts at one BDP (NDP: start at line rate, the fabric trims
instead of dropping, so a too-large first window costs headers, not RTOs).

The configured ``base_rtt`` is only a first guess: the controller learns the
real base RTT (the minimum RTT sample) and derives the BDP, the window cap,
the default delay target and QuickAdapt threshold from it, and rate-limits
multiplicative decrease by the measured RTT. A guess 10x too small otherwise
caps the window at a tenth of the real BDP and lets MD fire ten times per RTT.

Queueing delay alone is an ambiguous signal (software switches and event
loops add milliseconds of jitter with no queue at all): after ``quiet_rtts``
RTTs without any congestion signal (ECN mark, trim, loss, timeout,
QuickAdapt), the "above target, no ECN" quadrant grows by at least
``probe_gain`` of the window per RTT instead of one MTU, so a window cut to
1 MTU returns to the BDP in tens of RTTs, not in BDP/MTU RTTs.
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
    queueing delay that triggers QuickAdapt (default 4 * target). Both
    defaults follow the learned base RTT; explicit values stay fixed.
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
        probe_gain: float = 0.25,
        quiet_rtts: float = 4.0,
    ) -> None:
        if mtu <= 0 or base_rtt <= 0 or line_rate <= 0:
            raise ValueError("mtu, base_rtt and line_rate must be positive")
        if delay_samples < 1:
            raise ValueError("delay_samples must be at least 1")
        if target_delay is not None and target_delay <= 0:
            raise ValueError("target_delay must be positive")
        self.mtu = mtu
        self.line_rate = line_rate
        self.max_bdp_factor = max_bdp_factor
        self.min_window = float(mtu)
        self._rtt_guess = base_rtt
        self._target_cfg = target_delay
        self._qa_cfg = qa_delay
        self._min_rtt = math.inf
        self._set_base(base_rtt)
        self.probe_gain = probe_gain
        self.quiet_rtts = quiet_rtts
        self._last_signal = -math.inf
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

    def _set_base(self, base: float) -> None:
        """(Re)derive everything that scales with the base RTT."""
        self.base_rtt = base
        self.bdp = max(self.line_rate * base, float(self.mtu))
        self.max_window = max(self.max_bdp_factor * self.bdp, self.min_window)
        self.target_delay = base / 2 if self._target_cfg is None else self._target_cfg
        self.qa_delay = 4 * self.target_delay if self._qa_cfg is None else self._qa_cfg

    def _clamp(self, w: float) -> float:
        return min(max(w, self.min_window), self.max_window)

    def _rtt_est(self) -> float:
        # The measured RTT once there is one: the configured guess may be far
        # off in either direction.
        return self._rtt_guess if self._srtt is None else max(self._srtt, self.base_rtt)

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
        self._last_signal = now
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
            if rtt < self._min_rtt:
                self._min_rtt = rtt
                self._set_base(rtt)
                self._cwnd = min(self._cwnd, self.max_window)
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
        if sample.ecn:
            self._last_signal = now
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
                # But with no congestion signal for a while the delay is noise
                # or someone else's queue below every marking threshold:
                # probe multiplicatively, or a window cut to 1 MTU needs
                # BDP/MTU RTTs to come back.
                inc = self.fi_gain * self.mtu * sample.acked_bytes / self._cwnd
                if now - self._last_signal >= self.quiet_rtts * self._rtt_est():
                    inc = max(inc, self.probe_gain * sample.acked_bytes)
                self._cwnd = self._clamp(self._cwnd + inc)
                self._counts["fair_inc"] += 1
        elif d > target:
            # Marked and queued: really too much. Cut in proportion to how far
            # above target, at most once per (measured) RTT: one RTT of marks
            # describes one queue, not many.
            if now - self._last_md >= self._rtt_est():
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
        self._last_signal = now
        self._cwnd = self._clamp(self._cwnd - trimmed_bytes)
        self._update_pacer()

    def on_loss(self, *, now: float, lost_bytes: int) -> None:
        self._counts["lost_bytes"] += lost_bytes
        self._last_signal = now
        self._quick_adapt(now)

    def on_timeout(self, *, now: float) -> None:
        self._counts["timeouts"] += 1
        self._last_signal = now
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
            "base_rtt": self.base_rtt,
            "target_delay": self.target_delay,
        }
        out.update(self._counts)
        return out
