"""NSCC as a specification plus named deviations: ``NsccParams.uec_spec()``
follows the published rules, and each deviation switch changes what it says
on the same input (docs/decisions/0020-nscc-deviations.md)."""

from __future__ import annotations

import dataclasses

import pytest
from test_congestion import (
    BASE,
    MTU,
    RATE,
    _rounds,
    _with_avg_delay,
    ack,
    block,
    judged,
    lose,
    make,
)

import congestion
from congestion import Nscc, NsccParams
from congestion.nscc_params import DEVIATIONS
from transport.config import ConnectionConfig
from transport.connection import Connection


def both(switch: str, **kw: float) -> tuple[Nscc, Nscc]:
    """The same controller with ``switch`` on and off."""
    return make(**{switch: True}, **kw), make(**{switch: False}, **kw)


def uec(**kw: float) -> Nscc:
    return judged(Nscc(NsccParams.uec_spec(), mtu=MTU, base_rtt=BASE, line_rate=RATE, **kw))


# -- the presets ----------------------------------------------------------------------


def test_braid_is_the_default_and_uec_spec_has_every_switch_off() -> None:
    assert NsccParams.braid() == NsccParams() == Nscc().params
    on = NsccParams.braid().deviations()
    # off by default (docs/congestion.md, "Plain tail-drop links")
    assert [k for k, v in on.items() if not v] == ["measured_growth", "host_floor"]
    assert not any(NsccParams.uec_spec().deviations().values())
    assert len(DEVIATIONS) == len(set(DEVIATIONS)) == 20
    # Keywords replace single fields (how congestion_params reach it).
    c = Nscc(NsccParams.uec_spec(), target_delay=2e-3)
    assert c.params.target_delay == 2e-3 and not c.loss_as_mark
    with pytest.raises(TypeError):
        Nscc(no_such_knob=1)
    with pytest.raises(ValueError):
        NsccParams(trim_md=1.0)


def test_the_registry_builds_both_and_hands_the_link_only_to_controllers_that_take_it() -> None:
    assert {"nscc", "nscc-uec", "fixed"} <= set(congestion.names())
    spec = congestion.registry.for_connection("nscc-uec", mtu=MTU, base_rtt=BASE,
                                              line_rate=RATE, params={"target_delay": 2e-3})
    assert isinstance(spec, Nscc) and spec.params == dataclasses.replace(
        NsccParams.uec_spec(), target_delay=2e-3)
    assert spec.mtu == MTU and spec.bdp == RATE * BASE
    fixed = congestion.registry.for_connection("fixed", mtu=MTU, base_rtt=BASE,
                                               line_rate=RATE, params={"window": 5000})
    assert fixed.cwnd == 5000
    conn = Connection(config=ConnectionConfig(congestion="nscc-uec", planes=2, plane_rate=1e6),
                      secret=None, local_cid=1, now=0.0, initiator=True)
    assert isinstance(conn.cc, Nscc) and conn.cc.line_rate == 2e6
    assert not any(conn.cc.params.deviations().values())


# -- UEC NSCC as published ------------------------------------------------------------


def test_uec_spec_follows_the_four_quadrants() -> None:
    target = 0.5e-3  # base RTT / 2
    # No ECN, delay below target: proportional increase (gathered, applied).
    c = uec(initial_window=5000)
    ack(c, 0.0, BASE, in_flight=0)  # the base RTT
    for i in range(10):
        ack(c, i * 1e-5, BASE + 0.1e-3)
    # (11: UEC has no application-limited rule for increases, so the base
    # RTT's ACK grew it too)
    assert c.stats()["proportional_inc"] == 11 and c.cwnd > 5000
    # No ECN, delay above target: the fair increase only; never a decrease
    # without ECN, not even after a loss with a queue behind it.
    c = uec(initial_window=5000)
    _with_avg_delay(c, 0.8e-3)
    lose(c, 0.005, MTU)  # app-limited: no QuickAdapt
    w, fair = c._cwnd, c.stats()["fair_inc"]
    for i in range(10):
        ack(c, 0.01 + i * 1e-5, BASE + 0.8e-3)
    assert c.stats()["fair_inc"] == fair + 10 and c.stats()["md"] == 0 and c._cwnd > w
    # ECN, delay below target: NOOP, however much of the traffic is marked.
    c = uec(initial_window=5000)
    _rounds(c, 0.0, 4, 1, 0.1e-3)
    st = c.stats()
    assert st["md"] == 0 and st["ecn_hold"] == 40
    assert st["proportional_inc"] == 1  # the unmarked base RTT sample only
    # ECN, delay above target: MD by the filtered delay, once per base RTT.
    c = uec()
    _with_avg_delay(c, 0.8e-3)
    before = c._cwnd
    ack(c, 0.01, BASE + 0.8e-3, ecn=True)
    avg = c.qdelay
    expected = before * max(1 - 0.8 * (avg - target) / avg, 0.5)
    assert c._cwnd == pytest.approx(expected)
    ack(c, 0.01 + 0.9 * BASE, BASE + 0.8e-3, ecn=True)  # same base RTT: no second cut
    assert c._cwnd == pytest.approx(expected)
    ack(c, 0.01 + 1.01 * BASE, BASE + 0.8e-3, ecn=True)  # a base RTT on (srtt is longer)
    assert c.stats()["md"] == 2


