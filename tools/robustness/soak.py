"""A soak on the testbed (root; not in CI): random faults, client churn, daemon
restarts, and a ledger proving nothing was lost, duplicated or corrupted.

    python -m tools.robustness.soak --minutes 10 [--seed 1] [--out results/soak.json]

Brings up examples/two-hosts-4-planes.toml (2 hosts x 4 planes, trimming
last hops), one ``braid daemon`` per host, and for ``--minutes``:

- a sender (API client of h0's daemon) submits numbered messages (1 B .. 256 KiB,
  a BLAKE2b digest inside) to h1, at most 64 unacknowledged; it leaves and
  comes back every few hundred messages — mostly after awaiting its acks,
  sometimes abruptly (its unacknowledged messages are then *abandoned*: the
  daemon cancels those not started, so each arrives at most once);
- receivers (API clients of h1's daemon) come and go: each reads a random
  number of messages and leaves without warning, with more written ahead to it;
  sometimes nobody listens for a while;
- a random fault timeline: a plane down, loss, a gray (one-way) link, a rate
  cut, for 1-4 s each, never more than two planes touched at once;
- graceful daemon restarts (SIGTERM, then start again) of either host. A
  message whose send failed because a daemon went away is sent again: it may
  have arrived already, so across a restart delivery is at-least-once, and
  those duplicates are counted apart from all others (which must be zero).

At the end faults heal, the sender finishes, a receiver reads until every
acknowledged message is in. The ledger: ``lost`` (acknowledged to the sender,
never received), ``duplicates_other``, ``corrupt`` must all be 0.

Every connection failure is accounted for: each ``connection_failed`` and
``peer_restarted`` line of the daemons' logs and each send error a client saw
is set against the fault timeline and the restarts around it
(``classify_failures``) and called *explained* (a daemon at either end was
stopping, down or starting within ``RESTART_REACH`` seconds before it, and the
failing daemon connected to its peer again afterwards) or *unexplained*
(nothing but faults on at most two of the four planes: the transport should
have ridden over them). The JSON has ``failures`` and
``unexplained_failures``, which must be 0 too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "examples" / "two-hosts-4-planes.toml"
SENDER, RECEIVER = "h0", "h1"
_HDR = struct.Struct("!4sQI16s")  # magic, seq, payload length, BLAKE2b-128 of the payload
MAGIC = b"SOAK"
WINDOW = 64


def make_message(seq: int, rng: random.Random) -> bytes:
    n = rng.choice((1, 100, 1400, 5000, 64 << 10, 256 << 10, rng.randint(1, 256 << 10)))
    payload = random.Random(seq).randbytes(n)
    return _HDR.pack(MAGIC, seq, n, hashlib.blake2b(payload, digest_size=16).digest()) + payload


def check_message(data: bytes) -> tuple[int | None, bool]:
    """(seq, intact) of a received message."""
    if len(data) < _HDR.size or data[:4] != MAGIC:
        return None, False
    _m, seq, n, digest = _HDR.unpack_from(data)
    payload = data[_HDR.size:]
    ok = len(payload) == n and hashlib.blake2b(payload, digest_size=16).digest() == digest
    return seq, ok


#: How far back (seconds) a restart of either daemon explains a failure: a
#: graceful stop drains for up to ``drain_timeout`` (15 s) but the failure
#: comes at most one retry budget after the peer stopped answering — the
#: ``host`` profile's ``idle_fail_timeout`` (5 s), or ~4 s of backed-off RTOs
#: (40 ms doubling to the 0.5 s cap, 11 times), or ``handshake_timeout`` (2 s)
#: per attempt for a new connection — plus the daemon's start (a Python
#: process on a loaded machine: up to a few seconds).
RESTART_REACH = 10.0
#: How long after a failure the failing daemon must have connected to its
#: peer again for the failure to count as recovered (or the run ended first).
RECOVER_WITHIN = 60.0


@dataclass
class Fault:
    """One fault of the timeline (wall-clock seconds, ``time.time()``)."""

    start: float
    end: float | None
    kind: str
    spec: str


@dataclass
class Restart:
    """A daemon restart: SIGTERM sent, process gone, socket up again."""

    host: str
    stop: float
    exited: float | None = None
    up: float | None = None


@dataclass
class Failure:
    time: float
    host: str  # the daemon that failed the connection (or the client's daemon)
    peer: str
    reason: str
    source: str  # "daemon" (its log) or "client" (an error the API returned)


def parse_daemon_log(host: str, text: str) -> tuple[list[Failure], list[tuple[float, str]]]:
    """The failures (``connection_failed``, ``peer_restarted``) and the
    ``connection_established`` times (with the peer) of one daemon's log."""
    fails: list[Failure] = []
    established: list[tuple[float, str]] = []
    for line in text.splitlines():
        if "event=connection_failed" not in line and "event=peer_restarted" not in line \
                and "event=connection_established" not in line:
            continue
        try:
            kv = dict(w.partition("=")[::2] for w in shlex.split(line))
            ts = float(kv["ts"])
        except (ValueError, KeyError):
            continue
        event = kv.get("event", "")
        if event == "connection_established":
            established.append((ts, kv.get("peer", "?")))
        elif event == "peer_restarted":
            fails.append(Failure(ts, host, kv.get("peer", "?"),
                                 "peer restarted: " + kv.get("reason", "?"), "daemon"))
        else:
            fails.append(Failure(ts, host, kv.get("peer", "?"), kv.get("reason", "?"),
                                 "daemon"))
    return fails, established


