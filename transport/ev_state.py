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
from dataclasses import dataclass, field
from typing import Any


class EvState(enum.Enum):
    # Identity hash: Enum's own __hash__ is Python code (hash of the name),
    # paid on every dict/set lookup of a state on the per-packet paths.
    __hash__ = object.__hash__

    GOOD = "good"
    #: Skipped for the rest of the current rotation (ECN in the core or a
    #: fabric trim: a hot spine, not a dead one).
    SKIP = "skip"
    #: No ACK and no trim: maybe dead. Only a probe brings it back.
    ASSUMED_BAD = "assumed_bad"
    #: Withdrawn by the operator; only the operator brings it back.
    DENIED = "denied"


class EvEvent(enum.Enum):
    # Identity hash: Enum's own __hash__ is Python code (hash of the name),
    # paid on every dict/set lookup of a state on the per-packet paths.
    __hash__ = object.__hash__

    ECN_ACK = "ecn_ack"
    FABRIC_TRIM = "fabric_trim"
    #: Incast at the receiver: changing path cannot fix it, so no penalty.
    LAST_HOP_TRIM = "last_hop_trim"
    #: Loss or timeout with neither ACK nor trim.
    LOSS = "loss"
    #: The whole plane looks dead: parked with all its EVs.
    PLANE_DOWN = "plane_down"
    PROBE_OK = "probe_ok"
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
    (S.SKIP, E.ROTATION_WRAP): S.GOOD,
    (S.SKIP, E.LOSS): S.ASSUMED_BAD,
    (S.SKIP, E.PLANE_DOWN): S.ASSUMED_BAD,
    (S.SKIP, E.DENY): S.DENIED,
    (S.ASSUMED_BAD, E.PROBE_OK): S.GOOD,
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
    # Identity hash: Enum's own __hash__ is Python code (hash of the name),
    # paid on every dict/set lookup of a state on the per-packet paths.
    __hash__ = object.__hash__

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
ASSUMED_BAD = EvState.ASSUMED_BAD
DENIED = EvState.DENIED


@dataclass(slots=True)
class _Plane:
    index: int
    evs: list[Ev]
    state: PlaneState = PlaneState.UP
    #: Last time anything (ACK, trim NACK, probe ACK) came back from the plane.
    last_heard: float = -math.inf
    #: EVs (by index) that lost packets since the plane was last heard from.
    lossy: set[int] = field(default_factory=set)
    probe_cursor: int = 0
    parks: int = 0
    parked_at: float = -math.inf


