"""``braid bench paced``: CPU per byte at the rate a fabric allows, Braid vs kernel TCP.

At fabric rates (100 Mbit/s planes) each wakeup of a Braid process carries a
packet or two, so per-wakeup costs are paid in full; an unpaced benchmark
(``braid bench goodput``) does not show them. This one runs every stack in
the same run, one after another on the same testbed fabric (two hosts, one
switch per plane):

- ``shaped``: ``--planes`` planes (default 2) whose host ports are shaped to
  ``--rate`` Mbit/s each (default 100) by the eBPF switch ports, last-hop
  trim at 32 KB and ECN at 16 KB, as in the demo and claims fabrics;
- ``veth``: the same fabric unshaped (plain veths through the switch
  namespaces, rate unlimited).

Stacks: ``braid``: h0 -> h1 through the Braid daemons (``braid testbed
daemons``), one sender and one receiver client (each its own process, in
the root namespace, 256 KiB messages, 4 MiB unacknowledged, like ``braid
perf``); ``baseline``: the same with the daemons and clients of another
checkout (``--baseline-tree PATH``, run with ``PYTHONPATH=PATH``);
``inproc``: Braid with an in-process endpoint when ``braid.open`` exists
(skipped with the reason otherwise); ``tcp``: kernel TCP, one stream per
plane, each bound to its plane's addresses (the same bytes over the same
shaped planes); ``mptcp``: one kernel MPTCP connection with a subflow per
plane (skipped without kernel MPTCP); ``udp``: the datagram floor, what the
emulated fabric and the kernel's UDP path cost for datagrams like Braid's
with no transport around them (1,472-byte datagrams, one sender per plane
paced at 95% of ``--rate`` in UDP GSO batches of up to 8, segmented at the
host's NIC as Braid's are; a receiver that only counts). Each sends for ``--time`` seconds
from a common go; ``--rounds N`` runs the stacks N times in turn (load on
a shared machine drifts) and reports the median round's figures and the
worst round's worst cases. The clients are this file run as a script under
the stack's ``PYTHONPATH``: they need only ``transport.api.Client``
(``submit``, ``recv``, ``connect_peer``) of that tree.

Per stack: goodput (and its share of the planes' capacity); CPU seconds per
GB delivered of every process (``/proc/PID/stat`` utime+stime from go to the
receiver's last byte); the machine's busy share, its busy CPU-seconds per GB
(``/proc/stat``: softirq, the switch ports and everything else on the
machine count; busy is what was not idle, with the share no tick saw
beside it, tools/claims/cpu.py) and its softirq share; the daemons' wakeups per second and
datagrams per wakeup (``io.wakeups`` of ``braid stats``); the worst case
beside the median: the slowest 100 ms of delivery, the longest stretch
without any (10 ms resolution, after the first byte) and the busiest
second of the machine. ``/proc/stat`` is sampled every 100 ms; a stack
whose run had the machine >= 95% busy in more than 5% of the intervals is
flagged "CPU-saturated: figures measure the emulator" and no target
verdict is taken from it.

Targets (shaped fabric): Braid's CPU-s/GB (all its processes, both ends)
at most 1/5 of the baseline tree's; the machine's busy CPU per GB while
Braid fills the planes at most 1.5x kernel TCP's. Beside the second, the
same ratio with the datagram floor taken out of Braid's figure: on this
testbed the switches are namespaces on the same two cores and forward
every datagram Braid sends one by one, where kernel TCP hands them 64 KB
buffers; on real hardware neither costs the host anything. The floor
row measures that part, so Braid's own work can be judged apart from it
(docs/benchmarks.md, "The datagram floor"). Root only; the testbed is
removed at the end, also on failure and Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

HELP = "CPU per byte at paced fabric rates: Braid (daemons, baseline tree) vs kernel TCP"
NAME = "paced"
#: ``--rounds`` repeats the same runs (medians), ``--baseline-tree`` adds the
#: baseline stack beside them: the docs' run may use both.
SAME_MEASUREMENT = ("rounds", "baseline_tree")
STACKS = ("braid", "baseline", "inproc", "tcp", "mptcp", "udp")
IPPROTO_MPTCP = 262
FABRICS = ("shaped", "veth")
TCP_PORT = 5311
UDP_PORT = 5312
#: The datagram floor: payload bytes per datagram (a 1,514-byte frame at
#: MTU 1500, Braid's full-size DATA), datagrams per GSO send (Braid's host
#: profile sprays runs of 8), and the share of each plane's rate it is paced at.
UDP_PAYLOAD = 1472
UDP_GSO = 8
UDP_RATE_SHARE = 0.95
UDP_FRAME_OVERHEAD = 42  # Ethernet 14 + IPv4 20 + UDP 8
SOL_UDP = 17
UDP_SEGMENT = 103
CHUNK = 256 << 10
WINDOW = 4 << 20
#: Receive bins (seconds): the resolution of the longest stretch without delivery.
BIN = 0.01
#: A run is CPU-saturated when more than this share of its 100 ms intervals
#: had the machine at >= 95% busy (tools/claims/cpu.py ``SATURATED``).
SATURATED_RUN_SHARE = 0.05
SATURATED_FLAG = "CPU-saturated: figures measure the emulator"
SATURATED_BUSY = 0.95  # tools/claims/cpu.py SATURATED
#: Targets: Braid CPU-s/GB over the baseline tree's; machine busy CPU per GB
#: with Braid over kernel TCP's.
TARGET_VS_BASELINE = 0.2
TARGET_VS_TCP = 1.5
#: Seconds of the machine read with every process of a stack up and idle,
#: just before its go: the background load of a shared machine.
BACKGROUND_S = 1.0


# -- workers (``python -P tools/bench/paced.py worker SPEC``; stdlib only at import) ---------
# A worker runs under another tree's PYTHONPATH too (the baseline's clients), so
# it imports nothing from tools/ and only ``transport.api`` / ``braid`` from the tree.


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


class _Bins:
    """Bytes delivered per ``BIN`` seconds after go (the TCP receiver's
    threads share one, hence the lock)."""

    def __init__(self, go: float, seconds: float) -> None:
        self.go = go
        self.bins = [0] * (int(seconds / BIN) + 1)
        self.bytes = 0
        self.last = 0.0
        self.lock = threading.Lock()

    def add(self, n: int, now: float) -> None:
        i = int((now - self.go) / BIN)
        with self.lock:
            if 0 <= i < len(self.bins):
                self.bins[i] += n
            self.bytes += n
            self.last = max(self.last, now)


def _read_stdin_line() -> str:
    return sys.stdin.readline().strip()


async def _client_tx(c: Any, peer: str, seconds: float) -> dict[str, Any]:
    """Send ``CHUNK``-byte messages for ``seconds`` with at most ``WINDOW`` bytes
    unacknowledged; returns once every message is acknowledged."""
    block = os.urandom(CHUNK)
    go = time.monotonic()
    end = go + seconds
    inflight: deque[asyncio.Future[Any]] = deque()
    sent = acked = 0
    while time.monotonic() < end:
        fut = await c.submit(peer, block)
        inflight.append(fut)
        sent += CHUNK
        while inflight and (inflight[0].done() or sent - acked > WINDOW):
            await inflight.popleft()
            acked += CHUNK
    while inflight:
        await inflight.popleft()
        acked += CHUNK
    return {"sent": sent, "acked": acked, "t_go": go, "t_done": time.monotonic()}


async def _client_rx(c: Any, seconds: float) -> dict[str, Any]:
    """Receive until told ``stop N`` on stdin and N bytes are in (or 15 s after)."""
    loop = asyncio.get_running_loop()
    go = time.monotonic()
    bins = _Bins(go, seconds + 60)
    want: list[int] = []
    stop_at: list[float] = []

    async def recv() -> None:
        while True:
            _peer, data = await c.recv()
            bins.add(len(data), time.monotonic())

    async def stdin() -> None:
        line = await loop.run_in_executor(None, _read_stdin_line)
        want.append(int(line.split()[1]) if line.startswith("stop") else 0)
        stop_at.append(time.monotonic())

    tasks = [loop.create_task(recv()), loop.create_task(stdin())]
    try:
        for _ in range(10_000_000):  # bounded below by the deadline
            if tasks[0].done():
                tasks[0].result()  # the receive stream broke: raise its error
            if want and (bins.bytes >= want[0] or time.monotonic() > stop_at[0] + 15):
                break
            await asyncio.sleep(0.01)
    finally:
        tasks[0].cancel()
        with contextlib.suppress(BaseException):
            await tasks[0]
    return {"bytes": bins.bytes, "t_go": go, "t_last": bins.last, "bins": bins.bins,
            "expected": want[0] if want else None}


async def _open_braid(spec: dict[str, Any]) -> tuple[Any, Any]:
    """(client, closer): the daemon's control socket, or ``braid.open`` in-process."""
    if spec["kind"].startswith("inproc"):
        import braid

        # ``ep = await braid.open(config)``, or its ``async with`` form.
        ep = await braid.open(spec["config"])
        return ep, ep
    from transport.api import Client

    c = await Client(spec["socket"]).open()
    return c, c


