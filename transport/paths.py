"""Path policies: which EV each packet takes.

Sans-I/O and clock-free: every call carries ``now`` (seconds, the caller's
clock). The connection core holds one ``PathPolicy`` (``get_policy("spray")``),
asks it for an EV per packet (``next_ev``) and feeds back what happened on
each EV (``on_ack``, ``on_trim``, ``on_loss``, probe calls). Every policy
owns (or shares) one ``EvSet`` (``transport/ev_state.py``), which applies
the EV state table, schedules probes and parks whole planes; policies differ
only in how they pick.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, ClassVar

from transport.ev_state import Ev, EvSet, EvState, PlaneState
from transport.plane_share import PlaneShares

GOOD = EvState.GOOD
SKIP = EvState.SKIP
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


class _Rotation:
    """A pseudo-random order of EVs, interleaving planes, re-shuffled now and then.

    Interleaving keeps consecutive packets on different planes, so planes are
    loaded evenly at every time scale, not just per rotation. Re-shuffling
    every ``reshuffle_every`` rotations from the connection's own seed keeps
    connections that started together from marching over the spines in
    lockstep.
    """

    __slots__ = ("_plane_picks", "_rng", "ev_set", "order", "plane_order", "plane_pos", "pos",
                 "reshuffle_every", "rotations")

    def __init__(self, ev_set: EvSet, salt: str, reshuffle_every: int) -> None:
        self.ev_set = ev_set
        self._rng = random.Random(f"braid-{salt}:{ev_set.seed}")
        self.reshuffle_every = reshuffle_every
        self.rotations = 0
        self.pos = 0
        self.order: list[Ev] = []
        #: Each plane's EVs in rotation order, with a cursor each, for picks
        #: restricted to one plane (``next_good_on``).
        self.plane_order: list[list[Ev]] = []
        self.plane_pos: list[int] = []
        self._plane_picks = 0
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
        self.plane_order = per_plane
        self.plane_pos = [0] * len(per_plane)

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
            # Everything else is skipped: end this rotation early, and if the
            # skips outlast it, release them rather than stall the sender.
            self.wrap()
            if counts[GOOD] == 0 or (counts[GOOD] == 1 and avoid is not None
                                     and avoid.state is GOOD):
                self.ev_set.release_skipped()
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

    def next_good_on(self, plane: int) -> Ev | None:
        """The next GOOD EV of ``plane`` in its rotation order; None if it has
        none. Every ``len(order)`` such picks count as one rotation (SKIPs
        last as many packets as with the plain rotation)."""
        self._plane_picks += 1
        if self._plane_picks >= len(self.order):
            self._plane_picks = 0
            self.wrap()
        evs = self.plane_order[plane]
        n = len(evs)
        pos = self.plane_pos[plane]
        for k in range(n):
            ev = evs[(pos + k) % n]
            if ev.state is GOOD:
                self.plane_pos[plane] = (pos + k + 1) % n
                return ev
        return None

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
    other usable EV exists. Probing: when ``next_timer()`` fires, send one
    probe per EV of ``due_probes(now)`` and report it with ``on_probe_sent``;
    ``due_probes`` is also where planes that went silent get parked.
    """

    name: ClassVar[str] = "base"

    def __init__(self, *, ev_set: EvSet | None = None, spray_run: int = 1,
                 **ev_set_params: Any) -> None:
        if spray_run < 1:
            raise ValueError("spray_run must be ≥ 1")
        self.ev_set = ev_set if ev_set is not None else EvSet(**ev_set_params)
        #: Spray granularity: consecutive first transmissions that share one
        #: EV (1 = per-packet spraying). A run lets the I/O layer send them
        #: in one system call (UDP GSO: one batch is one source port).
        self.spray_run = spray_run
        self._run_ev: Ev | None = None
        self._run_left = 0
        self._run_at = -1.0  # when the run began: it never outlives one burst
        #: A run's length cap for the burst at ``_part_at`` (``next_run``).
        self._part = spray_run
        self._part_at = -1.0

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        raise NotImplementedError

    def _run_packets(self, ev: Ev, n: int) -> None:
        """``n`` packets beyond the first of a run took ``ev`` (negative: were
        handed back). A policy that weighs planes per packet bills them here."""

    def next_ev(self, now: float, avoid: Ev | None = None) -> Ev | None:
        """The EV of the next packet. ``avoid`` marks a retransmission: it is
        never part of a run (it must leave the EV it was lost on)."""
        if avoid is None and self._run_left and now == self._run_at:
            ev = self._run_ev
            if ev is not None and ev.state is GOOD:
                self._run_left -= 1
                ev.sent += 1
                ev.last_sent = now
                self._run_packets(ev, 1)
                return ev
            self._run_left = 0
        ev = self._pick(now, avoid)
        if ev is not None:
            ev.sent += 1
            ev.last_sent = now
            if avoid is None and self.spray_run > 1:
                # A run exists to be one GSO send: only packets leaving
                # together (one ``now``) can share it. Carried over to the
                # packets an ACK clock releases one or two at a time, it only
                # pins a small window to one plane for RTTs on end (issue 13:
                # in the 8-to-1 incast one plane's port sat empty while the
                # other trimmed).
                self._run_ev = ev
                self._run_left = self.spray_run - 1
                self._run_at = now
        return ev

    def next_run(self, now: float, limit: int) -> tuple[Ev | None, int]:
        """The EV of the next new packets and how many of them (1..``limit``)
        take it: ``next_ev(now)`` asked up to ``limit`` times, in one call.
        ``limit`` is what may leave now (the window's and the pacer's room):
        a new run takes at most its share of it over the planes that are up.
        Hand back what was not sent with ``unsend_run``. (The connection's
        send loop uses this for new data: a policy that overrides ``next_ev``
        must override this too.) A run never outlives one burst (one ``now``),
        as in ``next_ev``."""
        if self._run_left and now == self._run_at:
            ev = self._run_ev
            if ev is not None and ev.state is GOOD:
                k = min(limit, self._run_left)
                self._run_left -= k
                ev.sent += k
                ev.last_sent = now
                self._run_packets(ev, k)
                return ev, k
            self._run_left = 0
        ev = self._pick(now, None)
        if ev is None:
            return None, 0
        k = 1
        if self.spray_run > 1:
            # A run takes at most its plane's part of what may leave now
            # (issue 13): a window released at once goes over every plane.
            # Runs of spray_run regardless pinned a small window to one plane
            # (10-12 packets as a run of 8 and one of 2-4): in the 8-to-1
            # incast at 25 Mbit/s one plane's last hop trimmed while the
            # other's idled, burst after burst.
            # The part is fixed by the first run of an instant: later runs
            # see less room (runs of 6, 3, 2, 1 alternating planes are 8 and 4).
            if now != self._part_at:
                up = self._planes_up()
                self._part_at = now
                self._part = min(self.spray_run, -(-limit // up)) if up > 1 else self.spray_run
            cap = self._part
            k = min(limit, cap)
            self._run_ev = ev
            self._run_left = cap - k
            self._run_at = now
            self._run_packets(ev, k - 1)
        ev.sent += k
        ev.last_sent = now
        return ev, k

    def _planes_up(self) -> int:
        ev_set = self.ev_set
        return sum(1 for p in range(ev_set.planes) if ev_set.plane_state(p) is PlaneState.UP)

    def unsend_run(self, ev: Ev, n: int) -> None:
        """``n`` packets ``next_run`` gave ``ev`` did not leave: the run keeps them."""
        ev.sent -= n
        self._run_left += n
        self._run_packets(ev, -n)

    @property
    def evs(self) -> list[Ev]:
        return self.ev_set.evs

    def lookup(self, value: int) -> Ev | None:
        return self.ev_set.lookup(value)

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None,
               sent: float | None = None) -> None:
        """``sent``: when the acknowledged packet left (None: unknown, ``now``)."""
        self.ev_set.on_ack(ev, now, ecn, rtt, sent)

    def on_acks(self, ev: Ev, now: float, n: int, rtt: float | None, sent: float) -> None:
        """``n`` unmarked acknowledgements for ``ev``, the newest of a packet
        sent at ``sent``; ``rtt`` is the one RTT sample among them, if any
        (``on_ack`` each, in one call; a policy that hooks ``on_ack`` hooks
        this too, as ``RepsPolicy`` does)."""
        self.ev_set.on_acks(ev, now, n, rtt, sent)

    def on_trim(self, ev: Ev, now: float, last_hop: bool, sent: float | None = None) -> None:
        self.ev_set.on_trim(ev, now, last_hop, sent)

    def on_loss(self, ev: Ev, now: float, sent: float | None = None) -> None:
        self.ev_set.on_loss(ev, now, sent)

    def on_late(self, plane: int) -> None:
        """A packet declared lost on ``plane`` was acknowledged after all (an
        earlier copy was only late): nothing to undo here; the plane shares
        take the loss back."""

    def on_late_ev(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        """The same, for the EV the late copy took, with that copy's round
        trip if the SACK timed it (``EvSet.on_late``)."""
        self.ev_set.on_late(ev, now, rtt)

    def on_plane_rtt(self, plane: int, rtt: float, now: float) -> None:
        """A round trip through ``plane`` (a SACK's echo)."""
        self.ev_set.plane_rtt_sample(plane, rtt)

    def on_plane_loss(self, ev: Ev, now: float, sent: float) -> None:
        """A loss too weak to condemn ``ev``, still evidence about its plane."""
        self.ev_set.on_plane_loss(ev, now, sent)

    def on_sent(self, ev: Ev, now: float) -> None:
        """A packet really left on ``ev`` (``next_ev`` may be asked more than once)."""
        self.ev_set.on_sent(ev, now)

    def on_sent_run(self, ev: Ev, now: float, n: int) -> None:
        """``n`` packets left on ``ev`` at ``now``."""
        self.ev_set.on_sent_run(ev, now, n)

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
    """MRC-style spraying: next GOOD EV of a pseudo-random, interleaved rotation.

    Planes are weighted by ``PlaneShares`` (``transport/plane_share.py``):
    new data goes to the planes in proportion to the weights, counted in
    packets (a spray run of k packets is billed k), and is sprayed over the
    chosen plane's EVs in rotation order. While every plane shows the same
    queueing delay the weights are equal, so every plane carries the same
    number of packets, whatever the run lengths (a rotation that alternates
    planes per *run* does not: runs end with each burst, and an ACK-clocked
    sender whose runs alternate 8 and 1 packets loads one plane more, which
    its queue then shows). Retransmissions
    (``avoid``) ignore the weights: leaving a failing path comes first.
    ``plane_shares=False`` sprays evenly whatever the planes do.
    """

    name = "spray"

    def __init__(
        self, *, reshuffle_every: int = 8, plane_shares: bool = True,
        ev_set: EvSet | None = None, **ev_set_params: Any
    ) -> None:
        super().__init__(ev_set=ev_set, **ev_set_params)
        self.rotation = _Rotation(self.ev_set, "spray", reshuffle_every)
        n = self.ev_set.planes
        self.shares = PlaneShares(n) if plane_shares and n > 1 else None
        self._up = [True] * n

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        shares = self.shares
        if shares is None or shares.even or avoid is not None:
            return self.rotation.next_good(avoid)
        eligible = [s is PlaneState.UP for s in map(self.ev_set.plane_state, range(len(self._up)))]
        while True:
            plane = shares.choose(eligible)
            if plane is None:
                return self.rotation.next_good(avoid)
            ev = self.rotation.next_good_on(plane)
            if ev is not None:
                return ev
            eligible[plane] = False

    def _run_packets(self, ev: Ev, n: int) -> None:
        shares = self.shares
        if shares is not None and not shares.even:
            shares.charge(ev.plane, n)

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None,
               sent: float | None = None) -> None:
        super().on_ack(ev, now, ecn, rtt, sent)
        if self.shares is not None:
            self.shares.on_outcome(ev.plane, acked=1)

    def on_acks(self, ev: Ev, now: float, n: int, rtt: float | None, sent: float) -> None:
        super().on_acks(ev, now, n, rtt, sent)
        if self.shares is not None:
            self.shares.on_outcome(ev.plane, acked=n)

    def on_loss(self, ev: Ev, now: float, sent: float | None = None) -> None:
        super().on_loss(ev, now, sent)
        if self.shares is not None:
            self.shares.on_outcome(ev.plane, lost=1)

    def on_plane_loss(self, ev: Ev, now: float, sent: float) -> None:
        super().on_plane_loss(ev, now, sent)
        if self.shares is not None:
            self.shares.on_outcome(ev.plane, lost=1)

    def on_late(self, plane: int) -> None:
        if self.shares is not None:
            self.shares.on_late(plane)

    def on_plane_rtt(self, plane: int, rtt: float, now: float) -> None:
        super().on_plane_rtt(plane, rtt, now)
        shares = self.shares
        if shares is None:
            return
        # A plane parked or back from parking starts again from an even share.
        up = self._up
        for p in range(len(up)):
            now_up = self.ev_set.plane_state(p) is PlaneState.UP
            if now_up != up[p]:
                up[p] = now_up
                shares.reset(p)
        if up[plane]:
            shares.on_rtt(plane, rtt, now)

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        if self.shares is not None:
            snap["plane_shares"] = self.shares.snapshot()
        return snap


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

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None,
               sent: float | None = None) -> None:
        super().on_ack(ev, now, ecn, rtt, sent)
        if not ecn and ev.state is GOOD:
            self.cache.append(ev)

    def on_acks(self, ev: Ev, now: float, n: int, rtt: float | None, sent: float) -> None:
        super().on_acks(ev, now, n, rtt, sent)
        if ev.state is GOOD:
            self.cache.extend(repeat(ev, n))

    def on_trim(self, ev: Ev, now: float, last_hop: bool, sent: float | None = None) -> None:
        super().on_trim(ev, now, last_hop, sent)
        # A last-hop trim is the receiver's incast, not this path's fault.
        if last_hop and ev.state is GOOD:
            self.cache.append(ev)

    def on_loss(self, ev: Ev, now: float, sent: float | None = None) -> None:
        super().on_loss(ev, now, sent)
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
