"""Unit tests of congestion/: quadrants, bounds, QuickAdapt, trims, pacing, registry."""

from __future__ import annotations

import itertools
import math
import weakref

import pytest

import congestion
from congestion import AckSample, CongestionController, FixedWindow, Nscc
from transport.loss_policy import UNSTOPPED_RTTS, LossHistory

MTU = 1000
BASE = 1e-3
RATE = 1e7  # bytes/s -> BDP = 10_000 bytes = 10 MTU


#: Each controller's loss history, kept as a connection keeps it for its
#: loss classifier (transport/loss_policy.py).
_HISTORY: weakref.WeakKeyDictionary[Nscc, LossHistory] = weakref.WeakKeyDictionary()


def judged(c: Nscc) -> Nscc:
    """``c`` with a loss history fed by its delays, as a connection sets it up."""
    h = LossHistory(c.calm_rtts)
    c.report_delays(h.note_delay)
    _HISTORY[c] = h
    return c


def make(**kw: float) -> Nscc:
    params: dict[str, float] = {"mtu": MTU, "base_rtt": BASE, "line_rate": RATE}
    params.update(kw)
    return judged(Nscc(**params))  # type: ignore[arg-type]


def lose(c: Nscc, now: float, lost_bytes: int = MTU) -> None:
    """Losses reported to ``c`` as a connection does: its loss history judges
    whether they are a tail-drop overflow, and ``c`` takes the answer."""
    h = _HISTORY.get(c)
    overflow = None if h is None else h.judge(c.queue_level, c.target_delay)
    if h is not None and h.at_random():
        c.on_random_loss(now=now, lost_bytes=lost_bytes)  # LossKind.RANDOM
        return
    c.on_loss(now=now, lost_bytes=lost_bytes, overflow=overflow)


def calm_delay(c: Nscc) -> float:
    """The highest delay ``c``'s path carried without loss (its history's)."""
    return _HISTORY[c].ceiling()


def ack(
    c: Nscc,
    now: float,
    rtt: float | None,
    *,
    ecn: bool = False,
    acked: int = MTU,
    plane: int = 0,
    in_flight: int | None = None,
    host: float = 0.0,
) -> None:
    c.on_ack(
        AckSample(
            now=now,
            acked_bytes=acked,
            rtt=rtt,
            ecn=ecn,
            ev=7,
            plane=plane,
            in_flight=c.cwnd if in_flight is None else in_flight,
            host_delay=host,
        )
    )



def block(c: Nscc) -> None:
    """The sender had a packet ready and the window held it back (not app-limited)."""
    assert not c.can_send(in_flight=c.cwnd, size=MTU)


def test_initial_window_is_bdp_and_bounds() -> None:
    c = make()
    assert c.cwnd == 10_000
    assert c.min_window == MTU
    assert c.max_window == 15_000  # UEC: 1.5 x BDP
    assert make(initial_window=1).cwnd == MTU
    assert make(initial_window=10**9).cwnd == 15_000


def test_max_window_also_covers_a_target_queue_longer_than_half_the_base_rtt() -> None:
    # A software host's 2 ms target on a 1 ms fabric: BDP + rate x target.
    assert make(target_delay=2e-3).max_window == 10_000 + RATE * 2e-3
    assert make(target_delay=0.2e-3).max_window == 15_000


def test_maxwnd_follows_the_planes_that_are_up() -> None:
    # Two planes, one parked: the survivor's buffer must not be filled with
    # a window sized for both; back up, the window may grow again.
    c = make(target_delay=2e-3, host_hold=2e-3, initial_window=10**9)
    full = c.max_window
    assert c.cwnd == pytest.approx(full)
    c.set_line_rate(RATE / 2)
    assert c.max_window == pytest.approx(full / 2)
    assert c.cwnd <= c.max_window and c.stats()["max_window"] == c.max_window
    assert c._pacing_rate() <= RATE / 2
    c.set_line_rate(RATE)
    assert c.max_window == pytest.approx(full) and c.cwnd <= full / 2
    c.set_line_rate(0)  # nonsense is ignored
    assert c.line_rate == RATE


def test_the_pacer_stays_under_its_share_of_the_line_rate() -> None:
    # pace_share: the line rate less the frame's overhead and a headroom.
    # The window's cap is the full line rate's; only the pacer is held back,
    # and it follows the planes that are up.
    full = make(initial_window=10**9)
    c = make(initial_window=10**9, pace_share=0.8)
    assert c.max_window == pytest.approx(full.max_window)
    assert full._pacing_rate() == pytest.approx(RATE)
    assert c._pacing_rate() == pytest.approx(0.8 * RATE)
    c.set_line_rate(RATE / 2)
    assert c._pacing_rate() == pytest.approx(0.4 * RATE)
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError, match="pace_share"):
            make(pace_share=bad)