def test_uec_spec_window_bounds_trims_and_quick_adapt() -> None:
    # maxwnd 1.5 x BDP whatever the target; minimum one MTU.
    c = uec(target_delay=2e-3, initial_window=10**9)
    assert c.cwnd == 15_000
    # A trim subtracts its bytes (the sender was application-limited, so
    # QuickAdapt measures nothing) ...
    c = uec()
    ack(c, 0.0, BASE, acked=500)
    ack(c, 0.0095, BASE)
    w = c._cwnd
    c.on_nack(now=0.01, trimmed_bytes=MTU, last_hop=True)
    assert c._cwnd == w - MTU and c.stats()["quick_adapt_app_limited"] == 1
    # ... and a collapse behind it (1 kB delivered in the last base RTT +
    # target, below 1/8 of maxwnd) QuickAdapts to what was delivered.
    c = uec()
    ack(c, 0.0, BASE, acked=500)
    ack(c, 0.0095, BASE)
    block(c)
    c.on_nack(now=0.01, trimmed_bytes=MTU, last_hop=True)
    assert c.cwnd == MTU and c.stats()["quick_adapt"] == 1
    # QuickAdapt after a stall: what was delivered, down to one MTU.
    c = uec(target_delay=2e-3)
    block(c)
    c.on_timeout(now=1.0)
    assert c.cwnd == MTU
    # Not when application-limited.
    c = uec()
    ack(c, 0.0095, BASE, in_flight=MTU)
    w = c.cwnd
    c.on_timeout(now=0.01)
    assert c.cwnd == w and c.stats()["quick_adapt_app_limited"] == 1


# -- one test per deviation -------------------------------------------------------------


def test_loss_as_mark() -> None:
    on, off = both("loss_as_mark", initial_window=10_000, probe_gain=0.0)
    for c in (on, off):
        _with_avg_delay(c, 0.8e-3)
        lose(c, 0.005, MTU)
        ack(c, 0.01, BASE + 0.8e-3)  # no ECN, above target
    assert on.stats()["md"] == 1 and on._cwnd < 10_000
    assert off.stats()["md"] == 0 and off._cwnd > 10_000  # UEC: the fair increase


def test_probe_above_target() -> None:
    on, off = both("probe_above_target", initial_window=10_000)
    for c in (on, off):
        ack(c, 0.0, BASE, in_flight=0)
        ack(c, 0.01, BASE + 0.8e-3)  # above target, no signal for 10 RTTs
    assert on._cwnd == pytest.approx(10_000 + 0.25 * MTU)  # probe_gain of what was acked
    assert off._cwnd == pytest.approx(10_000 + MTU * MTU / 10_000)  # one MTU per window


def test_maxwnd_covers_target() -> None:
    on, off = both("maxwnd_covers_target", target_delay=2e-3)
    assert on.max_window == 10_000 + RATE * 2e-3 and off.max_window == 15_000


def test_mark_fraction_md() -> None:
    on, off = both("mark_fraction_md", mark_gain=0.5, target_delay=0.5e-3,
                   shared_marks=False)
    ratio = {}
    for name, c in (("on", on), ("off", off)):
        t = _rounds(c, 0.0, 12, 0, 0.8e-3) + 2 * (BASE + 0.8e-3)
        before = c._cwnd
        ack(c, t, BASE + 0.8e-3, ecn=True)  # one mark after a dozen clean RTTs
        ratio[name] = c._cwnd / before
    assert ratio["on"] > 0.95 and ratio["off"] < 0.75


