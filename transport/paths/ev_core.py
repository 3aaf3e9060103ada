"""The EV set's core: its planes and EVs, lookup, and the state table applied.

``EvSet`` (``ev_set.py``) is this core plus plane liveness (``liveness.py``),
probing (``probes.py``) and the feedback calls; the parts are split by
responsibility only, they share one object's state.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from transport.ev_state import TRANSITIONS, Ev, EvEvent, EvState, PlaneState
from transport.paths.rtt import PathModel

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
    #: Why it was last parked ("silence", "bad_evs", "local").
    park_cause: str = ""
    #: EVs (by index) that were ASSUMED_BAD on their own evidence when the
    #: plane was parked: still bad when it comes back (a dead spine of a
    #: plane whose other spines work), unless they are most of the plane.
    bad_at_park: frozenset[int] = frozenset()
    #: The connection's smoothed RTT when the plane was last heard from: the
    #: RTT it had when (if) the plane went silent. A park logs it, since
    #: the connection's srtt moves during the silence (a fault that also
    #: hurts the survivor drains its queue: the claims' compound row).
    heard_srtt: float = 0.0


class EvWatcher:
    """What a path policy learns of the feedback its EV set applied (each
    call comes after the set updated its states). The EV set is the one owner
    of EV health; a policy that weighs or recycles paths (``spray``, ``reps``)
    watches it instead of taking the feedback itself."""

    def acked(self, ev: Ev, now: float, n: int, ecn: bool) -> None:
        """``n`` packets of ``ev`` were acknowledged (ECN-marked if ``ecn``)."""

    def trimmed(self, ev: Ev, now: float, last_hop: bool) -> None:
        """A packet of ``ev`` was trimmed (at the last hop if ``last_hop``)."""

    def lost(self, ev: Ev, now: float, condemned: bool) -> None:
        """A packet of ``ev`` was declared lost; ``condemned``: the EV with it."""

    def late(self, plane: int) -> None:
        """A packet declared lost on ``plane`` was acknowledged after all."""

    def plane_rtt(self, plane: int, rtt: float, now: float) -> None:
        """A round trip through ``plane`` (a SACK's echo)."""

    def plane_base(self, plane: int, rtt: float) -> None:
        """A round trip through ``plane`` without its data queue (a trimmed
        header's, the data's serialization added back): a base RTT sample."""


class EvSetCore:
    """The state every part of ``EvSet`` shares (see ``EvSet``)."""

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
        model: PathModel | None = None,
    ) -> None:
        if planes < 1 or evs_per_plane < 1:
            raise ValueError("need at least one plane and one EV per plane")
        if planes * evs_per_plane > 65536:
            raise ValueError("more EVs than 16-bit entropy values")
        self.seed = seed
        #: Per-plane RTT and last-heard times (shared with the sender).
        self.model = model if model is not None else PathModel(planes)
        if len(self.model.heard) < planes:
            self.model.heard.extend([-math.inf] * (planes - len(self.model.heard)))
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
        #: Planes parked or back so far: a watcher compares it with the count
        #: it last saw instead of reading every plane's state per ACK.
        self.plane_changes = 0
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
        #: Policies watching the feedback (``EvWatcher``).
        self.watchers: list[EvWatcher] = []
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

    def park_cause(self, plane: int) -> str:
        """Why ``plane`` was last parked ("silence", "bad_evs", "local"; ""
        if never)."""
        return self._planes[plane].park_cause

    def plane_answered_sent(self, plane: int) -> float:
        """Send time of the newest answered packet of ``plane`` (-inf: none)."""
        return self._planes[plane].answered_sent

    def plane_last_heard(self, plane: int) -> float:
        return self.model.heard[plane]

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

    def set_rtt(self, srtt: float, ack_delay: float = 0.0) -> None:
        """The connection's measured smoothed RTT: scales ``plane_silence``
        (unless it was fixed at construction)."""
        if srtt > 0:
            self.srtt = srtt
        if ack_delay >= 0:
            self._ack_delay = ack_delay
        if not self._silence_fixed and srtt > 0:
            self.plane_silence = PLANE_SILENCE_RTTS * srtt + ack_delay

    def plane_srtt(self, plane: _Plane) -> float | None:
        """How long the plane takes to answer (``PathModel.answer_srtt``; None:
        no answer timed yet). Planes are independent fabrics: one 4x slower
        than the others must not look silent by the connection's (mixed)
        RTT."""
        return self.model.answer_srtt.get(plane.index)

    def _log_plane(self, now: float, plane: _Plane, what: str, cause: str) -> None:
        self.plane_log.append((now, plane.index, what, self.srtt, cause,
                               plane.heard_srtt or self.srtt))

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
