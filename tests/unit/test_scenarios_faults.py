"""A spine of one plane down, or holding a standing queue, under a
synchronous step loop (the claims invisibility row's ``spine s0
plane 0 reboot``; the incast row's victim over kernel TCP), in virtual time."""

from __future__ import annotations

import pytest

from testbed.sim import scenarios_faults as F
from testbed.sim.driver import Simulator
from testbed.sim.scenarios import _establish, connect_pair, make_fabric
from testbed.sim.scenarios_cc import PLANE_RATE, host_config
from transport.ev_state import EvState


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_dead_spine_keeps_its_plane_up_and_the_steps_going(seed: int) -> None:
    # Before (851da8a): the SACKs went out on any EV of their plane, half of
    # them through the dead spine, and every unpark forgot which EVs had
    # died: plane 0 parked for silence and unparked 4-6 times per end in
    # 0.5 s, steps ran at 0.66-0.70 of their rate before the outage (seeds
    # 1-3). Now SACKs avoid EVs the host's own data found dead, and those
    # EVs stay ASSUMED_BAD across a park: 0-2 parks per end, 0.79 on seeds
    # 1-3 (seeds 1-16: a median of 2 parks over both ends, 0.77).
    r = F.scenario_spine_reboot(seed=seed)
    assert not r["failed"] and r["rtos"] == 0, r
    assert max(r["parks"].values()) <= 2, r
    assert r["rate_ratio"] >= 0.75, r


def test_control_packets_avoid_evs_the_host_found_dead() -> None:
    fab = make_fabric(planes=2, spines=2, rate=PLANE_RATE, seed=1, hosts=("a", "b"))
    sim = Simulator(fab)
    a, b = connect_pair(sim, "a", "b", config=host_config(fab, plane_rate=PLANE_RATE))
    _establish(sim, a, b, limit=0.5)
    evs = b.conn.paths.ev_set.plane_evs(0)
    dead = evs[: len(evs) // 2]
    b.conn.paths.ev_set.on_ack(evs[-1], sim.now, ecn=False, rtt=None)  # the plane answers
    for ev in dead:
        b.conn.paths.ev_set.on_loss(ev, sim.now)
    assert b.conn.paths.parked_planes() == []
    assert all(ev.state is EvState.ASSUMED_BAD for ev in dead)
    used = {b.conn._ctl_path(0).ev for _ in range(4 * len(evs) * b.conn.paths.spray_run)}
    assert used and not used & {ev.value for ev in dead}
    assert used == {ev.value for ev in evs if ev.state is not EvState.ASSUMED_BAD}
    # Every EV of the plane dead: the plane still gets its answers (any EV).
    for ev in evs:
        b.conn.paths.ev_set.on_loss(ev, sim.now)
    assert b.conn._ctl_path(0).plane == 0


@pytest.mark.parametrize("mark", [True, False], ids=["ecn", "no-ecn"])
@pytest.mark.parametrize("seed", [2, 3])
def test_a_hot_spine_is_found_and_left(seed: int, mark: bool) -> None:
    # Before (c78a1cb): EVs through the hot spine went ASSUMED_BAD on their
    # late packets and a probe (control queue, no standing delay) made them
    # GOOD again; without ECN nothing but those losses told them apart.
    # Steps during the 0.5 s ran at 0.47 / 0.38 of their rate before it
    # (no ECN 0.32 / 0.38), their median 13-27 ms against 8.3 before. Now a
    # copy far too late skips its EV and such skips double: 0.64-0.71, median
    # 10.2-10.4 ms, with or without the marks.
    r = F.scenario_hot_spine(seed=seed, mark=mark)
    assert not r["failed"] and r["rtos"] == 0, r
    assert r["rate_ratio"] >= 0.5, r
    assert r["p50_during"] <= 1.4 * r["p50_before"], r
    assert r["hot_share"] < 0.25 / 4, r  # a quarter before it got hot
