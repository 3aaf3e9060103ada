"""The claims bench's invisibility row in virtual time.

Four hosts run the row's all-to-all step loop over the claims fabric (2
planes x 2 spines at 100 Mbit/s, 256 KB buffers, spine ports marking ECN
above 16 KB, last hops trimming above 32 KB, the daemon's connection
config): each step every host sends ``size`` bytes to every other host, and
a host's step ends when it holds that step's message from all three others;
it then sends its next step at once. There is no barrier: the data
dependency is the barrier, as in ``tools/claims/worker.py``. Every host pair
has one Braid connection, used in both directions.

``faults=True`` runs the row's fault timeline, compressed to fit the run:
plane 1 down and up, spine 0 of plane 0 rebooting, a gray link (h1's plane-0
uplink losing 50%) healed again, and h2's plane-1 link flapping. The row's
headline figure is p100(faulted) / p100(fault-free): on the testbed every
host's daemon and worker share two cores, and the step times move with the
machine's load; here no host is short of CPU (``jitter`` adds a busy event
loop's late sends), so what is left is the transport and the fabric.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric
from testbed.sim.scenarios import Peer, _establish, connect_pair
from testbed.sim.scenarios_cc import PLANE_RATE, claims_fabric, host_config
from transport.events import Event, MessageDelivered
from transport.sender import RECOVERY_KEYS

HOSTS = 4
#: The fault timeline, seconds after the first step: (start, end, kind, what).
#: Kinds: "plane" (plane 1 down), "spine" (spine 0 of plane 0 down), "gray"
#: (h1's plane-0 uplink loses 50%), "flap" (h2's plane-1 link down and up
#: every ``FLAP`` s, starting down).
TIMELINE: tuple[tuple[float, float, str, str], ...] = (
    (0.3, 0.8, "plane", "plane 1 down"),
    (1.1, 1.4, "spine", "spine s0 plane 0 reboot 300ms"),
    (1.6, 2.0, "gray", "link h1:p0 gray up 50%"),
    (2.3, 2.7, "flap", "link h2:p1 flap 100ms for 0.4s"),
)
RUN = 2.9
FLAP = 0.1


def timeline_events(timeline: tuple[tuple[float, float, str, str], ...] = TIMELINE
                    ) -> list[tuple[float, str]]:
    """``timeline`` as the testbed's fault timeline says it (``at T FAULT``
    lines, testbed/faults.py): each impairment, and its end where the
    grammar has one (a reboot and a flap carry their duration)."""
    ends = {"plane": "plane 1 up", "gray": "link h1:p0 heal"}
    out: list[tuple[float, str]] = []
    for start, end, kind, what in timeline:
        out.append((start, what))
        if kind in ends:
            out.append((end, ends[kind]))
    return sorted(out)


def _apply(sim: Simulator, fab: Fabric, hosts: tuple[str, ...], t0: float,
           timeline: tuple[tuple[float, float, str, str], ...]) -> None:
    """Schedule ``timeline`` on ``fab`` from ``t0``."""
    gray = fab.link("uplink", hosts[1], 0)
    flap = (fab.link("uplink", hosts[2], 1), fab.link("downlink", hosts[2], 1))

    def plane(down: bool) -> None:
        fab.set_plane_down(1, down)

    def spine(down: bool) -> None:
        for h in hosts:
            fab.link("spine", h, 0, 0).down = down

    def lossy(on: bool) -> None:
        gray.gray_loss = 0.5 if on else 0.0

    def link(down: bool) -> None:
        for ln in flap:
            ln.down = down

    for start, end, kind, _ in timeline:
        if kind == "flap":
            n = round((end - start) / FLAP)
            for i in range(n + 1):
                sim.at(t0 + start + i * FLAP,
                       lambda down=(i % 2 == 0 and i < n): link(down))  # type: ignore[misc]
            continue
        act = {"plane": plane, "spine": spine, "gray": lossy}[kind]
        sim.at(t0 + start, lambda act=act: act(True))  # type: ignore[misc]
        sim.at(t0 + end, lambda act=act: act(False))  # type: ignore[misc]


def scenario_alltoall(*, seed: int = 1, jitter: float = 0.0, size: int = 128 << 10,
                      faults: bool = False, run: float = RUN, planes: int = 2,
                      plane_rate: float = PLANE_RATE,
                      timeline: tuple[tuple[float, float, str, str], ...] = TIMELINE,
                      host_share: bool = True) -> dict[str, Any]:
    """Step times of the 4-host all-to-all, fault-free or under ``TIMELINE``.

    ``jitter``: every host's sends late by [0, jitter) s (a busy event loop).
    ``host_share`` False: each connection has a maxwnd of its own, as before
    NSCC deviation 8 (transport/host_share.py).
    Also reported: each message's time from its send to its delivery, and
    how long every resent packet took (the connections' ``recovered``
    histogram, summed)."""
    hosts = tuple(f"h{i}" for i in range(HOSTS))
    fab = claims_fabric(hosts, seed=seed, jitter=jitter, planes=planes, plane_rate=plane_rate)
    cfg = host_config(fab, plane_rate=plane_rate, seed=seed, host_share=host_share)
    sim = Simulator(fab)
    link: dict[tuple[int, int], Peer] = {}  # (src, dst) -> the peer sending src -> dst
    for k, (i, j) in enumerate(itertools.combinations(range(HOSTS), 2)):
        a, b = connect_pair(sim, hosts[i], hosts[j], config=replace(cfg, seed=seed * 100 + k),
                            cids=(10 + 2 * k, 11 + 2 * k))
        a.keep_data = b.keep_data = False
        link[(i, j)], link[(j, i)] = a, b
    peers = list(link.values())
    _establish(sim, *peers, limit=0.5)
    t0 = sim.now + 1e-3
    msg = bytes(size)
    step = [0] * HOSTS
    done: list[list[float]] = [[t0] for _ in range(HOSTS)]
    sent: dict[tuple[int, int], list[float]] = {pair: [] for pair in link}
    got: dict[tuple[int, int], list[float]] = {pair: [] for pair in link}

    def send_step(i: int) -> None:
        if sim.now >= t0 + run:
            return
        for j in range(HOSTS):
            if j != i and link[(i, j)].failed is None:
                sent[(i, j)].append(sim.now)
                link[(i, j)].conn.send_message(msg)
                sim.wake(link[(i, j)])

    def on_delivered(src: int, dst: int) -> Callable[[Peer, Event, float], None]:
        def cb(_peer: Peer, ev: Event, now: float) -> None:
            if not isinstance(ev, MessageDelivered):
                return
            got[(src, dst)].append(now)
            while all(len(got[(s, dst)]) > step[dst] for s in range(HOSTS) if s != dst):
                step[dst] += 1
                done[dst].append(now)
                send_step(dst)
        return cb

    for (src, dst) in link:
        link[(dst, src)].on_event = on_delivered(src, dst)  # dst's end of the pair
    for i in range(HOSTS):
        sim.at(t0, lambda i=i: send_step(i))  # type: ignore[misc]
    if faults:
        _apply(sim, fab, hosts, t0, timeline)
    sim.run(until=t0 + run + 1.0, max_events=80_000_000)
    steps = [(a - t0, b - a) for d in done for a, b in itertools.pairwise(d)]
    # The slowest step: whose message came last, and why (sent late, or slow).
    worst = max(((b - a, d, k) for d in range(HOSTS)
                 for k, (a, b) in enumerate(itertools.pairwise(done[d]))), default=None)
    behind: list[dict[str, Any]] = []
    if worst is not None:
        _, d, k = worst
        for s in range(HOSTS):
            if s != d and k < len(got[(s, d)]):
                behind.append({"src": s, "dst": d, "step": k,
                               "sent_after": sent[(s, d)][k] - done[d][k],
                               "took": got[(s, d)][k] - sent[(s, d)][k]})
    took = sorted(b - a for pair in link for a, b in zip(sent[pair], got[pair], strict=False))
    recovered = [sum(p.conn.sender.recovered[k] for p in peers) for k in range(len(RECOVERY_KEYS))]
    durations = [d for _, d in steps]
    # Per fault kind of the timeline: the slowest step that overlapped it
    # (or the 0.1 s after it ended).
    per_fault = {kind: max((d for t, d in steps if t <= end + 0.1 and t + d >= start),
                           default=None)
                 for start, end, kind, _ in timeline} if faults else {}
    return {
        "failed": [p.failed for p in peers if p.failed],
        "planes": planes,
        "steps": len(steps),
        "unfinished": sum(len(s) - len(got[pair]) for pair, s in sent.items()),
        "p50": statistics.median(durations) if durations else None,
        "p99": sorted(durations)[int(0.99 * (len(durations) - 1))] if durations else None,
        "p100": max(durations, default=None),
        # (start, duration) of the slowest step, seconds after the first.
        "slowest": max(steps, key=lambda s: s[1], default=None),
        # Its three messages: sent how long after the step began, and how
        # long each took to arrive.
        "slowest_messages": behind,
        "p100_per_fault": per_fault,
        # Every step: (start, duration), seconds after the first step.
        "step_series": sorted(steps),
        "ideal": (HOSTS - 1) * size / (planes * plane_rate),
        "message_p50": took[len(took) // 2] if took else None,
        "message_p100": took[-1] if took else None,
        "rtos": sum(p.conn.sender.rto_events for p in peers),
        "retransmissions": sum(p.conn.sender.retransmissions for p in peers),
        "trims": sum(ln.trimmed for ln in fab.links()),
        "recovered": dict(zip(RECOVERY_KEYS, recovered, strict=True)),
        "slowest_recovery": max(p.conn.sender.slowest_recovery for p in peers),
        "plane_parks": sum(pl["parks"] for p in peers
                           for pl in p.conn.paths.ev_set.snapshot()["planes"]),
    }


def invisibility(*, seed: int = 1, jitter: float = 0.0, planes: int = 2,
                 plane_rate: float = PLANE_RATE, **kw: Any) -> dict[str, Any]:
    """The row's headline in virtual time: the same seed fault-free and under
    ``TIMELINE``; ``ratio_p100`` = p100(faulted) / p100(fault-free).

    A dead plane takes its share of every host's capacity, and a step that
    moves a fixed number of bytes slows by as much under any transport: the
    ``floor`` run is the same loop, fault-free, on the fabric the plane-down
    leaves (one plane fewer). ``over_floor`` = p100(faulted) / p100(floor)
    is what the transport adds to what the lost capacity costs anyway."""
    ff = scenario_alltoall(seed=seed, jitter=jitter, planes=planes, plane_rate=plane_rate, **kw)
    fl = scenario_alltoall(seed=seed, jitter=jitter, planes=planes, plane_rate=plane_rate,
                           faults=True, **kw)
    floor = (scenario_alltoall(seed=seed, jitter=jitter, planes=planes - 1,
                               plane_rate=plane_rate, **kw) if planes > 1 else None)
    ok = bool(ff["p100"] and fl["p100"] and not fl["failed"] and not fl["unfinished"])
    return {"fault_free": ff, "faulted": fl, "floor": floor,
            "ratio_p100": fl["p100"] / ff["p100"] if ok else None,
            "over_floor": fl["p100"] / floor["p100"] if ok and floor and floor["p100"] else None}


if __name__ == "__main__":
    import sys

    args = sys.argv[1:]
    jit = float(args[1]) if len(args) > 1 else 0.0
    np = int(args[2]) if len(args) > 2 else 2
    for sd in range(1, 1 + (int(args[0]) if args else 2)):
        r = invisibility(seed=sd, jitter=jit, planes=np, plane_rate=2 * PLANE_RATE / np)
        ff, fl = r["fault_free"], r["faulted"]
        print(f"seed {sd}: p50 {ff['p50'] * 1e3:.1f} / {fl['p50'] * 1e3:.1f} ms, p100 "
              f"{ff['p100'] * 1e3:.1f} / {fl['p100'] * 1e3:.1f} ms, ratio {r['ratio_p100']:.2f}; "
              f"floor p100 {r['floor']['p100'] * 1e3:.1f} ms, over it {r['over_floor']:.2f}; "
              f"slowest faulted step at {fl['slowest'][0]:.2f} s; RTOs {ff['rtos']} / "
              f"{fl['rtos']}; parks {fl['plane_parks']}; unfinished {fl['unfinished']}; "
              f"recovered {list(fl['recovered'].values())}", flush=True)
