"""A deterministic multi-plane fabric: link elements, ECMP routing, counters.

Topology (one independent fabric per plane, like MRC's multi-plane NICs)::

    host A NIC --uplink(A, p)--> spine k of plane p --spine(B, p, k)--> downlink(B, p) --> host B

``k = spine_for(A, B, p, ev)``, a seeded stable hash, so one EV always takes
one spine (what kernel ECMP does with the UDP source port / flow label). A
spine element is the spine's egress port *towards a destination host*, so
flows from different sources to one destination that hash onto the same spine
share it (a real ECMP collision); uplinks and downlinks are per host per plane.
Every element is directional, so a failure of one is one-way by construction.

All rates are bytes per virtual second, all times virtual seconds, all sizes
bytes. The event machinery lives in :mod:`testbed.sim.driver`; this module
only holds configuration, state and the counters.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from wire.constants import CONTROL_TYPES

LinkKind = Literal["uplink", "spine", "downlink"]
LINK_KINDS: Final[tuple[LinkKind, ...]] = ("uplink", "spine", "downlink")
#: Drop reasons counted per link.
DROP_REASONS: Final = ("buffer", "loss", "gray", "down")
#: Second byte of a v1 datagram for types that are served by the priority queue.
CONTROL_TYPE_BYTES: Final = frozenset(int(t) for t in CONTROL_TYPES)
_ROUTE_CACHE_MAX: Final = 1 << 16

#: ``trace(event, now, packet, link, reason)``; event is one of "sent",
#: "trimmed", "marked", "dropped" (reason: buffer/loss/gray/down/unroutable),
#: "delivered". ``link`` is None for "sent", the downlink for "delivered".
TraceFn = Callable[[str, float, "Packet", "Link | None", str], None]


class SimClock(Protocol):
    """What links need of the simulator driving them (``testbed.sim.driver.Simulator``)."""

    now: float
    trace: TraceFn | None


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """How one link element behaves (a template; each element gets a mutable copy).

    ``rate`` bytes/s; ``delay`` propagation seconds; ``jitter`` extra delay
    drawn uniformly from [0, jitter) s (never reorders within one link unless
    ``reorder``); ``buffer`` bytes of the data queue (tail drop);
    ``control_buffer`` bytes of the strict-priority control queue (control
    packets and trimmed headers; never trimmed). ``trim_threshold``: data
    queue bytes above which an arriving DATA packet is cut to its header
    (``wire.constants.trim_point``). ``trim`` None means "on iff a threshold is
    set"; ``trim=True`` without a threshold trims when the buffer would
    overflow instead of dropping. ``ecn_threshold``: data queue bytes above
    which an arriving DATA packet is CE-marked. ``loss`` / ``gray_loss``:
    random drop probabilities (counted apart: bit-error loss vs a silent gray
    failure of this one direction).
    """

    rate: float
    delay: float
    jitter: float = 0.0
    buffer: int = 1 << 20
    trim_threshold: int | None = None
    ecn_threshold: int | None = None
    loss: float = 0.0
    trim: bool | None = None
    gray_loss: float = 0.0
    control_buffer: int = 1 << 18
    reorder: bool = False

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"LinkSpec.rate must be > 0 bytes/s, got {self.rate!r}")
        if self.delay < 0 or self.jitter < 0:
            raise ValueError("LinkSpec.delay and jitter must be >= 0")
        if not (0.0 <= self.loss <= 1.0 and 0.0 <= self.gray_loss <= 1.0):
            raise ValueError("LinkSpec.loss and gray_loss are probabilities in [0, 1]")
        if self.buffer < 0 or self.control_buffer < 0:
            raise ValueError("LinkSpec buffers must be >= 0")

    @property
    def trimming(self) -> bool:
        return self.trim if self.trim is not None else self.trim_threshold is not None


@dataclass(frozen=True, slots=True)
class FabricSpec:
    """``planes`` independent fabrics with ``spines`` ECMP paths each.

    ``overhead`` bytes are added to every datagram's length for serialisation
    and queue accounting (e.g. 48 for IPv6 + UDP, more with Ethernet framing).
    """

    planes: int
    spines: int
    uplink: LinkSpec
    spine: LinkSpec
    downlink: LinkSpec
    seed: int = 0
    overhead: int = 0

    def __post_init__(self) -> None:
        if self.planes < 1 or self.spines < 1:
            raise ValueError("FabricSpec needs at least one plane and one spine")
        if self.overhead < 0:
            raise ValueError("FabricSpec.overhead must be >= 0")


class Packet:
    """One datagram in flight (one object per datagram, reused across hops)."""

    __slots__ = (
        "ce",
        "control",
        "data",
        "dscp",
        "dst",
        "ev",
        "gen",
        "hop",
        "id",
        "plane",
        "route",
        "sent_at",
        "size",
        "src",
        "trimmed",
    )

    def __init__(
        self,
        pid: int,
        data: bytes,
        size: int,
        src: str,
        dst: str,
        plane: int,
        ev: int,
        dscp: int,
        route: tuple[Link, Link, Link],
        sent_at: float,
    ) -> None:
        self.id = pid
        self.data = data
        #: Wire bytes (datagram length + the fabric's per-packet overhead).
        self.size = size
        self.src = src
        self.dst = dst
        self.plane = plane
        self.ev = ev
        self.dscp = dscp
        self.ce = False
        self.control = len(data) > 1 and data[1] in CONTROL_TYPE_BYTES
        self.trimmed = False
        self.route = route
        self.hop = 0
        self.gen = 0
        self.sent_at = sent_at

    def __repr__(self) -> str:
        return (
            f"Packet(id={self.id}, {self.src}->{self.dst}, plane={self.plane}, ev={self.ev},"
            f" size={self.size}, trimmed={self.trimmed}, ce={self.ce})"
        )


class Link:
    """One directional link element: a FIFO egress queue plus a priority queue.

    Every attribute named like a :class:`LinkSpec` field may be changed at any
    virtual time (from ``Simulator.at``). Setting ``down = True`` drops what
    is queued and what is on the wire at once; arrivals are dropped until it
    is set back to False.
    """

    __slots__ = (
        "_down",
        "_fabric",
        "buffer",
        "busy_until",
        "bytes",
        "cbytes",
        "control_buffer",
        "cq",
        "dbytes",
        "delay",
        "delivered",
        "dq",
        "drop_buffer",
        "drop_down",
        "drop_gray",
        "drop_loss",
        "ecn_threshold",
        "enqueued",
        "gen",
        "gray_loss",
        "host",
        "jitter",
        "kick_pending",
        "kind",
        "last_arrival",
        "last_hop",
        "loss",
        "marked",
        "max_queue",
        "name",
        "plane",
        "rate",
        "reorder",
        "spine",
        "trim",
        "trim_threshold",
        "trimmed",
    )

    def __init__(
        self,
        fabric: Fabric,
        kind: LinkKind,
        host: str,
        plane: int,
        spine: int | None,
        spec: LinkSpec,
    ) -> None:
        self._fabric = fabric
        self.kind: LinkKind = kind
        self.host = host
        self.plane = plane
        self.spine = spine
        self.last_hop = kind == "downlink"
        self.name = (
            f"{kind}:{host}:p{plane}" if spine is None else f"{kind}:{host}:p{plane}:s{spine}"
        )
        self.rate: float = spec.rate
        self.delay: float = spec.delay
        self.jitter: float = spec.jitter
        self.buffer: int = spec.buffer
        self.control_buffer: int = spec.control_buffer
        self.trim: bool = spec.trimming
        self.trim_threshold: int | None = spec.trim_threshold
        self.ecn_threshold: int | None = spec.ecn_threshold
        self.loss: float = spec.loss
        self.gray_loss: float = spec.gray_loss
        self.reorder: bool = spec.reorder
        self._down = False
        # Queue state. ``gen`` changes when the link goes down so that events
        # already scheduled for packets it carried are recognised as dead.
        self.dq: deque[Packet] = deque()
        self.cq: deque[Packet] = deque()
        self.dbytes = 0
        self.cbytes = 0
        self.busy_until = 0.0
        self.kick_pending = False
        self.last_arrival = 0.0
        self.gen = 0
        # Counters.
        self.enqueued = 0
        self.delivered = 0
        self.trimmed = 0
        self.marked = 0
        self.drop_buffer = 0
        self.drop_loss = 0
        self.drop_gray = 0
        self.drop_down = 0
        self.max_queue = 0
        self.bytes = 0

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        if value and not self._down:
            self.gen += 1
            sim = self._fabric.sim
            flushed = list(self.cq) + list(self.dq)
            self.cq.clear()
            self.dq.clear()
            self.cbytes = self.dbytes = 0
            self.kick_pending = False
            now = sim.now if sim is not None else 0.0
            self.busy_until = now
            self.drop_down += len(flushed)
            if sim is not None and sim.trace is not None:
                for pkt in flushed:
                    sim.trace("dropped", now, pkt, self, "down")
        self._down = bool(value)

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting in both queues (the packet being serialised excluded)."""
        return self.dbytes + self.cbytes

    def stats(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "host": self.host,
            "plane": self.plane,
            "spine": self.spine,
            "down": self._down,
            "enqueued": self.enqueued,
            "delivered": self.delivered,
            "trimmed": self.trimmed,
            "marked": self.marked,
            "dropped": {
                "buffer": self.drop_buffer,
                "loss": self.drop_loss,
                "gray": self.drop_gray,
                "down": self.drop_down,
            },
            "max_queue": self.max_queue,
            "bytes": self.bytes,
        }

    def __repr__(self) -> str:
        return f"Link({self.name}, rate={self.rate}, down={self._down})"


