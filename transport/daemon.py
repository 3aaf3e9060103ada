"""``braid daemon``: one per host; Braid connections to configured peers, served
to local applications over a Unix socket (mode 0600, see ``transport.control``).

Configuration is TOML (``load_config``); errors name the file, the key and,
for syntax errors, the line. SIGTERM / SIGINT / a ``shutdown`` request drain
gracefully: new sends are refused, queued data is sent until acknowledged
(at most ``drain_timeout``), then connections are closed with the peer.
Logs are one ``key=value`` line per event on stderr.

The daemon is split by responsibility: ``daemon_config`` (the TOML file),
``daemon_log`` (logs and the qlog tap), ``daemon_peers`` (a connection per
peer), ``daemon_control`` (the Unix socket); this module ties them together.
Their public names are importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

from transport import control
from transport.aio import EndpointIO
from transport.connection import Connection
from transport.daemon_config import (
    MAX_AUTO_MTU,
    ConfigError,
    DaemonConfig,
    DaemonError,
    auto_payload,
    load_config,
    load_secret,
    parse_config,
)
from transport.daemon_control import (
    HANGUP_POLL,
    MAX_CLIENTS,
    RECV_WINDOW_BYTES,
    RECV_WINDOW_MESSAGES,
    ControlServer,
    _RecvStream,
)
from transport.daemon_log import LEVELS, Log, QlogSink, QlogTap
from transport.daemon_peers import DaemonPeers, _Peer
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
from transport.inbox import Inbox
from transport.udp import PeerTable, PlaneAddr

__all__ = [
    "HANGUP_POLL",
    "LEVELS",
    "MAX_AUTO_MTU",
    "MAX_CLIENTS",
    "RECV_WINDOW_BYTES",
    "RECV_WINDOW_MESSAGES",
    "UNREACHABLE",
    "ConfigError",
    "Daemon",
    "DaemonConfig",
    "DaemonError",
    "Log",
    "QlogSink",
    "QlogTap",
    "auto_payload",
    "load_config",
    "load_secret",
    "parse_config",
    "run_daemon",
]

UNREACHABLE = "peer unreachable or key mismatch"


class Daemon(ControlServer, DaemonPeers):
    def __init__(self, cfg: DaemonConfig, *, secret: bytes | None, log: Log | None = None,
                 qlog: QlogSink | None = None) -> None:
        self.cfg = cfg
        self.secret = secret
        self.log = log or Log()
        self.qlog = qlog
        if cfg.payload_auto:
            payload = auto_payload(cfg.planes, cfg.peers)
            if payload is not None:
                cfg.connection = replace(cfg.connection, payload_size=payload)
        # Back-pressure instead of inbox drops: a delivered message keeps its
        # connection's credit until a client took it from the inbox, so each
        # connection holds at most recv_window bytes here (recv_buffer caps it).
        window = max(1 << 20, min(cfg.connection.recv_window, cfg.recv_buffer, (1 << 31) - 1))
        conn_cfg = replace(cfg.connection, hold_delivered=True, recv_window=window,
                           max_message_size=min(cfg.connection.max_message_size, window))
        self.endpoint = Endpoint(config=conn_cfg, secret=secret)
        table = PeerTable(len(cfg.planes), [a.port for a in cfg.planes])
        for name, addrs in cfg.peers.items():
            table.add(name, addrs)
        self.io = EndpointIO(self.endpoint, cfg.planes, table, on_event=self._on_event,
                             pool=cfg.pool, rcvbuf=cfg.rcvbuf, sndbuf=cfg.sndbuf,
                             queue_wait=cfg.queue_wait)
        if qlog is not None:
            self.io.tap = QlogTap(qlog)
        self.peers = {name: _Peer(name) for name in cfg.peers}
        #: Per-peer queues served round robin (transport/inbox.py).
        self.inbox = Inbox()
        #: (peer, msg_id) -> connections that delivered it, oldest first: whose
        #: credit comes back when the message leaves the inbox (``_release``).
        self._inbox_owner: dict[tuple[str, int], deque[Connection]] = {}
        self.inbox_bytes = 0
        self.inbox_dropped = 0
        self._inbox_ready = asyncio.Event()
        self._stop = asyncio.Event()
        self.stopping = False
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self._receivers: dict[asyncio.StreamWriter, _RecvStream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = time.monotonic()
        self._roles: dict[int, str] = {}
        self._cwnd: dict[int, int] = {}
        self._rtos: dict[int, int] = {}
        self.messages_delivered = 0
        self._keylog: IO[str] | None = None
        self.bytes_delivered = 0
        self.messages_requeued = 0
        self.messages_cancelled = 0
        self.bytes_cancelled = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.io.open(loop)
        except OSError as exc:
            bad = next((a for a in self.cfg.planes if _bind_fails(a)), self.cfg.planes[0])
            if exc.errno == 98:
                raise DaemonError(f"port in use: cannot bind {bad} ({exc.strerror}); "
                                  f"is another daemon running?") from None
            raise DaemonError(f"cannot bind plane address {bad}: {exc.strerror}") from None
        if self.cfg.keylog is not None and self.secret is not None:
            from wire.keylog import open_for_append

            try:
                self._keylog = open_for_append(self.cfg.keylog)
            except OSError as exc:
                self.io.close()
                raise DaemonError(f"cannot write key log {self.cfg.keylog}: "
                                  f"{exc.strerror}") from None
        try:
            self._server = await self._listen()
        except BaseException:
            self.io.close()
            raise
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
        self.log("info", "daemon_started", name=self.cfg.name, socket=self.cfg.socket_path,
                 planes=",".join(str(a) for a in self.cfg.planes),
                 peers=",".join(self.cfg.peers) or "-", encrypted=self.secret is not None,
                 pid=os.getpid())
        self._tasks.add(loop.create_task(self._sample_cwnd()))

    def request_stop(self, why: str = "request") -> None:
        if not self._stop.is_set():
            self.log("info", "shutdown_requested", cause=why)
            self._stop.set()

    async def run(self) -> int:
        """Start, serve until asked to stop, drain, close. Returns the exit code."""
        await self.start()
        await self._stop.wait()
        return await self.shutdown()

    async def shutdown(self) -> int:
        self.stopping = True
        code = 0
        deadline = time.monotonic() + self.cfg.drain_timeout
        conns = list(self.endpoint.connections.values())
        while time.monotonic() < deadline and any(
            c.sender.has_pending and not c.is_terminal for c in conns
        ):
            await asyncio.sleep(0.01)
        left = sum(p.unacked for p in self.peers.values() if p.conn is not None)
        if left:
            self.log("error", "drain_timeout", unacked_bytes=left,
                     timeout=self.cfg.drain_timeout)
            code = 1
        now = self.io.now()
        for c in list(self.endpoint.connections.values()):
            if not c.is_terminal:
                c.close(now)
        self.io.kick()
        end = time.monotonic() + 2.0
        while self.endpoint.connections and time.monotonic() < end:
            await asyncio.sleep(0.01)
        # Hand what arrived to the local receivers before going (waiting a
        # bounded time for one to come if none is attached).
        end = time.monotonic() + min(self.cfg.drain_timeout, 10.0)
        while (self.inbox or self._handed_out()) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        if self.inbox:
            self.log("warning", "undelivered_at_shutdown", messages=len(self.inbox),
                     bytes=self.inbox_bytes)
        for w in list(self._clients):
            control.write(w, {"event": "shutdown"})
            with contextlib.suppress(Exception):
                await asyncio.wait_for(w.drain(), 1.0)
            w.close()
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(OSError):
            self.cfg.socket_path.unlink()
        self.io.close()
        if self.qlog is not None:
            self.qlog.close()
        if self._keylog is not None:
            self._keylog.close()
        self.log("info", "daemon_stopped", code=code, **_flat(self.io.stats()))
        return code

    # -- events from the transport ----------------------------------------------------------

    def _on_event(self, conn: Connection, peer: PeerKey, ev: Event) -> None:
        name = str(peer)
        p = self.peers.get(name)
        cid = conn.local_cid
        if isinstance(ev, MessageAcked):
            if p is None:
                return
            pend = p.pending.pop(ev.msg_id, None)
            if pend is not None:
                p.unacked -= pend.size
                p.window.set()
                control.write(pend.writer, {"event": "acked", "id": pend.req_id,
                                            "msg_id": ev.msg_id, "bytes": ev.size})
        elif isinstance(ev, MessageDelivered):
            self.messages_delivered += 1
            self.bytes_delivered += len(ev.data)
            # Never dropped: the connection's credit bounds what can pile up.
            self.inbox.append((name, ev.msg_id, ev.data))
            self._inbox_owner.setdefault((name, ev.msg_id), deque()).append(conn)
            self.inbox_bytes += len(ev.data)
            if self.qlog is not None:
                self.qlog.event(time.monotonic(), "message_delivered", peer=name,
                                msg_id=ev.msg_id, size=len(ev.data))
            self._inbox_ready.set()
        elif isinstance(ev, ConnectionEstablished):
            role = "initiator" if conn.initiator else "responder"
            self._roles[cid] = role
            self.log("info", "connection_established", peer=name, role=role, cid=cid,
                     remote_cid=ev.remote_cid)
            if self._keylog is not None and conn.traffic_keys is not None:
                from wire.keylog import format_lines

                send, recv = conn.traffic_keys
                self._keylog.write(format_lines(local_cid=cid, remote_cid=ev.remote_cid,
                                                send=send, recv=recv))
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
            if self.qlog is not None:
                self.qlog.event(self.io.now(), "ev_state", plane=ev.plane,
                                ev=ev.ev, old=ev.old, new=ev.new, cause="")
            self.log("debug", "ev_state", peer=name, plane=ev.plane, ev=ev.ev, old=ev.old,
                     new=ev.new)

    async def _sample_cwnd(self) -> None:
        """cwnd into the qlog every 10 ms (when it changed), and the
        retransmission timeouts since the last sample (``rto``: the peer, the
        connection's count, what was in flight and where, the RTT then)."""
        while not self.io.closed and self.qlog is not None:
            now = self.io.now()
            for c in self.endpoint.connections.values():
                w = c.cc.cwnd
                if self._cwnd.get(c.local_cid) != w:
                    self._cwnd[c.local_cid] = w
                    self.qlog.event(now, "cwnd", cwnd=w,
                                    inflight=c.sender.bytes_in_flight, pacing_rate=None,
                                    plane=None)
                s = c.sender
                if s.rto_events != self._rtos.get(c.local_cid, 0):
                    self._rtos[c.local_cid] = s.rto_events
                    self.qlog.event(now, "rto", peer=str(self.endpoint.peer_of(c)),
                                    rtos=s.rto_events, lost_by_rto=s.lost_by_rto,
                                    tlp_probes=s.tlp_probes, srtt=s.rtt.srtt, rto=s.rto(),
                                    inflight=s.bytes_in_flight,
                                    parked=c.paths.parked_planes())
            await asyncio.sleep(0.01)

    # -- stats ---------------------------------------------------------------------------------

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
            "uptime": round(time.monotonic() - self._started, 3),
            "encrypted": self.secret is not None,
            "planes": [str(a) for a in self.cfg.planes],
            "peers": sorted(self.cfg.peers),
            "io": _jsonable(self.io.stats()),
            "connections": conns,
            "inbox": {"messages": len(self.inbox), "bytes": self.inbox_bytes,
                      "dropped": self.inbox_dropped, "handed_out": self._handed_out(),
                      "requeued": self.messages_requeued},
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



def run_daemon(cfg: DaemonConfig, *, secret: bytes | None, log: Log,
               qlog_factory: Callable[[], QlogSink] | None = None) -> int:
    """Run the daemon on uvloop until it is stopped; the exit code."""
    from transport.aio import new_event_loop

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        daemon = Daemon(cfg, secret=secret, log=log,
                        qlog=qlog_factory() if qlog_factory is not None else None)
        return loop.run_until_complete(daemon.run())
    finally:
        loop.close()
