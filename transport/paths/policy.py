"""The path policy interface and the registry of policies by name.

A policy picks the EV of each packet (``next_ev``, ``next_run``; with the
last resort and a resend's re-pick by evidence of life, ``choose_ev`` and
``choose_run``) and of each control packet (``control_ev``); the feedback
it takes is applied to its ``EvSet``. Only a policy picks EVs, and only it
counts the sends on them (``Ev.sent``, ``Ev.last_sent``; probes aside).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from transport.ev_state import Ev, EvState, PlaneState
from transport.paths.ev_core import EvWatcher
from transport.paths.ev_set import EvSet

GOOD = EvState.GOOD


class PathPolicy(EvWatcher):
    """Chooses the EV of each packet; that is all a policy does.

    Pass ``ev_set`` to share one, or the ``EvSet`` keyword parameters
    (planes, evs_per_plane, seed, base_rtt, ...) to build one. Feedback
    (ACKs, trims, losses, probes) goes to the ``EvSet``, the one owner of
    EV health and probing; a policy that weighs or recycles paths watches
    it (``EvWatcher`` hooks). ``next_ev`` records the send on the EV it
    returns and returns None only when no EV at all is usable (the core
    then probes and eventually fails). ``avoid`` (the EV a NACKed/lost
    packet used) is never returned while any other usable EV exists.
    """

    name: ClassVar[str] = "base"

    def __init__(self, *, ev_set: EvSet | None = None, spray_run: int = 1,
                 **ev_set_params: Any) -> None:
        if spray_run < 1:
            raise ValueError("spray_run must be ≥ 1")
        self.ev_set = ev_set if ev_set is not None else EvSet(**ev_set_params)
        self.ev_set.watch(self)
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
        #: Where ``last_resort`` looks first: the EV after its last pick.
        self._resort_cursor = 0
        #: Control packets so far (``control_ev``): ``spray_run`` in a row share an EV.
        self._ctl_rr = 0

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
                # pins a small window to one plane for RTTs on end (the claims'
                # 8-to-1 incast: one plane's port sat empty while the
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
            # a window released at once goes over every plane.
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

    def choose_ev(self, now: float, avoid: Ev | None = None,
                  life: Callable[[int], int] | None = None) -> Ev | None:
        """``next_ev``, else the last resort. A retransmission (``avoid`` is
        the EV it last took) goes to a plane with the best evidence of life
        there is (``life(plane)``, from path health: recent and timely
        answers, else timely ones): moved off a suspect plane at random, it
        would often land on another dead one (three of four, after a
        compound fault)."""
        ev = self.next_ev(now, avoid)
        if ev is None:
            return self.last_resort(now)
        if avoid is None or life is None:
            return ev
        ev_set = self.ev_set
        planes = ev_set.planes
        here = life(ev.plane)
        best = max((life(p) for p in range(planes) if ev_set.plane_state(p).value == "up"),
                   default=0)
        if here >= best:
            return ev
        for _ in range(4 * planes):
            alt = self.next_ev(now, avoid)
            if alt is None:
                break
            if life(alt.plane) >= best:
                return alt
        return ev

    def choose_run(self, now: float, limit: int) -> tuple[Ev | None, int]:
        """``next_run``, else one packet on the last resort."""
        ev, k = self.next_run(now, limit)
        if ev is None:
            return self.last_resort(now), 1
        return ev, k

    def last_resort(self, now: float) -> Ev | None:
        """No GOOD EV anywhere, but a plane is still up (the last live plane is
        never parked without a failed probe, yet its EVs can each have gone
        ASSUMED_BAD on a gray path): keep sending on them, in turn, rather
        than stall until probes bring them back one by one."""
        evs = self.ev_set.evs
        n = len(evs)
        for k in range(n):
            ev = evs[(self._resort_cursor + k) % n]
            if ev.state.value == "assumed_bad" and \
                    self.ev_set.plane_state(ev.plane).value == "up":
                self._resort_cursor = (ev.index + 1) % n
                ev.sent += 1
                ev.last_sent = now
                return ev
        return None

    def control_ev(self, plane: int) -> Ev:
        """The EV of a control packet answering on ``plane`` (0..planes-1): a
        GOOD one if there is one (ECMP hashes the source port the same way
        for a SACK as for DATA: not into a spine our own data found hot,
        SKIP, or dead, ASSUMED_BAD), else one not found dead, else any.
        ``spray_run`` in a row share one EV, so a burst of SACKs is one GSO
        send. Not counted as a send: a control packet carries no data."""
        evs = self.ev_set.plane_evs(plane)
        self._ctl_rr += 1
        n = len(evs)
        i = (self._ctl_rr // self.spray_run) % n
        for k in range(n):
            ev = evs[(i + k) % n]
            if ev.state is GOOD:
                return ev
        for k in range(n):
            ev = evs[(i + k) % n]
            if ev.state is not EvState.ASSUMED_BAD and ev.state is not EvState.DENIED:
                return ev
        return evs[i]

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

    def parked_planes(self) -> list[int]:
        return self.ev_set.parked_planes()

    def snapshot(self) -> dict[str, Any]:
        snap = self.ev_set.snapshot()
        snap["policy"] = self.name
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