def _overlaps(a0: float, a1: float, b0: float, b1: float) -> bool:
    return a0 <= b1 and b0 <= a1


_PLANE = re.compile(r"(?:plane |:p)(\d+)")


def classify_failures(failures: list[Failure], faults: list[Fault], restarts: list[Restart],
                      established: dict[str, list[tuple[float, str]]], run_end: float,
                      reach: float = RESTART_REACH,
                      recover_within: float = RECOVER_WITHIN) -> list[dict[str, Any]]:
    """Each failure with the faults active when it came (``faults_active``)
    and those healed in the ``reach`` seconds before (``faults_recent``), the
    restart nearby, and whether it is explained, and why.

    Explained: a daemon at either end was stopping, down or starting (from its
    SIGTERM to its socket being up again, widened by ``reach`` after) when the
    failure came, and — for a daemon's own failure — the failing daemon
    connected to that peer again within ``recover_within`` (or the run ended
    first). Anything else is unexplained: faults touch at most two of the four
    planes, which the transport must ride over."""
    out: list[dict[str, Any]] = []
    for f in sorted(failures, key=lambda f: f.time):
        active = sorted({x.spec for x in faults
                         if _overlaps(x.start, x.end if x.end is not None else run_end,
                                      f.time, f.time)})
        recent = sorted({x.spec for x in faults
                         if _overlaps(x.start, x.end if x.end is not None else run_end,
                                      f.time - reach, f.time)} - set(active))
        planes = sorted({int(m) for spec in active + recent for m in _PLANE.findall(spec)})
        near = [r for r in restarts
                if _overlaps(r.stop, (r.up if r.up is not None else run_end) + reach,
                             f.time, f.time)]
        why = ""
        explained = False
        if near:
            r = max(near, key=lambda r: r.stop)
            up = r.up if r.up is not None else run_end
            role = "own" if r.host == f.host else "peer"
            if f.time < r.stop:
                phase = "before its SIGTERM"  # cannot happen: near needs stop <= time
            elif r.exited is None or f.time <= r.exited:
                phase = "stopping"
            elif f.time <= up:
                phase = "down"
            else:
                phase = f"up again {f.time - up:.1f}s before"
            back = [t for t, peer in established.get(f.host, ())
                    if peer == f.peer and f.time <= t <= f.time + recover_within]
            recovered = f.source == "client" or bool(back) or \
                f.time + recover_within > run_end
            explained = recovered
            why = (f"{role} daemon {r.host} restart ({phase})"
                   + ("" if f.source == "client" else
                      f"; reconnected after {back[0] - f.time:.1f}s" if back else
                      "; run ended before a reconnect was due" if recovered else
                      f"; no reconnect within {recover_within:g}s"))
        else:
            why = (f"no restart within {reach:g}s; faults in the {reach:g}s before on planes "
                   f"{planes}: " + (", ".join(active + recent) or "none"))
        out.append({"time": round(f.time, 3),
                    "clock": time.strftime("%H:%M:%S", time.gmtime(f.time)),
                    "host": f.host, "peer": f.peer, "reason": f.reason, "source": f.source,
                    "faults_active": active, "faults_recent": recent,
                    "restart_nearby": (None if not near else
                                       f"{max(near, key=lambda r: r.stop).host} SIGTERM "
                                       f"{f.time - max(r.stop for r in near):+.1f}s before"),
                    "explained": explained, "why": why})
    return out