def test_shared_marks() -> None:
    on, off = both("shared_marks", target_delay=0.5e-3)
    for c in (on, off):
        _rounds(c, 0.0, 4, 2, 0.1e-3)  # half the bytes marked, delay below target
    assert on.stats()["shared_mark_md"] >= 1 and on.stats()["md"] >= 1
    assert off.stats()["md"] == 0  # UEC: NOOP below target


def test_last_hop_trim_md() -> None:
    on, off = both("last_hop_trim_md")
    for c in (on, off):
        c.on_nack(now=0.0, trimmed_bytes=1000, last_hop=True)
    # One cut by a fraction of the window, in place of UEC's subtraction.
    assert on.cwnd == int(10_000 * 0.75) and off.cwnd == 9000
    for c in (on, off):
        c.on_nack(now=1e-4, trimmed_bytes=1000, last_hop=True)
    # A second trim within the RTT: no second cut and nothing subtracted (a
    # flow hit k times by a last hop at its threshold lost k MTU besides the
    # cut: in the claims' fairness row, 8 flows at 12 Mbit/s, that noise
    # held Jain's index over 100 ms windows at 0.90-0.94, 0.95 without it).
    assert on.cwnd == int(10_000 * 0.75) and off.cwnd == 8000
    # A fabric trim (an imbalance the path policy steers from) still subtracts.
    on.on_nack(now=2e-4, trimmed_bytes=1000, last_hop=False)
    assert on.cwnd == int(10_000 * 0.75) - 1000


def test_trim_base() -> None:
    on, off = both("trim_base", target_delay=2e-3, trim_md=0.0, initial_window=10_000)
    for c in (on, off):
        for i in range(20):  # a base RTT measured through a 2 ms standing queue
            ack(c, i * 1e-4, 2.5e-3)
        c.on_nack(now=3e-3, trimmed_bytes=MTU, last_hop=True, rtt=0.6e-3, plane=0)
        ack(c, 4e-3, 3e-3)
    # The trimmed header's round trip corrected the base: 2.4 ms of queue.
    assert on.stats()["fair_inc"] == 1 and off.stats()["fair_inc"] == 0


def test_trim_base_is_the_connections_base_and_its_pipes() -> None:
    # A connection that starts behind a standing queue (a newcomer beside
    # flows that keep the last hop at its trim threshold) sees every ACK
    # through it; its trims show the path without it. Its base RTT, and with
    # it the target and maxwnd, are the trims' (the first flow's, which saw
    # the path empty), not the queue's: the claims' fairness row at 12 Mbit/s
    # gave the newcomers 4-6x the first flow's maxwnd.
    on, off = both("trim_base", trim_md=0.0, initial_window=10_000)
    queued = 20e-3
    for c in (on, off):
        for i in range(20):
            c.on_plane_rtt(plane=i % 2, rtt=queued)
            ack(c, i * 1e-4, queued, plane=i % 2)
        for plane in (0, 1):
            c.on_nack(now=3e-3, trimmed_bytes=MTU, last_hop=True, rtt=BASE, plane=plane)
    assert off.base_rtt == pytest.approx(queued) and off.bdp == pytest.approx(RATE * queued)
    assert on.base_rtt == pytest.approx(BASE) and on.bdp == pytest.approx(RATE * BASE)
    assert on.target_delay == pytest.approx(BASE / 2) and on.max_window < off.max_window / 5
    assert on.cwnd <= on.max_window


def test_a_trim_before_any_ack_replaces_the_guessed_base() -> None:
    # The configured base RTT is a guess (1 ms on a host), which the first
    # sample replaces, lower or higher. A trim's round trip that comes
    # before any ACK's is that first sample: kept below it, the guess stood
    # for ever (the first sample was the minimum: no later one went lower).
    c = judged(Nscc(NsccParams.braid(), mtu=MTU, base_rtt=1e-3, line_rate=RATE,
                    target_delay=2e-3, trim_md=0.0))
    c.on_nack(now=0.0, trimmed_bytes=MTU, last_hop=True, rtt=3e-3, plane=0)
    assert c.base_rtt == pytest.approx(3e-3)
    ack(c, 1e-3, 5e-3)
    assert c.base_rtt == pytest.approx(3e-3)


def test_trim_quiet_qa() -> None:
    on, off = both("trim_quiet_qa", trim_md=0.0)
    for c in (on, off):
        c.on_nack(now=0.0, trimmed_bytes=MTU, last_hop=True)
        t = 1e-4
        ack(c, t, BASE, acked=10)
        block(c)
        for _ in range(60):  # a sustained queue above qa_delay, little delivered
            t += 1e-4
            ack(c, t, BASE + 5e-3, acked=10)
    assert on.stats()["quick_adapt"] == 0 and on.stats()["qa_trim_quiet"] > 0
    assert off.stats()["quick_adapt"] == 1


