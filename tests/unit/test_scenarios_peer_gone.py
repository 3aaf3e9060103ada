"""Which rule ends a connection whose peer went silent (the soak's daemon
restarts), in virtual time: testbed/sim/scenarios_peer_gone.py."""

from __future__ import annotations

from testbed.sim.scenarios_peer_gone import scenario_peer_gone


def test_peer_gone_every_plane_parks_and_the_idle_rule_ends_it() -> None:
    r = scenario_peer_gone(seed=2, cut=1.0)  # no slow plane
    assert r["failed"] is not None and r["failed"].startswith("no acknowledgement for 5.000s")
    assert r["parked"] == [0, 1, 2, 3]
    assert r["rto_events"] == 1  # nothing in flight once every plane is parked
    assert 4.9 <= r["failed_after_gone"] <= 5.2


def test_peer_gone_a_slow_plane_stays_up_and_the_retry_budget_ends_it() -> None:
    # The slow plane's own RTT (seconds of queue) stretches its silence to
    # 3 of its RTTs: it is not parked, the RTO keeps firing on it, and 11
    # timeouts (40 ms doubling to the 0.5 s cap) come before the 5 s rule.
    r = scenario_peer_gone(seed=1, cut=100.0, spray_run_time=0.0)
    assert r["slow_plane_srtt"] > 1.0, r
    assert r["failed"] is not None and r["failed"].startswith(
        "retry budget spent: 11 consecutive timeouts"), r
    assert "parked planes: [0, 1, 2])" in r["failed"], r
    assert r["rto_events"] == 11
    assert 3.8 <= r["failed_after_gone"] <= 4.6, r
    # Whether the slow plane also goes silent and parks with the dead ones
    # (then the idle rule ends it at 5 s) depends on when its last answers
    # came: seeds 1-3 x cuts of 50, 100, 300 (runs of one packet) gave
    # either. Either way it ends with its reason, within 5 s.
    for kw in ({"seed": 2, "spray_run_time": 0.0}, {"seed": 2}):
        r = scenario_peer_gone(cut=100.0, **kw)
        failed = r["failed"]
        assert failed is not None and r["slow_plane_srtt"] > 1.0, r
        if failed.startswith("retry budget spent: 11 consecutive timeouts"):
            assert r["parked"] == [0, 1, 2] and 3.8 <= r["failed_after_gone"] <= 4.6, r
        else:
            assert failed.startswith("no acknowledgement for 5.000s"), r
            assert r["parked"] == [0, 1, 2, 3] and 4.9 <= r["failed_after_gone"] <= 5.2, r


def test_peer_alive_a_slow_plane_and_a_dead_one_cost_no_failure() -> None:
    # Two planes of four touched (the soak's limit): a 1/20 rate cut with
    # seconds of queue and a plane down; the other two carry the messages.
    r = scenario_peer_gone(seed=2, cut=20.0, peer_alive=True)
    assert r["failed"] is None, r
    assert r["acked_after_gone"] >= 100, r


def test_peer_alive_a_plane_cut_to_a_hundredth_costs_no_failure() -> None:
    # The slow plane answers all the time, each answer for a packet sent
    # seconds before: resends rank it below the healthy idle planes (a
    # timely newest answer), so they do not spend the retry budget on it.
    for seed in (2, 4):
        r = scenario_peer_gone(seed=seed, cut=100.0, peer_alive=True)
        assert r["failed"] is None, r
        assert r["rto_events"] <= 2 and r["acked_after_gone"] >= 100, r
