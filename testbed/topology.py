"""Topology files: hosts x planes, each plane a single switch or a leaf-spine.

A topology is a small TOML file (see docs/testbed.md and examples/)::

    hosts = 4
    planes = 4
    [fabric]
    kind = "leafspine"      # or "switch"
    leaves = 2
    spines = 2
    [link]                  # defaults for every link and both directions
    rate = "100mbit"
    buffer = "256KB"
    [link.host.down]        # leaf->host ports (the last hop)
    trim = "32KB"
    [link.fabric.down]      # spine->leaf ports
    trim = "32KB"
    ecn = "16KB"

Validation raises ``testbed.errors.TestbedError`` naming the file, the key and,
where it can be found, the line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.units import parse_duration, parse_rate, parse_ratio, parse_size

#: Keys that may appear at any level of [link] (defaults, class, one link, direction).
PORT_KEYS = ("rate", "buffer", "delay", "loss", "trim", "ecn", "last_hop")
LINK_KEYS = ("mtu", "element", "taildrop")
#: element = "ebpf" | "userspace" picks the link element's implementation.
#: taildrop = true: a plain router port, as a new user's first links are: tc
#: tbf with a ``buffer``-byte tail-drop queue, no trimming, no ECN, no link
#: element (docs/testbed.md).
ELEMENT_KINDS = ("ebpf", "userspace")
LINK_CLASSES = ("host", "fabric")
#: Link MTU when the topology does not say: 9000-byte (jumbo) frames, as AI
#: fabrics run them; ``mtu = 1500`` in [link] is the other option.
DEFAULT_LINK_MTU = 9000
DIRECTIONS = ("up", "down")
MAX_HOSTS = 200
MAX_PLANES = 200
MAX_LEAVES = 100
MAX_SPINES = 30


@dataclass(frozen=True)
class PortConfig:
    """One direction of a link: an egress queue feeding the wire."""

    rate_bps: int = 0  # 0: not shaped
    buffer: int = 256 * 1024  # bytes of queue before drop
    delay: float = 0.0  # one-way propagation delay, seconds
    loss: float = 0.0  # random loss probability
    trim: int | None = None  # data-queue depth (bytes) above which Braid DATA is trimmed
    ecn: int | None = None  # data-queue depth (bytes) above which ECT packets get CE
    last_hop: bool = False  # trims re-marked TRIMMED_LAST_HOP instead of TRIMMED

    def needs_element(self, netem: bool) -> bool:
        if self.trim is not None or self.ecn is not None:
            return True
        return not netem and (self.delay > 0 or self.loss > 0)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LinkSpec:
    """A link between node ``a`` (host or leaf) and node ``b`` (leaf/switch or spine).

    ``up`` is the a->b direction (towards the core), ``down`` is b->a.
    """

    name: str  # "h3:p1" (host link) or "l0-s1:p1" (fabric link)
    kind: str  # "host" | "fabric"
    plane: int
    a: str  # node id, e.g. "h3" or "p1-l0"
    a_if: str
    b: str  # node id, e.g. "p1-l0", "p1-sw" or "p1-s1"
    b_if: str
    mtu: int
    element: bool
    up: PortConfig
    down: PortConfig
    #: "auto" (the eBPF port where it can, else userspace), "ebpf" or "userspace"
    element_kind: str = "auto"
    #: a plain tbf tail-drop link (``taildrop = true``): no element, no trim, no ECN
    taildrop: bool = False


@dataclass
class Topology:
    hosts: int
    planes: int
    kind: str  # "switch" | "leafspine"
    leaves: int
    spines: int
    links: list[LinkSpec] = field(default_factory=list)
    ipv6: bool = False  # also give every interface an fd00:: address (dual stack)
    source: str = "<dict>"

    @property
    def host_names(self) -> list[str]:
        return [f"h{i}" for i in range(self.hosts)]

    def leaf_of(self, host: int) -> int:
        """Hosts are spread over leaves in contiguous blocks."""
        return host * self.leaves // self.hosts

    def switch_nodes(self, plane: int) -> list[str]:
        if self.kind == "switch":
            return [f"p{plane}-sw"]
        return [f"p{plane}-l{j}" for j in range(self.leaves)] + [
            f"p{plane}-s{k}" for k in range(self.spines)
        ]

    def link(self, name: str) -> LinkSpec:
        for link in self.links:
            if link.name == name:
                return link
        raise TestbedError(f"no link named {name!r} (links look like 'h0:p1' or 'l0-s1:p1')")


def host_address(host: int, plane: int, family: int = 4) -> str:
    """Host i, plane p: 10.p.i.2 (IPv6: fd00:0:p:i::2, hex); its port is .1 / ::1."""
    if family == 6:
        return f"fd00:0:{plane:x}:{host:x}::2"
    return f"10.{plane}.{host}.2"


def gateway_address(host: int, plane: int, family: int = 4) -> str:
    if family == 6:
        return f"fd00:0:{plane:x}:{host:x}::1"
    return f"10.{plane}.{host}.1"


def fabric_addresses(plane: int, leaf: int, spine: int, family: int = 4) -> tuple[str, str]:
    """(leaf side, spine side) of the /31 (/127) between leaf j and spine k of plane p."""
    if family == 6:
        base = f"fd00:0:{plane:x}:{0xE000 + spine:x}::"
        return f"{base}{2 * leaf + 1:x}", f"{base}{2 * leaf:x}"
    return f"10.{plane}.{224 + spine}.{2 * leaf + 1}", f"10.{plane}.{224 + spine}.{2 * leaf}"


class _Ctx:
    """Error reporting: names the file, the key and the line when found."""

    def __init__(self, source: str, text: str | None) -> None:
        self.source = source
        self.text = text or ""

    def line_of(self, key: str) -> int | None:
        leaf = key.rsplit(".", 1)[-1].strip('"')
        pat = re.compile(r"^\s*(\"?)" + re.escape(leaf) + r"\1\s*=", re.M)
        m = pat.search(self.text)
        if m is None:
            header = re.compile(r"^\s*\[+\s*" + re.escape(key) + r"\s*\]+", re.M)
            m = header.search(self.text)
        return self.text.count("\n", 0, m.start()) + 1 if m else None

    def error(self, key: str, msg: str) -> TestbedError:
        line = self.line_of(key)
        where = f"{self.source}:{line}" if line else self.source
        return TestbedError(f"{where}: key '{key}': {msg}")


def _int(ctx: _Ctx, d: dict[str, Any], key: str, path: str, default: int | None,
         lo: int, hi: int) -> int:
    value = d.get(key, default)
    full = f"{path}{key}"
    if value is None:
        raise ctx.error(full, "missing (required)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.error(full, f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ctx.error(full, f"must be between {lo} and {hi}, got {value}")
    return value


def _port_overrides(ctx: _Ctx, table: dict[str, Any], path: str) -> dict[str, Any]:
    parsers = {"rate": parse_rate, "buffer": parse_size, "delay": parse_duration,
               "loss": parse_ratio, "trim": parse_size, "ecn": parse_size}
    out: dict[str, Any] = {}
    for key in PORT_KEYS:
        if key not in table:
            continue
        value = table[key]
        if key == "last_hop":
            if not isinstance(value, bool):
                raise ctx.error(path + key, f"expected true or false, got {value!r}")
            out[key] = value
            continue
        if key in ("trim", "ecn") and value is False:
            out[key] = None
            continue
        try:
            out["rate_bps" if key == "rate" else key] = parsers[key](value)
        except ValueError as exc:
            raise ctx.error(path + key, str(exc)) from None
    return out


def _link_overrides(ctx: _Ctx, table: Any, path: str, allow: tuple[str, ...]) -> tuple[
        dict[str, Any], dict[str, dict[str, Any]]]:
    """(link-level keys, per-direction port keys) of one [link...] table."""
    if not isinstance(table, dict):
        raise ctx.error(path.rstrip("."), "expected a table")
    for key in table:
        if key not in PORT_KEYS + LINK_KEYS + DIRECTIONS + allow:
            known = ", ".join(PORT_KEYS + LINK_KEYS + DIRECTIONS)
            raise ctx.error(path + key, f"unknown key (known: {known})")
    link: dict[str, Any] = {}
    if "mtu" in table:
        link["mtu"] = _int(ctx, table, "mtu", path, None, 576, 9000)
    if "element" in table:
        value = table["element"]
        if isinstance(value, str) and value in ELEMENT_KINDS:
            link["element"], link["element_kind"] = True, value
        elif isinstance(value, bool):
            link["element"] = value
        else:
            raise ctx.error(path + "element",
                            f"expected true, false, \"ebpf\" or \"userspace\", got {value!r}")
    if "taildrop" in table:
        if not isinstance(table["taildrop"], bool):
            raise ctx.error(path + "taildrop",
                            f"expected true or false, got {table['taildrop']!r}")
        link["taildrop"] = table["taildrop"]
    both = _port_overrides(ctx, table, path)
    dirs: dict[str, dict[str, Any]] = {}
    for d in DIRECTIONS:
        sub = table.get(d, {})
        if not isinstance(sub, dict):
            raise ctx.error(path + d, "expected a table")
        for key in sub:
            if key not in PORT_KEYS:
                raise ctx.error(f"{path}{d}.{key}",
                                f"unknown key (known: {', '.join(PORT_KEYS)})")
        dirs[d] = {**both, **_port_overrides(ctx, sub, f"{path}{d}.")}
    return link, dirs


def load(path_or_spec: str | Path | dict[str, Any], netem: bool = False) -> Topology:
    """Read and validate a topology file (or an already parsed dict)."""
    if isinstance(path_or_spec, dict):
        ctx = _Ctx("<topology>", None)
        data = path_or_spec
    else:
        p = Path(path_or_spec)
        try:
            text = p.read_text()
        except OSError as exc:
            raise TestbedError(f"cannot read topology {p}: {exc.strerror}") from None
        ctx = _Ctx(str(p), text)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TestbedError(f"{p}: invalid TOML: {exc}") from None
    return _build(ctx, data, netem)


def _build(ctx: _Ctx, data: dict[str, Any], netem: bool) -> Topology:
    for key in data:
        if key not in ("name", "description", "hosts", "planes", "ipv6", "fabric", "link"):
            raise ctx.error(key, "unknown key (known: hosts, planes, ipv6, fabric, link)")
    ipv6 = data.get("ipv6", False)
    if not isinstance(ipv6, bool):
        raise ctx.error("ipv6", f"expected true or false, got {ipv6!r}")
    hosts = _int(ctx, data, "hosts", "", None, 2, MAX_HOSTS)
    planes = _int(ctx, data, "planes", "", None, 1, MAX_PLANES)
    fabric = data.get("fabric", {"kind": "switch"})
    if not isinstance(fabric, dict):
        raise ctx.error("fabric", "expected a table")
    for key in fabric:
        if key not in ("kind", "leaves", "spines"):
            raise ctx.error(f"fabric.{key}", "unknown key (known: kind, leaves, spines)")
    kind = fabric.get("kind", "switch")
    if kind not in ("switch", "leafspine"):
        raise ctx.error("fabric.kind", f"expected 'switch' or 'leafspine', got {kind!r}")
    if kind == "leafspine":
        leaves = _int(ctx, fabric, "leaves", "fabric.", None, 1, min(MAX_LEAVES, hosts))
        spines = _int(ctx, fabric, "spines", "fabric.", None, 1, MAX_SPINES)
    else:
        for key in ("leaves", "spines"):
            if key in fabric:
                raise ctx.error(f"fabric.{key}", "only meaningful with kind = 'leafspine'")
        leaves, spines = 1, 0
    topo = Topology(hosts=hosts, planes=planes, kind=kind, leaves=leaves, spines=spines,
                    source=ctx.source, ipv6=ipv6)

    names = _link_names(topo)
    link_table = data.get("link", {})
    if not isinstance(link_table, dict):
        raise ctx.error("link", "expected a table")
    for key in link_table:
        if ":" in key and key not in names:
            raise ctx.error(f'link."{key}"', "no such link in this topology (links look like "
                            "'h0:p1' or, in a leaf-spine, 'l0-s1:p1')")
    base_link, base_dirs = _link_overrides(ctx, link_table, "link.",
                                           LINK_CLASSES + tuple(names))
    cls: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {}
    for c in LINK_CLASSES:
        cls[c] = _link_overrides(ctx, link_table.get(c, {}), f"link.{c}.", ())
    if kind == "switch" and "fabric" in link_table:
        raise ctx.error("link.fabric", "a single-switch plane has no fabric links")

    for name, (klass, plane, a, a_if, b, b_if) in names.items():
        link_kw: dict[str, Any] = {"mtu": DEFAULT_LINK_MTU, "element": False,
                                   "element_kind": "auto", "taildrop": False}
        dirs: dict[str, dict[str, Any]] = {
            "up": {}, "down": {"last_hop": klass == "host"}}
        layers = [("link.", link_table, (base_link, base_dirs)),
                  (f"link.{klass}.", link_table.get(klass, {}), cls[klass])]
        if name in link_table:
            path = f'link."{name}".'
            layers.append((path, link_table[name],
                           _link_overrides(ctx, link_table[name], path, ())))
        #: the most specific key that set each link key / port key (for errors)
        where: dict[str, str] = {}
        for path, raw, (lk, ld) in layers:
            link_kw.update(lk)
            where.update({k: path + k for k in lk})
            for d in DIRECTIONS:
                dirs[d].update(ld[d])
                for k in ld[d]:
                    own = k in raw.get(d, {})
                    where[f"{d}.{k}"] = f"{path}{d}.{k}" if own else path + k
        up, down = PortConfig(**dirs["up"]), PortConfig(**dirs["down"])
        for d, port in (("up", up), ("down", down)):
            if port.trim is not None and port.trim >= port.buffer:
                raise ctx.error(f"link.{klass}.{d}.trim",
                                f"trim threshold {port.trim} must be below buffer {port.buffer}")
        if link_kw["taildrop"]:
            _check_taildrop(ctx, name, link_kw, where, up, down, netem)
        element = link_kw["element"] or up.needs_element(netem) or down.needs_element(netem)
        topo.links.append(LinkSpec(name=name, kind=klass, plane=plane, a=a, a_if=a_if, b=b,
                                   b_if=b_if, mtu=link_kw["mtu"], element=element,
                                   up=up, down=down, element_kind=link_kw["element_kind"],
                                   taildrop=link_kw["taildrop"]))
    return topo


def _check_taildrop(ctx: _Ctx, name: str, link_kw: dict[str, Any], where: dict[str, str],
                    up: PortConfig, down: PortConfig, netem: bool) -> None:
    """A tail-drop link is a plain veth pair with tc tbf on both ends: nothing
    may ask for what only a link element gives (trim, ECN marks, delay or loss
    without sch_netem), and both directions need a rate for tbf to shape."""
    td = where.get("taildrop", "link.taildrop")
    if link_kw["element"]:
        raise ctx.error(where.get("element", "link.element"),
                        f"link {name} has taildrop = true (plain tbf): it cannot also "
                        "have a link element")
    for d, port in (("up", up), ("down", down)):
        for key in ("trim", "ecn"):
            if getattr(port, key) is not None:
                raise ctx.error(where.get(f"{d}.{key}", f"link.{key}"),
                                f"link {name} has taildrop = true ({td}): a plain tbf "
                                f"neither trims nor marks ECN; remove {key} or set it to false")
        if not port.rate_bps:
            raise ctx.error(where.get(f"{d}.rate", td),
                            f"link {name} has taildrop = true but no rate in direction "
                            f"{d}: tbf needs one")
        if not netem and (port.delay or port.loss):
            key = "delay" if port.delay else "loss"
            raise ctx.error(where.get(f"{d}.{key}", f"link.{key}"),
                            f"link {name} has taildrop = true: {key} needs sch_netem, which "
                            "this kernel lacks (only a link element could add it)")


def _link_names(topo: Topology) -> dict[str, tuple[str, int, str, str, str, str]]:
    """name -> (class, plane, a node, a ifname, b node, b ifname), in build order."""
    out: dict[str, tuple[str, int, str, str, str, str]] = {}
    for p in range(topo.planes):
        for i in range(topo.hosts):
            sw = f"p{p}-sw" if topo.kind == "switch" else f"p{p}-l{topo.leaf_of(i)}"
            out[f"h{i}:p{p}"] = ("host", p, f"h{i}", f"p{p}", sw, f"h{i}")
        for j in range(topo.leaves if topo.kind == "leafspine" else 0):
            for k in range(topo.spines):
                out[f"l{j}-s{k}:p{p}"] = ("fabric", p, f"p{p}-l{j}", f"s{k}",
                                          f"p{p}-s{k}", f"l{j}")
    return out


def plane_bottleneck_rate(topo: Topology, plane: int) -> float | None:
    """The slowest rate (bytes/s) a host-to-host flow meets on ``plane``, or None
    if nothing on it is shaped.

    Host links count one by one, in both directions (the sender's up, the
    receiver's down); a leaf's links to the spines count together per
    direction, because ECMP spreads a sprayed flow over all of them. An
    unshaped port (rate 0) does not limit. This is what ``[connection]
    plane_rate`` should say for a daemon on this testbed: NSCC derives its
    BDP, window cap and pacing rate from it.
    """
    if not 0 <= plane < topo.planes:
        raise TestbedError(f"no plane {plane} (planes 0..{topo.planes - 1})")
    rates: list[float] = []
    leaf_up: dict[str, float] = {}
    leaf_down: dict[str, float] = {}
    for link in topo.links:
        if link.plane != plane:
            continue
        if link.kind == "host":
            rates.extend(port.rate_bps / 8 for port in (link.up, link.down) if port.rate_bps)
            continue
        for port, agg in ((link.up, leaf_up), (link.down, leaf_down)):
            # An unshaped spine link makes that leaf's aggregate unlimited.
            agg[link.a] = agg.get(link.a, 0.0) + (port.rate_bps / 8 if port.rate_bps
                                                   else float("inf"))
    rates.extend(r for agg in (leaf_up, leaf_down) for r in agg.values() if r != float("inf"))
    return min(rates) if rates else None


def connection_plane_rate(topo: Topology) -> float | None:
    """``[connection] plane_rate`` (bytes/s) for a daemon on this testbed: the mean of
    the planes' bottleneck rates, so plane_rate x planes is the aggregate NSCC
    paces and sizes its window to. None if any plane is unshaped (the daemon
    default then applies)."""
    rates = [plane_bottleneck_rate(topo, p) for p in range(topo.planes)]
    known = [r for r in rates if r is not None]
    if len(known) != len(rates):
        return None
    return sum(known) / len(known)


def with_element(link: LinkSpec, **changes: Any) -> LinkSpec:
    return replace(link, **changes)
