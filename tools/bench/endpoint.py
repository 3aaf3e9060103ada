"""``braid bench endpoint``: what idle connections cost a host's busy one.

A daemon keeps a connection to every peer it has talked to (an initiator's
never expires), and its I/O layer asks every connection of the endpoint on
every pass: ``Endpoint.datagrams_to_send`` and ``Endpoint.next_timer``. This
benchmark measures one pass in CPU time, for an endpoint with one busy
connection (a 4 MiB message, both planes) beside ``k`` established, idle
ones, ``k`` in ``--idle`` (default 0, 16, 64), in the same run: two
``Endpoint`` objects in memory, virtual time in 10 us steps, no sockets.
Reported per side (sender, receiver): the median and the maximum pass, and
what one idle connection adds to a pass, ((median at k) - (median at 0)) / k.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from tools.bench.common import environment, markdown_table, progress, text_table, write_results

HELP = "cost of an endpoint pass with k idle connections beside a busy one"
NAME = "endpoint"
MESSAGE = 4 << 20
STEP = 10e-6
MAX_STEPS = 400_000


def _config() -> Any:
    from transport.config import profile

    return profile("host", planes=2, plane_rate=12.5e6, seed=1)


def measure(idle: int) -> dict[str, Any]:
    """Pass costs (seconds) of both sides with ``idle`` idle connections."""
    from transport.datagram import RxInfo
    from transport.endpoint import Endpoint
    from transport.events import MessageAcked

    cfg = _config()
    secret = bytes(range(32))
    eps = {"sender": Endpoint(config=cfg, secret=secret, rng=random.Random(1)),
           "receiver": Endpoint(config=cfg, secret=secret, rng=random.Random(2))}
    a, b = eps["sender"], eps["receiver"]
    now = 0.0
    passes: dict[str, list[float]] = {"sender": [], "receiver": []}
    acked: set[int] = set()
    clock = time.process_time

    def step(timed: bool) -> None:
        nonlocal now
        now += STEP
        for (side, src), dst, name in (((("sender", a)), b, "a"), ((("receiver", b)), a, "b")):
            t0 = clock()
            t = src.next_timer()
            if t is not None and t <= now:
                src.handle_timer(now)
            out = src.datagrams_to_send(now)
            src.next_timer()
            if timed:
                passes[side].append(clock() - t0)
            for _peer, data, path in out:
                dst.receive_datagram(data, RxInfo(path.plane), now, name)
        for ep in (a, b):
            while (item := ep.next_event()) is not None:
                conn, ev = item
                if isinstance(ev, MessageAcked):
                    acked.add(conn.local_cid)

    conns = [a.connect("b", now) for _ in range(idle + 1)]
    for c in conns:
        c.send_message(b"x")
    for _ in range(MAX_STEPS):
        step(False)
        if len(acked) == len(conns):
            break
    else:
        raise RuntimeError("the connections did not come up")
    for _ in range(2000):  # 20 ms of quiet: the idle ones settle
        step(False)
    busy = conns[0]
    acked.clear()
    busy.send_message(bytes(MESSAGE))
    for _ in range(MAX_STEPS):
        step(True)
        if busy.local_cid in acked:
            break
    else:
        raise RuntimeError("the busy connection's message was not acknowledged")
    return {side: {"passes": len(v), "median_us": statistics.median(v) * 1e6,
                   "max_us": max(v) * 1e6, "mean_us": statistics.fmean(v) * 1e6}
            for side, v in passes.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--idle", default="0,16,64",
                        help="comma-separated numbers of idle connections (default 0,16,64)")


def run(args: argparse.Namespace) -> int:
    from tools.bench.common import git_commit as _commit
    from tools.common.errors import UserError

    try:
        ks = sorted({int(x) for x in args.idle.split(",") if x.strip()})
    except ValueError:
        raise UserError("--idle takes comma-separated integers") from None
    if not ks or ks[0] < 0:
        raise UserError("--idle takes numbers >= 0")
    if ks[0] != 0:
        ks.insert(0, 0)  # the baseline every row is compared with
    results: dict[int, dict[str, Any]] = {}
    for k in ks:
        progress(f"{k} idle connections beside a busy one")
        results[k] = measure(k)
    base = results[0]
    header = ["idle conns", "side", "passes", "median us", "max us", "median / k=0",
              "us per idle conn"]
    rows = []
    for k, r in results.items():
        for side in ("sender", "receiver"):
            s = r[side]
            per = (s["median_us"] - base[side]["median_us"]) / k if k else None
            s["vs_none"] = s["median_us"] / base[side]["median_us"]
            s["us_per_idle"] = per
            rows.append([str(k), side, str(s["passes"]), f"{s['median_us']:.1f}",
                         f"{s['max_us']:.0f}", f"{s['vs_none']:.2f}",
                         "-" if per is None else f"{per:.2f}"])
    print(text_table(header, rows))
    env = environment()
    commit = _commit()
    md = ("`braid bench endpoint`: one `Endpoint` pass (`next_timer`, due timers, "
          "`datagrams_to_send`, `next_timer`) in CPU time, for the sender and the receiver "
          f"of a {MESSAGE >> 20} MiB message on 2 planes, beside k established idle "
          "connections between the same two endpoints (in memory, virtual time).\n\n"
          + markdown_table(header, rows)
          + f"\n\nMeasured {env['time']} at commit {commit} on {env['machine']}, "
          f"{env['cpus']} CPUs, {env['system']}, Python {env['python']}.")
    data = {"bench": NAME, "environment": env, "commit": commit,
            "results": {str(k): v for k, v in results.items()}}
    path = write_results(NAME, data, md, args.out, update_docs=bool(args.update_docs),
                         docs=args.docs)
    progress(f"wrote {path}")
    return 0
