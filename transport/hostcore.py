"""One host's Braid state, whoever serves its applications: the endpoint and its
I/O adapter built from a host config, the table of configured peers with what
each has unacknowledged and its send window, the mapping of transport events
to those peers and to the inbox (with the one-line reasons applications see),
reconnection when a peer restarted, the receive credit that comes back only
when an application took a message, the bounded close and the stats.

This module is the only owner of those rules. ``braid daemon``
(``transport.daemon``: a ``HostCore`` plus the Unix control socket, receive
streams, qlog and key log) and the in-process endpoint (``transport.local``,
``braid.open``: a ``HostCore`` plus an API) are both built on it.

Zero copies above the transport: a queued message's buffer is handed to
``Connection.send_message`` as it is (and that reference, not a copy, is kept
for a re-send after a peer restart), and ``take`` returns the message object
the receiver assembled.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from transport.aio import EndpointIO
from transport.connection import Connection
from transport.daemon_config import DaemonConfig, auto_payload
from transport.daemon_log import Log
from transport.endpoint import Endpoint, PeerKey
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    Event,
    EvStateChanged,
    MessageAcked,
    MessageDelivered,
)
from transport.inbox import Inbox, Item
from transport.udp import PeerTable, PlaneAddr

Reply = dict[str, Any]

#: What a connection that never answered (or whose key differs) fails with.
UNREACHABLE = "peer unreachable or key mismatch"


class SendRefused(Exception):
    """A message not queued (unknown peer, closing, too large, ...); one-line reason."""


@dataclass
class PendingSend:
    """A queued message its peer has not acknowledged: whoever waits for it is
    told once, by ``acked`` or ``failed`` (or ``cancelled`` when the host closes)."""

    size: int
    #: The caller's buffer (not a copy): re-sent on a new connection if the peer restarts.
    data: bytes | memoryview

    def acked(self, msg_id: int, nbytes: int) -> None:
        raise NotImplementedError

    def failed(self, msg_id: int, reason: str) -> None:
        raise NotImplementedError

    def cancelled(self) -> None:
        """The host closed with the message still unacknowledged."""


@dataclass
class FutureSend(PendingSend):
    """Resolved with ``{"event": "acked", "msg_id", "bytes"}`` or failed with the reason."""

    done: asyncio.Future[Reply]
    error: Callable[[str], Exception]

    def acked(self, msg_id: int, nbytes: int) -> None:
        if not self.done.done():
            self.done.set_result({"event": "acked", "msg_id": msg_id, "bytes": nbytes})

    def failed(self, msg_id: int, reason: str) -> None:
        if not self.done.done():
            self.done.set_exception(self.error(reason))

    def cancelled(self) -> None:
        self.done.cancel()  # as a client that leaves: still pending, cancelled


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
                 error: Callable[[str], Exception] = SendRefused,
                 closing: str | None = None) -> None:
        self.cfg = host_connection_config(cfg)
        #: What a failed send's future raises (the API's own error type).
        self.error = error
        #: Why new work is refused once closing.
        self.closing = closing or f"{cfg.name} is closing; not accepting new work"
        self.secret = secret
        self.log = log or Log("warning")
        self.extra_on_event = on_event
        self.endpoint = Endpoint(config=self.cfg.connection, secret=secret)
        table = PeerTable(len(cfg.planes), [a.port for a in cfg.planes])
        for name, addrs in cfg.peers.items():
            table.add(name, addrs)
        self.io = EndpointIO(self.endpoint, cfg.planes, table, on_event=self._on_event,
                             pool=cfg.pool, rcvbuf=cfg.rcvbuf, sndbuf=cfg.sndbuf,
                             queue_wait=cfg.queue_wait, rx_holdoff=cfg.rx_holdoff,
                             rx_poll_target=cfg.rx_poll_target, host_stamps=cfg.host_stamps)
        self.peers = {name: PeerState(name) for name in cfg.peers}
        #: Per-peer queues served round robin (transport/inbox.py).
        self.inbox = Inbox()
        #: (peer, msg_id) -> connections that delivered it, oldest first: whose
        #: credit comes back when the message leaves the inbox (``release``).
        self._owner: dict[tuple[str, int], deque[Connection]] = {}
        #: Bytes delivered and not yet released (in the inbox or handed out).
        self.inbox_bytes = 0
        self.inbox_ready = asyncio.Event()
        self.stopping = False
        self.started = time.monotonic()
        self.messages_delivered = 0
        self.bytes_delivered = 0
        self.messages_taken = 0
        self.messages_requeued = 0
        self.messages_cancelled = 0
        self.bytes_cancelled = 0

    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind the plane sockets (OSError as the kernel said, e.g. EADDRINUSE)."""
        self.io.open(loop)
        self.started = time.monotonic()

    def failing_plane(self) -> PlaneAddr:
        """After ``open`` failed: the first plane address that cannot be bound."""
        return next((a for a in self.cfg.planes if _bind_fails(a)), self.cfg.planes[0])

    # -- sending ---------------------------------------------------------------------------

    def check_peer(self, name: object) -> PeerState:
        p = self.peers.get(name) if isinstance(name, str) else None
        if p is None:
            known = ", ".join(sorted(self.peers)) or "none"
            raise SendRefused(f"unknown peer {name!r} (configured peers: {known})")
        if self.stopping:
            raise SendRefused(self.closing)
        return p

    async def connection(self, name: str) -> Connection:
        """The connection to ``name``, opened on demand (SendRefused: unknown
        peer or closing; ConnectionError: why it failed)."""
        p = self.check_peer(name)
        if p.conn is not None and not p.conn.is_terminal:
            if p.ready is not None:
                return await asyncio.shield(p.ready)
            return p.conn
        p.ready = asyncio.get_running_loop().create_future()
        p.conn = self.io.connect(name)
        self.log("info", "connecting", peer=name, cid=p.conn.local_cid,
                 planes=",".join(str(a) for a in self.cfg.peers[name]))
        return await asyncio.shield(p.ready)

    async def admit(self, name: str, size: int, *, gone: Callable[[], bool] | None = None,
                    poll: float = 0.25) -> tuple[PeerState, Connection] | None:
        """Wait until ``name``'s send window has room for ``size`` more bytes
        (back-pressure, never drops; at least one message always goes,
        whatever its size) and its connection is up. Room is checked after the
        last await, so concurrent callers cannot all pass at once: ``submit``
        right away. None if ``gone()`` (checked every ``poll`` s while waiting)
        says the sender left; SendRefused with the reason otherwise."""
        while True:
            try:
                conn = await self.connection(name)
            except ConnectionError as exc:
                raise SendRefused(str(exc)) from None
            if gone is not None and gone():
                return None
            p = self.peers[name]
            if p.unacked == 0 or p.unacked + size <= self.cfg.send_window:
                return p, conn
            p.window.clear()
            if gone is None:
                await p.window.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(p.window.wait(), poll)

    def submit(self, p: PeerState, conn: Connection, pend: PendingSend) -> int:
        """Queue ``pend`` on ``conn`` (just admitted); its message id."""
        try:
            msg_id = conn.send_message(pend.data)  # type: ignore[arg-type]  # a view is fine
        except (RuntimeError, ValueError) as exc:
            raise SendRefused(f"cannot send: {exc}") from None
        p.pending[msg_id] = pend
        p.unacked += pend.size
        self.io.kick()
        return msg_id

    async def queue(self, name: str, data: bytes | memoryview) -> asyncio.Future[Reply]:
        """Queue one message once the peer's send window has room; the future
        resolves at the peer's ACK or fails with ``self.error(reason)``."""
        got = await self.admit(name, len(data))
        assert got is not None
        done: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.submit(*got, FutureSend(len(data), data, done, self.error))
        return done

    def cancel_unstarted(self, mine: Callable[[PendingSend], bool]) -> int:
        """Take back the pending messages ``mine`` selects that have not started
        on the wire (one already started is finished: the receiver must never
        be left holding part of one). How many were taken back."""
        taken = 0
        for p in self.peers.values():
            if p.conn is None:
                continue
            for mid in [mid for mid, pend in p.pending.items() if mine(pend)]:
                if p.conn.cancel_message(mid):
                    pend = p.pending.pop(mid)
                    p.unacked -= pend.size
                    self.bytes_cancelled += pend.size
                    taken += 1
            p.window.set()
        self.messages_cancelled += taken
        return taken

    # -- receiving ---------------------------------------------------------------------------

    def take(self) -> Item | None:
        """The next delivered message (DRR over peers), its credit given back."""
        if not self.inbox:
            return None
        item = self.inbox.popleft()
        self.messages_taken += 1
        self.release(*item)
        return item

    def release(self, peer: str, msg_id: int, data: bytes) -> None:
        """A message left the host for good (an application has it): its
        connection gets the receive credit back (back-pressure)."""
        self.inbox_bytes -= len(data)
        owners = self._owner.get((peer, msg_id))
        if not owners:
            return
        conn = owners.popleft()
        if not owners:
            del self._owner[(peer, msg_id)]
        if not conn.is_terminal:
            conn.consume(len(data), self.io.now())
            self.io.kick()

    def handed_out(self) -> int:
        """Messages given to applications and not confirmed yet (none here)."""
        return 0

    # -- events from the transport ------------------------------------------------------------

    def _on_event(self, conn: Connection, peer: PeerKey, ev: Event) -> None:
        name = str(peer)
        p = self.peers.get(name)
        cid = conn.local_cid
        if isinstance(ev, MessageAcked):
            pend = p.pending.pop(ev.msg_id, None) if p is not None else None
            if p is not None and pend is not None:
                p.unacked -= pend.size
                p.window.set()
                pend.acked(ev.msg_id, ev.size)
        elif isinstance(ev, MessageDelivered):
            self.messages_delivered += 1
            self.bytes_delivered += len(ev.data)
            # Never dropped: the connection's credit bounds what can pile up.
            self.inbox.append((name, ev.msg_id, ev.data))
            self._owner.setdefault((name, ev.msg_id), deque()).append(conn)
            self.inbox_bytes += len(ev.data)
            self.inbox_ready.set()
        elif isinstance(ev, ConnectionEstablished):
            self.log("info", "connection_established", peer=name, cid=cid,
                     role="initiator" if conn.initiator else "responder",
                     remote_cid=ev.remote_cid)
            if p is not None and p.conn is conn and p.ready is not None and not p.ready.done():
                p.ready.set_result(conn)
        elif isinstance(ev, ConnectionFailed) and ev.peer_forgot and p is not None \
                and p.conn is conn and not self.stopping:
            self._reconnect(p, conn, ev.reason)
        elif isinstance(ev, ConnectionFailed):
            reason = ev.reason
            if reason.startswith("peer unreachable"):
                reason = f"{UNREACHABLE} ({reason.partition(': ')[2] or reason})"
            self.log("warning", "connection_failed", peer=name, cid=cid, reason=reason,
                     drops=_flat(self.endpoint.drops) or "-")
            self._end(p, conn, reason)
        elif isinstance(ev, ConnectionClosed):
            self.log("info", "connection_closed", peer=name, cid=cid, reason=ev.reason,
                     **_flat(conn.stats(), keys=("packets_sent", "retransmissions",
                                                 "nacks_received", "bytes_acked")))
            self._end(p, conn, f"connection closed: {ev.reason}")
        elif isinstance(ev, EvStateChanged):
            self.log("debug", "ev_state", peer=name, plane=ev.plane, ev=ev.ev, old=ev.old,
                     new=ev.new)
        if self.extra_on_event is not None:
            self.extra_on_event(conn, peer, ev)

    def _reconnect(self, p: PeerState, old: Connection, why: str) -> None:
        """The peer lost our connection (it restarted): open a new one and
        re-send, in order, every message it had not acknowledged. What it had
        delivered but not yet acknowledged arrives twice: at-least-once across
        a restart (docs/daemon.md "Delivery semantics")."""
        items = list(p.pending.values())
        p.pending.clear()
        p.reconnects += 1
        self.log("warning", "peer_restarted", peer=p.name, cid=old.local_cid, reason=why,
                 resending=len(items), bytes=sum(i.size for i in items))
        p.ready = asyncio.get_running_loop().create_future()
        # Nobody may be waiting on it; retrieve a failure so it is not reported.
        p.ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        p.conn = conn = self.io.connect(p.name)
        self.log("info", "connecting", peer=p.name, cid=conn.local_cid, after="peer_restarted")
        for pend in items:
            p.pending[conn.send_message(pend.data)] = pend  # type: ignore[arg-type]

    def _end(self, p: PeerState | None, conn: Connection, reason: str) -> None:
        """``conn`` is gone: everything waiting on it fails with the reason."""
        if p is None or p.conn is not conn:
            return
        if p.ready is not None and not p.ready.done():
            p.ready.set_exception(ConnectionError(reason))
        pending = list(p.pending.items())
        p.pending.clear()
        p.unacked = 0
        p.window.set()
        p.conn = None
        p.ready = None
        for mid, pend in pending:
            pend.failed(mid, reason)

    # -- leaving ---------------------------------------------------------------------------

    async def finish(self, drain_timeout: float, linger: float) -> int:
        """Refuse new work and new connections, let queued messages be acknowledged for at most
        ``drain_timeout`` s, then close the connections with the peers (waiting
        at most ``linger`` s for them to end). The bytes left unacknowledged."""
        self.stopping = True
        # No new connection from a peer either: one accepted now (a peer
        # reconnecting to send what the close below discards) would have its
        # messages acknowledged into an inbox no receiver reads any more; the
        # peer's handshake fails instead and its clients send again.
        self.endpoint.accepting = False
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
        end = loop.time() + linger
        while self.endpoint.connections and loop.time() < end:
            await asyncio.sleep(0.01)
        return left

    def close_io(self) -> None:
        """Last: what is still pending is cancelled, the sockets are closed."""
        for p in self.peers.values():
            for pend in p.pending.values():
                pend.cancelled()
            p.pending.clear()
            p.unacked = 0
            if p.ready is not None and not p.ready.done():
                p.ready.cancel()
        self.io.close()
        self.inbox_ready.set()

    async def close(self, drain_timeout: float) -> int:
        """``finish`` (closing with the peers bounded by ``min(1, drain_timeout)``
        s) and ``close_io``: the bytes left unacknowledged."""
        left = await self.finish(drain_timeout, linger=min(1.0, drain_timeout))
        self.close_io()
        return left

    # -- stats (one shape: ``braid stats`` and the in-process endpoint) ---------------------

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
            # Nothing is ever dropped (credit bounds the inbox); the key stays for readers.
            "inbox": {"messages": len(self.inbox), "bytes": self.inbox_bytes, "dropped": 0,
                      "handed_out": self.handed_out(), "requeued": self.messages_requeued},
            "unacked": {name: {"messages": len(p.pending), "bytes": p.unacked}
                        for name, p in sorted(self.peers.items())},
            "cancelled": {"messages": self.messages_cancelled, "bytes": self.bytes_cancelled},
            "delivered": {"messages": self.messages_delivered, "bytes": self.bytes_delivered},
            "stopping": self.stopping,
        }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, int | float | str | bool) or obj is None:
        return obj
    return str(obj)


def _flat(d: dict[str, Any], keys: tuple[str, ...] | None = None) -> dict[str, object]:
    return {k: v for k, v in d.items()
            if (keys is None or k in keys) and isinstance(v, int | float | str)}


def _bind_fails(a: PlaneAddr) -> bool:
    with socket.socket(a.family, socket.SOCK_DGRAM) as s:
        try:
            s.bind((a.host, a.port))
        except OSError:
            return True
    return False
