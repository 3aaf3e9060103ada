"""EV health: states, events and the transition table, and the EV set.

After MRC's EV states (PROTOCOL-NOTES.md): the table below is the single
source of truth; ``EvSet`` applies it (plus probing and whole-plane
parking), the policies of ``transport/paths.py`` read the resulting states,
and ``tools/gen_state_diagrams.py`` draws it into docs/state-machines.md.

An event absent from a state's row leaves the state unchanged and is not
recorded anywhere (e.g. an ECN-marked ACK on an ASSUMED_BAD EV, a last-hop
trim in any state): feedback races with state changes all the time, so a
stale or irrelevant event is normal, not an error.
"""

from __future__ import annotations

import enum
import math
import random
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any


class EvState(enum.Enum):
    GOOD = "good"
    #: Skipped for ``skip_rotations`` rotations (ECN in the core, a fabric
    #: trim, or a copy far too late: a hot spine, not a dead one).
    SKIP = "skip"
    #: No ACK and no trim: maybe dead. A probe brings it back; a packet
    #: declared lost on it and acknowledged far too late says it is slow
    #: instead (SKIP).
    ASSUMED_BAD = "assumed_bad"
    #: Withdrawn by the operator; only the operator brings it back.
    DENIED = "denied"


class EvEvent(enum.Enum):
    ECN_ACK = "ecn_ack"
    FABRIC_TRIM = "fabric_trim"
    #: Incast at the receiver: changing path cannot fix it, so no penalty.
    LAST_HOP_TRIM = "last_hop_trim"
    #: Loss or timeout with neither ACK nor trim.
    LOSS = "loss"
    #: The whole plane looks dead: parked with all its EVs.
    PLANE_DOWN = "plane_down"
    PROBE_OK = "probe_ok"
    #: A packet declared lost on the EV was acknowledged after all, far too
    #: late: the path forwards, slowly (a standing queue on one spine).
    LATE_ACK = "late_ack"
    #: A probe answered on the EV's parked plane: the plane is back.
    PLANE_UP = "plane_up"
    #: The rotation wrapped: skipped EVs get another chance.
    ROTATION_WRAP = "rotation_wrap"
    DENY = "deny"
    ALLOW = "allow"


S = EvState
E = EvEvent

#: (state, event) -> new state. Only transitions that change state are listed.
TRANSITIONS: dict[tuple[EvState, EvEvent], EvState] = {
    (S.GOOD, E.ECN_ACK): S.SKIP,
    (S.GOOD, E.FABRIC_TRIM): S.SKIP,
    (S.GOOD, E.LOSS): S.ASSUMED_BAD,
    (S.GOOD, E.PLANE_DOWN): S.ASSUMED_BAD,
    (S.GOOD, E.DENY): S.DENIED,
    (S.GOOD, E.LATE_ACK): S.SKIP,
    (S.SKIP, E.ROTATION_WRAP): S.GOOD,
    (S.SKIP, E.LOSS): S.ASSUMED_BAD,
    (S.SKIP, E.PLANE_DOWN): S.ASSUMED_BAD,
    (S.SKIP, E.DENY): S.DENIED,
    (S.ASSUMED_BAD, E.PROBE_OK): S.GOOD,
    (S.ASSUMED_BAD, E.LATE_ACK): S.SKIP,
    (S.ASSUMED_BAD, E.PLANE_UP): S.GOOD,
    (S.ASSUMED_BAD, E.DENY): S.DENIED,
    (S.DENIED, E.ALLOW): S.GOOD,
}

INITIAL_STATE = EvState.GOOD

del S, E


def next_state(state: EvState, event: EvEvent) -> EvState:
    """The state after ``event``; unchanged when the table has no entry."""
    return TRANSITIONS.get((state, event), state)


class PlaneState(enum.Enum):
    UP = "up"
    #: Every EV of the plane parked at once; a few representatives probed.
    PARKED = "parked"