async def _braid_worker(spec: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    c, closer = await _open_braid(spec)
    try:
        tx = spec["kind"].endswith("tx")
        if tx and hasattr(c, "connect_peer"):  # the handshake before the clock starts
            await c.connect_peer(spec["peer"])
        _emit({"ready": True, "pid": os.getpid()})
        await loop.run_in_executor(None, _read_stdin_line)  # go
        # In-process: this process is the host; its I/O counters are ours to read.
        own = spec["kind"].startswith("inproc") and hasattr(c, "stats")
        io0 = (await c.stats()).get("io") if own else None
        res = (await _client_tx(c, spec["peer"], spec["time"]) if tx
               else await _client_rx(c, spec["time"]))
        if own:
            res["io"] = [io0, (await c.stats()).get("io")]
        _emit({"result": res})
        await loop.run_in_executor(None, _read_stdin_line)  # exit
    finally:
        with contextlib.suppress(Exception):
            await closer.close()


def _tcp_worker(spec: dict[str, Any]) -> None:
    """One TCP stream per address: rx listens on each, tx binds each
    connection to its plane's address (the host routes it on that plane).
    ``proto`` 262: MPTCP (one address; the kernel adds the other planes'
    subflows)."""
    seconds = float(spec["time"])
    proto = int(spec.get("proto", 0))
    if spec["kind"] == "tcp-rx":
        srvs = []
        for a in spec["addrs"]:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((a, TCP_PORT))
            s.listen(1)
            srvs.append(s)
        _emit({"ready": True, "pid": os.getpid()})
        _read_stdin_line()  # go
        bins = _Bins(time.monotonic(), seconds + 60)

        def serve(srv: socket.socket) -> None:
            conn, _ = srv.accept()
            buf = bytearray(1 << 18)
            while (n := conn.recv_into(buf)) > 0:
                bins.add(n, time.monotonic())
            conn.close()

        threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in srvs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        _read_stdin_line()  # stop N (every stream has ended already)
        _emit({"result": {"bytes": bins.bytes, "t_go": bins.go, "t_last": bins.last,
                          "bins": bins.bins}})
        _read_stdin_line()  # exit
        return
    _emit({"ready": True, "pid": os.getpid()})
    _read_stdin_line()  # go
    go = time.monotonic()
    sent = [0] * len(spec["addrs"])
    block = os.urandom(CHUNK)

    def stream(i: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
        s.bind((spec["addrs"][i], 0))
        s.connect((spec["peer_addrs"][i], TCP_PORT))
        while time.monotonic() < go + seconds:
            s.sendall(block)
            sent[i] += CHUNK
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the receiver closes after the last byte
        s.close()

    threads = [threading.Thread(target=stream, args=(i,), daemon=True)
               for i in range(len(sent))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    _emit({"result": {"sent": sum(sent), "t_go": go, "t_done": time.monotonic()}})
    _read_stdin_line()  # exit


def _udp_worker(spec: dict[str, Any]) -> None:
    """The datagram floor. rx: a socket per plane address, a thread each,
    counting; tx: one pacing loop over the planes, each at ``rate`` bits/s
    of frames, in GSO sends of up to ``UDP_GSO`` datagrams."""
    seconds = float(spec["time"])
    if spec["kind"] == "udp-rx":
        socks = []
        for a in spec["addrs"]:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.bind((a, UDP_PORT))
            s.settimeout(0.05)
            socks.append(s)
        _emit({"ready": True, "pid": os.getpid()})
        _read_stdin_line()  # go
        bins = _Bins(time.monotonic(), seconds + 60)
        done = threading.Event()

        def serve(s: socket.socket) -> None:
            buf = bytearray(65536)
            while not done.is_set():
                try:
                    n = s.recv_into(buf)
                except TimeoutError:
                    continue
                bins.add(n, time.monotonic())

        threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in socks]
        for t in threads:
            t.start()
        line = _read_stdin_line()  # stop N
        want = int(line.split()[1]) if line.startswith("stop") else 0
        # What is still on its way: until N bytes are in, or 0.5 s without any.
        for _ in range(200):  # <= 10 s
            if bins.bytes >= want or time.monotonic() - max(bins.last, bins.go) > 0.5:
                break
            time.sleep(0.05)
        done.set()
        for t in threads:
            t.join(2)
        _emit({"result": {"bytes": bins.bytes, "t_go": bins.go, "t_last": bins.last,
                          "bins": bins.bins}})
        _read_stdin_line()  # exit
        return
    import struct

    socks = []
    for a, b in zip(spec["addrs"], spec["peer_addrs"], strict=True):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.bind((a, 0))
        s.connect((b, UDP_PORT))
        socks.append(s)
    block = os.urandom(UDP_PAYLOAD * UDP_GSO)
    seg = [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", UDP_PAYLOAD))]
    # Datagrams per second per plane: the frame rate the plane's shaper allows.
    pps = float(spec["rate"]) / 8 / (UDP_PAYLOAD + UDP_FRAME_OVERHEAD)
    _emit({"ready": True, "pid": os.getpid()})
    _read_stdin_line()  # go
    go = time.monotonic()
    sent = [0] * len(socks)  # datagrams per plane
    errors = 0
    while (now := time.monotonic()) < go + seconds:
        for i, s in enumerate(socks):
            due = int((now - go) * pps) - sent[i]
            while due > 0:
                k = min(due, UDP_GSO)
                try:
                    if k == 1:
                        s.send(block[:UDP_PAYLOAD])
                    else:
                        s.sendmsg([block[:k * UDP_PAYLOAD]], seg)
                except OSError:
                    errors += 1  # a full buffer: the floor sends on, as Braid would
                sent[i] += k
                due -= k
        time.sleep(0.0005)
    _emit({"result": {"sent": sum(sent) * UDP_PAYLOAD, "t_go": go, "t_done": time.monotonic(),
                      "send_errors": errors}})
    _read_stdin_line()  # exit


def worker(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    try:
        if spec["kind"].startswith("tcp"):
            _tcp_worker(spec)
        elif spec["kind"].startswith("udp"):
            _udp_worker(spec)
        else:
            # the daemons' and braid perf's loop (uvloop where installed); a
            # --baseline-tree may predate transport.eventloop
            import importlib
            make = asyncio.new_event_loop
            for mod in ("transport.eventloop", "transport.aio"):
                try:
                    make = importlib.import_module(mod).new_event_loop
                    break
                except (ImportError, AttributeError):
                    continue
            loop = make()
            try:
                loop.run_until_complete(_braid_worker(spec))
            finally:
                loop.close()
    except Exception as exc:  # reported to the orchestrator, which fails the stack
        _emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


# -- pure parts: metrics, saturation, report ------------------------------------------------


def delivery_worst(bins: list[int], seconds: float) -> dict[str, float | None]:
    """From ``BIN``-second delivery bins: the median and the slowest 100 ms
    (Mbit/s) over the full 100 ms windows of the sending time, and the
    longest stretch without delivery between the first and the last byte."""
    per = max(1, round(0.1 / BIN))
    n_full = int(seconds / 0.1)
    windows = [sum(bins[i * per:(i + 1) * per]) * 8 / 0.1 / 1e6 for i in range(n_full)
               if (i + 1) * per <= len(bins)]
    busy = [i for i, b in enumerate(bins) if b]
    gap = 0
    if busy:
        run = 0
        for b in bins[busy[0]:busy[-1] + 1]:
            run = run + 1 if b == 0 else 0
            gap = max(gap, run)
    steady = windows[1:] or windows  # the first 100 ms holds the start-up
    return {"median_100ms_mbit": round(statistics.median(steady), 1) if steady else None,
            "worst_100ms_mbit": round(min(steady), 1) if steady else None,
            "longest_gap_ms": round(gap * BIN * 1e3, 1) if busy else None}


def busiest_second(samples: list[float]) -> float | None:
    """The machine's busiest second (mean of 10 consecutive 100 ms samples)."""
    if not samples:
        return None
    k = min(10, len(samples))
    return round(max(sum(samples[i:i + k]) / k for i in range(len(samples) - k + 1)), 3)


def saturation(samples: list[float]) -> dict[str, Any]:
    """The run's saturation: the share of 100 ms intervals with the machine
    >= 95% busy, and whether that makes the run CPU-saturated."""
    from tools.claims.cpu import saturated_share

    share = saturated_share(samples)
    flagged = share is not None and share > SATURATED_RUN_SHARE
    return {"saturated_share": None if share is None else round(share, 3),
            "samples": len(samples), "cpu_saturated": flagged,
            "flag": SATURATED_FLAG if flagged else None}


def wakeup_figures(before: dict[str, Any], after: dict[str, Any], seconds: float
                   ) -> dict[str, Any]:
    """Per daemon (host -> ``io`` stats of ``braid stats``, before and after):
    wakeups/s and datagrams (rx + tx) per wakeup; None where the tree has no
    wakeup counter (``io.wakeups``)."""
    out: dict[str, Any] = {}
    tw = td = 0
    known = True
    for h in sorted(after):
        a, b = before.get(h) or {}, after[h] or {}
        dgrams = sum(int(b.get(k, 0)) - int(a.get(k, 0)) for k in ("rx_datagrams", "tx_datagrams"))
        wa, wb = a.get("wakeups"), b.get("wakeups")
        wk = (sum(wb.values()) - sum(wa.values())
              if isinstance(wa, dict) and isinstance(wb, dict) else None)
        sends = (int(b["tx_sends"]) - int(a.get("tx_sends", 0)) if "tx_sends" in b else None)
        sent = int(b.get("tx_datagrams", 0)) - int(a.get("tx_datagrams", 0))
        out[h] = {"datagrams": dgrams, "datagrams_per_s": round(dgrams / seconds, 1),
                  "tx_datagrams_per_send": round(sent / sends, 2) if sends else None,
                  "wakeups": wk, "wakeups_per_s": None if wk is None else round(wk / seconds, 1),
                  "datagrams_per_wakeup": round(dgrams / wk, 2) if wk else None,
                  "by_cause": ({k: int(wb[k]) - int(wa.get(k, 0)) for k in wb}
                               if isinstance(wb, dict) and isinstance(wa, dict) else None)}
        td += dgrams
        if wk is None:
            known = False
        else:
            tw += wk
    out["all"] = {"datagrams_per_s": round(td / seconds, 1),
                  "wakeups_per_s": round(tw / seconds, 1) if known else None,
                  "datagrams_per_wakeup": round(td / tw, 2) if known and tw else None}
    return out


def stack_figures(*, stack: str, rx: dict[str, Any], tx: dict[str, Any],
                  proc_s: dict[str, float], cpu: dict[str, float], samples: list[float],
                  seconds_sent: float, capacity_mbit: float | None,
                  braid_procs: list[str], background: float | None = None,
                  sys_s: dict[str, float] | None = None) -> dict[str, Any]:
    """One stack's figures from its workers' results, the per-process CPU
    seconds (name -> s), the machine's ``/proc/stat`` column deltas (CPU
    seconds, ``columns_between``) and the 100 ms busy samples. ``background``:
    the machine's busy share just before the run with the stack idle (other
    load on a shared machine); the machine's figures net of it are an
    estimate, as that load moves. ``sys_s``: each process's system share of
    its CPU seconds (system calls and the kernel work run on their way)."""
    delivered = int(rx.get("bytes", 0))
    wall = max(float(rx.get("t_last", 0.0)) - float(rx.get("t_go", 0.0)), 1e-9)
    gb = delivered / 1e9
    mbit = delivered * 8 / wall / 1e6 if delivered else 0.0
    per_gb = {k: round(v / gb, 2) if gb else None for k, v in proc_s.items()}
    total = cpu.get("total", 0.0)
    busy = cpu.get("busy", 0.0)
    braid_s = sum(v for k, v in proc_s.items() if k in braid_procs)
    return {
        "stack": stack, "bytes": delivered, "seconds": round(wall, 3),
        "goodput_mbit": round(mbit, 1),
        "capacity_share": round(mbit / capacity_mbit, 3) if capacity_mbit else None,
        "process_cpu_s": {k: round(v, 3) for k, v in proc_s.items()},
        "process_cpu_s_per_GB": per_gb,
        "process_system_share": {k: round(v / proc_s[k], 3) if proc_s.get(k) else None
                                 for k, v in (sys_s or {}).items()},
        "stack_cpu_s_per_GB": round(sum(proc_s.values()) / gb, 2) if gb else None,
        "braid_cpu_s_per_GB": (round(braid_s / gb, 2) if gb and braid_procs else None),
        "machine_busy": round(busy / total, 3) if total else None,
        "machine_busy_cpu_s": round(busy, 2),
        "machine_busy_cpu_s_per_GB": round(busy / gb, 2) if gb else None,
        "softirq_share": round(cpu.get("softirq", 0.0) / total, 3) if total else None,
        # Busy time no tick saw (interrupt work on idle CPUs), inside machine_busy.
        "unticked_share": round(cpu.get("unticked", 0.0) / total, 3) if total else None,
        "softirq_cpu_s_per_GB": round(cpu.get("softirq", 0.0) / gb, 2) if gb else None,
        "steal_share": round(cpu.get("steal", 0.0) / total, 3) if total else None,
        "background_busy": None if background is None else round(background, 3),
        # Not from a saturated background: "net" would then read 0 whatever ran.
        "machine_net_cpu_s_per_GB": (round(max(0.0, busy - background * total) / gb, 2)
                                     if gb and total and background is not None
                                     and background < SATURATED_BUSY else None),
        "busiest_second": busiest_second(samples),
        **delivery_worst(list(rx.get("bins", [])), seconds_sent),
        **saturation(samples),
    }


#: Across rounds each figure is the median, except the worst cases: the worst round's.
_WORST_OF_ROUNDS = {"worst_100ms_mbit": min, "longest_gap_ms": max, "busiest_second": max}


def merge_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One stack's figures over ``--rounds`` runs: the median of each figure
    (per process too), the worst round's worst cases, CPU-saturated when the
    median round was; every run is kept under ``runs``."""
    ok = [r for r in runs if not r.get("error") and not r.get("skipped")]
    if len(runs) == 1 or not ok:
        return runs[0]
    out = dict(ok[0])

    def nums(vals: list[Any]) -> bool:
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)

    for k, v in ok[0].items():
        vals: list[Any] = [r.get(k) for r in ok]
        if nums(vals):
            pick: Any = _WORST_OF_ROUNDS.get(k, statistics.median)
            out[k] = pick(vals)
        elif k in ("process_cpu_s", "process_cpu_s_per_GB") and isinstance(v, dict):
            out[k] = {p: statistics.median([r[k][p] for r in ok if r[k].get(p) is not None])
                      for p in v if any(r[k].get(p) is not None for r in ok)}
        elif k == "wakeups" and isinstance(v, dict):
            alls = [r[k]["all"] for r in ok]
            out[k] = {"all": {f: (statistics.median([a[f] for a in alls])
                                  if nums([a[f] for a in alls]) else None)
                              for f in alls[0]}}
    share = out.get("saturated_share")
    out["cpu_saturated"] = share is not None and share > SATURATED_RUN_SHARE
    out["flag"] = SATURATED_FLAG if out["cpu_saturated"] else None
    out["complete"] = all(r.get("complete") for r in ok)
    out["rounds"] = len(ok)
    out["runs"] = runs
    if len(ok) < len(runs):
        out["failed_rounds"] = [r.get("error") for r in runs if r.get("error")]
    return out


def verdicts(fabric: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets on one fabric's stacks: met / missed, or no verdict when a
    stack is missing, failed or CPU-saturated."""
    st = fabric.get("stacks", {})
    out = []

    def one(name: str, num: str, den: str, key: str, target: float) -> None:
        a, b = st.get(num), st.get(den)
        row: dict[str, Any] = {"target": name, "limit": target, "ratio": None, "verdict": None}
        if not a or not b or any(x.get("error") or x.get("skipped") for x in (a, b)):
            row["verdict"] = "no verdict: a stack did not run"
        elif a.get(key) is None or b.get(key) in (None, 0):
            row["verdict"] = "no verdict: no figure"
        else:
            row["ratio"] = round(a[key] / b[key], 3)
            row["values"] = {num: a[key], den: b[key]}
            if a.get("cpu_saturated") or b.get("cpu_saturated"):
                row["verdict"] = f"no verdict: {SATURATED_FLAG}"
            else:
                row["verdict"] = "met" if row["ratio"] <= target else "missed"
        out.append(row)

    one("Braid CPU-s/GB <= 1/5 of the baseline's", "braid", "baseline", "braid_cpu_s_per_GB",
        TARGET_VS_BASELINE)
    one("machine busy CPU/GB with Braid <= 1.5x kernel TCP's", "braid", "tcp",
        "machine_busy_cpu_s_per_GB", TARGET_VS_TCP)
    # The same with the datagram floor taken out: what Braid's own work
    # costs, beside what the emulated switches charge every datagram.
    key = "machine_busy_cpu_s_per_GB"
    for name in ("braid", "inproc"):
        a, f, t = st.get(name), st.get("udp"), st.get("tcp")
        if not a or a.get("skipped") or a.get("error"):
            continue
        row = {"target": f"machine busy CPU/GB with {'Braid' if name == 'braid' else 'inproc'}"
               " above the datagram floor <= 1.5x kernel TCP's", "limit": TARGET_VS_TCP,
               "ratio": None, "verdict": None, "floor": True}
        if not f or not t or any(x.get("error") or x.get("skipped") for x in (f, t)):
            row["verdict"] = "no verdict: a stack did not run"
        elif None in (a.get(key), f.get(key)) or not t.get(key):
            row["verdict"] = "no verdict: no figure"
        elif not f.get("complete"):
            row["verdict"] = "no verdict: the datagram floor lost more than 1% of its datagrams"
        else:
            net = max(a[key] - f[key], 0.0)
            ratio = round(net / t[key], 3)
            row["ratio"] = ratio
            row["values"] = {f"{name} - udp": round(net, 2), "tcp": t[key]}
            if any(x.get("cpu_saturated") for x in (a, f, t)):
                row["verdict"] = f"no verdict: {SATURATED_FLAG}"
            else:
                row["verdict"] = "met" if ratio <= TARGET_VS_TCP else "missed"
        out.append(row)
    return out


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


HEADER = ["stack", "Mbit/s", "of planes", "stack CPU-s/GB", "per process CPU-s/GB",
          "machine busy", "machine CPU-s/GB (net of background)", "softirq", "wakeups/s",
          "dgrams/wakeup", "worst 100 ms", "longest gap", "busiest s", "saturated"]


def table_rows(fabric: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, r in fabric.get("stacks", {}).items():
        if r.get("skipped") or r.get("error"):
            rows.append([name, "skipped" if r.get("skipped") else "FAILED",
                         *["-"] * (len(HEADER) - 2)])
            continue
        wk = (r.get("wakeups") or {}).get("all", {})
        sys_share = r.get("process_system_share") or {}
        procs = " / ".join(f"{k} {_f(v)}" + (f" (sys {sys_share[k]:.0%})"
                                              if sys_share.get(k) is not None else "")
                           for k, v in r["process_cpu_s_per_GB"].items())
        rows.append([
            name, _f(r["goodput_mbit"]), _f(r["capacity_share"], "{:.0%}"),
            _f(r["stack_cpu_s_per_GB"]), procs, _f(r["machine_busy"], "{:.0%}") + (
                f" (unticked {r['unticked_share']:.0%})" if r.get("unticked_share") else ""),
            _f(r["machine_busy_cpu_s_per_GB"]) + (
                f" (net {_f(r.get('machine_net_cpu_s_per_GB'))})"
                if r.get("machine_net_cpu_s_per_GB") is not None else ""),
            _f(r["softirq_share"], "{:.0%}"),
            _f(wk.get("wakeups_per_s"), "{:,.0f}"), _f(wk.get("datagrams_per_wakeup"), "{:.2f}"),
            _f(r["worst_100ms_mbit"]) + " Mbit/s", _f(r["longest_gap_ms"], "{:.0f}") + " ms",
            _f(r["busiest_second"], "{:.0%}"),
            _f(r["saturated_share"], "{:.0%}") + (" FLAG" if r["cpu_saturated"] else "")])
    return rows


def verdict_lines(fabric: dict[str, Any]) -> list[str]:
    out = []
    for v in fabric.get("verdicts", []):
        vals = " vs ".join(f"{k} {x:.1f}" for k, x in (v.get("values") or {}).items())
        out.append(f"{v['target']}: {vals + ', ' if vals else ''}ratio "
                   f"{_f(v['ratio'], '{:.2f}')} (target <= {v['limit']:g}) -> {v['verdict']}")
    return out


def skipped_lines(fabric: dict[str, Any]) -> list[str]:
    """Why a stack has no figures (skipped, or the error it failed with)."""
    return [f"{name}: {'skipped: ' + str(r['skipped']) if r.get('skipped') else r.get('error')}"
            for name, r in fabric.get("stacks", {}).items()
            if r.get("skipped") or r.get("error")]


# -- orchestration ---------------------------------------------------------------------------


def topology(fabric: str, planes: int, rate: int) -> dict[str, Any]:
    """Two hosts, one switch per plane; ``shaped``: eBPF ports at ``rate``
    Mbit/s with last-hop trim/ECN; ``veth``: nothing shaped."""
    spec: dict[str, Any] = {"hosts": 2, "planes": planes, "fabric": {"kind": "switch"},
                            "description": f"braid bench paced: 2 hosts x {planes} planes, "
                            f"{fabric}"}
    if fabric == "shaped":
        spec["link"] = {"rate": f"{rate}mbit", "buffer": "256KB", "mtu": 1500,
                        "element": "ebpf", "host": {"down": {"trim": "32KB", "ecn": "16KB"}}}
    else:
        spec["link"] = {"mtu": 1500}
    return spec


class _Worker:
    """A worker process with a line protocol on stdin/stdout and deadlines."""

    def __init__(self, proc: subprocess.Popen[bytes], label: str, errlog: Path) -> None:
        self.proc, self.label, self.errlog = proc, label, errlog
        self.buf = b""
        self.pid: int | None = None

    def line(self, deadline: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.label}: no answer in time ({self._tail()})")
            r, _, _ = select.select([fd], [], [], min(left, 0.5))
            if r:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"{self.label}: exited ({self._tail()})")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\n", 1)
        try:
            obj = json.loads(raw)
        except ValueError:
            return self.line(deadline)
        if "error" in obj:
            raise RuntimeError(f"{self.label}: {obj['error']}")
        return dict(obj)

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(text.encode() + b"\n")
            self.proc.stdin.flush()

    def _tail(self) -> str:
        try:
            lines = [x for x in self.errlog.read_text(errors="replace").splitlines() if x.strip()]
        except OSError:
            return "no stderr"
        return lines[-1][:300] if lines else "stderr empty"

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


def _daemon_io(sock: str) -> dict[str, Any] | None:
    """``io`` of a daemon's stats (this tree's client; the control protocol is shared)."""
    from transport.api import BraidError, Client

    async def get() -> dict[str, Any]:
        c = await asyncio.wait_for(Client(sock).open(), 5)
        try:
            return dict(await asyncio.wait_for(c.stats(), 5))
        finally:
            with contextlib.suppress(Exception):
                await c.close()

    try:
        st = asyncio.run(get())
    except (BraidError, OSError, TimeoutError):
        return None
    io = st.get("io")
    return dict(io) if isinstance(io, dict) else None


class Run:
    """One fabric: bring it up, run the stacks in turn, tear it down."""

    def __init__(self, args: argparse.Namespace, fabric: str, work: Path,
                 say: Any) -> None:
        self.args, self.fabric, self.work, self.say = args, fabric, work, say
        self.tb: Any = None
        self.workers: list[_Worker] = []

    def up(self) -> None:
        from testbed import Testbed

        name = f"pc{'s' if self.fabric == 'shaped' else 'v'}{os.getpid() % 100000}"
        self.tb = Testbed.up(topology(self.fabric, self.args.planes, self.args.rate), name=name)

    def down(self) -> None:
        for w in self.workers:
            w.kill()
        self.workers.clear()
        if self.tb is not None:
            from testbed import daemons

            with contextlib.suppress(Exception):
                daemons.stop_daemons(self.tb, grace=5)
            self.tb.down()
            self.tb = None

    def _mptcp_endpoints(self) -> None:
        """Every plane address of both hosts as a ``signal`` endpoint, as the
        claims fabric does: a connection opened on plane 0 gets a subflow on
        each other plane, each routed on its own plane."""
        n = str(2 * len(self.tb.planes))
        for h in ("h0", "h1"):
            cmds = [["flush"], ["limits", "set", "subflow", n, "add_addr_accepted", n]]
            cmds += [["endpoint", "add", self.tb.address(h, p), "dev", f"p{p}", "signal"]
                     for p in self.tb.planes]
            for c in cmds:
                argv = ["ip", "mptcp", *(["endpoint"] if c == ["flush"] else []), *c]
                r = self.tb.exec(h, argv, capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"{h}: {' '.join(argv)}: {r.stderr.strip()}")

    def _spawn(self, label: str, spec: dict[str, Any], tree: Path, host: str | None
               ) -> _Worker:
        argv = [sys.executable, "-P", str(Path(__file__).resolve()), "worker", json.dumps(spec)]
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
        err = self.work / f"{self.fabric}-{label}.err"
        with open(err, "wb") as ef:
            kw: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
                                  "stderr": ef, "env": env, "cwd": str(tree)}
            proc = (self.tb.popen(host, argv, **kw) if host is not None
                    else subprocess.Popen(argv, **kw))
        w = _Worker(proc, label, err)
        self.workers.append(w)
        return w

    def run_stack(self, stack: str, tree: Path) -> dict[str, Any]:
        from testbed import daemons
        from tools.claims import cpu as ccpu

        tb = self.tb
        secs = float(self.args.time)
        pids: dict[str, int] = {}
        braid_procs: list[str] = []
        socks: dict[str, str] = {}
        if stack in ("braid", "baseline"):
            started = daemons.start_daemons(tb, ["h0", "h1"], keylog=False, repo=tree)
            pids = {"tx daemon": started["h0"], "rx daemon": started["h1"]}
            socks = {h: str(daemons.socket_path(tb, h)) for h in ("h0", "h1")}
            rx = self._spawn(f"{stack}-rx", {"kind": "braid-rx", "socket": socks["h1"],
                                             "time": secs}, tree, None)
            tx = self._spawn(f"{stack}-tx", {"kind": "braid-tx", "socket": socks["h0"],
                                             "peer": "h1", "time": secs}, tree, None)
        elif stack == "inproc":
            daemons.write_host_configs(tb)
            rx = self._spawn("inproc-rx", {"kind": "inproc-rx", "time": secs, "config": str(
                daemons.config_path(tb, "h1"))}, tree, "h1")
            tx = self._spawn("inproc-tx", {"kind": "inproc-tx", "time": secs, "peer": "h1",
                                           "config": str(daemons.config_path(tb, "h0"))},
                             tree, "h0")
        elif stack == "udp":
            a0 = [tb.address("h0", p) for p in tb.planes]
            a1 = [tb.address("h1", p) for p in tb.planes]
            rate = UDP_RATE_SHARE * float(self.args.rate) * 1e6
            rx = self._spawn("udp-rx", {"kind": "udp-rx", "time": secs, "addrs": a1}, tree, "h1")
            tx = self._spawn("udp-tx", {"kind": "udp-tx", "time": secs, "addrs": a0,
                                        "peer_addrs": a1, "rate": rate}, tree, "h0")
        else:
            a0 = [tb.address("h0", p) for p in tb.planes]
            a1 = [tb.address("h1", p) for p in tb.planes]
            proto, listen = 0, a1
            if stack == "mptcp":
                self._mptcp_endpoints()
                # The listener on every address: a subflow joins at the address the
                # peer announced (ADD_ADDR), not at the one the connection opened on.
                a0, a1, listen, proto = a0[:1], a1[:1], ["0.0.0.0"], IPPROTO_MPTCP
            rx = self._spawn(f"{stack}-rx", {"kind": "tcp-rx", "time": secs, "addrs": listen,
                                             "proto": proto}, tree, "h1")
            tx = self._spawn(f"{stack}-tx", {"kind": "tcp-tx", "time": secs, "addrs": a0,
                                             "peer_addrs": a1, "proto": proto}, tree, "h0")
        ok = False
        try:
            deadline = time.monotonic() + 60
            for w in (rx, tx):
                w.pid = int(w.line(deadline)["pid"])
            client = "process" if stack in ("tcp", "mptcp", "udp") else "client"
            if stack == "inproc":
                client = "endpoint"
            pids[f"tx {client}"] = int(tx.pid or 0)
            pids[f"rx {client}"] = int(rx.pid or 0)
            if stack not in ("tcp", "mptcp", "udp"):
                braid_procs = list(pids)
            io0: dict[str, Any] = {h: _daemon_io(s) for h, s in socks.items()}
            b0 = ccpu.machine_columns()
            time.sleep(BACKGROUND_S)  # everything up and idle: what the rest of the machine does
            b1 = ccpu.machine_columns()
            p0 = {k: ccpu.process_seconds(p) for k, p in pids.items()}
            k0 = {k: ccpu.process_system_seconds(p) for k, p in pids.items()}
            m0 = ccpu.machine_columns()
            sampler = ccpu.Sampler().start()
            rx.say("go")
            tx.say("go")
            try:
                txr = tx.line(time.monotonic() + secs + 120)["result"]
                rx.say(f"stop {int(txr.get('acked', txr.get('sent', 0)))}")
                rxr = rx.line(time.monotonic() + 60)["result"]
            finally:
                samples = sampler.stop()
            p1 = {k: ccpu.process_seconds(p) for k, p in pids.items()}
            k1 = {k: ccpu.process_system_seconds(p) for k, p in pids.items()}
            m1 = ccpu.machine_columns()
            io1: dict[str, Any] = {h: _daemon_io(s) for h, s in socks.items()}
            for w in (rx, tx):
                w.say("exit")
            ok = True
        finally:
            for w in (rx, tx):
                if ok:  # interrupted or failed: no waiting
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        w.proc.wait(timeout=5)
                w.kill()
                self.workers.remove(w)
            if socks:
                daemons.stop_daemons(tb, ["h0", "h1"], grace=5 if ok else 1)
        proc_s = {k: max(0.0, (p1[k] or 0.0) - (p0[k] or 0.0)) for k in pids
                  if p0.get(k) is not None and p1.get(k) is not None}
        sys_s = {k: max(0.0, (k1[k] or 0.0) - (k0[k] or 0.0)) for k in proc_s
                 if k0.get(k) is not None and k1.get(k) is not None}
        cpu = ccpu.columns_between(m0, m1) if m0 and m1 else {}
        bg = ccpu.columns_between(b0, b1) if b0 and b1 else {}
        background = bg["busy"] / bg["total"] if bg.get("total") else None
        cap = None if self.fabric == "veth" else float(self.args.rate * self.args.planes)
        out = stack_figures(stack=stack, rx=rxr, tx=txr, proc_s=proc_s, cpu=cpu,
                            samples=samples, seconds_sent=secs, capacity_mbit=cap,
                            braid_procs=braid_procs, background=background, sys_s=sys_s)
        if stack == "inproc" and "io" in rxr and "io" in txr:
            io0 = {"h0": txr["io"][0], "h1": rxr["io"][0]}
            io1 = {"h0": txr["io"][1], "h1": rxr["io"][1]}
        if io1:
            wall = out["seconds"] or secs
            out["wakeups"] = wakeup_figures({h: v for h, v in io0.items() if v},
                                            {h: v for h, v in io1.items() if v}, wall)
        out["sent"] = txr.get("acked", txr.get("sent"))
        out["complete"] = out["bytes"] >= int(out["sent"] or 0) > 0
        if stack == "udp":  # datagrams: no retransmission, so delivery is what arrived
            lost = 1 - out["bytes"] / out["sent"] if out["sent"] else None
            out["lost_share"] = None if lost is None else round(max(lost, 0.0), 4)
            out["send_errors"] = txr.get("send_errors")
            out["complete"] = lost is not None and lost <= 0.01
        if stack == "baseline":
            out["tree"] = str(tree)
            out["tree_commit"] = _tree_commit(tree)
        return out


def _tree_commit(tree: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _mptcp_enabled() -> bool:
    try:
        return Path("/proc/sys/net/mptcp/enabled").read_text().strip() == "1"
    except OSError:
        return False


def _inproc_missing() -> str | None:
    try:
        import braid
    except ImportError as exc:
        return f"no braid package ({exc})"
    if not hasattr(braid, "open"):
        return "braid.open does not exist in this tree (no in-process endpoint)"
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=int, default=100, metavar="MBIT",
                        help="each plane's rate on the shaped fabric, Mbit/s (default 100)")
    parser.add_argument("--planes", type=int, default=2, metavar="N",
                        help="planes of both fabrics (default 2)")
    parser.add_argument("--time", type=float, default=None, metavar="S",
                        help="seconds each stack sends (default 10; --quick 2)")
    parser.add_argument("--fabrics", default=None,
                        help=f"comma-separated subset of {','.join(FABRICS)} "
                        "(default both; --quick: shaped)")
    parser.add_argument("--stacks", default=",".join(STACKS),
                        help=f"comma-separated subset of {','.join(STACKS)} (baseline needs "
                        "--baseline-tree; inproc needs braid.open)")
    parser.add_argument("--rounds", type=int, default=1, metavar="N",
                        help="run the stacks N times, alternating; each figure is the "
                        "median, each worst case the worst round's (default 1)")
    parser.add_argument("--baseline-tree", metavar="PATH",
                        help="another checkout of Braid whose daemons and clients run as the "
                        "'baseline' stack (PYTHONPATH=PATH)")


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

    if os.geteuid() != 0:
        raise UserError("braid bench paced builds a testbed: run it as root")
    if args.time is None:
        args.time = 2.0 if args.quick else 10.0
    if (not 0.5 <= args.time <= 600 or not 1 <= args.planes <= 8
            or not 1 <= args.rate <= 10000 or not 1 <= args.rounds <= 20):
        raise UserError("--time takes 0.5..600 s, --planes 1..8, --rate 1..10000 Mbit/s, "
                        "--rounds 1..20")
    fabrics = [f.strip() for f in (args.fabrics or ("shaped" if args.quick else
                                                   ",".join(FABRICS))).split(",") if f.strip()]
    stacks = [s.strip() for s in args.stacks.split(",") if s.strip()]
    if not fabrics or any(f not in FABRICS for f in fabrics):
        raise UserError(f"--fabrics takes {', '.join(FABRICS)}")
    if not stacks or any(s not in STACKS for s in stacks):
        raise UserError(f"--stacks takes {', '.join(STACKS)}")
    baseline = Path(args.baseline_tree).resolve() if args.baseline_tree else None
    if baseline is not None and not any(
            (baseline / "tools" / p).exists() for p in ("cli.py", "cli/__init__.py")):
        raise UserError(f"--baseline-tree {baseline}: not a checkout of Braid (no tools/cli)")
    here = Path(__file__).resolve().parents[2]
    t_start = time.monotonic()

    def say(msg: str) -> None:
        progress(f"{time.monotonic() - t_start:6.1f}s {msg}")

    me = os.getpid()

    def _interrupt(signum: int, _frame: Any) -> None:
        if os.getpid() != me:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    import tempfile

    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="braid-paced-") as td:
            for fabric in fabrics:
                r = Run(args, fabric, Path(td), say)
                fab: dict[str, Any] = {"stacks": {}}
                results[fabric] = fab
                try:
                    what = (f"{args.planes} planes x {args.rate} Mbit/s (eBPF ports)"
                            if fabric == "shaped" else f"{args.planes} planes, unshaped veths")
                    say(f"{fabric}: bringing up 2 hosts x {what}")
                    r.up()
                    runs: dict[str, list[dict[str, Any]]] = {}
                    for rnd in range(args.rounds):  # alternating: load drifts between them
                        for stack in stacks:
                            label = f" (round {rnd + 1}/{args.rounds})" if args.rounds > 1 else ""
                            runs.setdefault(stack, []).append(
                                _one(r, stack, here, baseline, say, label))
                    fab["stacks"] = {st: merge_rounds(v) for st, v in runs.items()}
                finally:
                    say(f"{fabric}: tearing down")
                    r.down()
                fab["verdicts"] = verdicts(fab)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    env = environment()
    commit = git_commit()
    for fabric, fab in results.items():
        print(f"\n{fabric}:")
        print(text_table(HEADER, table_rows(fab)))
        for line in skipped_lines(fab) + verdict_lines(fab):
            print(line)
    data = {"bench": NAME, "commit": commit, "environment": env, "rate_mbit": args.rate,
            "planes": args.planes, "time_s": args.time, "quick": bool(args.quick),
            "rounds": args.rounds,
            "baseline_tree": str(baseline) if baseline else None,
            "baseline_commit": _tree_commit(baseline) if baseline else None,
            "fabrics": results}
    out_dir = Path(args.out or "results")
    plot = _plot(results, out_dir / "paced.png")
    if plot is not None and args.update_docs:  # results/ is not committed: the docs' own copy
        import shutil

        from tools.bench.common import DEFAULT_DOCS

        docs_plot = (Path(args.docs) if args.docs else DEFAULT_DOCS).parent / "paced.png"
        shutil.copy(plot, docs_plot)
        plot = docs_plot
    md = _markdown(data, plot, args, markdown_table)
    path = write_results(NAME, data, md, out_dir, update_docs=bool(args.update_docs),
                         docs=args.docs)
    say(f"wrote {path}" + (f" and {plot}" if plot else ""))
    failed = [f"{f}/{s}" for f, fab in results.items() for s, r in fab["stacks"].items()
              if r.get("error")]
    if failed:
        print(f"braid bench paced: failed stacks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _one(r: Run, stack: str, here: Path, baseline: Path | None, say: Any,
         label: str = "") -> dict[str, Any]:
    if stack == "baseline" and baseline is None:
        say(f"{r.fabric}/baseline: skipped (no --baseline-tree)")
        return {"skipped": "no --baseline-tree"}
    if stack == "mptcp" and not _mptcp_enabled():
        say(f"{r.fabric}/mptcp: skipped: the kernel has no MPTCP (net.mptcp.enabled)")
        return {"skipped": "no kernel MPTCP"}
    if stack == "inproc":
        why = _inproc_missing()
        if why is not None:
            say(f"{r.fabric}/inproc: skipped: {why}")
            return {"skipped": why}
    say(f"{r.fabric}/{stack}: sending {r.args.time:g} s h0 -> h1{label}")
    from testbed.errors import TestbedError

    try:
        res = r.run_stack(stack, baseline if stack == "baseline" and baseline else here)
    except (RuntimeError, OSError, TestbedError) as exc:
        say(f"{r.fabric}/{stack}: FAILED: {exc}")
        return {"error": str(exc)}
    wk = (res.get("wakeups") or {}).get("all", {})
    say(f"{r.fabric}/{stack}: {res['goodput_mbit']:.1f} Mbit/s, stack "
        f"{_f(res['stack_cpu_s_per_GB'])} CPU-s/GB, machine {_f(res['machine_busy'], '{:.0%}')} "
        f"busy, {_f(res['machine_busy_cpu_s_per_GB'])} CPU-s/GB"
        + (f", {_f(wk.get('wakeups_per_s'), '{:,.0f}')} wakeups/s" if wk else "")
        + (f"; {SATURATED_FLAG}" if res["cpu_saturated"] else ""))
    return res


def _plot(results: dict[str, Any], path: Path) -> Path | None:
    """Per fabric, per stack: CPU-s/GB stacked by process, and the rest of
    the machine's busy CPU (kernel, switch ports, anything else) on top."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fabs = [(f, fab) for f, fab in results.items()
            if any(not r.get("error") and not r.get("skipped") for r in fab["stacks"].values())]
    if not fabs:
        return None
    fig, axes = plt.subplots(1, len(fabs), figsize=(max(7.0, 5.5 * len(fabs)), 4.2), squeeze=False)
    colours = {"tx daemon": "#1f77b4", "rx daemon": "#aec7e8", "tx client": "#ff7f0e",
               "rx client": "#ffbb78", "tx endpoint": "#2ca02c", "rx endpoint": "#98df8a",
               "tx process": "#9467bd", "rx process": "#c5b0d5", "rest of machine": "#c7c7c7"}
    for ax, (fabric, fab) in zip(axes[0], fabs, strict=True):
        names = [s for s, r in fab["stacks"].items() if not r.get("error") and not r.get("skipped")]
        seen: set[str] = set()
        for i, s in enumerate(names):
            r = fab["stacks"][s]
            bottom = 0.0
            parts = dict(r["process_cpu_s_per_GB"])
            rest = (r["machine_busy_cpu_s_per_GB"] or 0.0) - sum(v or 0.0 for v in parts.values())
            parts["rest of machine"] = max(0.0, rest)
            for k, v in parts.items():
                ax.bar(i, v or 0.0, bottom=bottom, color=colours.get(k, "#888888"),
                       label=None if k in seen else k, edgecolor="white", linewidth=0.5)
                seen.add(k)
                bottom += v or 0.0
            flag = " (sat.)" if r.get("cpu_saturated") else ""
            ax.text(i, bottom, f"{r['goodput_mbit']:.0f} Mbit/s{flag}", ha="center",
                    va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("CPU seconds per GB delivered")
        ax.set_title(f"{fabric}")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("braid bench paced: CPU-s per GB by process (grey: rest of the machine)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _markdown(data: dict[str, Any], plot: Path | None, args: argparse.Namespace,
              markdown_table: Any) -> str:
    env = data["environment"]
    n = data.get("rounds", 1)
    rounds = (f" ({n} rounds, alternating; each figure the median round's, each worst case "
              f"the worst round's)" if n > 1 else "")
    parts = [
        f"`braid bench paced`: two testbed hosts, {data['planes']} planes, one switch per "
        f"plane; `shaped` = host ports shaped to {data['rate_mbit']} Mbit/s per plane by the "
        f"eBPF switch ports (last-hop trim 32 KB, ECN 16 KB), `veth` = the same unshaped. "
        f"Each stack sends h0 -> h1 for {data['time_s']:g} s, one after another on the same "
        f"fabric{rounds}: `braid` (this tree's daemons + a sender and a receiver client, 256 KiB "
        f"messages), `baseline` (the same from the tree at commit "
        f"{data['baseline_commit'] or '-'}), `inproc` (Braid's endpoint in the sender's and "
        f"the receiver's own process, `braid.open`, when the tree has it), `tcp` (kernel TCP, "
        f"one stream per plane), `mptcp` (kernel MPTCP, one connection, a subflow per plane), "
        f"`udp` (the datagram floor: {UDP_PAYLOAD}-byte datagrams paced at "
        f"{UDP_RATE_SHARE:.0%} of each plane's rate in GSO sends of up to {UDP_GSO}, "
        f"segmented at the host's NIC like Braid's, to a receiver that only counts: what "
        f"the emulated switches and the kernel's UDP path cost with no transport around it). "
        f"CPU-s/GB = CPU seconds per GB delivered: per process from /proc/PID/stat, the "
        f"machine's busy CPU from /proc/stat (softirq, the switch ports and other load on "
        f"the machine included; busy = the time that passed less idle, iowait and steal, "
        f"with the share no scheduler tick saw, interrupt work on idle CPUs, as "
        f"'unticked'). Worst cases: slowest 100 ms of delivery, longest stretch "
        f"without delivery (10 ms bins; Braid delivers whole 256 KiB messages), busiest "
        f"second. A run with the machine >= 95% busy in more than 5% of its 100 ms "
        f"intervals is flagged ({SATURATED_FLAG}) and gives no verdict."]
    for fabric, fab in data["fabrics"].items():
        parts.append(f"**{fabric}**\n\n" + markdown_table(HEADER, table_rows(fab)))
        if skipped_lines(fab):
            parts.append("Not run: " + "; ".join(skipped_lines(fab)) + ".")
        lines = verdict_lines(fab)
        if lines and fabric == "shaped":
            parts.append("Targets: " + "; ".join(lines) + ".")
    if plot is not None:
        parts.append(f"![CPU per GB by process]({_rel_plot(plot, args)})")
    parts.append(f"Measured {env['time']} at commit {data['commit']} on {env['machine']}, "
                 f"{env['cpus']} CPUs, {env['system']}, Python {env['python']} "
                 f"(a shared machine: other work ran beside it; see the saturated column).")
    return "\n\n".join(parts)


def _rel_plot(plot: Path, args: argparse.Namespace) -> str:
    from tools.bench.common import DEFAULT_DOCS

    docs = Path(args.docs) if args.docs else DEFAULT_DOCS
    try:
        return os.path.relpath(plot.resolve(), docs.resolve().parent)
    except ValueError:
        return str(plot)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        sys.exit(worker(sys.argv[2:]))
    sys.exit("usage: braid bench paced")