def test_the_hosts_polling_hold_is_not_a_queue() -> None:
    # host_hold: what the hosts' receive moderation adds to a round trip.
    # maxwnd covers it, and a sample carrying it reads as one without it.
    assert make(target_delay=2e-3, host_hold=2e-3).max_window == \
        pytest.approx(10_000 + RATE * 4e-3)
    assert make(host_hold=1e-3).max_window == pytest.approx(15_000 + RATE * 1e-3)
    held = make(initial_window=5000, target_delay=2e-3, host_hold=2e-3)
    plain = make(initial_window=5000, target_delay=2e-3)
    for c in (held, plain):
        ack(c, 0.0, BASE, in_flight=0)  # a lucky sample: the base RTT
    t = 0.0
    for i, q in enumerate([0.1e-3, 1.5e-3, 2.5e-3, 0.5e-3, 3e-3, 0.0] * 5):
        t = 1e-3 * (i + 1)
        ack(held, t, BASE + 2e-3 + q)
        ack(plain, t, BASE + q)
        assert held._cwnd == pytest.approx(plain._cwnd)
    assert held.stats()["fair_inc"] == plain.stats()["fair_inc"] > 0
    assert held.stats()["proportional_inc"] == plain.stats()["proportional_inc"] > 0
    # Without the hold the same samples read 2 ms more queue: fewer increases.
    unheld = make(initial_window=5000, target_delay=2e-3)
    ack(unheld, 0.0, BASE, in_flight=0)
    for i, q in enumerate([0.1e-3, 1.5e-3, 2.5e-3, 0.5e-3, 3e-3, 0.0] * 5):
        ack(unheld, 1e-3 * (i + 1), BASE + 2e-3 + q)
    assert unheld._cwnd < held._cwnd


# -- the four quadrants, decided by each packet's own delay and ECN ------------------


def test_quadrant_no_ecn_below_target_increases_proportionally() -> None:
    c = make(initial_window=5000)
    ack(c, 0.0, BASE)  # delay 0, target 0.5 ms
    # fair (MTU per RTT) + headroom (target - delay) x rate (bytes per RTT), per acked byte.
    fair = MTU * MTU / 5000
    headroom = 0.25 * 0.5e-3 * RATE * MTU / 5000  # pi_gain 0.25
    assert c._cwnd == pytest.approx(5000 + fair + headroom)
    assert c.stats()["proportional_inc"] == 1


def test_proportional_increase_shrinks_towards_target() -> None:
    def step(delay: float) -> float:
        c = make(initial_window=5000)
        ack(c, 0.0, BASE, in_flight=0)  # base RTT, no change (app-limited)
        before = c._cwnd
        ack(c, 0.01, BASE + delay)
        return c._cwnd - before

    near, far = step(0.45e-3), step(0.1e-3)
    assert 0 < near < far
    assert near == pytest.approx(MTU * MTU / 5000 + 0.25 * 0.05e-3 * RATE * MTU / 5000)


def test_fast_increase_only_after_a_window_with_near_zero_delay() -> None:
    # pi_gain 0: only the fair part of the proportional increase, so the
    # window moves slowly; max window 30 kB leaves room to grow.
    c = make(initial_window=5000, target_delay=2e-3, pi_gain=0.0)
    t = 0.0
    while c.stats()["fast_inc"] == 0:
        assert c.stats()["proportional_inc"] <= 6  # a window's worth of ACKs
        t += 1e-5
        ack(c, t, BASE)
    # Fast increase: the window grows by what is acked.
    before = c._cwnd
    ack(c, t + 1e-5, BASE)
    assert c._cwnd - before == pytest.approx(MTU)
    # One packet that queued (above fi_delay, below target) ends it.
    ack(c, t + 2e-5, BASE + 0.5e-3)
    before = c._cwnd
    ack(c, t + 3e-5, BASE)
    assert c._cwnd - before < MTU
    assert c.stats()["fast_inc"] == 2


def test_quadrant_no_ecn_above_target_is_fair_additive_increase() -> None:
    c = make(initial_window=5000, probe_gain=0.0)  # no quiet-period probing
    ack(c, 0.0, BASE, in_flight=0)
    before = c._cwnd
    ack(c, 0.01, BASE + 0.8e-3)
    assert c._cwnd - before == pytest.approx(MTU * MTU / before)
    assert c.stats()["fair_inc"] == 1


def _with_avg_delay(c: Nscc, delay: float, n: int = 40) -> None:
    """Base RTT, then ``n`` no-ECN samples at ``delay`` (app-limited: window unchanged)."""
    ack(c, 0.0, BASE, in_flight=0)
    for i in range(n):
        ack(c, 1e-3 + i * 1e-6, BASE + delay, in_flight=0)


