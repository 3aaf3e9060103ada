"""Liveness: the core's worst case in virtual time.

Scenarios k–n (testbed/sim/worst_case.py, shared with ``braid bench sim``)
each run with a one-message-at-a-time client and a pipelined one; every
assertion is on an exact virtual-time figure. Plus unit tests of the rules
behind them: plane silence, the last live plane, the tail-loss probe, PSN
serial arithmetic and a timer that must advance.
"""

from __future__ import annotations

import pytest

from testbed.sim import worst_case as W
from transport.path_health import PathHealth
from transport.paths import EvSet, PlaneState, SprayPolicy
from transport.psn import unwrap, wire
from transport.receiver import Receiver
from transport.sender import MAX_TLPS, Sender
from wire.packets import Data, Sack

RTT = 1e-3


# -- scenarios -----------------------------------------------------------------------


@pytest.mark.parametrize("direction", W.DIRECTIONS)
@pytest.mark.parametrize("client", W.CLIENTS)
def test_k_compound_fault(client: str, direction: str) -> None:
    # A dead plane's few unanswered sends must not wait for a probe plus a
    # whole extra plane silence before it is parked.
    r = W.scenario_compound(client=client, direction=direction)
    assert r["ok"] and r["failed"] is None
    assert None not in r["parked_after_rtts"], r["parked_after_rtts"]
    after = _parked_after_unanswered(r)
    assert max(after) <= 5.0, (after, r["parked_after_rtts"])
    if client == "pipelined":  # no idle plane: both clocks start together
        assert r["worst_parked_after_rtts"] <= 5.0, r["parked_after_rtts"]
    assert r["max_gap"] <= r["gap_limit"], (r["max_gap"], r["gap_limit"])
    assert r["rtos"] <= 2, r["rtos"]


def _parked_after_unanswered(r: dict[str, object]) -> list[float]:
    """Per dead plane: its park after its first send that was never
    answered, in the smoothed RTT at the park (as scenario m measures). The
    same as after the last answered send when the plane carried traffic up
    to the death; with a one-message client the plane can sit idle between
    its last answered send and the death, and no rule can notice a death
    before the plane is used again."""
    a, die = r["a"], r["marks"]["die"]  # type: ignore[index]
    sends: list[list[float]] = r["sends"]  # type: ignore[assignment]
    out = []
    for p in range(1, 4):
        park = W._parked_at(a, p, die)  # type: ignore[arg-type]
        assert park is not None, f"dead plane {p} never parked"
        answered = r["watch"].answered_sent[p]  # type: ignore[attr-defined]
        first = min((u for u in sends[p] if u > answered), default=park[0])
        out.append((park[0] - first) / park[1])
    return out


#: Death times spread over a one-message client's message cycle (~225 us at
#: 2 MiB in 64 KiB messages): the death can find the dead planes mid-burst,
#: at the tail of a message with one or two packets in flight, or idle.
PHASES_US = (0, 25, 50, 75, 100, 125, 150, 175, 200, 225)


@pytest.mark.parametrize("direction", W.DIRECTIONS)
@pytest.mark.parametrize("phase_us", PHASES_US)
def test_k_compound_fault_at_any_phase_of_the_message_cycle(phase_us: int,
                                                           direction: str) -> None:
    # Whatever the phase: neither a probe followed by a whole extra plane
    # silence, nor the only answering plane parked just before the others
    # died (no evidence at all until it is probed back), may delay the park.
    r = W.scenario_compound(client="one", direction=direction, size=2 << 20,
                            die_at=1e-3 + phase_us * 1e-6)
    assert r["ok"] and r["failed"] is None
    after = _parked_after_unanswered(r)
    assert max(after) <= 5.0, (phase_us, after)
    assert r["rtos"] <= 2, r["rtos"]


