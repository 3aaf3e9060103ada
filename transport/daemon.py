"""``braid daemon``: one per host; Braid connections to configured peers, served
to local applications over a Unix socket (mode 0600, see ``transport.control``).

Configuration is TOML (``load_config``); errors name the file, the key and,
for syntax errors, the line. SIGTERM / SIGINT / a ``shutdown`` request drain
gracefully: new sends are refused, queued data is sent until acknowledged
(at most ``drain_timeout``), then connections are closed with the peer.
Logs are one ``key=value`` line per event on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import select
import signal
import socket
import stat
import sys
import time
import tomllib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import IO, Any, Protocol

from transport import control
from transport.aio import EndpointIO
from transport.config import ConnectionConfig, profile_values
from transport.connection import Connection
from transport.datagram import RxInfo, TxPath
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
from transport.udp import PeerTable, PlaneAddr, parse_addr, path_mtu, payload_for_mtu
from wire.codec import peek_untrusted
from wire.constants import HEADER_TAG_LEN, UDP_PORT, Dscp, Flag, NackReason, PacketType
from wire.keys import KeyFileError, load_key_file
from wire.packets import Data, Nack, Sack, unpack_body

UNREACHABLE = "peer unreachable or key mismatch"
#: Messages and bytes a receive stream may hold unacknowledged (at least one
#: message always goes): enough to keep a local client busy, and all of it
#: goes back to the inbox if the client leaves without acknowledging.
RECV_WINDOW_MESSAGES = 64
RECV_WINDOW_BYTES = 16 << 20
#: How often a request blocked on a full send window checks that its client is alive.
HANGUP_POLL = 0.25
#: Control clients served at once; one more is told so and closed. Each holds at
#: most a 2 x ``control.MAX_LINE`` read buffer and one request body being read.
MAX_CLIENTS = 256


#: Largest MTU the automatic payload follows (loopback's 64 KiB is no fabric).
MAX_AUTO_MTU = 9000


def auto_payload(planes: list[PlaneAddr], peers: dict[str, list[PlaneAddr]]) -> int | None:
    """The DATA payload that fits every plane's path MTU to every configured
    peer, up to a 9000-byte MTU (the testbed's default links: 8888 over IPv4,
    8868 over IPv6; loopback counts as 9000); None without peers or
    routes (the configured default, sized for 1500, stays). Only the first
    hop's MTU is known before traffic flows: give links of one plane one MTU."""
    sizes = [payload_for_mtu(min(mtu, MAX_AUTO_MTU), v6=local.family == socket.AF_INET6)
             for addrs in peers.values() for local, remote in zip(planes, addrs, strict=False)
             if (mtu := path_mtu(local, remote)) is not None]
    if not sizes:
        return None
    return max(64, min(sizes))


class ConfigError(ValueError):
    """A daemon configuration the user must fix (message names file and key)."""


class DaemonError(RuntimeError):
    """The daemon cannot start (port in use, socket path taken, ...)."""


@dataclass
class DaemonConfig:
    name: str
    planes: list[PlaneAddr]
    peers: dict[str, list[PlaneAddr]]
    socket_path: Path
    key_file: Path | None
    connection: ConnectionConfig
    pool: int = 16
    rcvbuf: int = 32 << 20
    sndbuf: int = 8 << 20
    drain_timeout: float = 10.0
    send_window: int = 64 << 20
    recv_buffer: int = 512 << 20
    source: str = "<config>"
    #: Append per-connection traffic keys here (``wire.keylog``), mode 0600.
    keylog: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: No payload_size configured: size DATA to the path MTU towards the
    #: configured peers (jumbo links give jumbo payloads), see ``auto_payload``.
    payload_auto: bool = False
    #: Measure how long datagrams wait in the plane sockets' queues before the
    #: daemon reads them (kernel receive timestamps; transport/queue_wait.py).
    queue_wait: bool = False


