"""Benchmark of the link element: the eBPF port against the userspace element.

    sudo braid bench element [--quick]          (or python -m testbed.bench_element)

For each element kind one testbed (3 hosts x 2 planes, single switch) where
only two links have an element:

* ``h1:p0`` unshaped: forwarding ceiling at 100- and 1400-byte datagrams
  (two ``sendmmsg`` blasters from h3, ``testbed/bench/blast.c`` compiled on
  the spot, or three Python senders where there is no C compiler; the port's own counters over a
  window while they still run) and CPU per forwarded packet; unloaded one-way
  delay of probes h3 -> h1 on plane 0 against plane 1 (no element): the
  difference is what the element adds;
* ``h2:p0`` down at ``RATE`` with trim threshold ``K``: 2x overload by
  Braid-like DATA from h0, smoothed to 2R by a tbf on h0's plain link, and
  meanwhile control-class (DSCP CONTROL) and data-class (DSCP DATA, not
  trimmable) probes from h3; trim fraction against 1 - 1/overload (the
  overload measured at the port), data-class delay against K/R.

One-way delays come from the receiver's kernel timestamp (SO_TIMESTAMPNS)
minus the wall-clock time the sender wrote into the probe, so a late wake-up
of the receiving process does not count; the sending side's scheduling does.
CPU per packet: for the eBPF port the programs' own run time (kernel
``BPF_ENABLE_STATS``), which leaves out the redirect's veth transmit; for the
userspace element the process's user+system time, which leaves out the
kernel's AF_PACKET delivery. Both are upper-bound-ish on a busy machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.fabric import Testbed

#: The overloaded port. Low enough that Python senders on a busy 2-core machine
#: keep a 2x overload going without pauses (a paused sender makes the arrivals
#: on/off and the port trims more than 1 - 1/overload).
RATE = 20_000_000
TRIM = 16 * 1024
BUFFER = 256 * 1024
FRAME_OVERHEAD = 14 + 20 + 8  # Ethernet + IPv4 + UDP
CTRL_PORT, DATA_PORT, SINK_PORT = 9100, 9101, 9
TOS_CONTROL, TOS_DATA = 46 << 2, 10 << 2


def spec() -> dict[str, Any]:
    return {"hosts": 4, "planes": 2,
            "link": {"buffer": "8MB",
                     "h1:p0": {"element": True},
                     # the overload's source: a plain veth shaped (tbf) at exactly 2R,
                     # so the port sees a smooth 2x overload, not Python's bursts
                     "h0:p0": {"up": {"rate": f"{2 * RATE}bit"}},
                     "h2:p0": {"element": True,
                               "down": {"rate": f"{RATE}bit", "trim": f"{TRIM}B",
                                        "buffer": f"{BUFFER}B"}}}}


def _py(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.udptool", *args]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary_us(delays_ns: list[int]) -> dict[str, Any]:
    us = [d / 1000 for d in delays_ns]
    return {"n": len(us), "p50_us": round(pct(us, 0.5), 1), "p99_us": round(pct(us, 0.99), 1),
            "max_us": round(max(us), 1) if us else None}


class Cpu:
    """CPU time the element spends on the ports of one link, by kind."""

    def __init__(self, tb: Testbed, link: str) -> None:
        self.tb = tb
        self.kind = tb.element_kind(link)
        self.plane = tb.topo.link(link).plane
        self.ids = tb.ebpf(self.plane).prog_ids() if self.kind == "ebpf" else []
        self.pid = next((o["pid"] for o in tb.state.objects("process")
                         if o.get("role") == "element" and o["plane"] == self.plane), None)

    def ns(self) -> int:
        if self.kind == "ebpf":
            from testbed.bpfsys import prog_run_time

            return sum(prog_run_time(i)[0] for i in self.ids)
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime + stime
        return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _port(tb: Testbed, name: str) -> dict[str, Any]:
    """Counters of one port with the (wall-clock) time they were read: the
    userspace element writes its stats file every 0.5 s and says when."""
    link = name.split("/")[0]
    if tb.element_kind(link) == "userspace":
        plane = tb.topo.link(link).plane
        data = json.loads(tb.element_files(plane)["stats"].read_text())
        return {**data["ports"][name], "time": data["time"]}
    return {**tb.port_stats()[name], "time": time.time()}


def _settle_stats(tb: Testbed) -> None:
    if tb.element_kind("h1:p0") == "userspace":
        time.sleep(0.6)  # its stats file is rewritten every 0.5 s


BLAST_SRC = Path(__file__).resolve().parent / "bench" / "blast.c"


def build_blaster(workdir: Path) -> Path | None:
    """Compile the sendmmsg blaster if a C compiler exists (else: Python senders)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    out = workdir / "blast"
    r = subprocess.run([cc, "-O2", "-o", str(out), str(BLAST_SRC)], capture_output=True,
                       timeout=120)
    return out if r.returncode == 0 else None