def test_host_share() -> None:
    on, off = both("host_share")
    for c in (on, off):
        c.set_senders(3)
    assert on.max_window == 5000 and off.max_window == 15_000


def test_spurious_undo() -> None:
    on, off = both("spurious_undo", target_delay=2e-3)
    for c in (on, off):
        ack(c, 0.0, BASE, acked=500)
        for i in range(3):
            ack(c, 0.0095 + i * 1e-4, BASE)
        block(c)
        lose(c, 0.01, MTU)
        assert c.cwnd == 3000
        c.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    assert on.cwnd > 3000 and on.stats()["qa_undone"] == 1
    assert off.cwnd == 3000 and off.stats()["qa_undone"] == 0


def test_measured_growth() -> None:
    # A tail-drop bottleneck (delay is the mark after a loss with a queue)
    # delivering far below the line rate the connection was told: the
    # proportional increase converts headroom at the delivered rate.
    on, off = both("measured_growth", initial_window=10_000, probe_gain=0.0)
    for c in (on, off):
        _with_avg_delay(c, 0.8e-3)
        lose(c, 0.005, MTU)
        assert c.stats()["delay_is_mark"] == 1.0
        ack(c, 0.01, BASE + 0.1e-3)  # below target: proportional increase
        assert c.stats()["proportional_inc"] == 1
    fair = MTU * MTU / 10_000
    assert off._cwnd == pytest.approx(10_000 + fair + 0.25 * 0.4e-3 * RATE * MTU / 10_000)
    assert 10_000 + fair < on._cwnd < off._cwnd
    # Delay not the mark (a marking fabric, or no loss yet): the line rate.
    on, off = both("measured_growth", initial_window=10_000)
    for c in (on, off):
        ack(c, 0.0, BASE, in_flight=0)
        ack(c, 0.0005, BASE + 0.1e-3)
    assert on._cwnd == off._cwnd


def _host_delay(c: Nscc, *, until: float, delay: float, loss_at: float | None = None) -> None:
    """The window binds and every round trip carries ``delay`` of host delay
    (an ACK every 0.25 ms: half the line rate delivered)."""
    ack(c, 0.0, BASE, in_flight=0)
    t = 0.25e-3
    while t < until:
        block(c)
        ack(c, t, BASE + delay)
        if loss_at is not None and t <= loss_at < t + 0.25e-3:
            lose(c, t, MTU)
        t += 0.25e-3


def test_host_floor() -> None:
    # 1 ms of host delay on every round trip for 40 ms (> 8 RTTs), the window
    # binding, half the line rate delivered, no mark, no trim, no loss: maxwnd
    # covers the floor too (BDP + rate x (floor + target)).
    on, off = both("host_floor", probe_gain=0.0)
    for c in (on, off):
        _host_delay(c, until=0.04, delay=1e-3)
    assert on.stats()["host_floor"] == pytest.approx(1e-3)
    assert on.max_window == pytest.approx(10_000 + RATE * (1e-3 + 0.5e-3))
    assert off.stats()["host_floor"] == 0.0 and off.max_window == 15_000
    # A loss within the last calm_rtts RTTs: that delay may be a shared queue.
    on = make(host_floor=True, probe_gain=0.0)
    _host_delay(on, until=0.04, delay=1e-3, loss_at=0.001)
    assert on.stats()["host_floor"] == 0.0 and on.max_window == 15_000