def test_quadrant_ecn_above_target_md_sized_by_filtered_delay_once_per_rtt() -> None:
    c = make()
    _with_avg_delay(c, 0.8e-3)
    before = c._cwnd
    ack(c, 0.01, BASE + 0.8e-3, ecn=True)
    avg = c.qdelay
    assert avg == pytest.approx(0.8e-3, rel=0.01)
    expected = before * max(1 - 0.8 * (avg - 0.5e-3) / avg, 0.5)
    assert c._cwnd == pytest.approx(expected)
    # More marks within one (measured) RTT describe the same queue: no second cut.
    rtt = c.srtt
    assert rtt is not None and rtt > BASE
    ack(c, 0.01 + 0.9 * rtt, BASE + 0.8e-3, ecn=True)
    assert c._cwnd == pytest.approx(expected)
    ack(c, 0.01 + 1.5 * rtt, BASE + 0.8e-3, ecn=True)
    assert c._cwnd < expected
    assert c.stats()["md"] == 2


def test_md_is_at_most_halving() -> None:
    c = make()
    _with_avg_delay(c, 1.9e-3)  # below qa_delay (2 ms) but far above target
    before = c._cwnd
    ack(c, 0.01, BASE + 1.9e-3, ecn=True)
    # 1 - 0.8 * 1.4/1.9 = 0.41 -> floored at 0.5
    assert c._cwnd == pytest.approx(before * 0.5)


def test_quadrant_ecn_below_target_is_noop() -> None:
    # (every ACK marked: with deviation 5 that is a shared queue, below)
    c = make(initial_window=5000, shared_marks=False)
    _with_avg_delay(c, 0.1e-3)
    before = c._cwnd
    for i in range(5):
        ack(c, 0.01 + i * BASE, BASE + 0.1e-3, ecn=True)
    assert c._cwnd == before
    assert c.stats()["ecn_hold"] == 5 and c.stats()["md"] == 0


def test_quadrant_is_decided_per_packet_not_by_the_filtered_delay() -> None:
    # Filtered delay far above target, but this packet saw no queue: the
    # no-ECN/below-target quadrant (increase), not a decrease.
    c = make(initial_window=5000)
    _with_avg_delay(c, 1.5e-3)
    assert c.qdelay > c.target_delay
    before = c._cwnd
    ack(c, 0.01, BASE)
    assert c._cwnd > before and c.stats()["proportional_inc"] == 1
    # And a marked packet below target is a NOOP even with a high filtered delay.
    before = c._cwnd
    ack(c, 0.011, BASE + 0.1e-3, ecn=True)
    assert c._cwnd == before and c.stats()["md"] == 0


def test_base_rtt_is_per_plane() -> None:
    c = make(initial_window=5000)
    ack(c, 0.0, BASE, plane=0)
    # Plane 1 is a longer fabric: 1.8 ms propagation, no queue.
    for i in range(8):
        ack(c, 1e-3 + i * 1e-6, 1.8e-3, plane=1)
    assert c.qdelay == pytest.approx(0.0)


# -- QuickAdapt ---------------------------------------------------------------------


def test_quick_adapt_on_loss_cuts_to_delivered_once_per_period() -> None:
    # Target 2 ms: max window 30 kB, so QuickAdapt's gate (1/8) is 3750 B and
    # its floor (1/16) 1875 B.
    c = make(target_delay=2e-3)
    ack(c, 0.0, BASE, acked=500)  # outside the last period (base + target) at t=0.01
    for i in range(3):
        ack(c, 0.0095 + i * 1e-4, BASE)
    assert c.cwnd > 3000
    block(c)
    lose(c, 0.01, MTU)
    assert c.cwnd == 3000
    # A second loss report in the same period must not ratchet it down again,
    # and ACKs of packets sent before the cut do not grow the window back.
    ack(c, 0.0101, BASE)
    lose(c, 0.0102, MTU)
    assert c.cwnd == 3000
    assert c.stats()["quick_adapt"] == 1
    ack(c, 0.0103, BASE, ecn=True)
    assert c.cwnd == 3000
    ack(c, 0.0115, BASE)  # one RTT later: normal increase again
    assert c.cwnd > 3000


def test_quick_adapt_only_below_the_gate() -> None:
    # UEC's gate: 4 kB delivered in the period is more than 1/8 of the 30 kB
    # max window: not a collapse, the quadrants handle it.
    c = make(target_delay=2e-3)
    for i in range(4):
        ack(c, 0.0095 + i * 1e-4, BASE)
    block(c)
    lose(c, 0.01, MTU)
    assert c.stats()["quick_adapt"] == 0 and c.cwnd > 10_000


def test_quick_adapt_is_skipped_when_application_limited() -> None:
    # The sender never filled the window, so what came back
    # in the last period measures the application, not the network.
    c = make()
    ack(c, 0.0095, BASE, in_flight=MTU)
    assert c.can_send(in_flight=MTU, size=MTU)  # room in the window
    c.on_timeout(now=0.01)
    assert c.cwnd == 10_000
    assert c.stats()["quick_adapt"] == 0 and c.stats()["quick_adapt_app_limited"] == 1


