"""The claims testbed: fabric, Braid daemons, MPTCP endpoints, worker runs.

One fabric serves every row (bring-up costs seconds; a row costs a run):
2 planes, each a leaf-spine (2 leaves x 2 spines), 100 Mbit/s links,
a link element on every link (trim + ECN as in the demo fabric): the eBPF
switch ports by default, the userspace element with ``--element userspace``
(which adds 20 us per link and takes delay faults). A Braid daemon runs on
every host for the whole claims run (a minimal start-up of its own, not
``braid testbed daemons``). Kernel MPTCP: every host announces each plane address as a
``signal`` endpoint and accepts as many, so a connection opened on one plane
gets one joined subflow per other plane, each routed on its own plane.

Network safety: every process runs inside the testbed's namespaces
(``tb.popen``); all of them and the fabric are removed in ``down()``, which
the caller runs in ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tools.claims import cpu as claims_cpu
from tools.claims.fidelity import gap_window
from tools.claims.run_io import _fire, _Lines, _parse_result, _RunFailed
from tools.common.errors import UserError

REPO = Path(__file__).resolve().parents[2]
PLANES = 2
RATE_MBIT = 100
#: The links' MTU (IP packet bytes). Every stack sizes its packets to it:
#: Braid's daemons size DATA to the path MTU, TCP's MSS follows the route.
MTU = 1500
#: Bounds of ``configure`` (a run's plane count, per-plane link rate, MTU).
PLANES_RANGE = (2, 8)
RATE_RANGE = (5, 1000)
MTU_RANGE = (1280, 9000)


def configure(planes: int = 2, rate_mbit: int = 100, mtu: int = 1500) -> None:
    """Set the fabric's plane count, per-plane link rate and MTU for this
    claims run (``braid bench claims --planes/--rate/--mtu``). Rows read them
    at run time."""
    global PLANES, RATE_MBIT, MTU
    if not PLANES_RANGE[0] <= planes <= PLANES_RANGE[1]:
        raise UserError(f"--planes {planes}: the claims fabric takes "
                        f"{PLANES_RANGE[0]}..{PLANES_RANGE[1]} planes")
    if not RATE_RANGE[0] <= rate_mbit <= RATE_RANGE[1]:
        raise UserError(f"--rate {rate_mbit}: the claims fabric takes "
                        f"{RATE_RANGE[0]}..{RATE_RANGE[1]} Mbit/s per plane")
    if not MTU_RANGE[0] <= mtu <= MTU_RANGE[1]:
        raise UserError(f"--mtu {mtu}: the claims fabric takes "
                        f"{MTU_RANGE[0]}..{MTU_RANGE[1]} bytes")
    PLANES, RATE_MBIT, MTU = planes, rate_mbit, mtu
TCP_PORT = 5301


def topology(hosts: int, element: str = "ebpf") -> dict[str, Any]:
    """The claims fabric. ``element``: "ebpf" (the kernel-speed switch ports,
    default; no propagation delay, so the latency case of the asymmetric row
    is skipped) or "userspace" (20 us per link, every fault kind)."""
    link: dict[str, Any] = {"rate": f"{RATE_MBIT}mbit", "buffer": "256KB",
                            "mtu": MTU, "element": element}
    if element == "userspace":
        link["delay"] = "20us"
    return {
        "hosts": hosts, "planes": PLANES,
        "description": f"braid bench claims: {hosts} hosts x {PLANES} planes, leaf-spine",
        "fabric": {"kind": "leafspine", "leaves": 2, "spines": 2},
        "link": {**link,
                 "fabric": {"down": {"trim": "32KB", "ecn": "16KB"}, "up": {"ecn": "16KB"}},
                 "host": {"down": {"trim": "32KB"}}},
    }


def parse_connection(items: list[str], planes: int = 2) -> dict[str, Any]:
    """``--connection KEY=VALUE`` options: daemon ``[connection]`` settings
    for every host of the claims run (an A/B of a transport setting on the
    testbed). VALUE is a TOML scalar (``3e-4``, ``16``, ``true``,
    ``"name"``); ``congestion_params.NAME`` sets one parameter of the
    congestion controller (a TOML dotted key, over the profile's); the key
    and the value are checked as the daemon would."""
    import dataclasses
    import tomllib

    from transport.config import ConnectionConfig, profile_values

    names = {f.name for f in dataclasses.fields(ConnectionConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--connection {item!r}: expected KEY=VALUE, e.g. ack_delay=3e-4")
        head, dot, sub = key.partition(".")
        if dot and head == "congestion_params" and sub:
            pass  # one parameter of the controller, over the profile's (docs/daemon.md)
        elif key not in names or key == "planes":
            raise UserError(f"--connection {item!r}: unknown key {key!r} (a [connection] "
                            f"setting of the daemon, docs/daemon.md)")
        try:
            value = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"--connection {item!r}: the value is not a TOML scalar "
                            f"({exc})") from None
        if not isinstance(value, bool | int | float | str):
            raise UserError(f"--connection {item!r}: the value must be a number, true/false "
                            f"or a string")
        out[key] = value
    base = profile_values("host")
    flat = {k: v for k, v in out.items() if "." not in k}
    cc = {k.partition(".")[2]: v for k, v in out.items() if "." in k}
    if cc:
        from congestion.registry import check

        flat["congestion_params"] = {**base["congestion_params"], **cc}
        try:
            check(str(flat.get("congestion", ConnectionConfig().congestion)),
                  flat["congestion_params"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"--connection congestion_params.*: {exc}") from None
    try:
        ConnectionConfig(**{**base, "planes": planes, **flat})
    except (TypeError, ValueError) as exc:
        raise UserError(f"--connection: {exc}") from None
    return out


def connection_toml(settings: dict[str, Any]) -> str:
    """The ``[connection]`` lines of ``settings`` (scalars), in TOML."""
    lines = []
    for k, v in settings.items():
        if isinstance(v, bool):
            text = "true" if v else "false"
        elif isinstance(v, float):
            text = repr(v)  # shortest round-trip form; inf/nan are refused by the config
        else:
            text = json.dumps(v)  # int, or a string with TOML-compatible escapes
        lines.append(f"{k} = {text}\n")
    return "".join(lines)


class ClaimsFabric:
    def __init__(self, hosts: int, name: str, work: Path, daemon_args: list[str] | None = None,
                 element: str = "ebpf", connection: dict[str, Any] | None = None,
                 queue_wait: bool = False, topo: dict[str, Any] | None = None) -> None:
        self.daemon_args = daemon_args or []
        #: A topology of its own (a row's two-host tail-drop testbed), else ``topology``.
        self.topo = topo
        #: Daemons measure their socket-queue waits (``queue_wait = true``);
        #: each Braid run's share is ``last_queue_wait``.
        self.queue_wait = queue_wait
        self.last_queue_wait: dict[str, Any] | None = None
        #: ``[connection]`` settings written into every daemon's config.
        self.connection = dict(connection or {})
        self.element = element
        self.n_hosts = hosts
        self.name = name
        self.work = work.resolve()
        self.tb: Any = None
        self.daemons: dict[int, subprocess.Popen[Any]] = {}
        #: The last run's CPU (tools/claims/cpu.py ``run_share``), None if unknown.
        self.last_cpu: dict[str, Any] | None = None
        #: The last run's busy-link departure gaps per port (fidelity.gap_window).
        self.last_gaps: dict[str, Any] | None = None
        self.logs: list[Any] = []
        self.run_id = int(time.time()) % 100000 * 100

    # -- bring-up --------------------------------------------------------------------------
    def up(self) -> None:
        import shutil

        from testbed import Testbed
        from wire.keys import new_cluster_key, write_key_file

        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.work)  # our own run directory from an earlier run
        self.work.mkdir(parents=True, exist_ok=True)
        self.tb = Testbed.up(self.topo or topology(self.n_hosts, self.element), name=self.name)
        write_key_file(self.work / "cluster.key", new_cluster_key())
        for h in range(self.n_hosts):
            cfg = self._daemon_config(h)
            log = open(self.work / f"daemon-h{h}.log", "w")  # noqa: SIM115 - closed in down()
            self.logs.append(log)
            env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
            self.daemons[h] = self.tb.popen(
                f"h{h}", [sys.executable, "-m", "tools.cli", "daemon", "--config", str(cfg),
                          *[a.replace("{host}", f"h{h}") for a in self.daemon_args]],
                cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env)
        for h in range(self.n_hosts):
            self._wait_socket(h)
        for h in range(self.n_hosts):
            self._mptcp_endpoints(h)

    def _daemon_config(self, h: int) -> Path:
        tb = self.tb

        def planes(i: int) -> str:
            return ", ".join(f'"{tb.address(f"h{i}", p)}"' for p in tb.planes)

        text = (f'# generated by braid bench claims\nname = "h{h}"\nkey = "cluster.key"\n'
                f'socket = "{self.socket(h)}"\nplanes = [{planes(h)}]\n'
                + ("queue_wait = true\n" if self.queue_wait else ""))
        for j in range(self.n_hosts):
            if j != h:
                text += f"\n[peers.h{j}]\nplanes = [{planes(j)}]\n"
        from testbed.topology import connection_plane_rate

        rate = connection_plane_rate(tb.topo)
        conn: dict[str, Any] = {}
        if rate is not None:  # NSCC sizes its window and pacing to the plane's bottleneck
            conn["plane_rate"] = float(f"{rate:.6g}")
        conn.update(self.connection)  # --connection: the run's own settings win
        if conn:
            text += "\n[connection]\n" + connection_toml(conn)
        path = self.work / f"h{h}.toml"
        path.write_text(text)
        return path

    def socket(self, h: int) -> Path:
        return self.work / f"h{h}.sock"

    def _wait_socket(self, h: int, timeout: float = 60.0) -> None:
        import socket as s_

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.daemons[h].poll() is not None:
                raise UserError(f"daemon on h{h} exited (code {self.daemons[h].returncode}); "
                                f"log {self.work / f'daemon-h{h}.log'}")
            if self.socket(h).exists():
                with s_.socket(s_.AF_UNIX, s_.SOCK_STREAM) as s, contextlib.suppress(OSError):
                    s.connect(str(self.socket(h)))
                    return
            time.sleep(0.1)
        raise UserError(f"daemon on h{h} not ready within {timeout:.0f} s")

    def _mptcp_endpoints(self, h: int) -> None:
        def ip(*args: str) -> None:
            r = self.tb.exec(f"h{h}", ["ip", *args], capture_output=True, text=True)
            if r.returncode != 0:
                raise UserError(f"h{h}: ip {' '.join(args)}: {r.stderr.strip()}")

        ip("mptcp", "endpoint", "flush")
        ip("mptcp", "limits", "set", "subflow", str(2 * PLANES), "add_addr_accepted",
           str(2 * PLANES))
        for p in self.tb.planes:
            ip("mptcp", "endpoint", "add", self.tb.address(f"h{h}", p), "dev", f"p{p}",
               "signal")

    def daemons_alive(self) -> list[str]:
        return [f"h{h}" for h, p in self.daemons.items() if p.poll() is not None]

    def down(self) -> None:
        for p in self.daemons.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.terminate()
        for p in self.daemons.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(timeout=5)
        for f in self.logs:
            f.close()
        if self.tb is not None:
            self.tb.down()
            self.tb = None

    # -- faults ----------------------------------------------------------------------------
    def heal_all(self) -> None:
        """Every link back to the topology's settings (faults and rows undone)."""
        from testbed.faults import heal, set_ports

        heal(self.tb, list(self.tb.topo.links))
        for lk in self.tb.topo.links:
            if not lk.element:  # a plain (tail-drop) link has no port to set
                continue
            for d, cfg in (("up", lk.up), ("down", lk.down)):
                set_ports(self.tb, [lk], d, {"trim": cfg.trim, "ecn": cfg.ecn})

    def set_links(self, links: list[str], direction: str, changes: dict[str, Any]) -> None:
        from testbed.faults import set_ports

        set_ports(self.tb, [self.tb.topo.link(n) for n in links], direction, changes)

    def port_totals(self) -> dict[str, int]:
        tot: dict[str, int] = {}
        for st in self.tb.port_stats().values():
            for k in ("trimmed", "dropped", "lost", "blackholed", "marked", "rx_overflow"):
                tot[k] = tot.get(k, 0) + int(st.get(k, 0) or 0)
        return tot

    # -- one run ---------------------------------------------------------------------------
    def addrs(self) -> dict[str, list[str]]:
        return {str(h): [self.tb.address(f"h{h}", p) for p in self.tb.planes]
                for h in range(self.n_hosts)}

    def run(self, stack: str, specs: dict[int, dict[str, Any]],
            faults: list[tuple[float, str]] | None = None, timeout: float = 120.0
            ) -> dict[int, dict[str, Any]]:
        """Start one worker per host, start them together, fire ``faults``
        (seconds after go), collect every result. Failures come back as
        results with ``errors``; nothing is left running."""
        from testbed.faults import compile_fault, parse_fault

        self.run_id += 1
        self.last_cpu = None
        self.last_gaps = None
        self.last_queue_wait = None
        waits0: dict[int, Any] | None = None
        steps = []
        for at, text in faults or []:
            steps += [(at + s.offset, s.label, s.apply)
                      for s in compile_fault(self.tb, parse_fault(text))]
        procs: dict[int, subprocess.Popen[bytes]] = {}
        readers: dict[int, _Lines] = {}
        results: dict[int, dict[str, Any]] = {}
        fired: list[dict[str, Any]] = []
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        errlogs: dict[int, Any] = {}
        sampler: claims_cpu.Sampler | None = None
        try:
            for h, spec in specs.items():
                full = {"run": self.run_id, "me": h, "stack": stack, "addrs": self.addrs(),
                        "socket": str(self.socket(h)), "port": TCP_PORT,
                        "timeout": timeout, "result_file": str(self._result_file(h)), **spec}
                errlogs[h] = open(self._errlog(h), "w")  # noqa: SIM115 - closed below
                procs[h] = self.tb.popen(f"h{h}", [sys.executable, "-m", "tools.claims.worker",
                                                   json.dumps(full)],
                                         cwd=str(REPO), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=errlogs[h], env=env)
                readers[h] = _Lines(procs[h])
            deadline = time.monotonic() + 60
            for h, rd in readers.items():
                line = rd.readline(deadline)
                if line is None or '"ready"' not in line:
                    raise _RunFailed(h, _parse_result(line) or {
                        "errors": [f"h{h}: worker not ready: {line}"]})
            if self.queue_wait and stack.startswith("braid"):
                waits0 = self.queue_waits()
            gaps0 = self._port_gaps()
            go = time.monotonic() + 0.3
            for p in procs.values():
                assert p.stdin is not None
                p.stdin.write(f"go {go}\n".encode())
                p.stdin.flush()
            sampler = claims_cpu.Sampler().start()
            pids = {h: d.pid for h, d in self.daemons.items()}
            cpu0 = (claims_cpu.machine(), time.monotonic(),
                    claims_cpu.processes_seconds(pids), sampler,
                    claims_cpu.processes_waits(pids))
            thread = None
            if steps:
                thread = threading.Thread(target=_fire, args=(steps, go, fired), daemon=True)
                thread.start()
            end = time.monotonic() + timeout
            for h, rd in readers.items():
                for _ in range(1000):
                    line = rd.readline(end)
                    if line is None:
                        results[h] = self._no_result(h, procs[h], rd, timeout)
                        break
                    res = _parse_result(line)
                    if res is not None:
                        results[h] = res
                        break
                    rd.unparsed.append(f"{len(line)} chars: {line[:80]!r}...{line[-80:]!r}")
            self.last_cpu = self._cpu_share(cpu0, results)
            if gaps0:
                self.last_gaps = gap_window(gaps0, self._port_gaps())
            if waits0 is not None:
                self.last_queue_wait = self._queue_wait_share(waits0, self.queue_waits())
            if thread is not None:
                thread.join(timeout=30)
        except _RunFailed as exc:
            results[exc.host] = exc.result
        finally:
            if sampler is not None:
                sampler.stop()
            for p in procs.values():
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
                for f in (p.stdin, p.stdout):
                    if f is not None:
                        with contextlib.suppress(OSError):
                            f.close()
            for f in errlogs.values():
                f.close()
            if steps:
                self.heal_all()
        for h in specs:
            results.setdefault(h, {"errors": [f"h{h}: run aborted before its result"]})
            results[h]["fired"] = fired
        if stack == "braid" and not self.daemons_alive():
            for h, n in self.drain(list(specs)).items():
                results[h]["leftover"] = n
        dead = self.daemons_alive()
        if stack == "braid" and dead:
            raise UserError(f"Braid daemon(s) exited during a run: {', '.join(dead)}")
        return results


    def _port_gaps(self) -> dict[str, Any]:
        """The eBPF ports' departure-gap histograms now ({} if unreadable)."""
        try:
            gaps: dict[str, Any] = self.tb.port_gaps()
        except Exception:  # a fidelity record must never fail a run
            return {}
        return gaps

    def _cpu_share(self, start: tuple[claims_cpu.Jiffies | None, float, dict[int, float],
                                      claims_cpu.Sampler, dict[int, float]],
                   results: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
        """The run's CPU from go (``start``) to now (tools/claims/cpu.py)."""
        m0, t0, d0, sampler, w0 = start
        samples = sampler.stop()
        wall = time.monotonic() - t0
        pids = {h: d.pid for h, d in self.daemons.items()}
        d1 = claims_cpu.processes_seconds(pids)
        w1 = claims_cpu.processes_waits(pids)
        per = {h: max(0.0, d1[h] - d0[h]) for h in d1 if h in d0}
        ws = [float(r["cpu_s"]) for r in results.values() if r.get("cpu_s") is not None]
        out = claims_cpu.run_share(m0, claims_cpu.machine(), wall, os.cpu_count() or 1,
                                   sum(per.values()) if d0 else None, sum(ws) if ws else None,
                                   samples)
        if out is not None and per and wall > 0:
            # Each daemon's share of one core, idle ones included: what a
            # host with nothing to do costs is part of the picture.
            out["daemon_cores"] = {f"h{h}": round(c / wall, 3) for h, c in sorted(per.items())}
        waits = {h: max(0.0, w1[h] - w0[h]) for h in w1 if h in w0}
        if out is not None and waits and wall > 0:
            # How long each daemon was ready to run but waited for a core
            # (the share of the run): the hosts' CPU contention, which the
            # machine's busy share does not show (reported, not judged).
            out["daemon_waits"] = {f"h{h}": round(w / wall, 3) for h, w in sorted(waits.items())}
            out["daemons_wait"] = max(out["daemon_waits"].values())
        return out

    def queue_waits(self) -> dict[int, Any]:
        """Each daemon's socket-queue waits so far (``QueueWait``; hosts whose
        daemon does not answer are left out)."""
        import asyncio

        from transport.api import BraidError, connect
        from transport.queue_wait import QueueWait

        async def one(h: int) -> QueueWait | None:
            c = await asyncio.wait_for(connect(str(self.socket(h))), 5)
            try:
                st = await asyncio.wait_for(c.stats(), 5)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.close(), 5)
            s = st.get("io", {}).get("queue_wait")
            return QueueWait.from_summary(s) if isinstance(s, dict) else None

        async def every() -> dict[int, Any]:
            out: dict[int, Any] = {}
            for h in self.daemons:
                with contextlib.suppress(BraidError, OSError, TimeoutError, ValueError):
                    q = await one(h)
                    if q is not None:
                        out[h] = q
            return out

        return asyncio.run(every())

    @staticmethod
    def _queue_wait_share(before: dict[int, Any], after: dict[int, Any]) -> dict[str, Any]:
        """Per host that read anything during the run: its socket-queue waits
        then (reads, mean / p50 / p99 / max in µs; quantiles and the max are
        log2 bucket upper bounds)."""
        out: dict[str, Any] = {}
        for h, q in sorted(after.items()):
            if h in before:
                d = q.since(before[h])
                if d.count:
                    s = d.summary()
                    del s["buckets"]
                    out[f"h{h}"] = {k: round(v, 1) if isinstance(v, float) else v
                                    for k, v in s.items()}
        return out

    def drain(self, hosts: list[int], timeout: float = 20.0) -> dict[int, Any]:
        """Empty the hosts' daemon inboxes after a run: messages that arrived
        after their receiver left (a sender's last messages in flight at its
        stop time) would otherwise be the next run's first ones, ahead of its
        own in every peer's queue. Waits until no daemon of ``hosts`` has a
        message queued to send or waiting in its inbox (bounded by
        ``timeout``); returns per host what was dropped, and what was still
        there at the deadline."""
        import asyncio

        return asyncio.run(self._drain(hosts, timeout))

    async def _drain(self, hosts: list[int], timeout: float) -> dict[int, Any]:
        import asyncio

        from transport.api import BraidError, connect

        out: dict[int, Any] = {}
        clients: dict[int, Any] = {}
        readers: list[asyncio.Task[None]] = []

        async def swallow(h: int, c: Any) -> None:
            with contextlib.suppress(BraidError, OSError):
                while True:
                    await c.recv()
                    out[h]["messages"] += 1

        try:
            for h in hosts:
                clients[h] = await asyncio.wait_for(connect(str(self.socket(h))), 5)
                out[h] = {"messages": 0}
            for h, c in clients.items():
                readers.append(asyncio.ensure_future(swallow(h, c)))
            end = time.monotonic() + timeout
            busy: dict[int, Any] = {}
            while time.monotonic() < end:
                busy = {}
                for h, c in clients.items():
                    st = await asyncio.wait_for(c.stats(), 5)
                    box = st.get("inbox", {})
                    sending = sum(int(u.get("messages", 0)) for u in st.get("unacked", {}).values())
                    if box.get("messages") or box.get("handed_out") or sending:
                        busy[h] = {"inbox": box.get("messages"), "sending": sending}
                if not busy:
                    break
                await asyncio.sleep(0.05)
            for h, b in busy.items():
                out[h]["not_drained"] = b
        except (BraidError, OSError, TimeoutError) as exc:
            for h in hosts:
                out.setdefault(h, {})["error"] = f"drain: {exc}"
        finally:
            for t in readers:
                t.cancel()
            for c in clients.values():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.close(), 5)
        return out

    def _result_file(self, h: int) -> Path:
        return self.work / f"worker-{self.run_id}-h{h}.result"

    def _errlog(self, h: int) -> Path:
        return self.work / f"worker-{self.run_id}-h{h}.err"

    def _no_result(self, h: int, proc: subprocess.Popen[bytes], rd: _Lines,
                   timeout: float) -> dict[str, Any]:
        """A worker gave no result line on stdout. If it exited after writing
        its result file, that is its result (``stdout_lost`` says what
        happened); otherwise the reason: it exited (its code or signal, the
        last line of its stderr, what it printed instead) or it was still
        running at the deadline. Never a failure without a reason."""
        if not rd.eof:
            return {"errors": [f"h{h}: worker gave no result within {timeout:.0f} s "
                               f"(still running; stderr {self._errlog(h)})"]}
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        code = proc.returncode
        how = ("still running with its stdout closed" if code is None else
               f"killed by signal {-code}" if code < 0 else f"exit code {code}")
        tail = ""
        with contextlib.suppress(OSError):
            lines = [x for x in self._errlog(h).read_text(errors="replace").splitlines()
                     if x.strip()]
            if lines:
                tail = f"; stderr: {lines[-1][:300]}"
        if rd.unparsed:
            tail += f"; unparsed output: {rd.unparsed[-1]}"
        why = f"h{h}: worker exited without a result line ({how}){tail}"
        with contextlib.suppress(OSError, ValueError, TypeError):
            res = _parse_result(self._result_file(h).read_text())
            if res is not None:
                res["stdout_lost"] = why + "; result read from its result file"
                return res
        return {"errors": [why + "; no result file"]}
