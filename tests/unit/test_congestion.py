"""Unit tests of congestion/: quadrants, bounds, QuickAdapt, trims, pacing, registry."""

from __future__ import annotations

import itertools
import math

import pytest

import congestion
from congestion import AckSample, CongestionController, FixedWindow, Nscc

MTU = 1000
BASE = 1e-3
RATE = 1e7  # bytes/s -> BDP = 10_000 bytes = 10 MTU


def make(**kw: float) -> Nscc:
    params: dict[str, float] = {"mtu": MTU, "base_rtt": BASE, "line_rate": RATE}
    params.update(kw)
    return Nscc(**params)  # type: ignore[arg-type]


def ack(
    c: Nscc,
    now: float,
    rtt: float | None,
    *,
    ecn: bool = False,
    acked: int = MTU,
    plane: int = 0,
    in_flight: int | None = None,
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
        )
    )


def queued(c: Nscc, now: float, qdelay: float, n: int = 8) -> None:
    """Establish the base RTT, then fill the median window with ``qdelay`` samples."""
    ack(c, now, BASE, in_flight=0)
    for i in range(n):
        ack(c, now + i * 1e-6, BASE + qdelay, in_flight=0)


def test_initial_window_is_bdp_and_bounds() -> None:
    c = make()
    assert c.cwnd == 10_000
    assert c.min_window == MTU
    assert c.max_window == 15_000
    assert make(initial_window=1).cwnd == MTU
    assert make(initial_window=10**9).cwnd == 15_000


def test_no_ecn_below_target_increases_proportionally() -> None:
    c = make(initial_window=5000)
    ack(c, 0.0, BASE)
    # qdelay 0: increase = acked * (mtu/cwnd + 1).
    assert c.cwnd == pytest.approx(5000 + 1000 * (1000 / 5000 + 1.0), abs=1)


def test_proportional_increase_shrinks_towards_target() -> None:
    near = make(initial_window=5000)
    queued(near, 0.0, 0.45e-3)
    w0 = near.cwnd
    ack(near, 0.01, BASE + 0.45e-3)
    far = make(initial_window=5000)
    queued(far, 0.0, 0.05e-3)
    w1 = far.cwnd
    ack(far, 0.01, BASE + 0.05e-3)
    assert 0 < near.cwnd - w0 < far.cwnd - w1


def test_no_ecn_above_target_is_fair_additive_increase() -> None:
    c = make(initial_window=5000, probe_gain=0.0)  # no quiet-period probing
    queued(c, 0.0, 0.8e-3)
    assert c.qdelay == pytest.approx(0.8e-3)
    before = c._cwnd
    ack(c, 0.01, BASE + 0.8e-3)
    assert c._cwnd - before == pytest.approx(MTU * MTU / before)
    assert c.stats()["fair_inc"] == 1


def test_ecn_above_target_multiplicative_decrease_once_per_rtt() -> None:
    c = make()
    queued(c, 0.0, 0.8e-3)
    before = c._cwnd
    ack(c, 0.01, BASE + 0.8e-3, ecn=True)
    expected = before * max(1 - 0.8 * (0.8e-3 - 0.5e-3) / 0.8e-3, 0.5)
    assert c._cwnd == pytest.approx(expected)
    # More marks within one (measured) RTT describe the same queue: no second cut.
    rtt = c.srtt
    assert rtt is not None and rtt > BASE
    ack(c, 0.01 + 0.9 * rtt, BASE + 0.8e-3, ecn=True)
    assert c._cwnd == pytest.approx(expected)
    ack(c, 0.01 + 1.5 * rtt, BASE + 0.8e-3, ecn=True)
    assert c._cwnd == pytest.approx(expected * 0.7, rel=1e-6)
    assert c.stats()["md"] == 2


def test_md_is_at_most_halving() -> None:
    c = make()
    queued(c, 0.0, 1.9e-3)  # below qa_delay (2 ms) but far above target
    before = c._cwnd
    ack(c, 0.01, BASE + 1.9e-3, ecn=True)
    # 1 - 0.8 * 1.4/1.9 = 0.41 -> floored at 0.5
    assert c._cwnd == pytest.approx(before * 0.5)


