"""The engine of ``braid perf``: streams through two daemons' control sockets,
sampled once per interval, checked byte for byte.

Runs in the root namespace and talks only to daemons' Unix sockets (files in
the testbed's run directory); the daemons run inside the testbed's namespaces.
Each stream is one transfer id: chunks carry (offset, BLAKE2b) in the
``braid send`` chunk header, and their bytes are a function of (stream,
offset), so the receiver checks every byte, not just a digest.

``--inproc`` (``InprocPerf``): no daemons. One worker process per host runs
inside the host's namespace (``python -m tools.cli.perf_run worker SPEC``), opens
the host's endpoint in its own event loop (``braid.open``) and runs that
host's side of the same streams with the same code (``Perf._send`` /
``Perf._receive``); the coordinator here asks the workers for their counters
over their stdin / stdout (one JSON line per answer), never for data.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transport.api import BraidError, Client, decode_chunk, encode_chunk
from transport.local import LocalEndpoint

#: Unacknowledged bytes of all streams together: several times a testbed's
#: bandwidth-delay product (4 planes x 100 Mbit/s x 10 ms = 0.5 MB), small enough
#: that a --time run ends within a fraction of a second of its deadline.
WINDOW = 4 << 20
_SHIFTS = 4093  # distinct starting points of a stream's random pattern


@dataclass
class Stream:
    sid: int
    src: str
    dst: str
    size: int | None  # None: until the deadline (--time)
    chunk: int
    tid: int = field(default_factory=lambda: secrets.randbits(63))
    submitted: int = 0  # bytes handed to the sender daemon
    acked: int = 0
    received: int = 0  # bytes delivered to us and checked
    bad: int = 0  # chunks that failed the check
    dup: int = 0
    offsets: set[int] = field(default_factory=set)
    done_sending: bool = False
    error: str | None = None

    _pattern: bytes = b""

    def content(self, off: int, n: int) -> bytes:
        """The bytes of this stream at ``off``: the offset, then random bytes at a
        position that depends on it, so misplaced or stale data fails the check."""
        if not self._pattern:
            # From the (random) transfer id: a receiver in another process
            # (--inproc) derives the same bytes.
            self._pattern = random.Random(self.tid).randbytes(self.chunk + _SHIFTS)
        start = (off // max(self.chunk, 1) * 7919) % _SHIFTS
        return (off.to_bytes(8, "big") + self._pattern[start:start + max(n - 8, 0)])[:n]

    @property
    def complete(self) -> bool:
        return self.done_sending and self.error is None and self.received == self.submitted


@dataclass
class Sample:
    t: float
    delivered: int
    sender: dict[str, dict[str, Any]]  # "src>dst" -> counters


def _conn_counters(stats: dict[str, Any], peer: str) -> dict[str, Any]:
    for c in stats.get("connections", []):
        if c.get("peer") == peer and c.get("role") == "initiator":
            s = c["stats"]
            return {"retransmissions": s.get("retransmissions", 0), "rtos": s.get("rtos", 0),
                    "trims": s.get("trims_fabric", 0) + s.get("trims_last_hop", 0),
                    "nacks": s.get("nacks_received", 0), "state": s.get("state"),
                    # The loss inference's mistakes: what it declared lost and
                    # then saw acknowledged, and the planes it parked.
                    "spurious": s.get("spurious_losses", 0),
                    "parks": sum(int(p.get("parks", 0)) for p in c["paths"].get("planes") or []),
                    "planes": {str(p["plane"]): p.get("sent", 0)
                               for p in c["paths"].get("planes") or []}}
    return {}


class Perf:
    """One run: ``await Perf(...).run()``; results in ``samples``, ``streams``,
    ``deliveries`` (times of every checked chunk)."""

    def __init__(self, sockets: dict[str, str], streams: list[Stream], *,
                 duration: float | None, interval: float, stall_timeout: float,
                 verify: bool, on_interval: Callable[[Sample, Sample], None] | None = None
                 ) -> None:
        self.sockets = sockets
        self.streams = streams
        self.duration = duration
        self.interval = interval
        self.stall_timeout = stall_timeout
        self.verify = verify
        self.on_interval = on_interval
        self.samples: list[Sample] = []
        self.deliveries: list[float] = []
        self.t0 = 0.0  # loop clock at the first byte
        self.t0_wall = 0.0  # time.monotonic() at the same moment
        self.on_start: Callable[[], None] | None = None  # called at the first byte
        self.t_end: float | None = None
        self.failure: str | None = None
        self._by_tid = {s.tid: s for s in streams}
        self._last_progress = 0.0
        self._window = max(WINDOW // max(len(streams), 1), 2 * max(s.chunk for s in streams))

    @property
    def delivered(self) -> int:
        return sum(s.received for s in self.streams)

    def _finished(self) -> bool:
        return all(s.done_sending and (s.error is not None or s.received >= s.submitted)
                   for s in self.streams)

    async def run(self) -> None:
        clients: list[Client] = []

        async def client(host: str) -> Client:
            c = await Client(self.sockets[host]).open()
            clients.append(c)
            return c

        tasks: list[asyncio.Task[None]] = []
        try:
            senders = {s.src: await client(s.src) for s in self.streams}
            stat_clients = {h: await client(h) for h in senders}
            receivers = {s.dst: await client(s.dst) for s in self.streams}
            for s in self.streams:  # handshake before the clock starts: fail fast
                await senders[s.src].connect_peer(s.dst)
            loop = asyncio.get_running_loop()
            self.samples.append(await self._sample(stat_clients))
            self.t0 = self._last_progress = loop.time()
            self.t0_wall = time.monotonic()
            self.samples[0].t = 0.0
            if self.on_start is not None:
                self.on_start()
            tasks = [loop.create_task(self._receive(c)) for c in receivers.values()]
            tasks += [loop.create_task(self._send(senders[s.src], s)) for s in self.streams]
            await self._watch(stat_clients)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            for c in clients:
                with contextlib.suppress(Exception):
                    await c.close()

    async def _refresh(self) -> None:
        """Bring the streams' counters up to date (they live here: nothing to do)."""

    async def _sample(self, stat_clients: dict[str, Client]) -> Sample:
        now = asyncio.get_running_loop().time()
        sender: dict[str, dict[str, Any]] = {}
        for host, c in stat_clients.items():
            try:
                st = await asyncio.wait_for(c.stats(), 5.0)
            except (TimeoutError, BraidError):
                continue
            for s in self.streams:
                if s.src == host:
                    sender[f"{s.src}>{s.dst}"] = _conn_counters(st, s.dst)
        return Sample(now - self.t0, self.delivered, sender)

    async def _watch(self, stat_clients: dict[str, Client]) -> None:
        loop = asyncio.get_running_loop()
        tick = self.t0
        limit = (self.duration or 0) + 3600  # bounded: an hour past any deadline
        while True:
            tick += self.interval
            while loop.time() < tick:
                await self._refresh()
                if self._finished():
                    break
                await asyncio.sleep(min(0.02, max(tick - loop.time(), 0)))
            finished = self._finished()
            if finished and self.t_end is None:
                self.t_end = (self.deliveries[-1] if self.deliveries else loop.time()) - self.t0
            s = await self._sample(stat_clients)
            if self.on_interval is not None:
                self.on_interval(self.samples[-1], s)
            self.samples.append(s)
            if finished:
                break
            errs = [st.error for st in self.streams if st.error]
            if errs:
                self.failure = errs[0]
                break
            idle = loop.time() - self._last_progress
            if idle > self.stall_timeout:
                self.failure = (f"no progress for {idle:.0f} s "
                                f"({self.delivered} bytes delivered)")
                break
            if loop.time() - self.t0 > limit:
                self.failure = "ran an hour past its deadline"
                break
        errs = [st.error for st in self.streams if st.error]
        if self.failure is None and errs:
            self.failure = errs[0]
        if self.failure is None:
            bad = [st for st in self.streams if st.bad or st.dup]
            if bad:
                self.failure = (f"byte check failed: stream {bad[0].sid} had {bad[0].bad} "
                                f"bad and {bad[0].dup} duplicate chunks")

    async def _send(self, client: Client | LocalEndpoint, s: Stream) -> None:
        loop = asyncio.get_running_loop()
        inflight: list[tuple[asyncio.Future[Any], int]] = []
        try:
            off = 0
            for _ in range(1 << 40):  # bounded by size or deadline below
                if s.size is not None and off >= s.size:
                    break
                if s.size is None and loop.time() - self.t0 >= (self.duration or 0):
                    break
                n = s.chunk if s.size is None else min(s.chunk, s.size - off)
                data = s.content(off, n)
                fut = await client.submit(s.dst, encode_chunk(s.tid, off, s.size or 0, "",
                                                              data))
                inflight.append((fut, n))
                off += n
                s.submitted = off
                while inflight and (inflight[0][0].done() or
                                    s.submitted - s.acked > self._window):
                    f, m = inflight.pop(0)
                    await f
                    s.acked += m
            s.done_sending = True
            for f, m in inflight:
                await f
                s.acked += m
        except BraidError as exc:
            s.error = f"{s.src} -> {s.dst}: {exc}"
            s.done_sending = True
        finally:
            # Interrupted or failed: the rest resolve when the client closes; nobody waits.
            for f, _m in inflight:
                f.add_done_callback(_retrieve)

    async def _receive(self, client: Client | LocalEndpoint) -> None:
        loop = asyncio.get_running_loop()
        while True:
            _peer, msg = await client.recv()
            ch = decode_chunk(msg)
            s = None if ch is None else self._by_tid.get(ch.transfer_id)
            if s is None or ch is None:
                continue  # not ours: another application's message
            n = len(ch.data)
            if ch.offset in s.offsets:
                s.dup += 1
                continue
            s.offsets.add(ch.offset)
            ok = ch.ok and (not self.verify or ch.data == s.content(ch.offset, n))
            if not ok:
                s.bad += 1
            s.received += n
            now = loop.time()
            self.deliveries.append(now)
            self._last_progress = now


