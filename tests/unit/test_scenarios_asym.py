"""Asymmetric planes (issue 13), in virtual time: one plane at half rate, or
with 4x the other's RTT; goodput must reach 0.9 of the sum of the planes'
capacities (MPTCP's per-subflow windows reach it on the real testbed). An
even spray over planes gets 0.67 and 0.45 here."""

from __future__ import annotations

import pytest

from testbed.sim.scenarios_asym import scenario_asymmetric
from transport.plane_share import PlaneShares


@pytest.mark.parametrize(("case", "jitter"), [("half_rate", 0.0), ("latency", 0.0),
                                               ("half_rate", 2e-3)])
def test_unequal_planes_are_filled(case: str, jitter: float) -> None:
    # jitter: a busy sending host delays each packet by up to 2 ms, so the
    # planes' delays are noisy, as on the real testbed.
    r = scenario_asymmetric(case=case, jitter=jitter)
    assert not r["failed"]
    if case == "latency":
        assert r["plane_rtt"][1] >= 3.9 * r["plane_rtt"][0]
    assert r["goodput_over_capacity"] >= 0.9, r
    assert r["rtos"] == 0


def test_shares_follow_queueing_delay_and_reset() -> None:
    s = PlaneShares(2)
    t = 0.0
    # Plane 1 keeps a growing queue, plane 0 none: plane 1's share falls.
    for k in range(400):
        t += 1e-4
        s.on_rtt(0, 1e-3, t)
        s.on_rtt(1, 1e-3 + min(k, 100) * 1e-4, t)
    assert s.weight[0] == 1.0 and s.weight[1] < 0.5 and not s.even
    picks = [s.choose([True, True]) for _ in range(1000)]
    assert picks.count(1) < picks.count(0) / 2
    # A parked plane is never chosen; back, it starts from an even share.
    assert all(s.choose([True, False]) == 0 for _ in range(10))
    s.reset(1)
    assert s.even and s.weight == [1.0, 1.0]


def test_equal_queues_stay_even() -> None:
    s = PlaneShares(2)
    t = 0.0
    for k in range(400):
        t += 1e-4
        # Both planes queue (an incast into this receiver), unequally by turns.
        s.on_rtt(0, 1e-3 + (5e-3 if (k // 50) % 2 else 1e-3), t)
        s.on_rtt(1, 1e-3 + (1e-3 if (k // 50) % 2 else 5e-3), t)
    assert s.even


def test_a_lossy_plane_loses_its_share_and_keeps_it_across_a_park() -> None:
    # A gray host uplink loses on every EV of its plane alike; what it drops
    # never queues, so by queueing delay alone it looks like the idlest plane
    # (on the real 4-plane testbed it drew the largest share: a 170 ms step).
    def run(loss0: float, loss1: float) -> PlaneShares:
        s = PlaneShares(2)
        t = 0.0
        for _ in range(2000):  # 200 ms: the loss fraction is averaged over 50 ms
            t += 1e-4
            for plane, loss in ((0, loss0), (1, loss1)):
                s.on_rtt(plane, 1e-3, t)  # the same delay on both planes
                s.on_outcome(plane, lost=round(20 * loss), acked=20 - round(20 * loss))
        return s

    gray = run(0.5, 0.0)
    assert gray.weight[1] == 1.0 and gray.weight[0] <= 0.1 and not gray.even
    picks = [gray.choose([True, True]) for _ in range(1000)]
    assert picks.count(0) < 100
    gray.reset(0)  # parked and back: still the plane that lost half
    assert gray.weight[0] <= 0.1 and not gray.even
    assert run(0.03, 0.0).even  # a little loss is noise
    assert run(0.3, 0.3).even  # equal loss everywhere moves nothing
