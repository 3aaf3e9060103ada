"""Plane liveness: when a plane is silent, parked, and back.

Time since a plane's oldest unanswered send (not since anything was last
heard) is the evidence, with the losses declared on it; see ``EvSet``.
"""

from __future__ import annotations

import math
from itertools import repeat

from transport.ev_state import Ev, EvEvent, PlaneState
from transport.paths.ev_core import (
    _MAX_REPROBES,
    _MAX_UNANSWERED,
    ASSUMED_BAD,
    DENIED,
    GOOD,
    PLANE_SILENCE_RTTS,
    EvSetCore,
    _Plane,
)


class PlaneLiveness(EvSetCore):
    """Sends, answers and losses per plane; parking and unparking."""

    def on_sent(self, ev: Ev, now: float) -> None:
        """A packet left on ``ev`` (the liveness rule times unanswered sends)."""
        q = self._planes[ev.plane].unanswered
        q.append(now)
        if len(q) > _MAX_UNANSWERED:
            head = q[0]
            kept = list(q)[1::2]
            q.clear()
            q.append(head)
            q.extend(kept)

    def on_sent_run(self, ev: Ev, now: float, n: int) -> None:
        """``n`` packets left on ``ev`` at ``now`` (``on_sent`` each)."""
        q = self._planes[ev.plane].unanswered
        if len(q) + n <= _MAX_UNANSWERED:
            q.extend(repeat(now, n))
            return
        for _ in range(n):
            self.on_sent(ev, now)

    def _heard(self, ev: Ev, now: float, sent: float | None = None) -> None:
        """Something came back from ``ev``'s plane, answering a packet sent at
        ``sent`` (None: unknown, taken as ``now``)."""
        plane = self._planes[ev.plane]
        self.model.heard[plane.index] = now
        plane.heard_srtt = self.srtt
        if plane.lossy:
            plane.lossy.clear()
        sent = now if sent is None else sent
        if sent > self._newest_answer:
            self._newest_answer = sent
        if sent > plane.answered_sent:
            plane.answered_sent = sent
            q = plane.unanswered
            while q and q[0] <= sent:
                q.popleft()
            if plane.liveness_probe_at is not None and sent >= plane.liveness_probe_at:
                plane.liveness_probe_at = None
                plane.liveness_rounds = 0
                plane.liveness_round_at = -math.inf

    def _silence(self, plane: _Plane) -> float:
        """``plane_silence``, stretched for a plane slower than the connection's
        smoothed RTT (its own RTT samples say so)."""
        if self._silence_fixed:
            return self.plane_silence
        srtt = self.model.answer_srtt.get(plane.index)
        if srtt is None or srtt <= self.srtt:
            return self.plane_silence
        return PLANE_SILENCE_RTTS * srtt + self._ack_delay

    def _plane_loss(self, ev: Ev, now: float, sent: float) -> None:
        """A packet sent on ``ev`` at ``sent`` was declared lost. Too weak to
        condemn the EV (one loss is noise), but every loss is evidence about
        the plane: with the time since its oldest unanswered send, it parks
        a dead plane however little is in flight."""
        plane = self._planes[ev.plane]
        if sent > plane.loss_sent:
            plane.loss_sent = sent
        plane.lossy.add(ev.index)
        if plane.state is PlaneState.UP:
            self._check_plane(plane, now)

    def _check_plane(self, plane: _Plane, now: float) -> None:
        bad = active = 0
        for ev in plane.evs:
            if ev.state is not DENIED:
                active += 1
                if ev.state is ASSUMED_BAD:
                    bad += 1
        if active == 0:
            # Every EV denied: nothing can be sent or probed here, and a
            # deadline left armed would fire without effect for ever.
            plane.unanswered.clear()
            plane.lossy.clear()
            plane.liveness_probe_at = None
            return
        # Under spraying a dead plane shows up as losses on many EVs at once;
        # waiting for each EV's own evidence would keep feeding the dead plane
        # for many RTTs (MRC notices a plane down within a few RTTs).
        many_bad = bad >= self.plane_bad_fraction * active
        others_up = self._others_up(plane)
        if many_bad and others_up:
            self._park(plane, now, "bad_evs")
            return
        action = self._next_action(plane, others_up)
        if action is not None and now >= action[0]:
            if action[1]:
                self._park(plane, now)
                return
        elif not (many_bad and plane.liveness_probe_at is None):
            return
        # Ask the plane: a probe answered clears ``liveness_probe_at`` (``_heard``).
        if plane.liveness_probes_due == 0:
            if plane.liveness_probe_at is not None:  # unanswered, no evidence: ask again
                plane.liveness_rounds += 1
            if not (others_up and self._silence_deadline(plane, others_up)[1]):
                self._hurry_parked(now)
            plane.liveness_probes_due = self.plane_probe_evs
            plane.liveness_due_at = now

    def _hurry_parked(self, now: float) -> None:
        """The last live plane looks silent, or no plane answers anything: a
        parked plane may be the one that works (a gray plane parked just
        before the others died), and its answer is the evidence the silent
        ones wait for (or the live plane the last one needs). Probe it now."""
        for ev in self._probing.values():
            if self._planes[ev.plane].state is PlaneState.PARKED and \
                    ev.next_probe is not None and ev.next_probe > now:
                ev.next_probe = now

    def _others_up(self, plane: _Plane) -> bool:
        return any(p.state is PlaneState.UP for p in self._planes if p is not plane)

    def probe_wait(self, plane: _Plane | None = None) -> float:
        """How long a liveness probe has to be answered: the receiver answers
        a probe at once, so one smoothed RTT (the plane's, if slower) plus the
        ACK delay (as margin for queueing), at most another RTT, is generous;
        never more than the plane's silence. (The peer's SACK hold does not
        delay a probe's answer: a margin of a SACK batch's 0.5 ms probed every
        plane of a paced stream before each batch SACK.)"""
        if plane is None:
            return min(self.srtt + min(self._ack_delay, self.srtt), self.plane_silence)
        srtt = self.model.answer_srtt.get(plane.index)
        rtt = self.srtt if srtt is None else max(self.srtt, srtt)
        return min(rtt + min(self._ack_delay, rtt), self._silence(plane))

    def _next_action(self, plane: _Plane, others_up: bool) -> tuple[float, bool] | None:
        """When ``_check_plane`` next acts on an UP plane's silence, and
        whether it parks it then (True) or sends it liveness probes (False);
        None: only new evidence can make it act.

        With evidence beyond time alone (``_silence_deadline``):
        ``plane_silent_sends`` unanswered sends park the plane at its silence
        deadline. Fewer are weak evidence (one random loss, or one lost SACK
        covering up to ack_every packets, looks the same): the plane is
        probed ``probe_wait`` before the deadline, so that the probe's own
        answer is due by then, and parked if the probe is not answered in
        ``probe_wait`` (a whole extra ``plane_silence`` after the deadline
        let a one-message client feed dead planes for 9 smoothed RTTs). The
        last live plane is probed only at the deadline and given
        ``plane_silence`` to answer. Without evidence (every plane that
        could answer is silent too, e.g. the only live one just lost its
        SACKs) the plane is probed, and probed again with backoff while
        nothing answers: the first probe answered on another plane is the
        evidence that parks it."""
        deadline, evidence = self._silence_deadline(plane, others_up)
        if deadline is None:
            return None
        probe = plane.liveness_probe_at
        wait = self.probe_wait(plane)
        if evidence and others_up and self._strong(plane):
            return deadline, True
        if probe is None:
            return (deadline - wait if others_up else deadline), False
        if evidence:
            return max(deadline, probe + (wait if others_up else self._silence(plane))), True
        if plane.liveness_rounds >= _MAX_REPROBES:
            return None
        return plane.liveness_round_at + wait * (1 << plane.liveness_rounds), False

    def _strong(self, plane: _Plane) -> bool:
        """``plane_silent_sends`` or more unanswered sends, not counting the
        plane's own pending liveness probes (or no send recorded at all: the
        caller reports losses only; trust them)."""
        q = plane.unanswered
        probes = self.plane_probe_evs if plane.liveness_probe_at is not None else 0
        return not q or len(q) - probes >= self.plane_silent_sends

    def _ups(self) -> int:
        """How many planes are UP (``_plane_deadline``'s ``ups``)."""
        n = 0
        for p in self._planes:
            if p.state is PlaneState.UP:
                n += 1
        return n

    def _plane_deadline(self, plane: _Plane, ups: int | None = None) -> float | None:
        """When ``_check_plane`` may next act on an UP plane's silence (None:
        only new evidence can make it). ``due_probes`` tests exactly
        ``now >= _plane_deadline(plane)``, the time ``next_timer`` arms, and
        ``_check_plane`` then always acts (parks or asks for probes).
        ``ups``: ``_ups()`` if the caller has it (one count per pass, not one
        per plane: this runs for every plane at every timer query)."""
        if plane.state is not PlaneState.UP:
            return None
        if plane.liveness_probes_due:
            return plane.liveness_due_at
        # The plane is UP: the others are up if more than one is.
        action = self._next_action(plane, self._others_up(plane) if ups is None else ups > 1)
        return None if action is None else action[0]

    def _silence_deadline(self, plane: _Plane,
                          others_up: bool) -> tuple[float | None, bool]:
        """When the plane counts as silent (``plane_silence`` after its oldest
        unanswered send), and whether there is evidence beyond time alone: a
        packet sent after its newest answered one was declared lost, or
        another plane answered a packet sent later (the plane-level form of
        the time rule, without waiting for the reorder window of per-packet
        loss inference). Without such evidence, but with every other live
        plane waiting for answers too (say they all died at once, or the
        only answering one was just parked), the plane is still probed
        (``_next_action``); the last live plane waits for evidence.
        (None, _): no deadline."""
        q = plane.unanswered
        if not q:
            # No send recorded (a caller that reports losses only): the
            # older rule, losses on ``plane_loss_evs`` distinct EVs and
            # nothing heard for ``plane_silence``.
            if len(plane.lossy) < min(self.plane_loss_evs, len(plane.evs)):
                return None, False
            return self.model.heard[plane.index] + self._silence(plane), True
        lost_unanswered = plane.loss_sent > plane.answered_sent and plane.loss_sent >= q[0]
        evidence = lost_unanswered or self._newest_answer > q[0]
        if not evidence and not (others_up and all(
                p.unanswered for p in self._planes
                if p is not plane and p.state is PlaneState.UP)):
            return None, False
        return q[0] + self._silence(plane), evidence

    def park_unreachable(self, plane: int, now: float) -> bool:
        """The host itself could not send on ``plane`` (no route, link down:
        the I/O saw ENETUNREACH and the like): park it at once, unless it is
        the last plane up (with nowhere else to go, its sends keep trying and
        the usual timers decide). True if the plane is parked now."""
        pl = self._planes[plane]
        if pl.state is PlaneState.PARKED:
            return True
        if not self._others_up(pl):
            return False
        self._park(pl, now, "local")
        return True

    def _park(self, plane: _Plane, now: float, cause: str = "silence") -> None:
        plane.bad_at_park = frozenset(ev.index for ev in plane.evs if ev.state is ASSUMED_BAD)
        plane.state = PlaneState.PARKED
        plane.park_cause = cause
        self.plane_changes += 1
        plane.parks += 1
        if len(self.park_log) < 4096:
            self.park_log.append((now, plane.index, self.srtt))
        self._log_plane(now, plane, "parked", cause)
        plane.parked_at = now
        plane.liveness_probes_due = 0
        plane.liveness_probe_at = None
        plane.liveness_rounds = 0
        plane.unanswered.clear()
        plane.lossy.clear()
        for ev in plane.evs:
            self._apply(ev, EvEvent.PLANE_DOWN)
            self._stop_probing(ev)
        # Probing every EV of a dead plane would be a probe storm; a few
        # representatives answer the only question (is the plane back?).
        for _ in range(self.plane_probe_evs):
            self._next_plane_prober(plane, now + self.probe_initial, self.probe_initial)

    def _unpark(self, plane: _Plane, now: float, answered: Ev | None = None) -> None:
        plane.state = PlaneState.UP
        self.plane_changes += 1
        self._log_plane(now, plane, "up", "probe")
        self.model.heard[plane.index] = now
        # Sends before the park were answered or lost: start afresh.
        plane.answered_sent = now
        plane.unanswered.clear()
        plane.lossy.clear()
        plane.liveness_probes_due = 0
        plane.liveness_probe_at = None
        plane.liveness_rounds = 0
        for ev in plane.evs:
            self._apply(ev, EvEvent.PLANE_UP)
            self._stop_probing(ev)
        # The EVs that had lost packets on their own before the park stay
        # ASSUMED_BAD and are probed one by one: a plane parked for silence
        # at the end of a burst whose last packets went to its dead spine
        # would otherwise spray on that spine again after every unpark
        # (the claims' invisibility row: a spine reboot parked and
        # unparked plane 0 every 5-140 ms for 500 ms). A plane most of
        # whose EVs were bad died as a whole: it comes back whole.
        bad = plane.bad_at_park
        plane.bad_at_park = frozenset()
        active = sum(1 for ev in plane.evs if ev.state is not DENIED)
        keep = [ev for ev in plane.evs
                if ev.index in bad and ev is not answered and ev.state is GOOD]
        if keep and len(keep) < self.plane_bad_fraction * active - 1:
            for ev in keep:
                self._apply(ev, EvEvent.LOSS)
                self._start_probing(ev, now, self.probe_initial)
