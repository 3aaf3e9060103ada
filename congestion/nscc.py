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
- Under packet spraying, ECN with little delay means one hot path, which the
  path policy steers away from: the window stays. ECN *and* delay means the
  connection sends too much: the window is cut by ``md_gain`` × (avg −
  target) / avg, where avg is the *filtered* delay (an EWMA), at most once
  per RTT and at most by half.
- QuickAdapt: on a loss, a timeout, or a filtered delay above ``qa_delay``,
  the window jumps to the bytes delivered in the last (base RTT + target)
  (or smoothed RTT, if longer), once per such period; acknowledgements of
  packets already in flight are then ignored for one RTT (they describe the
  old queue). As in UEC it fires only when the delivered bytes are below
  ``qa_gate`` (1/8) of maxwnd: it is for a collapse, not for a queue the
  quadrants handle. Braid skips it when the period was application-limited
  (the delivered bytes measure the application, not the network) and never
  cuts below ``qa_floor`` (1/16) of maxwnd (a stalled period — every packet
  on a dead plane — measures the failure).
- The window lives in [``mtu``, maxwnd], maxwnd = ``max_bdp_factor`` (1.5)
  × BDP, BDP = line rate × base RTT (the measured minimum RTT).

Braid's deviations from the specification (docs/congestion.md has the
scenarios that motivate each):

1. Loss on a fabric that never marks. UEC assumes ECN-marking switches; a
   tbf or a port with marking off never marks, so delay above target only
   ever meets the fair increase and the queue grows to the buffer. Once a
   congestive loss has been seen and no ECN mark or trim ever has, the
   connection treats delay above target as the mark: the ECN row applies to
   every ACK. The first ECN mark or trim switches this off for good, so a
   marking fabric behaves exactly as specified. A loss is congestive when
   (a) the connection reports it (only with queueing above the target
   behind it, or on a timeout), (b) the delay at it is above the target, and
   (c) the delay at it is above the highest delay the path carried without
   loss over the last ``calm_rtts`` (32) RTTs: per RTT the highest sample,
   leaving out the loss's own two RTTs, every RTT with a loss and the RTTs
   of a delay rising to one (a queue filling up to the drop). A tail-drop
   buffer overflows at the top of its delay; a random loss on a host whose
   scheduling delay sits above the target comes at a delay the path carries
   anyway (issue 13: 0-8 ms of host jitter and 0.1% random loss took a
   stream from 0.78 to 0.04 of capacity). (c) is void when no such RTT
   exists or at least half the RTTs had a loss (a queue standing at the
   buffer, or nothing known yet). And delay as the mark stands down (not
   for good) when a sample exceeds ``REVOKE_FACTOR`` (1.25) × the highest
   delay of the RTTs whose loss turned it on: no tail-drop buffer caps that
   delay (a busy host whose first loss came while its delay still rose).
2. Probing above target. After ``quiet_rtts`` RTTs without any congestion
   signal (ECN, trim, loss, timeout, QuickAdapt), the fair increase grows
   by at least ``probe_gain`` of the window per RTT: on a software host
   whose scheduling jitter sits above the target, a window cut to the floor
   otherwise needs BDP/MTU RTTs to come back. Not used on a non-marking
   fabric after loss (there, delay above target is the congestion signal).
3. maxwnd also covers the target queue: max(1.5 × BDP, BDP + line rate ×
   target). The two agree when target <= BDP/2 worth of time (UEC's
   datacentre setting); a software host's 2 ms target on a 0.3 ms fabric
   could otherwise never fill the pipe at the RTT it is told to accept.
