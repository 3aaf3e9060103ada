"""The eBPF switch port: testbed/bpf/port.o on the wire-namespace veths of a link.

Per element link the two wire ends ``xa`` (towards node a) and ``xb`` get a
clsact qdisc and the port program at ingress (``tc ... bpf da obj port.o``);
a frame arriving on ``xa`` belongs to the ``up`` port and leaves by ``xb``.
A shaped port has an HTB on its outgoing end: class 1:10 (prio 0) for
control and trimmed headers, 1:20 (prio 1) for data; the program sets
``skb->priority`` to the class. Trimming, dropping and ECN decisions come from
the program's virtual queue at exactly the port rate; HTB only paces.

Maps are pinned by name under ``RUN/bpf/pP/tc/globals`` (a bpffs mounted per
testbed, unmounted at teardown); tc runs with ``setns`` only (like ``nsenter
--net=``), because ``ip netns exec`` remounts /sys and would hide the pins.
Settings change by map updates from Python (``bpfsys``), no reload. The port
layout (slots, ifindexes, settings) is kept in ``RUN/elements/pP.ebpf.json``.

Departure gaps (the emulation's fidelity, as Mininet-HiFi measures it): the
port's second program (``sec tc/gap``) sits at clsact ingress of each link's
far node end, after HTB, keyed by the port's slot in the filter's classid
(``1:slot+1``). While the port's virtual queue still holds more than the frame
that just left, the gap to the next departure goes into a per-port histogram
of gap / ideal frame time at the port rate (``braid_gap``; ``gaps()``,
``gap_summary``).

Not supported (the userspace element remains for these): propagation delay.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

from testbed import nsutil
from testbed.bpfsys import Map
from testbed.errors import TestbedError

BPF_DIR = Path(__file__).resolve().parent / "bpf"
OBJ = BPF_DIR / "port.o"
NO_THRESHOLD = 0xFFFFFFFF
CFG = struct.Struct("<IIQIIIIIIII")
QUEUE = struct.Struct("<IIQQQQQQ")
COUNTERS = ("rx", "sent", "trimmed", "marked", "dropped", "lost", "blackholed", "tx_errors",
            "not_trimmable")
CNT = struct.Struct(f"<{len(COUNTERS)}Q")
SETTABLE = ("rate_bps", "buffer", "delay", "loss", "trim", "ecn", "last_hop", "down", "mark")
#: HTB may send this much ahead (seconds of tokens at the port rate) after its
#: timer fired late, so a busy machine does not lower the average rate.
HTB_BURST_S = 0.002
CTRL_HEADROOM = 64 * 1024
BPFFS_MAGIC = 0xCAFE4A11
_probe_cache: dict[str, tuple[bool, str]] = {}
#: The gap histogram (port.c's GAP_*): a gap is counted in 1/GAP_UNIT of the
#: ideal time of the frame before it; buckets 0..7 hold 0..7 units, then 8 per
#: power of two; the last holds everything from 2**GAP_MAX_EXP units up.
GAP_UNIT = 32
GAP_MAX_EXP = 26
GAP_BUCKETS = 8 * (GAP_MAX_EXP - 2) + 8
#: Lateness (port.c's LATE_*): how far the real link was behind the port's
#: virtual queue as each frame left, in LATE_NS_UNIT ns, same buckets.
LATE_NS_UNIT = 1000
GAP = struct.Struct(f"<IIQQQQ{GAP_BUCKETS}QQQ{GAP_BUCKETS}Q")


# ------------------------------------------------------------------ availability
def tc_binary() -> str | None:
    return shutil.which("tc") or next(
        (p for p in ("/usr/sbin/tc", "/sbin/tc") if os.path.exists(p)), None)


def ebpf_available() -> tuple[bool, str]:
    """Can this machine run the eBPF port? (cached; loads it on a scratch veth)."""
    if "result" in _probe_cache:
        return _probe_cache["result"]
    result = _probe()
    _probe_cache["result"] = result
    return result


def _probe() -> tuple[bool, str]:
    tc = tc_binary()
    if tc is None:
        return False, "no tc binary (install iproute2)"
    if not OBJ.exists():
        return False, f"{OBJ} is missing (run testbed/bpf/build.sh)"
    try:
        ver = subprocess.run([tc, "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"tc -V failed: {exc}"
    if "libbpf" not in ver:
        return False, f"tc is not built with libbpf ({ver.strip()})"
    from pyroute2 import netns

    name = f"brprobe-bpf{os.getpid()}"
    pin = Path("/run/braid") / f".probe-bpf-{os.getpid()}"
    try:
        netns.create(name)
    except Exception as exc:
        return False, f"cannot create a scratch namespace: {exc}"
    try:
        with nsutil.open_netns(name) as ns:
            ns.link("add", ifname="pb0", kind="veth", peer="pb1")
        mount_bpffs(pin)
        r = nsutil.run(name, [tc, "-batch", "-"], input="qdisc add dev pb0 clsact\n"
                       f"filter add dev pb0 ingress bpf da obj {OBJ} sec tc\n",
                       capture_output=True, text=True, env=_tc_env(pin))
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            return False, f"tc could not load {OBJ.name} with cls_bpf: {last}"
        return True, "port.o loaded on a scratch veth"
    except OSError as exc:
        return False, f"eBPF probe failed: {exc}"
    finally:
        with contextlib.suppress(Exception):
            netns.remove(name)
        umount_bpffs(pin)


# ------------------------------------------------------------------ bpffs
def _is_mountpoint(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == target for line in lines)


def mount_bpffs(path: Path) -> None:
    """Mount a private bpffs at ``path`` (created) unless one is there already."""
    path.mkdir(parents=True, exist_ok=True)
    if _is_mountpoint(path):
        return
    r = subprocess.run(["mount", "-t", "bpf", "bpf", str(path)], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        raise OSError(f"mount -t bpf {path}: {r.stderr.strip()}")
    os.chmod(path, 0o700)


def umount_bpffs(path: Path) -> None:
    """Unmount (removing every pin under it) and delete ``path``; idempotent."""
    for _ in range(4):  # a mount may have been stacked (tc mounts one if it finds none)
        if not _is_mountpoint(path):
            break
        subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
    with contextlib.suppress(OSError):
        path.rmdir()


def _tc_env(pin: Path) -> dict[str, str]:
    return dict(os.environ, TC_BPF_MNT=str(pin))


# ------------------------------------------------------------------ one plane
def htb_burst(rate_bps: int, mtu: int) -> int:
    """Bytes HTB may send ahead of its rate (at least a few frames)."""
    return max(4 * (mtu + 14), int(rate_bps / 8 * HTB_BURST_S))


def port_cfg(settings: dict[str, Any], out_idx: int, slot: int, mtu: int = 1500) -> bytes:
    def thr(v: int | None) -> int:
        return NO_THRESHOLD if v is None else min(int(v), NO_THRESHOLD - 1)

    loss = float(settings.get("loss") or 0.0)
    loss_u32 = 0 if loss <= 0 else min(int(loss * 2**32), NO_THRESHOLD)
    mark = float(settings.get("mark") or 0.0)
    mark_u32 = 0 if mark <= 0 else min(int(mark * 2**32), NO_THRESHOLD)
    rate = int(settings.get("rate_bps") or 0)
    burst_ns = htb_burst(rate, mtu) * 8 * 10**9 // rate if rate else 0
    return CFG.pack(out_idx, slot, rate,
                    min(int(settings.get("buffer", 256 * 1024)), NO_THRESHOLD - 1),
                    thr(settings.get("trim")), thr(settings.get("ecn")), loss_u32,
                    int(bool(settings.get("last_hop"))), int(bool(settings.get("down"))),
                    min(burst_ns, NO_THRESHOLD), mark_u32)


def htb_commands(dev: str, rate_bps: int, mtu: int, replace: bool = False,
                 buffer: int = 256 * 1024, change: bool = False) -> list[str]:
    """tc batch lines shaping ``dev`` at ``rate_bps``, control class first. The
    FIFOs only catch HTB falling far behind the virtual queue (a starved timer):
    twice the port buffer each. ``change``: a shaped port's new rate or buffer
    set in place (``tc class change``), keeping what HTB holds; deleting the
    qdisc (``replace``) would drop it after the port counted it."""
    limit = 2 * buffer + 2 * CTRL_HEADROOM
    cmds = [f"qdisc del dev {dev} root"] if replace else []
    if rate_bps <= 0:
        return cmds
    frame = mtu + 14
    burst = htb_burst(rate_bps, mtu)
    floor = max(rate_bps // 100, 8000)
    q = f"quantum {frame}"
    verb = "change" if change else "add"
    cmds += [] if change else [f"qdisc add dev {dev} root handle 1: htb default 20"]
    cmds += [
        f"class {verb} dev {dev} parent 1: classid 1:1 htb rate {rate_bps}bit "
        f"ceil {rate_bps}bit burst {burst} cburst {burst} {q}",
        f"class {verb} dev {dev} parent 1:1 classid 1:10 htb rate {rate_bps}bit "
        f"ceil {rate_bps}bit burst {burst} cburst {burst} prio 0 {q}",
        f"class {verb} dev {dev} parent 1:1 classid 1:20 htb rate {floor}bit "
        f"ceil {rate_bps}bit burst {burst} cburst {burst} prio 1 {q}",
        f"qdisc {verb} dev {dev} parent 1:10 handle 10: bfifo limit {limit}",
        f"qdisc {verb} dev {dev} parent 1:20 handle 20: bfifo limit {limit}",
    ]
    return cmds


# ------------------------------------------------------------------ departure gaps
def gap_bucket(units: int) -> int:
    """port.c's ``gap_bucket``: the histogram bucket of a gap of ``units``."""
    if units < 8:
        return max(0, units)
    e = units.bit_length() - 1
    if e >= GAP_MAX_EXP:
        return GAP_BUCKETS - 1
    return 8 * (e - 2) + ((units >> (e - 3)) & 7)