def _want(src: str, key: str, value: object, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{src}: key '{key}': expected {what}, got {value!r}")
    return value


def _addrs(src: str, key: str, value: object, port: int) -> list[PlaneAddr]:
    items = _want(src, key, value, list, "a list of addresses, one per plane")
    if not items:
        raise ConfigError(f"{src}: key '{key}': needs at least one plane address")
    out = []
    for i, item in enumerate(items):
        _want(src, f"{key}[{i}]", item, str, "an address string like '10.0.0.1' or '10.0.0.1:4747'")
        try:
            out.append(parse_addr(item, port))
        except ValueError as exc:
            raise ConfigError(f"{src}: key '{key}[{i}]': {exc}") from None
    return out


_TOP_KEYS = {"name", "port", "key", "socket", "planes", "peers", "connection", "pool", "rcvbuf",
             "sndbuf", "drain_timeout", "send_window", "recv_buffer", "insecure", "keylog",
             "queue_wait"}


def parse_config(data: dict[str, Any], src: str, base: Path) -> DaemonConfig:
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        known = ", ".join(sorted(_TOP_KEYS))
        raise ConfigError(f"{src}: unknown key '{unknown[0]}' (known: {known})")
    for k in ("name", "planes", "socket"):
        if k not in data:
            raise ConfigError(f"{src}: missing key '{k}'")
    name = _want(src, "name", data["name"], str, "a string")
    port = _want(src, "port", data.get("port", UDP_PORT), int, "an integer")
    if not 0 < port < 65536:
        raise ConfigError(f"{src}: key 'port': {port} is not a UDP port")
    planes = _addrs(src, "planes", data["planes"], port)
    peers_raw = _want(src, "peers", data.get("peers", {}), dict, "a table of peers")
    peers: dict[str, list[PlaneAddr]] = {}
    for pname, pdata in peers_raw.items():
        _want(src, f"peers.{pname}", pdata, dict, "a table with 'planes'")
        if "planes" not in pdata:
            raise ConfigError(f"{src}: missing key 'peers.{pname}.planes'")
        extra = sorted(set(pdata) - {"planes"})
        if extra:
            raise ConfigError(f"{src}: unknown key 'peers.{pname}.{extra[0]}'")
        addrs = _addrs(src, f"peers.{pname}.planes", pdata["planes"], port)
        if len(addrs) != len(planes):
            raise ConfigError(f"{src}: key 'peers.{pname}.planes': {len(addrs)} addresses, "
                              f"but this host has {len(planes)} planes")
        peers[pname] = addrs
    insecure = _want(src, "insecure", data.get("insecure", False), bool, "true or false")
    key_file: Path | None = None
    if "key" in data:
        key_file = base / _want(src, "key", data["key"], str, "a file name")
    elif not insecure:
        raise ConfigError(f"{src}: missing key 'key' (the cluster key file from 'braid keygen'; "
                          f"or insecure = true for plaintext)")
    sock = base / _want(src, "socket", data["socket"], str, "a path")
    conn_raw = profile_values("host")
    conn_raw.update(_want(src, "connection", data.get("connection", {}), dict, "a table"))
    names = {f.name for f in fields(ConnectionConfig)}
    bad = sorted(set(conn_raw) - names)
    if bad:
        raise ConfigError(f"{src}: unknown key 'connection.{bad[0]}'")
    if conn_raw.setdefault("planes", len(planes)) != len(planes):
        raise ConfigError(f"{src}: key 'connection.planes' disagrees with the {len(planes)} "
                          f"plane addresses")
    try:
        conn_cfg = ConnectionConfig(**conn_raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{src}: table 'connection': {exc}") from None
    cfg = DaemonConfig(name=name, planes=planes, peers=peers, socket_path=sock,
                       key_file=key_file, connection=conn_cfg, source=src,
                       payload_auto="payload_size" not in data.get("connection", {}))
    for k in ("pool", "rcvbuf", "sndbuf", "send_window", "recv_buffer"):
        if k in data:
            v = _want(src, k, data[k], int, "an integer")
            if v < (0 if k == "pool" else 1):
                raise ConfigError(f"{src}: key '{k}': must be positive")
            setattr(cfg, k, v)
    cfg.queue_wait = _want(src, "queue_wait", data.get("queue_wait", False), bool,
                           "true or false")
    if "keylog" in data:
        cfg.keylog = base / _want(src, "keylog", data["keylog"], str, "a file name")
    if "drain_timeout" in data:
        cfg.drain_timeout = float(_want(src, "drain_timeout", data["drain_timeout"],
                                        (int, float), "seconds"))
    return cfg


def load_config(path: str | Path) -> DaemonConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None  # names line and column
    return parse_config(data, str(p), p.resolve().parent)


def load_secret(cfg: DaemonConfig) -> bytes | None:
    if cfg.key_file is None:
        return None
    try:
        return load_key_file(cfg.key_file, owner_only=True)
    except KeyFileError as exc:
        raise ConfigError(f"{cfg.source}: key 'key': {exc}") from None


# -- logging and qlog ---------------------------------------------------------------

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Log:
    """One ``key=value`` line per event (``ts`` is wall-clock, for humans)."""

    def __init__(self, level: str = "info", stream: IO[str] | None = None) -> None:
        self.level = LEVELS[level]
        self.stream = stream or sys.stderr

    def __call__(self, level: str, event: str, **kv: object) -> None:
        if LEVELS[level] < self.level:
            return
        parts = [f"ts={time.time():.6f}", f"level={level}", f"event={event}"]
        for k, v in kv.items():
            s = str(v)
            if not s or any(c in s for c in ' "=\n'):
                s = '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'
            parts.append(f"{k}={s}")
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(" ".join(parts) + "\n")
            self.stream.flush()


class QlogSink(Protocol):
    """What the daemon needs of a qlog writer (``tools.trace.qlog.QlogWriter``)."""

    def event(self, time: float, name: str, **data: Any) -> None: ...

    def close(self) -> None: ...


class QlogTap:
    """Turns datagrams into qlog events by reading their (cleartext,
    authenticated) headers — no keys needed, nothing in the core changes."""

    def __init__(self, sink: QlogSink) -> None:
        self.sink = sink

    def on_tx(self, now: float, data: bytes, path: TxPath) -> None:
        if len(data) < 20 or data[1] != PacketType.DATA:
            return
        try:
            h = peek_untrusted(data)
            body = unpack_body(h.ptype, data, 16)
        except Exception:  # a tap must never break the I/O path
            return
        assert isinstance(body, Data)
        retx = bool(h.flags & Flag.RETX)
        self.sink.event(now, "packet_sent", type="DATA", psn=body.psn, plane=path.plane,
                        ev=path.ev, size=len(data), retx=retx, dcid=h.dcid)
        if retx:
            self.sink.event(now, "retransmit", psn=body.psn, plane=path.plane, ev=path.ev,
                            cause="loss_or_nack", old_plane=None, old_ev=None)

    def on_rx(self, now: float, data: bytes, rx: RxInfo) -> None:
        try:
            h = peek_untrusted(data)
            if h.ptype in (PacketType.INIT, PacketType.ACCEPT):
                return
            body = unpack_body(h.ptype, data, 16)
        except Exception:  # a tap must never break the I/O path
            return
        if isinstance(body, Sack):
            self.sink.event(now, "ack", cum_psn=body.cum_psn, ack_psn=body.ack_psn,
                            plane=rx.plane, ev=body.echo_ev, rtt=None, ce=rx.ce,
                            acked_bytes=None)
        elif isinstance(body, Nack):
            reason = NackReason(body.reason).name.lower() if body.reason in \
                NackReason._value2member_map_ else str(body.reason)
            self.sink.event(now, "nack", psn=body.psn, reason=reason, plane=rx.plane,
                            ev=body.echo_ev)
        elif isinstance(body, Data) and len(data) == h.header_len + HEADER_TAG_LEN:
            where = "last_hop" if rx.dscp == Dscp.TRIMMED_LAST_HOP else "fabric"
            self.sink.event(now, "trim", psn=body.psn, plane=rx.plane, ev=body.ev, where=where)


# -- the daemon ------------------------------------------------------------------------


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


@dataclass
class _RecvStream:
    """One ``recv`` client: what it was given and has not acknowledged yet."""

    writer: asyncio.StreamWriter
    unacked: deque[tuple[int, tuple[str, int, bytes]]] = field(default_factory=deque)
    unacked_bytes: int = 0
    seq: int = 0
    gone: bool = False

    def window_open(self) -> bool:
        return not self.unacked or (len(self.unacked) < RECV_WINDOW_MESSAGES
                                    and self.unacked_bytes < RECV_WINDOW_BYTES)


class Daemon:
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

    async def _listen(self) -> asyncio.AbstractServer:
        path = self.cfg.socket_path
        if not path.parent.is_dir():
            raise DaemonError(f"socket directory {path.parent} does not exist")
        if path.exists() or path.is_symlink():
            if _socket_alive(path):
                raise DaemonError(f"another daemon is listening on {path}")
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise DaemonError(f"{path} exists and is not a socket")
            path.unlink()
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            server = await asyncio.start_unix_server(self._client, path=str(path),
                                                     limit=control.MAX_LINE)
        except OSError as exc:
            raise DaemonError(f"cannot create control socket {path}: {exc.strerror}") from None
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != 0o600:
            server.close()
            raise DaemonError(f"control socket {path} has mode {mode:04o}, expected 0600")
        return server

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

    def _release(self, peer: str, msg_id: int, data: bytes) -> None:
        """A message left the inbox for good: its connection gets the credit back."""
        owners = self._inbox_owner.get((peer, msg_id))
        if not owners:
            return
        conn = owners.popleft()
        if not owners:
            del self._inbox_owner[(peer, msg_id)]
        if not conn.is_terminal:
            conn.consume(len(data), self.io.now())
            self.io.kick()

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

    # -- connections on demand ---------------------------------------------------------------

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

    # -- control clients ---------------------------------------------------------------------

    def _has_receivers(self) -> bool:
        return bool(self._receivers)

    def _handed_out(self) -> int:
        """Messages written to receive streams and not acknowledged yet."""
        return sum(len(r.unacked) for r in self._receivers.values())

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._clients) >= MAX_CLIENTS:
            control.write(writer, {"event": "error", "error": f"too many control clients "
                                   f"({MAX_CLIENTS}); try again later"})
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), 1.0)
            writer.close()
            return
        self._clients.add(writer)
        try:
            while True:
                try:
                    item = await control.read(reader)
                except control.ProtocolError as exc:
                    control.write(writer, {"event": "error", "error": str(exc)})
                    break
                if item is None:
                    break
                msg, body = item
                if msg.get("cmd") == "recv":
                    await self._serve_receiver(reader, writer)
                    break
                if not await self._request(msg, body, writer):
                    break
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(writer)
            self._client_left(writer)
            writer.close()

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

    async def _request(self, msg: dict[str, Any], body: bytes | None,
                       writer: asyncio.StreamWriter) -> bool:
        cmd = msg.get("cmd")
        rid = msg.get("id")

        def error(text: str) -> bool:
            control.write(writer, {"event": "error", "id": rid, "error": text})
            return True

        if cmd in ("send", "connect"):
            name = msg.get("peer")
            if not isinstance(name, str) or name not in self.peers:
                known = ", ".join(sorted(self.peers)) or "none"
                return error(f"unknown peer {name!r} (configured peers: {known})")
            if self.stopping:
                return error("daemon is shutting down; not accepting new work")
            p = self.peers[name]
            if cmd == "send":
                if body is None:
                    return error("send needs a body ('len' and the bytes)")
                while p.unacked > 0 and p.unacked + len(body) > self.cfg.send_window:
                    p.window.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(p.window.wait(), HANGUP_POLL)
                    if _hung_up(writer):
                        return False  # the client left while we held its request
                if _hung_up(writer):
                    return False  # queue nothing for a client that already left
            try:
                conn = await self._connection(name)
            except ConnectionError as exc:
                return error(str(exc))
            if cmd == "connect":
                control.write(writer, {"event": "connected", "id": rid, "peer": name,
                                       "cid": conn.local_cid})
                return True
            assert body is not None
            try:
                msg_id = conn.send_message(body)
            except (RuntimeError, ValueError) as exc:
                return error(f"cannot send: {exc}")
            p.pending[msg_id] = _Pending(writer, rid, len(body), body)
            p.unacked += len(body)
            self.io.kick()
            control.write(writer, {"event": "queued", "id": rid, "msg_id": msg_id})
            return True
        if cmd == "stats":
            control.write(writer, {"event": "stats", "id": rid, **self.stats()})
            return True
        if cmd == "shutdown":
            control.write(writer, {"event": "ok", "id": rid})
            self.request_stop("control")
            return True
        return error(f"unknown command {cmd!r} (send, connect, recv, stats, shutdown)")

    async def _serve_receiver(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        """Stream the inbox to one client. A message leaves the inbox only
        when the client acknowledges it; whatever it had not acknowledged when
        the stream ends (exit, crash, error) goes back to the front."""
        rs = self._receivers[writer] = _RecvStream(writer)
        acks = asyncio.get_running_loop().create_task(self._read_acks(reader, rs))
        try:
            await self._stream_inbox(rs)
        finally:
            rs.gone = True
            if not acks.done() and _hung_up(writer):
                # A client that acknowledged and left: its last acks may still
                # be in our read buffer (we stopped on a failed write). Let them
                # land before requeueing, or it would get them twice.
                with contextlib.suppress(TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(acks), 1.0)
            acks.cancel()
            with contextlib.suppress(BaseException):
                await acks
            del self._receivers[writer]
            if rs.unacked:
                self.inbox.extendleft(item for _, item in reversed(rs.unacked))
                self.messages_requeued += len(rs.unacked)
                self.log("info", "receiver_left", requeued_messages=len(rs.unacked),
                         bytes=rs.unacked_bytes)
                rs.unacked.clear()
                self._inbox_ready.set()

    async def _read_acks(self, reader: asyncio.StreamReader, rs: _RecvStream) -> None:
        try:
            while (item := await control.read(reader)) is not None:
                msg, _ = item
                seq = msg.get("seq")
                if msg.get("cmd") != "ack" or not isinstance(seq, int):
                    control.write(rs.writer, {"event": "error", "id": msg.get("id"),
                                              "error": "a receive stream takes only "
                                                       "{\"cmd\": \"ack\", \"seq\": N}"})
                    break
                while rs.unacked and rs.unacked[0][0] <= seq:
                    _, (peer, mid, data) = rs.unacked.popleft()
                    rs.unacked_bytes -= len(data)
                    self.inbox_bytes -= len(data)
                    # Only a client's receipt frees the credit (back-pressure).
                    self._release(peer, mid, data)
                self._inbox_ready.set()
        except (control.ProtocolError, ConnectionError) as exc:
            control.write(rs.writer, {"event": "error", "error": str(exc)})
        finally:
            rs.gone = True
            self._inbox_ready.set()

    async def _stream_inbox(self, rs: _RecvStream) -> None:
        writer = rs.writer
        while not rs.gone and not writer.is_closing():
            if not self.inbox or not rs.window_open():
                if self.stopping and not self.endpoint.connections and not rs.unacked \
                        and not self.inbox:
                    return
                self._inbox_ready.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._inbox_ready.wait(), 0.2)
                continue
            item = self.inbox.popleft()
            peer, mid, data = item
            rs.seq += 1
            rs.unacked.append((rs.seq, item))
            rs.unacked_bytes += len(data)
            control.write(writer, {"event": "message", "peer": peer, "msg_id": mid,
                                   "seq": rs.seq}, data)
            if self.qlog is not None:
                self.qlog.event(time.monotonic(), "message_handed", peer=peer, msg_id=mid,
                                size=len(data))
            await writer.drain()

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


def _hung_up(writer: asyncio.StreamWriter) -> bool:
    """Has the client closed its end? (Seen even while we are not reading it,
    e.g. while its request waits for send window, and with its data unread.)"""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return writer.is_closing()
    poller = select.poll()
    try:
        poller.register(sock.fileno(), select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    except (OSError, ValueError):
        return True
    return bool(poller.poll(0))


def _socket_alive(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


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
