"""Braid connections in the simulated fabric: pairs, transfers, measurements.

Shared by the scenario tests (tests/unit/test_scenarios.py) and
``braid bench sim``, so the numbers in docs/benchmarks.md come from exactly
what CI asserts on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric, FabricSpec, LinkSpec
from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.datagram import RxInfo, TxPath
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    Event,
    EvStateChanged,
    MessageAcked,
    MessageDelivered,
)
from wire.codec import HandshakeCodec
from wire.packets import Init

SECRET = bytes(range(32))
#: IPv6 + UDP bytes on the wire around every datagram.
OVERHEAD = 48


class Peer:
    """A connection plus what it reported (the sim's endpoint for it)."""

    def __init__(self, conn: Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self.delivered: list[tuple[float, int, bytes]] = []
        self.delivered_bytes = 0
        self.acked_bytes = 0
        self.acked_msgs = 0
        self.established_at: float | None = None
        self.failed: str | None = None
        self.closed: str | None = None
        self.ev_changes: list[tuple[float, EvStateChanged]] = []
        self.keep_data = True
        self.on_event: Callable[[Peer, Event, float], None] | None = None

    # Endpoint protocol ------------------------------------------------------------
    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        return self.conn.datagrams_to_send(now)

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None:
        self.conn.receive_datagram(data, rx, now)
        self._drain(now)

    def handle_timer(self, now: float) -> None:
        self.conn.handle_timer(now)
        self._drain(now)

    def next_timer(self) -> float | None:
        return self.conn.next_timer()

    def _drain(self, now: float) -> None:
        while (ev := self.conn.next_event()) is not None:
            if isinstance(ev, MessageDelivered):
                self.delivered_bytes += len(ev.data)
                self.delivered.append((now, ev.msg_id, ev.data if self.keep_data else b""))
            elif isinstance(ev, MessageAcked):
                self.acked_bytes += ev.size
                self.acked_msgs += 1
            elif isinstance(ev, ConnectionEstablished):
                self.established_at = now
            elif isinstance(ev, ConnectionFailed):
                self.failed = ev.reason
            elif isinstance(ev, ConnectionClosed):
                self.closed = ev.reason
            elif isinstance(ev, EvStateChanged):
                self.ev_changes.append((now, ev))
            if self.on_event is not None:
                self.on_event(self, ev, now)


def connect_pair(
    sim: Simulator, a_host: str, b_host: str, *, config: ConnectionConfig,
    b_config: ConnectionConfig | None = None, cids: tuple[int, int] = (1, 2),
    secret: bytes | None = SECRET,
) -> tuple[Peer, Peer]:
    """An initiator on ``a_host`` and its responder on ``b_host``, attached to ``sim``.

    The responder is built from the initiator's real INIT datagram (the job
    an ``Endpoint`` does on a real host), then both run the real handshake.
    """
    now = sim.now
    a = Connection.initiate(config=config, secret=secret, local_cid=cids[0], now=now)
    first = a.datagrams_to_send(now)
    init = HandshakeCodec(secret).open_untrusted(first[0][0]).body
    assert isinstance(init, Init)
    b = Connection.accept(config=b_config or replace(config, seed=config.seed + 7919),
                          secret=secret, local_cid=cids[1], init=init, now=now)
    pa, pb = Peer(a, a_host), Peer(b, b_host)
    sim.add_endpoint(a_host, pa, peer=b_host, conn_id=cids[0])
    sim.add_endpoint(b_host, pb, peer=a_host, conn_id=cids[1])
    return pa, pb


def make_fabric(*, planes: int = 4, spines: int = 4, rate: float = 1.25e9,
                delay: float = 5e-6, seed: int = 1, uplink: LinkSpec | None = None,
                spine: LinkSpec | None = None, downlink: LinkSpec | None = None,
                hosts: tuple[str, ...] = ("a", "b")) -> Fabric:
    """P planes of ``spines`` paths; by default every element runs at ``rate``
    bytes/s per plane (spine ports at rate/spines... no: at full rate each,
    so the host links are the bottleneck, as in a full-bisection fabric)."""
    up = uplink or LinkSpec(rate=rate, delay=delay, buffer=4 << 20)
    sp = spine or LinkSpec(rate=rate, delay=delay, buffer=1 << 20)
    dn = downlink or LinkSpec(rate=rate, delay=delay, buffer=1 << 20)
    return Fabric(FabricSpec(planes, spines, up, sp, dn, seed=seed, overhead=OVERHEAD), hosts)


def default_config(fabric: Fabric, **kw: Any) -> ConnectionConfig:
    """A config sized to the fabric: plane rate and base RTT from its links."""
    a, b = fabric.hosts[0], fabric.hosts[1]
    rtt = fabric.base_rtt(a, b, size=1500, ack_size=120)
    rate = fabric.link("uplink", a, 0).rate
    base: dict[str, Any] = {
        "planes": fabric.planes, "evs_per_plane": 16, "initial_rtt": rtt,
        "plane_rate": rate, "min_rto": max(4 * rtt, 50e-6),
    }
    base.update(kw)
    return ConnectionConfig(**base)


@dataclass
class TransferResult:
    ok: bool
    bytes: int
    start: float
    end: float
    ideal: float
    capacity: float
    max_gap: float
    stats_a: dict[str, Any] = field(default_factory=dict)
    stats_b: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def goodput(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def efficiency(self) -> float:
        return self.goodput / self.capacity if self.capacity else 0.0


def pattern(n: int, seed: int = 0) -> bytes:
    """``n`` pseudo-random bytes (so misplacement is always detected)."""
    out = bytearray()
    block = 0
    key = seed.to_bytes(8, "big")
    while len(out) < n:
        out += hashlib.blake2b(block.to_bytes(8, "big"), key=key, digest_size=64).digest()
        block += 1
    return bytes(out[:n])


def max_delivery_gap(times: list[float], start: float, end: float) -> float:
    pts = [start, *sorted(times), end]
    return max((b - a for a, b in zip(pts, pts[1:], strict=False)), default=0.0)
