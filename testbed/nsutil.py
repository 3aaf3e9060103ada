"""Small helpers to act inside a named network namespace without `ip`.

``setns`` changes the namespace of the calling *thread* only, so work that
must happen "inside" (sysctls, which /proc/sys/net resolves per caller) runs
on a short-lived thread, and child processes enter theirs in ``preexec_fn``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def netns_exists(name: str) -> bool:
    return netns_path(name).exists()


def enter(name: str) -> None:
    """Move the calling thread (or a child in preexec) into namespace ``name``."""
    fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(name: str, fn: Callable[[], T], timeout: float = 10.0) -> T:
    """Run ``fn`` on a thread that has entered namespace ``name``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            enter(name)
            box["result"] = fn()
        except BaseException as exc:  # handed back to the caller
            box["error"] = exc

    t = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"work in namespace {name} did not finish in {timeout}s")
    if "error" in box:
        raise box["error"]
    return box["result"]  # type: ignore[no-any-return]


def sysctls(name: str, values: dict[str, str]) -> None:
    def write() -> None:
        for key, value in values.items():
            Path("/proc/sys", *key.split(".")).write_text(value)

    run_in(name, write)


def preexec(name: str) -> Callable[[], None]:
    def fn() -> None:
        enter(name)

    return fn


def popen(name: str, argv: list[str], **kw: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen(argv, preexec_fn=preexec(name), **kw)


def run(name: str, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
    kw.setdefault("timeout", 60)
    return subprocess.run(argv, preexec_fn=preexec(name), **kw)


def ns_inode(name: str) -> int | None:
    try:
        return os.stat(netns_path(name)).st_ino
    except OSError:
        return None


def pids_in(names: Iterable[str]) -> list[int]:
    """Processes whose network namespace is one of ``names`` (like `ip netns pids`)."""
    inodes = {i for i in (ns_inode(n) for n in names) if i is not None}
    if not inodes:
        return []
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                out.append(int(entry))
        except OSError:
            continue
    return out


def kill_pids(pids: Iterable[int], grace: float = 2.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL what is left."""
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = pids
    while alive and time.monotonic() < deadline:
        for pid in alive:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap our own children
        alive = [p for p in alive if pid_alive(p)]
        if alive:
            time.sleep(0.02)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in alive:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def open_netns(name: str, **kw: Any) -> Any:
    """pyroute2's ``NetNS(name, **kw)``, with its helper child unable to
    signal this process. pyroute2 forks a child to enter the namespace and
    stops it with SIGTERM; a child forked from a process running an asyncio
    loop with signal handlers (``braid perf``, whose fault timeline runs in a
    thread) inherits the loop's wakeup fd, and a SIGTERM landing on the
    child's inherited handler wrote "SIGTERM" into the *parent's* loop:
    ``braid perf`` stopped as if interrupted (exit 130) when a timeline healed
    a host link (1 run in 3 of the README's block). With
    ``disable_mp_signal`` the child takes the default SIGTERM action at once."""
    import pyroute2.config
    from pyroute2 import NetNS

    pyroute2.config.disable_mp_signal = True
    return NetNS(name, **kw)
