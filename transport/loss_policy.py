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
- ``RANDOM``: a queue stands behind the loss, but the path loses at random
  (``LossHistory.at_random``: losses that the controller's cuts did not
  stop). Not heard by the controller, as noise is not: a window cut for
  each of a 30%-lossy path's losses ends at one packet whatever the queue
  (the claims' compound row); the controller hears that the path loses at
  random (``QueueSensor.on_random_loss``). A repeat goes out as twin copies.
- ``TIMEOUT``: declared by the RTO (or swept from the window after one):
  the controller hears an RTO's losses whatever the queue, and each condemns
  its EV; the sweep's were heard as the RTO itself, and judge their EVs as
  inferred losses do.

A loss acknowledged after all (the first copy was only late: a spurious
loss) is not a class here: at declaration time nothing tells it apart, and
its verdict stands until the late acknowledgement comes. Then the sender
finds it (``InflightTable``, ``AckResult.late``) and the connection's SACK
handling (``conn_dispatch``) takes it back through
``InflightTable.take_back_loss`` from whatever its verdict charged: the
plane shares (``EvSet.on_late_plane``), the EV (``EvSet.on_late``) and the
controller (``cc.on_spurious_loss``).

Apart from its kind, a loss the controller hears may be a tail-drop
buffer overflowing (``LossVerdict.overflow``): a loss with more queue
behind it than the path carried without loss. ``LossHistory`` keeps, per
connection, the highest queueing delay of each RTT and which RTTs had a
loss, from the per-ACK delay a controller that measures it reports
(``QueueSensor``: NSCC, each packet's RTT minus its plane's base RTT). A
loss within the delay the path carries anyway (a busy host's scheduling
delay) says nothing about a queue, and neither does any loss while the
path loses at random (``LossHistory.at_random``: losses that went on in
most RTTs while the controller cut the window on its queue). The
controller takes the answer (``cc.on_loss(overflow=...)``; NSCC's
deviation 1 turns delay into the mark on a fabric that never marked or
trimmed) and does not judge again.

This module is the single decider for the transport: no consumer
classifies a loss itself.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

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
#: and again, a loss-detection delay each time, and holds its message (the
#: claims' compound row: 30% loss, one packet sent 9 times over 46 ms). Two
#: copies make a further loss the square of the path's loss rate; they cost
#: (loss rate)^2 of the traffic. Not for congestive losses (a queue behind
#: them): copies there only feed the queue (an incast with 34% tail drops
#: lost 6% of its goodput to them).
TWIN_AFTER_LOSSES = 2
#: Losses in at least half of this many RTTs (or more) after the first loss
#: judged an overflow were not stopped by the controller's cuts: the path
#: loses at random (``LossHistory.at_random``).
UNSTOPPED_RTTS = 8
#: ``LossHistory``'s per-RTT flags: a loss came in that RTT; its delay rose
#: to an RTT with a loss (a queue filling up to the drop).
_LOSS, _RISE = 2.0, 1.0


class LossKind(enum.Enum):
    CONGESTION = "congestion"
    PATH_FAILURE = "path_failure"
    HOST_NOISE = "host_noise"
    RANDOM = "random"
    TIMEOUT = "timeout"


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
    #: A tail-drop buffer overflowing (``LossHistory.judge``), the queueing
    #: delay it overflowed at; None: not one. Set on the verdicts the
    #: controller hears, and the same for all of one batch.
    overflow: float | None = None


class PathFacts(Protocol):
    """What the classifier reads of path health (``PathHealth`` has it)."""

    def loss_score(self, ev: Ev) -> int:
        """The EV's loss score now (0: no loss its ACKs have not outweighed)."""

    def plane_answered_sent(self, plane: int) -> float:
        """Send time of the newest packet of ``plane`` answered (-inf: none)."""


@runtime_checkable
class QueueSensor(Protocol):
    """A controller that measures each ACK's queueing delay (NSCC) and takes
    the overflow answer: the connection keeps a ``LossHistory`` for it."""

    calm_rtts: int

    @property
    def queue_level(self) -> float:
        """The queueing delay behind a loss reported now (seconds)."""
        ...

    def report_delays(self, sink: Callable[[float, float, float], None] | None) -> None:
        """Call ``sink(now, delay, rtt)`` on each ACK's queueing delay, ``rtt``
        the controller's RTT estimate (the history's bucket length)."""
        ...

    def on_loss(self, *, now: float, lost_bytes: int, overflow: float | None = None) -> None: ...

    def on_random_loss(self, *, now: float, lost_bytes: int) -> None:
        """The classifier found the path losing at random (``LossKind.RANDOM``):
        its losses are no congestion signal, whatever the queue."""
        ...


class LossHistory:
    """A connection's calm-delay history: per RTT-long bucket [start, highest
    queueing delay, ``_LOSS`` if a loss was reported in it, ``_RISE`` if its
    delay rose to one, else 0], the last ``calm_rtts`` + 2 of them; and
    whether the path loses at random (``at_random``)."""

    __slots__ = ("_calm", "_held", "_overflowed", "calm_rtts")

    def __init__(self, calm_rtts: int) -> None:
        if calm_rtts < 1:
            raise ValueError("calm_rtts must be >= 1")
        self.calm_rtts = calm_rtts
        self._calm: deque[list[float]] = deque()
        # When the first overflow still in the history was judged (None:
        # none); and since when the losses that went on after it as if
        # nothing cut the window hold ``at_random`` (None: not held).
        self._overflowed: float | None = None
        self._held: float | None = None

    def note_delay(self, now: float, delay: float, rtt: float) -> None:
        """One ACK's queueing delay; a new bucket every ``rtt``."""
        calm = self._calm
        if not calm or now >= calm[-1][0] + rtt:
            calm.append([now, delay, 0.0])
            while len(calm) > self.calm_rtts + 2:
                calm.popleft()
        elif delay > calm[-1][1]:
            calm[-1][1] = delay

    def ceiling(self) -> float:
        """The highest delay the path carried without loss: over the last
        ``calm_rtts`` RTTs, leaving out the current and the previous RTT (the
        loss's own), every RTT with a loss, and the RTTs of a delay rising
        to one (a queue filling up to the drop). 0 when there is no such RTT,
        or when at least half of those RTTs had a loss (the path does not
        carry its delay without loss): every loss with a queue then counts."""
        calm = self._calm
        n = len(calm) - 2
        if n <= 0 or 2 * sum(1 for i in range(n) if calm[i][2] == _LOSS) >= n:
            return 0.0
        return max((calm[i][1] for i in range(n) if not calm[i][2]), default=0.0)

    def at_random(self) -> bool:
        """Does the path lose at random? Over at least ``UNSTOPPED_RTTS``
        RTTs since the first loss judged an overflow, losses in at least
        half of them: the controller cut the window on its queue all that
        time (delay as the mark, once per RTT), and a buffer it overflowed
        stops dropping a few cuts on (a daemon told a 100x line rate,
        1.25 MB of window into a 128 KB tbf queue, stops within 4), while a
        path losing at random (corruption, a gray link, a policer) drops
        whatever the window. Held until fewer than half of the last
        2 x ``UNSTOPPED_RTTS`` RTTs had a loss. While it holds, a loss that
        comes with a queue says nothing about a buffer overflowing (the
        claims' compound row on a busy host: 30% loss on the survivor, each
        loss with the 2-4 ms the host's scheduling adds, read as overflows,
        turned delay into the mark, and the host's delay then cut the window
        to one packet)."""
        return self._held is not None

    def _lossy(self, since: float) -> bool:
        """At least half the RTTs kept from ``since`` on had a loss."""
        n = lost = 0
        for b in self._calm:
            if b[0] >= since:
                n += 1
                lost += b[2] == _LOSS
        return n >= UNSTOPPED_RTTS and 2 * lost >= n

    def judge(self, level: float, target: float) -> float | None:
        """Losses reported to the controller now, with queueing delay
        ``level`` behind them (``QueueSensor.queue_level``): are they a
        tail-drop buffer overflowing? Only with a queue (``level`` at least
        the controller's ``target``) and more of it than the path carried
        without loss. Returns the delay it overflowed at (the higher of
        ``level`` and the last two RTTs' peaks), else None; None too while
        the path loses at random (``at_random``). Records the loss."""
        calm = self._calm
        if calm:
            # This RTT had a loss, and the RTTs of a delay rising to it (each
            # one's peak above the one before) were the queue filling up.
            calm[-1][2] = _LOSS
            j = len(calm) - 2
            if j >= 0 and not calm[j][2]:
                calm[j][2] = _RISE
            while j > 0 and calm[j - 1][1] < calm[j][1] and not calm[j - 1][2]:
                calm[j - 1][2] = _RISE
                j -= 1
        if not calm:
            return None
        if self._held is not None:
            # Held until fewer than half of the last 2 x UNSTOPPED_RTTS RTTs
            # had a loss, judged once UNSTOPPED_RTTS have passed since.
            recent = calm[max(0, len(calm) - 2 * UNSTOPPED_RTTS)][0]
            if sum(1 for b in calm if b[0] >= self._held) >= UNSTOPPED_RTTS and \
                    not self._lossy(recent):
                self._held = None
        elif self._overflowed is not None:
            if self._overflowed < calm[0][0]:
                self._overflowed = None  # it left the history
            elif self._lossy(self._overflowed):
                self._held, self._overflowed = calm[-1][0], None
        if level >= target and level > self.ceiling() and not self.at_random():
            if self._overflowed is None:
                self._overflowed = calm[-1][0]
            peak = max((b[1] for b in list(calm)[-2:]), default=0.0)
            return max(level, peak)
        return None


def congestive(srtt: float, min_rtt: float, target_delay: float) -> bool:
    """Does a queue stand behind losses now?"""
    return srtt - min_rtt > max(CONGESTIVE_QUEUEING * min_rtt, target_delay)


def classify(lost: Sequence[SentPacket], *, cause: LossCause, srtt: float, min_rtt: float,
             target_delay: float, health: PathFacts, history: LossHistory | None = None,
             queue_level: float = 0.0) -> list[LossVerdict]:
    """One verdict per packet of ``lost`` (declared together, in order).

    The EV's failing state is read as it was before this batch (two losses
    of one EV in one batch are both judged against the EV as it was); its
    loss score accumulates through the batch, as path health applies it.
    With a ``history`` (and the controller's ``queue_level``), the losses the
    controller hears are judged once more, together: a tail-drop overflow?"""
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
    if history is not None and any(v.to_controller for v in out):
        level = history.judge(queue_level, target_delay)
        if history.at_random():
            # A queue stands, but the path loses whatever it holds: no
            # congestion signal (and a repeat goes out twice, as noise's).
            out = [LossVerdict(LossKind.RANDOM, False, v.condemn, p.losses >= TWIN_AFTER_LOSSES)
                   if v.to_controller else v for v, p in zip(out, lost, strict=True)]
        elif level is not None:
            out = [replace(v, overflow=level) if v.to_controller else v for v in out]
    return out