def throughput(tb: Testbed, size: int, senders: int, window: float,
               blaster: Path | None = None) -> dict[str, Any]:
    """Blast from h3 to h1 (plane 0) and count what the port forwards."""
    port = "h1:p0/down"
    cpu = Cpu(tb, "h1:p0")
    count = 3_000_000
    if blaster is not None:
        argvs = [[str(blaster), tb.address("h1", 0), str(SINK_PORT), str(size),
                  str(window + 3), str(20000 + k)] for k in range(senders)]
    else:
        argvs = [_py("send", "--to", tb.address("h1", 0), "--count", str(count),
                     "--size", str(size), "--port", str(SINK_PORT), "--sports",
                     f"{20000 + k}") for k in range(senders)]
    procs = [tb.popen("h3", argv, stdout=subprocess.DEVNULL) for argv in argvs]
    try:
        time.sleep(1.0)  # interpreters up, queues warm
        s0, c0, t0 = _port(tb, port), cpu.ns(), time.monotonic()
        time.sleep(window)
        s1, c1, t1 = _port(tb, port), cpu.ns(), time.monotonic()
        running = all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=10)
    dt = float(s1["time"] - s0["time"]) or (t1 - t0)
    sent = s1["sent"] - s0["sent"]
    rx = s1["rx"] - s0["rx"]
    return {"size": size, "senders": senders, "sender": "C sendmmsg" if blaster else "Python",
            "window_s": round(dt, 3),
            "forwarded_pps": round(sent / dt), "arrived_pps": round(rx / dt),
            "rx_overflow": s1.get("rx_overflow", 0) - s0.get("rx_overflow", 0),
            "cpu_ns_per_packet": round((c1 - c0) / max(sent, 1), 1),
            "cpu_share_of_a_core": round((c1 - c0) / 1e9 / (t1 - t0), 3),
            "senders_still_running": running}