def test_quick_adapt_after_a_stall_stops_at_the_floor_not_one_packet() -> None:
    # A stalled period (every packet on a dead plane)
    # delivers nothing; the window must not become one packet.
    c = make(target_delay=2e-3)
    block(c)
    c.on_timeout(now=1.0)
    assert c.cwnd == 30_000 / 16  # qa_floor x max window
    assert c.stats()["quick_adapt"] == 1


def test_quick_adapt_does_not_grow_the_window() -> None:
    c = make(initial_window=2000)
    for i in range(5):
        ack(c, 0.0095 + i * 1e-5, None, in_flight=0)
    block(c)
    lose(c, 0.01, MTU)
    assert c.cwnd == 2000 and c.stats()["quick_adapt"] == 0


def test_quick_adapt_on_sustained_delay_but_not_on_one_late_packet() -> None:
    # One 5 ms sample (scheduling noise) is not a 5 ms queue.
    c = make()
    ack(c, 0.0, BASE, acked=100)
    block(c)
    ack(c, 0.01, BASE + 5e-3, acked=100)
    assert c.stats()["quick_adapt"] == 0
    # A queue that stays, and little gets through: the filtered delay
    # crosses qa_delay (2 ms).
    t = 0.01
    while c.stats()["quick_adapt"] == 0:
        t += 1e-4
        assert t < 0.02
        ack(c, t, BASE + 5e-3, acked=100)
    assert c.qdelay == 0.0  # reset: the samples in flight describe the old queue
    assert c.cwnd < 10_000



def test_no_quick_adapt_on_delay_behind_a_trimming_last_hop() -> None:
    """Deviation 7 (the claims incast at 25 Mbit/s a plane): a last hop
    that trims at 32 KB holds a 10 ms queue at that rate, above QuickAdapt's
    8 ms, and a flow whose few ACKs came in late would be cut to one packet
    and starve for the rest of the burst. Within ``trim_qa_rtts``
    RTTs of a last-hop trim the delay trigger stays quiet; a loss still
    adapts; a fabric trim, or a last hop quiet for long, leaves UEC's rule."""

    def sustained_delay(c: Nscc, t: float) -> float:
        # A queue that stays, and little gets through (as in the test above).
        ack(c, t, BASE, acked=10)
        block(c)
        for _ in range(60):
            t += 1e-4
            ack(c, t, BASE + 5e-3, acked=10)
        return t

    # The rule as UEC has it: QuickAdapt cuts.
    c = make()
    sustained_delay(c, 0.0)
    assert c.stats()["quick_adapt"] == 1 and c.cwnd < 10_000
    # A last-hop trim just before: the trims say what to cut, not the delay.
    c = make(trim_md=0.0)
    c.on_nack(now=0.0, trimmed_bytes=MTU, last_hop=True)
    w = c.cwnd
    t = sustained_delay(c, 1e-4)
    assert c.stats()["quick_adapt"] == 0 and c.cwnd >= w
    # A loss is still a collapse to adapt to.
    block(c)
    lose(c, t + 1e-4, MTU)
    assert c.stats()["quick_adapt"] == 1
    # A fabric trim (imbalance, not the last hop) does not silence it.
    c = make(trim_md=0.0)
    c.on_nack(now=0.0, trimmed_bytes=MTU, last_hop=False)
    sustained_delay(c, 1e-4)
    assert c.stats()["quick_adapt"] == 1
    # Nor does a last-hop trim more than trim_qa_rtts RTTs ago (the srtt
    # here is 6 ms after the samples: 32 x 6 ms).
    c = make(trim_md=0.0)
    c.on_nack(now=0.0, trimmed_bytes=MTU, last_hop=True)
    sustained_delay(c, 0.5)
    assert c.stats()["quick_adapt"] == 1
    # trim_qa_rtts 0 is UEC's rule.
    c = make(trim_md=0.0, trim_qa_rtts=0.0)
    c.on_nack(now=0.0, trimmed_bytes=MTU, last_hop=True)
    sustained_delay(c, 1e-4)
    assert c.stats()["quick_adapt"] == 1
    with pytest.raises(ValueError):
        make(trim_qa_rtts=-1.0)

# -- Braid's deviation: a fabric that never marks -------------------------------------


def test_loss_with_a_queue_on_an_unmarking_fabric_makes_delay_the_mark() -> None:
    c = make(initial_window=10_000, probe_gain=0.0)
    _with_avg_delay(c, 0.8e-3)
    lose(c, 0.005, MTU)  # app-limited: no QuickAdapt, but noted
    assert c.stats()["delay_is_mark"] == 1.0
    before = c._cwnd
    ack(c, 0.01, BASE + 0.8e-3)  # no ECN, above target: now a decrease
    assert c._cwnd < before and c.stats()["md"] == 1
    before = c._cwnd
    ack(c, 0.03, BASE + 0.1e-3)  # below target: still an increase
    assert c._cwnd > before


