"""The daemon's control server: the Unix socket (mode 0600, protocol in
``transport.control``) where local applications send, connect, ask for
stats, shut the daemon down, and receive: a ``recv`` client gets the inbox
streamed, and a message leaves the inbox only when the client acknowledged
it (back-pressure: its connection's credit comes back then)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transport import control
from transport.aio import EndpointIO
from transport.connection import Connection
from transport.daemon_config import DaemonConfig, DaemonError
from transport.daemon_log import Log, QlogSink
from transport.endpoint import Endpoint
from transport.hostcore import PeerState, PendingSend, SendRefused
from transport.inbox import Inbox

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


@dataclass
class _Pending(PendingSend):
    """A message a control client queued: the client is told ``acked`` or ``error``."""

    writer: asyncio.StreamWriter
    req_id: object

    def acked(self, msg_id: int, nbytes: int) -> None:
        control.write(self.writer, {"event": "acked", "id": self.req_id, "msg_id": msg_id,
                                    "bytes": nbytes})

    def failed(self, msg_id: int, reason: str) -> None:
        control.write(self.writer, {"event": "error", "id": self.req_id, "msg_id": msg_id,
                                    "error": reason})


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


class ControlServer:
    """The control socket's half of ``transport.daemon.Daemon`` (a mixin over
    ``transport.hostcore.HostCore``, which owns the peers and the inbox)."""

    cfg: DaemonConfig
    io: EndpointIO
    endpoint: Endpoint
    log: Log
    qlog: QlogSink | None
    peers: dict[str, PeerState]
    inbox: Inbox
    inbox_bytes: int
    messages_requeued: int
    stopping: bool
    inbox_ready: asyncio.Event
    _clients: set[asyncio.StreamWriter]
    _receivers: dict[asyncio.StreamWriter, _RecvStream]

    if TYPE_CHECKING:
        def check_peer(self, name: object) -> PeerState: ...

        async def connection(self, name: str) -> Connection: ...

        async def admit(self, name: str, size: int, *, gone: Callable[[], bool] | None = None,
                        poll: float = 0.25) -> tuple[PeerState, Connection] | None: ...

        def submit(self, p: PeerState, conn: Connection, pend: PendingSend) -> int: ...

        def cancel_unstarted(self, mine: Callable[[PendingSend], bool]) -> int: ...

        def release(self, peer: str, msg_id: int, data: bytes) -> None: ...

        def request_stop(self, why: str = "request") -> None: ...

        def stats(self) -> dict[str, Any]: ...

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
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound and listening under a private name, then renamed: the path
        # appears only once it accepts, so a client that waits for the file
        # (a script, a test) is never refused in between.
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            try:
                sock.bind(str(tmp))
            except OSError:  # e.g. the longer name does not fit sun_path
                tmp = path
                sock.bind(str(tmp))
            sock.listen(100)
            if tmp != path:
                os.rename(tmp, path)
            server = await asyncio.start_unix_server(self._client, sock=sock,
                                                     limit=control.MAX_LINE)
        except OSError as exc:
            sock.close()
            if tmp != path:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise DaemonError(f"cannot create control socket {path}: {exc.strerror}") from None
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != 0o600:
            server.close()
            raise DaemonError(f"control socket {path} has mode {mode:04o}, expected 0600")
        return server

    def _has_receivers(self) -> bool:
        return bool(self._receivers)

    def handed_out(self) -> int:
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
        started on the wire (``HostCore.cancel_unstarted``)."""
        taken = self.cancel_unstarted(lambda pend: isinstance(pend, _Pending)
                                      and pend.writer is writer)
        if taken:
            self.log("info", "client_left", cancelled_messages=taken)

    async def _request(self, msg: dict[str, Any], body: bytes | None,
                       writer: asyncio.StreamWriter) -> bool:
        cmd = msg.get("cmd")
        rid = msg.get("id")

        def error(text: str) -> bool:
            control.write(writer, {"event": "error", "id": rid, "error": text})
            return True

        if cmd in ("send", "connect"):
            name = msg.get("peer")
            try:
                self.check_peer(name)
                assert isinstance(name, str)
                if cmd == "connect":
                    conn = await self.connection(name)
                    control.write(writer, {"event": "connected", "id": rid, "peer": name,
                                           "cid": conn.local_cid})
                    return True
                if body is None:
                    return error("send needs a body ('len' and the bytes)")
                # Polls the client while its request waits for send window:
                # queue nothing for a client that already left.
                got = await self.admit(name, len(body), gone=lambda: _hung_up(writer),
                                       poll=HANGUP_POLL)
                if got is None:
                    return False
                msg_id = self.submit(*got, _Pending(len(body), body, writer, rid))
            except (SendRefused, ConnectionError) as exc:
                return error(str(exc))
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
                self.inbox_ready.set()

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
                    # Only a client's receipt frees the credit (back-pressure).
                    self.release(peer, mid, data)
                self.inbox_ready.set()
        except (control.ProtocolError, ConnectionError) as exc:
            control.write(rs.writer, {"event": "error", "error": str(exc)})
        finally:
            rs.gone = True
            self.inbox_ready.set()

    async def _stream_inbox(self, rs: _RecvStream) -> None:
        writer = rs.writer
        while not rs.gone and not writer.is_closing():
            if not self.inbox or not rs.window_open():
                if self.stopping and not self.endpoint.connections and not rs.unacked \
                        and not self.inbox:
                    return
                self.inbox_ready.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.inbox_ready.wait(), 0.2)
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
