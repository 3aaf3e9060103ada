"""Braid daemons on testbed hosts: ready configs, one key, start and stop by pid.

``braid testbed up`` calls ``write_host_configs``: the run directory then holds
``cluster.key`` (mode 0600) and ``hosts/<host>.toml`` for every host (every
plane's address, every other host as a peer, ``[connection] plane_rate`` from
the topology's host link rate). ``start_daemons`` runs ``braid daemon`` in each
host's namespace, records every process in the run state *before* it is
started (so ``braid testbed down`` removes it, also after a crash), and waits
for its control socket. Used by ``braid testbed daemons``, ``braid perf`` and
benchmarks.

Network safety: the daemons bind only the testbed's own addresses
(``10.p.i.2``) inside the testbed's namespaces; this process talks to them
only through Unix sockets in the run directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed import nsutil
from testbed.errors import TestbedError

REPO = Path(__file__).resolve().parents[1]
KEY_FILE = "cluster.key"
KEYLOG_FILE = "keylog.txt"
HOSTS_DIR = "hosts"
DAEMON_MARK = "tools.cli daemon"  # in the cmdline of every daemon started here
READY_TIMEOUT = 20.0


def plane_rate_bytes(topo: Any) -> float | None:
    """A host's line rate on one plane, bytes/s: the slowest shaped host link
    direction (None when no host link is shaped: keep the daemon default)."""
    rates = [port.rate_bps for link in topo.links if link.kind == "host"
             for port in (link.up, link.down) if port.rate_bps > 0]
    return min(rates) / 8 if rates else None


def key_path(tb: Any) -> Path:
    return Path(tb.run_dir) / KEY_FILE


def keylog_path(tb: Any) -> Path:
    return Path(tb.run_dir) / KEYLOG_FILE


def config_path(tb: Any, host: str) -> Path:
    return Path(tb.run_dir) / HOSTS_DIR / f"{host}.toml"


def socket_path(tb: Any, host: str) -> Path:
    return Path(tb.run_dir) / HOSTS_DIR / f"{host}.sock"


def log_path(tb: Any, host: str) -> Path:
    return Path(tb.run_dir) / HOSTS_DIR / f"{host}.log"


def host_config_text(tb: Any, host: str, plane_rate: float | None) -> str:
    def addrs(h: str) -> str:
        return ", ".join(f'"{tb.address(h, p)}"' for p in tb.planes)

    lines = [f"# written by 'braid testbed up' for host {host} of testbed {tb.name}",
             f"# start: braid testbed daemons up   (or: braid testbed exec {host} -- "
             f"braid daemon --config {config_path(tb, host)})",
             f'name = "{host}"', f'key = "../{KEY_FILE}"',
             f'socket = "{socket_path(tb, host)}"', f"planes = [{addrs(host)}]", ""]
    for peer in tb.hosts:
        if peer != host:
            lines += [f"[peers.{peer}]", f"planes = [{addrs(peer)}]", ""]
    if plane_rate is not None:
        lines += ["[connection]", f"plane_rate = {plane_rate:.6g}   # bytes/s: the host links' "
                  "rate in the topology", ""]
    return "\n".join(lines)


def write_host_configs(tb: Any) -> dict[str, Path]:
    """The key (kept if present) and one daemon config per host; host -> config path."""
    from wire.keys import new_cluster_key, write_key_file

    d = Path(tb.run_dir) / HOSTS_DIR
    d.mkdir(mode=0o700, exist_ok=True)
    if not key_path(tb).exists():
        write_key_file(key_path(tb), new_cluster_key())
    rate = plane_rate_bytes(tb.topo)
    out = {}
    for h in tb.hosts:
        path = config_path(tb, h)
        path.write_text(host_config_text(tb, h, rate))
        out[h] = path
    return out


def _daemon_objects(tb: Any) -> list[dict[str, Any]]:
    return [o for o in tb.state.objects("process") if o.get("role") == "daemon"]


def daemon_alive(obj: dict[str, Any]) -> bool:
    pid = obj.get("pid")
    return isinstance(pid, int) and nsutil.pid_alive(pid) and (
        DAEMON_MARK in nsutil.pid_cmdline(pid))


def running(tb: Any) -> dict[str, dict[str, Any]]:
    """host -> the recorded daemon process of that host that is still alive."""
    return {o["host"]: o for o in _daemon_objects(tb) if daemon_alive(o)}


def status(tb: Any) -> dict[str, dict[str, Any]]:
    """host -> {pid, alive, socket, config, log} for every host that ever had a daemon."""
    out: dict[str, dict[str, Any]] = {}
    for o in _daemon_objects(tb):
        out[o["host"]] = {"pid": o.get("pid"), "alive": daemon_alive(o),
                          "socket": str(socket_path(tb, o["host"])),
                          "config": str(config_path(tb, o["host"])),
                          "log": str(log_path(tb, o["host"]))}
    return out


def _tail(path: Path, n: int = 2) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n:]) or "(empty log)"


def _socket_ready(path: Path) -> bool:
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def start_daemons(tb: Any, hosts: list[str] | None = None, *, keylog: bool = True,
                  qlog_dir: Path | None = None, extra_args: list[str] | None = None,
                  timeout: float = READY_TIMEOUT, repo: Path | None = None) -> dict[str, int]:
    """Start a daemon on each host (default: all) that has none running; wait
    until every control socket answers. Returns host -> pid of those started.
    On failure the daemons started by this call are stopped again. ``repo``:
    run the daemon of another checkout of Braid (its ``tools.cli``, with
    ``PYTHONPATH`` set to it; ``braid bench paced --baseline-tree``), default
    this one."""
    tree = REPO if repo is None else Path(repo).resolve()
    hosts = list(tb.hosts if hosts is None else hosts)
    for h in hosts:
        if h not in tb.hosts:
            raise TestbedError(f"no host {h!r} in testbed {tb.name} (hosts {', '.join(tb.hosts)})")
    if not key_path(tb).exists() or not all(config_path(tb, h).exists() for h in hosts):
        write_host_configs(tb)
    alive = running(tb)
    started: dict[str, tuple[subprocess.Popen[Any], dict[str, Any]]] = {}
    try:
        for h in hosts:
            if h in alive:
                continue
            socket_path(tb, h).unlink(missing_ok=True)
            argv = [sys.executable, "-m", "tools.cli", "daemon", "--config",
                    str(config_path(tb, h))]
            if keylog:
                argv += ["--keylog", str(keylog_path(tb))]
            if qlog_dir is not None:
                argv += ["--qlog", str(qlog_dir / f"{h}.qlog")]
            argv += list(extra_args or [])
            obj = tb.state.record(type="process", role="daemon", host=h, pid=None, cmd=argv)
            env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
            with open(log_path(tb, h), "ab") as log:
                proc = tb.popen(h, argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, cwd=str(tree), env=env)
            obj["pid"] = proc.pid
            tb.state.save()
            started[h] = (proc, obj)
        deadline = time.monotonic() + timeout
        for h, (proc, _obj) in started.items():
            while not _socket_ready(socket_path(tb, h)):
                if proc.poll() is not None:
                    raise TestbedError(f"the daemon on {h} exited with code {proc.returncode}: "
                                    f"{_tail(log_path(tb, h))} (log {log_path(tb, h)})")
                if time.monotonic() > deadline:
                    raise TestbedError(f"the daemon on {h} did not answer on "
                                    f"{socket_path(tb, h)} within {timeout:g} s "
                                    f"(log {log_path(tb, h)})")
                time.sleep(0.05)
    except BaseException:
        stop_daemons(tb, list(started))
        raise
    return {h: p.pid for h, (p, _o) in started.items()}


def stop_daemons(tb: Any, hosts: list[str] | None = None, grace: float = 10.0) -> list[str]:
    """SIGTERM (the daemon drains and closes), SIGKILL after ``grace`` seconds.
    Returns the hosts whose daemon was running."""
    targets = [o for o in _daemon_objects(tb) if hosts is None or o["host"] in hosts]
    live = [o for o in targets if daemon_alive(o)]
    for o in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(o["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    for o in live:
        while nsutil.pid_alive(o["pid"]) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(o["pid"], os.WNOHANG)
            time.sleep(0.02)
        if nsutil.pid_alive(o["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(o["pid"], signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(o["pid"], 0)
    done = {o["host"] for o in live}
    tb.state.data["objects"] = [o for o in tb.state.data["objects"]
                                if not (o in targets and not daemon_alive(o))]
    tb.state.save()
    for h in done:
        socket_path(tb, h).unlink(missing_ok=True)
    return sorted(done, key=lambda h: tb.hosts.index(h))


__all__ = ["config_path", "key_path", "keylog_path", "plane_rate_bytes", "running",
           "socket_path", "start_daemons", "status", "stop_daemons", "write_host_configs"]
