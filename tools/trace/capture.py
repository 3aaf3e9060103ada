"""``braid trace capture``: tcpdump when installed, else the AF_PACKET writer.

Each capture is a child process, run inside the target namespace with
``ip netns exec`` (so the parent never changes namespace), started with its
stderr in a file that tells when it is listening, and stopped with SIGINT so
the pcap is flushed and complete.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tools.common.errors import UserError
from wire.constants import UDP_PORT

_READY_MARK = "listening on"
_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Target:
    output: Path
    netns: str | None = None
    iface: str | None = None


def choose_backend(backend: str = "auto") -> str:
    if backend == "auto":
        return "tcpdump" if shutil.which("tcpdump") else "afpacket"
    if backend == "tcpdump" and not shutil.which("tcpdump"):
        raise UserError("tcpdump is not installed (use --backend afpacket)")
    return backend


def command(target: Target, *, backend: str, port: int = UDP_PORT, count: int | None = None,
            duration: float | None = None) -> list[str]:
    """The argv that captures ``target`` (inside its namespace)."""
    if backend == "tcpdump":
        # --immediate-mode: without it libpcap holds packets in a ring block for up
        # to a second, and a SIGINT in that second loses them.
        argv = ["tcpdump", "-n", "-U", "--immediate-mode", "-s", "0", "-Z", "root",
                "-i", target.iface or "any",
                "-w", str(target.output)]
        if count is not None:
            argv += ["-c", str(count)]
        argv.append(f"udp port {port}")
    else:
        argv = [sys.executable, "-m", "tools.trace.afpacket", "-o", str(target.output),
                "--port", str(port)]
        if target.iface:
            argv += ["--iface", target.iface]
        if count is not None:
            argv += ["--count", str(count)]
        if duration is not None:
            argv += ["--duration", str(duration)]
    if target.netns:
        argv = ["ip", "netns", "exec", target.netns, *argv]
    return argv


@dataclass
class CaptureProcess:
    """One running capture; ``stop()`` ends it and returns its exit code."""

    target: Target
    proc: subprocess.Popen[bytes]
    log: IO[str]
    backend: str
    _stopped: bool = field(default=False)

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _READY_MARK in self.log_text():
                # tcpdump says "listening" just before its first poll; give it a breath.
                time.sleep(0.05)
                return
            if self.proc.poll() is not None:
                raise UserError(f"capture on {self._where()} failed: {self.log_text().strip()}")
            time.sleep(0.02)
        self.stop()
        raise UserError(f"capture on {self._where()} did not start within {timeout:.0f} s")

    def _where(self) -> str:
        t = self.target
        return f"{t.iface or 'all interfaces'}{f' in {t.netns}' if t.netns else ''}"

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        if self.proc.poll() is None:
            # SIGINT reaches tcpdump/afpacket through `ip netns exec` (it execs).
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._stopped:
            self._stopped = True
            self.log.close()
            os.unlink(self.log.name)
        return int(self.proc.returncode or 0)


def start(target: Target, *, backend: str = "auto", port: int = UDP_PORT,
          count: int | None = None, duration: float | None = None) -> CaptureProcess:
    backend = choose_backend(backend)
    argv = command(target, backend=backend, port=port, count=count, duration=duration)
    log = tempfile.NamedTemporaryFile("w+", prefix="braid-capture-", suffix=".log",  # noqa: SIM115
                                      delete=False)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=env)
    except OSError as exc:
        log.close()
        os.unlink(log.name)
        raise UserError(f"cannot run {argv[0]}: {exc}") from None
    return CaptureProcess(target, proc, log, backend)


def targets_from_args(args: argparse.Namespace) -> list[Target]:
    from tools.trace import testbed_lookup

    out = Path(args.output)
    if args.all:
        found = testbed_lookup.all_host_interfaces(args.testbed)
        if not found:
            raise UserError("the running testbed has no host interfaces")
        if out.suffix != ".pcap":
            out.mkdir(parents=True, exist_ok=True)
            return [Target(out / f"{h}-{i}.pcap", ns, i) for h, ns, i in found]
        return [Target(out.with_name(f"{out.stem}-{h}-{i}.pcap"), ns, i) for h, ns, i in found]
    netns, iface = args.netns, args.iface
    if args.host:
        netns, tb_iface = testbed_lookup.resolve_host(args.host, args.plane, args.testbed)
        iface = iface or tb_iface
    elif args.plane is not None:
        raise UserError("--plane needs --host")
    return [Target(out, netns, iface)]


def run_capture_command(args: argparse.Namespace) -> int:
    targets = targets_from_args(args)
    port = args.port or UDP_PORT
    procs: list[CaptureProcess] = []
    try:
        for t in targets:
            procs.append(start(t, backend=args.backend, port=port, count=args.count,
                               duration=args.duration))
        for p in procs:
            p.wait_ready()
        print(f"capturing with {procs[0].backend} to "
              f"{', '.join(str(t.output) for t in targets)} (Ctrl-C stops)", file=sys.stderr)
        grace = 0.5 if procs[0].backend == "afpacket" else 0.0
        deadline = None if args.duration is None else time.monotonic() + args.duration + grace
        while any(p.running() for p in procs):
            # Children that know the duration (AF_PACKET) get a moment to end on their own.
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    finally:
        codes = [p.stop() for p in procs]
    bad = [str(p.target.output) for p, c in zip(procs, codes, strict=True) if c not in (0, 130)]
    if bad:
        print(f"braid: capture ended with an error for {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0