def test_a_loss_without_a_queue_is_not_congestion() -> None:
    c = make(probe_gain=0.0)
    _with_avg_delay(c, 0.1e-3)
    lose(c, 0.005, MTU)
    assert c.stats()["delay_is_mark"] == 0.0


def _noisy_host(c: Nscc, rtts: int, *, t: float = 0.0, loss_every: int = 0) -> float:
    """``rtts`` RTTs of 10 ACKs whose queueing delay is host scheduling noise
    above the 0.5 ms target (0.6-1.2 ms, not rising); app-limited. A loss is
    reported in every ``loss_every``-th RTT (0: none) at a 0.9 ms sample."""
    if t == 0.0:
        ack(c, t, BASE, in_flight=0)  # the base RTT
    noise = (0.6e-3, 1.2e-3, 0.8e-3, 1.0e-3, 0.7e-3, 1.1e-3, 0.9e-3, 0.6e-3, 1.0e-3, 0.9e-3)
    for r in range(rtts):
        rtt = BASE + 1e-3
        for i, d in enumerate(noise):
            ack(c, t + i * rtt / 10, BASE + d, in_flight=0)
        if loss_every and r % loss_every == 0:
            lose(c, t + rtt * 0.95, MTU)
        t += rtt
    return t


def test_a_loss_within_the_delay_a_busy_host_carries_is_not_congestion() -> None:
    # The claims incast's victim: a host whose scheduling delay sits
    # above the target and a random loss. The path carried up to 1.2 ms for 20
    # RTTs without loss; a loss at 0.9 ms is not a queue overflowing, so delay
    # does not become the mark (which would cut the window every RTT).
    c = make(probe_gain=0.0)
    t = _noisy_host(c, 20)
    lose(c, t, MTU)
    assert c.stats()["delay_is_mark"] == 0.0
    assert calm_delay(c) == pytest.approx(1.2e-3)
    # A queue rising above anything carried before, then a drop: a tail-drop
    # bottleneck overflowing.
    for i in range(5):
        ack(c, t + i * 1e-4, BASE + (1.3e-3 + i * 0.1e-3), in_flight=0)
    lose(c, t + 5e-4, MTU)
    assert c.stats()["delay_is_mark"] == 1.0


def test_frequent_losses_count_whatever_delay_was_carried_before() -> None:
    # A bottleneck whose queue stands at the buffer (every other RTT drops):
    # the loss-free RTTs are too few to say what the path carries.
    c = make(probe_gain=0.0)
    t = _noisy_host(c, 20)
    t = _noisy_host(c, 4, t=t, loss_every=1)  # the loss-free history still holds...
    assert c.stats()["delay_is_mark"] == 0.0
    for _ in range(30):  # ...until losses dominate
        t = _noisy_host(c, 1, t=t, loss_every=1)
        if c.stats()["delay_is_mark"]:
            break
    assert c.stats()["delay_is_mark"] == 1.0
    # Cuts on delay would stop a buffer's drops; losses that go on in every
    # RTT regardless say the path loses at random: delay stands down.
    _noisy_host(c, UNSTOPPED_RTTS + 1, t=t, loss_every=1)
    assert c.stats()["delay_is_mark"] == 0.0
    assert c.stats()["mark_revoked_random"] == 1 and c.stats()["random_bytes"] >= MTU


def test_delay_as_the_mark_stands_down_above_the_level_of_its_drop() -> None:
    # A busy host whose first loss came while its delay was still rising (no
    # history yet): delay became the mark at ~0.8 ms. A delay 25% above that,
    # with no drop, is no tail-drop buffer's: the deviation stands down.
    c = make(probe_gain=0.0)
    ack(c, 0.0, BASE, in_flight=0)
    for i in range(8):
        ack(c, 1e-3 + i * 1e-4, BASE + 0.1e-3 * (i + 1), in_flight=0)
    lose(c, 2e-3, MTU)
    assert c.stats()["delay_is_mark"] == 1.0
    ack(c, 2.1e-3, BASE + 0.95e-3, in_flight=0)  # within 1.25 x: a queue may
    assert c.stats()["delay_is_mark"] == 1.0
    ack(c, 2.2e-3, BASE + 1.05e-3, in_flight=0)
    assert c.stats()["delay_is_mark"] == 0.0 and c.stats()["mark_revoked"] == 1
    # Off, not for good: a loss above what the path carried turns it on again.
    ack(c, 0.05, BASE + 2e-3, in_flight=0)
    lose(c, 0.05, MTU)
    assert c.stats()["delay_is_mark"] == 1.0