@dataclass(slots=True, eq=False)
class Ev:
    """One path: an entropy value inside a plane, with its own health and RTT.

    ``value`` (0..65535) is what the I/O maps to a UDP source port / flow
    label. Identity matters (``eq=False``): policies compare EVs with ``is``.
    Times are seconds on the caller's clock; ``srtt``/``min_rtt`` are None
    until the first RTT sample.
    """

    plane: int
    value: int
    index: int
    state: EvState = INITIAL_STATE
    sent: int = 0
    acked: int = 0
    ecn_marks: int = 0
    trims: int = 0
    last_hop_trims: int = 0
    losses: int = 0
    probes_sent: int = 0
    srtt: float | None = None
    min_rtt: float | None = None
    last_sent: float | None = None
    last_acked: float | None = None
    #: When the next probe is due (None: not being probed).
    next_probe: float | None = None
    probe_interval: float = 0.0
    #: Rotations this EV stays skipped (set on entering SKIP).
    skip_left: int = 0
    #: Skips for late copies (``EvSet.on_late``) since its last unmarked ACK:
    #: each doubles the next skip's length (a spine with a standing queue,
    #: found again, at the price of late packets, every time a skip ends).
    skip_strikes: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "plane": self.plane,
            "ev": self.value,
            "state": self.state.value,
            "sent": self.sent,
            "acked": self.acked,
            "ecn_marks": self.ecn_marks,
            "trims": self.trims,
            "last_hop_trims": self.last_hop_trims,
            "losses": self.losses,
            "probes_sent": self.probes_sent,
            "srtt": self.srtt,
            "min_rtt": self.min_rtt,
        }


GOOD = EvState.GOOD
SKIP = EvState.SKIP
#: A late copy this many smoothed RTTs old skips a GOOD EV, half that an
#: ASSUMED_BAD one (``on_late``).
LATE_RTTS = 4.0
#: A skip lasts ``skip_rotations`` doubled once per earlier skip for a late
#: copy since the EV's last unmarked ACK, at most this many times (16x).
SKIP_MAX_DOUBLINGS = 4
#: A plane is silent after this many smoothed RTTs (plus the ACK delay)
#: without an answer to its oldest unanswered send.
PLANE_SILENCE_RTTS = 3.0
ASSUMED_BAD = EvState.ASSUMED_BAD
DENIED = EvState.DENIED


#: Send times kept per plane for the liveness rule; past this the record is
#: thinned (every other entry dropped), which keeps its oldest entry exact.
_MAX_UNANSWERED = 4096
#: Liveness probe rounds repeated (each after twice the wait of the one
#: before) while no plane answers anything: bounded, a stalled peer must
#: not draw probes forever.
_MAX_REPROBES = 6


@dataclass(slots=True)
class _Plane:
    index: int
    evs: list[Ev]
    state: PlaneState = PlaneState.UP
    #: Last time anything (ACK, trim NACK, probe ACK) came back from the plane.
    last_heard: float = -math.inf
    #: Send time of the newest packet (or probe) of this plane whose answer
    #: came back: the plane certainly worked then.
    answered_sent: float = -math.inf
    #: Send times of packets and probes sent after ``answered_sent``, oldest
    #: first: the head is the plane's oldest unanswered send.
    unanswered: deque[float] = field(default_factory=deque)
    #: Send time of the newest packet of this plane declared lost.
    loss_sent: float = -math.inf
    #: Last live plane only: when its liveness probes went out (None: none
    #: pending), and how many are still to send.
    liveness_probe_at: float | None = None
    liveness_probes_due: int = 0
    liveness_due_at: float = -math.inf
    #: Liveness probe rounds repeated (none answered, no other evidence),
    #: and when the latest went out.
    liveness_rounds: int = 0
    liveness_round_at: float = -math.inf
    #: EVs (by index) that lost packets since the plane was last heard from
    #: (the rule for callers that record no sends).
    lossy: set[int] = field(default_factory=set)
    probe_cursor: int = 0
    parks: int = 0
    parked_at: float = -math.inf
    #: EVs (by index) that were ASSUMED_BAD on their own evidence when the
    #: plane was parked: still bad when it comes back (a dead spine of a
    #: plane whose other spines work), unless they are most of the plane.
    bad_at_park: frozenset[int] = frozenset()
    #: Smoothed RTT of this plane's own samples (None: none yet). Planes are
    #: independent fabrics: one 4x slower than the others must not look
    #: silent by the connection's (mixed) RTT (issue 13).
    srtt: float | None = None
    #: The connection's smoothed RTT when the plane was last heard from: the
    #: RTT it had when (if) the plane went silent. A park logs it, since
    #: the connection's srtt moves during the silence (a fault that also
    #: hurts the survivor drains its queue: issue 13's compound row).
    heard_srtt: float = 0.0


