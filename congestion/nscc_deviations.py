"""Braid's deviations from UEC NSCC, each a hook the core (``congestion/nscc.py``)
calls only when its switch (``NsccParams``) is on. Why each exists:
docs/decisions/0020-nscc-deviations.md and docs/congestion.md.

The hooks live in a mixin so that the core reads as the published algorithm
and each deviation's state and rule stay together here.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from congestion.base import PlaneRtt

#: Deviation 1 stands down when a delay sample exceeds this many times the
#: delay of the RTT whose loss turned it on (no tail-drop buffer caps it).
REVOKE_FACTOR = 1.25
#: Deviation 9: a QuickAdapt cut can be undone for this many RTTs after the
#: last loss behind it (the time a late copy's SACK may take to come).
UNDO_RTTS = 2.0
#: Deviation 11: whole RTTs over which the host delay floor is the lowest delay.
FLOOR_RTTS = 8
#: ... and stops rising once the connection delivers this share of its line rate.
FULL_PIPE = 0.75
#: Deviation 12: smoothing, per RTT, of the host delay maxwnd covers.
HOST_GAIN = 0.25


class NsccDeviations:
    """State and hooks of the deviations; mixed into ``Nscc``."""

    # Owned by the core (congestion/nscc.py).
    _cwnd: float
    max_window: float
    _min_rtt: float
    _last_md: float
    _last_signal: float
    _hold_until: float
    _delay: float
    _avg_delay: float
    _counts: dict[str, float]
    _blocked: bool
    _prev_blocked: bool
    loss_as_mark: bool
    host_floor: bool
    host_delay_window: bool
    mtu: int
    line_rate: float
    base_rtt: float
    _paths: PlaneRtt
    target_delay: float
    qa_delay: float
    md_gain: float
    md_floor: float
    calm_rtts: int
    mark_gain: float
    trim_md: float
    trim_qa_rtts: float

    def _rtt_est(self) -> float:
        raise NotImplementedError

    def _clamp(self, w: float) -> float:
        raise NotImplementedError

    def _update_pacer(self) -> None:
        raise NotImplementedError

    def _qa_period(self) -> float:
        raise NotImplementedError

    def _delivered_since(self, start: float) -> int:
        raise NotImplementedError

    def _set_base(self, base: float) -> None:
        raise NotImplementedError

    def _init_deviations(self) -> None:
        # Deviation 1: has the fabric ever signalled congestion itself (an
        # ECN mark or a trim)? If not, and it drops packets with a queue
        # behind them, delay above target is the mark.
        self._fabric_signals = False
        self._delay_is_mark = False
        # ... and only a loss the loss classifier judges a tail-drop
        # overflow counts (transport/loss_policy.py, ``LossHistory``: more
        # queueing delay than the path carried without loss). It hears each
        # ACK's delay through this sink (``report_delays``).
        self._delay_sink: Callable[[float, float, float], None] | None = None
        # The highest delay of the RTTs whose loss made delay the mark: a
        # tail-drop buffer overflowed there, so it caps the queue.
        self._mark_level = 0.0
        # The bytes whose loss made (or kept) delay the mark since it was
        # turned on: if every one of them is acknowledged after all (a copy
        # only reordered behind a slower plane's), there was no overflow.
        self._mark_bytes = 0
        # The window when delay last became the mark.
        self._mark_cwnd = 0.0
        # Deviation 5: the marked fraction of the last whole RTT round.
        self._round_frac = 0.0
        # Deviation 4: the fraction of bytes acked with a mark, per RTT round,
        # filtered (DCTCP's alpha; starts at 1, so a first MD is full size).
        self._mark_alpha = 1.0
        self._round_end = -math.inf
        self._round_acked = 0
        self._round_marked = 0
        # Deviation 7: when a last hop last trimmed this connection's data.
        self._last_lh_trim = -math.inf
        # Deviation 9: the window before a QuickAdapt that a loss triggered,
        # the bytes declared lost since that are not yet acknowledged after
        # all, and until when an acknowledgement may still prove them
        # spurious (then the cut is undone).
        self._undo_cwnd: float | None = None
        self._undo_bytes = 0
        self._undo_until = -math.inf
        # Deviation 11: the host delay floor (``_floor_on_delay``), seconds,
        # and its history: per RTT-long bucket [start, lowest delay sample,
        # 1 if a loss was reported in it], as many as deviation 1 keeps
        # (only with the switch on: a half-open connection's memory is bounded).
        self._floor = 0.0
        self._floor_rtts: deque[list[float]] | None = deque() if self.host_floor else None
        # Deviation 12: the host delay maxwnd covers (seconds), and this
        # RTT's sum and count of samples, and when this RTT ends.
        self._host = 0.0
        self._host_sum = 0.0
        self._host_n = 0
        self._host_until = -math.inf

    # -- 1. loss as the mark on a fabric that never marks --------------------------

    def report_delays(self, sink: Callable[[float, float, float], None] | None) -> None:
        """Hand each ACK's queueing delay to ``sink(now, delay, rtt)`` (the
        connection's loss classifier keeps the per-RTT history that judges a
        loss a tail-drop overflow: transport/loss_policy.py). Only while
        deviation 1 is on: without it no loss is read as an overflow."""
        self._delay_sink = sink if self.loss_as_mark else None

    @property
    def queue_level(self) -> float:
        """The queueing delay behind a loss reported now: the last ACK's or
        the filtered one, whichever is higher (seconds)."""
        return max(self._delay, self._avg_delay)

    def _mark_revoke(self) -> None:
        # A delay sample well above (REVOKE_FACTOR x) the delay of the drop
        # that turned deviation 1 on, with no drop: no tail-drop buffer caps
        # this delay (a busy host whose first loss came while its delay was
        # still rising). Off until a loss comes with more delay than the path
        # carries anyway.
        self._delay_is_mark = False
        self._counts["mark_revoked"] += 1

    def _mark_on_overflow(self, lost_bytes: int, level: float) -> None:
        # The loss classifier judged these losses a tail-drop bottleneck
        # overflowing at queueing delay ``level``: more queue behind them
        # than the path carried without loss. If the fabric never marked or
        # trimmed, delay above target is the mark from now on.
        if not self._fabric_signals:
            if not self._delay_is_mark:
                self._mark_level = 0.0
                self._mark_bytes = 0
                self._mark_cwnd = self._cwnd
            self._delay_is_mark = True
            self._mark_level = max(self._mark_level, level)
        if self._delay_is_mark:
            self._mark_bytes += lost_bytes

    def _mark_on_random(self) -> None:
        # The loss classifier found the path losing at random (losses the
        # cuts on delay did not stop): delay above target is no tail-drop
        # queue's mark, and the delay a busy host adds would cut the window
        # to one packet. Off until a loss is judged an overflow again.
        if self._delay_is_mark:
            self._delay_is_mark = False
            self._counts["mark_revoked"] += 1
            self._counts["mark_revoked_random"] += 1
            if self._mark_cwnd > self._cwnd:
                # Every cut on delay since it became the mark read a queue
                # that was not there: the window comes back.
                self._cwnd = self._clamp(self._mark_cwnd)
                self._hold_until = -math.inf
                self._update_pacer()

    def _mark_on_spurious(self, lost_bytes: int) -> None:
        # Deviation 1 stands down when every loss that turned it on (or kept
        # it on) is acknowledged after all: reordering is no tail-drop buffer
        # overflowing. (With planes of 4x different RTT, packets declared
        # lost in the first RTTs, before the slow plane was timed, turned
        # delay into the mark, and every ACK through the slow plane then cut
        # the window: 0.89 of capacity instead of 1.00.)
        if self._delay_is_mark and self._mark_bytes > 0:
            self._mark_bytes -= lost_bytes
            if self._mark_bytes <= 0:
                self._delay_is_mark = False
                self._counts["mark_revoked"] += 1

    # -- 4 and 5. marks per RTT round -----------------------------------------------

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

    # -- 6. a last hop that trims and does not mark ------------------------------------

    def _trim_lowers_base(self, rtt: float | None, plane: int | None) -> None:
        # The trimmed header skipped the trimming port's data queue: its
        # round trip is a base RTT sample for its plane.
        if rtt is not None and rtt > 0 and plane is not None:
            before = self._paths.delay_base(plane)
            if self._paths.delay_sample(plane, rtt) == before:
                return
            # ... and the connection's, and its pipe's (``_pipe_bases``): one
            # that starts while the last hop's queue stands never sees an
            # ACK without it, and its base RTT (so its target and maxwnd)
            # would be that queue.
            # Before any sample the base is the configured guess, which the
            # first sample replaces (as in ``on_ack``), lower or not.
            if rtt < self._min_rtt:
                self._min_rtt = rtt
            self._set_base(self._min_rtt)
            self._cwnd = min(self._cwnd, self.max_window)

    def _pipe_bases(self) -> list[float]:
        """Each plane's base RTT for the pipe: its smallest SACK echo, or
        its smallest delay sample where that is lower (a trimmed header's
        round trip skips the trimming port's queue, deviation 6): a
        connection that starts while a plane's queue stands learns that
        plane's smallest echo with the queue in it."""
        paths = self._paths
        out = []
        for plane, b in paths.bases().items():
            d = paths.delay_base(plane)
            out.append(b if d is None or d >= b else d)
        return out

    def _last_hop_trim_cut(self, now: float) -> None:
        if self.trim_md and now - self._last_md >= self._rtt_est():
            # AIMD's cut, once per RTT (the subtraction alone keeps any
            # split of a queue pinned at the trim threshold).
            self._cwnd = self._clamp(self._cwnd * (1.0 - self.trim_md))
            self._scale_undo(1.0 - self.trim_md)
            self._last_md = now
            self._counts["md"] += 1

    # -- 7. no QuickAdapt on delay behind a trimming last hop -------------------------

    def _trim_quiets_qa(self, now: float) -> bool:
        # Behind a trimming last hop a queue at its threshold is the fabric's
        # design, and its trims say exactly what each flow has to give up.
        if now - self._last_lh_trim < self.trim_qa_rtts * self._rtt_est():
            self._counts["qa_trim_quiet"] += 1
            return True
        return False

    # -- 9. a QuickAdapt cut undone when its losses were not ------------------------

    def _scale_undo(self, factor: float) -> None:
        """A real congestion signal while a cut may still be undone applies
        to the window that would come back too."""
        if self._undo_cwnd is not None:
            self._undo_cwnd *= factor

    def _undo_on_loss(self, now: float, before: float, lost_bytes: int) -> None:
        if now >= self._undo_until:
            self._undo_cwnd = None  # too late for the last cut's losses to be undone
        if self._cwnd < before and self._undo_cwnd is None:
            # This cut comes back if every loss behind it (and every one
            # declared before it is settled) turns out spurious.
            self._undo_cwnd, self._undo_bytes = before, 0
        if self._undo_cwnd is not None:
            self._undo_bytes += lost_bytes
            self._undo_until = now + UNDO_RTTS * self._rtt_est()

    def _undo_on_spurious(self, now: float, lost_bytes: int) -> None:
        if self._undo_cwnd is None:
            return
        if now >= self._undo_until:
            self._undo_cwnd = None
            return
        self._undo_bytes -= lost_bytes
        if self._undo_bytes <= 0:
            # Every loss that cut the window was a packet only late
            # (reordered behind a slower plane or host): the network
            # delivered at the old rate, so the old window stands (RFC 4015's
            # response to a spurious timeout; Linux's undo).
            if self._undo_cwnd > self._cwnd:
                self._cwnd = self._clamp(self._undo_cwnd)
                self._hold_until = -math.inf
                self._counts["qa_undone"] += 1
                self._update_pacer()
            self._undo_cwnd = None

    # -- 10. growth at the measured rate on a tail-drop bottleneck -------------------

    def _delivery_rate(self, now: float) -> float:
        """Bytes/s acknowledged over the last RTT (at least one MTU's worth)."""
        period = max(self._rtt_est(), self._qa_period())
        return max(self._delivered_since(now - period), self.mtu) / period

    def _measured_growth_rate(self, now: float) -> float:
        """The rate at which the proportional increase turns queue headroom
        into window. UEC uses the line rate. On a tail-drop bottleneck that
        never marks (delay is the mark, deviation 1) the line rate the
        connection was told may be far above the bottleneck's (a daemon left
        at its 10 Gbit/s default on 100 Mbit/s links): headroom x line rate
        then refilled the buffer past overflow within an RTT of every cut
        (docs/congestion.md, "Plain tail-drop links"). There the rate the
        connection delivered over the last RTT is used when lower: with a
        queue standing it is the bottleneck's drain rate."""
        if not self._delay_is_mark:
            return self.line_rate
        return min(self.line_rate, self._delivery_rate(now))

    # -- 11. a host delay floor -------------------------------------------------------

    def _floor_on_delay(self, now: float, d: float) -> None:
        """Per RTT, the lowest queueing delay; at each new RTT the floor is
        reconsidered (``_set_floor``)."""
        rtts = self._floor_rtts
        assert rtts is not None  # host_floor is on
        if not rtts or now >= rtts[-1][0] + self._rtt_est():
            rtts.append([now, d, 0.0])
            while len(rtts) > self.calm_rtts + 2:
                rtts.popleft()
            self._set_floor()
        elif d < rtts[-1][1]:
            rtts[-1][1] = d

    def _floor_on_loss(self) -> None:
        if self._floor_rtts:
            self._floor_rtts[-1][2] = 1.0

    def _set_floor(self) -> None:
        """The delay every packet met over the last ``FLOOR_RTTS`` whole RTTs
        (the lowest per-RTT minimum), on a fabric that never marked or
        trimmed. A busy host's scheduling delay (its sends and its peer's
        ACKs waiting for an event loop) lengthens every round trip, not only
        the first ones that set the base RTT; a window capped at the base
        RTT's BDP + target then left a tail-drop link idle
        (docs/congestion.md, "Plain tail-drop links"). maxwnd covers this
        floor too. Only maxwnd: the quadrants and delay as the mark still
        read the delay above the base RTT (senders sharing one tail-drop
        port see their queue as a floor too, and measured above it they
        filled the buffer: sim incast4, 0.15% -> 27.7% dropped). A queue
        standing that long would lift the floor and the window with it, so
        the floor rises only while the window binds, the connection delivers
        less than ``FULL_PIPE`` of its line rate, and no loss came in the
        last ``calm_rtts`` RTTs. Any lower per-RTT minimum brings it down at
        once."""
        rtts = self._floor_rtts
        assert rtts is not None  # host_floor is on
        n = len(rtts) - 1  # whole RTTs only
        floor = 0.0
        if n >= FLOOR_RTTS and not self._fabric_signals:
            # Never above QuickAdapt's delay trigger: more than that is no
            # host's scheduling delay but a queue (at a fabric's base RTT the
            # target, and so this cap, is microseconds).
            floor = min(min(rtts[i][1] for i in range(n - FLOOR_RTTS, n)), self.qa_delay)
        if floor > self._floor and (
                not (self._blocked or self._prev_blocked)
                or self._delivery_rate(rtts[-1][0]) >= FULL_PIPE * self.line_rate
                or any(b[2] for b in rtts)):
            # Only while the window holds the sender back (the case this
            # exists for), the pipe is not full at the told rate (a full
            # pipe's extra delay is a queue) and no loss came in the last
            # ``calm_rtts`` RTTs (senders sharing a tail-drop port each
            # deliver a fraction of their rate: their delay is that queue).
            return
        if floor != self._floor:
            self._floor = floor
            self._set_base(self.base_rtt)
            self._cwnd = min(self._cwnd, self.max_window)

    # -- 12. a window that covers the measured host delay -----------------------------

    def _host_on_ack(self, now: float, host_delay: float) -> None:
        """Each RTT, the mean host delay of its samples, smoothed (gain
        ``HOST_GAIN``) and at most ``qa_delay``, is what maxwnd covers
        beyond the fabric's pipe and target queue.

        The RTT samples no longer hold it (the I/O layer measured it with
        the kernel's receive stamps and the peer reported it in the SACK's
        ACK Delay), so the delay NSCC reads is the fabric's: a busy host's
        2 ms of socket waits and event loops no longer read as a queue above
        a 2 ms target. But the bytes in flight still spend that time in the
        hosts, so a window sized to the fabric's round trip alone left a
        tail-drop link idle (docs/congestion.md, "Host delay"). The mean, not
        a floor: it is what the average packet in flight spends there.
        Capped at QuickAdapt's trigger: more than that is a host that cannot
        keep up, which its losses, not a larger window, must answer."""
        self._host_sum += host_delay
        self._host_n += 1
        if now < self._host_until:
            return
        self._host_until = now + self._rtt_est()
        mean = self._host_sum / self._host_n
        self._host_sum, self._host_n = 0.0, 0
        host = min(mean if self._host == 0.0 else self._host + HOST_GAIN * (mean - self._host),
                   self.qa_delay)
        if abs(host - self._host) > 0.1 * max(self._host, 1e-6) or host == 0.0:
            self._host = host
            self._set_base(self.base_rtt)
            # A smaller cap binds at once (the window never exceeds maxwnd).
            self._cwnd = min(self._cwnd, self.max_window)
        else:
            self._host = host
