"""``braid perf SRC DST``: a one-shot transfer between testbed hosts, iperf3's shape.

Starts a daemon on each host that has none (``testbed/daemons.py``; stopped
again at the end), sends ``--size`` bytes or for ``--time`` seconds, prints one
line per interval (goodput, retransmissions, RTOs, per-plane share) and a
summary with the worst interval and the longest delivery gap next to the
median (and the loss inference's spurious losses and plane parks), and exits
0 only if every byte arrived and matched. ``--timeline``
runs a fault timeline during the transfer. ``--inproc`` runs no daemons: each
host's endpoint lives in a worker process in its namespace (``braid.open``).
The summary also gives the CPU seconds of every Braid process of the run
(daemons and this process, or the workers and this process) per gigabyte
delivered. See docs/testbed.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from typing import Any

from tools.cli.transfer import parse_size
from tools.common.errors import UserError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "perf", help="one-shot transfer between two testbed hosts (like iperf3)",
        description="A one-shot transfer between testbed hosts, iperf3's shape: starts a "
        "daemon on each host that has none (stopped again at the end), sends --size bytes "
        "or for --time seconds, prints one line per interval (goodput, retransmissions, "
        "RTOs, trims, per-plane share) and a summary with the worst interval and the "
        "longest delivery gap next to the medians (and the loss inference's spurious "
        "losses and plane parks), and exits 0 only if every byte arrived "
        "intact (1 otherwise). --timeline runs faults during it. See docs/testbed.md.")
    p.add_argument("src", help="sending host, e.g. h0")
    p.add_argument("dst", help="receiving host, e.g. h3 (or several: h1,h2,h3)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--size", type=parse_size, help="bytes per stream, e.g. 1GiB "
                      "(default 64MiB)")
    what.add_argument("--time", type=float, metavar="S", help="send for S seconds instead")
    p.add_argument("--parallel", "-P", type=int, default=1, metavar="N",
                   help="streams per destination (default 1)")
    p.add_argument("--reverse", "-R", action="store_true", help="DST sends to SRC")
    p.add_argument("--interval", "-i", type=float, default=1.0, metavar="S",
                   help="seconds between report lines (default 1)")
    p.add_argument("--timeline", metavar="FILE", help="fault timeline to run during the "
                   "transfer (time 0 = first byte), e.g. examples/demo-timeline.toml")
    p.add_argument("--chunk", type=parse_size, default=256 << 10,
                   help="bytes per message (default 256KiB)")
    p.add_argument("--no-verify", action="store_true",
                   help="check digests only, not every byte against what was sent")
    p.add_argument("--stall-timeout", type=float, default=30.0, metavar="S",
                   help="fail when nothing is delivered for S seconds (default 30)")
    p.add_argument("--keep-daemons", action="store_true",
                   help="leave the daemons this run started running")
    p.add_argument("--inproc", action="store_true",
                   help="no daemons: each host's endpoint runs inside a worker process in "
                   "its namespace (braid.open); fails if a daemon serves one of the hosts")
    p.add_argument("--name", help="testbed name (default: the only one up)")
    p.add_argument("--json", action="store_true", help="one JSON object at the end")
    p.set_defaults(func=run)


def _mbit(bps: float) -> str:
    return f"{bps / 1e6:7.1f} Mbit/s"


def _mib(n: float) -> str:
    return f"{n / 2**20:8.1f} MiB"


def _share(sh: dict[str, float]) -> str:
    return " ".join(f"p{p} {v * 100:3.0f}%" for p, v in sh.items()) or "-"


HEAD = (f"  {'interval':>13}  {'transfer':>12}  {'goodput':>12}  {'retx':>6} {'RTOs':>4} "
        f"{'trims':>6}  plane share")


def _line(r: dict[str, Any]) -> str:
    span = f"{r['start']:.1f}-{r['end']:.1f} s"
    return (f"  {span:>13}  {_mib(r['bytes']):>12}  {_mbit(r['goodput_bps'])}  "
            f"{r['retransmissions']:6} {r['rtos']:4} {r['trims']:6}  {_share(r['plane_share'])}")


def _validate(a: argparse.Namespace) -> None:
    if a.parallel < 1 or a.parallel > 64:
        raise UserError("--parallel must be 1..64")
    if a.interval <= 0 or a.stall_timeout <= 0 or a.chunk < 64:
        raise UserError("--interval and --stall-timeout must be positive, --chunk >= 64")
    if a.time is not None and not 0 < a.time <= 86400:
        raise UserError("--time must be 0..86400 seconds")
    if a.size is not None and a.size <= 0:
        raise UserError("--size must be positive")


def run(a: argparse.Namespace) -> int:
    from testbed import daemons, nsutil
    from testbed.cli import _default_name
    from testbed.fabric import Testbed
    from tools.claims.cpu import process_seconds
    from tools.claims.fidelity import Monitor
    from tools.claims.fidelity import line as fidelity_line
    from tools.cli.perf_run import InprocPerf, Perf, Stream, interval_row, summary
    from transport.eventloop import new_event_loop

    _validate(a)
    tb = Testbed.attach(_default_name(a.name))
    dsts = [d for d in a.dst.split(",") if d]
    src = a.src
    for h in [src, *dsts]:
        if h not in tb.hosts:
            raise UserError(f"no host {h!r} in testbed {tb.name} (hosts {', '.join(tb.hosts)})")
    if src in dsts:
        raise UserError(f"{src} cannot send to itself")
    if a.reverse:
        if len(dsts) != 1:
            raise UserError("--reverse takes one destination")
        src, dsts = dsts[0], [src]
    events = []
    if a.timeline:
        from testbed.faults import compile_fault, load_timeline

        events = load_timeline(a.timeline)
        for ev in events:  # every event checked against this topology before anything runs
            try:
                compile_fault(tb, ev.fault)
            except UserError as exc:
                raise UserError(f"{ev.where}: {exc}") from None
    size = None if a.time is not None else (a.size or 64 << 20)
    streams = [Stream(sid=i * a.parallel + j, src=src, dst=d, size=size, chunk=a.chunk)
               for i, d in enumerate(dsts) for j in range(a.parallel)]
    hosts = [src, *dsts]
    if a.inproc:
        serving = sorted(set(daemons.running(tb)) & set(hosts))
        if serving:
            raise UserError(f"a daemon already serves {', '.join(serving)}'s planes: "
                            f"stop it ('braid testbed daemons down') or run without --inproc")
        if not all(daemons.config_path(tb, h).exists() for h in hosts):
            daemons.write_host_configs(tb)
        started: dict[str, int] = {}
    else:
        started = daemons.start_daemons(tb, hosts)
    quiet = a.json

    def say(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    what = f"{size / 2**20:g} MiB per stream" if size else f"{a.time:g} s"
    say(f"braid perf: {src} -> {','.join(dsts)}, {len(streams)} stream"
        f"{'s' if len(streams) > 1 else ''}, {what}, {len(tb.planes)} planes, testbed "
        f"{tb.name}" + (f" (started daemons on {' '.join(started)})" if started else "")
        + (" (in-process endpoints)" if a.inproc else ""))
    fired: list[dict[str, Any]] = []
    stop_timeline = threading.Event()
    tl_errors: list[str] = []

    def interval(prev: Any, cur: Any) -> None:
        say(_line(interval_row(prev, cur)))

    opts: dict[str, Any] = {"duration": a.time, "interval": a.interval,
                            "stall_timeout": a.stall_timeout, "verify": not a.no_verify,
                            "on_interval": interval}
    perf: Perf
    if a.inproc:
        perf = InprocPerf(
            {h: str(daemons.config_path(tb, h)) for h in hosts},
            lambda h: ["nsenter", f"--net={nsutil.netns_path(tb.netns(h))}"], streams,
            logs={h: str(daemons.config_path(tb, h).with_suffix(".perf.log")) for h in hosts},
            **opts)
    else:
        perf = Perf({h: str(daemons.socket_path(tb, h)) for h in hosts}, streams, **opts)
    # CPU of every Braid process of the run: the daemons (whoever started
    # them) and this process, or the workers (they report theirs) and this one.
    daemon_pids = {h: int(o["pid"]) for h, o in daemons.running(tb).items() if h in hosts} \
        if not a.inproc else {}
    cpu0 = {h: process_seconds(pid) for h, pid in daemon_pids.items()}
    own0 = time.process_time()

    def timeline() -> None:
        from testbed.faults import run_timeline

        t0 = time.monotonic()

        def echo(line: str) -> None:
            label = line.split("s ", 1)[1] if "s " in line else line
            fired.append({"t": round(time.monotonic() - t0, 3), "event": label})
            say(f"  fault at {time.monotonic() - t0:6.2f} s: {label}")
        try:
            run_timeline(tb, events, echo=echo, until=stop_timeline.is_set)
        except Exception as exc:  # reported with the result
            tl_errors.append(f"{type(exc).__name__}: {exc}")

    loop = new_event_loop()
    monitor = Monitor(tb).start()  # did the emulator keep up? (docs/claims.md, Fidelity)
    tl_thread = threading.Thread(target=timeline, name="perf-timeline", daemon=True)

    async def main() -> None:
        if events:
            perf.on_start = tl_thread.start
        say(HEAD)
        await perf.run()

    task = loop.create_task(main())
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    interrupted = False
    try:
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            interrupted = True
        except Exception as exc:
            from transport.api import BraidError

            if not isinstance(exc, BraidError | ConnectionError):
                raise
            perf.failure = str(exc)
    finally:
        fidelity = monitor.stop()
        stop_timeline.set()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        loop.close()
        if tl_thread.is_alive():
            tl_thread.join(timeout=10)
        own = time.process_time() - own0
        cpu: dict[str, float] = {}
        for h, pid in daemon_pids.items():
            after, before = process_seconds(pid), cpu0.get(h)
            if after is not None and before is not None:
                cpu[f"daemon {h}"] = round(after - before, 3)
        if isinstance(perf, InprocPerf):
            cpu.update({f"worker {h}": round(v, 3) for h, v in perf.cpu_s.items()})
        cpu["perf"] = round(own, 3)
        if started and not a.keep_daemons:
            daemons.stop_daemons(tb, list(started))
    if interrupted:
        el = (time.monotonic() - perf.t0_wall) if perf.t0_wall else 0.0
        print(f"braid perf: interrupted after {el:.1f} s "
              f"({perf.delivered / 2**20:.1f} MiB delivered)", file=sys.stderr)
        return 130
    res = summary(perf)
    res.update({"src": src, "dst": dsts, "testbed": tb.name, "size": size,
                "time": a.time, "parallel": a.parallel, "reverse": a.reverse,
                "timeline": a.timeline, "faults": fired, "timeline_errors": tl_errors,
                "daemons_started": list(started), "fidelity": fidelity, "inproc": a.inproc,
                "cpu_s": cpu, "cpu_s_total": round(sum(cpu.values()), 3),
                "cpu_s_per_GB": round(sum(cpu.values()) / (res["bytes"] / 1e9), 2)
                if res["bytes"] else None})
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        total = {"start": 0.0, "end": res["seconds"], "bytes": res["bytes"],
                 "goodput_bps": res["goodput_bps"], "retransmissions": res["retransmissions"],
                 "rtos": res["rtos"], "trims": res["trims"], "plane_share": res["plane_share"]}
        verdict = "verified" if res["verified"] else ("complete" if res["complete"]
                                                      else "INCOMPLETE")
        say("  " + "-" * (len(HEAD) - 2))
        say(f"{_line(total)}  {verdict}")
        iv, gap, w = res["interval_goodput_bps"], res["delivery_gap_s"], res["worst_interval"]
        worst = "" if w is None else f" ({w['start']:.1f}-{w['end']:.1f} s)"
        say(f"  per interval: median {iv['median'] / 1e6:.1f} Mbit/s, worst "
            f"{iv['min'] / 1e6:.1f} Mbit/s{worst}; delivery gap: median "
            f"{gap['median'] * 1e3:.1f} ms, max {gap['max'] * 1e3:.0f} ms "
            f"(at {gap['max_at']:.2f} s)")
        # Braid's loss inference, judged by its own later evidence: on a
        # fault-free fabric both should stay near 0 (docs/daemon.md, I/O adapter).
        say(f"  loss inference: {res['spurious_losses']} spurious losses (declared lost, "
            f"then acknowledged), planes parked {res['plane_parks']} times")
        per_gb = res["cpu_s_per_GB"]
        say(f"  CPU: {res['cpu_s_total']:.1f} s in Braid processes ("
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()) + ")"
            + (f", {per_gb:.1f} CPU-s/GB" if per_gb is not None else ""))
        say(f"  {fidelity_line(fidelity)}")
        for e in tl_errors:
            say(f"  timeline error: {e}")
    if res["failure"]:
        print(f"braid perf: FAILED: {res['failure']}", file=sys.stderr)
    elif not res["verified"]:
        print("braid perf: FAILED: not every byte arrived intact", file=sys.stderr)
    return 0 if res["verified"] else 1