@pytest.mark.parametrize("signal", ["ecn", "trim"])
def test_a_marking_or_trimming_fabric_keeps_uec_behaviour(signal: str) -> None:
    c = make(initial_window=10_000, probe_gain=0.0)
    _with_avg_delay(c, 0.8e-3)
    if signal == "ecn":
        ack(c, 0.002, BASE + 0.1e-3, ecn=True)
    else:
        c.on_nack(now=0.002, trimmed_bytes=MTU, last_hop=True)
    lose(c, 0.005, MTU)
    assert c.stats()["delay_is_mark"] == 0.0
    before, mds = c._cwnd, c.stats()["md"]  # a last-hop trim cut once (deviation 6)
    ack(c, 0.01, BASE + 0.8e-3)  # no ECN above target: fair increase, as specified
    assert c._cwnd > before and c.stats()["md"] == mds


def test_trim_nack_subtracts_and_never_below_min() -> None:
    c = make(trim_md=0.0)
    c.on_nack(now=0.0, trimmed_bytes=2500, last_hop=False)
    assert c.cwnd == 7500
    c.on_nack(now=0.0, trimmed_bytes=2500, last_hop=True)
    assert c.cwnd == 5000
    c.on_nack(now=0.0, trimmed_bytes=10**6, last_hop=False)
    assert c.cwnd == MTU


def test_last_hop_trims_cut_once_per_rtt_and_time_the_path_without_its_queue() -> None:
    """Deviation 6 (fairness behind a trimming last hop that does not
    mark). With the queue pinned at the trim threshold every flow's trims
    equal its additive increase whatever its rate, so subtracting them keeps
    any split of the bottleneck; a cut by a factor, once per RTT, converges,
    and replaces the subtraction (whose per-flow hits are random)."""
    c = make()
    c.on_nack(now=0.0, trimmed_bytes=1000, last_hop=True)
    assert c.cwnd == int(10_000 * 0.75) and c.stats()["md"] == 1
    c.on_nack(now=0.5 * BASE, trimmed_bytes=1000, last_hop=True)  # same RTT: nothing
    assert c.cwnd == int(10_000 * 0.75) and c.stats()["md"] == 1
    c.on_nack(now=2 * BASE, trimmed_bytes=1000, last_hop=False)  # a fabric trim: subtract
    assert c.cwnd == int(10_000 * 0.75) - 1000
    assert c.stats()["md"] == 1
    c.on_nack(now=3 * BASE, trimmed_bytes=1000, last_hop=True)
    assert c.stats()["md"] == 2
    with pytest.raises(ValueError):
        make(trim_md=1.0)

    # A latecomer measured its base RTT through a standing queue (2.5 ms on a
    # 0.5 ms path): a 3 ms ACK reads as 0.5 ms of queue, below a 2 ms target,
    # and grows the window by the headroom. A trimmed header's round trip
    # (0.6 ms: it skipped the queue) corrects the base: the same ACK then
    # reads as 2.4 ms of queue, above the target, and meets the fair increase.
    def latecomer(trim_base: bool) -> float:
        c = make(target_delay=2e-3, trim_base=trim_base, trim_md=0.0,
                 initial_window=10_000)
        for i in range(20):
            ack(c, i * 1e-4, 2.5e-3, plane=0)
        c.on_nack(now=3e-3, trimmed_bytes=MTU, last_hop=True, rtt=0.6e-3, plane=trim_plane)
        assert c.stats()["fair_inc"] == 0
        ack(c, 4e-3, 3e-3, plane=0)
        return c.stats()["fair_inc"]

    trim_plane = 0
    assert latecomer(True) == 1 and latecomer(False) == 0
    trim_plane = 1  # another plane's trim does not move this plane's base
    assert latecomer(True) == 0


def test_window_never_exceeds_max() -> None:
    c = make()
    for i in range(1000):
        ack(c, i * 1e-5, BASE)
    assert c.cwnd == 15_000


def test_application_limited_does_not_grow() -> None:
    c = make(initial_window=5000)
    for i in range(20):
        ack(c, i * 1e-5, BASE, in_flight=1000)
    assert c.cwnd == 5000


def test_can_send() -> None:
    c = make(initial_window=5000)
    assert c.can_send(in_flight=4000, size=1000)
    assert not c.can_send(in_flight=4001, size=1000)
    assert c.can_send(in_flight=0, size=10**6)


def test_pacing_spacing_after_burst() -> None:
    c = make()
    # cwnd/base_rtt * 1.25 exceeds the line rate; the pacer is capped at it.
    assert c.stats()["pacing_rate"] == pytest.approx(RATE)
    now = 0.0
    times = []
    for _ in range(10):
        now = c.next_send_time(now=now, size=MTU)
        times.append(now)
        c.on_sent(now=now, size=MTU)
    # Burst of 4 MTU leaves at once, then one packet per MTU/rate.
    assert times[:4] == [0.0] * 4
    gaps = [b - a for a, b in itertools.pairwise(times[4:])]
    assert all(g == pytest.approx(MTU / RATE) for g in gaps)
    assert times[4] == pytest.approx(MTU / RATE)


