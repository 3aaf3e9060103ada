"""Fairness in virtual time (issue 13): ``n`` senders into one host over two
100 Mbit/s planes (the claims fabric's rates; one switch per plane whose
spine port marks ECN above 16 KB and whose last hop trims above 32 KB),
the daemon's connection config, one sender starting every ``stagger`` s,
64 KiB messages, 16 in flight per sender. Jain's index over 100 ms windows
of delivered messages from 0.2 s after the last start, as the claims bench's
fairness row counts them, without a busy machine's scheduling noise.

Not part of ``braid bench sim``'s table (yet): a diagnosis tool.
``python -m testbed.sim.scenarios_fair N [mark_gain] [jitter]``.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import LinkSpec
from testbed.sim.scenarios import Peer, _establish, connect_pair, make_fabric
from testbed.sim.scenarios_cc import PLANE_RATE, host_config
from transport.events import Event, MessageAcked

WINDOW = 0.1


def scenario_fairness(*, n: int = 4, mark_gain: float | None = None, jitter: float = 0.0,
                      stagger: float = 0.3, hold: float = 0.6, seed: int = 5) -> dict[str, Any]:
    """``jitter``: sender i's packets are delayed by up to jitter * (i+1)/n (hosts
    of unequal load). ``mark_gain`` None: the daemon's default."""
    rate, delay = PLANE_RATE, 50e-6
    up = LinkSpec(rate=1.25e8, delay=delay, buffer=4 << 20)
    sp = LinkSpec(rate=rate, delay=delay, buffer=256 << 10, ecn_threshold=16 << 10)
    dn = LinkSpec(rate=rate, delay=delay, buffer=256 << 10, trim_threshold=32 << 10)
    hosts = tuple(f"a{i}" for i in range(n))
    fab = make_fabric(planes=2, spines=1, rate=rate, uplink=up, spine=sp, downlink=dn,
                      seed=seed, hosts=(*hosts, "b"))
    if jitter:
        for i, h in enumerate(hosts):
            for p in range(2):
                fab.link("uplink", h, p).jitter = jitter * (i + 1) / n
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    if mark_gain is not None:
        cfg = replace(cfg, congestion_params={**cfg.congestion_params, "mark_gain": mark_gain})
    sim = Simulator(fab)
    pairs = [connect_pair(sim, h, "b", config=replace(cfg, seed=seed + i),
                          cids=(10 + i, 100 + i)) for i, h in enumerate(hosts)]
    for _, b in pairs:
        b.keep_data = False
    _establish(sim, *[p for pair in pairs for p in pair], limit=0.5)
    t0 = sim.now
    dur = stagger * (n - 1) + hold
    end = t0 + dur
    payload = bytes(64 << 10)

    def submit(a: Peer) -> None:
        if sim.now < end and a.failed is None:
            a.conn.send_message(payload)
            sim.wake(a)

    def on_event(peer: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked):
            submit(peer)

    def start(a: Peer) -> None:
        for _ in range(16):
            submit(a)

    for i, (a, _) in enumerate(pairs):
        a.on_event = on_event
        sim.at(t0 + i * stagger, lambda a=a: start(a))  # type: ignore[misc]
    sim.run(until=end, max_events=50_000_000)
    nb = int(dur / WINDOW)
    per = [[0] * nb for _ in pairs]
    for i, (_, b) in enumerate(pairs):
        for t, _, _ in b.delivered:
            k = int((t - t0) / WINDOW)
            if 0 <= k < nb:
                per[i][k] += 1
    jains = []
    for k in range(int((stagger * (n - 1) + 0.2) / WINDOW), nb):
        xs = [p[k] for p in per]
        if sum(xs):
            jains.append(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)))
    return {"n": n, "jain_min": min(jains), "jain_median": statistics.median(jains),
            "messages_per_window": per, "md": [a.conn.cc.stats()["md"] for a, _ in pairs],
            "failed": [a.failed for a, _ in pairs if a.failed]}


if __name__ == "__main__":
    args = sys.argv[1:]
    r = scenario_fairness(n=int(args[0]) if args else 4,
                          mark_gain=float(args[1]) if len(args) > 1 else None,
                          jitter=float(args[2]) if len(args) > 2 else 0.0)
    print(f"n={r['n']} Jain min {r['jain_min']:.2f} median {r['jain_median']:.2f} "
          f"MDs {[int(x) for x in r['md']]}")
