"""The path policies by name: ``spray``, ``oblivious``, ``single``, ``reps``."""

from __future__ import annotations

import math
import random
from collections import deque
from itertools import repeat
from typing import Any

from transport.ev_state import Ev, EvState, PlaneState
from transport.paths.ev_set import EvSet
from transport.paths.plane_share import PlaneShares
from transport.paths.policy import PathPolicy, register_policy
from transport.paths.rotation import _Rotation

GOOD = EvState.GOOD
SKIP = EvState.SKIP
#: How many packets of new data one plane may carry more than another, for
#: the turns each was given, while the weights are even (two spray runs):
#: beyond it the rotation gives way to the other (``SprayPolicy._even_pick``).
AHEAD = 16


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
        self._plane_changes = -1  # the EV set's count last seen (-1: never looked)
        #: New data packets and the rotation's turns per plane while the
        #: weights are even (``_even_pick``; made at its first pick: a
        #: connection that never sends data, a half-open one, keeps none),
        #: and the EV set's count of plane changes they were counted since.
        self._counts: tuple[list[int], list[int]] | None = None
        self._even_changes = -1

    def _pick(self, now: float, avoid: Ev | None) -> Ev | None:
        shares = self.shares
        if shares is None or avoid is not None:
            return self.rotation.next_good(avoid)
        if shares.even:
            return self._even_pick()
        self._even_changes = -1
        eligible = [s is PlaneState.UP for s in map(self.ev_set.plane_state, range(len(self._up)))]
        if sum(eligible) < 2:  # one plane up: nothing to share
            return self.rotation.next_good(avoid)
        while True:
            plane = shares.choose(eligible)
            if plane is None:
                return self.rotation.next_good(avoid)
            ev = self.rotation.next_good_on(plane)
            if ev is not None:
                return ev
            eligible[plane] = False

    def _even_pick(self) -> Ev | None:
        """The rotation's next EV, unless its plane has carried ``AHEAD``
        packets more, for the turns it was given, than the plane that is up
        and has carried the fewest: then that plane's next EV.

        A turn is a pick of the rotation; a run takes one and carries up to
        ``spray_run`` packets, and runs end with each burst, so the planes'
        packets drift apart by the runs' lengths with nothing to pull them
        back, and two equal tail-drop links integrate the drift (on the
        tail-drop row, at every drop one link's queue was at 110-125 KB of
        its 128 KB and the other's at 20-50 KB; decision 0035). Measured
        against the turns (each plane's packets less its turns times the
        mean run), not in packets: a turn the rotation does not give (an EV
        skipped for a mark or a trim) is a plane's share falling on purpose.
        The plane that gives way loses the turn; the other is given one
        beside the rotation's, which the rotation does not count: it ends
        when it would have, and an EV skipped for a mark stays skipped as
        long."""
        ev = self.rotation.next_good(None)
        if ev is None:
            return None
        es = self.ev_set
        if self._counts is None:
            self._counts = ([0] * es.planes, [0] * es.planes)
        packets, turns = self._counts
        if es.plane_changes != self._even_changes:
            # A plane parked or back, or the weights even again: the count
            # starts again (a plane is not owed what it missed meanwhile).
            self._even_changes = es.plane_changes
            for p in range(len(packets)):
                packets[p] = turns[p] = 0
        plane = ev.plane
        turns[plane] += 1
        # The planes up, and their packets and turns (one loop: this runs per run).
        up: list[int] = []
        all_packets = all_turns = 0
        mine_up = False
        state = es.plane_state
        for p in range(len(packets)):
            if state(p) is PlaneState.UP:
                up.append(p)
                all_packets += packets[p]
                all_turns += turns[p]
                if p == plane:
                    mine_up = True
        if mine_up and len(up) > 1:
            run = all_packets / max(1, all_turns)
            # The plane furthest behind for its turns (the first such: as min()).
            least = up[0]
            low = packets[least] - run * turns[least]
            for p in up[1:]:
                v = packets[p] - run * turns[p]
                if v < low:
                    least, low = p, v
            ahead = packets[plane] - packets[least] - run * (turns[plane] - turns[least])
            if ahead >= AHEAD:
                alt = self.rotation.next_good_on(least, turn=False)
                if alt is not None:
                    ev = alt
        packets[ev.plane] += 1
        return ev

    def _run_packets(self, ev: Ev, n: int) -> None:
        shares = self.shares
        if shares is None:
            return
        if shares.even:
            if self._counts is not None:
                self._counts[0][ev.plane] += n
        else:
            shares.charge(ev.plane, n)

    def acked(self, ev: Ev, now: float, n: int, ecn: bool) -> None:
        if self.shares is not None:
            self.shares.on_outcome(ev.plane, acked=n)

    def lost(self, ev: Ev, now: float, condemned: bool) -> None:
        if self.shares is not None:
            self.shares.on_outcome(ev.plane, lost=1)

    def late(self, plane: int) -> None:
        if self.shares is not None:
            self.shares.on_late(plane)

    def plane_rtt(self, plane: int, rtt: float, now: float) -> None:
        shares = self.shares
        if shares is None:
            return
        # A plane parked or back from parking starts again from an even share.
        up = self._up
        es = self.ev_set
        if es.plane_changes != self._plane_changes:
            self._plane_changes = es.plane_changes
            for p in range(len(up)):
                now_up = es.plane_state(p) is PlaneState.UP
                if now_up != up[p]:
                    up[p] = now_up
                    shares.reset(p)
        if up[plane]:
            shares.on_rtt(plane, rtt, now)

    def plane_base(self, plane: int, rtt: float) -> None:
        if self.shares is not None and self._up[plane]:
            self.shares.on_base(plane, rtt)

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

    def acked(self, ev: Ev, now: float, n: int, ecn: bool) -> None:
        if not ecn and ev.state is GOOD:
            self.cache.extend(repeat(ev, n))

    def trimmed(self, ev: Ev, now: float, last_hop: bool) -> None:
        # A last-hop trim is the receiver's incast, not this path's fault.
        if last_hop and ev.state is GOOD:
            self.cache.append(ev)

    def lost(self, ev: Ev, now: float, condemned: bool) -> None:
        if condemned:
            self.frozen_until = now + self.freeze

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["recycled"] = self.recycled
        snap["explored"] = self.explored
        return snap


for _cls in (SprayPolicy, RepsPolicy, ObliviousPolicy, SinglePolicy):
    register_policy(_cls.name, _cls)
del _cls