def test_pacing_rate_follows_window_and_srtt() -> None:
    c = make()
    c.on_nack(now=0.0, trimmed_bytes=6000, last_hop=False)  # cwnd 4000
    ack(c, 0.0, 2e-3, in_flight=0)  # srtt 2 ms
    assert c.stats()["pacing_rate"] == pytest.approx(4000 / 2e-3 * 1.25)


def test_fixed_window() -> None:
    f = FixedWindow(window=3000, mtu=MTU, pacing_rate=1e6, burst_packets=1)
    f.on_nack(now=0.0, trimmed_bytes=1000, last_hop=False)
    f.on_loss(now=0.0, lost_bytes=1000)
    f.on_timeout(now=0.0)
    assert f.cwnd == 3000
    assert f.can_send(in_flight=2000, size=1000)
    assert not f.can_send(in_flight=2500, size=1000)
    f.on_sent(now=0.0, size=MTU)
    assert f.next_send_time(now=0.0, size=MTU) == pytest.approx(1e-3)
    unpaced = FixedWindow(window=3000)
    for _ in range(100):
        unpaced.on_sent(now=0.0, size=MTU)
    assert unpaced.next_send_time(now=0.0, size=MTU) == 0.0


def test_registry() -> None:
    assert {"nscc", "fixed"} <= set(congestion.names())
    assert isinstance(congestion.get(), Nscc)
    fixed = congestion.get("fixed", window=5000)
    assert isinstance(fixed, FixedWindow) and fixed.cwnd == 5000
    with pytest.raises(KeyError, match="nscc") as info:
        congestion.get("cubic")
    assert "cubic" in str(info.value) and "fixed" in str(info.value)
    with pytest.raises(TypeError):
        congestion.get("nscc", no_such_param=1)


def test_register_custom() -> None:
    congestion.register("test-fixed-1", lambda **kw: FixedWindow(window=1234, **kw))
    assert congestion.get("test-fixed-1").cwnd == 1234
    assert "test-fixed-1" in congestion.names()


def test_controllers_satisfy_protocol() -> None:
    for name in ("nscc", "fixed"):
        assert isinstance(congestion.get(name), CongestionController)
    stats = congestion.get("nscc").stats()
    assert all(isinstance(v, float) for v in stats.values())
    assert math.isnan(stats["srtt"])


