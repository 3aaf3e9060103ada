"""``braid bench goodput``: Braid vs kernel TCP vs aioquic, one run, same payload.

Two network namespaces joined by one veth pair (created and removed here;
root only), or loopback (127.0.0.2 -> 127.0.0.3) when not root. Each side is
its own process (``python -m tools.bench.goodput worker ...``), so each
stack gets a core. Measured per stack: goodput (payload bytes / time from the
sender's start to the receiver's last byte), packets/s on the link (veth
counters, both directions: TCP's are TSO/GRO super-packets), and CPU seconds
per GB (user+system of both processes; softirq work outside them is not
counted).

- Braid: ``transport.aio.EndpointIO`` (the daemon's engine, without the
  control socket), AES-GCM on, 1 plane, 4 MiB messages, the daemon's
  connection defaults (``--spray-run`` overrides the spray granularity).
  ``braid`` uses 1368-byte payloads (1500-byte MTU), ``braid-jumbo`` 8888.
  ``braid-idle`` is ``braid`` with ``IDLE_CONNS`` more connections between
  the two hosts, established (one 1-byte message each) and then idle: a
  daemon after an all-to-all. Its ratio to ``braid`` in the same run is what
  idle connections cost a busy one.
- TCP: plain Python sockets, ``sendall`` of 1 MiB / ``recv_into``.
- aioquic: one stream, self-signed certificate, default congestion control.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HELP = "goodput of Braid vs kernel TCP vs aioquic between two namespaces"
STACKS = ("braid", "braid-jumbo", "braid-idle", "tcp", "quic")
NAME = "goodput"
#: ``--profile`` profiles a separate run; the table is still the unprofiled one's.
SAME_MEASUREMENT = ("profile",)
PORT = 4790


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _minflt() -> int:
    """Minor page faults of this process so far (memory the allocator gave
    back to the kernel and touched again shows up here)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


# -- workers (run inside a namespace) ------------------------------------------------------


#: Jumbo frames (AI fabrics commonly run 4K-9K MTUs): the veth MTU and the
#: Braid payload that fills it over IPv4 (20 IP + 8 UDP + 68 header + 16 tag).
JUMBO_MTU = 9000
JUMBO_PAYLOAD = JUMBO_MTU - 112
#: Idle connections beside the transfer in the ``braid-idle`` stack.
IDLE_CONNS = 16


def _braid_config(payload: int | None = None, spray_run: int | None = None) -> Any:
    from transport.config import ConnectionConfig, profile_values

    kw = profile_values("host")
    kw["planes"] = 1
    if payload:
        kw["payload_size"] = payload
    if spray_run:
        kw["spray_run"] = spray_run
    return ConnectionConfig(**kw)


async def _braid(role: str, me: str, peer: str, size: int, secret: bytes,
                 profile: str | None, payload: int | None = None,
                 spray_run: int | None = None, idle: int = 0) -> dict[str, Any]:
    from transport.aio import EndpointIO
    from transport.endpoint import Endpoint
    from transport.events import ConnectionFailed, MessageDelivered
    from transport.udp import PeerTable, PlaneAddr

    cfg = _braid_config(payload, spray_run)
    table = PeerTable(1, [PORT])
    table.add("peer", [PlaneAddr(peer, PORT)])
    done = asyncio.Event()
    got = [0]
    t_end = [0.0]
    failed: list[str] = []

    def on_event(conn: Any, p: Any, ev: Any) -> None:
        if isinstance(ev, MessageDelivered):
            got[0] += len(ev.data)
            if got[0] >= size + idle:  # the idle connections' 1-byte messages too
                t_end[0] = time.monotonic()
                done.set()
        elif isinstance(ev, ConnectionFailed):
            failed.append(ev.reason)
            done.set()

    ep = Endpoint(config=cfg, secret=secret, accept=role == "rx")
    eio = EndpointIO(ep, [PlaneAddr(me, PORT)], table, on_event=on_event)
    eio.open()
    cpu0 = _cpu()
    flt0 = _minflt()
    # CPU time, not wall time: on a shared machine a system call that wakes
    # the peer is often preempted, and wall time would charge that to it.
    prof = cProfile.Profile(time.process_time) if profile else None
    try:
        if role == "rx":
            _emit({"ready": True})
            if prof is not None:
                prof.enable()
            await asyncio.wait_for(done.wait(), 600)
            if prof is not None:
                prof.disable()
                _write_profile(prof, profile)
            return {"bytes": got[0], "t_end": t_end[0], "cpu": _cpu() - cpu0,
                    "minflt": _minflt() - flt0, "failed": failed, "io": eio.stats()}
        chunk = 4 << 20
        block = os.urandom(chunk)
        others = [eio.connect("peer") for _ in range(idle)]
        for c in others:
            c.send_message(b"i")
        eio.kick()
        for _ in range(2000):  # established and acknowledged, then idle (10 s at most)
            if all(not c.sender.has_pending or c.is_terminal for c in others):
                break
            await asyncio.sleep(0.005)
        if any(c.is_terminal or c.sender.has_pending for c in others):
            raise RuntimeError("an idle connection did not come up")
        if prof is not None:
            prof.enable()
        t0 = time.monotonic()
        conn = eio.connect("peer")
        for off in range(0, size, chunk):
            conn.send_message(block[: min(chunk, size - off)])
        eio.kick()
        while conn.sender.has_pending and not conn.is_terminal:
            await asyncio.sleep(0.005)
        if prof is not None:
            prof.disable()
            _write_profile(prof, profile)
        return {"t_start": t0, "cpu": _cpu() - cpu0, "minflt": _minflt() - flt0,
                "stats": conn.stats(),
                "failed": conn.failure_reason, "io": eio.stats()}
    finally:
        eio.close()


