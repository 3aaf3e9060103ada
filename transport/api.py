"""The Python API to a running ``braid daemon`` (also what the CLI uses).

    async with braid.connect("/run/braid/a.sock") as conn:   # or a daemon .toml
        await conn.send("b", b"hello")        # returns when peer b acknowledged it
        peer, data = await conn.recv()        # next message delivered to this host
        print(await conn.stats())

``send`` waits for the acknowledgement; ``submit`` returns a future instead so
many messages can be in flight (the daemon bounds unacknowledged bytes per
peer and stops reading a client that exceeds it). Errors are ``BraidError``
with the daemon's one-line reason (unknown peer, peer unreachable or key
mismatch, shutting down, ...).

Leaving (``close()``, the end of ``async with``) is bounded: what the daemon
has not yet read is flushed for at most ``close_timeout`` seconds, then the
connection is aborted. The daemon then cancels every message this client
queued that has not started on the wire (one already started is finished);
futures still pending are cancelled. Await the futures before leaving to be
sure of delivery. ``recv`` acknowledges each message to the daemon as it
returns it, so a message is never lost with a client that exits: what the
daemon had written ahead to it goes to the next receiver.

Also here: the small *transfer* header ``braid send`` puts in front of each
message (``encode_chunk`` / ``decode_chunk``) so ``braid recv`` can place the
bytes of a file and verify them (BLAKE2b-128 per chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from transport import control


class BraidError(Exception):
    """A request the daemon refused or could not complete (one-line reason)."""


class Client:
    """One control connection to the daemon (use ``connect``)."""

    def __init__(self, path: str, close_timeout: float = 2.0) -> None:
        self.path = path
        self.close_timeout = close_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._rx_task: asyncio.Task[None] | None = None
        self._waiting: dict[int, tuple[asyncio.Future[Any], asyncio.Future[Any] | None]] = {}
        self._next_id = 1
        self._recv: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.on_ack: Callable[[int], None] | None = None
        self._closed_reason: str | None = None
        self._closing = False

    async def _open_stream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.open_unix_connection(self.path, limit=control.MAX_LINE)
        except FileNotFoundError:
            raise BraidError(f"no daemon socket at {self.path} (start one with "
                             f"'braid daemon --config FILE')") from None
        except ConnectionRefusedError:
            raise BraidError(f"no daemon listening on {self.path}") from None
        except PermissionError:
            raise BraidError(f"permission denied on {self.path} (the socket is mode 0600: "
                             f"run as the daemon's user)") from None

    async def open(self) -> Client:
        self._reader, self._writer = await self._open_stream()
        self._rx_task = asyncio.get_running_loop().create_task(self._read_replies())
        return self

    async def close(self) -> None:
        """Leave: bounded by ``close_timeout`` even if the daemon reads nothing."""
        self._closing = True
        if self._recv is not None:
            await self._end_recv_stream(*self._recv)
        for w in (self._writer, self._recv[1] if self._recv else None):
            if w is None:
                continue
            w.close()
            closed = asyncio.ensure_future(w.wait_closed())
            try:
                await asyncio.wait_for(asyncio.shield(closed), self.close_timeout)
            except TimeoutError:
                w.transport.abort()  # the daemon is not reading: drop what is unsent
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closed, 1.0)
            except Exception:  # already broken: closed is closed
                pass
        if self._rx_task is not None:
            self._rx_task.cancel()
            with contextlib.suppress(BaseException):
                await self._rx_task

    async def _end_recv_stream(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        """End a receive stream cleanly: our acknowledgements, then EOF, reach the
        daemon before we close, and we read (and drop: the daemon requeues them)
        the messages it had written ahead until it closes its end. Closing with
        those unread would reset the connection, and the daemon could lose the
        last acknowledgements with it (and deliver those messages again)."""
        try:
            if w.can_write_eof() and not w.is_closing():
                w.write_eof()
            async with asyncio.timeout(self.close_timeout):
                while await r.read(1 << 16):
                    pass
        except (TimeoutError, OSError, RuntimeError):
            pass

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- requests ---------------------------------------------------------------------------

    async def _read_replies(self) -> None:
        assert self._reader is not None
        reason = "daemon closed the control connection"
        try:
            while True:
                item = await control.read(self._reader)
                if item is None:
                    break
                msg, _ = item
                ev = msg.get("event")
                if ev == "shutdown":
                    reason = "daemon is shutting down"
                    continue
                rid = msg.get("id")
                if not isinstance(rid, int) or rid not in self._waiting:
                    continue
                first, final = self._waiting[rid]
                if ev == "error":
                    del self._waiting[rid]
                    _fail(first, final, BraidError(str(msg.get("error"))))
                elif ev == "queued" and final is not None:
                    if not first.done():
                        first.set_result(msg)
                else:
                    del self._waiting[rid]
                    if ev == "acked" and self.on_ack is not None:
                        self.on_ack(int(msg.get("bytes", 0)))
                    for f in (first, final):
                        if f is not None and not f.done():
                            f.set_result(msg)
        except (control.ProtocolError, ConnectionError) as exc:
            reason = f"control connection broken: {exc}"
        finally:
            self._closed_reason = reason
            for first, final in self._waiting.values():
                if self._closing:  # we left: nobody awaits these (no "never retrieved")
                    for f in (first, final):
                        if f is not None:
                            f.cancel()
                else:
                    _fail(first, final, BraidError(reason))
            self._waiting.clear()

    async def _request(self, obj: dict[str, Any], body: bytes | None = None,
                       two_phase: bool = False) -> tuple[asyncio.Future[Any],
                                                         asyncio.Future[Any] | None]:
        if self._writer is None:
            raise BraidError("not connected")
        if self._closed_reason is not None:
            raise BraidError(self._closed_reason)
        loop = asyncio.get_running_loop()
        rid = self._next_id
        self._next_id += 1
        first: asyncio.Future[Any] = loop.create_future()
        final: asyncio.Future[Any] | None = loop.create_future() if two_phase else None
        self._waiting[rid] = (first, final)
        control.write(self._writer, {**obj, "id": rid}, body)
        try:
            await self._writer.drain()
        except BaseException as exc:
            # Nobody will hold these futures: cancel them (no "never retrieved").
            self._waiting.pop(rid, None)
            for f in (first, final):
                if f is not None:
                    f.cancel()
            if isinstance(exc, ConnectionError):
                raise BraidError(f"control connection broken: {exc}") from None
            raise
        return first, final

    async def submit(self, peer: str, data: bytes | memoryview) -> asyncio.Future[Any]:
        """Queue ``data`` as one message to ``peer`` and return at once; the
        future resolves (to the daemon's reply, with ``msg_id``) when the peer
        acknowledged all of it. The streaming way: submit many, await later."""
        _, final = await self._request({"cmd": "send", "peer": peer}, bytes(data),
                                       two_phase=True)
        assert final is not None
        return final

    async def send(self, peer: str, data: bytes | memoryview) -> int:
        """Send one message and wait until the peer acknowledged all of it; its id.

        A loop over ``send`` keeps one message in flight: each waits a round
        trip, throughput is message size / RTT and the transport sees a tiny
        window. To stream, use ``submit`` and await the futures later."""
        reply = await (await self.submit(peer, data))
        return int(reply["msg_id"])

    async def connect_peer(self, peer: str) -> None:
        """Open (or check) the connection to ``peer``: fails fast with the reason."""
        first, _ = await self._request({"cmd": "connect", "peer": peer})
        await first

    async def stats(self) -> dict[str, Any]:
        first, _ = await self._request({"cmd": "stats"})
        reply: dict[str, Any] = await first
        return reply

    async def shutdown(self) -> None:
        first, _ = await self._request({"cmd": "shutdown"})
        await first

    async def recv(self) -> tuple[str, bytes]:
        """The next message delivered to this host: (peer, bytes)."""
        if self._recv is None:
            self._recv = await self._open_stream()
            control.write(self._recv[1], {"cmd": "recv"})
            await self._recv[1].drain()
        while True:
            try:
                item = await control.read(self._recv[0])
            except (control.ProtocolError, ConnectionError) as exc:
                raise BraidError(f"receive stream broken: {exc}") from None
            if item is None:
                raise BraidError("daemon closed the receive stream")
            msg, body = item
            if msg.get("event") == "message" and body is not None:
                seq = msg.get("seq")
                if isinstance(seq, int):  # we have it: the daemon may forget it
                    control.write(self._recv[1], {"cmd": "ack", "seq": seq})
                return str(msg.get("peer")), body
            if msg.get("event") == "shutdown":
                raise BraidError("daemon is shutting down")
            if msg.get("event") == "error":
                raise BraidError(str(msg.get("error")))


def _fail(first: asyncio.Future[Any], final: asyncio.Future[Any] | None,
          exc: BraidError) -> None:
    """Fail a request. A two-phase request (``submit``) hands out only its final
    future: the error goes there and the internal first one is cancelled, so no
    exception is left unretrieved."""
    if final is None:
        if not first.done():
            first.set_exception(exc)
        return
    if not first.done():
        first.cancel()
    if not final.done():
        final.set_exception(exc)


def socket_path_of(target: str | Path) -> str:
    """A control socket path, or the ``socket`` of a daemon config file."""
    p = Path(target)
    if p.suffix == ".toml":
        from transport.daemon import ConfigError, load_config

        try:
            return str(load_config(p).socket_path)
        except ConfigError as exc:
            raise BraidError(str(exc)) from None
    return str(p)


class _Connect:
    def __init__(self, target: str | Path) -> None:
        self.client = Client(socket_path_of(target))

    async def __aenter__(self) -> Client:
        return await self.client.open()

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.client.close()

    def __await__(self) -> Any:
        return self.client.open().__await__()


def connect(target: str | Path) -> _Connect:
    """``async with connect(path_or_config) as conn`` (or ``conn = await connect(...)``)."""
    return _Connect(target)


# -- the transfer header (braid send / braid recv) -----------------------------------------

CHUNK_MAGIC: Final = b"BRDF"
_CHUNK: Final = struct.Struct("!4sBBHQQQ16s")
CHUNK_HEADER_LEN: Final = _CHUNK.size


@dataclass(frozen=True, slots=True)
class Chunk:
    transfer_id: int
    offset: int
    total: int
    name: str
    data: memoryview
    ok: bool  # the BLAKE2b-128 digest matched


def encode_chunk(transfer_id: int, offset: int, total: int, name: str,
                 data: bytes | memoryview) -> bytes:
    """magic | v1 | flags | name len | transfer id | offset | total | BLAKE2b-128 | name | data"""
    n = name.encode()
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return _CHUNK.pack(CHUNK_MAGIC, 1, 0, len(n), transfer_id, offset, total, digest) + n + \
        bytes(data)


def decode_chunk(msg: bytes) -> Chunk | None:
    """The chunk in a message, or None if it is not one (a plain message)."""
    if len(msg) < CHUNK_HEADER_LEN or msg[:4] != CHUNK_MAGIC:
        return None
    _magic, ver, _flags, nlen, tid, off, total, digest = _CHUNK.unpack_from(msg)
    if ver != 1 or len(msg) < CHUNK_HEADER_LEN + nlen:
        return None
    name = msg[CHUNK_HEADER_LEN:CHUNK_HEADER_LEN + nlen].decode(errors="replace")
    data = memoryview(msg)[CHUNK_HEADER_LEN + nlen:]
    ok = hashlib.blake2b(data, digest_size=16).digest() == digest
    return Chunk(tid, off, total, name, data, ok)
