"""``braid demo``: the README's first command.

Brings up examples/demo-4x4.toml (4 hosts x 4 planes, leaf-spine, trimming
ports), starts one ``braid daemon`` per endpoint host inside its namespace,
sends a transfer h0 -> h3 with ``braid send`` while a fault timeline kills a
plane and reboots a spine, then prints a report and writes a PNG and a JSON
report. Everything is torn down at the end (also on Ctrl-C or failure).
See docs/demo.md.
"""

from __future__ import annotations

import argparse

from tools.cli.transfer import parse_size
from tools.demo import DEFAULT_SIZE, QUICK_SIZE


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="one-command demo: 4x4 fabric, transfer h0->h3 through a plane kill and a "
             "spine reboot, report + PNG",
        description="Bring up a 4-host x 4-plane leaf-spine testbed with trimming switch "
        "ports, run a Braid transfer from h0 to h3 while a timeline kills plane 2 and "
        "reboots a spine, print a report (goodput timeline, per-plane share, trims, NACKs, "
        "retransmissions, longest delivery gap) and write demo.png + report.json. Needs root.",
    )
    p.add_argument("--size", type=parse_size, default=None,
                   help=f"bytes to transfer (default {DEFAULT_SIZE}; --quick: {QUICK_SIZE})")
    p.add_argument("--out", default="braid-demo-out", metavar="DIR",
                   help="where the report, PNG and logs go (default ./braid-demo-out)")
    p.add_argument("--quick", action="store_true",
                   help=f"smaller transfer ({QUICK_SIZE}) and a compressed fault timeline")
    p.add_argument("--keep", action="store_true",
                   help="leave the testbed and daemons up at the end (tear down later "
                        "with 'braid testbed down --name NAME')")
    p.add_argument("--timeline", metavar="FILE",
                   help="fault timeline (default examples/demo-timeline.toml; --quick uses "
                        "a compressed built-in one)")
    p.add_argument("--capture", action="store_true",
                   help="also capture the receiver's four plane interfaces to "
                        "OUT/<host>-p<P>.pcap (tcpdump, or the AF_PACKET writer) for "
                        "braid trace decode/stats/plot and Wireshark")
    p.add_argument("--name", default="demo", help="testbed name (default demo)")
    p.add_argument("--element", choices=("ebpf", "userspace"), default=None,
                   help="switch port implementation (default: the eBPF port where it "
                        "loads, else the userspace element)")
    p.add_argument("--timeout", type=float, default=None,
                   help="also give up on a transfer that is still progressing after this "
                        "many seconds (default: never; only --stall-timeout fails it)")
    p.add_argument("--stall-timeout", type=float, default=30.0, metavar="S",
                   help="fail when no byte is delivered for S seconds (default 30)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tools.demo.run import run_demo

    return run_demo(args)