def _write_profile(prof: cProfile.Profile, path: str | None) -> None:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40)
    Path(str(path)).write_text(s.getvalue())
    prof.dump_stats(f"{path}.pstats")


def _tcp(role: str, me: str, peer: str, size: int) -> dict[str, Any]:
    import socket

    cpu0 = _cpu()
    if role == "rx":
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((me, PORT))
        srv.listen(1)
        _emit({"ready": True})
        c, _ = srv.accept()
        buf = bytearray(1 << 20)
        got = 0
        while got < size:
            n = c.recv_into(buf)
            if n == 0:
                break
            got += n
        t_end = time.monotonic()
        c.close()
        srv.close()
        return {"bytes": got, "t_end": t_end, "cpu": _cpu() - cpu0}
    s = socket.create_connection((peer, PORT))
    block = os.urandom(1 << 20)
    t0 = time.monotonic()
    sent = 0
    while sent < size:
        n = min(len(block), size - sent)
        s.sendall(block[:n] if n < len(block) else block)
        sent += n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    return {"t_start": t0, "cpu": _cpu() - cpu0}


def _cert(tmp: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "braid-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    cp, kp = tmp / "cert.pem", tmp / "key.pem"
    cp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    kp.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    return cp, kp


async def _quic(role: str, me: str, peer: str, size: int, tmp: Path) -> dict[str, Any]:
    from aioquic.asyncio import (  # type: ignore[attr-defined]
        QuicConnectionProtocol,
        connect,
        serve,
    )
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import StreamDataReceived

    cpu0 = _cpu()
    if role == "rx":
        cp, kp = _cert(tmp)
        done = asyncio.Event()
        state = {"got": 0, "t_end": 0.0}

        class Server(QuicConnectionProtocol):
            def quic_event_received(self, event: Any) -> None:
                if isinstance(event, StreamDataReceived):
                    state["got"] += len(event.data)
                    if event.end_stream:
                        state["t_end"] = time.monotonic()
                        self._quic.send_stream_data(event.stream_id, b"ok", end_stream=True)
                        self.transmit()
                        done.set()

        cfg = QuicConfiguration(is_client=False, alpn_protocols=["bench"],
                                max_data=1 << 30, max_stream_data=1 << 30)
        cfg.load_cert_chain(str(cp), str(kp))
        server = await serve(me, PORT, configuration=cfg, create_protocol=Server)
        _emit({"ready": True})
        await asyncio.wait_for(done.wait(), 900)
        await asyncio.sleep(0.2)
        server.close()
        return {"bytes": state["got"], "t_end": state["t_end"], "cpu": _cpu() - cpu0}
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["bench"], verify_mode=0,
                            max_data=1 << 30, max_stream_data=1 << 30)
    block = os.urandom(1 << 20)
    t0 = time.monotonic()
    async with connect(peer, PORT, configuration=cfg) as client:
        reader, writer = await client.create_stream()
        sent = 0
        while sent < size:
            n = min(len(block), size - sent)
            writer.write(block[:n])
            sent += n
            await writer.drain()
        writer.write_eof()
        await asyncio.wait_for(reader.read(), 900)
    return {"t_start": t0, "cpu": _cpu() - cpu0}