class EvSet:
    """``planes`` x ``evs_per_plane`` EVs with distinct values, health and probing.

    ``seed`` makes the EV values (and the policies' rotations) reproducible
    per connection. Times are seconds: ``base_rtt`` scales the defaults of
    ``probe_initial`` (4 x base_rtt, first probe after an EV goes bad),
    ``probe_max`` (64 x base_rtt, the backoff cap) and ``plane_silence``
    (3 x base_rtt). A plane is parked when ``plane_bad_fraction`` of its
    non-denied EVs are ASSUMED_BAD, or when ``plane_loss_evs`` distinct EVs
    lost packets and nothing came back from the plane for ``plane_silence``;
    a parked plane is probed through ``plane_probe_evs`` EVs at a time.
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
        plane_bad_fraction: float = 0.5,
        plane_loss_evs: int = 4,
        plane_silence: float | None = None,
        plane_probe_evs: int = 2,
        skip_rotations: int = 12,
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
        self.base_rtt = base_rtt
        self.probe_initial = 4 * base_rtt if probe_initial is None else probe_initial
        self.probe_max = 64 * base_rtt if probe_max is None else probe_max
        self.plane_bad_fraction = plane_bad_fraction
        self.plane_loss_evs = plane_loss_evs
        self.plane_silence = 3 * base_rtt if plane_silence is None else plane_silence
        self.plane_probe_evs = max(1, plane_probe_evs)

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
        self._skipped: list[Ev] = []
        self._probing: dict[int, Ev] = {}
        #: Every state change as (ev, old, new), for whoever reports them
        #: (the connection drains it into events); bounded by its reader.
        self.changes: list[tuple[Ev, EvState, EvState]] = []

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

    # -- state table -------------------------------------------------------------

    def _apply(self, ev: Ev, event: EvEvent) -> bool:
        old = ev.state
        new = TRANSITIONS.get((old, event), old)
        if new is old:
            return False
        ev.state = new
        self.counts[old] -= 1
        self.counts[new] += 1
        if len(self.changes) < 65536:
            self.changes.append((ev, old, new))
        if new is SKIP:
            ev.skip_left = self.skip_rotations
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

    def _heard(self, ev: Ev, now: float) -> None:
        plane = self._planes[ev.plane]
        plane.last_heard = now
        if plane.lossy:
            plane.lossy.clear()

    def _rtt_sample(self, ev: Ev, rtt: float | None) -> None:
        if rtt is None or rtt <= 0:
            return
        ev.srtt = rtt if ev.srtt is None else 0.875 * ev.srtt + 0.125 * rtt
        if ev.min_rtt is None or rtt < ev.min_rtt:
            ev.min_rtt = rtt

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None) -> None:
        ev.acked += 1
        ev.last_acked = now
        self._rtt_sample(ev, rtt)
        self._heard(ev, now)
        if ecn:
            ev.ecn_marks += 1
            self._apply(ev, EvEvent.ECN_ACK)

    def on_trim(self, ev: Ev, now: float, last_hop: bool) -> None:
        # The trimmed header crossed the plane and the NACK came back: the
        # plane forwards, whatever the EV's queue looks like.
        self._heard(ev, now)
        if last_hop:
            ev.last_hop_trims += 1
            self._apply(ev, EvEvent.LAST_HOP_TRIM)
        else:
            ev.trims += 1
            self._apply(ev, EvEvent.FABRIC_TRIM)

    def on_loss(self, ev: Ev, now: float) -> None:
        ev.losses += 1
        plane = self._planes[ev.plane]
        if self._apply(ev, EvEvent.LOSS) and plane.state is PlaneState.UP:
            self._start_probing(ev, now, self.probe_initial)
        if plane.state is PlaneState.UP:
            plane.lossy.add(ev.index)
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
            return
        # Under spraying a dead plane shows up as losses on many EVs at once;
        # waiting for each EV's own evidence would keep feeding the dead plane
        # for many RTTs (MRC notices a plane down within a few RTTs).
        many_bad = bad >= self.plane_bad_fraction * active
        silent = (
            len(plane.lossy) >= self._loss_evs(plane)
            # The same sum next_timer() returns: ``now - last_heard >= silence``
            # can be False at that very instant (rounding) and livelock it.
            and now >= plane.last_heard + self.plane_silence
        )
        if many_bad or silent:
            self._park(plane, now)

    def _loss_evs(self, plane: _Plane) -> int:
        return min(self.plane_loss_evs, len(plane.evs))

    def _park(self, plane: _Plane, now: float) -> None:
        plane.state = PlaneState.PARKED
        plane.parks += 1
        plane.parked_at = now
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

    def _unpark(self, plane: _Plane, now: float) -> None:
        plane.state = PlaneState.UP
        plane.lossy.clear()
        plane.last_heard = now
        for ev in plane.evs:
            self._apply(ev, EvEvent.PLANE_UP)
            self._stop_probing(ev)

    # -- probing -----------------------------------------------------------------

    def due_probes(self, now: float) -> list[Ev]:
        """EVs whose probe is due; also the moment silent planes are parked."""
        for plane in self._planes:
            if plane.lossy and plane.state is PlaneState.UP:
                self._check_plane(plane, now)
        return [
            ev
            for ev in self._probing.values()
            if ev.next_probe is not None and ev.next_probe <= now
        ]

    def on_probe_sent(self, ev: Ev, now: float) -> None:
        ev.probes_sent += 1
        ev.last_sent = now
        if ev.index not in self._probing:
            return
        plane = self._planes[ev.plane]
        interval = min(2 * ev.probe_interval, self.probe_max)
        if plane.state is PlaneState.PARKED:
            self._stop_probing(ev)
            self._next_plane_prober(plane, now + interval, interval)
        else:
            ev.probe_interval = interval
            ev.next_probe = now + interval

    def on_probe_ack(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        self._rtt_sample(ev, rtt)
        ev.last_acked = now
        plane = self._planes[ev.plane]
        if plane.state is PlaneState.PARKED:
            self._unpark(plane, now)
        else:
            self._heard(ev, now)
            self._apply(ev, EvEvent.PROBE_OK)

    def next_timer(self) -> float | None:
        """Earliest probe due or silent-plane check, or None."""
        t = math.inf
        for ev in self._probing.values():
            if ev.next_probe is not None and ev.next_probe < t:
                t = ev.next_probe
        for plane in self._planes:
            if len(plane.lossy) >= self._loss_evs(plane) and plane.state is PlaneState.UP:
                t = min(t, plane.last_heard + self.plane_silence)
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
