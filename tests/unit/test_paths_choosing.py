"""The policy's own choices beyond ``next_ev``/``next_run``: the last resort,
a resend re-picked by evidence of life, a control packet's EV; and that
only transport/paths/ picks EVs and counts the sends on them."""

from __future__ import annotations

import re
from pathlib import Path

from transport.ev_state import EvState
from transport.paths import SprayPolicy

REPO = Path(__file__).resolve().parents[2]


def test_the_last_resort_takes_the_bad_evs_of_a_live_plane_in_turn() -> None:
    p = SprayPolicy(planes=2, evs_per_plane=2)
    for ev in p.evs:
        p.ev_set.on_loss(ev, 0.0)
    assert p.next_ev(0.0) is None and p.parked_planes() == [0]
    picks = [p.choose_ev(1.0) for _ in range(4)]
    assert [ev.index for ev in picks if ev is not None] == [2, 3, 2, 3]
    assert [(ev.sent, ev.last_sent) for ev in p.evs[2:]] == [(2, 1.0), (2, 1.0)]
    ev, k = p.choose_run(2.0, 8)
    assert ev is p.evs[2] and k == 1 and ev.sent == 3


def test_a_resend_goes_to_the_plane_with_the_best_evidence_of_life() -> None:
    p = SprayPolicy(planes=4, evs_per_plane=4, seed=3)
    avoid = p.evs[0]
    picks = [p.choose_ev(0.0, avoid, lambda plane: 2 if plane == 3 else 1) for _ in range(8)]
    assert {ev.plane for ev in picks if ev is not None} == {3}


def test_without_evidence_a_choice_is_the_policys_own_order() -> None:
    p, q = (SprayPolicy(planes=4, evs_per_plane=4, seed=3) for _ in range(2))
    assert [p.choose_ev(0.0).index for _ in range(6)] == [q.next_ev(0.0).index for _ in range(6)]
    avoid_p, avoid_q = p.evs[5], q.evs[5]
    assert [p.choose_ev(1.0, avoid_p).index for _ in range(6)] == \
        [q.next_ev(1.0, avoid_q).index for _ in range(6)]


def test_a_control_packet_takes_a_good_ev_else_one_not_dead_and_is_no_send() -> None:
    p = SprayPolicy(planes=1, evs_per_plane=4)
    for ev in p.evs[:3]:
        p.ev_set.on_loss(ev, 0.0)
    assert {p.control_ev(0).index for _ in range(8)} == {3}
    p.ev_set.on_loss(p.evs[3], 0.0)
    assert all(ev.state is EvState.ASSUMED_BAD for ev in p.evs)
    assert {p.control_ev(0).index for _ in range(8)} == {0, 1, 2, 3}
    assert all(ev.sent == 0 for ev in p.evs)


def test_only_transport_paths_picks_evs_and_counts_their_sends() -> None:
    picks = re.compile(r"\.(?:next_ev|next_run|_pick|last_resort)\(|"
                       r"\.(?:sent|last_sent)\s*[-+]?=(?!=)")
    bad = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
           for path in sorted((REPO / "transport").rglob("*.py"))
           if "paths" not in path.relative_to(REPO / "transport").parts
           for n, line in enumerate(path.read_text().splitlines(), 1) if picks.search(line)]
    assert not bad, "\n".join(bad)
