"""Faults, by command and by timeline.

Grammar of one fault (the same in ``braid testbed fault`` and timelines)::

    TARGET ACTION
    TARGET := link h3:p1 | link l0-s1:p0 | plane 2 | host h3
            | spine s1 plane 0 | leaf l0 plane 0 | switch sw plane 0
    ACTION := down | up | heal
            | loss 5% [up|down] | gray up|down [100%] | mark 20% [up|down]
            | delay 2ms [up|down] | rate 10mbit [up|down]
            | reboot 500ms | flap 200ms for 1s
            | unplug | plug                       (host links only)

A timeline is either a TOML file (``events = ["at 2.0 plane 2 down", ...]`` or
``[[event]]`` tables with ``at`` and ``fault``) or a text file with one
``at TIME FAULT`` per line (``#`` comments). Errors name the line.

``down`` on a link with an element blackholes both directions in the element
(the eBPF port or the userspace one; only the userspace one can ``delay``);
on a plain veth it sets the core-side end (switch/spine) administratively down,
so the other end loses carrier but — like a fabric whose routing has not
converged — keeps hashing packets onto it. ``up`` undoes it; ``heal`` also
restores the topology's loss, delay and rate.

``mark`` (eBPF ports only) CE-marks that fraction of the ECT data crossing
the link at random, whatever its queue (ECN from queue depth goes on too).

``unplug`` is a link down the *host sees* (carrier loss), next to the silent
blackhole of ``down``: the far end of the host's veth (the wire namespace's
end with an element, the leaf's without) goes administratively down, so the
host's interface loses carrier, and the host ignores routes over a link
without carrier (``ignore_routes_with_linkdown``, set by the fault), so its
sends on that plane fail at once with ENETUNREACH, as on a host whose
routing daemon withdrew the route. ``plug`` brings the far end back; the
routes are usable again as soon as the carrier is.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from testbed.errors import TestbedError
from testbed.units import parse_duration, parse_rate, parse_ratio

if TYPE_CHECKING:
    import subprocess

    from testbed.ebpf import EbpfPlane
    from testbed.topology import LinkSpec, Topology


class Testbed(Protocol):
    """What faults need of a running fabric (``testbed.fabric.Testbed``): the
    fabric applies faults to itself, so this module must not import it."""

    topo: Topology

    def netns(self, node: str | int) -> str: ...

    def element_files(self, plane: int) -> dict[str, Path]: ...

    def element_kind(self, link: str) -> str: ...

    def ebpf(self, plane: int) -> EbpfPlane: ...

    @property
    def prefix(self) -> str: ...

    def wire_node(self, plane: int) -> str: ...

    def wire_ifnames(self, link: LinkSpec) -> tuple[str, str]: ...

MAX_FLAP_TOGGLES = 10_000
MAX_TIMELINE_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class Fault:
    text: str
    target: tuple[str, ...]  # ("link", name) | ("plane", p) | ("node", node) | ("host", h)
    action: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Step:
    """A primitive change at ``offset`` seconds after its fault starts."""

    offset: float
    label: str
    apply: Callable[[], None]


def parse_fault(text: str) -> Fault:
    """Syntax only; targets are resolved against a topology by ``compile_fault``."""
    words = text.split()
    if not words:
        raise TestbedError("empty fault")
    try:
        target, rest = _parse_target(words)
        action, args = _parse_action(rest)
    except ValueError as exc:
        raise TestbedError(f"fault {text!r}: {exc}") from None
    return Fault(text=" ".join(words), target=target, action=action, args=args)


def _parse_target(w: list[str]) -> tuple[tuple[str, ...], list[str]]:
    kind = w[0]
    if kind == "link" and len(w) >= 2:
        return ("link", w[1]), w[2:]
    if kind == "plane" and len(w) >= 2 and w[1].isdigit():
        return ("plane", w[1]), w[2:]
    if kind == "host" and len(w) >= 2:
        return ("host", w[1]), w[2:]
    if kind in ("spine", "leaf", "switch") and len(w) >= 4 and w[2] == "plane" \
            and w[3].isdigit():
        node = w[1]
        if kind == "spine" and not re.fullmatch(r"s\d+", node):
            raise ValueError(f"spine names look like s0, s1, got {node!r}")
        if kind == "leaf" and not re.fullmatch(r"l\d+", node):
            raise ValueError(f"leaf names look like l0, l1, got {node!r}")
        return ("node", f"p{w[3]}-{node}"), w[4:]
    raise ValueError("expected a target: link NAME | plane P | host hI | "
                     "spine sK plane P | leaf lJ plane P | switch sw plane P")


def _direction(w: list[str], i: int) -> str:
    if len(w) <= i:
        return "both"
    if w[i] not in ("up", "down", "both"):
        raise ValueError(f"expected a direction (up, down), got {w[i]!r}")
    return w[i]


def _parse_action(w: list[str]) -> tuple[str, tuple[Any, ...]]:
    if not w:
        raise ValueError("missing action (down, up, heal, loss, gray, mark, delay, rate, reboot, "
                         "flap, unplug, plug)")
    a = w[0]
    if a in ("down", "up", "heal", "blackhole", "unplug", "plug") and len(w) == 1:
        return ("down" if a == "blackhole" else a), ()
    if a in ("loss", "mark") and 2 <= len(w) <= 3:
        return a, (parse_ratio(w[1]), _direction(w, 2))
    if a == "gray" and 2 <= len(w) <= 3:
        d = _direction(w, 1)
        if d == "both":
            raise ValueError("gray needs one direction: up or down")
        return a, (d, parse_ratio(w[2]) if len(w) == 3 else 1.0)
    if a == "delay" and 2 <= len(w) <= 3:
        return a, (parse_duration(w[1]), _direction(w, 2))
    if a == "rate" and 2 <= len(w) <= 3:
        return a, (parse_rate(w[1]), _direction(w, 2))
    if a == "reboot" and len(w) == 2:
        return a, (parse_duration(w[1]),)
    if a == "flap" and len(w) == 4 and w[2] == "for":
        period, total = parse_duration(w[1]), parse_duration(w[3])
        if period <= 0 or total / period > MAX_FLAP_TOGGLES:
            raise ValueError(f"flap period too small (at most {MAX_FLAP_TOGGLES} toggles)")
        return a, (period, total)
    raise ValueError(f"cannot parse action {' '.join(w)!r}")


def resolve_links(tb: Testbed, f: Fault) -> list[LinkSpec]:
    kind, value = f.target
    links = tb.topo.links
    if kind == "link":
        return [tb.topo.link(value)]
    if kind == "plane":
        p = int(value)
        if p >= tb.topo.planes:
            raise TestbedError(f"fault {f.text!r}: no plane {p}")
        return [lk for lk in links if lk.plane == p]
    if kind == "host":
        tb.netns(value)  # validates
        return [lk for lk in links if lk.a == value]
    out = [lk for lk in links if value in (lk.a, lk.b)]
    if not out:
        raise TestbedError(f"fault {f.text!r}: no switch {value!r} in this topology")
    return out


def compile_fault(tb: Testbed, f: Fault) -> list[Step]:
    links = resolve_links(tb, f)
    a = f.action
    if a == "down":
        return [Step(0, f.text, lambda: set_down(tb, links, True))]
    if a == "up":
        return [Step(0, f.text, lambda: set_down(tb, links, False))]
    if a == "heal":
        return [Step(0, f.text, lambda: heal(tb, links))]
    if a in ("unplug", "plug"):
        not_host = [lk.name for lk in links if lk.kind != "host"]
        if not_host:
            raise TestbedError(f"fault {f.text!r}: {a} is for host links (a host loses "
                               f"carrier), not {', '.join(not_host[:4])}")
        return [Step(0, f.text, lambda: set_carrier(tb, links, a == "plug"))]
    if a == "reboot":
        (dur,) = f.args
        return [Step(0, f"{f.text}: down", lambda: set_down(tb, links, True)),
                Step(dur, f"{f.text}: up again", lambda: set_down(tb, links, False))]
    if a == "flap":
        period, total = f.args
        steps = []
        n = int(total / period)

        def toggle(down: bool) -> Callable[[], None]:
            return lambda: set_down(tb, links, down)

        for i in range(n):
            down = i % 2 == 0
            steps.append(Step(i * period, f"{f.text}: {'down' if down else 'up'}",
                              toggle(down)))
        steps.append(Step(n * period, f"{f.text}: up (end)", lambda: set_down(tb, links, False)))
        return steps
    _require_elements(f, links)
    if a == "loss":
        ratio, d = f.args
        return [Step(0, f.text, lambda: set_ports(tb, links, d, {"loss": ratio}))]
    if a == "mark":
        ratio, d = f.args
        not_ebpf = [lk.name for lk in links if tb.element_kind(lk.name) != "ebpf"]
        if not_ebpf:
            raise TestbedError(f"fault {f.text!r}: only the eBPF ports mark at random, not "
                               f"{', '.join(not_ebpf[:4])}")
        return [Step(0, f.text, lambda: set_ports(tb, links, d, {"mark": ratio}))]
    if a == "gray":
        d, ratio = f.args
        return [Step(0, f.text, lambda: set_ports(tb, links, d, {"loss": ratio}))]
    if a == "delay":
        dur, d = f.args
        return [Step(0, f.text, lambda: set_ports(tb, links, d, {"delay": dur}))]
    if a == "rate":
        bps, d = f.args
        return [Step(0, f.text, lambda: set_ports(tb, links, d, {"rate_bps": bps}))]
    raise TestbedError(f"fault {f.text!r}: unknown action {a!r}")


def _require_elements(f: Fault, links: list[LinkSpec]) -> None:
    missing = [lk.name for lk in links if not lk.element]
    if missing:
        raise TestbedError(
            f"fault {f.text!r}: link(s) {', '.join(missing[:4])} have no link element and "
            "sch_netem is not available; set 'element = true' for them in the topology")


# ------------------------------------------------------------------ primitives
def element_command(tb: Testbed, plane: int, req: dict[str, Any], timeout: float = 3.0
                    ) -> dict[str, Any]:
    ctl = tb.element_files(plane)["ctl"]
    me = ctl.parent / f"client-{os.getpid()}-{time.monotonic_ns()}.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.bind(str(me))
        s.settimeout(timeout)
        try:
            s.sendto(json.dumps(req).encode(), str(ctl))
            reply: dict[str, Any] = json.loads(s.recv(65536))
        except (OSError, TimeoutError) as exc:
            raise TestbedError(f"link element of plane {plane} does not answer ({ctl}): {exc}"
                            ) from None
    finally:
        s.close()
        me.unlink(missing_ok=True)
    if not reply.get("ok"):
        raise TestbedError(f"link element of plane {plane}: {reply.get('error')}")
    return reply


def set_ports(tb: Testbed, links: list[LinkSpec], direction: str, changes: dict[str, Any]
              ) -> None:
    by_plane: dict[tuple[int, str], list[str]] = {}
    for lk in links:
        by_plane.setdefault((lk.plane, tb.element_kind(lk.name)), []).append(lk.name)
    for (plane, kind), names in by_plane.items():
        if kind == "ebpf":
            tb.ebpf(plane).set(names, direction, changes)
        else:
            element_command(tb, plane, {"link": names, "dir": direction, "set": changes})


def set_down(tb: Testbed, links: list[LinkSpec], down: bool) -> None:
    set_ports(tb, [lk for lk in links if lk.element], "both", {"down": down})
    plain = [lk for lk in links if not lk.element]
    if not plain:
        return
    from testbed import nsutil

    by_node: dict[str, list[str]] = {}
    for lk in plain:
        by_node.setdefault(lk.b, []).append(lk.b_if)
    for node, ifnames in by_node.items():
        with nsutil.open_netns(tb.netns(node), flags=0) as ns:
            for ifname in ifnames:
                ns.link("set", index=ns.link_lookup(ifname=ifname)[0],
                        state="down" if down else "up")


def set_carrier(tb: Testbed, links: list[LinkSpec], carrier: bool) -> None:
    """Host links: take the far end of the host's veth down (the host loses
    carrier and, with ``ignore_routes_with_linkdown``, its routes there) or
    bring it back up."""
    from testbed import nsutil

    far: dict[str, list[str]] = {}
    for lk in links:
        if not carrier:
            keys = {f"net.ipv4.conf.{lk.a_if}.ignore_routes_with_linkdown": "1"}
            if tb.topo.ipv6:
                keys[f"net.ipv6.conf.{lk.a_if}.ignore_routes_with_linkdown"] = "1"
            nsutil.sysctls(tb.netns(lk.a), keys)
        if lk.element:
            far.setdefault(tb.prefix + tb.wire_node(lk.plane), []).append(
                tb.wire_ifnames(lk)[0])
        else:
            far.setdefault(tb.netns(lk.b), []).append(lk.b_if)
    for ns_name, ifnames in far.items():
        with nsutil.open_netns(ns_name, flags=0) as ns:
            for ifname in ifnames:
                ns.link("set", index=ns.link_lookup(ifname=ifname)[0],
                        state="up" if carrier else "down")
    # What the ports sent toward a link without carrier was dropped after
    # they counted it: level their byte counts (lateness) on either change.
    by_plane: dict[int, list[str]] = {}
    for lk in links:
        if lk.element and tb.element_kind(lk.name) == "ebpf":
            by_plane.setdefault(lk.plane, []).extend(f"{lk.name}/{d}" for d in ("up", "down"))
    for plane, names in by_plane.items():
        tb.ebpf(plane).resync_backlog(names)


def heal(tb: Testbed, links: list[LinkSpec]) -> None:
    set_down(tb, links, False)
    host_links = [lk for lk in links if lk.kind == "host"]
    if host_links:
        set_carrier(tb, host_links, True)
    for lk in links:
        if lk.element:
            for d, cfg in (("up", lk.up), ("down", lk.down)):
                changes = {"loss": cfg.loss, "delay": cfg.delay, "rate_bps": cfg.rate_bps}
                if tb.element_kind(lk.name) == "ebpf":
                    del changes["delay"]  # it has none
                    changes["mark"] = 0.0
                set_ports(tb, [lk], d, changes)


# -------------------------------------------------------------------- running
def run_steps(steps: list[tuple[float, str, Callable[[], None]]],
              echo: Callable[[str], None] | None = None,
              stop: Callable[[], bool] | None = None) -> list[str]:
    """Fire (time, label, fn) in time order, sleeping in between (bounded)."""
    done: list[str] = []
    start = time.monotonic()
    for t, label, fn in sorted(steps, key=lambda s: s[0]):
        while True:
            left = start + t - time.monotonic()
            if left <= 0:
                break
            if stop is not None and stop():
                return done
            time.sleep(min(left, 0.05))
        fn()
        line = f"t={time.monotonic() - start:7.3f}s {label}"
        done.append(line)
        if echo:
            echo(line)
    return done


def apply_fault(tb: Testbed, text: str) -> list[str]:
    steps = compile_fault(tb, parse_fault(text))
    return run_steps([(s.offset, s.label, s.apply) for s in steps])


@dataclass(frozen=True)
class TimelineEvent:
    at: float
    fault: Fault
    where: str  # "file:line"


_AT = re.compile(r"^\s*at\s+(\S+)\s+(.+?)\s*$")


def _event(text: str, where: str) -> TimelineEvent:
    m = _AT.match(text)
    if not m:
        raise TestbedError(f"{where}: expected 'at TIME FAULT', got {text.strip()!r}")
    try:
        at = parse_duration(m.group(1))
    except ValueError as exc:
        raise TestbedError(f"{where}: {exc}") from None
    if not 0 <= at <= MAX_TIMELINE_SECONDS:
        raise TestbedError(f"{where}: time {at} out of range")
    try:
        fault = parse_fault(m.group(2))
    except TestbedError as exc:
        raise TestbedError(f"{where}: {exc}") from None
    return TimelineEvent(at, fault, where)


def load_timeline(path: str | Path) -> list[TimelineEvent]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TestbedError(f"cannot read timeline {p}: {exc.strerror}") from None
    lines = text.splitlines()

    def line_of(needle: str) -> str:
        for i, line in enumerate(lines, 1):
            if needle in line:
                return f"{p}:{i}"
        return str(p)

    if p.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TestbedError(f"{p}: invalid TOML: {exc}") from None
        events = []
        for key in data:
            if key not in ("events", "event", "description"):
                raise TestbedError(f"{line_of(key)}: key '{key}': unknown (use 'events' or "
                                "[[event]] tables)")
        for item in data.get("events", []):
            if not isinstance(item, str):
                raise TestbedError(f"{p}: key 'events': expected strings like 'at 2.0 plane 1 "
                                f"down', got {item!r}")
            events.append(_event(item, line_of(item)))
        for i, table in enumerate(data.get("event", [])):
            if set(table) - {"at", "fault"} or "at" not in table or "fault" not in table:
                raise TestbedError(f"{p}: [[event]] #{i + 1}: needs exactly 'at' and 'fault'")
            where = line_of(str(table["fault"]))
            events.append(_event(f"at {table['at']} {table['fault']}", where))
    else:
        events = [_event(line, f"{p}:{i}") for i, line in enumerate(lines, 1)
                  if line.strip() and not line.lstrip().startswith("#")]
    return sorted(events, key=lambda e: e.at)


def run_timeline(tb: Testbed, events: list[TimelineEvent],
                 workload: subprocess.Popen[Any] | None = None,
                 echo: Callable[[str], None] | None = None, timeout: float = 600.0,
                 until: Callable[[], bool] | None = None) -> list[str]:
    """Replay a timeline; stops early if the workload exits (or ``until()`` says
    so). Validates every event against the topology before the first one fires."""
    steps = []
    for ev in events:
        try:
            compiled = compile_fault(tb, ev.fault)
        except TestbedError as exc:
            raise TestbedError(f"{ev.where}: {exc}") from None
        steps += [(ev.at + s.offset, s.label, s.apply) for s in compiled]
    deadline = time.monotonic() + timeout

    def stop() -> bool:
        return (workload is not None and workload.poll() is not None) or \
            (until is not None and until()) or time.monotonic() > deadline

    return run_steps(steps, echo=echo, stop=stop)
