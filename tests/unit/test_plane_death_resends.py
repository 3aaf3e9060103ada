"""What a plane's death does to the packets it held (decision 0040).

The claims' compound fault in virtual time: plane 0 dies and plane 1 loses
30% of the data. When path health parks a plane for silence, what is still
in flight on it is resent at once, instead of waiting out the time rule
with the dead plane's srtt in it and holding the window shut meanwhile.
"""

from __future__ import annotations

from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.scenarios import _establish, connect_pair
from testbed.sim.scenarios_cc import feed, host_config
from testbed.sim.scenarios_cc import testbed_fabric as make_testbed_fabric
from transport.ev_state import Ev

#: 12 Mbit/s planes, the rate ``--rate auto`` finds faithful on the testbed:
#: the dead plane goes silent before its EVs' losses condemn most of it.
RATE = 1.5e6


def _compound(seed: int) -> tuple[Any, list[tuple[int, int]], list[float]]:
    fab = make_testbed_fabric(planes=2, seed=seed, rate=RATE)
    sim = Simulator(fab)
    a, b = connect_pair(sim, "a", "b", config=host_config(fab, plane_rate=RATE, seed=seed))
    b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    t0, end = sim.now, sim.now + 0.4
    submit = feed(sim, [a], bytes(64 << 10), end)
    for _ in range(16):
        submit(a)
    moves: list[tuple[int, int]] = []  # (plane lost on, plane resent on), from the fault
    at: list[float] = []
    policy = a.conn.paths
    choose = policy.choose_ev

    def watched(now: float, avoid: Ev | None = None, life: Any = None) -> Ev | None:
        ev = choose(now, avoid, life)
        if avoid is not None and ev is not None and at and 0 not in policy.parked_planes():
            moves.append((avoid.plane, ev.plane))
        return ev

    policy.choose_ev = watched  # type: ignore[method-assign]

    def fault() -> None:
        fab.set_plane_down(0, True)
        fab.link("uplink", "a", 1).gray_loss = 0.3
        at.append(sim.now)

    sim.at(t0 + 0.1, fault)
    sim.run(until=end, max_events=20_000_000)
    assert a.failed is None
    return a, moves, at


def test_a_park_for_silence_resends_what_the_dead_plane_held() -> None:
    for seed in (1, 2):
        a, moves, _ = _compound(seed)
        assert 0 in a.conn.paths.parked_planes()
        assert a.conn.paths.ev_set.park_cause(0) == "silence"
        st = a.conn.stats()
        assert isinstance(st["lost_on_park"], int) and st["lost_on_park"] > 0, st
        assert st["lost_unreachable"] == 0  # the host's own link stayed up
        # Before the park the dead plane still shows life by the two-RTT
        # test, and resends of its packets go back to it as often as not
        # (decision 0040 tried and left a rule against it).
        assert any(lost_on == 0 for lost_on, _ in moves)


def test_only_a_park_for_silence_sweeps_the_plane() -> None:
    a, _, _ = _compound(1)
    conn, es = a.conn, a.conn.paths.ev_set
    assert es.park_cause(0) == "silence" and es.park_cause(1) == ""
    s = conn.sender
    swept = s.lost_on_park
    on_1 = sum(1 for p in s.inflight.values() if p.ev is not None and p.ev.plane == 1)
    assert on_1 > 0  # the stream was still going at the end
    # A park because most of a plane's EVs lost packets (``bad_evs``) says
    # less about what is still in flight there (the EVs' own losses were
    # already declared): it sweeps nothing.
    es._park(es._planes[1], conn._now, "bad_evs")
    conn._note_ev_changes()
    assert 1 in conn.paths.parked_planes() and s.lost_on_park == swept
    # The same plane parked for silence: everything it held goes back to
    # be resent.
    es._unpark(es._planes[1], conn._now)
    conn._note_ev_changes()
    es._park(es._planes[1], conn._now, "silence")
    conn._note_ev_changes()
    assert s.lost_on_park == swept + on_1
    assert not any(p.ev is not None and p.ev.plane == 1 for p in s.inflight.values())