@dataclass
class Ledger:
    submitted: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)
    resent: set[int] = field(default_factory=set)  # sent again after a daemon went away
    abandoned: set[int] = field(default_factory=set)  # the client left before the ack
    received: Counter[int] = field(default_factory=Counter)
    corrupt: int = 0
    send_errors: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    bytes_received: int = 0

    def summary(self) -> dict[str, Any]:
        dups = {s: c - 1 for s, c in self.received.items() if c > 1}
        lost = sorted(self.acked - set(self.received))
        return {
            "submitted": len(self.submitted), "acked": len(self.acked),
            "received_unique": len(self.received),
            "received_total": sum(self.received.values()),
            "bytes_received": self.bytes_received,
            "lost": len(lost), "lost_first": lost[:10],
            "duplicates_after_resend": sum(c for s, c in dups.items() if s in self.resent),
            "duplicates_other": sum(c for s, c in dups.items() if s not in self.resent),
            "abandoned": len(self.abandoned),
            "abandoned_delivered": len(self.abandoned & set(self.received)),
            "resent": len(self.resent), "corrupt": self.corrupt,
            "send_errors": dict(self.send_errors.most_common(8)),
            "events": dict(sorted(self.events.items())),
        }


class Soak:
    def __init__(self, tb: Any, work: Path, seed: int, minutes: float) -> None:
        self.tb = tb
        self.work = work
        self.rng = random.Random(seed)
        self.end = time.monotonic() + minutes * 60
        self.ledger = Ledger()
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.cfg: dict[str, Path] = {}
        self.sock = {h: work / f"{h}.sock" for h in (SENDER, RECEIVER)}
        self.restarting: set[str] = set()
        self.finishing = False
        self.next_seq = 1
        self.pending_resend: list[int] = []
        self.faults: list[Fault] = []
        self.restarts: list[Restart] = []
        self.client_failures: list[Failure] = []
        self.log = open(work / "soak.log", "a")  # noqa: SIM115 - closed in close()

    def say(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    # -- daemons --------------------------------------------------------------------------

    def write_configs(self) -> None:
        from wire.keys import new_cluster_key, write_key_file

        write_key_file(self.work / "cluster.key", new_cluster_key())
        for host, peer in ((SENDER, RECEIVER), (RECEIVER, SENDER)):
            mine = ", ".join(f'"{self.tb.address(host, p)}"' for p in self.tb.planes)
            theirs = ", ".join(f'"{self.tb.address(peer, p)}"' for p in self.tb.planes)
            path = self.work / f"{host}.toml"
            path.write_text(f'name = "{host}"\nkey = "cluster.key"\n'
                            f'socket = "{self.sock[host]}"\nplanes = [{mine}]\n'
                            f"drain_timeout = 15\n\n[peers.{peer}]\nplanes = [{theirs}]\n")
            self.cfg[host] = path

    async def start_daemon(self, host: str) -> None:
        log = open(self.work / f"daemon-{host}.log", "a")  # noqa: SIM115
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.procs[host] = self.tb.popen(host, [sys.executable, "-m", "tools.cli", "daemon",
                                                "--config", str(self.cfg[host])],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         env=env, cwd=str(REPO))
        log.close()
        for _ in range(400):
            if self.sock[host].exists():
                return
            if self.procs[host].poll() is not None:
                raise RuntimeError(f"daemon {host} exited; see {self.work}/daemon-{host}.log")
            await asyncio.sleep(0.05)
        raise RuntimeError(f"daemon {host} did not start")

    async def restart(self, host: str) -> None:
        self.restarting.add(host)
        rec = Restart(host, time.time())
        self.restarts.append(rec)
        try:
            p = self.procs[host]
            p.send_signal(signal.SIGTERM)
            for _ in range(600):
                if p.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            if p.poll() is None:
                self.say(f"daemon {host} did not stop in 30 s: killed")
                p.kill()
                p.wait(5)
                self.ledger.events["daemon_killed"] += 1
            rec.exited = time.time()
            self.ledger.events[f"restart_{host}"] += 1
            self.say(f"restart {host} (exit {p.returncode}, stopped in "
                     f"{rec.exited - rec.stop:.1f}s)")
            await asyncio.sleep(self.rng.uniform(0.2, 2.0))
            await self.start_daemon(host)
            rec.up = time.time()
        finally:
            self.restarting.discard(host)

    def stop_daemons(self) -> None:
        for h, p in self.procs.items():
            if p.poll() is None:
                self.restarts.append(Restart(h, time.time()))  # the final stop
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    # -- the sender -----------------------------------------------------------------------

    async def sender(self) -> None:
        from transport.api import BraidError, Client

        led = self.ledger
        while not self._sender_done:
            client = Client(str(self.sock[SENDER]), close_timeout=2.0)
            outstanding: dict[int, asyncio.Future[Any]] = {}
            try:
                await client.open()
                quota = self.rng.randint(50, 600)
                abrupt = self.rng.random() < 0.25
                led.events["sender_sessions"] += 1
                while quota > 0 and (not self.finishing or self.pending_resend):
                    if self.pending_resend:
                        seq = self.pending_resend.pop()
                    elif not self.finishing:
                        seq = self.next_seq
                        self.next_seq += 1
                    else:
                        break
                    msg = make_message(seq, random.Random(seq ^ 0x5A5A))
                    led.submitted.add(seq)
                    outstanding[seq] = await client.submit(RECEIVER, msg)
                    quota -= 1
                    while len(outstanding) >= WINDOW:
                        await self._reap(outstanding, first=True)
                if abrupt and not self.finishing:
                    for s, f in outstanding.items():
                        if not f.done():  # nobody awaits it now: retrieve its outcome
                            led.abandoned.add(s)
                            f.add_done_callback(lambda f: f.cancelled() or f.exception())
                    led.events["sender_abrupt_leave"] += 1
                    outstanding = {s: f for s, f in outstanding.items() if f.done()}
                while outstanding:
                    await self._reap(outstanding, first=False)
            except BraidError as exc:
                led.send_errors[str(exc)[:60]] += 1
                self._client_failure(str(exc))
                await asyncio.sleep(0.2)
            finally:
                await self._reap(outstanding, first=False, settle=True)
                await client.close()
            if self.finishing and not self.pending_resend and not outstanding:
                self._sender_done = True

    _sender_done = False

    async def _reap(self, outstanding: dict[int, asyncio.Future[Any]], *, first: bool,
                    settle: bool = False) -> None:
        if not outstanding:
            return
        if not settle:
            when = asyncio.FIRST_COMPLETED if first else asyncio.ALL_COMPLETED
            await asyncio.wait(list(outstanding.values()), return_when=when, timeout=120)
        else:  # a daemon that went away fails them all at once: let that arrive
            await asyncio.wait(list(outstanding.values()), timeout=2.0)
        for seq, f in list(outstanding.items()):
            if not f.done():
                if settle:  # the client is going away: its fate is unknown
                    f.cancel()
                    self.ledger.abandoned.add(seq)
                    del outstanding[seq]
                continue
            del outstanding[seq]
            if f.cancelled():
                self.ledger.abandoned.add(seq)
            elif f.exception() is not None:
                # The daemon went away or the connection failed: send it again
                # (it may have arrived: at-least-once across a restart).
                self.ledger.send_errors[str(f.exception())[:60]] += 1
                self._client_failure(str(f.exception()))
                self.ledger.resent.add(seq)
                self.pending_resend.append(seq)
                await asyncio.sleep(0.01)  # a daemon going away: do not spin
            else:
                self.ledger.acked.add(seq)

    def _client_failure(self, reason: str) -> None:
        """A send error the API returned (one per distinct reason per second:
        a failed connection fails every message queued on it at once)."""
        now = time.time()
        last = self.client_failures[-1] if self.client_failures else None
        if last is not None and last.reason == reason and now - last.time < 1.0:
            return
        self.client_failures.append(Failure(now, SENDER, RECEIVER, reason, "client"))

    # -- receivers ------------------------------------------------------------------------

    async def receivers(self) -> None:
        from transport.api import BraidError, Client

        led = self.ledger
        while True:
            if self.finishing and led.acked <= set(led.received) and self._sender_done:
                return
            if not self.finishing and self.rng.random() < 0.1 and \
                    RECEIVER not in self.restarting:
                led.events["receiver_gaps"] += 1
                await asyncio.sleep(self.rng.uniform(0.2, 2.0))
            want = 10**9 if self.finishing else self.rng.randint(1, 400)
            client = Client(str(self.sock[RECEIVER]))
            try:
                await client.open()
                led.events["receiver_sessions"] += 1
                for _ in range(want):
                    # (asyncio.timeout, not wait_for: Python 3.11's wait_for can
                    # drop a result that raced its timeout — a "lost" message.)
                    async with asyncio.timeout(2.0):
                        _peer, data = await client.recv()
                        seq, ok = check_message(data)
                    led.bytes_received += len(data)
                    if seq is None or not ok:
                        led.corrupt += 1
                        continue
                    led.received[seq] += 1
            except (BraidError, TimeoutError, OSError):
                await asyncio.sleep(0.05)
            finally:
                await client.close()

    # -- faults and restarts ----------------------------------------------------------------

    async def chaos(self) -> None:
        loop = asyncio.get_running_loop()
        active: list[tuple[float, str, Fault]] = []
        while time.monotonic() < self.end:
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
            now = time.monotonic()
            for due, heal, rec in [a for a in active if a[0] <= now]:
                active.remove((due, heal, rec))
                await loop.run_in_executor(None, self.tb.fault, heal)
                rec.end = time.time()
            r = self.rng.random()
            if r < 0.08 and not self.restarting:
                await self.restart(self.rng.choice((SENDER, RECEIVER)))
                continue
            if len(active) >= 2:
                continue
            busy = {h.split()[1] for _, h, _r in active}
            p = self.rng.choice([p for p in self.tb.planes if f"h0:p{p}" not in busy
                                 and f"h1:p{p}" not in busy and str(p) not in busy])
            host = self.rng.choice((SENDER, RECEIVER))
            kind, spec, heal = self.rng.choice([
                ("plane_down", f"plane {p} down", f"plane {p} up"),
                ("loss", f"link {host}:p{p} loss {self.rng.choice((1, 5, 20))}% up",
                 f"link {host}:p{p} heal"),
                ("gray", f"link {host}:p{p} gray up", f"link {host}:p{p} heal"),
                ("rate", f"link {host}:p{p} rate 10mbit", f"link {host}:p{p} heal"),
                ("link_down", f"link {host}:p{p} down", f"link {host}:p{p} up"),
            ])
            rec = Fault(time.time(), None, kind, spec)
            await loop.run_in_executor(None, self.tb.fault, spec)
            self.faults.append(rec)
            self.ledger.events[f"fault_{kind}"] += 1
            active.append((now + self.rng.uniform(1.0, 4.0), heal, rec))
        for _, heal, rec in active:
            await loop.run_in_executor(None, self.tb.fault, heal)
            rec.end = time.time()

    async def progress(self) -> None:
        while not self.finishing:
            await asyncio.sleep(30)
            s = self.ledger.summary()
            self.say(f"acked {s['acked']} received {s['received_unique']} "
                     f"({s['bytes_received'] / 2**20:.0f} MiB) lost-so-far "
                     f"{len(self.ledger.acked - set(self.ledger.received))} "
                     f"events {s['events']}")

    async def run(self) -> dict[str, Any]:
        self.write_configs()
        for h in (SENDER, RECEIVER):
            await self.start_daemon(h)
        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(c) for c in (self.sender(), self.receivers(),
                                                   self.progress())]
        await self.chaos()
        self.say("faults healed; finishing: sender completes, receiver reads everything")
        self.finishing = True
        done, _ = await asyncio.wait(tasks[:2], timeout=300)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        res = self.ledger.summary()
        res.update({"seconds": round(time.monotonic() - t0, 1),
                    "finished_cleanly": len(done) == 2})
        return res

    def account(self) -> dict[str, Any]:
        """Every failure the daemons logged or the clients saw, classified
        (after the daemons stopped: their logs are complete)."""
        fails = list(self.client_failures)
        established: dict[str, list[tuple[float, str]]] = {}
        for h in (SENDER, RECEIVER):
            path = self.work / f"daemon-{h}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            f, est = parse_daemon_log(h, text)
            fails += f
            established[h] = est
        rows = classify_failures(fails, self.faults, self.restarts, established, time.time())
        bad = [r for r in rows if not r["explained"]]
        for r in rows:
            self.say(f"failure {r['clock']} {r['source']} {r['host']}->{r['peer']}: "
                     f"{r['reason'][:110]} | {'explained' if r['explained'] else 'UNEXPLAINED'}"
                     f": {r['why']} | faults {r['faults_active']}")
        return {"failures": rows, "unexplained_failures": len(bad),
                "failure_reasons": dict(Counter(_reason_kind(r["reason"]) for r in rows)),
                "fault_list": [{"start": round(x.start, 3),
                                "end": x.end and round(x.end, 3), "kind": x.kind,
                                "spec": x.spec} for x in self.faults],
                "restart_list": [{"host": r.host, "stop": round(r.stop, 3),
                                  "exited": r.exited and round(r.exited, 3),
                                  "up": r.up and round(r.up, 3)} for r in self.restarts]}


