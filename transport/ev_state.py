"""EV health: states, events and the transition table, and the EV record.

After MRC's EV states (the MRC paper, 2026): the table below is the single
source of truth; ``EvSet`` (``transport/paths/ev_set.py``) applies it, with
plane liveness (``paths/liveness.py``) and probing (``paths/probes.py``);
the policies of ``transport/paths/`` read the resulting states, and
``tools/docs/state_diagrams.py`` draws it into docs/state-machines.md.

An event absent from a state's row leaves the state unchanged and is not
recorded anywhere (e.g. an ECN-marked ACK on an ASSUMED_BAD EV, a last-hop
trim in any state): feedback races with state changes all the time, so a
stale or irrelevant event is normal, not an error.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
    Times are seconds on the caller's clock. Its RTT is kept with every
    path's in ``transport/paths/rtt.py`` (``PathModel``).
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
        }