def _rtt_rounds(c: Nscc, rtts: int, rtt_of: object, t: float = 0.0) -> float:
    """Feed ``rtts`` rounds of a full window acked MTU by MTU, no ECN."""
    for _ in range(rtts):
        w = c.cwnd
        n = max(w // MTU, 1)
        for i in range(n):
            ack(c, t + (i + 1) * 1e-2 / n, rtt_of(), in_flight=w)  # type: ignore[operator]
        t += 1e-2
    return t


def test_base_rtt_is_learned_not_the_configured_guess() -> None:
    # Guess 1 ms, real RTT 10 ms: BDP 100 kB. The window must reach it from
    # 1 MTU, not stop at 1.5x the guessed 10 kB.
    c = make()
    block(c)
    c.on_timeout(now=0.0)
    assert c.cwnd == MTU  # QuickAdapt's floor (1/16 of 15 kB) is below one packet
    _rtt_rounds(c, 12, lambda: 10e-3)
    assert c.stats()["base_rtt"] == pytest.approx(10e-3)
    assert c.cwnd >= RATE * 10e-3
    assert c.target_delay == pytest.approx(5e-3)  # default target follows the learned base


def test_md_at_most_once_per_measured_rtt_with_a_small_guess() -> None:
    c = make(initial_window=15_000)  # guess 1 ms
    ack(c, 0.0, 10e-3, in_flight=0)
    for i in range(8):
        ack(c, 1e-4 * i, 19e-3, in_flight=0)
    for i in range(10):  # marks every 1 ms for one 10+ ms RTT: one queue, one cut
        ack(c, 0.01 + i * 1e-3, 19e-3, ecn=True)
    assert c.stats()["md"] == 1


def test_window_climbs_from_min_when_delay_noise_sits_above_target() -> None:
    # Jittery path (0-8 ms on a 10 ms base), explicit 2 ms target, no ECN:
    # additive increase alone would need ~100 RTTs to reach the 100 kB BDP.
    import random

    rng = random.Random(1)
    c = make(target_delay=2e-3)
    c.on_timeout(now=0.0)
    _rtt_rounds(c, 30, lambda: 10e-3 + rng.uniform(0, 8e-3), t=0.0)
    assert c.qdelay > c.target_delay
    assert c.cwnd >= RATE * 10e-3


# -- Braid's deviation 4: MD sized by the fraction of bytes marked ----------------------


def _rounds(c: Nscc, t: float, rounds: int, mark_every: int, delay: float) -> float:
    """``rounds`` RTTs of 10 ACKs at ``delay``, every ``mark_every``-th ACK
    marked (0: none); app-limited, so only the marking state moves."""
    ack(c, t, BASE, in_flight=0)  # the base RTT
    rtt = BASE + delay
    for _ in range(rounds):
        for i in range(10):
            marked = mark_every > 0 and i % mark_every == 0
            ack(c, t + i * rtt / 10, rtt, ecn=marked, in_flight=0)
        t += rtt
    return t


def test_sparse_marks_cut_little_and_a_marked_bottleneck_cuts_as_uec() -> None:
    """A newcomer whose path crosses a fabric link that marks a burst now and
    then, beside a shared bottleneck that does not mark, must not be halved
    every RTT while a flow on an unmarked path never is (10:1 shares)."""
    cuts = {}
    for gain, every in ((0.5, 0), (0.5, 1), (0.0, 0)):
        # (deviation 5 off: with it, everything marked cuts by the fraction, below)
        c = make(mark_gain=gain, target_delay=0.5e-3, shared_marks=False)
        # (all marked: two rounds, each cuts, so the window stays off its floor)
        t = _rounds(c, 0.0, 2 if every else 12, every, 0.8e-3) + 2 * (BASE + 0.8e-3)
        before = c._cwnd
        ack(c, t, BASE + 0.8e-3, ecn=True)
        avg = c.qdelay
        cuts[gain, every] = (c._cwnd / before, 1 - 0.8 * (avg - 0.5e-3) / avg)
    ratio, uec = cuts[0.0, 0]
    assert ratio == pytest.approx(uec) and uec < 0.75  # UEC: one mark above target: full MD
    assert cuts[0.5, 0][0] > 0.95  # one mark after a dozen clean RTTs: a small cut
    ratio, uec = cuts[0.5, 1]
    assert ratio == pytest.approx(uec)  # everything marked: UEC's cut


def test_mark_fraction_does_not_soften_delay_as_the_mark() -> None:
    # Deviation 1 (a fabric that never marks): delay above target is the mark,
    # every such packet "marked": the MD stays full size.
    c = make(mark_gain=0.5)
    t = _rounds(c, 0.0, 12, 0, 0.8e-3)
    ack(c, t, BASE + 1.0e-3, in_flight=0)  # the queue grows to the drop
    lose(c, t, MTU)
    assert c.stats()["delay_is_mark"] == 1.0
    before = c._cwnd
    ack(c, t + 0.01, BASE + 0.8e-3)
    avg = c.qdelay
    assert c._cwnd == pytest.approx(before * max(1 - 0.8 * (avg - 0.5e-3) / avg, 0.5))
    with pytest.raises(ValueError):
        make(mark_gain=1.5)


def test_sparse_marks_below_target_hold_and_pervasive_marks_cut_whatever_the_delay() -> None:
    """Deviation 5 (fairness): marks on a large fraction of the
    traffic are a queue this connection shares; its own delay reading (a base
    RTT measured through a standing queue, host noise) does not decide."""
    # Sparse marks (3 ACKs in 10, below pervasive_marks 0.4) below target:
    # UEC's NOOP, the path policy's job.
    c = make(target_delay=0.5e-3)
    _rounds(c, 0.0, 4, 4, 0.1e-3)
    assert c.stats()["md"] == 0 and c.stats()["ecn_hold"] > 0
    # Half the bytes marked, delay below target (a latecomer's inflated base
    # RTT reads the standing queue as none): one cut per RTT, by 0.8 x 0.5 / 2.
    c = make(target_delay=0.5e-3)
    t = _rounds(c, 0.0, 2, 2, 0.1e-3) + BASE + 0.1e-3
    assert c.stats()["shared_mark_md"] >= 1
    before = c._cwnd
    ack(c, t, BASE + 0.1e-3, ecn=True, in_flight=0)
    assert c._cwnd == pytest.approx(before * (1 - 0.8 * 0.5 / 2))
    ack(c, t + 0.5 * BASE, BASE + 0.1e-3, ecn=True, in_flight=0)  # same RTT: no second cut
    assert c._cwnd == pytest.approx(before * (1 - 0.8 * 0.5 / 2))
    # Everything marked, delay far above target: the same kind of cut (the
    # fraction's), not the delay-sized one (which a noisy host's delay inflates).
    c = make(target_delay=0.5e-3)
    t = _rounds(c, 0.0, 2, 1, 1.5e-3) + BASE + 1.5e-3
    before = c._cwnd
    ack(c, t, BASE + 1.5e-3, ecn=True, in_flight=0)
    assert c._cwnd == pytest.approx(before * (1 - 0.8 * 1.0 / 2))
    # Off: UEC's quadrants (half marked, below target: NOOP).
    c = make(target_delay=0.5e-3, shared_marks=False)
    _rounds(c, 0.0, 4, 2, 0.1e-3)
    assert c.stats()["md"] == 0
    with pytest.raises(ValueError):
        make(pervasive_marks=0.0)
