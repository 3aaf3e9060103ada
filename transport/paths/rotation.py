"""The pseudo-random, plane-interleaved EV rotation the policies pick from."""

from __future__ import annotations

import random

from transport.ev_state import Ev, EvState
from transport.paths.ev_set import EvSet

GOOD = EvState.GOOD
SKIP = EvState.SKIP
DENIED = EvState.DENIED


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

    def next_good_on(self, plane: int, *, turn: bool = True) -> Ev | None:
        """The next GOOD EV of ``plane`` in its rotation order; None if it has
        none. Every ``len(order)`` such picks count as one rotation (SKIPs
        last as many packets as with the plain rotation); ``turn`` False: a
        pick beside the rotation's own, which does not count (the rotation,
        and what it ends, keep their pace)."""
        if turn:
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
