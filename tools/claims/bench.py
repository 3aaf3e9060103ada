"""``braid bench claims``: the claims, measured side by side on the testbed.

Braid (daemons + the Python API), kernel TCP (one connection per host pair,
pinned to a plane, pairs striped over planes) and kernel MPTCP (one subflow
per plane) run the same workloads on the same fabric under the same faults,
one row after another, every stack in one run. The rows (docs/claims.md
gives each one's method and target): invisibility (a synchronous
all-to-all's p50/p99/p100 step time, fault-free and under a fault timeline),
failover (a plane blackholed, a link down), loss (0.1-5% on every path),
asymmetric planes, compound faults, incast 8->1 with a victim flow,
fairness (flows started one after another), and plain tail-drop links (two
hosts on a testbed of the row's own; not in --quick unless named). Every
figure is reported with its worst case, every run with how busy the machine
was and whether the emulation was faithful (tools/claims/fidelity.py: no
verdict is taken from a run that was not); ``--rate auto`` picks the highest
per-plane rate at which Braid's runs are faithful on this machine.

Writes ``<out>/claims.json``, ``<out>/claims.md`` and PNGs (``--plots``);
with ``--update-docs`` the current results in docs/claims.md and their PNGs in
docs/claims/, but only for the plain full matrix (default rows, stacks,
fabric, MTU, element and daemon settings, no --quick). A variant (--rows,
--stacks, --planes, --rate, --mtu, --element, --connection, --queue-wait,
--daemon-qlog, --quick) writes its JSON, markdown and PNGs (named after the
variant) to --out only (default results/) and leaves the docs alone, with
or without --update-docs. A full run takes
6-10 minutes on 11 hosts, ``--quick`` 2-4 on 5 (more on a busy machine).
Root only (network namespaces); every namespace and process it made is
removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

HELP = "the claims matrix: Braid vs kernel TCP vs kernel MPTCP on the testbed (root)"
DOCS = "docs/claims.md"
NAME = "claims"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tools.claims.rows import DEFAULT_ROWS, NOT_QUICK, STACKS

    parser.add_argument("--rows", default=None,
                        help=f"comma-separated rows to run, in this order (default: "
                        f"{','.join(DEFAULT_ROWS)}; with --quick without "
                        f"{','.join(NOT_QUICK)}; also: gaps, a diagnosis of Braid's "
                        "fault-free empty 10 ms bins, with --daemon-qlog)")
    parser.add_argument("--stacks", default=",".join(STACKS),
                        help="comma-separated subset of braid,tcp,mptcp")
    parser.add_argument("--plots", default=None, metavar="DIR",
                        help="directory for the PNGs (default: docs/claims for the plain full "
                        "run with --update-docs, else the --out directory; a variant always "
                        "writes them to --out)")
    parser.add_argument("--name", default="claims", help="testbed name (default: claims)")
    parser.add_argument("--element", choices=("ebpf", "userspace"), default="ebpf",
                        help="switch ports: the eBPF port (default) or the userspace element "
                             "(20 us per link; needed for the asymmetric row's latency case)")
    parser.add_argument("--planes", type=int, default=2,
                        help="planes of the fabric (default 2; 2..8): MRC's fabrics lose 1/8 of "
                             "their capacity with one plane, this one half with the default")
    parser.add_argument("--rate", type=_rate_arg, default=100, metavar="MBIT|auto",
                        help="link rate per plane in Mbit/s (default 100; e.g. --planes 4 "
                             "--rate 50 keeps the default's aggregate); auto: the highest of "
                             f"{', '.join(map(str, AGGREGATE_LADDER))} Mbit/s per host, split "
                             "over the planes (100, 50, 25, 12 per plane on two), at which a "
                             "short Braid probe run is faithful on this machine "
                             "(docs/claims.md, Fidelity), then every row at that rate")
    parser.add_argument("--mtu", type=int, default=1500, metavar="BYTES",
                        help="MTU of every link, 1280..9000 (default 1500; every stack sizes "
                             "its packets to it: 4208 carries Braid DATA of 4096 bytes, "
                             "RoCE's largest MTU, as on AI fabrics)")
    parser.add_argument("--connection", action="append", default=[], metavar="KEY=VALUE",
                        help="a daemon [connection] setting for every host of the run "
                             "(repeatable; e.g. --connection ack_delay=3e-4 to A/B a transport "
                             "setting, --connection congestion_params.host_floor=true one "
                             "parameter of the congestion controller; a variant: results to "
                             "--out only)")
    parser.add_argument("--daemon-qlog", action="store_true",
                        help="daemons write <work>/hN.qlog (costs ~30%% goodput; for diagnosis)")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="measure nothing: redraw the tables, plots and (--update-docs, plain "
                        "full run only) the docs section from an earlier claims.json")
    parser.add_argument("--queue-wait", action="store_true",
                        help="Braid daemons measure how long datagrams wait in their socket "
                        "queues (kernel receive timestamps): the hosts' own share of every "
                        "RTT, per run and host in the JSON and a table (a diagnosis: a "
                        "variant, results to --out only)")
    parser.add_argument("--inproc", action="store_true",
                        help="Braid runs without daemons: each worker runs its host's "
                        "endpoint in its own process (braid.open; docs/daemon.md, "
                        "\"In-process endpoint\"); the daemons stop once the fabric is up")
    parser.add_argument("--work", default=None, metavar="DIR",
                        help="daemon configs and logs (default: <out>/claims-run)")


#: ``--rate auto`` tries these rates (Mbit/s per host, the planes' sum),
#: highest first, each split over the planes (``rate_ladder``): what
#: saturates a host is the aggregate it moves, not its plane count.
AGGREGATE_LADDER = (200, 100, 50, 24)


def rate_ladder(planes: int) -> list[int]:
    """The per-plane rates ``--rate auto`` tries on ``planes`` planes: 100,
    50, 25, 12 on two, 50, 25, 12, 6 on four; none under the fabric's lowest."""
    from tools.claims import fabric as claims_fabric

    lo, hi = claims_fabric.RATE_RANGE
    return [r for r in (a // planes for a in AGGREGATE_LADDER) if lo <= r <= hi]


#: Seconds of the probe run (an all-to-all step loop of Braid over 4 hosts).
PROBE_S = (2.0, 3.0)  # --quick, full


def _rate_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a rate in Mbit/s nor 'auto'"
                                         ) from None


def probe_fidelity(ctx: Any) -> dict[str, Any]:
    """One short Braid all-to-all on ``ctx.fab`` (the invisibility row's
    workload, fault-free) and its fidelity (``fidelity.judge``)."""
    from tools.claims.fidelity import judge
    from tools.claims.rows import collective

    fab = ctx.fab
    group = list(range(min(4, fab.n_hosts)))
    collective(ctx, "braid", "alltoall", group, ctx.q(64 << 10, 128 << 10),
               ctx.q(*PROBE_S), grace=4.0)
    return judge(fab.last_cpu, fab.last_gaps, fab.last_queue_wait)


def hosts_needed(rows: list[str], quick: bool) -> int:
    need = 4
    if "incast" in rows:
        need = max(need, 5 if quick else 11)
    if "fairness" in rows:
        need = max(need, 3 if quick else 9)
    return need


def run(args: argparse.Namespace) -> int:
    from tools.bench.common import REPO_ROOT, environment, progress
    from tools.claims import fabric as claims_fabric
    from tools.claims.fabric import ClaimsFabric
    from tools.claims.naming import is_variant, run_name
    from tools.claims.report import write_all
    from tools.claims.rows import OWN_FABRIC, ROWS, STACKS, Ctx, default_rows
    from tools.common.errors import UserError

    if args.render:
        import json

        try:
            data = json.loads(Path(args.render).read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read {args.render}: {exc}") from None
        plots = Path(args.plots) if args.plots else (
            REPO_ROOT / "docs" / "claims" if args.update_docs and not is_variant(data)
            else Path(args.out))
        write_all(data, Path(args.out), plots, update_docs=bool(args.update_docs),
                  docs=args.docs)
        return 0
    if os.geteuid() != 0:
        raise UserError("braid bench claims needs root (it builds network namespaces)")
    rows = ([r.strip() for r in args.rows.split(",") if r.strip()] if args.rows is not None
            else default_rows(bool(args.quick)))
    bad = [r for r in rows if r not in ROWS]
    if bad or not rows:
        raise UserError(f"unknown row {bad[0] if bad else '(none)'!r} (rows: {', '.join(ROWS)})")
    stacks = [s.strip() for s in args.stacks.split(",") if s.strip()]
    if not stacks or any(s not in STACKS for s in stacks):
        raise UserError("--stacks takes braid, tcp and/or mptcp")
    if args.inproc and (args.queue_wait or args.daemon_qlog):
        raise UserError("--queue-wait and --daemon-qlog measure the daemons: not with --inproc")
    auto = args.rate == "auto"
    first = rate_ladder(args.planes)[0] if auto else int(args.rate)
    claims_fabric.configure(args.planes, first, args.mtu)
    connection = claims_fabric.parse_connection(args.connection, args.planes)
    out = Path(args.out)
    work = Path(args.work) if args.work else out / "claims-run"
    planned = {"rows": {r: {} for r in rows}, "planes": args.planes, "rate_mbit": args.rate,
               "mtu": args.mtu, "connection": connection, "queue_wait": bool(args.queue_wait),
               "quick": bool(args.quick), "stacks": stacks, "element": args.element,
               "daemon_qlog": bool(args.daemon_qlog)}
    variant = is_variant(planned)
    if variant and args.update_docs:
        progress(f"{run_name(planned)} is a variant of the claims matrix: results go to {out} "
                 f"only, {args.docs or DOCS} is not updated")
    plots = Path(args.plots) if args.plots else (
        REPO_ROOT / "docs" / "claims" if args.update_docs and not variant else out)
    # Rows on a testbed of their own need no claims fabric (unless --rate
    # auto probes on it).
    own_only = all(r in OWN_FABRIC for r in rows) and not auto
    n_hosts = 2 if own_only else hosts_needed(rows, args.quick)
    t_start = time.monotonic()
    me = os.getpid()

    def _interrupt(signum: int, _frame: Any) -> None:
        if os.getpid() != me:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}

    def say(msg: str) -> None:
        progress(f"{time.monotonic() - t_start:6.1f}s {msg}")

    dargs = ["--qlog", str(work.resolve() / "{host}.qlog")] if args.daemon_qlog else []

    def make_fab() -> ClaimsFabric:
        return ClaimsFabric(n_hosts, args.name, work, dargs, element=args.element,
                            connection=connection, queue_wait=bool(args.queue_wait))

    fab = make_fab()
    load0 = os.getloadavg()
    results: dict[str, Any] = {}
    ctx = Ctx(fab=fab, quick=bool(args.quick), stacks=stacks, say=say,
              inproc=bool(args.inproc))
    rate_auto: dict[str, Any] | None = None
    try:
        if auto:
            rate_auto = _search_rate(ctx, make_fab, args, say)
            fab = ctx.fab
        elif own_only:
            say(f"rows {', '.join(rows)} bring up their own testbed: no claims fabric")
        else:
            say(f"bringing up the claims fabric: {n_hosts} hosts x {args.planes} planes at "
                f"{args.rate} Mbit/s, MTU {args.mtu}, leaf-spine, "
                f"{args.element} link elements; Braid daemons on every host")
            fab.up()
        say(f"fabric and daemons up; rows: {', '.join(rows)}; stacks: {', '.join(stacks)}")
        if args.inproc:  # the workers bind the hosts' planes themselves
            for p in fab.daemons.values():
                p.terminate()
            for p in fab.daemons.values():
                p.wait(timeout=30)
            say("daemons stopped: Braid runs use in-process endpoints (--inproc)")
        for i, row in enumerate(rows, 1):
            t0 = time.monotonic()
            say(f"row {i}/{len(rows)}: {row}")
            try:
                results[row] = ROWS[row](ctx)
            except UserError:
                raise
            except Exception as exc:  # one broken row must not lose the others
                results[row] = {"error": f"{type(exc).__name__}: {exc}"}
                say(f"row {row} FAILED: {type(exc).__name__}: {exc}")
            results[row]["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        with contextlib.suppress(Exception):
            ctx.fab.down()  # the fabric --rate auto chose, or the one above
        for s, h in old.items():
            signal.signal(s, h)
    say("fabric torn down")
    import subprocess

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, timeout=10).stdout.strip()
    data = {"bench": NAME, "quick": bool(args.quick), "rows": results, "stacks": stacks,
            "hosts": n_hosts, "planes": args.planes, "rate_mbit": claims_fabric.RATE_MBIT,
            "rate_auto": rate_auto,
            "mtu": args.mtu, "connection": connection, "queue_wait": bool(args.queue_wait),
            "daemon_qlog": bool(args.daemon_qlog),
            "inproc": bool(args.inproc),
            "element": ("none, plain tbf tail-drop links (the row's own testbed)" if own_only
                        else "eBPF switch port" if args.element == "ebpf"
                        else "userspace (AF_PACKET) link element"),
            "transfers": ctx.transfers, "environment": environment(), "commit": commit,
            "seconds": round(time.monotonic() - t_start, 1),
            "loadavg": {"start": [round(x, 2) for x in load0],
                        "end": [round(x, 2) for x in os.getloadavg()]}}
    path = write_all(data, out, plots, update_docs=bool(args.update_docs), docs=args.docs)
    failed = [t for t in ctx.transfers if not t["ok"]]
    say(f"wrote {path}; {len(ctx.transfers)} runs, {len(failed)} with a failed transfer "
        f"(reasons in the JSON)")
    return 0


def _search_rate(ctx: Any, make_fab: Any, args: argparse.Namespace, say: Any
                 ) -> dict[str, Any]:
    """``--rate auto``: a fabric per rung of ``rate_ladder``, a probe run on
    each until one is faithful; the fabric of the chosen rate is left up in
    ``ctx.fab`` for the rows."""
    from tools.claims import fabric as claims_fabric
    from tools.claims.fidelity import search_rate

    def probe(rate: int) -> dict[str, Any]:
        claims_fabric.configure(args.planes, rate, args.mtu)
        ctx.fab = make_fab()
        say(f"rate auto: bringing up {ctx.fab.n_hosts} hosts x {args.planes} planes at "
            f"{rate} Mbit/s for a {ctx.q(*PROBE_S):g} s Braid all-to-all probe")
        ctx.fab.up()
        fid = probe_fidelity(ctx)
        if fid.get("faithful") is False:
            ctx.fab.down()
        return fid

    ladder = rate_ladder(args.planes)
    found = search_rate(probe, ladder, say)
    if found["faithful"] is False:  # nothing was faithful: the lowest rung, marked so
        claims_fabric.configure(args.planes, found["rate_mbit"], args.mtu)
        ctx.fab = make_fab()
        ctx.fab.up()
    say(f"rate auto: {found['rate_mbit']} Mbit/s per plane for every row")
    return {**found, "ladder": ladder,
            "probe": f"{ctx.q(*PROBE_S):g} s all-to-all over 4 hosts"}