4. MD sized by the fraction of bytes marked (``mark_gain`` > 0; 0, the
   default, is UEC as specified): the cut is scaled by alpha, the marked
   fraction of the bytes acked per RTT round, filtered with gain
   ``mark_gain`` (DCTCP's alpha; it starts at 1). A path that crosses a
   link marking a burst now and then, beside a shared bottleneck that does
   not mark, was otherwise halved every RTT while a flow whose path never
   marked kept its window. Off in the daemon too (opt in with
   ``congestion_params``): its effect on fairness was mixed (docs/congestion.md).
5. Marks on much of the traffic are a shared queue (``shared_marks``, on
   by default). UEC reads ECN with a delay below target as a hot path (NOOP)
   and sizes the MD by the connection's own filtered delay. Both depend on
   the connection's base RTT and delay noise: a latecomer that measured its
   base RTT through a standing queue sees "below target" on every marked
   ACK and never cuts, while the first flow, which knows the true minimum,
   is cut to the floor; a flow on a noisier host cuts harder. When at least
   ``pervasive_marks`` (0.4) of the bytes acked in the last RTT round were
   marked, a marked ACK cuts the window by ``md_gain`` x fraction / 2
   (DCTCP's cut; at most once per RTT), whatever its delay: every connection
   through the marking port sees about the same fraction, so all cut by the
   same factor. Sparse marks (a hot path among many) keep UEC's quadrants.
6. A last hop that trims and does not mark (MRC's). With the queue pinned at
   the trim threshold every flow's trims equal its additive increase,
   whatever its rate, so subtracting them (UEC) keeps any split. The first
   last-hop trim of an RTT also cuts the window by ``trim_md`` (0: off).
   And a trimmed header skipped the trimming port's data queue, so its
   NACK's round trip (``on_nack(rtt=..., plane=...)``) lowers that plane's
   base RTT (``trim_base``): a latecomer that measured its base through the
   standing queue otherwise reads the queue as headroom.
7. No QuickAdapt on delay behind a trimming last hop. Within
   ``trim_qa_rtts`` RTTs of a last-hop trim of this connection's data the
   delay trigger of QuickAdapt is skipped (loss and timeout still adapt):
   that queue is bounded by the trim threshold, which may sit above
   ``qa_delay`` (32 KB at 25 Mbit/s is 10.5 ms), and its trims size each
   flow's cut; on delay, QuickAdapt cut whichever flow's ACKs came in late
   to one packet and starved it for the rest of an incast burst.
8. One maxwnd per host (``set_senders``). maxwnd is sized to the host's
   NICs, and a host sending to n peers at once held n of them: the surplus
   waited in its own transmit queue, which marks and trims nothing, and
   every RTT-scaled timer grew with it (``transport/host_share.py``). Each
   of the n connections with data to send gets 1/n of maxwnd (the
   QuickAdapt gate and floor follow). ``ConnectionConfig.host_share``.
9. A QuickAdapt cut undone when its losses were not. If every loss that a
   QuickAdapt cut followed (and every loss declared after it, while the
   cut can still be undone) is acknowledged after all within ``UNDO_RTTS``
   RTTs of the last of them, the window goes back to what it was before
   the cut, less what trims and MDs took meanwhile (RFC 4015's response to
   a spurious timeout, Linux's undo). Behind trimming last hops the fabric
   drops nothing, yet a busy host's late copies are declared lost by time;
   a sender QuickAdapt cut to two packets on such a loss grew back by one
   packet per RTT and finished its burst last. Never after a timeout.
10. Growth at the measured rate on a tail-drop bottleneck
   (``measured_growth``). While delay is the mark (deviation 1), the
   proportional increase converts headroom at the rate delivered over the
   last RTT when that is below the line rate: a line rate told 100x too
   high refilled a 128 KB tbf queue past overflow after every cut.
11. A host delay floor (``host_floor``). On a fabric that never marked or
   trimmed, the lowest per-RTT minimum delay of the last ``FLOOR_RTTS``
   RTTs is delay every packet meets (a busy host's event loops): maxwnd
   covers it (BDP + line rate x (floor + target)). It rises only while the
   window binds, less than ``FULL_PIPE`` of the line rate is delivered and
   no loss came in the last ``calm_rtts`` RTTs, and never above
   ``qa_delay``. Off by default: on, senders sharing a non-marking queue
   still read part of it as a floor (sim: a dead spine's plane parked 3
   times instead of <= 2; a twin-resend message waited 20 ms, not < 17).
   Without it a 0-3 ms host kept a 100 Mbit/s tail-drop link at speed in
   0.4% of its 10 ms bins (docs/congestion.md).
"""

from __future__ import annotations

import math
from collections import deque

from congestion.base import AckSample, Pacer

#: Deviation 1 stands down when a delay sample exceeds this many times the
#: delay of the RTT whose loss turned it on (no tail-drop buffer caps it).
REVOKE_FACTOR = 1.25
_LOSS, _RISE = 2.0, 1.0  # deviation 1's per-RTT flags
#: Deviation 9: a QuickAdapt cut can be undone for this many RTTs after the
#: last loss behind it (the time a late copy's SACK may take to come).
UNDO_RTTS = 2.0
#: Deviation 11: whole RTTs over which the host delay floor is the lowest delay.
FLOOR_RTTS = 8
#: ... and stops rising once the connection delivers this share of its line rate.
FULL_PIPE = 0.75


class Nscc:
    """Window controller. Units: bytes, seconds, bytes/second.

    ``line_rate`` is the connection's rate over all planes (plane rate ×
    planes); with ``base_rtt`` it gives the BDP. ``target_delay`` is the
    queueing delay the controller aims for (default base_rtt / 2).
    ``qa_delay`` is the filtered queueing delay that triggers QuickAdapt
    (default 4 × target). Both defaults follow the learned base RTT; explicit
    values stay fixed. ``fi_delay`` is "near zero" for fast increase (default
    target / 10). ``calm_rtts`` is how many RTTs of loss-free delay deviation
    1 compares a loss with.
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
        pi_gain: float = 0.25,
        fi_gain: float = 1.0,
        fi_delay: float | None = None,
        qa_delay: float | None = None,
        qa_floor: float = 0.0625,
        qa_gate: float = 0.125,
        delay_ewma: float = 0.125,
        pacing_gain: float = 1.25,
        burst_packets: int = 4,
        probe_gain: float = 0.25,
        quiet_rtts: float = 4.0,
        loss_as_mark: bool = True,
        calm_rtts: int = 32,
        mark_gain: float = 0.0,
        shared_marks: bool = True,
        pervasive_marks: float = 0.4,
        trim_base: bool = True,
        trim_md: float = 0.25,
        trim_qa_rtts: float = 32.0,
        measured_growth: bool = True,
        host_floor: bool = False,
    ) -> None:
        if mtu <= 0 or base_rtt <= 0 or line_rate <= 0:
            raise ValueError("mtu, base_rtt and line_rate must be positive")
        if not 0 < delay_ewma <= 1:
            raise ValueError("delay_ewma must be in (0, 1]")
        if target_delay is not None and target_delay <= 0:
            raise ValueError("target_delay must be positive")
        if not 0 <= qa_floor <= qa_gate <= 1:
            raise ValueError("need 0 <= qa_floor <= qa_gate <= 1 (fractions of maxwnd)")
        self.mtu = mtu
        self.line_rate = line_rate
        self.max_bdp_factor = max_bdp_factor
        self.min_window = float(mtu)
        self._rtt_guess = base_rtt
        self._target_cfg = target_delay
        self._qa_cfg = qa_delay
        self._fi_cfg = fi_delay
        self._min_rtt = math.inf
        # Each plane's minimum RTT from every round trip through it
        # (``on_plane_rtt``): the BDP is the sum of the planes' own.
        self._plane_min: dict[int, float] = {}
        # Deviation 8: how many connections of this host are sending now
        # (``set_senders``); they share one maxwnd.
        self._senders = 1
        # Deviation 11: the host delay floor (``_set_floor``), seconds.
        self._floor = 0.0
        self._set_base(base_rtt)
        self.md_gain = md_gain
        self.md_floor = md_floor
        self.pi_gain = pi_gain
        self.fi_gain = fi_gain
        self.qa_floor = qa_floor
        self.qa_gate = qa_gate
        self.delay_ewma = delay_ewma
        self.pacing_gain = pacing_gain
        self.probe_gain = probe_gain
        self.quiet_rtts = quiet_rtts
        self.loss_as_mark = loss_as_mark
        if calm_rtts < 1:
            raise ValueError("calm_rtts must be >= 1")
        self.calm_rtts = int(calm_rtts)
        if not 0 <= mark_gain <= 1:
            raise ValueError("mark_gain must be in [0, 1] (0: every MD is full size)")
        self.mark_gain = mark_gain
        if not 0 < pervasive_marks <= 1:
            raise ValueError("pervasive_marks must be in (0, 1]")
        self.shared_marks = shared_marks
        self.pervasive_marks = pervasive_marks
        if not 0 <= trim_md < 1:
            raise ValueError("trim_md must be in [0, 1)")
        self.trim_base = trim_base
        self.trim_md = trim_md
        if trim_qa_rtts < 0:
            raise ValueError("trim_qa_rtts must be >= 0 (0: off)")
        self.trim_qa_rtts = trim_qa_rtts
        self.measured_growth = measured_growth
        self.host_floor = host_floor
        # Deviation 5: the marked fraction of the last whole RTT round.
        self._round_frac = 0.0
        # Deviation 4: the fraction of bytes acked with a mark, per RTT round,
        # filtered (DCTCP's alpha; starts at 1, so a first MD is full size).
        self._mark_alpha = 1.0
        self._round_end = -math.inf
        self._round_acked = 0
        self._round_marked = 0

        init = self.bdp if initial_window is None else float(initial_window)
        self._cwnd = self._clamp(init)
        self._srtt: float | None = None
        # Per-plane minimum RTT: planes are independent fabrics with their own
        # propagation delay, so one connection-wide minimum would read the
        # slower plane's propagation as queueing.
        self._plane_base: dict[int, float] = {}
        self._delay = 0.0  # the last ACK's queueing delay (the quadrant's input)
        self._avg_delay = 0.0  # filtered: sizes MD, triggers QuickAdapt
        self._delivered: deque[tuple[float, int]] = deque()
        self._fi_bytes = 0.0  # bytes acked with near-zero delay in a row
        self._last_md = -math.inf
        self._last_qa = -math.inf
        # Deviation 7: when a last hop last trimmed this connection's data.
        self._last_lh_trim = -math.inf
        self._last_signal = -math.inf
        self._hold_until = -math.inf
        # Deviation 1: has the fabric ever signalled congestion itself (an
        # ECN mark or a trim)? If not, and it drops packets with a queue
        # behind them, delay above target is the mark.
        self._fabric_signals = False
        self._delay_is_mark = False
        # ... and only a loss with more queueing delay than the path carried
        # without loss counts (a random loss on a host whose scheduling delay
        # sits above the target does not). Per RTT-long bucket: [start,
        # highest delay sample, _LOSS if a loss was reported in it, _RISE if
        # its delay rose to one, else 0].
        self._calm: deque[list[float]] = deque()
        # The highest delay of the RTTs whose loss made delay the mark: a
        # tail-drop buffer overflowed there, so it caps the queue.
        self._mark_level = 0.0
        # The bytes whose loss made (or kept) delay the mark since it was
        # turned on: if every one of them is acknowledged after all (a copy
        # only reordered behind a slower plane's), there was no overflow.
        self._mark_bytes = 0
        # Deviation 9: the window before a QuickAdapt that a loss triggered,
        # the bytes declared lost since that are not yet acknowledged after
        # all, and until when an acknowledgement may still prove them
        # spurious (then the cut is undone).
        self._undo_cwnd: float | None = None
        self._undo_bytes = 0
        self._undo_until = -math.inf
        # Application-limited detection for QuickAdapt: did the window hold
        # back a packet the sender had ready, in this or the previous
        # QuickAdapt period? (No ACKs arrive during a stall, so a stalled
        # sender that is still blocked stays on record.)
        self._blocked = False
        self._prev_blocked = False
        self._period_until = -math.inf
        self._pacer = Pacer(rate=self._pacing_rate(), burst=burst_packets * mtu)
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
            "spurious_bytes": 0.0,
            "qa_undone": 0.0,
        }

    # -- helpers ---------------------------------------------------------------

    def _set_base(self, base: float) -> None:
        """(Re)derive everything that scales with the base RTT."""
        self.base_rtt = base
        # Planes of unequal RTT (issue 13): the pipe holds line rate x the
        # planes' mean base RTT, not x the fastest plane's. Means within 50%
        # of the minimum are equal planes (their minima differ by a packet's
        # serialisation): the window stays as tight as the spec's.
        pm = self._plane_min
        mean = sum(pm.values()) / len(pm) if pm else base
        pipe_rtt = mean if mean > 1.5 * base else base
        self.bdp = max(self.line_rate * pipe_rtt, float(self.mtu))
        # Deviation 11: the pipe also holds the host delay every packet meets.
        pipe = self.bdp + self.line_rate * self._floor
        self.target_delay = base / 2 if self._target_cfg is None else self._target_cfg
        self.qa_delay = 4 * self.target_delay if self._qa_cfg is None else self._qa_cfg
        self.fi_delay = self.target_delay / 10 if self._fi_cfg is None else self._fi_cfg
        self.max_window = max(max(self.max_bdp_factor * self.bdp,
                                  pipe + self.line_rate * self.target_delay) / self._senders,
                              self.min_window)

    def _clamp(self, w: float) -> float:
        return min(max(w, self.min_window), self.max_window)

    def _rtt_est(self) -> float:
        # The measured RTT once there is one: the configured guess may be far
        # off in either direction.
        return self._rtt_guess if self._srtt is None else max(self._srtt, self.base_rtt)

    def _qa_period(self) -> float:
        # UEC: QuickAdapt's measurement period is base RTT + target (the RTT
        # a packet has when the controller is on target).
        return self.base_rtt + self.target_delay

    def _pacing_rate(self) -> float:
        srtt = self.base_rtt if self._srtt is None else self._srtt
        # Pacing faster than our own NIC only moves the queue into the NIC.
        return min(self._cwnd / srtt * self.pacing_gain, self.line_rate)

    def _update_pacer(self) -> None:
        self._pacer.rate = self._pacing_rate()

    def _growth_rate(self, now: float) -> float:
        """Deviation 10: the rate at which the proportional increase turns
        queue headroom into window. UEC uses the line rate. On a tail-drop
        bottleneck that never marks (deviation 1 on) the line rate the
        connection was told may be far above the bottleneck's (a daemon left
        at its 10 Gbit/s default on 100 Mbit/s links): headroom x line rate
        then refilled the buffer past overflow within an RTT of every cut
        (docs/congestion.md, "Plain tail-drop links"). There the rate the
        connection delivered over the last RTT is used when lower: with a
        queue standing it is the bottleneck's drain rate."""
        if not (self.measured_growth and self._delay_is_mark):
            return self.line_rate
        return min(self.line_rate, self._delivery_rate(now))

    def _delivery_rate(self, now: float) -> float:
        """Bytes/s acknowledged over the last RTT (at least one MTU's worth)."""
        period = max(self._rtt_est(), self._qa_period())
        return max(self._delivered_since(now - period), self.mtu) / period

    def _delivered_since(self, start: float) -> int:
        return sum(b for t, b in self._delivered if t > start)

    def _quick_adapt(self, now: float) -> None:
        # The bytes that really got through in the last period are a safe
        # window; jumping there at once beats many MD steps when a plane dies
        # or an incast starts. Once per period, or a burst of loss reports
        # would ratchet the window down.
        period = max(self._qa_period(), self._rtt_est())
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
        floor = self.qa_floor * self.max_window
        target = max(delivered, floor)
        if target >= self._cwnd:
            return
        self._cwnd = self._clamp(target)
        self._last_signal = now
        self._fi_bytes = 0.0
        self._counts["quick_adapt"] += 1
        # ACKs of the packets already in flight still describe the old queue
        # (UEC ignores them too): no increase, no MD for one RTT, so the same
        # queue is neither punished twice nor "recovered" from before it drained.
        self._avg_delay = 0.0
        self._hold_until = now + self._rtt_est()
        self._update_pacer()

    def _scale_undo(self, factor: float) -> None:
        """A real congestion signal while a cut may still be undone applies
        to the window that would come back too."""
        if self._undo_cwnd is not None:
            self._undo_cwnd *= factor

    def _count_marks(self, now: float, acked: int, ecn: bool) -> None:
        """Fraction of the bytes acked with an ECN mark, per RTT round."""
        self._round_acked += acked
        if ecn:
            self._round_marked += acked
        if now < self._round_end:
            return
        if self._round_acked > 0 and self._round_end > -math.inf:
            frac = self._round_marked / self._round_acked
            self._round_frac = frac
            self._mark_alpha += self.mark_gain * (frac - self._mark_alpha)
        self._round_end = now + self._rtt_est()
        self._round_acked = self._round_marked = 0

    def _note_delay(self, now: float, d: float) -> None:
        """Deviation 1's history: the highest queueing delay per RTT."""
        calm = self._calm
        if not calm or now >= calm[-1][0] + self._rtt_est():
            calm.append([now, d, 0.0, d])
            while len(calm) > self.calm_rtts + 2:
                calm.popleft()
            if self.host_floor:
                self._set_floor()
        else:
            last = calm[-1]
            if d > last[1]:
                last[1] = d
            if d < last[3]:
                last[3] = d

    def _set_floor(self) -> None:
        """Deviation 11: the delay every packet met over the last
        ``FLOOR_RTTS`` whole RTTs (the lowest per-RTT minimum), on a fabric
        that never marked or trimmed. A busy host's scheduling delay (its
        sends and its peer's ACKs waiting for an event loop) lengthens every
        round trip, not only the first ones that set the base RTT; a window
        capped at the base RTT's BDP + target then left a tail-drop link
        idle (docs/congestion.md, "Plain tail-drop links"). maxwnd covers
        this floor too. Only maxwnd: the quadrants and delay as the mark
        still read the delay above the base RTT (senders sharing one
        tail-drop port see their queue as a floor too, and measured above
        it they filled the buffer: sim incast4, 0.15% -> 27.7% dropped).
        A queue standing that long would lift the floor and the window with
        it, so the floor rises only while the window binds, the connection
        delivers less than ``FULL_PIPE`` of its line rate, and no loss came
        in the last ``calm_rtts`` RTTs. Any lower per-RTT minimum brings it
        down at once."""
        calm = self._calm
        n = len(calm) - 1  # whole RTTs only
        floor = 0.0
        if n >= FLOOR_RTTS and not self._fabric_signals:
            # Never above QuickAdapt's delay trigger: more than that is no
            # host's scheduling delay but a queue (at a fabric's base RTT the
            # target, and so this cap, is microseconds).
            floor = min(min(calm[i][3] for i in range(n - FLOOR_RTTS, n)), self.qa_delay)
        if floor > self._floor and (
                not (self._blocked or self._prev_blocked)
                or self._delivery_rate(calm[-1][0]) >= FULL_PIPE * self.line_rate
                or any(b[2] == _LOSS for b in calm)):
            # Only while the window holds the sender back (the case this
            # exists for), the pipe is not full at the told rate (a full
            # pipe's extra delay is a queue) and no loss came in the last
            # ``calm_rtts`` RTTs (senders sharing a tail-drop port each
            # deliver a fraction of their rate: their delay is that queue).
            return
        if floor != self._floor:
            self._floor = floor
            self._set_base(self.base_rtt)

    def _calm_ceiling(self) -> float:
        """The highest delay the path carried without loss: over the last
        ``calm_rtts`` RTTs, leaving out the current and the previous RTT (the
        loss's own), every RTT with a loss, and the RTTs of a delay rising
        to one (a queue filling up to the drop). 0 when there is no such RTT,
        or when at least half of those RTTs had a loss (the path does not
        carry its delay without loss): every loss with a queue then counts."""
        calm = self._calm
        n = len(calm) - 2
        if n <= 0 or 2 * sum(1 for i in range(n) if calm[i][2] == _LOSS) >= n:
            return 0.0
        return max((calm[i][1] for i in range(n) if not calm[i][2]), default=0.0)

    def _unmarked_congestion(self, level: float) -> None:
        if self.loss_as_mark and not self._fabric_signals:
            if not self._delay_is_mark:
                self._mark_level = 0.0
                self._mark_bytes = 0
            self._delay_is_mark = True
            self._mark_level = max(self._mark_level, level)

    def _multiplicative_decrease(self, now: float) -> None:
        # One RTT of marks describes one queue, not many: at most one cut per
        # measured RTT, sized by the filtered delay (a single late packet
        # does not decide how much to cut).
        avg, target = self._avg_delay, self.target_delay
        if avg <= target or now - self._last_md < self._rtt_est():
            return
        # Deviation 4: sized by how much of the traffic was marked (delay as
        # the mark, deviation 1, marks everything above target: full size).
        scale = 1.0 if self.mark_gain == 0 or self._delay_is_mark else self._mark_alpha
        factor = max(1.0 - self.md_gain * scale * (avg - target) / avg, self.md_floor)
        self._cwnd = self._clamp(self._cwnd * factor)
        self._scale_undo(factor)
        self._last_md = now
        self._counts["md"] += 1

    def _shared_mark_decrease(self, now: float) -> None:
        # DCTCP's cut, by the marked fraction of the last RTT round: every
        # connection through the marking port sees about the same fraction,
        # so every one cuts by the same factor (UEC's delay-sized cut, and
        # UEC's NOOP below target, depend on each one's base RTT and noise).
        if now - self._last_md < self._rtt_est():
            return
        factor = max(1.0 - self.md_gain * self._round_frac / 2, self.md_floor)
        self._cwnd = self._clamp(self._cwnd * factor)
        self._scale_undo(factor)
        self._last_md = now
        self._counts["md"] += 1
        self._counts["shared_mark_md"] += 1

    # -- CongestionController ----------------------------------------------------

    def set_senders(self, n: int) -> None:
        """Deviation 8: ``n`` connections of this host are sending; each gets
        1/n of maxwnd (the QuickAdapt gate and floor follow it)."""
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
        self._count_marks(now, acked, sample.ecn)
        if sample.ecn:
            self._fabric_signals = True
            self._delay_is_mark = False
            self._last_signal = now

        rtt = sample.rtt
        if rtt is None or rtt <= 0:
            # No delay sample for this ACK (Karn): no quadrant to decide.
            self._update_pacer()
            return
        self._srtt = rtt if self._srtt is None else 0.875 * self._srtt + 0.125 * rtt
        if rtt < self._min_rtt:
            self._min_rtt = rtt
            self._set_base(rtt)
            self._cwnd = min(self._cwnd, self.max_window)
        base = self._plane_base.get(sample.plane)
        if base is None or rtt < base:
            self._plane_base[sample.plane] = base = rtt
        d = max(rtt - base, 0.0)
        self._note_delay(now, d)
        if self._delay_is_mark and d > REVOKE_FACTOR * self._mark_level:
            # Well above the delay of the drop that turned deviation 1 on,
            # with no drop: no tail-drop buffer caps this delay (a busy host
            # whose first loss came while its delay was still rising). Off
            # until a loss comes with more delay than the path carries anyway.
            self._delay_is_mark = False
            self._counts["mark_revoked"] += 1
        if now < self._hold_until:
            self._update_pacer()
            return
        self._delay = d
        self._avg_delay += self.delay_ewma * (d - self._avg_delay)
        if self._avg_delay > self.qa_delay:
            if now - self._last_lh_trim < self.trim_qa_rtts * self._rtt_est():
                # Deviation 7: behind a trimming last hop a queue at its
                # threshold is the fabric's design, and its trims say
                # exactly what each flow has to give up.
                self._counts["qa_trim_quiet"] += 1
            else:
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
        # Application-limited: a window the sender does not fill says nothing
        # about the network; growing it would only store a burst for later.
        if sample.in_flight < self._cwnd / 2:
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
                headroom = self.pi_gain * (target - d) * self._growth_rate(now)
                inc = fair + headroom * acked / self._cwnd
                self._counts["proportional_inc"] += 1
        else:
            self._fi_bytes = 0.0
            inc = fair
            if now - self._last_signal >= self.quiet_rtts * self._rtt_est():
                inc = max(inc, self.probe_gain * acked)
            self._counts["fair_inc"] += 1
        self._cwnd = self._clamp(self._cwnd + inc)
        self._update_pacer()

    def on_plane_rtt(self, *, plane: int, rtt: float) -> None:
        old = self._plane_min.get(plane)
        if rtt > 0 and (old is None or rtt < old) and \
                (old is not None or len(self._plane_min) < 64):
            self._plane_min[plane] = rtt
            self._set_base(self.base_rtt)

    def on_nack(self, *, now: float, trimmed_bytes: int, last_hop: bool,
                rtt: float | None = None, plane: int | None = None) -> None:
        if self.trim_base and rtt is not None and rtt > 0 and plane is not None:
            base = self._plane_base.get(plane)
            if base is None or rtt < base:
                self._plane_base[plane] = rtt
        # A trim says exactly how many bytes the network could not take now;
        # at the last hop it is incast, in the fabric imbalance, and both
        # mean that much less should be in flight.
        self._counts["trimmed_bytes"] += trimmed_bytes
        self._last_signal = now
        self._fabric_signals = True
        self._delay_is_mark = False
        self._fi_bytes = 0.0
        self._cwnd = self._clamp(self._cwnd - trimmed_bytes)
        if self._undo_cwnd is not None:
            self._undo_cwnd -= trimmed_bytes
        if last_hop:
            self._last_lh_trim = now
        if last_hop and self.trim_md and now - self._last_md >= self._rtt_est():
            # Deviation 6: AIMD's cut, once per RTT (the subtraction alone
            # keeps any split of a queue pinned at the trim threshold).
            self._cwnd = self._clamp(self._cwnd * (1.0 - self.trim_md))
            self._scale_undo(1.0 - self.trim_md)
            self._last_md = now
            self._counts["md"] += 1
        self._update_pacer()

    def on_loss(self, *, now: float, lost_bytes: int) -> None:
        self._counts["lost_bytes"] += lost_bytes
        self._last_signal = now
        self._fi_bytes = 0.0
        calm = self._calm
        if calm:
            # This RTT had a loss, and the RTTs of a delay rising to it (each
            # one's peak above the one before) were the queue filling up.
            calm[-1][2] = _LOSS
            j = len(calm) - 2
            if j >= 0 and not calm[j][2]:
                calm[j][2] = _RISE
            while j > 0 and calm[j - 1][1] < calm[j][1] and not calm[j - 1][2]:
                calm[j - 1][2] = _RISE
                j -= 1
        level = max(self._delay, self._avg_delay)
        if level >= self.target_delay and level > self._calm_ceiling():
            # A loss with a queue behind it, and more of it than the path
            # carried without loss: a tail-drop bottleneck overflowing, if
            # the fabric never marked or trimmed (deviation 1 above). A loss
            # within the delay the path carries anyway (a busy host's
            # scheduling delay) says nothing about a queue.
            peak = max((b[1] for b in list(calm)[-2:]), default=0.0)
            self._unmarked_congestion(max(level, peak))
            if self._delay_is_mark:
                self._mark_bytes += lost_bytes
        before = self._cwnd
        self._quick_adapt(now)
        if now >= self._undo_until:
            self._undo_cwnd = None  # too late for the last cut's losses to be undone
        if self._cwnd < before and self._undo_cwnd is None:
            # Deviation 9: this cut comes back if every loss behind it (and
            # every one declared before it is settled) turns out spurious.
            self._undo_cwnd, self._undo_bytes = before, 0
        if self._undo_cwnd is not None:
            self._undo_bytes += lost_bytes
            self._undo_until = now + UNDO_RTTS * self._rtt_est()
        self._update_pacer()

    def on_spurious_loss(self, *, now: float, lost_bytes: int) -> None:
        # Deviation 1 stands down when every loss that turned it on (or kept
        # it on) is acknowledged after all: reordering is no tail-drop buffer
        # overflowing. (Issue 13: with planes of 4x different RTT, packets
        # declared lost in the first RTTs, before the slow plane was timed,
        # turned delay into the mark, and every ACK through the slow plane
        # then cut the window: 0.89 of capacity instead of 1.00.)
        self._counts["spurious_bytes"] += lost_bytes
        if self._delay_is_mark and self._mark_bytes > 0:
            self._mark_bytes -= lost_bytes
            if self._mark_bytes <= 0:
                self._delay_is_mark = False
                self._counts["mark_revoked"] += 1
        if self._undo_cwnd is not None:
            if now >= self._undo_until:
                self._undo_cwnd = None
                return
            self._undo_bytes -= lost_bytes
            if self._undo_bytes <= 0:
                # Deviation 9: every loss that cut the window was a packet
                # only late (reordered behind a slower plane or host): the
                # network delivered at the old rate, so the old window stands
                # (RFC 4015's response to a spurious timeout; Linux's undo).
                if self._undo_cwnd > self._cwnd:
                    self._cwnd = self._clamp(self._undo_cwnd)
                    self._hold_until = -math.inf
                    self._counts["qa_undone"] += 1
                    self._update_pacer()
                self._undo_cwnd = None

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
            "min_rtt": min(self._plane_base.values(), default=math.nan),
            "pacing_rate": self._pacer.rate,
            "bdp": self.bdp,
            "max_window": self.max_window,
            "base_rtt": self.base_rtt,
            "target_delay": self.target_delay,
            "delay_is_mark": float(self._delay_is_mark),
            "calm_delay": self._calm_ceiling(),
            "host_floor": self._floor,
            "mark_alpha": self._mark_alpha,
            "host_senders": float(self._senders),
        }
        out.update(self._counts)
        return out