def _retrieve(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()


# -- --inproc: each host's endpoint inside a worker process in its namespace ----------------

#: Seconds a worker may take to start (imports, binding) and to answer a command.
WORKER_START_TIMEOUT = 60.0
WORKER_REPLY_TIMEOUT = 30.0
#: How often the coordinator asks the workers whether the run is done.
POLL = 0.05


def _stream_spec(s: Stream) -> dict[str, Any]:
    return {"sid": s.sid, "src": s.src, "dst": s.dst, "size": s.size, "chunk": s.chunk,
            "tid": s.tid}


def _stream_state(s: Stream) -> dict[str, Any]:
    return {"sub": s.submitted, "ack": s.acked, "done": s.done_sending, "err": s.error,
            "rcv": s.received, "bad": s.bad, "dup": s.dup}


class WorkerError(BraidError):
    """A worker failed to start or answer (its reason, or its log's tail)."""


class _Worker:
    def __init__(self, host: str, proc: asyncio.subprocess.Process, log: str) -> None:
        self.host = host
        self.proc = proc
        self.log = log

    async def ask(self, cmd: str | None, timeout: float = WORKER_REPLY_TIMEOUT
                  ) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if cmd is not None:
            self.proc.stdin.write(cmd.encode() + b"\n")
            await self.proc.stdin.drain()
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            raise WorkerError(f"the worker on {self.host} did not answer {cmd or 'ready'!r} "
                              f"within {timeout:g} s (log {self.log})") from None
        if not line:
            raise WorkerError(f"the worker on {self.host} exited: {_tail(self.log)} "
                              f"(log {self.log})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise WorkerError(str(reply["error"]))
        return reply


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.read().strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-2:]) or "(empty log)"


