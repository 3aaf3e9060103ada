"""Fairness in virtual time: ``n`` senders into one host over two
100 Mbit/s planes (the claims fabric's rates; one switch per plane whose
spine port marks ECN above 16 KB and whose last hop trims above 32 KB;
with ``bottleneck="last-hop"`` the spine ports run at twice the rate, as two
spines share the load on the claims fabric, and the last hop, which trims
and does not mark, is the only queue),
the daemon's connection config, one sender starting every ``stagger`` s,
64 KiB messages, 16 in flight per sender. Jain's index over 100 ms windows
of bytes acknowledged from 0.2 s after the last start, as the claims bench's
fairness row counts them (bytes per window), without a busy machine's
scheduling noise; the same over delivered messages (``jain_msgs_*``); each
newcomer's time to 80% of the running flows' mean rate, in its smoothed RTTs.

Not part of ``braid bench sim``'s table (yet): a diagnosis tool, asserted by
tests/unit/test_scenarios_fair.py.
``python -m testbed.sim.scenarios_fair N [mark_gain] [jitter] [spine|last-hop]``.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import LinkSpec
from testbed.sim.scenarios import Peer, _establish, connect_pair, make_fabric
from testbed.sim.scenarios_cc import PLANE_RATE, feed, host_config

WINDOW = 0.1
#: Sampling period of the per-flow trace (windows, acked bytes) and the
#: window over which a newcomer's rate is compared with its fair share.
SAMPLE = 5e-3
RATE_WINDOW = 20e-3


def scenario_fairness(*, n: int = 4, mark_gain: float | None = None, jitter: float = 0.0,
                      stagger: float = 0.3, hold: float = 0.6, seed: int = 5,
                      params: dict[str, Any] | None = None,
                      config: dict[str, Any] | None = None,
                      bottleneck: str = "spine", rate: float = PLANE_RATE,
                      uplink_rate: float = 1.25e8) -> dict[str, Any]:
    """``jitter``: sender i's packets are delayed by up to jitter * (i+1)/n (hosts
    of unequal load). ``rate``: the planes' links (bytes/s; the claims bench's
    ``--rate 12`` is 1.5e6, with ``uplink_rate`` the same: every link of its
    fabric runs at the plane rate). ``mark_gain`` None: the daemon's default. ``params``: more
    ``congestion_params``; ``config``: other connection settings.

    ``newcomer_rtts[i]`` (i >= 1): how long sender i took from its start until
    its rate over the last ``RATE_WINDOW`` reached 80% of the running senders'
    mean rate over the same window, in its own smoothed RTTs at that moment
    (inf if never). ``trace``: per ``SAMPLE``, each sender's NSCC stats."""
    delay = 50e-6
    up = LinkSpec(rate=uplink_rate, delay=delay, buffer=4 << 20)
    if bottleneck not in ("spine", "last-hop"):
        raise ValueError("bottleneck: 'spine' or 'last-hop'")
    # "last-hop": the claims fabric's case, where two spines per plane share
    # the load and the receiver's last hop (trims, no ECN, as in MRC) is the
    # only queue; "spine": the spine port toward the receiver marks first.
    sp = LinkSpec(rate=rate * (2 if bottleneck == "last-hop" else 1), delay=delay,
                  buffer=256 << 10, ecn_threshold=16 << 10)
    dn = LinkSpec(rate=rate, delay=delay, buffer=256 << 10, trim_threshold=32 << 10)
    hosts = tuple(f"a{i}" for i in range(n))
    fab = make_fabric(planes=2, spines=1, rate=rate, uplink=up, spine=sp, downlink=dn,
                      seed=seed, hosts=(*hosts, "b"))
    if jitter:
        for i, h in enumerate(hosts):
            for p in range(2):
                fab.link("uplink", h, p).jitter = jitter * (i + 1) / n
    cfg = host_config(fab, plane_rate=rate, seed=seed, **(config or {}))
    if mark_gain is not None:
        cfg = replace(cfg, congestion_params={**cfg.congestion_params, "mark_gain": mark_gain})
    if params:
        cfg = replace(cfg, congestion_params={**cfg.congestion_params, **params})
    sim = Simulator(fab)
    pairs = [connect_pair(sim, h, "b", config=replace(cfg, seed=seed + i),
                          cids=(10 + i, 100 + i)) for i, h in enumerate(hosts)]
    for _, b in pairs:
        b.keep_data = False
    _establish(sim, *[p for pair in pairs for p in pair], limit=0.5)
    t0 = sim.now
    dur = stagger * (n - 1) + hold
    end = t0 + dur
    submit = feed(sim, [a for a, _ in pairs], bytes(64 << 10), end)

    def start(a: Peer) -> None:
        for _ in range(16):
            submit(a)

    for i, (a, _) in enumerate(pairs):
        sim.at(t0 + i * stagger, lambda a=a: start(a))  # type: ignore[misc]
    trace: list[tuple[float, list[dict[str, float]]]] = []

    def sample() -> None:
        row = []
        for a, _ in pairs:
            st = a.conn.cc.stats()
            shares = getattr(a.conn.paths, "shares", None)
            if shares is not None:
                for p, w in enumerate(shares.weight):
                    st[f"weight{p}"] = w
            row.append(st)
        trace.append((sim.now - t0, row))

    for k in range(round(dur / SAMPLE) + 1):
        sim.at(t0 + k * SAMPLE, sample)
    # Past ``end`` only so that the sample at ``end`` is taken (nothing new is sent).
    sim.run(until=end + SAMPLE / 2, max_events=50_000_000)
    lag = round(RATE_WINDOW / SAMPLE)
    newcomer: list[float] = [0.0]
    for i in range(1, n):
        got = math.inf
        for k in range(lag, len(trace)):
            t, now_st = trace[k]
            if t < i * stagger + RATE_WINDOW:
                continue
            prev = trace[k - lag][1]
            rates = [now_st[j]["acked_bytes"] - prev[j]["acked_bytes"] for j in range(i + 1)]
            if rates[i] >= 0.8 * sum(rates) / (i + 1):
                srtt = now_st[i]["srtt"]
                got = (t - i * stagger) / srtt
                break
        newcomer.append(got)
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
    # The claims bench's measure: bytes per 100 ms window (here acknowledged
    # bytes at the sender, sampled every SAMPLE), not whole 64 KiB messages:
    # at n = 8 a flow completes ~5 messages per window, and counting them
    # alone moves Jain's index by 0.1 with perfectly even rates.
    step = round(WINDOW / SAMPLE)
    jb = []
    for k in range(int((stagger * (n - 1) + 0.2) / WINDOW), nb):
        if (k + 1) * step >= len(trace):
            break
        bs = [trace[(k + 1) * step][1][i]["acked_bytes"] - trace[k * step][1][i]["acked_bytes"]
              for i in range(n)]
        if sum(bs):
            jb.append(sum(bs) ** 2 / (n * sum(x * x for x in bs)))
    return {"n": n, "jain_min": min(jb), "jain_median": statistics.median(jb),
            "jain_msgs_min": min(jains), "jain_msgs_median": statistics.median(jains),
            "messages_per_window": per, "md": [a.conn.cc.stats()["md"] for a, _ in pairs],
            "newcomer_rtts": newcomer, "trace": trace,
            "failed": [a.failed for a, _ in pairs if a.failed]}


if __name__ == "__main__":
    args = sys.argv[1:]
    r = scenario_fairness(n=int(args[0]) if args else 4,
                          mark_gain=float(args[1]) if len(args) > 1 else None,
                          jitter=float(args[2]) if len(args) > 2 else 0.0,
                          bottleneck=args[3] if len(args) > 3 else "spine")
    print(f"n={r['n']} Jain (bytes) min {r['jain_min']:.2f} median {r['jain_median']:.2f} "
          f"(messages) {r['jain_msgs_min']:.2f} / {r['jain_msgs_median']:.2f} "
          f"MDs {[int(x) for x in r['md']]} newcomer RTTs "
          f"{[round(x) if x < math.inf else x for x in r['newcomer_rtts'][1:]]}")