def test_ecn_below_target_leaves_window_alone() -> None:
    c = make(initial_window=5000)
    queued(c, 0.0, 0.1e-3)
    before = c._cwnd
    for i in range(5):
        ack(c, 0.01 + i * BASE, BASE + 0.1e-3, ecn=True)
    assert c._cwnd == before
    assert c.stats()["ecn_hold"] == 5


def test_median_ignores_a_few_hot_paths() -> None:
    c = make(initial_window=5000)
    ack(c, 0.0, BASE)
    for i in range(15):
        hot = i % 5 == 4  # 3 of 15 sprayed packets crossed a hot spine
        ack(c, i * 1e-6, BASE + (1.5e-3 if hot else 0.05e-3))
    assert c.qdelay < c.target_delay
    assert c.stats()["fair_inc"] == 0


def test_base_rtt_is_per_plane() -> None:
    c = make(initial_window=5000)
    ack(c, 0.0, BASE, plane=0)
    # Plane 1 is a longer fabric: 1.8 ms propagation, no queue.
    for i in range(8):
        ack(c, 1e-3 + i * 1e-6, 1.8e-3, plane=1)
    assert c.qdelay == pytest.approx(0.0)


def test_quick_adapt_on_loss_cuts_to_delivered_once_per_rtt() -> None:
    c = make()
    ack(c, 0.0, BASE, acked=500)  # outside the last RTT at t=0.01
    for i in range(3):
        ack(c, 0.0095 + i * 1e-4, BASE)
    assert c.cwnd > 3000
    c.on_loss(now=0.01, lost_bytes=MTU)
    assert c.cwnd == 3000
    # A second loss report in the same RTT must not ratchet it down again,
    # and ACKs of packets sent before the cut do not grow the window back.
    ack(c, 0.0101, BASE)
    c.on_loss(now=0.0102, lost_bytes=MTU)
    assert c.cwnd == 3000
    assert c.stats()["quick_adapt"] == 1
    ack(c, 0.0103, BASE, ecn=True)
    assert c.cwnd == 3000
    ack(c, 0.0115, BASE)  # one RTT later: normal increase again
    assert c.cwnd > 3000


def test_quick_adapt_on_timeout_with_nothing_delivered_goes_to_min() -> None:
    c = make()
    c.on_timeout(now=1.0)
    assert c.cwnd == MTU


def test_quick_adapt_does_not_grow_the_window() -> None:
    c = make(initial_window=2000)
    for i in range(5):
        ack(c, 0.0095 + i * 1e-5, None, in_flight=0)
    c.on_loss(now=0.01, lost_bytes=MTU)
    assert c.cwnd == 2000 and c.stats()["quick_adapt"] == 0


def test_quick_adapt_on_very_high_delay() -> None:
    c = make()
    ack(c, 0.0, BASE)
    for i in range(3):
        ack(c, 0.0095 + i * 1e-4, None)  # delivered, no RTT sample (Karn)
    assert c.stats()["quick_adapt"] == 0
    # Median of {0, 5 ms} is 2.5 ms, above qa_delay (2 ms).
    ack(c, 0.01, BASE + 5e-3)
    assert c.stats()["quick_adapt"] == 1
    assert c.cwnd == 4 * MTU  # what came back in the last RTT
    # The queue the cut was for is still draining: no second reaction.
    ack(c, 0.0101, BASE + 5e-3, ecn=True)
    assert c.stats()["quick_adapt"] == 1 and c.stats()["md"] == 0
    assert c.cwnd == 4 * MTU


def test_trim_nack_subtracts_and_never_below_min() -> None:
    c = make()
    c.on_nack(now=0.0, trimmed_bytes=2500, last_hop=False)
    assert c.cwnd == 7500
    c.on_nack(now=0.0, trimmed_bytes=2500, last_hop=True)
    assert c.cwnd == 5000
    c.on_nack(now=0.0, trimmed_bytes=10**6, last_hop=False)
    assert c.cwnd == MTU


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
    c.on_timeout(now=0.0)
    assert c.cwnd == MTU
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