def _reason_kind(reason: str) -> str:
    """A failure reason without its figures (for counting)."""
    return re.sub(r"\d+(\.\d+)?", "N", re.sub(r" at /\S+", "", reason.split(" (")[0]))[:60]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--name", default="soak", help="testbed name (default soak)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("soak: needs root (it builds a namespace testbed)", file=sys.stderr)
        return 2
    from testbed import Testbed
    from transport.eventloop import new_event_loop

    work = Path(tempfile.mkdtemp(prefix="braid-soak-"))
    tb = Testbed.up(TOPOLOGY, name=a.name)
    soak = Soak(tb, work, a.seed, a.minutes)
    loop = new_event_loop()
    try:
        soak.say(f"soak: {a.minutes:g} min, seed {a.seed}, topology {TOPOLOGY.name}, "
                 f"work dir {work}")
        res = loop.run_until_complete(soak.run())
    finally:
        soak.stop_daemons()
        loop.close()
        tb.down()
    res.update(soak.account())
    soak.log.close()
    res.update({"minutes": a.minutes, "seed": a.seed, "topology": TOPOLOGY.name,
                "date": time.strftime("%Y-%m-%d"), "work": str(work)})
    text = json.dumps(res, indent=1)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    ok = res["lost"] == 0 and res["duplicates_other"] == 0 and res["corrupt"] == 0 \
        and res["unexplained_failures"] == 0
    return 0 if ok and res["finished_cleanly"] else 1


if __name__ == "__main__":
    sys.exit(main())
