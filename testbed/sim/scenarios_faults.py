"""The claims bench's invisibility faults in virtual time.

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

``scenario_hot_spine``: the same step loop while spine 0 of plane 1 holds a
standing queue for 0.5 s (``delay`` more one-way delay in both directions,
every data packet CE-marked with ``mark``): what a neighbour's unresponsive
flow does to one spine link. On the testbed the incast row's control with
the victim over kernel TCP is this case: the TCP victim filled leaf 1's
uplink to spine 0 of one plane (1,193 CE marks on that port in one run)
and Braid's incast read 1.78 / 3.98x ideal against 1.15 / 1.44x without a
victim. Half of plane 1's EVs cross the hot spine; the other half and plane
0 carry the whole rate, so a transport that finds the hot EVs and keeps off
them loses little.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric
from testbed.sim.scenarios import Peer, _establish, connect_pair
from testbed.sim.scenarios_cc import PLANE_RATE, claims_fabric, host_config
from transport.events import Event, MessageAcked

#: Outage window (seconds after the first step) and run length.
OUTAGE = (0.5, 1.0)
RUN = 1.5


def _pair(seed: int, jitter: float) -> tuple[Fabric, Simulator, Peer, Peer]:
    """The claims fabric with two established hosts, ``a`` and ``b``."""
    fab = claims_fabric(("a", "b"), seed=seed, jitter=jitter)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    sim = Simulator(fab)
    a, b = connect_pair(sim, "a", "b", config=cfg, cids=(1, 2))
    a.keep_data = b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    return fab, sim, a, b


def _step_loop(sim: Simulator, peers: tuple[Peer, ...], t0: float, size: int,
               record: Callable[[Peer, float, float], None]) -> None:
    """Each of ``peers`` sends a ``size`` message, the next 1 ms after the
    last is acknowledged, until ``t0 + RUN``; each step is recorded as
    ``record(peer, its start - t0, its duration)``."""
    msg = bytes(size)
    started: dict[str, float] = {}

    def step(peer: Peer) -> None:
        if sim.now < t0 + RUN and peer.failed is None:
            started[peer.name] = sim.now
            peer.conn.send_message(msg)
            sim.wake(peer)

    def on_event(peer: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked):
            s = started[peer.name]
            record(peer, s - t0, now - s)
            sim.at(now + 1e-3, lambda: step(peer))

    for peer in peers:
        peer.on_event = on_event
        sim.at(t0 + 1e-3, lambda peer=peer: step(peer))  # type: ignore[misc]


def scenario_spine_reboot(*, seed: int = 1, jitter: float = 1e-3, size: int = 128 << 10,
                          two_way: bool = True) -> dict[str, Any]:
    """Step times before / during the outage and plane 0's parks at each end.

    ``jitter``: every host's sends late by [0, jitter) s (a busy event loop).
    ``two_way`` False: only ``a`` sends (``b``'s SACKs then know nothing of
    the dead spine)."""
    fab, sim, a, b = _pair(seed, jitter)
    t0 = sim.now
    steps: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    _step_loop(sim, (a, b) if two_way else (a,), t0, size,
               lambda peer, start, took: steps[peer.name].append((start, took)))

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


def scenario_hot_spine(*, seed: int = 2, jitter: float = 1e-3, size: int = 128 << 10,
                       delay: float = 20e-3, mark: bool = True) -> dict[str, Any]:
    """Step times before / during the hot spine, and the share of spine
    bytes that crossed it meanwhile (``scenario_spine_reboot``'s loop)."""
    fab, sim, a, b = _pair(seed, jitter)
    t0 = sim.now
    steps: list[tuple[float, float]] = []
    _step_loop(sim, (a, b), t0, size, lambda _peer, start, took: steps.append((start, took)))
    hot = [fab.link("spine", h, 1, 0) for h in ("a", "b")]
    spines = [ln for ln in fab.links() if ln.name.startswith("spine")]
    base_delay, base_ecn = hot[0].delay, hot[0].ecn_threshold
    carried: list[tuple[int, int]] = []

    def heat(on: bool) -> None:
        carried.append((sum(ln.bytes for ln in hot), sum(ln.bytes for ln in spines)))
        for ln in hot:
            ln.delay = base_delay + (delay if on else 0.0)
            # A threshold below any queue: every data packet crossing is marked.
            ln.ecn_threshold = -1 if on and mark else base_ecn

    sim.at(t0 + OUTAGE[0], lambda: heat(True))
    sim.at(t0 + OUTAGE[1], lambda: heat(False))
    sim.run(until=t0 + RUN + 0.1, max_events=20_000_000)
    before = [d for t, d in steps if t < OUTAGE[0]]
    during = [d for t, d in steps if OUTAGE[0] <= t < OUTAGE[1]]
    span = OUTAGE[1] - OUTAGE[0]
    (h0, s0), (h1, s1) = carried
    return {
        "failed": [p.failed for p in (a, b) if p.failed],
        "rate_ratio": (len(during) / span) / (len(before) / OUTAGE[0]) if before else 0.0,
        "p50_before": statistics.median(before) if before else None,
        "p100_before": max(before, default=None),
        "p50_during": statistics.median(during) if during else None,
        "p100_during": max(during, default=None),
        # A quarter of the spine bytes crossed it before (2 planes x 2 spines).
        "hot_share": (h1 - h0) / (s1 - s0) if s1 > s0 else 0.0,
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
