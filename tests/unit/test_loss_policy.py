"""The loss classifier (transport/loss_policy.py): each declared loss gets
one verdict, from the facts the connection has."""

from __future__ import annotations

import math

import congestion
from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.ev_state import Ev, EvState
from transport.loss_policy import (
    LOSS_PENALTY,
    TWIN_AFTER_LOSSES,
    UNSTOPPED_RTTS,
    LossCause,
    LossHistory,
    LossKind,
    QueueSensor,
    classify,
)
from transport.send_queue import SentPacket

MIN_RTT = 1e-3
QUEUED = MIN_RTT * 2.0  # srtt with a standing queue of 1 ms
CALM = MIN_RTT * 1.1  # srtt with 0.1 ms of queue: under a quarter of the min RTT


class Facts:
    """Path health's answers, as plain tables."""

    def __init__(self, scores: dict[int, int] | None = None,
                 answered: dict[int, float] | None = None) -> None:
        self.scores = scores or {}
        self.answered = answered or {}

    def loss_score(self, ev: Ev) -> int:
        return self.scores.get(ev.value, 0)

    def plane_answered_sent(self, plane: int) -> float:
        return self.answered.get(plane, -math.inf)


def _lost(ev: Ev, sent: float = 1.0, losses: int = 1) -> SentPacket:
    p = SentPacket(0, 1, 0, 1000, 1000, True)
    p.ev, p.sent_time, p.losses = ev, sent, losses
    return p


def _facts_answered_after(t: float) -> Facts:
    return Facts(answered={0: t, 1: t})


def test_a_loss_behind_a_queue_on_a_healthy_ev_is_congestion() -> None:
    ev = Ev(0, 7, 0)
    (v,) = classify([_lost(ev)], cause=LossCause.INFERRED, srtt=QUEUED, min_rtt=MIN_RTT,
                    target_delay=0.0, health=_facts_answered_after(2.0))
    assert v.kind is LossKind.CONGESTION and v.to_controller and not v.condemn and not v.twin


def test_the_controllers_delay_target_says_how_much_queue_is_normal() -> None:
    ev = Ev(0, 7, 0)
    (v,) = classify([_lost(ev)], cause=LossCause.INFERRED, srtt=QUEUED, min_rtt=MIN_RTT,
                    target_delay=2 * MIN_RTT, health=_facts_answered_after(2.0))
    assert v.kind is LossKind.HOST_NOISE and not v.to_controller


def test_a_loss_on_a_failing_ev_is_path_failure_not_congestion() -> None:
    lossy, skipped = Ev(0, 7, 0), Ev(0, 8, 1, state=EvState.SKIP)
    verdicts = classify([_lost(lossy), _lost(skipped)], cause=LossCause.INFERRED,
                        srtt=QUEUED, min_rtt=MIN_RTT, target_delay=0.0,
                        health=Facts(scores={7: 1}, answered={0: 2.0}))
    assert [v.kind for v in verdicts] == [LossKind.PATH_FAILURE] * 2
    assert not any(v.to_controller for v in verdicts)


def test_a_loss_without_a_queue_is_host_noise_and_a_repeat_goes_out_twice() -> None:
    ev = Ev(0, 7, 0)
    once, again = classify([_lost(ev), _lost(Ev(1, 9, 2), losses=TWIN_AFTER_LOSSES)],
                           cause=LossCause.INFERRED, srtt=CALM, min_rtt=MIN_RTT,
                           target_delay=0.0, health=_facts_answered_after(2.0))
    assert once.kind is LossKind.HOST_NOISE and not once.twin and not once.to_controller
    assert again.kind is LossKind.HOST_NOISE and again.twin


def test_repeated_losses_on_one_ev_condemn_it_as_the_score_adds_up() -> None:
    ev = Ev(0, 7, 0)
    verdicts = classify([_lost(ev), _lost(ev)], cause=LossCause.INFERRED, srtt=QUEUED,
                        min_rtt=MIN_RTT, target_delay=0.0, health=_facts_answered_after(2.0))
    # Both judged against the EV as it was (healthy: congestion); the second
    # loss takes its score past the threshold (2 x LOSS_PENALTY).
    assert [v.kind for v in verdicts] == [LossKind.CONGESTION] * 2
    assert [v.condemn for v in verdicts] == [False, True]
    assert 2 * LOSS_PENALTY >= 12


