"""What each declared loss means: the one loss classifier of the transport.

Every loss the sender declares (by its loss rules, by the RTO, or swept from
the window after an RTO) is classified here once, from facts the connection
has, and each consumer reads the answer instead of deciding again:

- the congestion controller hears a loss (``cc.on_loss``) only when its
  verdict says ``to_controller``;
- path health condemns the EV (ASSUMED_BAD) only when the verdict says
  ``condemn``; every other loss is evidence about the plane only;
- the scheduler resends as two copies on two EVs what the verdict marks
  ``twin`` (``TWIN_AFTER_LOSSES``).

The classes (``LossKind``) and why. In a trimming fabric congestion shows up
as trims, ECN and delay, so:

- ``CONGESTION``: a queue stands behind the loss (the connection's queueing
  delay, srtt - min RTT, above both a quarter of the min RTT and the
  controller's own delay target, which says how much queueing is normal: a
  userspace testbed jitters) and the EV was not already failing. The only
  inferred loss the controller hears.
- ``PATH_FAILURE``: the EV has lost recently and its ACKs have not
  outweighed it, or is out of service (a rebooting spine keeps eating what
  is sprayed onto it until the EV is parked; cutting the window for each
  such loss made QuickAdapt spiral to one packet while 15 of 16 paths were
  fine), or its plane has answered nothing sent since the packet left, or
  the EV's loss score crosses ``LOSS_THRESHOLD``.
- ``HOST_NOISE``: no queue behind the loss and no failing path: corruption,
  a gray path, host jitter. One such loss is noise; a packet lost again
  after its resend this way goes out as twin copies.
- ``TIMEOUT``: declared by the RTO (or swept from the window after one):
  the controller hears an RTO's losses whatever the queue, and each condemns
  its EV; the sweep's were heard as the RTO itself, and judge their EVs as
  inferred losses do.
- ``SPURIOUS``: declared lost and acknowledged after all (the first copy was
  only late). Not a verdict at declaration time: ``Connection`` takes such
  losses back from the plane shares, the EV (``EvSet.on_late``) and the
  controller (``cc.on_spurious_loss``) when the late acknowledgement comes.

This module is the single decider for the transport. The NSCC controller
(congestion/nscc.py) still runs its own tail-drop check inside ``on_loss``
on the losses it is given; that is the remaining copy of this decision,
to be folded in here next.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from transport.ev_state import Ev, EvState
from transport.send_queue import SentPacket

#: Queueing delay (as a fraction of the min RTT) above which a loss can be
#: congestion (the controller's delay target, if larger, counts instead).
CONGESTIVE_QUEUEING = 0.25
#: Per-EV loss score (after UEC's penalty idea): a loss adds, an ACK of the
#: EV takes one off (``PathHealth``); a random loss on a healthy EV never
#: reaches the threshold alone.
LOSS_PENALTY = 8
LOSS_THRESHOLD = 12
#: A packet declared lost this many times (its resend was lost too), with no
#: queueing behind the loss, is resent as two copies on two EVs: on a path
#: that loses at random, the worst packet of a run is otherwise lost again
#: and again, a loss-detection delay each time, and holds its message (issue
#: 13's compound row: 30% loss, one packet sent 9 times over 46 ms). Two
#: copies make a further loss the square of the path's loss rate; they cost
#: (loss rate)^2 of the traffic. Not for congestive losses (a queue behind
#: them): copies there only feed the queue (an incast with 34% tail drops
#: lost 6% of its goodput to them).
TWIN_AFTER_LOSSES = 2


class LossKind(enum.Enum):
    CONGESTION = "congestion"
    PATH_FAILURE = "path_failure"
    HOST_NOISE = "host_noise"
    TIMEOUT = "timeout"
    SPURIOUS = "spurious"


class LossCause(enum.Enum):
    """How the sender came to declare the loss."""

    #: The loss rules: per-EV order or the time rule.
    INFERRED = "inferred"
    #: The RTO fired.
    RTO = "rto"
    #: Swept from the window after an RTO left no room to retransmit.
    SWEEP = "sweep"


@dataclass(frozen=True, slots=True)
class LossVerdict:
    kind: LossKind
    #: The congestion controller hears it (``cc.on_loss``).
    to_controller: bool
    #: The EV is condemned (ASSUMED_BAD); else only its plane hears of it.
    condemn: bool
    #: Resend it as two copies on two EVs.
    twin: bool


class PathFacts(Protocol):
    """What the classifier reads of path health (``PathHealth`` has it)."""

    def loss_score(self, ev: Ev) -> int:
        """The EV's loss score now (0: no loss its ACKs have not outweighed)."""

    def plane_answered_sent(self, plane: int) -> float:
        """Send time of the newest packet of ``plane`` answered (-inf: none)."""


def congestive(srtt: float, min_rtt: float, target_delay: float) -> bool:
    """Does a queue stand behind losses now?"""
    return srtt - min_rtt > max(CONGESTIVE_QUEUEING * min_rtt, target_delay)


def classify(lost: Sequence[SentPacket], *, cause: LossCause, srtt: float, min_rtt: float,
             target_delay: float, health: PathFacts) -> list[LossVerdict]:
    """One verdict per packet of ``lost`` (declared together, in order).

    The EV's failing state is read as it was before this batch (two losses
    of one EV in one batch are both judged against the EV as it was); its
    loss score accumulates through the batch, as path health applies it."""
    queue = congestive(srtt, min_rtt, target_delay)
    timeout = cause is not LossCause.INFERRED
    scores: dict[int, int] = {}
    out: list[LossVerdict] = []
    for p in lost:
        ev = p.ev
        failing = False
        condemn = False
        if ev is not None:
            before = health.loss_score(ev)
            failing = before > 0 or ev.state is not EvState.GOOD
            score = scores.get(ev.value, before) + LOSS_PENALTY
            # An answer to an *older* packet arriving after this one left
            # proves nothing about the plane since; only a newer one does.
            silent = health.plane_answered_sent(ev.plane) < p.sent_time
            condemn = cause is LossCause.RTO or silent or score >= LOSS_THRESHOLD
            scores[ev.value] = 0 if condemn else score
        if timeout:
            out.append(LossVerdict(LossKind.TIMEOUT, cause is LossCause.RTO, condemn, False))
        elif queue:
            kind = LossKind.PATH_FAILURE if failing else LossKind.CONGESTION
            out.append(LossVerdict(kind, not failing, condemn, False))
        else:
            kind = LossKind.PATH_FAILURE if condemn else LossKind.HOST_NOISE
            out.append(LossVerdict(kind, False, condemn, p.losses >= TWIN_AFTER_LOSSES))
    return out