def gap_bucket_bounds(b: int) -> tuple[float, float]:
    """Bucket ``b``'s range of gap / ideal: [low, high)."""
    if b < 8:
        return b / GAP_UNIT, (b + 1) / GAP_UNIT
    e, sub = b // 8 + 2, b % 8
    low = (8 + sub) << (e - 3)
    high = (9 + sub) << (e - 3)
    return low / GAP_UNIT, (high if b < GAP_BUCKETS - 1 else float("inf")) / GAP_UNIT


def gap_summary(hist: list[int], max_units: int | None = None) -> dict[str, Any]:
    """Count, p50, p99 and max of gap / ideal from a histogram: a percentile is
    its bucket's upper bound, capped by the max (at most 12.5% above the
    true value, never below it); the max is exact when the port recorded it
    in the window, else its bucket's upper bound."""
    n = sum(hist)
    out: dict[str, Any] = {"gaps": n, "p50": None, "p99": None, "max": None}
    if n <= 0:
        return out
    for q in (50, 99):
        rank, seen = q / 100 * n, 0
        for b, c in enumerate(hist):
            seen += c
            if c and seen >= rank:
                hi = gap_bucket_bounds(b)[1]
                if max_units:
                    hi = min(hi, max_units / GAP_UNIT)
                out[f"p{q}"] = round(hi if hi != float("inf") else gap_bucket_bounds(b)[0], 3)
                break
    top = max(b for b, c in enumerate(hist) if c)
    lo, hi = gap_bucket_bounds(top)
    out["max"] = round(max_units / GAP_UNIT if max_units else hi if hi != float("inf") else lo, 3)
    return out