@pytest.mark.parametrize("die_at_us", (1000, 1060, 1130))
def test_k_pipelined_compound_fault_at_other_times(die_at_us: int) -> None:
    for direction in W.DIRECTIONS:
        r = W.scenario_compound(client="pipelined", direction=direction,
                                die_at=die_at_us * 1e-6)
        assert r["ok"] and r["failed"] is None
        assert None not in r["parked_after_rtts"], r["parked_after_rtts"]
        assert r["worst_parked_after_rtts"] <= 5.0, (die_at_us, r["parked_after_rtts"])
        assert r["rtos"] <= 2, r["rtos"]


@pytest.mark.parametrize("client", W.CLIENTS)
def test_l_last_live_plane_with_gray_acks_is_never_parked(client: str) -> None:
    r = W.scenario_last_plane(client=client)
    assert r["ok"] and r["failed"] is None
    assert r["plane0_parks"] == 0
    assert r["max_gap"] <= r["gap_limit"], (r["max_gap"], r["gap_limit"])
    assert r["rtos"] <= 2, r["rtos"]


@pytest.mark.parametrize("client", W.CLIENTS)
def test_m_application_limited_sender(client: str) -> None:
    r = W.scenario_app_limited(client=client)
    assert r["ok"] and r["failed"] is None
    assert r["healthy_plane_parks"] == 0, "idle time or a random loss parked a healthy plane"
    assert r["dead_parked_after_rtts"] is not None
    # Fewer than plane_silent_sends packets reach the dead plane before the
    # silence: parked only after a failed probe, sent one probe wait before
    # the silence deadline (it was 2 x 3 srtt + ACK delays: up to 8).
    assert r["dead_parked_after_rtts"] <= 5.0, r["dead_parked_after_rtts"]
    assert r["rtos"] <= 2, r["rtos"]


@pytest.mark.parametrize("client", W.CLIENTS)
def test_n_psn_wrap_mid_transfer(client: str) -> None:
    r = W.scenario_psn_wrap(client=client)
    assert r["ok"] and r["failed"] is None
    a = r["a"].conn
    assert a.sender.next_psn > 1 << 32, "the transfer must cross the wrap"
    assert r["retransmissions"] > 0  # losses around the wrap were repaired
    assert r["rtos"] == 0


# -- plane liveness (unit) -----------------------------------------------------------


def _silent_plane_set(**kw: object) -> EvSet:
    es = EvSet(planes=2, evs_per_plane=8, base_rtt=RTT, **kw)  # type: ignore[arg-type]
    es.set_rtt(RTT)
    return es


def test_one_packet_in_flight_is_enough_evidence_with_a_probe() -> None:
    es = _silent_plane_set()
    e0, e1 = es.plane_evs(0)[0], es.plane_evs(1)[0]
    es.on_sent(e0, 1.0)
    es.on_sent(e1, 1.0)
    es.on_ack(e0, 1.0 + RTT, False, RTT, sent=1.0)
    es.on_sent(e1, 1.001)  # one packet, never answered
    es.on_sent(e0, 1.0011)
    es.on_ack(e0, 1.0021, False, RTT, sent=1.0011)  # plane 0 answers a later send
    es.on_ack(e1, 1.0021, False, RTT, sent=1.0)  # a late answer to an *older* packet
    t = es.next_timer()
    # Weak evidence: probe first, one probe wait (srtt + ACK delay) before
    # the plane's silence deadline (3 srtt after its oldest unanswered send)
    assert t == pytest.approx(1.001 + 2 * RTT)
    assert es.due_probes(t) == [] or es.plane_state(1) is PlaneState.UP
    probes = es.due_probes(t)
    assert probes and {ev.plane for ev in probes} == {1}
    for ev in probes:
        es.on_probe_sent(ev, t)
    t2 = es.next_timer()
    assert t2 == pytest.approx(1.001 + 3 * RTT)  # the probe failed by the deadline
    es.due_probes(t2 - 1e-9)
    assert es.parked_planes() == []
    es.due_probes(t2)
    assert es.parked_planes() == [1]