def test_a_plane_silent_since_the_packet_left_condemns_at_once() -> None:
    ev = Ev(1, 7, 0)
    (v,) = classify([_lost(ev, sent=3.0)], cause=LossCause.INFERRED, srtt=CALM,
                    min_rtt=MIN_RTT, target_delay=0.0, health=_facts_answered_after(2.0))
    assert v.condemn and v.kind is LossKind.PATH_FAILURE and not v.twin


def test_timeouts_reach_the_controller_but_a_sweep_does_not() -> None:
    ev = Ev(0, 7, 0)
    (rto,) = classify([_lost(ev)], cause=LossCause.RTO, srtt=CALM, min_rtt=MIN_RTT,
                      target_delay=0.0, health=_facts_answered_after(2.0))
    (sweep,) = classify([_lost(ev)], cause=LossCause.SWEEP, srtt=CALM, min_rtt=MIN_RTT,
                        target_delay=0.0, health=_facts_answered_after(2.0))
    assert rto.kind is LossKind.TIMEOUT and rto.to_controller and rto.condemn
    assert sweep.kind is LossKind.TIMEOUT and not sweep.to_controller and not sweep.condemn


# -- tail-drop overflow: the verdict the controller takes ----------------------------

RTT = 2e-3


def _history(peaks: list[float], *, calm_rtts: int = 32) -> LossHistory:
    """One ACK per RTT at each delay of ``peaks``, then one more RTT (the loss's)."""
    h = LossHistory(calm_rtts)
    for i, d in enumerate(peaks):
        h.note_delay(i * RTT, d, RTT)
    return h


def test_a_loss_with_more_queue_than_the_path_carried_without_loss_is_an_overflow() -> None:
    # 20 RTTs carried up to 1.2 ms of delay without loss (a busy host).
    h = _history([1.2e-3, 0.3e-3] * 10 + [0.9e-3])
    assert h.ceiling() == 1.2e-3
    # A loss at 0.9 ms: within what the path carries, no overflow.
    assert h.judge(0.9e-3, 0.5e-3) is None
    # A queue rising above anything carried before, then a loss: an overflow,
    # at the higher of the level and the last two RTTs' peaks.
    h = _history([1.2e-3, 0.3e-3] * 10 + [1.5e-3, 1.8e-3])
    assert h.judge(1.6e-3, 0.5e-3) == 1.8e-3
    # Below the controller's target: no queue behind it, whatever the history.
    assert _history([0.1e-3] * 5).judge(0.4e-3, 0.5e-3) is None


def test_half_the_rtts_with_a_loss_void_the_ceiling() -> None:
    # A queue standing at a tail-drop buffer: every other RTT loses at its top.
    h = LossHistory(32)
    for i in range(12):
        h.note_delay(i * RTT, 2e-3, RTT)
        if i % 2:
            h.judge(2e-3, 1.0)  # under the target: recorded, not an overflow
    h.note_delay(12 * RTT, 1.8e-3, RTT)
    assert h.ceiling() == 0.0 and not h.at_random()
    assert h.judge(1.8e-3, 0.5e-3) == 2e-3


def test_losses_the_cuts_do_not_stop_say_the_path_loses_at_random() -> None:
    # An overflow judged, then losses at the same top level in every RTT for
    # UNSTOPPED_RTTS RTTs: a buffer overflowed by the window the controller
    # was cutting all that time would have stopped dropping.
    h = _history([1e-3] * 10)
    i = 10
    h.note_delay(i * RTT, 3e-3, RTT)
    assert h.judge(3e-3, 0.5e-3) == 3e-3
    for i in range(11, 11 + UNSTOPPED_RTTS):
        h.note_delay(i * RTT, 3e-3, RTT)
        assert not h.at_random()
        h.judge(3e-3, 0.5e-3)
    assert h.at_random()
    # Held while the losses go on in most RTTs...
    for j in range(i + 1, i + 1 + 2 * UNSTOPPED_RTTS):
        h.note_delay(j * RTT, 3e-3, RTT)
        if j % 2:
            assert h.judge(3e-3, 0.5e-3) is None
    assert h.at_random()
    # ...and calm RTTs end it.
    for k in range(j + 1, j + 1 + 2 * UNSTOPPED_RTTS):
        h.note_delay(k * RTT, 1e-3, RTT)
    assert h.judge(3.5e-3, 0.5e-3) == 3.5e-3  # a loss above what was carried counts again
    assert not h.at_random()


