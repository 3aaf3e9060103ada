"""``braid bench element``: the eBPF switch port against the userspace element.

One run measures both (see ``testbed/bench_element.py`` for the method):
forwarding at 100 and 1400 bytes, CPU per forwarded packet, added one-way
delay unloaded, control- and data-class delay and the trim fraction under a
2x overload. Writes ``results/element.json``; ``--update-docs`` replaces the
section in docs/testbed.md. Needs root (it builds testbeds).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tools.bench.common import REPO_ROOT

NAME = "element"
HELP = "eBPF switch port vs userspace link element: packets/s, CPU/packet, delays, trims"
DOCS = "docs/testbed.md"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(docs_default=str(REPO_ROOT / "docs" / "testbed.md"))


def _f(x: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def run(args: argparse.Namespace) -> int:
    from testbed.bench_element import RATE, TRIM, run_all
    from tools.bench.common import (
        environment,
        git_commit,
        markdown_table,
        progress,
        text_table,
        write_results,
    )
    from tools.common.errors import UserError

    if os.geteuid() != 0:
        raise UserError("braid bench element builds testbeds: run it as root")
    progress("eBPF port, then the userspace element (about a minute)")
    data = run_all(bool(args.quick))
    env = environment()
    commit = git_commit()
    data.update({"bench": NAME, "environment": env, "commit": commit, "quick": args.quick,
                 "note": "shared 2-core machine: absolute numbers are noisy; compare the "
                         "two elements within one run"})
    res = data["results"]
    header = ["", "eBPF port", "userspace"]
    rows: list[list[str]] = []
    for i, size in enumerate((100, 1400)):
        rows.append([f"forwarded pkt/s, {size} B "
                     f"({res['ebpf']['throughput'][i]['sender']} senders)"]
                    + [_f(res[k]["throughput"][i]["forwarded_pps"]) for k in res])
        rows.append([f"  kernel drops before the element, {size} B"]
                    + [_f(res[k]["throughput"][i]["rx_overflow"]) for k in res])
        rows.append([f"CPU ns per forwarded packet, {size} B"]
                    + [_f(res[k]["throughput"][i]["cpu_ns_per_packet"]) for k in res])
    for q in ("p50_us", "p99_us", "max_us"):
        rows.append([f"added one-way delay unloaded, {q[:-3]} (us)"]
                    + [_f(res[k]["unloaded"]["added_us"][q], "{:.0f}") for k in res])
    for cls in ("control", "data"):
        for q in ("p50_us", "p99_us", "max_us"):
            rows.append([f"2x overload, {cls} class {q[:-3]} (us)"]
                        + [_f(res[k]["overload"][cls][q], "{:.0f}") for k in res])
    rows.append(["2x overload: data p50 / (K/R)"]
                + [_f(res[k]["overload"]["data_p50_over_K_R"], "{:.2f}") for k in res])
    rows.append(["overload measured at the port"]
                + [_f(res[k]["overload"]["offered_factor"], "{:.2f}x") for k in res])
    rows.append(["trim fraction (theory 1 - 1/overload; with header bytes)"]
                + [f"{res[k]['overload']['trim_fraction']:.3f} "
                   f"({res[k]['overload']['trim_theory']:.3f}; "
                   f"{res[k]['overload']['trim_theory_with_headers']:.3f})" for k in res])
    print(text_table(header, rows))
    r = data["ratios"]
    ratio_txt = (f"userspace CPU per packet / eBPF: {r['userspace_cpu_per_packet_over_ebpf'][0]}x "
                 f"(100 B), {r['userspace_cpu_per_packet_over_ebpf'][1]}x (1400 B)")
    print(ratio_txt)
    print("targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}"
                                  for k, v in data["targets"].items()))
    md = (f"`sudo braid bench element`{' --quick' if args.quick else ''}: commit {commit}, "
          f"{env['time'][:10]}, {env['cpus']} CPUs shared with other jobs ({env['system']}); "
          "both elements in one run, so compare columns, not absolute numbers. "
          f"Overloaded port: {RATE / 1e6:.0f} Mbit/s, K = {TRIM // 1024} KB "
          f"(K/R = {TRIM * 8 / RATE * 1e3:.2f} ms), fed at 2R through a tbf. "
          f"{ratio_txt}.\n\n" + markdown_table(header, rows))
    path = write_results(NAME, data, md, args.out, update_docs=bool(args.update_docs),
                         docs=args.docs or args.docs_default)
    progress(f"wrote {path}")
    return 0
