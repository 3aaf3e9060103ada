"""NSCC window congestion control, as the UEC 1.0 specification describes it.

Every ACK is classified by two signals of *that packet*: its queueing delay
(RTT minus its plane's base RTT) against the delay target, and its ECN echo.

====================  =====================  ==================================
                      delay < target         delay >= target
====================  =====================  ==================================
no ECN                proportional increase  fair (gentle, additive) increase
ECN                   no change (NOOP)       multiplicative decrease
====================  =====================  ==================================

- Proportional increase grows the window by ``pi_gain`` × the queue
  headroom, (target − delay) × line rate bytes, per RTT (plus the fair
  increase, so the increase is continuous across the target). ``pi_gain``
  0.25 fills the headroom over ~4 RTTs: every flow on a shared bottleneck
  sees the whole headroom (with 1.0, the 8-to-1 incast trimmed 3x more).
  Fast increase (the window grows by what is acked: doubling per RTT) runs
  only while the queueing delay stays near zero for a whole window of ACKs.
  UEC gathers the increases and applies them every 8 MTU acked or once per
  base RTT.
- Under packet spraying, ECN with little delay means one hot path, which the
  path policy steers away from: the window stays. ECN *and* delay means the
  connection sends too much: the window is cut by ``md_gain`` × (avg −
  target) / avg, where avg is the *filtered* delay (an EWMA), at most once
  per base RTT and at most by half.
- QuickAdapt: on a trim, a loss, a timeout, or a delay above ``qa_delay``,
  the window jumps to the bytes delivered in the last (base RTT + target),
  once per such period; acknowledgements of packets already in flight are
  then ignored for one RTT (they describe the old queue). It fires only when
  the delivered bytes are below ``qa_gate`` (1/8) of maxwnd (it is for a
  collapse, not for a queue the quadrants handle) and not when the period
  was application-limited (the delivered bytes measure the application).
- A trim NACK subtracts the trimmed bytes from the window (deviation 6: a
  last-hop trim cuts once per RTT instead).
- The window lives in [``mtu``, maxwnd], maxwnd = ``max_bdp_factor`` (1.5)
  × BDP, BDP = line rate × base RTT (the measured minimum RTT).

That is ``NsccParams.uec_spec()``. Braid's deviations from it, each a
switch of ``NsccParams`` (all on in ``NsccParams.braid()``, the default) and
a hook in ``congestion/nscc_deviations.py``, are listed with their reasons in
docs/decisions/0020-nscc-deviations.md; docs/congestion.md has the scenarios
that motivate each.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Any

from congestion.base import AckSample, PlaneRtt
from congestion.nscc_deviations import REVOKE_FACTOR, UNDO_RTTS, NsccDeviations
from congestion.nscc_params import DEVIATIONS, NsccParams
from congestion.pacing import Pacer
from transport.paths.rtt import PLANE_GAIN, PathModel, smooth

__all__ = ["DEVIATIONS", "REVOKE_FACTOR", "UNDO_RTTS", "Nscc", "NsccParams"]

#: UEC applies gathered increases once this many MTUs were acked (or once
#: per base RTT, whichever comes first).
INCREASE_EVERY_MTUS = 8


class Nscc(NsccDeviations):
    """Window controller. Units: bytes, seconds, bytes/second.

    ``line_rate`` is the connection's rate over all planes (plane rate ×
    planes); with ``base_rtt`` (the first guess, before any sample) it gives
    the BDP. ``params`` is the algorithm (default ``NsccParams.braid()``);
    keywords replace single fields of it (``Nscc(target_delay=2e-3)``), which
    is how ``congestion.get("nscc", **congestion_params)`` builds one.
    ``paths`` is the connection's path model, whose per-plane base RTTs the
    controller reads (``PlaneRtt``); without one it keeps a model of its own,
    fed by ``on_plane_rtt``.
    """

    def __init__(
        self,
        params: NsccParams | None = None,
        *,
        mtu: int = 1500,
        base_rtt: float = 1e-3,
        line_rate: float = 125e6,
        pace_share: float = 1.0,
        paths: PlaneRtt | None = None,
        **tuning: Any,
    ) -> None:
        p = NsccParams.braid() if params is None else params
        if tuning:
            p = replace(p, **tuning)
        if mtu <= 0 or base_rtt <= 0 or line_rate <= 0 or not 0 < pace_share <= 1:
            raise ValueError("mtu, base_rtt and line_rate must be positive, pace_share in (0, 1]")
        self.params = p
        # The switches, read on every ACK: plain attributes.
        self.loss_as_mark = p.loss_as_mark
        self.probe_above_target = p.probe_above_target
        self.maxwnd_covers_target = p.maxwnd_covers_target
        self.mark_fraction_md = p.mark_fraction_md
        self.shared_marks = p.shared_marks
        self.last_hop_trim_md = p.last_hop_trim_md
        self.trim_base = p.trim_base
        self.trim_quiet_qa = p.trim_quiet_qa
        self.host_share = p.host_share
        self.spurious_undo = p.spurious_undo
        self.measured_growth = p.measured_growth
        self.host_floor = p.host_floor
        self.host_delay_window = p.host_delay_window
        self.quick_adapt_floor = p.quick_adapt_floor
        self.filtered_qa_trigger = p.filtered_qa_trigger
        self.measured_rtt_periods = p.measured_rtt_periods
        self.plane_mean_bdp = p.plane_mean_bdp
        self.app_limited_no_increase = p.app_limited_no_increase
        self.per_ack_increase = p.per_ack_increase
        self.trim_without_quick_adapt = p.trim_without_quick_adapt
        self._count_rounds = p.mark_fraction_md or p.shared_marks

        self.mtu = mtu
        self.line_rate = line_rate
        self.pace_share = pace_share
        self.max_bdp_factor = p.max_bdp_factor
        self.host_hold = p.host_hold
        self.min_window = float(mtu)
        self._rtt_guess = base_rtt
        self._target_cfg = p.target_delay
        self._qa_cfg = p.qa_delay
        self._fi_cfg = p.fi_delay
        self._min_rtt = math.inf
        # Per plane, the minimum RTT of every round trip through it (the BDP
        # is the sum of the planes' own) and of the delay samples (the zero
        # of each packet's queueing delay: planes are independent fabrics
        # with their own propagation delay, so one connection-wide minimum
        # would read the slower plane's propagation as queueing). Owned by
        # the connection's path model; a controller alone keeps its own.
        self._own_paths = paths is None
        self._paths: PlaneRtt = PathModel() if paths is None else paths
        # Deviation 8: how many connections of this host are sending now
        # (``set_senders``); they share one maxwnd.
        self._senders = 1
        self.calm_rtts = int(p.calm_rtts)
        self._init_deviations()
        self._set_base(base_rtt)
        self.md_gain = p.md_gain
        self.md_floor = p.md_floor
        self.pi_gain = p.pi_gain
        self.fi_gain = p.fi_gain
        self.qa_floor = p.qa_floor
        self.qa_gate = p.qa_gate
        self.delay_ewma = p.delay_ewma
        self.pacing_gain = p.pacing_gain
        self.probe_gain = p.probe_gain
        self.quiet_rtts = p.quiet_rtts
        self.mark_gain = p.mark_gain
        self.pervasive_marks = p.pervasive_marks
        self.trim_md = p.trim_md
        self.trim_qa_rtts = p.trim_qa_rtts

        init = self.bdp if p.initial_window is None else float(p.initial_window)
        self._cwnd = self._clamp(init)
        self._srtt: float | None = None
        self._delay = 0.0  # the last ACK's queueing delay (the quadrant's input)
        self._avg_delay = 0.0  # filtered: sizes MD, triggers QuickAdapt
        self._delivered: deque[tuple[float, int]] = deque()
        self._fi_bytes = 0.0  # bytes acked with near-zero delay in a row
        self._last_md = -math.inf
        self._last_qa = -math.inf
        self._last_signal = -math.inf
        self._hold_until = -math.inf
        # UEC's gathered increase: bytes of window owed, bytes acked since
        # the last application, and when it was applied.
        self._inc_owed = 0.0
        self._inc_acked = 0
        self._inc_since = -math.inf
        # Application-limited detection for QuickAdapt: did the window hold
        # back a packet the sender had ready, in this or the previous
        # QuickAdapt period? (No ACKs arrive during a stall, so a stalled
        # sender that is still blocked stays on record.)
        self._blocked = False
        self._prev_blocked = False
        self._period_until = -math.inf
        self._pacer = Pacer(rate=self._pacing_rate(), burst=p.burst_packets * mtu)
        self._counts: dict[str, float] = {
            "md": 0.0,
            "quick_adapt": 0.0,
            "quick_adapt_app_limited": 0.0,
            "qa_trim_quiet": 0.0,
            "proportional_inc": 0.0,
            "fast_inc": 0.0,
            "fair_inc": 0.0,
            "ecn_hold": 0.0,
            "shared_mark_md": 0.0,
            "acked_bytes": 0.0,
            "trimmed_bytes": 0.0,
            "lost_bytes": 0.0,
            "timeouts": 0.0,
            "mark_revoked": 0.0,
            "mark_revoked_random": 0.0,
            "random_bytes": 0.0,
            "spurious_bytes": 0.0,
            "qa_undone": 0.0,
        }

    # -- helpers ---------------------------------------------------------------

    def _set_base(self, base: float) -> None:
        """(Re)derive everything that scales with the base RTT."""
        self.base_rtt = base
        pipe_rtt = base
        if self.plane_mean_bdp:
            # Planes of unequal RTT: the pipe holds line rate x the planes'
            # mean base RTT, not x the fastest plane's. Means within 50% of
            # the minimum are equal planes (their minima differ by a packet's
            # serialisation): the window stays as tight as the spec's.
            pm = self._pipe_bases()
            mean = sum(pm) / len(pm) if pm else base
            pipe_rtt = mean if mean > 1.5 * base else base
        self.bdp = max(self.line_rate * pipe_rtt, float(self.mtu))
        self.target_delay = base / 2 if self._target_cfg is None else self._target_cfg
        self.qa_delay = 4 * self.target_delay if self._qa_cfg is None else self._qa_cfg
        self.fi_delay = self.target_delay / 10 if self._fi_cfg is None else self._fi_cfg
        # The hosts' polling holds each packet or its SACK for part of the
        # round trip: the pipe holds the line rate x that hold too.
        hold = self.line_rate * self.host_hold
        cap = self.max_bdp_factor * self.bdp + hold
        if self.maxwnd_covers_target:
            # Deviation 3: a software host's 2 ms target on a 0.3 ms fabric
            # could otherwise never fill the pipe at the RTT it accepts.
            cap = max(cap, self.bdp + self.line_rate * self.target_delay + hold)
        host = max(self._floor if self.host_floor else 0.0,
                   self._host if self.host_delay_window else 0.0)
        if host > 0:
            # Deviations 11 and 12: the pipe also holds the host delay
            # every packet meets (a floor of the delay, or measured).
            over = host + (self.target_delay if self.maxwnd_covers_target else 0.0)
            cap = max(cap, self.bdp + self.line_rate * over + hold)
        self.max_window = max(cap / self._senders, self.min_window)

    def _clamp(self, w: float) -> float:
        return min(max(w, self.min_window), self.max_window)

    def _rtt_est(self) -> float:
        # The measured RTT once there is one: the configured guess may be far
        # off in either direction.
        return self._rtt_guess if self._srtt is None else max(self._srtt, self.base_rtt)

    def _qa_period(self) -> float:
        # UEC: QuickAdapt's measurement period is base RTT + target (the RTT
        # a packet has when the controller is on target).
        return self.base_rtt + self.target_delay + self.host_hold

    def _pacing_rate(self) -> float:
        srtt = self.base_rtt if self._srtt is None else self._srtt
        # Pacing faster than our own NIC only moves the queue into the NIC
        # (pace_share: less the frame's overhead and a headroom, decision 0045).
        return min(self._cwnd / srtt * self.pacing_gain, self.line_rate * self.pace_share)

    def _update_pacer(self) -> None:
        self._pacer.rate = self._pacing_rate()

    def _delivered_since(self, start: float) -> int:
        return sum(b for t, b in self._delivered if t > start)

    def _quick_adapt(self, now: float) -> None:
        # The bytes that really got through in the last period are a safe
        # window; jumping there at once beats many MD steps when a plane dies
        # or an incast starts. Once per period, or a burst of loss reports
        # would ratchet the window down.
        period = self._qa_period()
        if self.measured_rtt_periods:
            # A queue-inflated RTT must not halve the measurement.
            period = max(period, self._rtt_est())
        if now - self._last_qa < period:
            return
        self._last_qa = now
        if not (self._blocked or self._prev_blocked):
            # Application-limited: what was delivered is what was offered.
            self._counts["quick_adapt_app_limited"] += 1
            return
        delivered = float(self._delivered_since(now - period))
        if delivered >= self.qa_gate * self.max_window:
            # UEC's gate: QuickAdapt is for a collapse (the network delivers
            # a small fraction of what the window allows), not for a queue
            # the other quadrants handle, nor for delay noise on a busy host.
            return
        target = delivered
        if self.quick_adapt_floor:
            # A period in which nothing came back (every packet on a plane
            # that just died) measures the failure, not the capacity.
            target = max(delivered, self.qa_floor * self.max_window)
        if target >= self._cwnd:
            return
        self._cwnd = self._clamp(target)
        self._last_signal = now
        self._fi_bytes = 0.0
        self._inc_owed = 0.0
        self._counts["quick_adapt"] += 1
        # ACKs of the packets already in flight still describe the old queue
        # (UEC ignores them too): no increase, no MD for one RTT, so the same
        # queue is neither punished twice nor "recovered" from before it drained.
        self._avg_delay = 0.0
        self._hold_until = now + self._rtt_est()
        self._update_pacer()

    def _multiplicative_decrease(self, now: float) -> None:
        # One RTT of marks describes one queue, not many: at most one cut per
        # RTT, sized by the filtered delay (a single late packet does not
        # decide how much to cut).
        avg, target = self._avg_delay, self.target_delay
        spacing = self._rtt_est() if self.measured_rtt_periods else self.base_rtt
        if avg <= target or now - self._last_md < spacing:
            return
        # Deviation 4: sized by how much of the traffic was marked (delay as
        # the mark, deviation 1, marks everything above target: full size).
        scale = 1.0
        if self.mark_fraction_md and self.mark_gain != 0 and not self._delay_is_mark:
            scale = self._mark_alpha
        factor = max(1.0 - self.md_gain * scale * (avg - target) / avg, self.md_floor)
        self._cwnd = self._clamp(self._cwnd * factor)
        self._inc_owed = 0.0
        self._scale_undo(factor)
        self._last_md = now
        self._counts["md"] += 1

    def _gather_increase(self, now: float, acked: int, inc: float) -> None:
        # UEC: increases are gathered and applied every 8 MTU acked or once
        # per base RTT, so the window moves in steps the pacer can follow.
        self._inc_owed += inc
        self._inc_acked += acked
        if self._inc_acked >= INCREASE_EVERY_MTUS * self.mtu or \
                now - self._inc_since >= self.base_rtt:
            self._cwnd = self._clamp(self._cwnd + self._inc_owed)
            self._inc_owed = 0.0
            self._inc_acked = 0
            self._inc_since = now

    # -- CongestionController ----------------------------------------------------

    def set_line_rate(self, rate: float) -> None:
        """The planes that are up carry ``rate`` bytes/s (a plane parked or
        back): maxwnd, the BDP and the pacer's cap follow it, and the window
        is clamped to the new maxwnd. A maxwnd sized for two planes would
        otherwise fill the one that survives past its buffer (decision 0030)."""
        if rate <= 0 or rate == self.line_rate:
            return
        self.line_rate = rate
        self._set_base(self.base_rtt)
        self._cwnd = min(self._cwnd, self.max_window)
        self._update_pacer()

    def set_senders(self, n: int) -> None:
        """Deviation 8: ``n`` connections of this host are sending; each gets
        1/n of maxwnd (the QuickAdapt gate and floor follow it)."""
        if not self.host_share:
            return
        n = max(1, n)
        if n == self._senders:
            return
        self._senders = n
        self._set_base(self.base_rtt)
        self._cwnd = min(self._cwnd, self.max_window)
        self._update_pacer()

    @property
    def cwnd(self) -> int:
        return int(self._cwnd)

    @property
    def srtt(self) -> float | None:
        return self._srtt

    @property
    def qdelay(self) -> float:
        """Filtered queueing-delay estimate (seconds)."""
        return self._avg_delay

    def on_ack(self, sample: AckSample) -> None:
        now = sample.now
        acked = sample.acked_bytes
        self._counts["acked_bytes"] += acked
        self._delivered.append((now, acked))
        if now >= self._period_until:
            self._prev_blocked, self._blocked = self._blocked, False
            self._period_until = now + self._qa_period()
        horizon = now - 2 * max(self._rtt_est(), self._qa_period())
        while self._delivered and self._delivered[0][0] < horizon:
            self._delivered.popleft()
        if self._count_rounds:
            self._count_marks(now, acked, sample.ecn)  # deviations 4 and 5
        if sample.ecn:
            self._fabric_signals = True
            self._delay_is_mark = False
            self._last_signal = now

        rtt = sample.rtt
        if rtt is None or rtt <= 0:
            # No delay sample for this ACK (Karn): no quadrant to decide.
            self._update_pacer()
            return
        self._srtt = rtt if self._srtt is None else smooth(self._srtt, rtt, PLANE_GAIN)
        if rtt < self._min_rtt:
            self._min_rtt = rtt
            self._set_base(rtt)
            self._cwnd = min(self._cwnd, self.max_window)
        if self.host_delay_window:
            self._host_on_ack(now, sample.host_delay)  # deviation 12
        base = self._paths.delay_sample(sample.plane, rtt)
        # Less what the hosts' polling adds (host_hold): not a queue.
        d = max(rtt - base - self.host_hold, 0.0)
        if self.host_floor:
            self._floor_on_delay(now, d)  # deviation 11
        if self.loss_as_mark:
            if self._delay_sink is not None:
                self._delay_sink(now, d, self._rtt_est())  # deviation 1
            if self._delay_is_mark and d > REVOKE_FACTOR * self._mark_level:
                self._mark_revoke()
        if now < self._hold_until:
            self._update_pacer()
            return
        self._delay = d
        self._avg_delay += self.delay_ewma * (d - self._avg_delay)
        if (self._avg_delay if self.filtered_qa_trigger else d) > self.qa_delay and \
                not (self.trim_quiet_qa and self._trim_quiets_qa(now)):  # deviation 7
            self._quick_adapt(now)
            if now < self._hold_until:
                return

        target = self.target_delay
        marked = sample.ecn or (self._delay_is_mark and d >= target)
        if marked:
            self._fi_bytes = 0.0
            if sample.ecn and self.shared_marks and \
                    self._round_frac >= self.pervasive_marks:
                # Deviation 5: marks on much of the traffic are a queue this
                # connection shares, whatever its own delay reading says.
                self._shared_mark_decrease(now)
            elif d >= target:
                self._multiplicative_decrease(now)
            else:
                # An imbalanced core: the path policy steers away, the
                # window stays.
                self._counts["ecn_hold"] += 1
            self._update_pacer()
            return
        if self.app_limited_no_increase and sample.in_flight < self._cwnd / 2:
            # Application-limited: a window the sender does not fill says
            # nothing about the network; growing it would only store a burst.
            self._update_pacer()
            return
        fair = self.fi_gain * self.mtu * acked / self._cwnd
        if d < target:
            if d <= self.fi_delay:
                self._fi_bytes += acked
            else:
                self._fi_bytes = 0.0
            if self._fi_bytes > self._cwnd:
                # A whole window with no queue: the pipe is far from full.
                inc = float(acked)
                self._counts["fast_inc"] += 1
            else:
                # Grow by the queue headroom (in bytes) per RTT.
                rate = self.line_rate
                if self.measured_growth:
                    rate = self._measured_growth_rate(now)  # deviation 10
                headroom = self.pi_gain * (target - d) * rate
                inc = fair + headroom * acked / self._cwnd
                self._counts["proportional_inc"] += 1
        else:
            self._fi_bytes = 0.0
            inc = fair
            if self.probe_above_target and \
                    now - self._last_signal >= self.quiet_rtts * self._rtt_est():
                inc = max(inc, self.probe_gain * acked)  # deviation 2
            self._counts["fair_inc"] += 1
        if self.per_ack_increase:
            self._cwnd = self._clamp(self._cwnd + inc)
        else:
            self._gather_increase(now, acked, inc)
        self._update_pacer()

    def on_plane_rtt(self, *, plane: int, rtt: float) -> None:
        if rtt <= 0:
            return
        own = self._paths
        if self._own_paths and isinstance(own, PathModel) and own.tracks(plane):
            own.plane_sample(plane, rtt)  # a connection's model has it already
        base = self._paths.base_rtt(plane)
        if base is not None and rtt <= base:
            self._set_base(self.base_rtt)

    def on_nack(self, *, now: float, trimmed_bytes: int, last_hop: bool,
                rtt: float | None = None, plane: int | None = None) -> None:
        if self.trim_base:
            self._trim_lowers_base(rtt, plane)  # deviation 6
        # A trim says exactly how many bytes the network could not take now;
        # at the last hop it is incast, in the fabric imbalance, and both
        # mean that much less should be in flight.
        self._counts["trimmed_bytes"] += trimmed_bytes
        self._last_signal = now
        self._fabric_signals = True
        self._delay_is_mark = False
        self._fi_bytes = 0.0
        cut = trimmed_bytes
        if last_hop and self.last_hop_trim_md and self.trim_md:
            # Deviation 6: the last hop's cut is once per RTT, by a fraction
            # of the window; its trims are not also subtracted one by one.
            cut = 0
        self._cwnd = self._clamp(self._cwnd - cut)
        if self._undo_cwnd is not None:
            self._undo_cwnd -= cut
        if last_hop:
            self._last_lh_trim = now
            if self.last_hop_trim_md:
                self._last_hop_trim_cut(now)  # deviation 6
        if not self.trim_without_quick_adapt:
            self._quick_adapt(now)
        self._update_pacer()

    def on_loss(self, *, now: float, lost_bytes: int, overflow: float | None = None) -> None:
        """``overflow``: the loss classifier's answer (transport/loss_policy.py)
        when it judged these losses a tail-drop buffer overflowing, the
        queueing delay it overflowed at; None when not (or when no classifier
        keeps the history). Read only by deviation 1."""
        self._counts["lost_bytes"] += lost_bytes
        self._last_signal = now
        self._fi_bytes = 0.0
        if self.host_floor:
            self._floor_on_loss()  # deviation 11
        if self.loss_as_mark and overflow is not None:
            self._mark_on_overflow(lost_bytes, overflow)  # deviation 1
        before = self._cwnd
        self._quick_adapt(now)
        if self.spurious_undo:
            self._undo_on_loss(now, before, lost_bytes)  # deviation 9
        self._update_pacer()

    def on_random_loss(self, *, now: float, lost_bytes: int) -> None:
        """Losses the classifier found random (transport/loss_policy.py,
        ``LossKind.RANDOM``): no congestion signal, so not heard as
        ``on_loss`` (a QuickAdapt for each of them ratchets the window down
        by the loss rate every period). Read only by deviation 1."""
        self._counts["random_bytes"] += lost_bytes
        if self.loss_as_mark:
            self._mark_on_random()  # deviation 1

    def on_spurious_loss(self, *, now: float, lost_bytes: int) -> None:
        self._counts["spurious_bytes"] += lost_bytes
        if self.loss_as_mark:
            self._mark_on_spurious(lost_bytes)  # deviation 1
        if self.spurious_undo:
            self._undo_on_spurious(now, lost_bytes)  # deviation 9

    def on_timeout(self, *, now: float) -> None:
        self._undo_cwnd = None  # a timeout is no reordering
        self._counts["timeouts"] += 1
        self._last_signal = now
        self._fi_bytes = 0.0
        self._quick_adapt(now)

    def can_send(self, *, in_flight: int, size: int) -> bool:
        if in_flight == 0 or in_flight + size <= self._cwnd:
            return True
        # The window binds: the sender has more than it lets out, so what
        # gets delivered measures the network, not the application.
        self._blocked = True
        return False

    def next_send_time(self, *, now: float, size: int) -> float:
        return self._pacer.next_send_time(now=now, size=size)

    def on_sent(self, *, now: float, size: int) -> None:
        self._pacer.on_sent(now=now, size=size)

    def send_quota(self, *, now: float, size: int) -> tuple[float, float, float, float]:
        tokens, need = self._pacer.quota(now=now, size=size)
        return self._cwnd, tokens, need, self._pacer.rate

    def on_sent_run(self, *, now: float, sizes: list[int]) -> None:
        self._pacer.on_sent_run(now=now, sizes=sizes)

    def stats(self) -> dict[str, float]:
        out = {
            "cwnd": self._cwnd,
            "srtt": math.nan if self._srtt is None else self._srtt,
            "qdelay": self._avg_delay,
            "min_rtt": min(self._paths.delay_bases().values(), default=math.nan),
            "pacing_rate": self._pacer.rate,
            "bdp": self.bdp,
            "max_window": self.max_window,
            "base_rtt": self.base_rtt,
            "target_delay": self.target_delay,
            "host_hold": self.host_hold,
            "delay_is_mark": float(self._delay_is_mark),
            "host_floor": self._floor,
            "host_delay": self._host,
            "mark_alpha": self._mark_alpha,
            "host_senders": float(self._senders),
        }
        out.update(self._counts)
        return out
