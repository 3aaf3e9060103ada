"""One host's Braid state, whoever serves its applications: the endpoint and its
I/O adapter built from a host config, the table of configured peers with what
each has unacknowledged, the mapping of transport events to those peers and
to the inbox, reconnection when a peer restarted, and the receive credit
that comes back only when an application took a message.

The in-process endpoint (``transport.local``, ``braid.open``) is this plus an
API; ``braid daemon`` keeps the same rules in ``transport/daemon.py`` (the
same defaults, messages and stats shape come from there).

Zero copies above the transport: ``queue`` hands the caller's buffer to
``Connection.send_message`` as it is (and keeps that reference, not a copy,
for a re-send after a peer restart), and ``take`` returns the message object
the receiver assembled.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from transport.aio import EndpointIO
from transport.connection import Connection
from transport.daemon import UNREACHABLE, DaemonConfig, Log, _jsonable, auto_payload
from transport.endpoint import Endpoint, PeerKey
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    Event,
    MessageAcked,
    MessageDelivered,
)
from transport.inbox import Inbox, Item
from transport.udp import PeerTable

Reply = dict[str, Any]


class SendRefused(Exception):
    """A message not queued (unknown peer, closing, too large, ...); one-line reason."""


@dataclass
class PendingSend:
    size: int
    #: The caller's buffer (not a copy): re-sent on a new connection if the peer restarts.
    data: bytes | memoryview
    #: Resolved with ``{"event": "acked", "msg_id", "bytes"}`` or failed with the reason.
    done: asyncio.Future[Reply]


@dataclass
class PeerState:
    name: str
    conn: Connection | None = None
    ready: asyncio.Future[Connection] | None = None
    pending: dict[int, PendingSend] = field(default_factory=dict)
    unacked: int = 0
    window: asyncio.Event = field(default_factory=asyncio.Event)
    reconnects: int = 0


def host_connection_config(cfg: DaemonConfig) -> DaemonConfig:
    """The config as the host runs it: DATA sized to the path MTU when no
    payload was configured, and delivered messages held (their credit kept)
    until an application takes them, so each connection holds at most its
    receive window here (``recv_buffer`` caps it): back-pressure, never drops."""
    conn = cfg.connection
    if cfg.payload_auto:
        payload = auto_payload(cfg.planes, cfg.peers)
        if payload is not None:
            conn = replace(conn, payload_size=payload)
    window = max(1 << 20, min(conn.recv_window, cfg.recv_buffer, (1 << 31) - 1))
    conn = replace(conn, hold_delivered=True, recv_window=window,
                   max_message_size=min(conn.max_message_size, window))
    return replace(cfg, connection=conn)


class HostCore:
    """Endpoint + I/O adapter + peers + inbox for one host config."""

    def __init__(self, cfg: DaemonConfig, *, secret: bytes | None, log: Log | None = None,
                 on_event: Callable[[Connection, PeerKey, Event], None] | None = None,
                 error: Callable[[str], Exception] = SendRefused) -> None:
        self.cfg = host_connection_config(cfg)
        #: What a failed send's future raises (the API's own error type).
        self.error = error
        self.secret = secret
        self.log = log or Log("warning")
        self.extra_on_event = on_event
        self.endpoint = Endpoint(config=self.cfg.connection, secret=secret)
        table = PeerTable(len(cfg.planes), [a.port for a in cfg.planes])
        for name, addrs in cfg.peers.items():
            table.add(name, addrs)
        self.io = EndpointIO(self.endpoint, cfg.planes, table, on_event=self._on_event,
                             pool=cfg.pool, rcvbuf=cfg.rcvbuf, sndbuf=cfg.sndbuf,
                             queue_wait=cfg.queue_wait)
        self.peers = {name: PeerState(name) for name in cfg.peers}
        self.inbox = Inbox()
        #: (peer, msg_id) -> connections that delivered it, oldest first: whose
        #: credit comes back when the message leaves the inbox (``take``).
        self._owner: dict[tuple[str, int], deque[Connection]] = {}
        self.inbox_bytes = 0
        self.inbox_ready = asyncio.Event()
        self.stopping = False
        self.started = time.monotonic()
        self.messages_delivered = 0
        self.bytes_delivered = 0
        self.messages_taken = 0

    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind the plane sockets (OSError as the kernel said, e.g. EADDRINUSE)."""
        self.io.open(loop)
        self.started = time.monotonic()

    # -- sending ---------------------------------------------------------------------------

    def check_peer(self, name: str) -> PeerState:
        p = self.peers.get(name)
        if p is None:
            known = ", ".join(sorted(self.peers)) or "none"
            raise SendRefused(f"unknown peer {name!r} (configured peers: {known})")
        if self.stopping:
            raise SendRefused(f"{self.cfg.name} is closing; not accepting new work")
        return p

    async def connection(self, name: str) -> Connection:
        """The connection to ``name``, opened on demand (ConnectionError: why not)."""
        p = self.check_peer(name)
        if p.conn is not None and not p.conn.is_terminal:
            if p.ready is not None:
                return await asyncio.shield(p.ready)
            return p.conn
        p.ready = asyncio.get_running_loop().create_future()
        p.conn = self.io.connect(name)
        self.log("info", "connecting", peer=name, cid=p.conn.local_cid)
        return await asyncio.shield(p.ready)

    async def queue(self, name: str, data: bytes | memoryview) -> asyncio.Future[Reply]:
        """Queue one message once the peer's send window has room (waits: back-
        pressure, never drops); the future resolves at the peer's ACK."""
        size = len(data)
        while True:
            try:
                conn = await self.connection(name)
            except ConnectionError as exc:
                raise SendRefused(str(exc)) from None
            p = self.peers[name]
            # Room is checked after the last await and taken below without
            # one, so concurrent callers cannot all pass the check at once.
            # At least one message always goes, whatever its size (as the daemon).
            if p.unacked == 0 or p.unacked + size <= self.cfg.send_window:
                break
            p.window.clear()
            await p.window.wait()
        try:
            msg_id = conn.send_message(data)  # type: ignore[arg-type]  # a view is fine
        except (RuntimeError, ValueError) as exc:
            raise SendRefused(f"cannot send: {exc}") from None
        done: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        p.pending[msg_id] = PendingSend(size, data, done)
        p.unacked += size
        self.io.kick()
        return done

    # -- receiving ---------------------------------------------------------------------------

    def take(self) -> Item | None:
        """The next delivered message (DRR over peers), its credit given back."""
        if not self.inbox:
            return None
        item = self.inbox.popleft()
        peer, msg_id, data = item
        self.inbox_bytes -= len(data)
        self.messages_taken += 1
        owners = self._owner.get((peer, msg_id))
        if owners:
            conn = owners.popleft()
            if not owners:
                del self._owner[(peer, msg_id)]
            if not conn.is_terminal:
                conn.consume(len(data), self.io.now())
                self.io.kick()
        return item

    # -- events from the transport ------------------------------------------------------------

    def _on_event(self, conn: Connection, peer: PeerKey, ev: Event) -> None:
        name = str(peer)
        p = self.peers.get(name)
        if isinstance(ev, MessageAcked):
            pend = p.pending.pop(ev.msg_id, None) if p is not None else None
            if p is not None and pend is not None:
                p.unacked -= pend.size
                p.window.set()
                if not pend.done.done():
                    pend.done.set_result({"event": "acked", "msg_id": ev.msg_id,
                                          "bytes": ev.size})
        elif isinstance(ev, MessageDelivered):
            self.messages_delivered += 1
            self.bytes_delivered += len(ev.data)
            # Never dropped: the connection's credit bounds what can pile up.
            self.inbox.append((name, ev.msg_id, ev.data))
            self._owner.setdefault((name, ev.msg_id), deque()).append(conn)
            self.inbox_bytes += len(ev.data)
            self.inbox_ready.set()
        elif isinstance(ev, ConnectionEstablished):
            self.log("info", "connection_established", peer=name, cid=conn.local_cid,
                     role="initiator" if conn.initiator else "responder")
            if p is not None and p.conn is conn and p.ready is not None and not p.ready.done():
                p.ready.set_result(conn)
        elif isinstance(ev, ConnectionFailed) and ev.peer_forgot and p is not None \
                and p.conn is conn and not self.stopping:
            self._reconnect(p, conn, ev.reason)
        elif isinstance(ev, ConnectionFailed):
            reason = ev.reason
            if reason.startswith("peer unreachable"):
                reason = f"{UNREACHABLE} ({reason.partition(': ')[2] or reason})"
            self.log("warning", "connection_failed", peer=name, cid=conn.local_cid,
                     reason=reason)
            self._end(p, conn, reason)
        elif isinstance(ev, ConnectionClosed):
            self.log("info", "connection_closed", peer=name, cid=conn.local_cid,
                     reason=ev.reason)
            self._end(p, conn, f"connection closed: {ev.reason}")
        if self.extra_on_event is not None:
            self.extra_on_event(conn, peer, ev)

    def _reconnect(self, p: PeerState, old: Connection, why: str) -> None:
        """The peer lost our connection (it restarted): open a new one and
        re-send, in order, every message it had not acknowledged (at-least-once
        across a restart, docs/daemon.md "Delivery semantics")."""
        items = list(p.pending.values())
        p.pending.clear()
        p.reconnects += 1
        self.log("warning", "peer_restarted", peer=p.name, cid=old.local_cid, reason=why,
                 resending=len(items))
        p.ready = asyncio.get_running_loop().create_future()
        # Nobody may be waiting on it; retrieve a failure so it is not reported.
        p.ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        p.conn = conn = self.io.connect(p.name)
        for pend in items:
            p.pending[conn.send_message(pend.data)] = pend  # type: ignore[arg-type]

    def _end(self, p: PeerState | None, conn: Connection, reason: str) -> None:
        """``conn`` is gone: everything waiting on it fails with the reason."""
        if p is None or p.conn is not conn:
            return
        if p.ready is not None and not p.ready.done():
            p.ready.set_exception(ConnectionError(reason))
        for pend in p.pending.values():
            if not pend.done.done():
                pend.done.set_exception(self.error(reason))
        p.pending.clear()
        p.unacked = 0
        p.window.set()
        p.conn = None
        p.ready = None

    # -- leaving ---------------------------------------------------------------------------

    async def close(self, drain_timeout: float) -> int:
        """Refuse new work, let queued messages be acknowledged for at most
        ``drain_timeout`` s, close connections with the peers (bounded), then the
        sockets. Returns the bytes left unacknowledged (their futures are cancelled)."""
        self.stopping = True
        for p in self.peers.values():
            p.window.set()  # senders waiting for room see ``stopping``
        loop = asyncio.get_running_loop()
        end = loop.time() + drain_timeout
        conns = list(self.endpoint.connections.values())
        while loop.time() < end and any(c.sender.has_pending and not c.is_terminal
                                        for c in conns):
            await asyncio.sleep(0.01)
        left = sum(p.unacked for p in self.peers.values())
        now = self.io.now()
        for c in list(self.endpoint.connections.values()):
            if not c.is_terminal:
                c.close(now)
        self.io.kick()
        end = loop.time() + min(1.0, drain_timeout)
        while self.endpoint.connections and loop.time() < end:
            await asyncio.sleep(0.01)
        for p in self.peers.values():
            for pend in p.pending.values():
                pend.done.cancel()  # as a client that leaves: still pending, cancelled
            p.pending.clear()
            p.unacked = 0
            if p.ready is not None and not p.ready.done():
                p.ready.cancel()
        self.io.close()
        self.inbox_ready.set()
        return left

    # -- stats (the daemon's shape: tools read either) ---------------------------------------

    def stats(self) -> dict[str, Any]:
        conns = []
        for c in self.endpoint.connections.values():
            snap = c.paths.snapshot()
            conns.append({
                "peer": str(self.endpoint.peer_of(c)),
                "role": "initiator" if c.initiator else "responder",
                "stats": _jsonable(c.stats()),
                "cc": _jsonable(c.cc.stats()),
                "paths": {"policy": snap.get("policy"), "states": snap.get("states"),
                          "planes": snap.get("planes"), "evs": snap.get("evs"),
                          "plane_shares": _jsonable(snap.get("plane_shares"))},
            })
        return {
            "name": self.cfg.name,
            "uptime": round(time.monotonic() - self.started, 3),
            "encrypted": self.secret is not None,
            "planes": [str(a) for a in self.cfg.planes],
            "peers": sorted(self.cfg.peers),
            "io": _jsonable(self.io.stats()),
            "connections": conns,
            "inbox": {"messages": len(self.inbox), "bytes": self.inbox_bytes, "dropped": 0,
                      "handed_out": 0, "requeued": 0},
            "unacked": {name: {"messages": len(p.pending), "bytes": p.unacked}
                        for name, p in sorted(self.peers.items())},
            "cancelled": {"messages": 0, "bytes": 0},
            "delivered": {"messages": self.messages_delivered, "bytes": self.bytes_delivered},
            "stopping": self.stopping,
        }