def test_a_controller_that_stops_the_losses_keeps_its_overflow() -> None:
    # Overflow, one more loss, then calm RTTs: the cuts worked.
    h = _history([1e-3] * 10)
    h.note_delay(10 * RTT, 3e-3, RTT)
    assert h.judge(3e-3, 0.5e-3) == 3e-3
    for i in range(11, 11 + 3 * UNSTOPPED_RTTS):
        h.note_delay(i * RTT, 1.2e-3, RTT)
        if i == 11:
            h.judge(3e-3, 0.5e-3)
    assert not h.at_random()


def test_losses_on_a_path_that_loses_at_random_are_not_heard_and_repeats_go_twice() -> None:
    ev = Ev(0, 7, 0)
    h = _history([1e-3] * 10)
    for i in range(10, 11 + UNSTOPPED_RTTS):  # an overflow, then losses not stopped
        h.note_delay(i * RTT, 3e-3, RTT)
        h.judge(3e-3, 0.5e-3)
    assert h.at_random()
    lost = [_lost(ev, losses=1), _lost(Ev(1, 3, 1), losses=TWIN_AFTER_LOSSES)]
    out = classify(lost, cause=LossCause.INFERRED, srtt=QUEUED, min_rtt=MIN_RTT,
                   target_delay=0.5e-3, health=_facts_answered_after(2.0),
                   history=h, queue_level=3e-3)
    assert [v.kind for v in out] == [LossKind.RANDOM, LossKind.RANDOM]
    assert [v.to_controller for v in out] == [False, False]
    assert [v.twin for v in out] == [False, True]
    assert all(v.overflow is None for v in out)


def test_the_overflow_rides_on_the_verdicts_the_controller_hears() -> None:
    ev = Ev(0, 7, 0)
    h = _history([0.1e-3] * 5)
    lost = [_lost(ev), _lost(Ev(1, 3, 1))]
    out = classify(lost, cause=LossCause.INFERRED, srtt=QUEUED, min_rtt=MIN_RTT,
                   target_delay=0.5e-3, health=_facts_answered_after(2.0),
                   history=h, queue_level=1e-3)
    assert [v.to_controller for v in out] == [True, True]
    assert [v.overflow for v in out] == [1e-3, 1e-3]
    # Losses the controller does not hear are not judged (nor recorded).
    h = _history([0.1e-3] * 5)
    (v,) = classify([_lost(ev)], cause=LossCause.INFERRED, srtt=CALM, min_rtt=MIN_RTT,
                    target_delay=0.5e-3, health=_facts_answered_after(2.0),
                    history=h, queue_level=1e-3)
    assert not v.to_controller and v.overflow is None
    assert h.judge(1e-3, 0.5e-3) == 1e-3  # its calm RTTs still count


def test_a_connection_keeps_a_loss_history_only_for_a_controller_that_measures_delay() -> None:
    conn = Connection(config=ConnectionConfig(planes=2), secret=None, local_cid=1, now=0.0,
                      initiator=True)
    assert isinstance(conn.cc, QueueSensor) and conn.loss_history is not None
    assert conn._sensor is conn.cc  # decided once, at construction
    assert conn.loss_history.calm_rtts == conn.cc.calm_rtts
    fixed = Connection(config=ConnectionConfig(planes=2, congestion="fixed"), secret=None,
                       local_cid=1, now=0.0, initiator=True)
    assert not isinstance(fixed.cc, QueueSensor) and fixed.loss_history is None
    assert fixed._sensor is None
    assert isinstance(congestion.get("nscc-uec"), QueueSensor)
