"""Memory of a real ``braid daemon`` under a flood of spoofed source addresses.

Runs as root: makes a scratch network namespace (loopback only), starts a
daemon in it on 127.0.0.1, and sends it ``--sources`` INIT datagrams, each from
a different spoofed 127.x.y.z source (raw socket, IP_HDRINCL), sealed under a
key the daemon does not have — what an off-path attacker can send. Paced
against the daemon's own receive counter so the kernel drops nothing.
Reports the daemon's resident memory (VmRSS) before and after, its peer-table
size and drop counters, as JSON (``--out``). The namespace and the daemon are
removed at the end, also on failure.

    python -m tools.robustness.spoof --sources 250000 --out results/spoof_memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyroute2 import netns

from testbed import nsutil
from transport.api import Client
from transport.config import ConnectionConfig
from transport.connection import Connection
from wire.keys import new_cluster_key, write_key_file

PORT = 4791


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _forged_init() -> bytes:
    """A well-formed INIT sealed under a key the daemon does not have."""
    conn = Connection.initiate(config=ConnectionConfig(planes=1), secret=new_cluster_key(),
                               local_cid=7, now=0.0)
    return conn.datagrams_to_send(0.0)[0][0]


def _packet(src: int, payload: bytes) -> bytes:
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0, 64, socket.IPPROTO_UDP, 0,
                     src.to_bytes(4, "big"), socket.inet_aton("127.0.0.1"))
    return ip + struct.pack("!HHHH", 40000, PORT, udp_len, 0) + payload


def _send_batch(start: int, count: int, payload: bytes) -> None:
    """Sources 127.1.0.0 + i (inside the namespace: loopback is all there is)."""
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        base = (127 << 24) | (1 << 16)
        for i in range(start, start + count):
            s.sendto(_packet(base + i, payload), ("127.0.0.1", 0))


async def _stats(sock: Path) -> dict[str, Any]:
    async with Client(str(sock)) as c:
        await c.open()
        return await c.stats()


def _control_clients(sock: Path, pid: int, n: int) -> dict[str, Any]:
    """RSS per idle control client (each did one stats request), and the cost
    of one client holding a 15 MiB unfinished line (the read-buffer bound)."""
    conns = []
    try:
        rss0 = _rss_kib(pid)
        for _ in range(n):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conns.append(c)
            c.connect(str(sock))
            c.sendall(b'{"cmd": "stats"}\n')
            c.settimeout(10)
            buf = b""
            while not buf.endswith(b"\n"):
                buf += c.recv(1 << 20)
        time.sleep(0.3)
        rss1 = _rss_kib(pid)
        big = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conns.append(big)
        big.connect(str(sock))
        big.sendall(b'{"cmd": "stats", "pad": "' + b"x" * (15 << 20))
        time.sleep(1.0)
        rss2 = _rss_kib(pid)
    finally:
        for c in conns:
            c.close()
    time.sleep(0.5)
    return {"idle_clients": n, "rss_kib_per_idle_client": round((rss1 - rss0) / n, 2),
            "partial_line_bytes": 15 << 20, "rss_kib_partial_line": rss2 - rss1,
            "rss_kib_after_all_left": _rss_kib(pid) - rss0}


def run(sources: int, batch: int = 5000) -> dict[str, Any]:
    ns = f"brspoof{os.getpid()}"
    netns.create(ns)
    proc: subprocess.Popen[bytes] | None = None
    tmp = Path(tempfile.mkdtemp(prefix="braid-spoof-"))
    try:
        with nsutil.open_netns(ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        write_key_file(tmp / "cluster.key", new_cluster_key())
        sock = tmp / "d.sock"
        (tmp / "d.toml").write_text(f'name = "victim"\nkey = "cluster.key"\nsocket = "{sock}"\n'
                                    f'planes = ["127.0.0.1:{PORT}"]\n')
        log = open(tmp / "d.log", "wb")  # noqa: SIM115
        proc = nsutil.popen(ns, [sys.executable, "-m", "tools.cli", "daemon", "--config",
                                 str(tmp / "d.toml")], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {(tmp / 'd.log').read_text()}")
            time.sleep(0.05)
        payload = _forged_init()

        def stats() -> dict[str, Any]:
            return asyncio.run(_stats(sock))

        def flood(start: int, count: int) -> None:
            for off in range(start, start + count, batch):
                n = min(batch, start + count - off)
                nsutil.run_in(ns, functools.partial(_send_batch, off, n, payload), timeout=120)
                t_end = time.monotonic() + 60
                while stats()["io"]["rx_datagrams"] < off + n - batch and \
                        time.monotonic() < t_end:
                    time.sleep(0.02)

        warm = 10_000  # first allocations (buffers, caches) are not per-source state
        flood(0, warm)
        time.sleep(0.5)
        rss0 = _rss_kib(proc.pid)
        t0 = time.monotonic()
        flood(warm, sources)
        t_end = time.monotonic() + 60
        while stats()["io"]["rx_datagrams"] < warm + sources and time.monotonic() < t_end:
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        time.sleep(0.5)
        rss1 = _rss_kib(proc.pid)
        st = stats()
        got = st["io"]["rx_datagrams"] - warm
        clients = _control_clients(sock, proc.pid, 200)
        return {
            "sources": sources, "received": got, "seconds": round(elapsed, 2),
            "rss_kib_before": rss0, "rss_kib_after": rss1, "rss_kib_delta": rss1 - rss0,
            "bytes_per_source": round((rss1 - rss0) * 1024 / max(got, 1), 2),
            "peer_table_entries": st["io"].get("peer_table"),
            "endpoint_drops": st["io"]["endpoint"]["drops"],
            "socket_drops": sum(p["rx_queue_drops"] for p in st["io"]["planes"]),
            "control_clients": clients,
            "date": time.strftime("%Y-%m-%d"),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], text=True,
                                     capture_output=True).stdout.strip(),
        }
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        netns.remove(ns)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", type=int, default=250_000)
    p.add_argument("--out", type=Path, help="write the JSON result here too")
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_spoof: needs root (a network namespace and a raw socket)", file=sys.stderr)
        return 2
    res = run(a.sources)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
