"""The daemon's configured peers: one connection each, opened on demand
(``_connection``) and opened again, with every unacknowledged message, when
the peer restarted (``_reconnect``); what each local client queued for a
peer and is not acknowledged yet (``_Peer.pending``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from transport import control
from transport.aio import EndpointIO
from transport.connection import Connection
from transport.daemon_config import DaemonConfig
from transport.daemon_log import Log


@dataclass
class _Pending:
    writer: asyncio.StreamWriter
    req_id: object
    size: int
    #: Kept until acknowledged: re-sent on a new connection if the peer restarts.
    data: bytes = b""


@dataclass
class _Peer:
    name: str
    conn: Connection | None = None
    ready: asyncio.Future[Connection] | None = None
    pending: dict[int, _Pending] = field(default_factory=dict)
    unacked: int = 0
    window: asyncio.Event = field(default_factory=asyncio.Event)
    reconnects: int = 0


class DaemonPeers:
    """The peer table's half of ``transport.daemon.Daemon`` (a mixin)."""

    cfg: DaemonConfig
    io: EndpointIO
    log: Log
    peers: dict[str, _Peer]
    messages_cancelled: int
    bytes_cancelled: int

    async def _connection(self, name: str) -> Connection:
        p = self.peers[name]
        if p.conn is not None and not p.conn.is_terminal:
            if p.ready is not None:
                return await asyncio.shield(p.ready)
            return p.conn
        loop = asyncio.get_running_loop()
        p.ready = loop.create_future()
        p.conn = self.io.connect(name)
        self.log("info", "connecting", peer=name, cid=p.conn.local_cid,
                 planes=",".join(str(a) for a in self.cfg.peers[name]))
        return await asyncio.shield(p.ready)

    def _reconnect(self, p: _Peer, old: Connection, why: str) -> None:
        """The peer lost our connection (it restarted): open a new one and
        re-send, in order, every message it had not acknowledged. What it had
        delivered but not yet acknowledged arrives twice: at-least-once across
        a restart (docs/daemon.md "Delivery semantics")."""
        items = list(p.pending.values())
        p.pending.clear()
        p.reconnects += 1
        self.log("warning", "peer_restarted", peer=p.name, cid=old.local_cid, reason=why,
                 resending=len(items), bytes=sum(i.size for i in items))
        loop = asyncio.get_running_loop()
        p.ready = loop.create_future()
        # Nobody may be waiting on it; retrieve a failure so it is not reported.
        p.ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        p.conn = conn = self.io.connect(p.name)
        self.log("info", "connecting", peer=p.name, cid=conn.local_cid, after="peer_restarted")
        for pend in items:
            p.pending[conn.send_message(pend.data)] = pend

    def _end(self, p: _Peer | None, conn: Connection, reason: str) -> None:
        if p is None or p.conn is not conn:
            return
        if p.ready is not None and not p.ready.done():
            p.ready.set_exception(ConnectionError(reason))
        for mid, pend in p.pending.items():
            control.write(pend.writer, {"event": "error", "id": pend.req_id, "msg_id": mid,
                                        "error": reason})
        p.pending.clear()
        p.unacked = 0
        p.window.set()
        p.conn = None
        p.ready = None

    def _client_left(self, writer: asyncio.StreamWriter) -> None:
        """A client that leaves takes back what it queued and that has not
        started on the wire (a message already started is finished: the
        receiver must never be left holding part of one)."""
        now_cancelled = 0
        for p in self.peers.values():
            mine = [mid for mid, pend in p.pending.items() if pend.writer is writer]
            if not mine or p.conn is None:
                continue
            for mid in mine:
                if p.conn.cancel_message(mid):
                    pend = p.pending.pop(mid)
                    p.unacked -= pend.size
                    self.bytes_cancelled += pend.size
                    now_cancelled += 1
            p.window.set()
        if now_cancelled:
            self.messages_cancelled += now_cancelled
            self.log("info", "client_left", cancelled_messages=now_cancelled)
