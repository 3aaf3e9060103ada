"""``braid bench core-paced``: CPU of the sans-I/O core at a paced rate, in memory.

Two ``Endpoint``s with the host profile, ``planes`` planes at ``rate`` each
(a FIFO per plane and direction: serialisation at the rate, then a fixed
delay), both stepped every ``pass_us`` of virtual time the way the I/O layer
steps them after a wakeup: the datagrams that arrived since the last pass
(``receive_datagrams``), ``flush_acks``, due timers, ``runs_to_send`` (new-data
runs sealed whole, as the I/O layer takes them).
One message of ``size`` bytes. The CPU of each end is ``time.process_time``
around its own calls, so the figure is the core's alone: no sockets, no
event loop, no emulator. It answers "what does a wakeup cost, and how does
that cost scale with the packets a wakeup carries", which the testbed
cannot answer on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from typing import Any

from transport.config import profile
from transport.datagram import RxInfo, unrun
from transport.endpoint import Endpoint
from transport.events import ConnectionEstablished, MessageDelivered
from wire.codec import peek_untrusted
from wire.constants import PacketType

_SECRET = b"core-paced-bench-secret-32-bytes"


class _Link:
    """One plane, one direction: FIFO at ``rate`` bytes/s, then ``delay``."""

    def __init__(self, rate: float, delay: float) -> None:
        self.rate = rate
        self.delay = delay
        self.free = 0.0
        self.q: deque[tuple[float, bytes]] = deque()

    def put(self, data: bytes, now: float) -> None:
        start = max(now, self.free)
        self.free = start + (len(data) + 42) / self.rate
        self.q.append((self.free + self.delay, data))

    def take(self, now: float) -> list[bytes]:
        q = self.q
        out: list[bytes] = []
        while q and q[0][0] <= now:
            out.append(q.popleft()[1])
        return out


class _Side:
    def __init__(self, ep: Endpoint, links_in: list[_Link], peer: str) -> None:
        self.ep = ep
        self.links_in = links_in
        self.peer = peer
        self.cpu = 0.0
        self.passes = 0
        self.dgrams_in = 0
        self.dgrams_out = 0
        self.sacks_out = 0


def run_one(*, rate_bps: float = 100e6, planes: int = 2, pass_us: float = 100.0,
        size: int = 32 << 20, delay_us: float = 25.0, limit_s: float = 60.0) -> dict[str, Any]:
    rate = rate_bps / 8
    cfg = profile("host", plane_rate=rate, planes=planes)
    a = Endpoint(config=cfg, secret=_SECRET, accept=False)
    b = Endpoint(config=cfg, secret=_SECRET)
    # As EndpointIO asks: a new-data run handed out whole, one GSO send,
    # paced a run at a time, and losses inferred once per read.
    a.sealed_runs = b.sealed_runs = True
    a.paced_runs = b.paced_runs = True
    a.read_batches = b.read_batches = True
    ab = [_Link(rate, delay_us * 1e-6) for _ in range(planes)]
    ba = [_Link(rate, delay_us * 1e-6) for _ in range(planes)]
    sa, sb = _Side(a, ba, "b"), _Side(b, ab, "a")
    out_links = {id(sa): ab, id(sb): ba}
    now = 0.0
    conn = a.connect("b", now)
    sent = False
    delivered = 0
    done_at: float | None = None
    step = pass_us * 1e-6
    t_first: float | None = None
    sack_type = int(PacketType.SACK)
    clock = time.process_time
    while now < limit_s and done_at is None:
        now += step
        for side in (sb, sa):
            ep = side.ep
            t0 = clock()
            for plane, link in enumerate(side.links_in):
                got = link.take(now)
                if got:
                    side.dgrams_in += len(got)
                    ep.receive_datagrams(got, RxInfo(plane), now, side.peer)
            ep.flush_acks(now)
            nt = ep.next_timer()
            if nt is not None and nt <= now:
                ep.handle_timer(now)
            dgrams = ep.runs_to_send(now)
            while (ev := ep.next_event()) is not None:
                _conn, e = ev
                if isinstance(e, MessageDelivered):
                    delivered += len(e.data)
                elif isinstance(e, ConnectionEstablished) and side is sa and not sent:
                    conn.send_message(b"\x00" * size)
                    sent = True
                    t_first = now
                    dgrams += ep.runs_to_send(now)
            side.cpu += clock() - t0
            side.passes += 1
            links = out_links[id(side)]
            for data, path in unrun([(d, p) for _peer, d, p in dgrams]):
                links[path.plane].put(data, now)
                side.dgrams_out += 1
                if side is sb and peek_untrusted(data).ptype == sack_type:
                    side.sacks_out += 1
        if delivered >= size:
            done_at = now
    if done_at is None:
        raise RuntimeError(f"core-paced: {delivered} of {size} bytes delivered in {limit_s}s")
    gb = size / 1e9
    st = conn.sender
    return {
        "rate_bps": rate_bps, "planes": planes, "pass_us": pass_us, "size": size,
        "virtual_s": done_at - (t_first or 0.0),
        "data_packets": sa.dgrams_out, "sacks": sb.sacks_out,
        "retransmissions": getattr(st, "retransmissions", None),
        "cpu_s": {"sender": sa.cpu, "receiver": sb.cpu},
        "cpu_s_per_gb": (sa.cpu + sb.cpu) / gb,
        "us_per_data_packet": (sa.cpu + sb.cpu) / max(1, sa.dgrams_out) * 1e6,
        "us_per_pass": {"sender": sa.cpu / sa.passes * 1e6, "receiver": sb.cpu / sb.passes * 1e6},
        "data_per_pass": sa.dgrams_out / max(1, sa.passes),
    }


HELP = "CPU of the sans-I/O core at a paced rate, by poll interval (in memory)"
NAME = "core-paced"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pass-us", default="100,300,1000",
                        help="comma-separated pass intervals, us (default 100,300,1000: a "
                        "wakeup per arrival at 2 x 100 Mbit/s, and two polling intervals)")
    parser.add_argument("--rate", default="100,12",
                        help="comma-separated per-plane rates, Mbit/s (default 100,12: the "
                        "claims' fabric and the lowest rung of its --rate auto)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds over the intervals, alternating (default 3); each "
                        "figure is the median round's, with the worst beside it")


def run(args: argparse.Namespace) -> int:
    from tools.bench.common import (
        environment,
        git_commit,
        markdown_table,
        progress,
        text_table,
        write_results,
    )
    from tools.common.errors import UserError

    def positives(opt: str, text: str) -> list[float]:
        try:
            xs = [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            xs = []
        if not xs or min(xs) <= 0:
            raise UserError(f"{opt} takes comma-separated numbers > 0, not {text!r}")
        return xs

    intervals = positives("--pass-us", args.pass_us)
    rates = positives("--rate", args.rate)
    rounds = 1 if args.quick else max(1, args.rounds)
    full = (1 << 20) if args.quick else (32 << 20)
    # The same virtual time at every rate: a slow plane gets fewer bytes.
    sizes = {mb: max(1 << 20, int(full * mb / max(rates))) for mb in rates}
    cases = [(mb, pu) for mb in rates for pu in intervals]
    got: dict[tuple[float, float], list[dict[str, Any]]] = {c: [] for c in cases}
    for r in range(rounds):
        for mb, pu in cases:
            res = run_one(rate_bps=mb * 1e6, pass_us=pu, size=sizes[mb])
            got[(mb, pu)].append(res)
            progress(f"round {r + 1}/{rounds}, {mb:g} Mbit/s, pass every {pu:g} us: "
                     f"{res['cpu_s_per_gb']:.1f} CPU-s/GB")
    header = ["Mbit/s per plane", "pass every", "DATA per pass", "SACKs", "CPU-s/GB (median)",
              "CPU-s/GB (worst)", "us per DATA", "us per pass tx / rx", "vs first row",
              "virtual s"]
    rows: list[list[str]] = []
    first: float | None = None
    summary: dict[str, Any] = {}
    for mb, pu in cases:
        runs = sorted(got[(mb, pu)], key=lambda x: x["cpu_s_per_gb"])
        med = runs[len(runs) // 2]
        first = first if first is not None else med["cpu_s_per_gb"]
        summary[f"{mb:g}/{pu:g}"] = {"median": med,
                                     "worst_cpu_s_per_gb": runs[-1]["cpu_s_per_gb"]}
        rows.append([f"{mb:g}", f"{pu:g} us", f"{med['data_per_pass']:.1f}", str(med["sacks"]),
                     f"{med['cpu_s_per_gb']:.1f}", f"{runs[-1]['cpu_s_per_gb']:.1f}",
                     f"{med['us_per_data_packet']:.1f}",
                     f"{med['us_per_pass']['sender']:.0f} / {med['us_per_pass']['receiver']:.0f}",
                     f"{med['cpu_s_per_gb'] / first:.2f}", f"{med['virtual_s']:.3f}"])
    print(text_table(header, rows))
    env = environment()
    commit = git_commit()
    md = ("`braid bench core-paced`: two `Endpoint`s in memory (host profile, 2 planes at "
          "the row's rate, 25 us one way), both stepped every *pass* of virtual time the way "
          "the I/O layer steps them after a wakeup (arrivals, `flush_acks`, due timers, "
          "`runs_to_send`: new-data runs sealed whole), one message of "
          f"{full >> 20} MiB at the highest rate, "
          "scaled down with the rate (the same virtual time); CPU of both ends "
          "(`time.process_time` around their own calls: no sockets, no event loop, no "
          f"emulator). {rounds} alternating rounds; median round, worst beside it.\n\n"
          + markdown_table(header, rows)
          + f"\n\nMeasured {env['time']} at commit {commit} on {env['machine']}, "
          f"{env['cpus']} CPUs, {env['system']}, Python {env['python']}.")
    data = {"bench": NAME, "environment": env, "commit": commit, "results": summary}
    path = write_results(NAME, data, md, args.out, update_docs=bool(args.update_docs),
                         docs=args.docs)
    progress(f"wrote {path}")
    return 0
