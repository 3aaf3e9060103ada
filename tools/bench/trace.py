"""``braid bench trace``: how fast the trace tools read a big capture, and in how much memory.

A synthetic capture of real Braid datagrams (``tools.trace.synth``: one
plaintext connection over four planes, with trims, NACKs, retransmissions,
SACKs) is written with the trace pcap writer; then each reader runs in a
fresh child process and is measured from outside: wall time and peak RSS
(``os.wait4``'s rusage of that child only).

Readers: ``braid trace stats``, ``braid trace decode`` (text to /dev/null),
``tshark -q -z io,stat,0`` (tshark reading frames, no Braid dissection), and
``tshark`` with the Braid Lua dissector printing ``braid.psn``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tools.bench.common as bench_common
from tools.trace.synth import write_synthetic

HELP = "trace tools: decode/stats packets/s and peak memory vs tshark on a 1M-packet pcap"
LUA = Path(__file__).resolve().parents[1] / "wireshark" / "braid.lua"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--packets", type=int, default=1_000_000,
                        help="packets in the synthetic capture (default 1,000,000)")
    parser.add_argument("--payload", type=int, default=64,
                        help="DATA payload bytes (default 64: keeps the file ~150 MB)")
    parser.add_argument("--pcap", type=Path, help="use (or create) this pcap, not a temp file")
    parser.add_argument("--no-tshark", action="store_true", help="skip the tshark baselines")


def _measure(argv: list[str]) -> dict[str, Any]:
    """Run argv with stdout to /dev/null; wall seconds and peak RSS of that child."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(argv, stdout=null, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        _pid, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {err.strip()[-400:]}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime}


def run(args: argparse.Namespace) -> int:
    packets = 100_000 if args.quick else args.packets
    tmp = None
    pcap = args.pcap
    if pcap is None:
        tmp = tempfile.TemporaryDirectory(prefix="braid-bench-trace-")
        pcap = Path(tmp.name) / "trace.pcap"
    try:
        if not pcap.exists():
            bench_common.progress(f"writing {packets:,} packets to {pcap}")
            t0 = time.perf_counter()
            packets = write_synthetic(pcap, packets, payload=args.payload)
            write_s = time.perf_counter() - t0
        else:
            write_s = None
            packets = sum(1 for _ in _frames(pcap))
        size = pcap.stat().st_size
        braid = [sys.executable, "-m", "tools.cli", "trace"]
        readers: dict[str, list[str]] = {
            "braid trace stats": [*braid, "stats", "--json", str(pcap)],
            "braid trace decode": [*braid, "decode", str(pcap)],
        }
        tshark = shutil.which("tshark")
        if tshark and not args.no_tshark:
            readers["tshark -z io,stat,0 (no dissector)"] = [
                tshark, "-n", "-q", "-r", str(pcap), "-z", "io,stat,0"]
            readers["tshark + braid.lua -e braid.psn"] = [
                tshark, "-n", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-T", "fields",
                "-e", "braid.psn"]
        results: dict[str, Any] = {}
        for name, argv in readers.items():
            bench_common.progress(f"{name} ...")
            m = _measure(argv)
            m["packets_per_s"] = packets / m["wall_s"]
            results[name] = m
    finally:
        if tmp is not None:
            tmp.cleanup()
    rows = [[name, f"{m['packets_per_s']:,.0f}", f"{m['wall_s']:.2f}", f"{m['peak_rss_mib']:.0f}"]
            for name, m in results.items()]
    header = ["reader", "packets/s", "wall s", "peak RSS MiB"]
    print(bench_common.text_table(header, rows))
    env = bench_common.environment()
    data = {"packets": packets, "pcap_bytes": size, "write_s": write_s,
            "readers": results, "environment": env}
    md = (f"`braid bench trace`: {packets:,} synthetic Braid packets ({size / 2**20:.0f} MiB "
          f"pcap, {args.payload}-byte payloads, 4 planes), each reader in a fresh process; "
          f"peak RSS from `wait4`. Python {env['python']}, {env['cpus']} CPUs, "
          f"{env['system']}.\n\n" + bench_common.markdown_table(header, rows))
    path = bench_common.write_results("trace", data, md, args.out,
                                      update_docs=args.update_docs, docs=args.docs)
    bench_common.progress(f"results in {path}")
    return 0


def _frames(pcap: Path) -> Any:
    from tools.trace.pcapio import open_capture

    return open_capture(pcap)
