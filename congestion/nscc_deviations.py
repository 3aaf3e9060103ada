"""Braid's deviations from UEC NSCC, each a hook the core (``congestion/nscc.py``)
calls only when its switch (``NsccParams``) is on. Why each exists:
docs/decisions/0020-nscc-deviations.md and docs/congestion.md.

The hooks live in a mixin so that the core reads as the published algorithm
and each deviation's state and rule stay together here.
"""

from __future__ import annotations

import math
from collections import deque

from congestion.base import PlaneRtt

#: Deviation 1 stands down when a delay sample exceeds this many times the
#: delay of the RTT whose loss turned it on (no tail-drop buffer caps it).
REVOKE_FACTOR = 1.25
_LOSS, _RISE = 2.0, 1.0  # deviation 1's per-RTT flags
#: Deviation 9: a QuickAdapt cut can be undone for this many RTTs after the
#: last loss behind it (the time a late copy's SACK may take to come).
UNDO_RTTS = 2.0


class NsccDeviations:
    """State and hooks of the deviations; mixed into ``Nscc``."""

    # Owned by the core (congestion/nscc.py).
    _cwnd: float
    _last_md: float
    _last_signal: float
    _hold_until: float
    _delay: float
    _avg_delay: float
    _counts: dict[str, float]
    _paths: PlaneRtt
    target_delay: float
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

    def _init_deviations(self) -> None:
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

    # -- 1. loss as the mark on a fabric that never marks --------------------------

    def _note_delay(self, now: float, d: float) -> None:
        """Deviation 1's history: the highest queueing delay per RTT."""
        calm = self._calm
        if not calm or now >= calm[-1][0] + self._rtt_est():
            calm.append([now, d, 0.0])
            while len(calm) > self.calm_rtts + 2:
                calm.popleft()
        elif d > calm[-1][1]:
            calm[-1][1] = d

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

    def _mark_revoke(self) -> None:
        # A delay sample well above (REVOKE_FACTOR x) the delay of the drop
        # that turned deviation 1 on, with no drop: no tail-drop buffer caps
        # this delay (a busy host whose first loss came while its delay was
        # still rising). Off until a loss comes with more delay than the path
        # carries anyway.
        self._delay_is_mark = False
        self._counts["mark_revoked"] += 1

    def _mark_on_loss(self, lost_bytes: int) -> None:
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
            # the fabric never marked or trimmed. A loss within the delay the
            # path carries anyway (a busy host's scheduling delay) says
            # nothing about a queue.
            peak = max((b[1] for b in list(calm)[-2:]), default=0.0)
            if not self._fabric_signals:
                if not self._delay_is_mark:
                    self._mark_level = 0.0
                    self._mark_bytes = 0
                self._delay_is_mark = True
                self._mark_level = max(self._mark_level, max(level, peak))
            if self._delay_is_mark:
                self._mark_bytes += lost_bytes

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
            self._paths.delay_sample(plane, rtt)

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