class InprocPerf(Perf):
    """The same run with each host's endpoint in a worker process of its own
    (``braid.open`` inside the host's namespace) instead of a daemon.

    ``launch(host)`` is the argv prefix that runs a program in the host's
    namespace; ``configs`` maps host -> its host config file. ``cpu_s`` holds
    each worker's CPU seconds from its ``connect`` to its ``stop``."""

    def __init__(self, configs: dict[str, str], launch: Callable[[str], list[str]],
                 streams: list[Stream], *, logs: dict[str, str], **kw: Any) -> None:
        super().__init__({}, streams, **kw)
        self.configs = configs
        self.launch = launch
        self.logs = logs
        self.cpu_s: dict[str, float] = {}
        self._workers: dict[str, _Worker] = {}
        self._polled = 0.0

    async def _start(self, host: str) -> _Worker:
        spec = {"host": host, "config": self.configs[host], "duration": self.duration,
                "verify": self.verify, "window": self._window,
                "streams": [_stream_spec(s) for s in self.streams
                            if host in (s.src, s.dst)]}
        argv = [*self.launch(host), sys.executable, "-m", "tools.cli.perf_run", "worker",
                json.dumps(spec)]
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=root, PYTHONUNBUFFERED="1")
        with open(self.logs[host], "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log, cwd=root, env=env, start_new_session=True,
                limit=1 << 24)
        w = self._workers[host] = _Worker(host, proc, self.logs[host])
        return w

    async def run(self) -> None:
        hosts = list(dict.fromkeys([*(s.src for s in self.streams),
                                    *(s.dst for s in self.streams)]))
        try:
            for h in hosts:
                await self._start(h)
            for h in hosts:
                await self._workers[h].ask(None, WORKER_START_TIMEOUT)
            for h in dict.fromkeys(s.src for s in self.streams):  # handshakes: fail fast
                await self._workers[h].ask("connect")
            loop = asyncio.get_running_loop()
            self.samples.append(await self._sample({}))
            for w in self._workers.values():
                assert w.proc.stdin is not None
                w.proc.stdin.write(b"start\n")
            self.t0 = self._last_progress = loop.time()
            self.t0_wall = time.monotonic()
            for w in self._workers.values():
                assert w.proc.stdin is not None
                await w.proc.stdin.drain()
            self.samples[0].t = 0.0
            if self.on_start is not None:
                self.on_start()
            await self._watch({})
        finally:
            await self._stop_workers()

    def _merge(self, host: str, reply: dict[str, Any]) -> None:
        by_sid = {s.sid: s for s in self.streams}
        for sid, st in (reply.get("streams") or {}).items():
            s = by_sid[int(sid)]
            if host == s.src:
                s.submitted, s.acked, s.done_sending = st["sub"], st["ack"], st["done"]
            if host == s.dst:
                s.received, s.bad, s.dup = st["rcv"], st["bad"], st["dup"]
            if st.get("err") and s.error is None:
                s.error = st["err"]
        new = [self.t0 + d for d in reply.get("deliveries") or []]
        if new:
            self.deliveries.extend(new)
            self.deliveries.sort()
            self._last_progress = max(self._last_progress, new[-1])

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self._polled < POLL:
            return
        self._polled = loop.time()
        for h, w in self._workers.items():
            self._merge(h, await w.ask("poll"))

    async def _sample(self, stat_clients: dict[str, Client]) -> Sample:
        now = asyncio.get_running_loop().time()
        sender: dict[str, dict[str, Any]] = {}
        for h, w in self._workers.items():
            reply = await w.ask("sample")
            self._merge(h, reply)
            sender.update(reply.get("sender") or {})
        return Sample(now - self.t0, self.delivered, sender)

    async def _stop_workers(self) -> None:
        for h, w in self._workers.items():
            if w.proc.returncode is None:
                try:
                    reply = await w.ask("stop", WORKER_REPLY_TIMEOUT)
                    self._merge(h, reply)
                    self.cpu_s[h] = float(reply.get("cpu_s", 0.0))
                except (BraidError, ConnectionError, ValueError):
                    pass
            try:
                await asyncio.wait_for(w.proc.wait(), 5.0)
            except TimeoutError:
                w.proc.kill()
                await w.proc.wait()


