"""One testbed host's side of a claims run: ``python -m tools.claims.worker SPEC``.

SPEC is JSON (see ``tools.claims.fabric.worker_spec``). The worker opens its
stack (Braid: the local daemon through ``braid.connect``; ``braid-inproc``:
the host's endpoint in this process, ``braid.open`` on the host config
next to the daemon's socket, with no daemon running; tcp / mptcp: one
kernel connection per host pair, bound to the pair's plane), prints
``{"ready": true}``, waits for ``go T`` on stdin (T on CLOCK_MONOTONIC, which
every namespace of the machine shares, so all hosts start together and their
timestamps compare), runs its pattern and prints ``{"result": ...}``.

Patterns:

* ``alltoall``: each step every host of the group sends ``size`` bytes to
  every other host; the step is done on a host when it holds the step's
  messages from all others. Hosts never wait for a barrier: the data
  dependency is the barrier, as in a synchronous collective.
* ``ring``: ring all-reduce over the group, ``2 (N-1)`` phases of
  ``size / N`` bytes to the right neighbour, each phase waiting for the left
  neighbour's chunk.
* ``stream``: flows ``out`` of 64 KiB messages from ``start`` to ``stop``
  seconds after go; received bytes are binned per 10 ms per source.

The group leader ends the collective: its messages carry LAST once
``stop_after`` has passed, and every host forwards what it has seen, so all
hosts agree on the last step without a control channel. Every message is
``HEADER`` + a slice of a block derived from the run id, checked on arrival
(byte-exact or counted as bad). Every wait is bounded by ``deadline``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import struct
import sys
import time
from collections import deque
from typing import Any

HEADER = struct.Struct("!4sIHIHHI")  # magic, run, src, step, phase, flags, length
MAGIC = b"BRCL"
WARMUP = b"BRWU" + bytes(HEADER.size)  # not MAGIC: receivers count it as stale
LAST = 1
BIN = 0.01  # seconds per receive bin
IPPROTO_MPTCP = 262


def payload_offset(src: int, step: int, phase: int) -> int:
    return ((src * 131 + step * 31 + phase * 7) % 4096) * 16


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def _kernel_counters() -> dict[str, int]:
    """TCP segments sent and retransmitted, RTOs, and MPTCP-level
    retransmissions (data resent on another subflow) of this namespace
    (/proc is per netns)."""
    out: dict[str, int] = {}
    for path, want in (("/proc/net/snmp", {"Tcp:": ("RetransSegs", "OutSegs")}),
                       ("/proc/net/netstat", {"TcpExt:": ("TCPTimeouts",),
                                              "MPTcpExt:": ("MPTCPRetrans",)})):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            h, v = head.split(), vals.split()
            if h and h[0] in want:
                for k in want[h[0]]:
                    if k in h:
                        out[k] = int(v[h.index(k)])
    return out


class Worker:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.run = int(spec["run"])
        self.me = int(spec["me"])
        self.stack = str(spec["stack"])
        self.braid = self.stack.startswith("braid")
        self.pattern = str(spec["pattern"])
        self.size = int(spec.get("size", 0))
        self.msg = int(spec.get("msg", 65536))
        self.block = random.Random(self.run).randbytes(max(self.size, self.msg) + 65536 + 64)
        self.errors: list[str] = []
        self.bad = 0
        self.stale = 0
        self.ok_bytes = 0
        self.got: dict[tuple[int, int], set[int]] = {}
        self.last_seen: dict[int, bool] = {}
        self.changed = asyncio.Event()
        self.go = 0.0
        self.bins: dict[int, list[int]] = {}
        self.arrivals: dict[int, list[float]] = {}
        self.nbins = int((float(spec.get("duration", 0)) + float(spec.get("grace", 5))) / BIN) + 1
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.client: Any = None
        self.sent_msgs = 0
        self.closing = False
        self.finished = False  # our part of the run is over (late resets are not failures)
        self.base_stats: dict[int, dict[str, Any]] = {}
        self.tasks: list[asyncio.Future[None]] = []
        self.warmup_failures: list[str] = []
        self.blocked: list[int] = []
        self.cut = 0
        self.acked_bytes = 0

    # -- messages ---------------------------------------------------------------------------
    def message(self, step: int, phase: int, flags: int, n: int) -> bytes:
        off = payload_offset(self.me, step, phase)
        return HEADER.pack(MAGIC, self.run, self.me, step, phase, flags, n) + \
            self.block[off:off + n]

    def on_message(self, data: bytes | memoryview, now: float) -> None:
        if len(data) < HEADER.size:
            self.bad += 1
            return
        magic, run, src, step, phase, flags, n = HEADER.unpack_from(data)
        if magic != MAGIC or run != self.run:
            self.stale += 1  # an earlier run's message still in flight: not ours
            return
        off = payload_offset(src, step, phase)
        body = memoryview(data)[HEADER.size:]
        if len(body) != n or body != self.block[off:off + n]:
            self.bad += 1
            self.errors.append(f"corrupt message from h{src} step {step} phase {phase}")
            return
        self.ok_bytes += n
        if self.pattern == "stream":
            b = self.bins.setdefault(src, [0] * self.nbins)
            i = int((now - self.go) / BIN)
            if 0 <= i < self.nbins:
                b[i] += n
            arr = self.arrivals.setdefault(src, [])
            if len(arr) < 100_000:
                arr.append(round(now - self.go, 5))
            return
        self.got.setdefault((step, phase), set()).add(src)
        if flags & LAST:
            self.last_seen[step] = True
        self.changed.set()

    # -- transports --------------------------------------------------------------------------
    async def open(self) -> None:
        if self.braid:
            if self.stack == "braid-inproc":
                from pathlib import Path

                from transport.local import open_local

                cfg = self.spec.get("config") or str(Path(self.spec["socket"]).with_suffix(
                    ".toml"))
                self.client = await open_local(cfg)
            else:
                from transport.api import connect

                self.client = await connect(self.spec["socket"])
            self.tasks.append(asyncio.ensure_future(self._braid_rx()))
            for peer in self.spec.get("connect", []):
                await asyncio.wait_for(self.client.connect_peer(f"h{peer[0]}"), 20)
                # A connection idle for longer than idle_fail_timeout fails on
                # its next send (the liveness clock is not restarted when data
                # is queued after idleness: see docs/claims.md). Warm it up so
                # the run measures the row's claim; the failures are reported.
                for _ in range(2):
                    try:
                        fut = await self.client.submit(f"h{peer[0]}", WARMUP)
                        await asyncio.wait_for(fut, 10)
                        break
                    except Exception as exc:
                        self.warmup_failures.append(f"h{peer[0]}: {exc}")
            with contextlib.suppress(Exception):
                self.base_stats = await self.conn_stats()
            return
        await self._tcp_open()

    async def _braid_rx(self) -> None:
        try:
            while True:
                _peer, data = await self.client.recv()
                self.on_message(data, time.monotonic())
        except Exception as exc:  # the daemon went away: the run fails with the reason
            if not self.closing:
                self.errors.append(f"braid receive stream: {exc}")
            self.changed.set()

    async def _tcp_open(self) -> None:
        proto = IPPROTO_MPTCP if self.stack == "mptcp" else 0
        port = int(self.spec["port"])
        accept = set(self.spec.get("accept", []))
        accepted = asyncio.Event()
        if not accept:
            accepted.set()

        async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                (src,) = struct.unpack("!H", await r.readexactly(2))
            except (asyncio.IncompleteReadError, ConnectionError):
                w.close()
                return
            self.writers[src] = w
            if accept <= set(self.writers):
                accepted.set()
            await self._tcp_rx(r, src)

        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(64)
        ls.setblocking(False)
        self.server = await asyncio.start_server(on_conn, sock=ls)
        for peer, plane in self.spec.get("connect", []):
            dst = self.spec["addrs"][str(peer)][plane]
            src = self.spec["addrs"][str(self.me)][plane]
            for attempt in range(100):  # bounded: the peer's listener may start late
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
                s.setblocking(False)
                s.bind((src, 0))
                try:
                    await asyncio.wait_for(asyncio.get_running_loop().sock_connect(
                        s, (dst, port)), 5)
                    break
                except (OSError, TimeoutError):
                    s.close()
                    if attempt == 99:
                        raise
                    await asyncio.sleep(0.1)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            r, w = await asyncio.open_connection(sock=s)
            w.write(struct.pack("!H", self.me))
            self.writers[peer] = w
            self.tasks.append(asyncio.ensure_future(self._tcp_rx(r, peer)))
        await asyncio.wait_for(accepted.wait(), 30)

    async def _tcp_rx(self, r: asyncio.StreamReader, src: int) -> None:
        try:
            while True:
                head = await r.readexactly(HEADER.size)
                n = HEADER.unpack(head)[6]
                body = await r.readexactly(n)
                self.on_message(head + body, time.monotonic())
        except asyncio.IncompleteReadError as exc:
            if exc.partial and self.pattern == "stream":
                self.cut += 1  # the sender stopped a blocked flow at its stop time
            elif exc.partial:
                self.errors.append(f"connection from h{src} closed mid-message")
        except ConnectionError as exc:
            if not (self.closing or self.finished):
                self.errors.append(f"connection with h{src}: {exc}")
        self.changed.set()

    async def send(self, dst: int, data: bytes, until: float) -> Any:
        """Queue one message; Braid returns the ack future, TCP awaits buffer room."""
        self.sent_msgs += 1
        if self.braid:
            return await asyncio.wait_for(self.client.submit(f"h{dst}", data),
                                          max(0.05, until - time.monotonic()))
        w = self.writers[dst]
        w.write(data)
        await asyncio.wait_for(w.drain(), max(0.05, until - time.monotonic()))
        return None

    # -- patterns ----------------------------------------------------------------------------
    async def wait_for(self, key: tuple[int, int], srcs: set[int], deadline: float) -> bool:
        while not srcs <= self.got.get(key, set()):
            if self.errors or time.monotonic() > deadline:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(0.01, deadline - time.monotonic()))
        return True

    async def collective(self) -> dict[str, Any]:
        group = [int(h) for h in self.spec["group"]]
        leader = group[0] == self.me
        stop_at = self.go + float(self.spec["stop_after"])
        deadline = stop_at + float(self.spec.get("grace", 20))
        max_steps = int(self.spec.get("max_steps", 100000))
        done: list[float] = []
        starts: list[float] = []  # incast senders: when each burst was handed to the stack
        pending: deque[Any] = deque()
        others = [h for h in group if h != self.me]
        pos = group.index(self.me)
        right, left = group[(pos + 1) % len(group)], group[pos - 1]
        for step in range(max_steps):
            last = step == max_steps - 1 or (leader and time.monotonic() >= stop_at)
            if self.pattern == "incast":
                root = group[0]
                if self.me == root:
                    ok = await self.wait_for((step, 0), set(others), deadline)
                    for dst in others:  # the release: tiny, carries LAST
                        pending.append(await self.send(
                            dst, self.message(step, 1, LAST if last else 0, 16), deadline))
                else:
                    starts.append(time.monotonic())
                    pending.append(await self.send(root, self.message(step, 0, 0, self.size),
                                                   deadline))
                    ok = await self.wait_for((step, 1), {root}, deadline)
                    last = last or self.last_seen.get(step, False)
            elif self.pattern == "alltoall":
                flags = LAST if last else 0
                for dst in others:
                    pending.append(await self.send(dst, self.message(step, 0, flags, self.size),
                                                   deadline))
                ok = await self.wait_for((step, 0), set(others), deadline)
                last = last or self.last_seen.get(step, False)
            else:
                chunk = max(1, self.size // len(group))
                ok = True
                for phase in range(2 * (len(group) - 1)):
                    flags = LAST if last else 0
                    pending.append(await self.send(right, self.message(step, phase, flags, chunk),
                                                   deadline))
                    ok = await self.wait_for((step, phase), {left}, deadline)
                    if not ok:
                        break
                    last = last or self.last_seen.get(step, False)
            if not ok:
                if not self.errors:
                    self.errors.append(f"step {step}: not all data arrived by the deadline")
                break
            done.append(time.monotonic())
            while len(pending) > 256:
                await self._settle(pending.popleft(), deadline)
            if last:
                break
        while pending:
            await self._settle(pending.popleft(), deadline)
        return {"done": done, "starts": starts}

    async def _settle(self, fut: Any, deadline: float) -> None:
        if fut is None:
            return
        try:
            reply = await asyncio.wait_for(fut, max(0.05, deadline - time.monotonic()))
            self.acked_bytes += int(reply.get("bytes", 0)) if isinstance(reply, dict) else 0
        except TimeoutError:
            self.errors.append("a message was not acknowledged by the deadline")
        except Exception as exc:
            self.errors.append(f"send failed: {exc}")

    async def stream(self) -> dict[str, Any]:
        grace = float(self.spec.get("grace", 5))
        flows = self.spec.get("out", [])
        end = self.go + float(self.spec.get("duration", 0))

        async def flow(f: dict[str, Any]) -> None:
            dst, start, stop = int(f["to"]), self.go + f["start"], self.go + f["stop"]
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            pending: deque[Any] = deque()
            seq = 0
            while time.monotonic() < stop and not self.errors:
                try:
                    fut = await self.send(dst, self.message(seq, 0, 0, self.msg), stop)
                except TimeoutError:
                    self.blocked.append(dst)  # a TCP send blocked until the stop time
                    break
                seq += 1
                if fut is not None:
                    pending.append(fut)
                    while len(pending) > int(self.spec.get("inflight", 32)):
                        await self._settle(pending.popleft(), stop + grace)
            while pending:
                await self._settle(pending.popleft(), stop + grace)

        await asyncio.gather(*(flow(f) for f in flows))
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        return {"bins": {str(k): v for k, v in self.bins.items()},
                "arrivals": {str(k): v for k, v in self.arrivals.items()}}

    async def conn_stats(self) -> dict[int, dict[str, Any]]:
        """The local daemon's (or endpoint's) connections by local cid (Braid only)."""
        st = await asyncio.wait_for(self.client.stats(), 5)
        return {int(c["stats"]["local_cid"]): {
            "peer": c.get("peer"), "role": c.get("role"), "cc": c.get("cc") or {},
            "plane_shares": (c.get("paths") or {}).get("plane_shares"),
            # Each plane's own smoothed RTT (its silence timer) and packets sent.
            "plane_srtt": [r.get("srtt") for r in (c.get("paths") or {}).get("planes") or []],
            "plane_sent": [r.get("sent") for r in (c.get("paths") or {}).get("planes") or []],
            **c["stats"]}
                for c in st.get("connections", [])}

    async def _quiet(self, limit: float, quiet: float = 0.5) -> None:
        """An in-process endpoint goes away with its worker, and its CLOSE
        fails what a peer still has in flight to it (a daemon would stay and
        acknowledge it). Before closing, wait until nothing has arrived for
        ``quiet`` seconds (at most ``limit``): the peers' last messages are
        then acknowledged, not failed."""
        end = time.monotonic() + limit
        last, since = -1, time.monotonic()
        while time.monotonic() < end:
            st = await self.client.stats()
            got = sum(int(c["stats"].get("bytes_received") or 0)
                      for c in st.get("connections", []))
            if got != last:
                last, since = got, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            await asyncio.sleep(0.05)

    async def close(self) -> dict[str, Any]:
        self.closing = True
        extra: dict[str, Any] = {}
        early: dict[int, dict[str, Any]] = {}
        if self.stack == "braid-inproc" and self.client is not None:
            # The endpoint is this process's: a connection its peer closes
            # while this one waits is gone from the stats after the wait, so
            # its figures are taken before it too.
            with contextlib.suppress(Exception):
                early = await self.conn_stats()
            with contextlib.suppress(Exception):
                await self._quiet(float(self.spec.get("grace", 5)))
        if self.braid and self.client is not None:
            try:
                now = {**early, **await self.conn_stats()}
                conns = []
                for cid, c in now.items():
                    b = self.base_stats.get(cid, {})
                    d: dict[str, float] = {k: int(c.get(k) or 0) - int(b.get(k) or 0)
                                           for k in COUNTERS}
                    if not any(d.values()):
                        continue  # idle during this run
                    bcc, cc = b.get("cc") or {}, c.get("cc") or {}
                    d.update({f"cc_{k}": float(cc.get(k) or 0) - float(bcc.get(k) or 0)
                              for k in CC_COUNTERS})
                    d["cc_delay_is_mark"] = float(cc.get("delay_is_mark") or 0)
                    conns.append({"peer": c["peer"], "role": c["role"], **d,
                                  **{k: c.get(k) for k in ("srtt", "min_rtt", "cwnd",
                                                           "rttvar", "reorder_extra",
                                                           "parked_planes", "state",
                                                           "probe_interval", "plane_shares",
                                                           "plane_srtt")},
                                  "plane_sent": [int(x or 0) - int(y or 0) for x, y in zip(
                                      c.get("plane_sent") or [], b.get("plane_sent") or
                                      [0] * len(c.get("plane_sent") or []), strict=False)],
                                  "max_window": cc.get("max_window"),
                                  # parks/unparks during this run (absolute times)
                                  "plane_log": [e for e in c.get("plane_log") or []
                                                if e[0] >= self.go - 0.001],
                                  # the srtt over this run (absolute times)
                                  "srtt_log": [e for e in c.get("srtt_log") or []
                                               if e[0] >= self.go - 0.001],
                                  "unreachable_sends": int(c.get("unreachable_sends") or 0)
                                  - int(b.get("unreachable_sends") or 0)})
                extra["conns"] = conns
            except Exception as exc:
                extra["stats_error"] = str(exc)
            await self.client.close()
        for w in self.writers.values():
            w.close()
        return extra


#: Braid connection counters reported per run (differences over the run).
COUNTERS = ("packets_sent", "retransmissions", "rtos", "nacks_received", "probes_sent",
            "bytes_acked", "bytes_received", "lost_by_rto", "spurious_losses",
            "lost_by_time", "lost_by_ev_order", "twin_resends", "lost_on_park",
            # Resent packets by first send to ack (transport.sender.RECOVERY_KEYS;
            # the worker imports nothing of the stack: a test keeps them equal).
            "recovered_lt_2ms", "recovered_lt_5ms", "recovered_lt_10ms", "recovered_lt_20ms",
            "recovered_lt_50ms", "recovered_ge_50ms",
            # EV state changes by cause (Connection.stats): late skips, ECN
            # skips, condemnations.
            "ev_late_ack", "ev_ecn_ack", "ev_loss")
#: NSCC's decision counters, also differences (``cc_`` in the report).
CC_COUNTERS = ("md", "quick_adapt", "qa_trim_quiet", "qa_undone", "fair_inc", "proportional_inc",
               "fast_inc", "timeouts")


async def amain(spec: dict[str, Any]) -> dict[str, Any]:
    w = Worker(spec)
    k0 = _kernel_counters()
    await w.open()
    emit({"ready": True})
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line.startswith("go "):
        return {"errors": ["no go line from the orchestrator"]}
    w.go = float(line.split()[1])
    await asyncio.sleep(max(0.0, w.go - time.monotonic()))
    cpu0 = time.process_time()
    res = await (w.stream() if w.pattern == "stream" else w.collective())
    w.finished = True
    # What the peers still send us after our part is done (a slower host's last
    # step) must not fail their run: keep reading briefly.
    await asyncio.sleep(float(spec.get("linger", 0.3)))
    res.update(await w.close())
    k1 = _kernel_counters()
    res.update({"errors": w.errors, "bad": w.bad, "stale": w.stale, "ok_bytes": w.ok_bytes,
                "sent_msgs": w.sent_msgs, "go": w.go, "cut": w.cut, "blocked": w.blocked,
                "warmup_failures": w.warmup_failures,
                # This worker's CPU seconds from go to its result (tools/claims/cpu.py).
                "cpu_s": round(time.process_time() - cpu0, 3),
                "kernel": {k: k1.get(k, 0) - k0.get(k, 0) for k in k1}})
    return res


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    from transport.eventloop import new_event_loop

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        res = loop.run_until_complete(asyncio.wait_for(amain(spec), float(spec.get("timeout",
                                                                                   300))))
    except BaseException as exc:  # a result with the reason, whatever ended the run
        res = {"errors": [f"{type(exc).__name__}: {exc}"], "fatal": True}
    finally:
        loop.close()
    out: dict[str, Any] = {"result": res}
    path = spec.get("result_file")
    if path:
        # The result goes in a file and stdout carries one short line naming
        # it: a result line longer than the pipe (64 KiB: n=8 flows' bins) came
        # through cut at 65536 bytes now and then, and the run had no result.
        try:
            with open(f"{path}.tmp", "w") as f:
                json.dump(out, f)
            os.replace(f"{path}.tmp", path)
            out = {"result_file": path}
        except OSError as exc:
            res.setdefault("errors", []).append(f"cannot write {path}: {exc}")
    emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