class Fabric:
    """Hosts, planes and link elements; routing by seeded ECMP hash."""

    def __init__(self, spec: FabricSpec, hosts: tuple[str, ...] | list[str] = ()) -> None:
        self.spec = spec
        self.planes = spec.planes
        self.spines = spec.spines
        self.overhead = spec.overhead
        self.rng = random.Random(spec.seed)
        #: Set by the Simulator that drives this fabric.
        self.sim: SimClock | None = None
        self._uplinks: dict[tuple[str, int], Link] = {}
        self._downlinks: dict[tuple[str, int], Link] = {}
        self._spinelinks: dict[tuple[str, int, int], Link] = {}
        self._hosts: list[str] = []
        self._routes: dict[tuple[str, str, int, int], tuple[Link, Link, Link]] = {}
        self._seed_key = hashlib.blake2b(repr(spec.seed).encode(), digest_size=16).digest()
        for h in hosts:
            self.add_host(h)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self._hosts)

    def has_host(self, name: str) -> bool:
        return (name, 0) in self._uplinks

    def add_host(self, name: str) -> None:
        """Attach a host with one NIC per plane (idempotent)."""
        if self.has_host(name):
            return
        s = self.spec
        self._hosts.append(name)
        for p in range(s.planes):
            self._uplinks[(name, p)] = Link(self, "uplink", name, p, None, s.uplink)
            self._downlinks[(name, p)] = Link(self, "downlink", name, p, None, s.downlink)
            for k in range(s.spines):
                self._spinelinks[(name, p, k)] = Link(self, "spine", name, p, k, s.spine)

    def _check(self, host: str, plane: int) -> None:
        if not self.has_host(host):
            raise KeyError(f"unknown host {host!r}")
        if not 0 <= plane < self.planes:
            raise ValueError(f"plane {plane} out of range 0..{self.planes - 1}")

    def spine_for(self, src: str, dst: str, plane: int, ev: int) -> int:
        """The spine an EV of (src -> dst, plane) hashes onto; stable for a seed."""
        msg = f"{src}\x00{dst}\x00{plane}\x00{ev}".encode()
        h = hashlib.blake2b(msg, digest_size=8, key=self._seed_key).digest()
        return int.from_bytes(h, "big") % self.spines

    def route(self, src: str, dst: str, plane: int, ev: int) -> tuple[Link, Link, Link]:
        """(uplink, spine, downlink) a datagram from src to dst crosses."""
        key = (src, dst, plane, ev)
        r = self._routes.get(key)
        if r is None:
            self._check(src, plane)
            self._check(dst, plane)
            k = self.spine_for(src, dst, plane, ev)
            r = (
                self._uplinks[(src, plane)],
                self._spinelinks[(dst, plane, k)],
                self._downlinks[(dst, plane)],
            )
            if len(self._routes) >= _ROUTE_CACHE_MAX:
                self._routes.clear()  # EVs are unbounded ints; keep memory bounded
            self._routes[key] = r
        return r

    def link(self, kind: LinkKind, host: str, plane: int, spine: int | None = None) -> Link:
        """One element: ``uplink``/``downlink`` of ``host``, or ``spine`` ``spine``'s
        port towards ``host`` (the destination) in ``plane``."""
        self._check(host, plane)
        if kind == "uplink":
            return self._uplinks[(host, plane)]
        if kind == "downlink":
            return self._downlinks[(host, plane)]
        if kind == "spine":
            if spine is None or not 0 <= spine < self.spines:
                raise ValueError(f"spine index {spine!r} out of range 0..{self.spines - 1}")
            return self._spinelinks[(host, plane, spine)]
        raise ValueError(f"unknown link kind {kind!r}")

    def links(self, plane: int | None = None) -> list[Link]:
        """All elements (of one plane if given), in a stable order."""
        out: list[Link] = []
        for h in self._hosts:
            for p in range(self.planes) if plane is None else (plane,):
                out.append(self._uplinks[(h, p)])
                out.extend(self._spinelinks[(h, p, k)] for k in range(self.spines))
                out.append(self._downlinks[(h, p)])
        return out

    def set_plane_down(self, plane: int, down: bool) -> None:
        """Switch every element of one plane off (dropping what it carries) or on."""
        if not 0 <= plane < self.planes:
            raise ValueError(f"plane {plane} out of range 0..{self.planes - 1}")
        for ln in self.links(plane):
            ln.down = down

    def aggregate_capacity(self, src: str, dst: str) -> float:
        """Bytes/s src can push to dst over all planes (up elements only):
        the sum over planes of min(uplink, sum of spine ports, downlink)."""
        total = 0.0
        for p in range(self.planes):
            self._check(src, p)
            self._check(dst, p)
            up = self._uplinks[(src, p)]
            down = self._downlinks[(dst, p)]
            if up.down or down.down:
                continue
            spines = sum(
                ln.rate
                for k in range(self.spines)
                if not (ln := self._spinelinks[(dst, p, k)]).down
            )
            total += min(up.rate, spines, down.rate)
        return total

    def one_way_delay(
        self, src: str, dst: str, *, plane: int = 0, ev: int = 0, size: int = 0
    ) -> float:
        """Propagation plus serialisation of one ``size``-byte datagram on an idle path
        (jitter excluded; ``size`` 0 means propagation only)."""
        wire = size + self.overhead if size else 0
        return sum(ln.delay + wire / ln.rate for ln in self.route(src, dst, plane, ev))

    def base_rtt(
        self,
        src: str,
        dst: str,
        *,
        plane: int = 0,
        ev: int = 0,
        size: int = 0,
        ack_size: int = 0,
    ) -> float:
        """Idle round trip: a ``size``-byte datagram src->dst and an ``ack_size``-byte
        reply dst->src, both on ``ev`` of ``plane``."""
        return self.one_way_delay(src, dst, plane=plane, ev=ev, size=size) + self.one_way_delay(
            dst, src, plane=plane, ev=ev, size=ack_size
        )

    def stats(self) -> dict[str, dict[str, Any]]:
        """Counters of every element, keyed by link name (``kind:host:pP[:sK]``)."""
        return {ln.name: ln.stats() for ln in self.links()}

    def plane_stats(self) -> dict[int, dict[str, int]]:
        """Per-plane sums of the counters (handy for per-plane share in benchmarks)."""
        out: dict[int, dict[str, int]] = {}
        for ln in self.links():
            d = out.setdefault(
                ln.plane,
                {"enqueued": 0, "trimmed": 0, "marked": 0, "dropped": 0, "bytes": 0},
            )
            d["enqueued"] += ln.enqueued
            d["trimmed"] += ln.trimmed
            d["marked"] += ln.marked
            d["dropped"] += ln.drop_buffer + ln.drop_loss + ln.drop_gray + ln.drop_down
            d["bytes"] += ln.bytes
        return out