async def worker(spec: dict[str, Any]) -> None:
    """One host's side of an --inproc run (``python -m tools.cli.perf_run worker SPEC``):
    answers ``connect``, ``start``, ``poll``, ``sample``, ``stop`` on stdin, one
    JSON line each on stdout (``start`` has no answer). EOF on stdin stops it."""
    from transport.local import open_local

    def emit(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    host = str(spec["host"])
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    streams = [Stream(**d) for d in spec["streams"]]
    mine = [s for s in streams if s.src == host]
    perf = Perf({}, streams, duration=spec.get("duration"), interval=1.0, stall_timeout=1.0,
                verify=bool(spec.get("verify", True)))
    perf._window = int(spec.get("window", perf._window))
    try:
        ep = await open_local(str(spec["config"]))
    except BraidError as exc:
        emit({"error": f"{host}: {exc}"})
        return
    emit({"ready": True})
    tasks: list[asyncio.Task[None]] = []
    told = 0
    cpu0 = time.process_time()
    try:
        while line := (await reader.readline()).decode().strip():
            if line == "connect":
                cpu0 = time.process_time()
                try:
                    for s in mine:
                        await asyncio.wait_for(ep.connect_peer(s.dst), WORKER_REPLY_TIMEOUT)
                except (BraidError, TimeoutError) as exc:
                    emit({"error": f"{host} -> {s.dst}: {exc or 'handshake timed out'}"})
                    continue
                emit({"connected": True})
            elif line == "start":
                perf.t0 = loop.time()
                if any(s.dst == host for s in streams):
                    tasks.append(loop.create_task(perf._receive(ep)))
                tasks += [loop.create_task(perf._send(ep, s)) for s in mine]
            elif line in ("poll", "sample", "stop"):
                out: dict[str, Any] = {
                    "streams": {s.sid: _stream_state(s) for s in streams},
                    "deliveries": [round(d - perf.t0, 6) for d in perf.deliveries[told:]]}
                told = len(perf.deliveries)
                if line == "sample":
                    st = await ep.stats()
                    out["sender"] = {f"{s.src}>{s.dst}": _conn_counters(st, s.dst)
                                     for s in mine}
                if line == "stop":
                    break
                emit(out)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        await ep.close()
    emit({"streams": {s.sid: _stream_state(s) for s in streams},
          "deliveries": [round(d - perf.t0, 6) for d in perf.deliveries[told:]],
          "cpu_s": round(time.process_time() - cpu0, 4)})


def worker_main(argv: list[str]) -> int:
    from transport.eventloop import new_event_loop

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(worker(json.loads(argv[0])))
    finally:
        loop.close()
    return 0


# -- analysis -------------------------------------------------------------------------------


def intervals(samples: list[Sample]) -> list[dict[str, Any]]:
    out = []
    for a, b in itertools.pairwise(samples):
        out.append(interval_row(a, b))
    return out


def _delta(before: int, after: int) -> int:
    """A counter's growth; a smaller value means a new connection (counters restart)."""
    return after - before if after >= before else after


def interval_row(a: Sample, b: Sample) -> dict[str, Any]:
    dt = max(b.t - a.t, 1e-9)
    byts = b.delivered - a.delivered
    retx = rtos = trims = spurious = parks = 0
    planes: dict[str, int] = {}
    for key, cb in b.sender.items():
        ca = a.sender.get(key, {})
        retx += _delta(ca.get("retransmissions", 0), cb.get("retransmissions", 0))
        rtos += _delta(ca.get("rtos", 0), cb.get("rtos", 0))
        trims += _delta(ca.get("trims", 0), cb.get("trims", 0))
        spurious += _delta(ca.get("spurious", 0), cb.get("spurious", 0))
        parks += _delta(ca.get("parks", 0), cb.get("parks", 0))
        for p, v in cb.get("planes", {}).items():
            planes[p] = planes.get(p, 0) + _delta(ca.get("planes", {}).get(p, 0), v)
    tot = sum(planes.values())
    return {"start": round(a.t, 3), "end": round(b.t, 3), "bytes": byts,
            "goodput_bps": round(byts * 8 / dt), "retransmissions": retx, "rtos": rtos,
            "trims": trims, "spurious_losses": spurious, "plane_parks": parks,
            "plane_share": {p: round(v / tot, 4) if tot else 0.0
                            for p, v in sorted(planes.items(), key=lambda kv: int(kv[0]))}}


def summary(perf: Perf) -> dict[str, Any]:
    rows = intervals(perf.samples)
    t_end = perf.t_end if perf.t_end is not None else (
        perf.samples[-1].t if perf.samples else 0.0)
    delivered = perf.delivered
    # a last, short interval (the run ended inside it) is not a fair worst case
    full = [r for r in rows if r["end"] - r["start"] > 0.5 * perf.interval]
    rates = [r["goodput_bps"] for r in full] or [r["goodput_bps"] for r in rows] or [0]
    worst = min(full or rows, key=lambda r: r["goodput_bps"]) if rows else None
    times = [perf.t0, *perf.deliveries]
    gaps = [(b - a, a - perf.t0) for a, b in itertools.pairwise(times)]
    max_gap = max(gaps, default=(0.0, 0.0))
    total = interval_row(perf.samples[0], perf.samples[-1]) if len(perf.samples) > 1 else {}
    streams = [{"stream": s.sid, "src": s.src, "dst": s.dst, "bytes": s.received,
                "submitted": s.submitted, "complete": s.complete,
                "verified": s.complete and not s.bad and not s.dup, "bad_chunks": s.bad,
                "duplicate_chunks": s.dup, "error": s.error} for s in perf.streams]
    return {
        "seconds": round(t_end, 4), "bytes": delivered,
        "goodput_bps": round(delivered * 8 / t_end) if t_end > 0 else 0,
        "interval_goodput_bps": {"median": round(statistics.median(rates)),
                                 "min": round(min(rates)), "max": round(max(rates))},
        "worst_interval": None if worst is None else {
            "start": worst["start"], "end": worst["end"], "goodput_bps": worst["goodput_bps"]},
        "delivery_gap_s": {
            "median": round(statistics.median([g for g, _ in gaps]), 4) if gaps else 0.0,
            "max": round(max_gap[0], 4), "max_at": round(max_gap[1], 3)},
        "retransmissions": total.get("retransmissions", 0), "rtos": total.get("rtos", 0),
        "trims": total.get("trims", 0), "plane_share": total.get("plane_share", {}),
        "spurious_losses": total.get("spurious_losses", 0),
        "plane_parks": total.get("plane_parks", 0),
        "complete": perf.failure is None and all(s["complete"] for s in streams),
        "verified": perf.failure is None and all(s["verified"] for s in streams),
        "failure": perf.failure, "streams": streams, "intervals": rows,
    }



if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tools.cli.perf_run worker SPEC_JSON")
    sys.exit(worker_main(sys.argv[2:]))
