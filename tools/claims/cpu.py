"""Where the machine's CPU went during a claims run.

The rows' figures mean something only when the hosts were not themselves the
bottleneck, and on a 2-core machine they often are (docs/claims.md, "What
limits these figures"). Each run therefore records, from go to its last
result, how busy the whole machine was (``/proc/stat``: every CPU, the
kernel's packet work and whatever else runs on the machine included), how
much of it the hypervisor took (steal), and how much the project's own
processes used: the Braid daemons (``/proc/<pid>/stat``) and the workers
(each reports its CPU seconds since go). Shares are of all CPUs: 1.0 is
every core busy for the whole run. A run's mean hides its bursts, so a
sampler also reads the machine every 100 ms and the run records the share
of those intervals in which it was saturated (>= 95% busy or stolen).

Busy is what was not idle. ``/proc/stat``'s busy columns (user, system,
softirq, ...) are sampled at the scheduler tick, and a tickless idle CPU
has no tick: the kernel's packet work run from interrupts on an idle CPU
(the emulated fabric's forwarding, most of what a kernel stack costs here)
lands in none of them, while the idle column, kept to the microsecond, does
not count it either. So a live reading (``machine``) takes the time that
passed (the monotonic clock, times the CPUs) less idle, iowait and steal as
busy; on this machine the tick columns missed up to half of kernel TCP's
busy time on the testbed ([decision 0043](docs/decisions/0043-busy-is-what-was-not-idle.md)).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Jiffies:
    """The machine's CPU counters (``/proc/stat``'s ``cpu`` line), in ticks;
    only differences between two readings mean anything."""
    busy: float
    steal: float
    total: float


def _cpus(text: str) -> int:
    """CPUs in a ``/proc/stat`` text (its ``cpuN`` lines: the online ones)."""
    return sum(1 for line in text.splitlines() if line[:3] == "cpu" and line[3:4].isdigit())


def parse_stat(text: str, wall_s: float | None = None) -> Jiffies:
    """The aggregate ``cpu`` line of ``/proc/stat``: user nice system idle
    iowait irq softirq steal [guest guest_nice] (guest time is already
    counted in user and nice, so it is left out of the total).

    Without ``wall_s``, busy is the sum of the busy columns and the total
    the sum of all. With ``wall_s`` (the monotonic clock when the text was
    read), the total is that clock times the CPUs and busy is the total less
    idle, iowait and steal: the time no tick saw (interrupt work on a
    tickless idle CPU) counts as busy (module docstring)."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            v = [int(x) for x in f[1:9]] + [0] * max(0, 8 - len(f[1:9]))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            cpus = _cpus(text)
            if wall_s is not None and cpus:
                total = wall_s * _TICK * cpus
                return Jiffies(busy=total - idle - iowait - steal, steal=steal, total=total)
            busy = user + nice + system + irq + softirq
            return Jiffies(busy=busy, steal=steal, total=busy + idle + iowait + steal)
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def _read_stat() -> tuple[str, float]:
    """``/proc/stat``'s text and the monotonic clock when it was read."""
    t0 = time.monotonic()
    with open("/proc/stat") as f:
        text = f.read()
    return text, (t0 + time.monotonic()) / 2


def machine() -> Jiffies | None:
    """The machine's counters now, busy as what was not idle."""
    try:
        text, wall = _read_stat()
        return parse_stat(text, wall)
    except (OSError, ValueError):
        return None


