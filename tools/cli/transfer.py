"""``braid send`` / ``braid recv`` / ``braid stats``: clients of the local daemon."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tools.common.errors import UserError
from transport.api import BraidError, Client, decode_chunk, encode_chunk, socket_path_of

DEFAULT_SOCKET = os.environ.get("BRAID_SOCKET", "/run/braid/braid.sock")
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "ki": 1 << 10,
          "mi": 1 << 20, "gi": 1 << 30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4096, 64MiB, 1GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _target(parser: argparse.ArgumentParser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--socket", metavar="PATH",
                   help=f"daemon control socket (default: $BRAID_SOCKET or {DEFAULT_SOCKET})")
    g.add_argument("--config", metavar="FILE", help="take the socket path from a daemon config")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser("send", help="send bytes, a file or messages to a peer",
                              description="Send through the local daemon; prints goodput, "
                              "retransmissions, trims, NACKs and the per-plane share. Ctrl-C "
                              "stops it; the daemon then cancels what it had not started "
                              "sending.")
    s.add_argument("--to", required=True, metavar="PEER", help="peer name from the config")
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument("--size", type=parse_size, help="send N random bytes (e.g. 1GiB)")
    what.add_argument("--file", metavar="F", help="send a file")
    what.add_argument("--messages", type=int, metavar="N", help="send N messages")
    s.add_argument("--message-size", type=parse_size, default=4096, metavar="S",
                   help="size of each message with --messages (default 4096)")
    s.add_argument("--chunk", type=parse_size, default=4 << 20,
                   help="bytes per message for --size/--file (default 4MiB)")
    s.add_argument("--progress", action="store_true", help="progress bar even when not a tty")
    _target(s)
    s.set_defaults(func=run_send)

    r = subparsers.add_parser("recv", help="receive what peers send to this host",
                              description="Stream delivered messages from the local daemon, "
                              "place transfers by offset and verify their BLAKE2b digests. A "
                              "message leaves the daemon only once this client has it: what "
                              "was sent ahead to a receiver that exits goes to the next one.")
    r.add_argument("--out", metavar="DIR", help="write transfers here (default: verify only)")
    r.add_argument("--count", type=int, default=0,
                   help="exit after N complete transfers (default: run until stopped)")
    r.add_argument("--timeout", type=float, default=0.0,
                   help="give up after this many seconds (exit 1)")
    _target(r)
    r.set_defaults(func=run_recv)

    t = subparsers.add_parser("stats", help="per-plane / per-EV state of the daemon's connections")
    t.add_argument("--evs", action="store_true", help="one row per EV too")
    _target(t)
    t.set_defaults(func=run_stats)


def _socket(args: argparse.Namespace) -> str:
    try:
        return socket_path_of(args.config) if args.config else (args.socket or DEFAULT_SOCKET)
    except BraidError as exc:
        raise UserError(str(exc)) from None


def _run(coro: Any) -> Any:
    """Run a client coroutine. Ctrl-C cancels it (so it leaves the daemon
    cleanly: the daemon cancels what it had queued and not started), then
    surfaces as one KeyboardInterrupt: the CLI prints one line, no asyncio noise."""
    from transport.eventloop import new_event_loop

    loop = new_event_loop()
    task = loop.create_task(coro)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    except BraidError as exc:
        raise UserError(str(exc)) from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        rest = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in rest:
            t.cancel()
        if rest:
            loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done = total, enabled, 0
        self.t0 = time.monotonic()
        self._last = 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done >= self.total):
            self._last = now
            frac = self.done / self.total if self.total else 1.0
            bar = "#" * int(frac * 30)
            rate = self.done / max(now - self.t0, 1e-9)
            sys.stderr.write(f"\r[{bar:<30}] {frac * 100:5.1f}% {_fmt_bytes(self.done)} "
                             f"{_fmt_bytes(rate)}/s ")
            sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _conn_to(stats: dict[str, Any], peer: str) -> dict[str, Any] | None:
    for c in stats.get("connections", []):
        if c.get("peer") == peer and c.get("role") == "initiator":
            return dict(c)
    return None


def _counters(c: dict[str, Any] | None) -> dict[str, Any]:
    if c is None:
        return {}
    s = c["stats"]
    planes = {p["plane"]: p.get("sent", 0) for p in c["paths"].get("planes") or []}
    return {"retransmissions": s.get("retransmissions", 0),
            "nacks": s.get("nacks_received", 0),
            "trims": s.get("trims_fabric", 0) + s.get("trims_last_hop", 0),
            "packets": s.get("packets_sent", 0), "rtos": s.get("rtos", 0), "planes": planes}


async def _send(args: argparse.Namespace) -> dict[str, Any]:
    async with Client(_socket(args)) as client:
        await client.open()
        await client.connect_peer(args.to)
        before = _counters(_conn_to(await client.stats(), args.to))
        tid = secrets.randbits(63)
        if args.messages is not None:
            if args.messages < 1 or args.message_size < 1:
                raise UserError("--messages and --message-size must be positive")
            total, chunk, name = args.messages * args.message_size, args.message_size, ""
        elif args.file is not None:
            try:
                total = os.path.getsize(args.file)
                fobj = open(args.file, "rb")  # noqa: SIM115
            except OSError as exc:
                raise UserError(f"cannot read {args.file}: {exc.strerror}") from None
            chunk, name = args.chunk, Path(args.file).name
        else:
            total, chunk, name = args.size, args.chunk, ""
        if chunk < 1:
            raise UserError("--chunk must be positive")
        prog = _Progress(total, args.progress or sys.stderr.isatty())
        client.on_ack = lambda n: prog.add(max(n - 48 - len(name.encode()), 0))
        t0 = time.monotonic()
        futures: list[asyncio.Future[object]] = []
        off = 0
        pattern = os.urandom(min(chunk, 1 << 22)) if args.file is None else b""
        while off < total or (total == 0 and not futures):
            n = min(chunk, total - off)
            if args.file is not None:
                data = fobj.read(n)
                if len(data) != n:
                    raise UserError(f"{args.file} changed while being sent")
            else:
                # Distinct bytes per chunk (offset-keyed) so misplacement shows.
                data = (off.to_bytes(8, "big") + pattern)[:n] if n > 8 else pattern[:n]
            futures.append(await client.submit(args.to, encode_chunk(tid, off, total, name,
                                                                     data)))
            off += n
            if total == 0:
                break
        for f in futures:
            await f
        dt = time.monotonic() - t0
        prog.finish()
        if args.file is not None:
            fobj.close()
        after = _counters(_conn_to(await client.stats(), args.to))
    planes_b = before.get("planes", {})
    sent_planes = {p: v - planes_b.get(p, 0) for p, v in after.get("planes", {}).items()}
    tot = sum(sent_planes.values()) or 1
    return {
        "peer": args.to, "bytes": total, "messages": len(futures), "seconds": round(dt, 4),
        "goodput_MBps": round(total / dt / 1e6, 2) if dt > 0 else None,
        "goodput_Gbps": round(total * 8 / dt / 1e9, 3) if dt > 0 else None,
        **{k: after.get(k, 0) - before.get(k, 0)
           for k in ("packets", "retransmissions", "trims", "nacks", "rtos")},
        "plane_share": {str(p): round(v / tot, 4) for p, v in sorted(sent_planes.items())},
    }


def run_send(args: argparse.Namespace) -> int:
    res = _run(_send(args))
    if args.json:
        print(json.dumps(res))
    else:
        share = " ".join(f"p{p}={v * 100:.1f}%" for p, v in res["plane_share"].items())
        print(f"sent {_fmt_bytes(res['bytes'])} to {res['peer']} in {res['seconds']:.3f} s: "
              f"{res['goodput_MBps']} MB/s ({res['goodput_Gbps']} Gbit/s)\n"
              f"packets {res['packets']}  retransmissions {res['retransmissions']}  "
              f"trims {res['trims']}  NACKs {res['nacks']}  RTOs {res['rtos']}\n"
              f"per-plane share: {share or '-'}")
    return 0


class _Transfer:
    def __init__(self, tid: int, total: int, name: str, peer: str, out: Path | None) -> None:
        self.tid, self.total, self.name, self.peer = tid, total, name, peer
        self.got = 0
        self.bad = 0
        self.chunks = 0
        self.t0 = time.monotonic()
        self.path: Path | None = None
        self.fd: int | None = None
        if out is not None:
            safe = Path(name).name if name else f"transfer-{tid:016x}.bin"
            self.path = out / safe
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def summary(self) -> dict[str, Any]:
        dt = time.monotonic() - self.t0
        return {"peer": self.peer, "name": self.name, "transfer_id": self.tid,
                "bytes": self.got, "total": self.total, "chunks": self.chunks,
                "verified": self.bad == 0 and self.got == self.total, "bad_chunks": self.bad,
                "path": str(self.path) if self.path else None, "seconds": round(dt, 4)}


async def _recv(args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    out = Path(args.out) if args.out else None
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {out}: {exc.strerror}") from None
    transfers: dict[int, _Transfer] = {}
    done: list[dict[str, Any]] = []
    plain = 0
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    async with Client(_socket(args)) as client:
        await client.open()
        while not args.count or len(done) < args.count:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise UserError(f"timed out after {args.timeout} s "
                                f"({len(done)} transfers complete)")
            try:
                peer, msg = await asyncio.wait_for(client.recv(), wait)
            except TimeoutError:
                continue
            ch = decode_chunk(msg)
            if ch is None:
                plain += 1
                if out is not None:
                    (out / f"msg-{peer}-{plain}.bin").write_bytes(msg)
                if not args.json:
                    print(f"message from {peer}: {len(msg)} bytes")
                continue
            t = transfers.get(ch.transfer_id)
            if t is None:
                t = transfers[ch.transfer_id] = _Transfer(ch.transfer_id, ch.total, ch.name,
                                                          peer, out)
            t.chunks += 1
            if not ch.ok:
                t.bad += 1
            elif t.fd is not None:
                os.pwrite(t.fd, ch.data, ch.offset)
            t.got += len(ch.data)
            if t.got >= t.total:
                if t.fd is not None:
                    os.close(t.fd)
                del transfers[ch.transfer_id]
                s = t.summary()
                done.append(s)
                if args.json:
                    print(json.dumps(s), flush=True)
                else:
                    state = "verified" if s["verified"] else f"CORRUPT ({t.bad} bad chunks)"
                    dt = max(s["seconds"], 1e-9)
                    print(f"received {_fmt_bytes(t.got)} from {peer}"
                          f"{' as ' + str(t.path) if t.path else ''}: {state} "
                          f"({t.got / dt / 1e6:.1f} MB/s)", flush=True)
    return done, plain


def run_recv(args: argparse.Namespace) -> int:
    done, _ = _run(_recv(args))
    return 0 if all(d["verified"] for d in done) else 1


async def _stats(args: argparse.Namespace) -> dict[str, Any]:
    async with Client(_socket(args)) as client:
        await client.open()
        return await client.stats()


def _ms(v: object) -> str:
    return f"{float(v) * 1e3:.3f}" if isinstance(v, int | float) else "-"


def run_stats(args: argparse.Namespace) -> int:
    st = _run(_stats(args))
    if args.json:
        print(json.dumps(st))
        return 0
    from tools.bench.common import text_table

    io = st["io"]
    print(f"daemon {st['name']}  up {st['uptime']:.0f} s  encrypted={st['encrypted']}  "
          f"rx {io['rx_datagrams']} dgrams  tx {io['tx_datagrams']} dgrams  "
          f"drops {io['endpoint']['drops'] or '-'}  tx errors {io['tx_errors'] or '-'}")
    for pl in io["planes"]:
        print(f"  plane {pl['plane']} {pl['address']}  rcvbuf {pl['rcvbuf']}  "
              f"source ports {pl['source_ports']}  socket drops {pl['rx_queue_drops']}")
    qw = io.get("queue_wait")
    if qw:  # queue_wait = true: what this host's own delay adds to every RTT through it
        print(f"  socket-queue wait of {qw['reads']} reads: mean {qw['mean_us'] / 1e3:.3f} ms, "
              f"p50 <= {qw['p50_us'] / 1e3:.3f}, p99 <= {qw['p99_us'] / 1e3:.3f}, "
              f"max {qw['max_us'] / 1e3:.3f} ms")
    if not st["connections"]:
        print("no connections")
    for c in st["connections"]:
        s = c["stats"]
        print(f"\n{c['role']} to {c['peer']}: {s['state']}  cid {s['local_cid']}  "
              f"srtt {_ms(s['srtt'])} ms  cwnd {s['cwnd']}  sent {s['packets_sent']}  "
              f"retx {s['retransmissions']}  NACKs {s['nacks_received']}  "
              f"trims {s['trims_fabric'] + s['trims_last_hop']}  acked {s['bytes_acked']}  "
              f"received {s['bytes_received']}")
        from transport.sender import RECOVERY_KEYS

        rec = [s.get(k) for k in RECOVERY_KEYS]
        if any(rec):  # resent packets by first send to ack (transport/sender.py)
            print("  resent packets acked < 2 / 5 / 10 / 20 / 50 ms after their first send, "
                  f"and slower: {' / '.join(str(n) for n in rec)}  (slowest "
                  f"{_ms(s.get('slowest_recovery'))} ms, {s.get('slowest_recovery_sends')} "
                  "sends)")
        changes = {k[3:]: v for k, v in s.items() if k.startswith("ev_") and v}
        if changes:  # EV state changes by cause (docs/state-machines.md)
            print("  EV changes: " + "  ".join(f"{k} {v}" for k, v in changes.items()))
        planes = c["paths"].get("planes") or []
        total = sum(p.get("sent", 0) for p in planes) or 1
        rtts: dict[int, list[float]] = {}
        for ev in c["paths"].get("evs") or []:
            if isinstance(ev.get("srtt"), int | float):
                rtts.setdefault(ev["plane"], []).append(ev["srtt"])
        rows = [[str(p["plane"]), p["state"], f"{p.get('good', 0)}/{p['evs']}",
                 _ms(min(rtts[p["plane"]]) if rtts.get(p["plane"]) else None),
                 f"{p.get('sent', 0) / total * 100:.1f}%", str(p.get("sent", 0)),
                 str(p.get("ecn_marks", 0)), str(p.get("trims", 0)), str(p.get("losses", 0))]
                for p in planes]
        print(text_table(["plane", "state", "good EVs", "min srtt ms", "share", "sent", "ECN",
                          "trims", "losses"], rows))
        if args.evs:
            erows = [[str(e["plane"]), str(e["ev"]), e["state"], _ms(e.get("srtt")),
                      str(e["sent"]), str(e["acked"]), str(e["ecn_marks"]), str(e["trims"]),
                      str(e["losses"])] for e in c["paths"].get("evs") or []]
            print(text_table(["plane", "ev", "state", "srtt ms", "sent", "acked", "ECN",
                              "trims", "losses"], erows))
    return 0