def worker(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_goodput worker")
    p.add_argument("stack", choices=list(STACKS))
    p.add_argument("role", choices=["tx", "rx"])
    p.add_argument("--me", required=True)
    p.add_argument("--peer", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--secret", default="00" * 32)
    p.add_argument("--tmp", default="/tmp")
    p.add_argument("--profile")
    p.add_argument("--spray-run", type=int)
    a = p.parse_args(argv)
    from transport.eventloop import new_event_loop

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        if a.stack.startswith("braid"):
            payload = JUMBO_PAYLOAD if a.stack == "braid-jumbo" else None
            idle = IDLE_CONNS if a.stack == "braid-idle" else 0
            res = loop.run_until_complete(_braid(a.role, a.me, a.peer, a.size,
                                                 bytes.fromhex(a.secret), a.profile, payload,
                                                 a.spray_run, idle))
        elif a.stack == "tcp":
            res = _tcp(a.role, a.me, a.peer, a.size)
        else:
            res = loop.run_until_complete(_quic(a.role, a.me, a.peer, a.size, Path(a.tmp)))
    finally:
        loop.close()
    _emit({"result": res})
    return 0


# -- orchestration -------------------------------------------------------------------------


class Net:
    """Two namespaces and one veth pair (root), or loopback."""

    def __init__(self) -> None:
        self.root = os.geteuid() == 0 and shutil.which("ip") is not None
        tag = os.getpid() % 100000
        self.ns = [f"bgA{tag}", f"bgB{tag}"]
        self.ifs = [f"bg{tag}a", f"bg{tag}b"]
        self.addrs = ["10.79.0.1", "10.79.0.2"] if self.root else ["127.0.0.2", "127.0.0.3"]
        self.made: list[str] = []

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    def up(self) -> None:
        if not self.root:
            return
        for n in self.ns:
            self._ip("netns", "add", n)
            self.made.append(n)
            self._ip("-n", n, "link", "set", "lo", "up")
        self._ip("-n", self.ns[0], "link", "add", self.ifs[0], "type", "veth", "peer", "name",
                 self.ifs[1])
        self._ip("-n", self.ns[0], "link", "set", self.ifs[1], "netns", self.ns[1])
        for n, i, a in zip(self.ns, self.ifs, self.addrs, strict=True):
            self._ip("-n", n, "addr", "add", f"{a}/24", "dev", i)
            # Jumbo-capable link; stacks choose their own datagram size
            # (Braid 1368-byte payloads unless braid-jumbo, QUIC ~1200-1500).
            self._ip("-n", n, "link", "set", i, "mtu", str(JUMBO_MTU))
            self._ip("-n", n, "link", "set", i, "up")

    def down(self) -> None:
        for n in self.made:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
        self.made.clear()

    def prefix(self, side: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns[side]] if self.root else []

    def packets(self) -> int:
        """tx packets of both link ends (loopback: of lo, shared with the host)."""
        total = 0
        for side in (0, 1) if self.root else (0,):
            ifname = self.ifs[side] if self.root else "lo"
            path = f"/sys/class/net/{ifname}/statistics/tx_packets"
            cmd = [*self.prefix(side), "cat", path]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
            total += int(out.strip() or 0)
        return total


def _run_pair(net: Net, stack: str, size: int, tmp: Path, profile: str | None,
              spray_run: int | None = None) -> dict[str, Any]:
    secret = os.urandom(32).hex()
    base = [sys.executable, "-m", "tools.bench.goodput", "worker", stack]
    common = ["--size", str(size), "--secret", secret, "--tmp", str(tmp)]
    if spray_run and stack.startswith("braid"):
        common += ["--spray-run", str(spray_run)]
    rx_extra = ["--profile", f"{profile}.rx"] if profile else []
    rx = subprocess.Popen([*net.prefix(1), *base, "rx", "--me", net.addrs[1], "--peer",
                           net.addrs[0], *common, *rx_extra], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    tx: subprocess.Popen[str] | None = None
    try:
        assert rx.stdout is not None
        line = rx.stdout.readline()
        if '"ready"' not in line:
            err = rx.stderr.read() if rx.stderr else ""
            raise RuntimeError(f"{stack} receiver did not start: {err[-800:]}")
        pk0 = net.packets()
        extra = ["--profile", profile] if profile else []
        tx = subprocess.Popen([*net.prefix(0), *base, "tx", "--me", net.addrs[0], "--peer",
                               net.addrs[1], *common, *extra], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        tout, terr = tx.communicate(timeout=900)
        rout, rerr = rx.communicate(timeout=120)
        pk1 = net.packets()
    finally:
        for pr in (rx, tx):
            if pr is not None and pr.poll() is None:
                pr.kill()
                pr.wait()
    try:
        t = json.loads(tout.strip().splitlines()[-1])["result"]
        r = json.loads(rout.strip().splitlines()[-1])["result"]
    except (IndexError, ValueError, KeyError):
        raise RuntimeError(f"{stack} failed: {terr[-800:]} {rerr[-800:]}") from None
    secs = r["t_end"] - t["t_start"]
    cpu = t["cpu"] + r["cpu"]
    return {
        "stack": stack, "bytes": r["bytes"], "complete": r["bytes"] >= size,
        "seconds": secs, "goodput_MBps": r["bytes"] / secs / 1e6,
        "packets": pk1 - pk0, "pps": (pk1 - pk0) / secs,
        "cpu_s": cpu, "cpu_s_per_GB": cpu / (r["bytes"] / 1e9),
        "cpu_tx_s": t["cpu"], "cpu_rx_s": r["cpu"],
        "minflt_tx": t.get("minflt"), "minflt_rx": r.get("minflt"),
        "detail": {k: v for k, v in t.items() if k in ("stats", "failed", "io")},
        "rx_io": r.get("io"),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", default=None, help="payload bytes per stack (default 256MiB, "
                        "--quick 32MiB)")
    parser.add_argument("--stacks", default="braid,braid-jumbo,tcp,quic",
                        help=f"comma-separated subset of {','.join(STACKS)} "
                        f"(braid-jumbo: {JUMBO_PAYLOAD}-byte payloads on the {JUMBO_MTU}-byte "
                        f"MTU link; braid-idle: braid beside {IDLE_CONNS} idle connections)")
    parser.add_argument("--spray-run", type=int, default=None, metavar="K",
                        help="Braid's spray granularity (packets in a row per EV, sent "
                        "as one UDP GSO batch); default: the daemon's")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the Braid sender; top functions in the results")


def run(args: argparse.Namespace) -> int:
    from tools.bench.common import environment, markdown_table, progress, text_table, write_results
    from tools.bench.common import git_commit as _commit
    from tools.cli.transfer import parse_size
    from tools.common.errors import UserError

    size = parse_size(args.size) if args.size else (32 << 20 if args.quick else 256 << 20)
    stacks = [s.strip() for s in args.stacks.split(",") if s.strip()]
    if not stacks or any(s not in STACKS for s in stacks):
        raise UserError(f"--stacks takes {', '.join(STACKS)}")
    net = Net()
    import tempfile

    results: dict[str, dict[str, Any]] = {}
    profile_text = ""
    budget_rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        try:
            net.up()
            for s in stacks:
                progress(f"{s}: {size} bytes {'between namespaces' if net.root else 'on loopback'}")
                results[s] = _run_pair(net, s, size, tmp, None, args.spray_run)
                progress(f"{s}: {results[s]['goodput_MBps']:.1f} MB/s")
            if args.profile and "braid" in stacks:
                # A separate run: the profiler roughly halves Braid's speed.
                prof = tmp / "braid.prof"
                progress("braid: profiled run (not in the table)")
                _run_pair(net, "braid", size, tmp, str(prof), args.spray_run)
                if prof.exists():
                    profile_text = ("sender:\n" + prof.read_text() + "\nreceiver:\n"
                                    + Path(f"{prof}.rx").read_text())
                    budget_rows = _budget(prof, results["braid"])
                    out_dir = Path(args.out or "results")
                    out_dir.mkdir(parents=True, exist_ok=True)
                    for side, src in (("tx", prof), ("rx", Path(f"{prof}.rx"))):
                        shutil.copy(f"{src}.pstats", out_dir / f"goodput-{side}.pstats")
        except RuntimeError as exc:
            raise UserError(str(exc)) from None
        finally:
            net.down()
    env = environment()

    def ratio(a: str, b: str) -> float | None:
        if a in results and b in results:
            return float(results[a]["goodput_MBps"] / results[b]["goodput_MBps"])
        return None

    ratios = {"braid_vs_quic": ratio("braid", "quic"), "braid_vs_tcp": ratio("braid", "tcp"),
              "braid_jumbo_vs_quic": ratio("braid-jumbo", "quic"),
              "braid_jumbo_vs_tcp": ratio("braid-jumbo", "tcp"),
              "braid_idle_vs_braid": ratio("braid-idle", "braid")}
    header = ["stack", "goodput MB/s", "Gbit/s", "packets/s", "CPU s/GB", "complete"]
    rows = [[s, f"{r['goodput_MBps']:.1f}", f"{r['goodput_MBps'] * 8 / 1000:.3f}",
             f"{r['pps']:,.0f}", f"{r['cpu_s_per_GB']:.1f}", str(r["complete"])]
            for s, r in results.items()]
    print(text_table(header, rows))
    for k, v in ratios.items():
        if v is not None:
            print(f"{k}: {v:.2f}x")
    if profile_text:
        print(profile_text)
    commit = _commit()
    budget_md = ""
    if budget_rows:
        from tools.bench.cpu_budget import markdown as budget_markdown

        budget_md = budget_markdown(budget_rows)
        print(budget_md)
    where = "two namespaces joined by one veth pair" if net.root else "loopback (not root)"
    rtxt = ", ".join(f"{k.replace('_', ' ')} {v:.2f}x" for k, v in ratios.items() if v)
    run_k = args.spray_run or _braid_config().spray_run
    md = (f"`braid bench goodput`: {size / (1 << 20):.0f} MiB per stack, {where}, each side its "
          f"own process. Braid = `EndpointIO` with AES-GCM, 1 plane, 4 MiB messages, "
          f"spray_run {run_k} (runs of {run_k} packets per EV, one GSO send each); TCP = "
          f"Python sockets; aioquic {_aioquic_version()} one stream. Ratios: {rtxt}. "
          f"Packets/s counts link packets in both directions (TCP's are TSO super-packets); "
          f"CPU is user+system of both processes.\n\n" + markdown_table(header, rows)
          + f"\n\nMeasured {env['time']} at commit {commit} on {env['machine']}, "
          f"{env['cpus']} CPUs, {env['system']}, Python {env['python']}.")
    data = {"bench": NAME, "size": size, "where": where, "environment": env,
            "results": results, "ratios": ratios, "profile": profile_text,
            "budget": budget_rows, "commit": commit}
    path = write_results(NAME, data, md, args.out, update_docs=bool(args.update_docs),
                         docs=args.docs)
    if budget_md and args.update_docs:
        from tools.bench.common import DEFAULT_DOCS, replace_section

        packets = results["braid"]["detail"]["stats"]["packets_sent"]
        replace_section(Path(args.docs) if args.docs else DEFAULT_DOCS, "goodput-budget",
                        f"CPU per Braid data packet (1500 MTU, {packets:,} packets), from "
                        f"`braid bench goodput --profile` (both ends profiled in a separate "
                        f"run; the last column scales each row's share to the unprofiled "
                        f"run's CPU per packet).\n\n{budget_md}\n\nMeasured {env['time']} at "
                        f"commit {commit}, shared 2-CPU machine.")
    progress(f"wrote {path}")
    return 0


def _budget(prof: Path, braid: dict[str, Any]) -> list[dict[str, object]]:
    from tools.bench.cpu_budget import budget

    packets = int(braid["detail"]["stats"]["packets_sent"])
    real = {"sender": braid["cpu_tx_s"] / packets * 1e6,
            "receiver": braid["cpu_rx_s"] / packets * 1e6}
    return budget(f"{prof}.pstats", f"{prof}.rx.pstats", packets, real)


def _aioquic_version() -> str:
    try:
        import aioquic

        return str(aioquic.__version__)
    except ImportError:
        return "(not installed)"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        sys.exit(worker(sys.argv[2:]))
    sys.exit("usage: braid bench goodput")