def test_host_delay_window() -> None:
    # Every round trip spent 1 ms in the hosts (socket waits, event loops),
    # measured and taken out of the samples already (AckSample.host_delay):
    # the fabric's RTT is the base. maxwnd covers the host delay too
    # (BDP + rate x (host + target)); off, it is the fabric's alone.
    on, off = both("host_delay_window", probe_gain=0.0)
    t = 0.0
    for c in (on, off):
        t = 0.0
        while t < 0.02:
            ack(c, t, BASE, host=1e-3)
            t += 0.25e-3
    assert on.stats()["host_delay"] == pytest.approx(1e-3)
    assert on.max_window == pytest.approx(10_000 + RATE * (1e-3 + 0.5e-3))
    assert off.stats()["host_delay"] == 0.0 and off.max_window == 15_000
    assert on.cwnd == on.max_window  # grown to the cap
    # The cap falls with the host delay and binds the window at once, also
    # when the ACK that lowered it decides nothing else (a hold, no sample).
    for k in range(1, 5):
        on._host_on_ack(t + k * 0.01, 0.0)
    assert on.max_window < 25_000 and on.cwnd <= on.max_window
    # A host that cannot keep up (a second of delay) is no pipe to fill:
    # at most QuickAdapt's trigger (4 x target) is covered.
    big = make(host_delay_window=True, probe_gain=0.0)
    for k in range(40):
        ack(big, k * 0.25e-3, BASE, host=1.0)
    assert big.stats()["host_delay"] == pytest.approx(big.qa_delay)
    # The host delay gone, the window's cover shrinks back, an RTT at a time.
    t += 0.05
    while t < 0.12:
        ack(on, t, BASE, host=0.0)
        t += 0.25e-3
    assert on.stats()["host_delay"] < 0.05e-3
    assert on.max_window < 15_000 + RATE * 0.05e-3
    assert on.cwnd <= on.max_window  # a shrinking cap binds at once


def test_quick_adapt_floor() -> None:
    on, off = both("quick_adapt_floor", target_delay=2e-3)
    for c in (on, off):
        block(c)
        c.on_timeout(now=1.0)  # a stall: nothing delivered
    assert on.cwnd == 30_000 / 16 and off.cwnd == MTU


def test_filtered_qa_trigger() -> None:
    on, off = both("filtered_qa_trigger")
    for c in (on, off):
        ack(c, 0.0, BASE, acked=100)
        block(c)
        ack(c, 0.01, BASE + 5e-3, acked=100)  # one late packet, beyond qa_delay (2 ms)
    assert on.stats()["quick_adapt"] == 0 and off.stats()["quick_adapt"] == 1


def test_measured_rtt_periods() -> None:
    on, off = both("measured_rtt_periods", initial_window=15_000)
    for c in (on, off):
        ack(c, 0.0, 10e-3, in_flight=0)  # base RTT 10 ms
        for i in range(8):
            ack(c, 1e-4 * i, 19e-3, in_flight=0)
        for i in range(15):  # marks every 1 ms, the RTT 19 ms: one queue
            ack(c, 0.01 + i * 1e-3, 19e-3, ecn=True)
    assert on.stats()["md"] == 1 and off.stats()["md"] == 2  # UEC: once per base RTT


def test_plane_mean_bdp() -> None:
    on, off = both("plane_mean_bdp")
    for c in (on, off):
        c.on_plane_rtt(plane=0, rtt=1e-3)
        c.on_plane_rtt(plane=1, rtt=4e-3)  # a plane of 4x the RTT
    assert on.bdp == pytest.approx(RATE * 2.5e-3) and off.bdp == RATE * BASE


def test_app_limited_no_increase() -> None:
    on, off = both("app_limited_no_increase", initial_window=5000)
    for c in (on, off):
        for i in range(20):
            ack(c, i * 1e-5, BASE, in_flight=1000)  # a fifth of the window in flight
    assert on.cwnd == 5000 and off.cwnd > 5000


def test_per_ack_increase() -> None:
    on, off = both("per_ack_increase", initial_window=5000)
    steps = {}
    for name, c in (("on", on), ("off", off)):
        ack(c, 0.0, BASE, in_flight=0)  # the base RTT
        ack(c, 0.0, BASE + 0.1e-3)
        seen = {c._cwnd}
        for i in range(1, 8):  # 7 more MTUs within one base RTT
            ack(c, i * 1e-5, BASE + 0.1e-3)
            seen.add(c._cwnd)
        ack(c, 8e-5, BASE + 0.1e-3)  # the eighth MTU since the last application
        seen.add(c._cwnd)
        steps[name] = len(seen)
    assert steps["on"] == 9  # every ACK moves the window
    assert steps["off"] == 2  # UEC: gathered, applied once 8 MTU were acked
    assert on._cwnd == pytest.approx(off._cwnd, rel=0.1)  # by about as much


def test_trim_without_quick_adapt() -> None:
    on, off = both("trim_without_quick_adapt", trim_md=0.0)
    for c in (on, off):
        block(c)
        c.on_nack(now=0.01, trimmed_bytes=MTU, last_hop=False)
    assert on.cwnd == 9000 and on.stats()["quick_adapt"] == 0
    assert off.stats()["quick_adapt"] == 1 and off.cwnd < 9000


def test_every_deviation_has_its_test() -> None:
    names = {n.removeprefix("test_") for n in globals() if n.startswith("test_")}
    assert set(DEVIATIONS) <= names