def test_an_answered_liveness_probe_keeps_the_plane() -> None:
    es = _silent_plane_set()
    e0, e1 = es.plane_evs(0)[0], es.plane_evs(1)[0]
    es.on_sent(e1, 1.0)  # lost at random
    es.on_sent(e0, 1.0001)
    es.on_ack(e0, 1.0001 + RTT, False, RTT, sent=1.0001)
    t = es.next_timer()
    assert t is not None
    probes = es.due_probes(t)
    for ev in probes:
        es.on_probe_sent(ev, t)
    es.on_probe_ack(probes[0], t + RTT / 2, rtt=RTT / 2)
    assert es.next_timer() is None
    es.due_probes(t + 10 * RTT)
    assert es.parked_planes() == []


def test_with_no_plane_answering_a_parked_plane_is_probed_at_once() -> None:
    # Plane 0 (the only working one) was parked; planes 1 and 2 then die
    # with a packet in flight each: nothing answers, so no evidence against
    # them. They are probed, and so is plane 0 at once (not after its probe
    # interval): its answer is the evidence that parks the silent ones.
    es = EvSet(planes=3, evs_per_plane=8, base_rtt=RTT)
    es.set_rtt(RTT)
    for ev in es.plane_evs(0):
        es.on_loss(ev, 1.0)
    assert es.parked_planes() == [0]
    e1, e2 = es.plane_evs(1)[0], es.plane_evs(2)[0]
    es.on_sent(e1, 1.0)
    es.on_sent(e2, 1.0)
    t = es.next_timer()
    assert t == pytest.approx(1.0 + 2 * RTT)  # before plane 0's probe (1.0 + 4 RTT)
    due = es.due_probes(t)
    assert {ev.plane for ev in due} == {0, 1, 2}
    for ev in due:
        es.on_probe_sent(ev, t)
    back = next(ev for ev in due if ev.plane == 0)
    es.on_probe_ack(back, t + RTT / 2, rtt=RTT / 2)
    assert es.plane_state(0) is PlaneState.UP
    es.due_probes(1.0 + 3 * RTT)
    assert sorted(es.parked_planes()) == [1, 2]


def test_many_unanswered_sends_park_at_once_without_waiting_for_loss_inference() -> None:
    es = _silent_plane_set()
    e0, e1 = es.plane_evs(0)[0], es.plane_evs(1)[0]
    for k in range(6):
        es.on_sent(e1, 1.0 + k * 1e-6)
        es.on_sent(e0, 1.0 + k * 1e-6)
    es.on_ack(e0, 1.0 + RTT, False, RTT, sent=1.0 + 5e-6)
    t = es.next_timer()
    assert t == pytest.approx(1.0 + 3 * RTT)
    es.due_probes(t)
    assert es.parked_planes() == [1]


def test_idle_time_is_not_silence() -> None:
    es = _silent_plane_set()
    ev = es.plane_evs(1)[0]
    es.on_sent(ev, 1.0)
    es.on_ack(ev, 1.0 + RTT, False, RTT, sent=1.0)
    es.on_sent(ev, 5.0)  # after 4 idle seconds
    es.on_plane_loss(ev, 5.0001, 4.0)  # an old packet's loss: not evidence now
    assert es.next_timer() is None
    es.due_probes(5.1)
    assert es.parked_planes() == []


def test_the_last_live_plane_needs_a_failed_probe() -> None:
    es = _silent_plane_set()
    for bad in es.plane_evs(0):  # plane 0 is already parked
        es.on_loss(bad, 0.5)
    ev = es.plane_evs(1)[0]
    for k in range(8):
        es.on_sent(ev, 1.0 + k * 1e-6)
    es.on_plane_loss(ev, 1.0 + 3 * RTT, 1.0)
    es.due_probes(1.0 + 3 * RTT)
    assert es.parked_planes() == [0]
    probes = [p for p in es.due_probes(1.0 + 3 * RTT) if p.plane == 1]
    assert probes
    for p in probes:
        es.on_probe_sent(p, 1.0 + 3 * RTT)
    es.on_probe_ack(probes[0], 1.0 + 4 * RTT, rtt=RTT)  # the probe answers: gray, alive
    es.due_probes(1.0 + 10 * RTT)
    assert es.parked_planes() == [0]


