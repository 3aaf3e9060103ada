"""``braid testbed ...``: bring fabrics up and down, run commands, inject faults."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

# Its own layer's error under the local name the CLI code uses.
from testbed.errors import TestbedError as UserError
from testbed.state import DEFAULT_RUN_ROOT, list_names


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("testbed", help="multi-plane namespace fabrics with faults",
                              description=__doc__)
    sub = p.add_subparsers(dest="testbed_cmd", metavar="ACTION")
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])

    up = sub.add_parser("up", help="build a fabric from a topology TOML file")
    up.add_argument("file")
    up.add_argument("--name", help="testbed name (default: from the file)")
    up.add_argument("--element", choices=("ebpf", "userspace"), default=None,
                    help="link element for links that do not name one (default: the eBPF "
                         "port, the userspace element where a link needs delay)")
    up.set_defaults(func=cmd_up)

    dn = sub.add_parser("down", help="remove a testbed (idempotent, works after a crash)")
    g = dn.add_mutually_exclusive_group()
    g.add_argument("--name")
    g.add_argument("--all", action="store_true", help="every testbed in the run directory")
    dn.set_defaults(func=cmd_down)

    st = sub.add_parser("status", help="hosts, addresses and link element counters")
    st.add_argument("--name")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    ex = sub.add_parser("exec", help="run a command inside a host (or switch) namespace")
    ex.add_argument("--name")
    ex.add_argument("host", help="h0, h1, ... or a switch node such as p0-s1")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    ex.set_defaults(func=cmd_exec)

    fa = sub.add_parser("fault", help="apply a fault now, e.g. 'plane 1 down', "
                        "'link h3:p1 loss 5%%', 'spine s0 plane 0 reboot 500ms'")
    fa.add_argument("--name")
    fa.add_argument("spec", nargs="+")
    fa.set_defaults(func=cmd_fault)

    rn = sub.add_parser("run", help="replay a fault timeline, optionally against a workload")
    rn.add_argument("--name")
    rn.add_argument("timeline")
    rn.add_argument("--timeout", type=float, default=600.0,
                    help="stop the workload after this many seconds")
    rn.add_argument("argv", nargs=argparse.REMAINDER,
                    help="[--timeout S] [--name N] -- WORKLOAD CMD... (options may also "
                    "follow the timeline)")
    rn.set_defaults(func=cmd_run)

    dm = sub.add_parser("daemons", help="start or stop a Braid daemon on every host "
                        "(configs and key from 'testbed up', in the run directory)")
    dm.add_argument("action", choices=("up", "down", "status"))
    dm.add_argument("hosts", nargs="*", help="only these hosts (default: all)")
    dm.add_argument("--name")
    dm.add_argument("--qlog", action="store_true",
                    help="each daemon writes RUN_DIR/hosts/HOST.qlog")
    dm.set_defaults(func=cmd_daemons)


def _default_name(name: str | None) -> str:
    if name:
        return name
    names = list_names(DEFAULT_RUN_ROOT)
    if len(names) == 1:
        return names[0]
    if not names:
        raise UserError("no testbed is up")
    raise UserError(f"several testbeds are up ({', '.join(names)}); pass --name")


def cmd_up(a: argparse.Namespace) -> int:
    from testbed.fabric import Testbed

    tb = Testbed.up(a.file, name=a.name, element=a.element)
    print(f"testbed {tb.name} up: {len(tb.hosts)} hosts x {len(tb.planes)} planes "
          f"({tb.topo.kind}), run dir {tb.run_dir}")
    kinds = list((tb.state.data.get("element_kinds") or {}).values())
    if kinds:
        print("  link elements: " + ", ".join(f"{k} on {kinds.count(k)} link(s)"
                                              for k in sorted(set(kinds))))
    print(f"  host i plane p = 10.p.i.2, e.g. h0 plane 0 = {tb.address(0, 0)}")
    print(f"  run: braid testbed exec --name {tb.name} h0 -- CMD")
    _write_daemon_configs(tb)
    return 0


def _write_daemon_configs(tb: Any) -> None:
    """A key and one daemon config per host in the run directory (testbed/daemons.py)."""
    from testbed.daemons import key_path, write_host_configs

    try:
        cfgs = write_host_configs(tb)
    except BaseException:
        tb.down()
        raise
    print(f"  key {key_path(tb)}, daemon configs {cfgs[tb.hosts[0]].parent}/h*.toml: "
          f"braid testbed daemons up")


def cmd_down(a: argparse.Namespace) -> int:
    from testbed.fabric import down_by_name

    if a.all:
        names = list_names(DEFAULT_RUN_ROOT)
    elif a.name:
        names = [a.name]
    else:
        names = list_names(DEFAULT_RUN_ROOT)
        if len(names) > 1:
            raise UserError(f"several testbeds are up ({', '.join(names)}); "
                            "pass --name or --all")
    if not names:
        print("no testbed is up")
    for name in names:
        print(f"testbed {name}: {'removed' if down_by_name(name) else 'not found'}")
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    from testbed.daemons import status as daemon_status
    from testbed.fabric import Testbed

    names = [a.name] if a.name else list_names(DEFAULT_RUN_ROOT)
    if not names:
        print("no testbed is up")
        return 0
    for name in names:
        tb = Testbed.attach(name)
        stats = tb.port_stats()
        if a.json:
            print(json.dumps({"name": name, "status": tb.state.data["status"],
                              "hosts": {h: [tb.address(h, p) for p in tb.planes]
                                        for h in tb.hosts}, "ports": stats,
                              "daemons": daemon_status(tb)}, indent=1))
            continue
        print(f"testbed {name}: {tb.state.data['status']}, {tb.topo.kind}, "
              f"{len(tb.hosts)} hosts x {len(tb.planes)} planes, run dir {tb.run_dir}")
        daemons = daemon_status(tb)
        for h in tb.hosts:
            d = daemons.get(h)
            dtext = "" if d is None else (f"  daemon pid {d['pid']}" if d["alive"]
                                          else f"  daemon DEAD (log {d['log']})")
            print(f"  {h:4} ns {tb.netns(h):16} " + " ".join(
                f"p{p}={tb.address(h, p)}" for p in tb.planes) + dtext)
        for plane, alive in tb.elements_alive().items():
            if not alive:
                print(f"  WARNING: the link element of plane {plane} is not running "
                      f"(see {tb.element_files(plane)['log']}); its counters are stale")
        if stats:
            print(f"  {'port':18} {'element':9} {'state':9} {'rx':>8} {'fwd':>8} {'trim':>7} "
                  f"{'mark':>7} {'drop':>7} {'lost':>7} {'blackh':>7} {'maxdepth':>9}")
        for port, s in stats.items():
            state = "down" if s["down"] else ("lossy" if s["loss"] else "up")
            print(f"  {port:18} {s.get('element', 'userspace'):9} {state:9} {s['rx']:8} "
                  f"{s['sent']:8} {s['trimmed']:7} {s['marked']:7} {s['dropped']:7} "
                  f"{s['lost']:7} {s['blackholed']:7} {s['max_depth']:9}")
    return 0


def _argv(rest: list[str]) -> list[str]:
    return rest[1:] if rest and rest[0] == "--" else rest


def cmd_exec(a: argparse.Namespace) -> int:
    from testbed.fabric import Testbed

    argv = _argv(a.argv)
    if not argv:
        raise UserError("nothing to run: braid testbed exec HOST -- CMD ...")
    tb = Testbed.attach(_default_name(a.name))
    try:
        return tb.exec(a.host, argv, timeout=None).returncode
    except FileNotFoundError:
        raise UserError(f"command not found: {argv[0]}") from None


def cmd_fault(a: argparse.Namespace) -> int:
    from testbed.fabric import Testbed

    tb = Testbed.attach(_default_name(a.name))
    for line in tb.fault(" ".join(a.spec)):
        print(line)
    return 0


def run_args(a: argparse.Namespace) -> tuple[float, str | None, list[str]]:
    """(timeout, name, workload argv) of ``testbed run``: options given after the
    timeline (``run TL --timeout 150 -- CMD``) land in the remainder; take them
    out of it, up to ``--`` (without ``--``, only when the remainder starts with
    an option: ``run TL --timeout 5``)."""
    rest = list(a.argv)
    if "--" in rest:
        i = rest.index("--")
        opts, cmd = rest[:i], rest[i + 1:]
    elif rest and rest[0].startswith("-"):
        opts, cmd = rest, []
    else:
        opts, cmd = [], rest
    timeout, name = a.timeout, a.name
    if opts:
        p = argparse.ArgumentParser(prog="braid testbed run", add_help=False)
        p.add_argument("--timeout", type=float)
        p.add_argument("--name")
        try:
            ns, unknown = p.parse_known_args(opts)
        except SystemExit:
            raise UserError(f"bad options after the timeline: {' '.join(opts)} "
                            "(use: --timeout SECONDS, --name NAME)") from None
        if unknown:
            raise UserError(f"unknown option {unknown[0]!r} before '--' "
                            "(braid testbed run TIMELINE [--timeout S] [--name N] -- CMD...)")
        timeout = ns.timeout if ns.timeout is not None else timeout
        name = ns.name or name
    if timeout <= 0:
        raise UserError("--timeout must be positive")
    return timeout, name, cmd


def cmd_run(a: argparse.Namespace) -> int:
    from testbed.fabric import Testbed
    from testbed.faults import load_timeline, run_timeline

    timeout, name, argv = run_args(a)
    a.timeout = timeout
    tb = Testbed.attach(_default_name(name))
    events = load_timeline(a.timeline)
    proc = None
    if argv:
        env = {**os.environ, "BRAID_TESTBED": tb.name}
        try:
            proc = subprocess.Popen(argv, env=env)
        except FileNotFoundError:
            raise UserError(f"command not found: {argv[0]}") from None
    try:
        run_timeline(tb, events, workload=proc, echo=lambda s: print(s, flush=True),
                     timeout=a.timeout)
        if proc is None:
            return 0
        try:
            return proc.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"workload still running after {a.timeout}s: stopping it", file=sys.stderr)
            return 124
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cmd_daemons(a: argparse.Namespace) -> int:
    from testbed import daemons
    from testbed.fabric import Testbed

    tb = Testbed.attach(_default_name(a.name))
    hosts = a.hosts or None
    if a.action == "up":
        started = daemons.start_daemons(
            tb, hosts, qlog_dir=(tb.run_dir / daemons.HOSTS_DIR) if a.qlog else None)
        already = [h for h in (hosts or tb.hosts) if h not in started]
        for h, pid in started.items():
            print(f"{h}: daemon pid {pid}, socket {daemons.socket_path(tb, h)}")
        if already:
            print(f"already running: {' '.join(already)}")
        print(f"send: braid perf {tb.hosts[0]} {tb.hosts[-1]} --size 64MiB   "
              f"key log: {daemons.keylog_path(tb)}")
    elif a.action == "down":
        stopped = daemons.stop_daemons(tb, hosts)
        print(f"stopped: {' '.join(stopped)}" if stopped else "no daemon was running")
    else:
        st = daemons.status(tb)
        if not st:
            print("no daemons (braid testbed daemons up)")
        for h, d in st.items():
            print(f"{h}: {'running pid ' + str(d['pid']) if d['alive'] else 'DEAD'}  "
                  f"socket {d['socket']}  log {d['log']}")
    return 0