def process_seconds(pid: int) -> float | None:
    """User + system CPU seconds a live process has used, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def process_system_seconds(pid: int) -> float | None:
    """System (kernel) CPU seconds a live process has used, or None if gone:
    its system calls and the softirq work the kernel ran on their way out
    (on a namespace testbed, much of the emulated fabric's forwarding)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[12]) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def wait_seconds(pid: int) -> float | None:
    """Seconds a live process has spent runnable but waiting for a CPU (its
    run-queue wait, ``/proc/<pid>/schedstat``'s second field), or None if
    gone. A host of the testbed is a process sharing the machine's cores
    with the other hosts and the fabric; on its own hardware it would not
    wait for one, so this is time the emulation took from it."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _per_pid(pids: Mapping[int, int], read: Callable[[int], float | None]) -> dict[int, float]:
    """``read`` for each key's pid; the gone ones are left out."""
    out: dict[int, float] = {}
    for key, pid in pids.items():
        s = read(pid)
        if s is not None:
            out[key] = s
    return out


def processes_waits(pids: Mapping[int, int]) -> dict[int, float]:
    """``wait_seconds`` for each key's pid; the gone ones are left out."""
    return _per_pid(pids, wait_seconds)


def processes_seconds(pids: Mapping[int, int]) -> dict[int, float]:
    """``process_seconds`` for each key's pid; the gone ones are left out."""
    return _per_pid(pids, process_seconds)


#: An interval counts as saturated at this share of all CPUs busy.
SATURATED = 0.95
#: The sampler's interval (seconds).
SAMPLE_S = 0.1


def busy_between(a: Jiffies, b: Jiffies, steal: bool = False) -> float | None:
    """The share of all CPUs busy from ``a`` to ``b`` (None: no tick
    elapsed); with ``steal``, what the hypervisor took counts as busy too.
    Within [0, 1]: the clock and the counters are read a moment apart."""
    total = b.total - a.total
    used = b.busy - a.busy + (b.steal - a.steal if steal else 0)
    return None if total <= 0 else min(1.0, max(0.0, used / total))


class Sampler:
    """Reads the machine's counters every ``SAMPLE_S`` on a thread, from
    ``start()`` to ``stop()`` (bounded: at most ``max_samples``), and keeps
    each interval's busy share."""

    def __init__(self, max_samples: int = 36_000) -> None:
        self.busy: list[float] = []
        self._max = max_samples
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cpu-sampler")

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(timeout=2)
        return self.busy

    def _loop(self) -> None:
        last = machine()
        while last is not None and len(self.busy) < self._max and not self._stop.wait(SAMPLE_S):
            now = machine()
            if now is None:
                return
            b = busy_between(last, now, steal=True)  # stolen time was not ours either
            if b is not None:
                self.busy.append(b)
            last = now


def run_share(before: Jiffies | None, after: Jiffies | None, wall_s: float, cpus: int,
              daemons_s: float | None, workers_s: float | None,
              samples: list[float] | None = None) -> dict[str, Any] | None:
    """One run's CPU, as shares of all ``cpus`` over ``wall_s``: the whole
    machine busy (``busy``), taken by the hypervisor (``steal``), used by the
    Braid daemons and the workers, and the share of the sampler's intervals
    in which the machine was saturated (``saturated``)."""
    if before is None or after is None or wall_s <= 0 or cpus <= 0:
        return None
    busy = busy_between(before, after)
    if busy is None:
        return None

    def own(s: float | None) -> float | None:
        return None if s is None else round(min(1.0, max(0.0, s / (wall_s * cpus))), 3)

    return {"wall_s": round(wall_s, 2), "cpus": cpus, "busy": round(busy, 3),
            "steal": round((after.steal - before.steal) / (after.total - before.total), 3),
            "daemons": own(daemons_s), "workers": own(workers_s),
            "saturated": (round(sum(b >= SATURATED for b in samples) / len(samples), 3)
                          if samples else None)}


#: The columns of ``/proc/stat``'s ``cpu`` line, in order (guest time is
#: already inside user and nice).
STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_stat_columns(text: str, wall_s: float | None = None) -> dict[str, float]:
    """Every column of the aggregate ``cpu`` line of ``/proc/stat`` (ticks),
    by name, plus ``busy`` and ``total`` (as ``parse_stat``) and ``unticked``:
    the total less every column, the time no tick saw (0 without ``wall_s``);
    a short line (an old kernel) reads as zeros for the missing columns."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            v = [int(x) for x in f[1:9]]
            v += [0] * (8 - len(v))
            out: dict[str, float] = dict(zip(STAT_COLUMNS, v, strict=True))
            j = parse_stat(text, wall_s)
            out["busy"], out["total"] = j.busy, j.total
            out["unticked"] = j.total - sum(v)
            return out
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def machine_columns() -> dict[str, float] | None:
    """``parse_stat_columns`` of this machine now (None: unreadable)."""
    try:
        text, wall = _read_stat()
        return parse_stat_columns(text, wall)
    except (OSError, ValueError):
        return None


def columns_between(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """From two ``parse_stat_columns`` readings: each column's growth in CPU
    seconds (all CPUs together; ``total`` is wall time x CPUs)."""
    return {k: max(0, b[k] - a[k]) / _TICK for k in b if k in a}


def tick_seconds() -> float:
    """One ``/proc`` tick in seconds (the resolution of every figure here)."""
    return 1.0 / _TICK


def saturated_share(samples: list[float], threshold: float = SATURATED) -> float | None:
    """The share of sampler intervals at or above ``threshold`` busy (None: no samples)."""
    return sum(b >= threshold for b in samples) / len(samples) if samples else None