def test_a_due_silence_deadline_always_acts() -> None:
    # A deadline armed as last_heard + s but tested as
    # now - last_heard >= s; for last_heard = 1.0001, s = 3 ms the test is
    # false at the armed time and the timer re-arms at the same instant
    # forever (the simulator hangs at a fixed virtual time).
    assert (1.0001 + 0.003) - 1.0001 < 0.003  # the float trap itself
    p = SprayPolicy(base_rtt=RTT, plane_silence=0.003)
    plane2 = [ev for ev in p.evs if ev.plane == 2]
    p.ev_set.on_ack(plane2[10], 1.0001, ecn=False, rtt=RTT)
    for i in range(4):
        p.ev_set.on_loss(plane2[i], 1.0002)
    t = p.ev_set.next_timer()
    assert t == 1.0001 + 0.003
    p.ev_set.due_probes(t)
    assert p.parked_planes() == [2]
    assert p.ev_set.next_timer() != t


def test_every_deadline_advances_in_virtual_time() -> None:
    for start in (1.0001, 1.1, 0.7000000000000001, 3.3):
        es = _silent_plane_set()
        ev = es.plane_evs(1)[0]
        other = es.plane_evs(0)[0]
        es.on_sent(ev, start)
        es.on_sent(other, start + 1e-6)
        es.on_ack(other, start + 2e-6, False, RTT, sent=start + 1e-6)
        seen = set()
        for _ in range(10):
            t = es.next_timer()
            if t is None:
                break
            assert t not in seen, "a timer re-armed at the instant it fired"
            seen.add(t)
            for probe in es.due_probes(t):
                es.on_probe_sent(probe, t)
        assert es.parked_planes() == [1]


# -- tail-loss probe -------------------------------------------------------------------


def _sender() -> Sender:
    return Sender(payload_size=1000, initial_rtt=RTT, min_rto=0.2, max_rto=1.0,
                  reorder_fraction=0.25, ack_delay=0.0, psn_window=1 << 16)


def test_tail_loss_probe_comes_before_the_rto() -> None:
    s = _sender()
    s.enqueue(b"x" * 3000)
    for k in range(3):
        item = s.next_packet()
        assert item is not None
        s.on_sent(item[0], ev=None, ev_key=0, now=1.0 + k * 1e-6, timestamp=k)
    t = s.tlp_deadline()
    assert t is not None and t == pytest.approx(1.0 + 2e-6 + 2 * RTT)
    rto = s.rto_deadline()
    assert rto is not None and rto > t
    probed = s.on_tlp(t)
    assert [p.psn for p in probed] == [1, 2]  # the newest two, oldest first
    assert [p.psn for p in s.retx_queue] == [1, 2]
    assert s.rto_events == 0 and s.tlp_probes == 1
    # A late ack of an original copy is not a spurious loss (no reorder widening).
    s.on_sack(Sack(0, 0, 0b110, 2, 0, 2, 0, 0, 0), now=t + 1e-4, now_us=0)
    assert s.spurious_losses == 0 and s.reorder_extra == 0


def test_tail_loss_probes_are_bounded_then_the_rto_fires() -> None:
    s = _sender()
    s.enqueue(b"x" * 1000)
    item = s.next_packet()
    assert item is not None
    now = 1.0
    s.on_sent(item[0], ev=None, ev_key=0, now=now, timestamp=0)
    for _ in range(MAX_TLPS):
        t = s.tlp_deadline()
        assert t is not None
        assert s.on_tlp(t)
        p = s.next_packet()
        assert p is not None
        s.on_sent(p[0], ev=None, ev_key=0, now=t, timestamp=1)
        now = t
    assert s.tlp_deadline() is None
    rto = s.rto_deadline()
    assert rto is not None and rto == pytest.approx(now + s.rto())


