"""Measure the link element's forwarding ceiling (packets/s) on this machine.

    sudo python -m testbed.bench_element [--size 100] [--count 200000]

Builds a 2-host, 1-plane testbed where only h1's link has an element (rate
unlimited), blasts UDP from h0 with several sender processes and reports how
many frames per second the element forwarded, from its own counters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from testbed.fabric import Testbed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.bench_element")
    ap.add_argument("--size", type=int, default=100, help="UDP payload bytes")
    ap.add_argument("--count", type=int, default=200_000, help="datagrams per sender")
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--window", type=float, default=1.0, help="measurement window, s")
    a = ap.parse_args(argv)
    spec = {"hosts": 2, "planes": 1,
            "link": {"buffer": "8MB", "h1:p0": {"element": True, "rate": 0}}}
    with Testbed.up(spec, name=f"bench{os.getpid() % 10000}") as tb:
        port = "h1:p0/down"
        t0 = time.monotonic()
        senders = [tb.popen("h0", [sys.executable, "-m", "testbed.udptool", "send", "--to",
                                   tb.address("h1", 0), "--count", str(a.count), "--size",
                                   str(a.size), "--port", "9"], stdout=subprocess.DEVNULL)
                   for _ in range(a.senders)]
        # Two snapshots of the element's own counters while the senders still run:
        # the rate between them is what the element forwards when offered more.
        time.sleep(0.7)
        first = json.loads((tb.run_dir / "elements" / "p0.stats.json").read_text())
        time.sleep(a.window)
        second = json.loads((tb.run_dir / "elements" / "p0.stats.json").read_text())
        running = all(s.poll() is None for s in senders)
        for s in senders:
            s.wait(timeout=300)
        t1 = time.monotonic()
        dt = second["time"] - first["time"]
        sent = second["ports"][port]["sent"] - first["ports"][port]["sent"]
        rx = second["ports"][port]["rx"] - first["ports"][port]["rx"]
        time.sleep(0.6)
        st = tb.port_stats()[port]
        result = {"size": a.size, "senders": a.senders,
                  "offered_pps": round(a.count * a.senders / (t1 - t0)),
                  "element_pps": round(sent / dt), "element_rx_pps": round(rx / dt),
                  "window_s": round(dt, 3), "senders_still_running": running,
                  "offered": a.count * a.senders, "element_rx_total": st["rx"],
                  "lost_before_element": a.count * a.senders - st["rx"],
                  "element_rx_overflow": st["rx_overflow"]}
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