def gap_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What a port's gap record gained from ``before`` to ``after`` (the raw
    form ``EbpfPlane.gaps`` returns). The max is the window's only if it grew."""
    hist = [max(0, a - b) for a, b in zip(after["hist"], before["hist"], strict=True)]
    grew = after["max_units"] > before["max_units"]
    out = {"hist": hist, "max_units": after["max_units"] if grew else 0,
           "rate_bps": after.get("rate_bps")}
    if "late_hist" in after and "late_hist" in before:
        out["late_hist"] = [max(0, a - b) for a, b in
                            zip(after["late_hist"], before["late_hist"], strict=True)]
        out["late_max_ns"] = (after["late_max_ns"]
                              if after["late_max_ns"] > before["late_max_ns"] else 0)
    return out


def late_summary(hist: list[int], max_ns: int | None, rate_bps: int,
                 frame_bytes: int = 1514) -> dict[str, Any]:
    """Count, p50, p99 and max of a port's lateness (how far the real link was
    behind its virtual queue as frames left), in microseconds and in ideal
    times of a ``frame_bytes`` frame at ``rate_bps``; percentiles as in
    ``gap_summary`` (a bucket's upper bound, capped by the max)."""
    n = sum(hist)
    out: dict[str, Any] = {"frames": n, "p50_us": None, "p99_us": None, "max_us": None,
                           "p50": None, "p99": None, "max": None}
    if n <= 0:
        return out
    frame_us = frame_bytes * 8e6 / rate_bps if rate_bps else None
    unit_us = LATE_NS_UNIT / 1000  # a bucket counts late_ns // LATE_NS_UNIT

    def us(b: int, upper: bool) -> float:
        lo, hi = gap_bucket_bounds(b)
        v = hi if upper and hi != float("inf") else lo
        return v * GAP_UNIT * unit_us

    for q in (50, 99):
        rank, seen = q / 100 * n, 0
        for b, c in enumerate(hist):
            seen += c
            if c and seen >= rank:
                v = us(b, True)
                if max_ns:
                    v = min(v, max_ns / 1000)
                out[f"p{q}_us"] = round(v, 3)
                break
    top = max(b for b, c in enumerate(hist) if c)
    out["max_us"] = round(max_ns / 1000 if max_ns else us(top, True), 3)
    if frame_us:
        for k in ("p50", "p99", "max"):
            out[k] = round(out[f"{k}_us"] / frame_us, 3)
    return out