# -- PSN serial arithmetic ---------------------------------------------------------------


def test_unwrap_is_nearest_to_the_reference() -> None:
    top = (1 << 32) - 3
    assert unwrap(wire(top + 5), top) == top + 5
    assert unwrap(wire(top - 5), top + 10) == top - 5
    assert unwrap(7, (1 << 32) + 2) == (1 << 32) + 7
    assert unwrap(0xFFFFFFF0, (1 << 32) + 2) == 0xFFFFFFF0
    assert unwrap(5, 10) == 5


def test_receiver_places_and_acks_across_the_wrap() -> None:
    start = (1 << 32) - 2
    r = Receiver(ack_every=1, ack_delay=0.0, psn_window=1 << 16, max_message_size=1 << 20,
                 slice_size=10, initial_psn=start)
    for k in (0, 2, 3, 1):  # PSNs 2**32-2, 2**32 (wire 0), 2**32+1, 2**32-1
        psn = start + k
        body = Data(wire(psn), 1, 0, 10, 1, k * 10, 40, 0)
        assert r.in_window(body.psn)
        r.on_data(body, bytes([k]) * 10, ce=False, now=0.0, ack_req=True)
    assert r.cum_psn == start + 4
    assert r.take_delivered() == [(1, b"\0" * 10 + b"\1" * 10 + b"\2" * 10 + b"\3" * 10)]
    sack = r.make_sacks(0.0, RTT)[-1].sack
    assert sack.cum_psn == 2 and sack.ack_psn == 0xFFFFFFFF  # 32-bit values on the wire


# -- where packets go ------------------------------------------------------------------


def _health(planes: int = 4) -> PathHealth:
    return PathHealth(SprayPolicy(planes=planes, evs_per_plane=8, base_rtt=RTT),
                      planes=planes, now=0.0)


def test_a_retransmission_goes_to_a_plane_that_answered_recently() -> None:
    h = _health()
    now = 1.0
    h.plane_heard = [now - 1e-4, now - 1.0, now - 1.0, now - 1.0]  # only plane 0 is alive
    for _ in range(50):
        avoid = h.paths.ev_set.plane_evs(1)[0]
        ev = h.pick(now, avoid, RTT)
        assert ev is not None and ev.plane == 0
    # New data keeps spraying over every plane that is up.
    assert {ev.plane for ev in (h.pick(now, None, RTT) for _ in range(16)) if ev} == {0, 1, 2, 3}


def test_a_retransmission_avoids_a_plane_whose_answers_come_late() -> None:
    # Plane 3 answers all the time, but each answer for a packet sent a
    # second ago (a rate cut's queue); planes 0-2 were idle, their newest
    # answers timely. The resend goes to a timely plane, not to the one
    # heard most recently (testbed/sim/scenarios_peer_gone.py).
    h = _health()
    now = 5.0
    es = h.paths.ev_set
    h.plane_heard = [now - 0.5, now - 0.5, now - 0.5, now - 1e-4]
    for p in range(4):
        es._planes[p].answered_sent = h.plane_heard[p] - RTT
    es._planes[3].answered_sent = now - 1.0
    for _ in range(50):
        ev = h.pick(now, es.plane_evs(3)[0], RTT)
        assert ev is not None and ev.plane != 3


def test_the_last_live_plane_keeps_carrying_data_when_each_ev_went_bad() -> None:
    h = _health(planes=2)
    es = h.paths.ev_set
    for ev in es.plane_evs(0):
        es.on_loss(ev, 0.0)  # plane 0 parked
    for ev in es.plane_evs(1):
        es.on_loss(ev, 0.0)  # plane 1: every EV bad, but the plane is the last one up
    assert es.parked_planes() == [0]
    assert h.paths.next_ev(0.0) is None
    picked = {id(h.pick(0.0, None, RTT)) for _ in range(8)}
    assert len(picked) == 8 and all(ev.plane == 1 for ev in es.evs if id(ev) in picked)