def probes(tb: Testbed, dst: str, plane: int, classes: dict[str, tuple[int, int]], count: int,
           pps: int, load: list[list[str]] | None = None, settle: float = 0.0,
           source: str = "h0", hook: Callable[[], None] | None = None
           ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Send stamped probes per class (port, tos) to dst, optionally under load."""
    rxs = {c: tb.popen(dst, _py("recv", "--port", str(port), "--count", str(count),
                                "--timeout", str(count / pps + 15), "--idle", "3",
                                "--delays"), stdout=subprocess.PIPE, text=True)
           for c, (port, _tos) in classes.items()}
    loaders: list[subprocess.Popen[str]] = []
    out: dict[str, dict[str, Any]] = {}
    try:
        for rx in rxs.values():
            assert rx.stdout is not None
            json.loads(rx.stdout.readline())
        loaders = [tb.popen("h0", argv, stdout=subprocess.PIPE, text=True)
                   for argv in (load or [])]
        time.sleep(settle)
        if hook is not None:
            hook()  # the load runs: first snapshot
        senders = [tb.popen(source, _py("send", "--to", tb.address(dst, plane), "--count",
                                      str(count), "--size", "64", "--port", str(port),
                                      "--tos", hex(tos), "--pps", str(pps), "--stamp",
                                      "--sports", str(31000 + i)),
                            stdout=subprocess.DEVNULL)
                   for i, (port, tos) in enumerate(classes.values())]
        for s in senders:
            s.wait(timeout=count / pps + 60)
        if hook is not None:
            hook()  # the load still runs: second snapshot
        for c, rx in rxs.items():
            o = json.loads(rx.communicate(timeout=count / pps + 30)[0])
            out[c] = {**summary_us(o.get("delays_ns", [])), "received": o["packets"],
                      "sent": count}
        load_out = [json.loads(p.communicate(timeout=120)[0] or "{}") for p in loaders]
    finally:
        for p in [*rxs.values(), *loaders]:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out, load_out


def overload(tb: Testbed, seconds: float, factor: float = 2.0) -> dict[str, Any]:
    port = "h2:p0/down"
    size = 1400
    frame = size + FRAME_OVERHEAD
    pps = 1.15 * factor * RATE / 8 / frame  # a little above 2R: the tbf trims it to 2R
    count = int(pps * seconds)
    n_senders = 3
    load = [_py("send", "--to", tb.address("h2", 0), "--count", str(count // n_senders),
                "--size", str(size), "--braid", "--pps", f"{pps / n_senders:.1f}",
                "--sports", f"{40000 + k * 8}-{40000 + k * 8 + 7}",
                "--tos", hex(TOS_DATA)) for k in range(n_senders)]
    probe_pps = 400
    n_probes = int(probe_pps * (seconds - 1.5))
    snaps: list[dict[str, Any]] = []
    res, _load_out = probes(tb, "h2", 0, {"control": (CTRL_PORT, TOS_CONTROL),
                                           "data": (DATA_PORT, TOS_DATA)},
                            count=n_probes, pps=probe_pps, load=load,
                            settle=0.8, source="h3",
                            hook=lambda: snaps.append(_port(tb, port)))
    s0, s1 = snaps[0], snaps[-1]
    dt = float(s1["time"] - s0["time"])
    # the window spans the probes (both classes), which are small: count them apart
    rx = s1["rx"] - s0["rx"] - 2 * n_probes
    trimmed = s1["trimmed"] - s0["trimmed"]
    measured_factor = (rx * frame + 2 * n_probes * (64 + FRAME_OVERHEAD)) * 8 \
        / max(dt, 1e-9) / RATE
    k_over_r_us = TRIM * 8 / RATE * 1e6
    return {"rate_bps": RATE, "trim_bytes": TRIM, "K_over_R_us": round(k_over_r_us, 1),
            "offered_factor": round(measured_factor, 3),
            "port_rx": rx, "trimmed": trimmed, "dropped": s1["dropped"] - s0["dropped"],
            "trim_fraction": round(trimmed / rx, 4) if rx else None,
            "trim_theory": round(1 - 1 / measured_factor, 4) if measured_factor > 1 else 0.0,
            # the trimmed headers use link capacity too: (1 - 1/overload) / (1 - H/D)
            "trim_theory_with_headers": round((1 - 1 / measured_factor)
                                              / (1 - (56 + FRAME_OVERHEAD) / frame), 4)
            if measured_factor > 1 else 0.0,
            "control": res["control"], "data": res["data"],
            "data_p50_over_K_R": round(res["data"]["p50_us"] / k_over_r_us, 3)}


def bench_kind(kind: str, quick: bool, name: str, blaster: Path | None) -> dict[str, Any]:
    with Testbed.up(spec(), name=name, element=kind) as tb:
        assert tb.element_kind("h1:p0") == kind
        window = 1.0 if quick else 2.0
        out: dict[str, Any] = {"kind": kind, "throughput": [
            throughput(tb, size, senders=2 if blaster else 3, window=window, blaster=blaster)
            for size in (100, 1400)]}
        count = 500 if quick else 2000
        base, _ = probes(tb, "h1", 1, {"control": (CTRL_PORT, TOS_CONTROL)}, count, 500,
                         source="h3")
        elem, _ = probes(tb, "h1", 0, {"control": (CTRL_PORT, TOS_CONTROL)}, count, 500,
                         source="h3")
        b, e = base["control"], elem["control"]
        out["unloaded"] = {"without_element": b, "with_element": e, "added_us": {
            k: round(e[k] - b[k], 1) for k in ("p50_us", "p99_us", "max_us")}}
        out["overload"] = overload(tb, seconds=3.0 if quick else 5.0)
        return out


def run_all(quick: bool) -> dict[str, Any]:
    from testbed.bpfsys import enable_run_time_stats

    stats_fd = enable_run_time_stats()
    try:
        with tempfile.TemporaryDirectory() as td:
            blaster = build_blaster(Path(td))
            results = {kind: bench_kind(kind, quick, f"be{kind[0]}{os.getpid() % 10000}",
                                        blaster) for kind in ("ebpf", "userspace")}
    finally:
        os.close(stats_fd)
    e, u = results["ebpf"], results["userspace"]
    cpu_ratio = [round(ue["cpu_ns_per_packet"] / max(ee["cpu_ns_per_packet"], 1e-9), 1)
                 for ee, ue in zip(e["throughput"], u["throughput"], strict=True)]
    return {"results": results, "ratios": {
        "userspace_cpu_per_packet_over_ebpf": cpu_ratio,
        "ebpf_forwarded_over_userspace": [
            round(ee["forwarded_pps"] / max(ue["forwarded_pps"], 1), 2)
            for ee, ue in zip(e["throughput"], u["throughput"], strict=True)]},
        "targets": {
            "cpu_per_packet_le_tenth": all(r >= 10 for r in cpu_ratio),
            "control_p99_le_1ms": e["overload"]["control"]["p99_us"] <= 1000,
            "data_delay_within_20pct_of_K_R": abs(e["overload"]["data_p50_over_K_R"] - 1) <= 0.2,
        }}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m testbed.bench_element")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    print(json.dumps(run_all(a.quick), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