class EvSet:
    """``planes`` x ``evs_per_plane`` EVs with distinct values, health and probing.

    ``seed`` makes the EV values (and the policies' rotations) reproducible
    per connection. Times are seconds: ``base_rtt`` scales the defaults of
    ``probe_initial`` (4 x base_rtt, first probe after an EV goes bad) and
    ``probe_max`` (64 x base_rtt, the backoff cap).

    A plane is parked when ``plane_bad_fraction`` (2/3) of its non-denied EVs
    are ASSUMED_BAD (a dead plane goes bad EV after EV under spraying; 1/2
    parked a two-spine plane whose one spine rebooted, when its other spine
    could carry the plane's whole rate), or when it is *silent*: a packet
    sent on it after its newest answered one was declared lost, and its
    oldest unanswered send is
    ``plane_silence`` old. Time since an unanswered send (not since anything
    was last heard, which counts idle time and late answers to older
    packets) makes the rule independent of traffic volume: one packet in
    flight is evidence enough: ``plane_silent_sends`` unanswered sends park
    the plane at once, fewer only after a probe of it failed (one lost SACK
    leaves several sends unanswered). ``plane_silence`` defaults to 3 measured
    smoothed RTTs plus the ACK delay (``set_rtt``; 3 x base_rtt before any
    sample); a number fixes it. The last plane still up is never parked on
    this evidence alone: it is probed (``plane_probe_evs`` probes) and parked
    only if none is answered within ``plane_silence``. A parked plane is
    probed through ``plane_probe_evs`` EVs at a time. A caller that records
    no sends (``on_sent``) gets the older rule: ``plane_loss_evs`` distinct
    EVs lost packets and nothing was heard for ``plane_silence`` (a
    distinct-EV count alone makes a plane with little in flight wait for
    many timeouts, which is why the connection records its sends).
    """

    def __init__(
        self,
        *,
        planes: int = 4,
        evs_per_plane: int = 32,
        seed: int = 0,
        base_rtt: float = 1e-3,
        probe_initial: float | None = None,
        probe_max: float | None = None,
        plane_bad_fraction: float = 2 / 3,
        plane_loss_evs: int = 4,
        plane_silence: float | None = None,
        plane_probe_evs: int = 2,
        plane_silent_sends: int = 5,
        skip_rotations: int = 12,
        late_floor: float = 0.0,
    ) -> None:
        if planes < 1 or evs_per_plane < 1:
            raise ValueError("need at least one plane and one EV per plane")
        if planes * evs_per_plane > 65536:
            raise ValueError("more EVs than 16-bit entropy values")
        self.seed = seed
        # MRC skips a marked EV "for the rest of the rotation"; with a rotation
        # shorter than an RTT (many packets in flight) the mark arrives after
        # the EV was already used again, so one rotation barely moves its
        # share. Skipping for several rotations makes the penalty bite.
        self.skip_rotations = max(1, skip_rotations)
        #: How far beyond the srtt a late copy's round trip must be before it
        #: says anything about its path: more than the host's own scheduling
        #: can add (the connection passes a quarter of its minimum RTO).
        self.late_floor = max(0.0, late_floor)
        self.base_rtt = base_rtt
        self.probe_initial = 4 * base_rtt if probe_initial is None else probe_initial
        self.probe_max = 64 * base_rtt if probe_max is None else probe_max
        self.plane_bad_fraction = plane_bad_fraction
        self.plane_loss_evs = plane_loss_evs
        self._silence_fixed = plane_silence is not None
        self.plane_silence = (PLANE_SILENCE_RTTS * base_rtt if plane_silence is None
                              else plane_silence)
        self.plane_probe_evs = max(1, plane_probe_evs)
        self.plane_silent_sends = max(1, plane_silent_sends)

        values = random.Random(seed).sample(range(65536), planes * evs_per_plane)
        self.evs: list[Ev] = [
            Ev(plane=i // evs_per_plane, value=v, index=i) for i, v in enumerate(values)
        ]
        self._planes = [
            _Plane(p, self.evs[p * evs_per_plane : (p + 1) * evs_per_plane]) for p in range(planes)
        ]
        self._by_value = {ev.value: ev for ev in self.evs}
        #: Number of EVs in each state; policies read it to stop scanning early.
        self.counts: dict[EvState, int] = dict.fromkeys(EvState, 0)
        self.counts[GOOD] = len(self.evs)
        #: State changes so far by the event that made them (``late_ack``:
        #: EVs skipped for a standing queue; ``ecn_ack``: for marks; ``loss``:
        #: condemned), for the connection's stats.
        self.changed_by: dict[EvEvent, int] = dict.fromkeys(EvEvent, 0)
        self._skipped: list[Ev] = []
        self._probing: dict[int, Ev] = {}
        #: Every state change as (ev, old, new), for whoever reports them
        #: (the connection drains it into events); bounded by its reader.
        self.changes: list[tuple[Ev, EvState, EvState]] = []
        #: Every whole-plane park as (time, plane, smoothed RTT then), oldest
        #: first (bounded): what benchmarks measure liveness with.
        self.park_log: list[tuple[float, int, float]] = []
        #: Every park and unpark as (time, plane, "parked" | "up", smoothed
        #: RTT then, cause, smoothed RTT when the plane was last heard from),
        #: the newest 256: what the daemon's stats report, so a benchmark can
        #: tell *when* a plane was parked, in RTTs of the moment it went
        #: silent. Causes: "silence" / "bad_evs" (the evidence rules),
        #: "local" (the host's own send failed: no route, link down), "probe"
        #: (a probe was answered).
        self.plane_log: deque[tuple[float, int, str, float, str, float]] = deque(maxlen=256)
        #: The connection's smoothed RTT (``set_rtt``; base_rtt until then).
        self.srtt = base_rtt
        self._ack_delay = 0.0
        #: Newest answered send time over all planes.
        self._newest_answer = -math.inf

    # -- lookup ------------------------------------------------------------------

    @property
    def planes(self) -> int:
        return len(self._planes)

    def plane_evs(self, plane: int) -> list[Ev]:
        return self._planes[plane].evs

    def lookup(self, value: int) -> Ev | None:
        """The EV with this value (EV values are distinct across planes)."""
        return self._by_value.get(value)

    def plane_state(self, plane: int) -> PlaneState:
        return self._planes[plane].state

    def parked_planes(self) -> list[int]:
        return [p.index for p in self._planes if p.state is PlaneState.PARKED]

    def plane_answered_sent(self, plane: int) -> float:
        """Send time of the newest answered packet of ``plane`` (-inf: none)."""
        return self._planes[plane].answered_sent

    def plane_last_heard(self, plane: int) -> float:
        return self._planes[plane].last_heard

    # -- state table -------------------------------------------------------------

    def _apply(self, ev: Ev, event: EvEvent) -> bool:
        old = ev.state
        new = TRANSITIONS.get((old, event), old)
        if new is old:
            return False
        ev.state = new
        self.changed_by[event] += 1
        self.counts[old] -= 1
        self.counts[new] += 1
        if len(self.changes) < 65536:
            self.changes.append((ev, old, new))
        if new is SKIP:
            ev.skip_left = self.skip_rotations << min(ev.skip_strikes, SKIP_MAX_DOUBLINGS)
            self._skipped.append(ev)
        if old is ASSUMED_BAD:
            self._stop_probing(ev)
        return True

    def _start_probing(self, ev: Ev, now: float, interval: float) -> None:
        ev.probe_interval = interval
        ev.next_probe = now + interval
        self._probing[ev.index] = ev

    def _stop_probing(self, ev: Ev) -> None:
        ev.next_probe = None
        self._probing.pop(ev.index, None)

    def release_skipped(self) -> None:
        """Every usable EV is skipped: un-skip them all rather than stall."""
        skipped, self._skipped = self._skipped, []
        for ev in skipped:
            if ev.state is SKIP:
                self._apply(ev, EvEvent.ROTATION_WRAP)

    def end_rotation(self) -> None:
        """A rotation wrapped: EVs skipped ``skip_rotations`` ago are GOOD again."""
        skipped, self._skipped = self._skipped, []
        for ev in skipped:
            if ev.state is not SKIP:
                continue
            ev.skip_left -= 1
            if ev.skip_left > 0:
                self._skipped.append(ev)
            else:
                self._apply(ev, EvEvent.ROTATION_WRAP)

    # -- feedback ----------------------------------------------------------------

    def set_rtt(self, srtt: float, ack_delay: float = 0.0) -> None:
        """The connection's measured smoothed RTT: scales ``plane_silence``
        (unless it was fixed at construction)."""
        if srtt > 0:
            self.srtt = srtt
        if ack_delay >= 0:
            self._ack_delay = ack_delay
        if not self._silence_fixed and srtt > 0:
            self.plane_silence = PLANE_SILENCE_RTTS * srtt + ack_delay

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
        plane.last_heard = now
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

    def _rtt_sample(self, ev: Ev, rtt: float | None) -> None:
        if rtt is None or rtt <= 0:
            return
        ev.srtt = rtt if ev.srtt is None else 0.875 * ev.srtt + 0.125 * rtt
        if ev.min_rtt is None or rtt < ev.min_rtt:
            ev.min_rtt = rtt

    def plane_rtt_sample(self, plane_index: int, rtt: float) -> None:
        """A round trip through ``plane_index`` (a SACK's echo, a probe's answer)."""
        if rtt <= 0 or not 0 <= plane_index < len(self._planes):
            return
        plane = self._planes[plane_index]
        plane.srtt = rtt if plane.srtt is None else 0.875 * plane.srtt + 0.125 * rtt

    def _silence(self, plane: _Plane) -> float:
        """``plane_silence``, stretched for a plane slower than the connection's
        smoothed RTT (its own RTT samples say so)."""
        if self._silence_fixed or plane.srtt is None or plane.srtt <= self.srtt:
            return self.plane_silence
        return PLANE_SILENCE_RTTS * plane.srtt + self._ack_delay

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None,
               sent: float | None = None) -> None:
        ev.acked += 1
        ev.last_acked = now
        self._rtt_sample(ev, rtt)
        self._heard(ev, now, sent)
        if ecn:
            ev.ecn_marks += 1
            self._apply(ev, EvEvent.ECN_ACK)
        elif ev.skip_strikes and ev.state is GOOD:
            ev.skip_strikes = 0

    def on_acks(self, ev: Ev, now: float, n: int, rtt: float | None, sent: float) -> None:
        """``on_ack`` (no ECN mark) for ``n`` packets of ``ev``, the newest
        sent at ``sent``, ``rtt`` the one sample among them: without a mark
        nothing here depends on the order, and hearing the newest send is
        what hearing each does."""
        ev.acked += n
        ev.last_acked = now
        self._rtt_sample(ev, rtt)
        self._heard(ev, now, sent)
        if ev.skip_strikes and ev.state is GOOD:
            ev.skip_strikes = 0

    def on_trim(self, ev: Ev, now: float, last_hop: bool, sent: float | None = None) -> None:
        # The trimmed header crossed the plane and the NACK came back: the
        # plane forwards, whatever the EV's queue looks like.
        self._heard(ev, now, sent)
        if last_hop:
            ev.last_hop_trims += 1
            self._apply(ev, EvEvent.LAST_HOP_TRIM)
        else:
            ev.trims += 1
            self._apply(ev, EvEvent.FABRIC_TRIM)

    def on_loss(self, ev: Ev, now: float, sent: float | None = None) -> None:
        """Strong evidence against ``ev`` (it goes ASSUMED_BAD); the loss of a
        packet sent at ``sent`` (None: ``now``) also counts for its plane."""
        ev.losses += 1
        plane = self._planes[ev.plane]
        if self._apply(ev, EvEvent.LOSS) and plane.state is PlaneState.UP:
            self._start_probing(ev, now, self.probe_initial)
        self.on_plane_loss(ev, now, now if sent is None else sent)

    def on_late(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        """A packet declared lost on ``ev`` was acknowledged after all; its
        copy's round trip ``rtt`` if the SACK timed it. A copy more than
        ``LATE_RTTS`` smoothed RTTs late (half that on an EV already condemned
        for such losses) went through a standing queue, not a reordering:
        the EV is skipped, and each such skip doubles the next one. An
        ASSUMED_BAD EV is skipped rather than probed back to GOOD: a probe
        rides the control queue past the standing data queue, so its answer
        would put the slow path straight back into the rotation. An untimed
        late ACK changes nothing (reordering between paths looks the same),
        nor does a copy less than ``late_floor`` beyond the srtt (the host's
        own scheduling)."""
        if rtt is None:
            return
        limit = LATE_RTTS / 2 if ev.state is ASSUMED_BAD else LATE_RTTS
        if rtt > max(limit * self.srtt, self.srtt + self.late_floor) and \
                self._apply(ev, EvEvent.LATE_ACK):
            ev.skip_strikes += 1

    def on_plane_loss(self, ev: Ev, now: float, sent: float) -> None:
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

    def deny(self, ev: Ev) -> None:
        due = ev.next_probe
        self._apply(ev, EvEvent.DENY)
        self._stop_probing(ev)
        plane = self._planes[ev.plane]
        if due is not None and plane.state is PlaneState.PARKED:
            # Its probe slot goes to another EV of the plane, same schedule.
            self._next_plane_prober(plane, due, ev.probe_interval)

    def allow(self, ev: Ev) -> None:
        plane = self._planes[ev.plane]
        if self._apply(ev, EvEvent.ALLOW) and plane.state is PlaneState.PARKED:
            # Allowed into a parked plane: it waits for the plane like the rest.
            self._apply(ev, EvEvent.PLANE_DOWN)
            if not any(e.index in self._probing for e in plane.evs):
                # The plane had no EV left to probe (all denied): probe this
                # one on the schedule the plane started with.
                self._next_plane_prober(
                    plane, plane.parked_at + self.probe_initial, self.probe_initial
                )

    # -- whole planes ------------------------------------------------------------

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
        ACK delay (as margin for queueing) is generous; never more than the
        plane's silence."""
        if plane is None:
            return min(self.srtt + self._ack_delay, self.plane_silence)
        rtt = self.srtt if plane.srtt is None else max(self.srtt, plane.srtt)
        return min(rtt + self._ack_delay, self._silence(plane))

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

    def _plane_deadline(self, plane: _Plane) -> float | None:
        """When ``_check_plane`` may next act on an UP plane's silence (None:
        only new evidence can make it). ``due_probes`` tests exactly
        ``now >= _plane_deadline(plane)``, the time ``next_timer`` arms, and
        ``_check_plane`` then always acts (parks or asks for probes)."""
        if plane.state is not PlaneState.UP:
            return None
        if plane.liveness_probes_due:
            return plane.liveness_due_at
        action = self._next_action(plane, self._others_up(plane))
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
            return plane.last_heard + self._silence(plane), True
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

    def _log_plane(self, now: float, plane: _Plane, what: str, cause: str) -> None:
        self.plane_log.append((now, plane.index, what, self.srtt, cause,
                               plane.heard_srtt or self.srtt))

    def _park(self, plane: _Plane, now: float, cause: str = "silence") -> None:
        plane.bad_at_park = frozenset(ev.index for ev in plane.evs if ev.state is ASSUMED_BAD)
        plane.state = PlaneState.PARKED
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

    def _next_plane_prober(self, plane: _Plane, due: float, interval: float) -> None:
        """Hand a probe slot of a parked plane to its next EV, due at ``due``.

        Cycling the slot through the plane's EVs matters when only some
        spines are dead: a fixed representative could hash onto a dead one
        forever while the rest of the plane works.
        """
        n = len(plane.evs)
        for _ in range(n):
            ev = plane.evs[plane.probe_cursor % n]
            plane.probe_cursor += 1
            if ev.state is ASSUMED_BAD and ev.index not in self._probing:
                ev.probe_interval = interval
                ev.next_probe = due
                self._probing[ev.index] = ev
                return

    def _unpark(self, plane: _Plane, now: float, answered: Ev | None = None) -> None:
        plane.state = PlaneState.UP
        self._log_plane(now, plane, "up", "probe")
        plane.last_heard = now
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
        # (issue 13: the invisibility row's spine reboot parked and
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

    # -- probing -----------------------------------------------------------------

    def due_probes(self, now: float) -> list[Ev]:
        """EVs whose probe is due; also the moment silent planes are parked."""
        for plane in self._planes:
            deadline = self._plane_deadline(plane)
            if deadline is not None and now >= deadline and not plane.liveness_probes_due:
                self._check_plane(plane, now)
        due = [
            ev
            for ev in self._probing.values()
            if ev.next_probe is not None and ev.next_probe <= now
        ]
        for plane in self._planes:
            if plane.liveness_probes_due and plane.state is PlaneState.UP:
                probers = self._liveness_probers(plane, plane.liveness_probes_due)
                if not probers:
                    plane.liveness_probes_due = 0
                due.extend(probers)
        return due

    def _liveness_probers(self, plane: _Plane, n: int) -> list[Ev]:
        """``n`` usable EVs of ``plane`` to carry its liveness probes (GOOD first)."""
        usable = [ev for ev in plane.evs if ev.state is not DENIED]
        usable.sort(key=lambda ev: ev.state is not GOOD)
        return usable[:n]

    def on_probe_sent(self, ev: Ev, now: float) -> None:
        ev.probes_sent += 1
        ev.last_sent = now
        plane = self._planes[ev.plane]
        self.on_sent(ev, now)
        if plane.liveness_probes_due and plane.state is PlaneState.UP:
            plane.liveness_probes_due -= 1
            plane.liveness_round_at = now
            if plane.liveness_probe_at is None:
                plane.liveness_probe_at = now
        if ev.index not in self._probing:
            return
        interval = min(2 * ev.probe_interval, self.probe_max)
        if plane.state is PlaneState.PARKED:
            self._stop_probing(ev)
            self._next_plane_prober(plane, now + interval, interval)
        else:
            ev.probe_interval = interval
            ev.next_probe = now + interval

    def on_probe_ack(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        self._rtt_sample(ev, rtt)
        if rtt is not None:
            self.plane_rtt_sample(ev.plane, rtt)
        ev.last_acked = now
        plane = self._planes[ev.plane]
        if plane.state is PlaneState.PARKED:
            self._unpark(plane, now, ev)
            # The receiver answered a send of now - rtt: evidence against
            # planes silent since before it.
            if rtt is not None and now - rtt > self._newest_answer:
                self._newest_answer = now - rtt
        else:
            self._heard(ev, now, None if rtt is None else now - rtt)
            self._apply(ev, EvEvent.PROBE_OK)

    def next_timer(self) -> float | None:
        """Earliest probe due or silent-plane check, or None.

        A deadline returned here is tested by ``due_probes`` with the very
        same expression (``now >= deadline``), so a timer never fires without
        effect and re-arms at the same instant (``last + s`` armed but
        ``now - last >= s`` tested differ in floating point and once hung
        the simulator at a fixed virtual time)."""
        t = math.inf
        for ev in self._probing.values():
            if ev.next_probe is not None and ev.next_probe < t:
                t = ev.next_probe
        for plane in self._planes:
            deadline = self._plane_deadline(plane)
            if deadline is not None and deadline < t:
                t = deadline
        return None if t == math.inf else t

    # -- stats -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        planes = []
        for plane in self._planes:
            row: dict[str, Any] = {
                "plane": plane.index,
                "state": plane.state.value,
                "evs": len(plane.evs),
                "parks": plane.parks,
                "srtt": plane.srtt,
            }
            for s in EvState:
                row[s.value] = sum(1 for ev in plane.evs if ev.state is s)
            for key in (
                "sent",
                "acked",
                "ecn_marks",
                "trims",
                "last_hop_trims",
                "losses",
                "probes_sent",
            ):
                row[key] = sum(getattr(ev, key) for ev in plane.evs)
            planes.append(row)
        return {
            "states": {s.value: n for s, n in self.counts.items()},
            "planes": planes,
            "evs": [ev.as_dict() for ev in self.evs],
        }
