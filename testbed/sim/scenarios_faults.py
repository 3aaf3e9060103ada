"""The claims bench's invisibility faults in virtual time (issue 13).

``scenario_spine_reboot``: two hosts run a synchronous step loop in both
directions (a 128 KiB message each way, the next one 1 ms after the last is
acknowledged: the invisibility row's all-to-all, cut to one pair) over the
claims fabric (2 planes x 2 spines, 100 Mbit/s, trimming last hops, the
daemon's connection config), while spine 0 of plane 0 is down for 0.5 s
(``spine s0 plane 0 reboot 500ms``). Half of plane 0's EVs cross the dead
spine, in each direction; the other half carry the plane's whole rate.

What a user sees is the step time during the outage against before it;
what the transport does is count its parks of plane 0. On the testbed the
row parked plane 0 by silence and unparked it on a probe every 5-140 ms for
the whole outage (24-35 parks per run over 12 connections): the last
packets of a step, or their SACKs, went through the dead spine.
"""

from __future__ import annotations

import statistics
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.scenarios import Peer, _establish, connect_pair
from testbed.sim.scenarios_cc import PLANE_RATE, claims_fabric, host_config
from transport.events import Event, MessageAcked

#: Outage window (seconds after the first step) and run length.
OUTAGE = (0.5, 1.0)
RUN = 1.5


def scenario_spine_reboot(*, seed: int = 1, jitter: float = 1e-3, size: int = 128 << 10,
                          two_way: bool = True) -> dict[str, Any]:
    """Step times before / during the outage and plane 0's parks at each end.

    ``jitter``: every host's sends late by [0, jitter) s (a busy event loop).
    ``two_way`` False: only ``a`` sends (``b``'s SACKs then know nothing of
    the dead spine)."""
    fab = claims_fabric(("a", "b"), seed=seed, jitter=jitter)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    sim = Simulator(fab)
    a, b = connect_pair(sim, "a", "b", config=cfg, cids=(1, 2))
    a.keep_data = b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    t0 = sim.now
    msg = bytes(size)
    steps: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    started: dict[str, float] = {}

    def step(peer: Peer) -> None:
        if sim.now < t0 + RUN and peer.failed is None:
            started[peer.name] = sim.now
            peer.conn.send_message(msg)
            sim.wake(peer)

    def on_event(peer: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked):
            s = started[peer.name]
            steps[peer.name].append((s - t0, now - s))
            sim.at(now + 1e-3, lambda: step(peer))

    for peer in (a, b) if two_way else (a,):
        peer.on_event = on_event
        sim.at(t0 + 1e-3, lambda peer=peer: step(peer))  # type: ignore[misc]

    def spine(down: bool) -> None:
        for h in ("a", "b"):
            fab.link("spine", h, 0, 0).down = down

    sim.at(t0 + OUTAGE[0], lambda: spine(True))
    sim.at(t0 + OUTAGE[1], lambda: spine(False))
    sim.run(until=t0 + RUN + 0.1, max_events=20_000_000)
    all_steps = [x for s in steps.values() for x in s]
    before = [d for t, d in all_steps if t < OUTAGE[0]]
    during = [d for t, d in all_steps if OUTAGE[0] <= t < OUTAGE[1]]
    span = OUTAGE[1] - OUTAGE[0]
    return {
        "failed": [p.failed for p in (a, b) if p.failed],
        "steps_before": len(before),
        "steps_during": len(during),
        # Steps per second during the outage against before it (1.0: unnoticed).
        "rate_ratio": (len(during) / span) / (len(before) / OUTAGE[0]) if before else 0.0,
        "p50_before": statistics.median(before) if before else None,
        "p100_before": max(before, default=None),
        "p100_during": max(during, default=None),
        "parks": {p.name: p.conn.paths.ev_set.snapshot()["planes"][0]["parks"] for p in (a, b)},
        "rtos": sum(p.conn.sender.rto_events for p in (a, b)),
        "retransmissions": sum(p.conn.sender.retransmissions for p in (a, b)),
    }


if __name__ == "__main__":
    import sys

    args = sys.argv[1:]
    for sd in range(1, 1 + (int(args[0]) if args else 4)):
        r = scenario_spine_reboot(seed=sd, jitter=float(args[1]) if len(args) > 1 else 1e-3)
        print(f"seed {sd}: steps/s during/before {r['rate_ratio']:.2f}, p100 before "
              f"{r['p100_before'] * 1e3:.1f} ms, during {r['p100_during'] * 1e3:.1f} ms, "
              f"plane-0 parks {r['parks']}, RTOs {r['rtos']}, "
              f"retransmissions {r['retransmissions']}")