class EbpfPlane:
    """The eBPF ports of one plane's wire namespace (created by ``attach``)."""

    def __init__(self, run_dir: Path, plane: int, wire_ns: str) -> None:
        self.plane = plane
        self.ns = wire_ns
        self.pin = run_dir / "bpf" / f"p{plane}"
        self.layout_path = run_dir / "elements" / f"p{plane}.ebpf.json"
        self.maps_dir = self.pin / "tc" / "globals"

    # -- build -----------------------------------------------------------------
    def attach(self, links: list[dict[str, Any]]) -> None:
        """links: {name, a_if, b_if, mtu, up: settings, down: settings}."""
        tc = tc_binary()
        if tc is None:
            raise TestbedError("the eBPF port needs tc (iproute2)")
        names = [n for lk in links for n in (lk["a_if"], lk["b_if"])]
        idx = nsutil.run_in(self.ns, lambda: {n: socket.if_nametoindex(n) for n in names})
        ports: dict[str, dict[str, Any]] = {}
        lines: list[str] = []
        far_lines: dict[str, list[str]] = {}
        for lk in links:
            for d, in_if, out_if in (("up", lk["a_if"], lk["b_if"]),
                                     ("down", lk["b_if"], lk["a_if"])):
                settings = {k: lk[d].get(k) for k in SETTABLE}
                if settings.get("delay"):
                    raise TestbedError(f"link {lk['name']}: the eBPF port has no propagation "
                                    "delay (use the userspace element for it)")
                ports[f"{lk['name']}/{d}"] = {
                    "slot": len(ports), "in_if": in_if, "in_idx": idx[in_if],
                    "out_if": out_if, "out_idx": idx[out_if], "mtu": lk["mtu"],
                    "settings": settings}
                lines += [f"qdisc add dev {in_if} clsact",
                          f"filter add dev {in_if} ingress bpf da obj {OBJ} sec tc"]
                far = lk.get("b_far" if d == "up" else "a_far")
                if far:  # departures of this port are timed at the node end it feeds
                    ports[f"{lk['name']}/{d}"]["far"] = list(far)
                    far_lines.setdefault(far[0], []).extend(
                        [f"qdisc add dev {far[1]} clsact",
                         f"filter add dev {far[1]} ingress bpf da obj {OBJ} sec tc/gap "
                         f"classid 1:{len(ports):x}"])
                lines += htb_commands(out_if, int(settings.get("rate_bps") or 0), lk["mtu"],
                                      buffer=int(settings.get("buffer") or 256 * 1024))
        self.pin.mkdir(parents=True, exist_ok=True)
        self._tc(lines)
        for ns, far in far_lines.items():  # the same pins: tc runs with setns only
            self._tc(far, ns)
        self.layout_path.parent.mkdir(exist_ok=True)
        self._save({"ns": self.ns, "pin": str(self.pin), "ports": ports})
        with self._map("braid_cfg", CFG.size) as cfg:
            for p in ports.values():
                cfg.update(struct.pack("<I", p["in_idx"]),
                           port_cfg(p["settings"], p["out_idx"], p["slot"], p["mtu"]))
        self._gap_rates(ports.values())

    def _gap_rates(self, ports: Any) -> None:
        """The port rates the far ends judge gaps by (slot -> bit/s)."""
        if not any(p.get("far") for p in ports):
            return
        with self._map("braid_gap_rate", 8) as rates:
            for p in ports:
                rates.update(struct.pack("<I", p["slot"]),
                             struct.pack("<Q", int(p["settings"].get("rate_bps") or 0)))

    def _tc(self, lines: list[str], ns: str | None = None) -> None:
        tc = tc_binary() or "tc"
        ns = ns or self.ns
        r = nsutil.run(ns, [tc, "-force", "-batch", "-"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, env=_tc_env(self.pin), timeout=300)
        errors = [ln for ln in r.stderr.splitlines()
                  if ln.strip() and "Cannot delete qdisc with handle of zero" not in ln
                  and "Cannot find specified qdisc" not in ln
                  and not ln.startswith(("Command failed -:", "Warning:"))]
        if r.returncode != 0 and errors:
            raise TestbedError(f"tc in {ns} failed: {errors[0]}")

    def _map(self, name: str, size: int, per_cpu: bool = False) -> Map:
        try:
            return Map(self.maps_dir / name, size, per_cpu)
        except OSError as exc:
            raise TestbedError(f"eBPF port of plane {self.plane}: {exc.strerror}") from None

    def _load(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.layout_path.read_text())
        except (OSError, ValueError) as exc:
            raise TestbedError(f"eBPF port of plane {self.plane}: cannot read "
                            f"{self.layout_path}: {exc}") from None
        return data

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.layout_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.layout_path)

    def exists(self) -> bool:
        return self.layout_path.exists()

    # -- control -----------------------------------------------------------------
    def set(self, links: list[str], direction: str, changes: dict[str, Any]) -> list[str]:
        """Change settings of ports (like the userspace element's control message)."""
        for k in changes:
            if k not in SETTABLE:
                raise TestbedError(f"unknown port setting {k!r} (known: {', '.join(SETTABLE)})")
        if changes.get("delay"):
            raise TestbedError(f"link(s) {', '.join(links[:4])} use the eBPF port, which has no "
                            "propagation delay; give them element = \"userspace\" in the "
                            "topology")
        data = self._load()
        dirs = {"up": ["up"], "down": ["down"], "both": ["up", "down"]}[direction]
        names = [f"{lk}/{d}" for lk in links for d in dirs]
        for n in names:
            if n not in data["ports"]:
                raise TestbedError(f"no eBPF port {n!r} on plane {self.plane}")
        reshape: list[str] = []
        purged: list[str] = []
        with self._map("braid_cfg", CFG.size) as cfg:
            for n in names:
                p = data["ports"][n]
                old_rate = int(p["settings"].get("rate_bps") or 0)
                p["settings"].update({k: v for k, v in changes.items() if k != "delay"})
                new_rate = int(p["settings"].get("rate_bps") or 0)
                if new_rate != old_rate or "buffer" in changes:
                    # A shaped port keeps its HTB and what it holds (changed in
                    # place); shaping turned on or off replaces the qdisc.
                    keep = old_rate > 0 and new_rate > 0
                    reshape += htb_commands(p["out_if"], new_rate, p["mtu"], replace=not keep,
                                            buffer=int(p["settings"].get("buffer") or 0),
                                            change=keep)
                    if old_rate > 0 and not keep:
                        purged.append(n)
                cfg.update(struct.pack("<I", p["in_idx"]),
                           port_cfg(p["settings"], p["out_idx"], p["slot"], p["mtu"]))
        if reshape:
            self._tc(reshape)
        if purged:
            # Deleting a port's HTB dropped what it held after the port counted
            # it: level the counts, or lateness reads those bytes for ever.
            self.resync_backlog(purged)
        if "rate_bps" in changes:
            self._gap_rates([data["ports"][n] for n in names])
        self._save(data)
        return names

    def resync_backlog(self, names: list[str]) -> None:
        """Level the accepted and departed byte counts of ports ``names``
        (``port_queue.in_bytes`` / ``out_bytes``, what lateness rests on)
        after the testbed itself dropped what a port had queued: its shaping
        turned off, a link's carrier lost. The port does the same on its own
        after 100 ms of an empty ideal link; a fault during a busy run gives
        it none. Read-modify-write: a frame counted in between is off by one
        frame, a hint like the counts themselves."""
        data = self._load()
        with self._map("braid_queue", QUEUE.size) as queue:
            for n in names:
                p = data["ports"].get(n)
                if p is None:
                    continue
                key = struct.pack("<I", p["slot"])
                v = queue.lookup(key)
                if not v:
                    continue
                f = list(QUEUE.unpack(v[0]))
                f[5] = f[6]  # in_bytes := out_bytes
                queue.update(key, QUEUE.pack(*f))

    # -- counters ----------------------------------------------------------------
    def stats(self) -> dict[str, dict[str, Any]]:
        """Per port: the userspace element's counter names plus the live settings."""
        try:
            return self._stats()
        except OSError as exc:
            raise TestbedError(f"eBPF port of plane {self.plane}: reading counters: {exc}"
                            ) from None

    def _stats(self) -> dict[str, dict[str, Any]]:
        data = self._load()
        out: dict[str, dict[str, Any]] = {}
        now = time.monotonic_ns()
        with self._map("braid_cnt", CNT.size, per_cpu=True) as cnt, \
                self._map("braid_queue", QUEUE.size) as queue:
            for name, p in data["ports"].items():
                key = struct.pack("<I", p["slot"])
                sums = [0] * len(COUNTERS)
                for v in cnt.lookup(key) or []:
                    sums = [a + b for a, b in zip(sums, CNT.unpack(v), strict=True)]
                c = dict(zip(COUNTERS, sums, strict=True))
                qv = queue.lookup(key)
                f = QUEUE.unpack(qv[0]) if qv else (0,) * 8
                all_until, max_depth = f[2], f[4]
                rate = int(p["settings"].get("rate_bps") or 0)
                depth = max(0, all_until - now) * rate // 8_000_000_000 if rate else 0
                out[name] = {**c, "enqueued": c["sent"], "max_depth": max_depth,
                             "depth": depth, "rx_overflow": 0, "element": "ebpf",
                             # bytes the port queued and the far end saw leave
                             # (port.c's lateness; they restart level when idle)
                             "accepted_bytes": f[5], "departed_bytes": f[6],
                             **p["settings"]}
        return out

    def gaps(self) -> dict[str, dict[str, Any]]:
        """Per timed port: its departure-gap histogram since the testbed came up
        (``hist``, ``max_units``; see ``gap_summary``) and its rate."""
        try:
            data = self._load()
            out: dict[str, dict[str, Any]] = {}
            with self._map("braid_gap", GAP.size) as gap:
                for name, p in data["ports"].items():
                    if not p.get("far"):
                        continue
                    v = gap.lookup(struct.pack("<I", p["slot"]))
                    f = GAP.unpack(v[0]) if v else (0,) * (8 + 2 * GAP_BUCKETS)
                    late = 8 + GAP_BUCKETS
                    out[name] = {"hist": list(f[6:6 + GAP_BUCKETS]), "max_units": f[5],
                                 "late_hist": list(f[late:]), "late_max_ns": f[late - 1],
                                 "rate_bps": int(p["settings"].get("rate_bps") or 0)}
            return out
        except OSError as exc:
            raise TestbedError(f"eBPF port of plane {self.plane}: reading gaps: {exc}"
                            ) from None

    def prog_ids(self) -> list[int]:
        """Ids of the port programs attached in this plane (for teardown checks)."""
        data = self._load()
        ids: list[int] = []
        tc = tc_binary() or "tc"
        for p in data["ports"].values():
            r = nsutil.run(self.ns, [tc, "-j", "filter", "show", "dev", p["in_if"], "ingress"],
                           capture_output=True, text=True)
            with contextlib.suppress(ValueError):
                for f in json.loads(r.stdout or "[]"):
                    pid = (f.get("options") or {}).get("prog", {}).get("id")
                    if pid:
                        ids.append(int(pid))
        return ids
