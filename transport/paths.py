"""The EV set of a connection, EV and plane health, and path policies.

Sans-I/O and clock-free: every call carries ``now`` (seconds, the caller's
clock). The connection core holds one ``PathPolicy`` (``get_policy("spray")``),
asks it for an EV per packet (``next_ev``) and feeds back what happened on
each EV (``on_ack``, ``on_trim``, ``on_loss``, probe calls). Every policy
shares one ``EvSet``, which applies the EV state table of
``transport/ev_state.py``, schedules probes and parks whole planes.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from transport.ev_state import (
    TRANSITIONS,
    Ev,
    EvEvent,
    EvState,
    PlaneState,
)

GOOD = EvState.GOOD
SKIP = EvState.SKIP
ASSUMED_BAD = EvState.ASSUMED_BAD
DENIED = EvState.DENIED

__all__ = [
    "Ev",
    "EvSet",
    "EvState",
    "ObliviousPolicy",
    "PathPolicy",
    "PlaneState",
    "RepsPolicy",
    "SinglePolicy",
    "SprayPolicy",
    "get_policy",
    "policy_names",
    "register_policy",
]


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
    ) -> None:
        if planes < 1 or evs_per_plane < 1:
            raise ValueError("need at least one plane and one EV per plane")
        if planes * evs_per_plane > 65536:
            raise ValueError("more EVs than 16-bit entropy values")
        self.seed = seed
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
        if new is SKIP:
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

    def end_rotation(self) -> None:
        """A rotation wrapped: skipped EVs are GOOD again (MRC)."""
        skipped, self._skipped = self._skipped, []
        for ev in skipped:
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
        if self._apply(ev, EvEvent.ALLOW) and self._planes[ev.plane].state is PlaneState.PARKED:
            # Allowed into a parked plane: it waits for the plane like the rest.
            self._apply(ev, EvEvent.PLANE_DOWN)

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
            and now - plane.last_heard >= self.plane_silence
        )
        if many_bad or silent:
            self._park(plane, now)

    def _loss_evs(self, plane: _Plane) -> int:
        return min(self.plane_loss_evs, len(plane.evs))

    def _park(self, plane: _Plane, now: float) -> None:
        plane.state = PlaneState.PARKED
        plane.parks += 1
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


class _Rotation:
    """A pseudo-random order of EVs, interleaving planes, re-shuffled now and then.

    Interleaving keeps consecutive packets on different planes, so planes are
    loaded evenly at every time scale, not just per rotation. Re-shuffling
    every ``reshuffle_every`` rotations from the connection's own seed keeps
    connections that started together from marching over the spines in
    lockstep.
    """

    __slots__ = ("_rng", "ev_set", "order", "pos", "reshuffle_every", "rotations")

    def __init__(self, ev_set: EvSet, salt: str, reshuffle_every: int) -> None:
        self.ev_set = ev_set
        self._rng = random.Random(f"braid-{salt}:{ev_set.seed}")
        self.reshuffle_every = reshuffle_every
        self.rotations = 0
        self.pos = 0
        self.order: list[Ev] = []
        self.shuffle()

    def shuffle(self) -> None:
        rng = self._rng
        per_plane = [
            rng.sample(evs, len(evs))
            for evs in map(self.ev_set.plane_evs, range(self.ev_set.planes))
        ]
        plane_ids = list(range(len(per_plane)))
        order: list[Ev] = []
        for k in range(max(len(evs) for evs in per_plane)):
            rng.shuffle(plane_ids)
            order.extend(per_plane[p][k] for p in plane_ids if k < len(per_plane[p]))
        self.order = order

    def wrap(self) -> None:
        self.pos = 0
        self.rotations += 1
        self.ev_set.end_rotation()
        if self.reshuffle_every > 0 and self.rotations % self.reshuffle_every == 0:
            self.shuffle()

    def next_good(self, avoid: Ev | None) -> Ev | None:
        """The next GOOD EV other than ``avoid``; ``avoid`` if it is the only one."""
        counts = self.ev_set.counts
        good = counts[GOOD]
        if good == 0 or (good == 1 and avoid is not None and avoid.state is GOOD):
            if counts[SKIP] == 0:
                return avoid if good else None
            # Everything else is skipped: end this rotation early.
            self.wrap()
            good = counts[GOOD]
            if good == 1 and avoid is not None and avoid.state is GOOD:
                return avoid
        order = self.order
        while True:
            if self.pos >= len(order):
                self.wrap()
                order = self.order
            ev = order[self.pos]
            self.pos += 1
            if ev.state is GOOD and ev is not avoid:
                return ev

    def next_allowed(self, avoid: Ev | None) -> Ev | None:
        """The next non-DENIED EV other than ``avoid``, whatever its health."""
        usable = len(self.order) - self.ev_set.counts[DENIED]
        if usable == 0:
            return None
        if usable == 1 and avoid is not None and avoid.state is not DENIED:
            return avoid
        order = self.order
        while True:
            if self.pos >= len(order):
                self.wrap()
                order = self.order
            ev = order[self.pos]
            self.pos += 1
            if ev.state is not DENIED and ev is not avoid:
                return ev


class PathPolicy:
    """Chooses the EV of each packet; all policies take the same feedback.

    Pass ``ev_set`` to share one, or the ``EvSet`` keyword parameters
    (planes, evs_per_plane, seed, base_rtt, ...) to build one. ``next_ev``
    records the send on the EV it returns and returns None only when no EV
    at all is usable (the core then probes and eventually fails).
    ``avoid`` (the EV a NACKed/lost packet used) is never returned while any
    other usable EV exists.
    """

    name: ClassVar[str] = "base"

    def __init__(self, *, ev_set: EvSet | None = None, **ev_set_params: Any) -> None:
        self.ev_set = ev_set if ev_set is not None else EvSet(**ev_set_params)

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        raise NotImplementedError

    def next_ev(self, now: float, avoid: Ev | None = None) -> Ev | None:
        ev = self._pick(now, avoid)
        if ev is not None:
            ev.sent += 1
            ev.last_sent = now
        return ev

    @property
    def evs(self) -> list[Ev]:
        return self.ev_set.evs

    def lookup(self, value: int) -> Ev | None:
        return self.ev_set.lookup(value)

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None) -> None:
        self.ev_set.on_ack(ev, now, ecn, rtt)

    def on_trim(self, ev: Ev, now: float, last_hop: bool) -> None:
        self.ev_set.on_trim(ev, now, last_hop)

    def on_loss(self, ev: Ev, now: float) -> None:
        self.ev_set.on_loss(ev, now)

    def due_probes(self, now: float) -> list[Ev]:
        return self.ev_set.due_probes(now)

    def on_probe_sent(self, ev: Ev, now: float) -> None:
        self.ev_set.on_probe_sent(ev, now)

    def on_probe_ack(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        self.ev_set.on_probe_ack(ev, now, rtt)

    def next_timer(self) -> float | None:
        return self.ev_set.next_timer()

    def deny(self, ev: Ev) -> None:
        self.ev_set.deny(ev)

    def allow(self, ev: Ev) -> None:
        self.ev_set.allow(ev)

    def plane_state(self, plane: int) -> PlaneState:
        return self.ev_set.plane_state(plane)

    def parked_planes(self) -> list[int]:
        return self.ev_set.parked_planes()

    def snapshot(self) -> dict[str, Any]:
        snap = self.ev_set.snapshot()
        snap["policy"] = self.name
        return snap


class SprayPolicy(PathPolicy):
    """MRC-style spraying: next GOOD EV of a pseudo-random, interleaved rotation."""

    name = "spray"

    def __init__(
        self, *, reshuffle_every: int = 8, ev_set: EvSet | None = None, **ev_set_params: Any
    ) -> None:
        super().__init__(ev_set=ev_set, **ev_set_params)
        self.rotation = _Rotation(self.ev_set, "spray", reshuffle_every)

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        return self.rotation.next_good(avoid)


class ObliviousPolicy(PathPolicy):
    """Round robin over every non-DENIED EV, deaf to marks, trims and losses.

    The naive-spraying baseline (UEC simulator's oblivious mode): it keeps
    feeding hot and dead paths, which is what the other policies are
    measured against. Health is still tracked, for stats and probing.
    """

    name = "oblivious"

    def __init__(self, *, ev_set: EvSet | None = None, **ev_set_params: Any) -> None:
        super().__init__(ev_set=ev_set, **ev_set_params)
        self.rotation = _Rotation(self.ev_set, "oblivious", reshuffle_every=0)

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        return self.rotation.next_allowed(avoid)


class SinglePolicy(PathPolicy):
    """One EV for the whole connection: the ECMP flow-hashing baseline.

    Like a hashed 5-tuple, the EV ignores ECN, trims and ``avoid``
    (retransmissions take the same path). Unlike a naive baseline it fails
    over to the next usable EV when its EV becomes ASSUMED_BAD or DENIED
    (as a real flow would after a routing reconvergence), so comparisons
    measure spraying, not a connection stuck on a dead link.
    """

    name = "single"

    def __init__(self, *, ev_set: EvSet | None = None, **ev_set_params: Any) -> None:
        super().__init__(ev_set=ev_set, **ev_set_params)
        evs = self.ev_set.evs
        self.current: Ev = evs[
            random.Random(f"braid-single:{self.ev_set.seed}").randrange(len(evs))
        ]
        self._picks = 0

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        self._picks += 1
        evs = self.ev_set.evs
        if self._picks >= len(evs):
            # Keep SKIP from sticking forever in stats: one "rotation" per
            # len(evs) packets, as for the spraying policies.
            self._picks = 0
            self.ev_set.end_rotation()
        cur = self.current
        if cur.state is GOOD or cur.state is SKIP:
            return cur
        for k in range(1, len(evs)):
            ev = evs[(cur.index + k) % len(evs)]
            if ev.state is GOOD or ev.state is SKIP:
                self.current = ev
                return ev
        return None


class RepsPolicy(PathPolicy):
    """REPS (UEC): recycle EVs that came back on unmarked ACKs.

    An unmarked ACK says "this path had room"; the EV goes into a small FIFO
    cache (``cache_size``, 8 as in the UEC simulator) and the next packet
    reuses it. With an empty cache the policy explores fresh EVs from a
    rotation. After a loss it freezes for ``freeze`` seconds (default
    4 x base_rtt): it cycles through the cached EVs without consuming them
    instead of exploring, because during a failure fresh EVs are as likely
    to hit the failure as not, while cached ones were just seen working.
    """

    name = "reps"

    def __init__(
        self,
        *,
        cache_size: int = 8,
        freeze: float | None = None,
        ev_set: EvSet | None = None,
        **ev_set_params: Any,
    ) -> None:
        super().__init__(ev_set=ev_set, **ev_set_params)
        self.cache: deque[Ev] = deque(maxlen=cache_size)
        self.freeze = 4 * self.ev_set.base_rtt if freeze is None else freeze
        self.frozen_until = -math.inf
        self._freeze_pos = 0
        self.rotation = _Rotation(self.ev_set, "reps", reshuffle_every=8)
        self.recycled = 0
        self.explored = 0

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        cache = self.cache
        if now < self.frozen_until:
            for _ in range(len(cache)):
                ev = cache[self._freeze_pos % len(cache)]
                self._freeze_pos += 1
                if ev.state is GOOD and ev is not avoid:
                    self.recycled += 1
                    return ev
        else:
            while cache:
                ev = cache.popleft()
                if ev.state is GOOD and ev is not avoid:
                    self.recycled += 1
                    return ev
        self.explored += 1
        return self.rotation.next_good(avoid)

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None) -> None:
        super().on_ack(ev, now, ecn, rtt)
        if not ecn and ev.state is GOOD:
            self.cache.append(ev)

    def on_trim(self, ev: Ev, now: float, last_hop: bool) -> None:
        super().on_trim(ev, now, last_hop)
        # A last-hop trim is the receiver's incast, not this path's fault.
        if last_hop and ev.state is GOOD:
            self.cache.append(ev)

    def on_loss(self, ev: Ev, now: float) -> None:
        super().on_loss(ev, now)
        self.frozen_until = now + self.freeze

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["recycled"] = self.recycled
        snap["explored"] = self.explored
        return snap


PolicyFactory = Callable[..., PathPolicy]

DEFAULT_POLICY = "spray"

_POLICIES: dict[str, PolicyFactory] = {}


def register_policy(name: str, factory: PolicyFactory) -> None:
    _POLICIES[name] = factory


def policy_names() -> list[str]:
    return sorted(_POLICIES)


def get_policy(name: str = DEFAULT_POLICY, **params: Any) -> PathPolicy:
    """A new policy (and EV set); unknown names raise KeyError listing the known ones."""
    try:
        factory = _POLICIES[name]
    except KeyError:
        raise KeyError(
            f"unknown path policy {name!r}; known: {', '.join(policy_names())}"
        ) from None
    return factory(**params)


for _cls in (SprayPolicy, RepsPolicy, ObliviousPolicy, SinglePolicy):
    register_policy(_cls.name, _cls)
del _cls
