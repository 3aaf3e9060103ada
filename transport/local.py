"""The in-process endpoint: Braid inside the application's own event loop.

    async with braid.open("/run/braid/twohosts/hosts/h0.toml") as ep:  # or a DaemonConfig
        await ep.send("h1", b"hello")         # returns when h1 acknowledged it
        fut = await ep.submit("h1", view)     # many in flight; resolves at the ACK
        peer, data = await ep.recv()          # next message delivered to this host

The same API, errors and semantics as ``braid.connect``'s ``Client``
(``send``, ``submit``, ``recv``, ``stats``, ``connect_peer``, ``close``; a
``BraidError`` with a one-line reason), without the daemon: the host's plane
sockets are bound in this process, so nothing crosses a Unix socket and no
message is copied above the transport (``submit`` hands the caller's buffer
to the connection: do not modify it until its future resolved; ``recv``
returns the message the receiver assembled). Only one process can bind a
host's planes: with a daemon running for the config, ``open`` fails and says
so. The rules are the daemon's, from the same code (``transport/hostcore.py``):
at most ``send_window`` unacknowledged bytes per peer (``submit`` waits for
room: back-pressure, nothing dropped); delivered messages keep their credit until
``recv`` takes them; a failed peer fails every pending future with the
reason; a peer that restarted gets what it had not acknowledged again.

``close()`` (the end of ``async with``) lets queued messages be acknowledged
for at most ``close_timeout`` seconds, closes the connections with the
peers, and cancels the futures still pending (as a client that leaves).
Messages delivered and not yet taken by ``recv`` are gone with the process,
as are those a client had not taken from a daemon that stops.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from transport.api import BraidError
from transport.connection import Connection
from transport.daemon_config import ConfigError, DaemonConfig, load_config, load_secret
from transport.daemon_control import _socket_alive
from transport.daemon_log import Log
from transport.endpoint import PeerKey
from transport.events import Event, MessageAcked
from transport.hostcore import HostCore, Reply, SendRefused


class LocalEndpoint:
    """One host's Braid endpoint in this process (use ``braid.open``)."""

    def __init__(self, cfg: DaemonConfig, *, secret: bytes | None, log: Log | None = None,
                 close_timeout: float = 2.0) -> None:
        self.cfg = cfg
        self.close_timeout = close_timeout
        #: Called with the size of every message the peer acknowledged (as ``Client.on_ack``).
        self.on_ack: Callable[[int], None] | None = None
        self.core = HostCore(cfg, secret=secret, log=log, on_event=self._event,
                             error=BraidError)
        self._opened = False
        self._closed = False

    @property
    def name(self) -> str:
        return self.cfg.name

    async def open(self) -> LocalEndpoint:
        cfg = self.cfg
        if _socket_alive(cfg.socket_path):
            raise BraidError(f"a daemon already serves {cfg.name}'s planes (its control "
                             f"socket {cfg.socket_path} answers): use braid.connect() "
                             f"or stop it")
        try:
            self.core.open(asyncio.get_running_loop())
        except OSError as exc:
            bad = self.core.failing_plane()
            if exc.errno == errno.EADDRINUSE:
                raise BraidError(f"a daemon already serves {cfg.name}'s planes (cannot bind "
                                 f"{bad}: address in use): use braid.connect() or stop "
                                 f"it") from None
            raise BraidError(f"cannot bind plane address {bad}: {exc.strerror}") from None
        self._opened = True
        return self

    async def close(self) -> None:
        """Leave: bounded by ``close_timeout`` (plus ~1 s to close with the peers)."""
        if self._closed or not self._opened:
            self._closed = True
            return
        self._closed = True
        left = await self.core.close(self.close_timeout)
        if left:
            self.core.log("warning", "closed_with_unacked", bytes=left)

    async def shutdown(self) -> None:
        """As ``Client.shutdown``: here the endpoint is the host's server, so close it."""
        await self.close()

    async def __aenter__(self) -> LocalEndpoint:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _check(self) -> None:
        if not self._opened:
            raise BraidError("not open")
        if self._closed:
            raise BraidError(self.core.closing)

    def _event(self, conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, MessageAcked) and self.on_ack is not None:
            self.on_ack(ev.size)

    # -- requests ---------------------------------------------------------------------------

    async def submit(self, peer: str, data: bytes | memoryview) -> asyncio.Future[Reply]:
        """Queue ``data`` (not copied: keep it unchanged until the future resolves)
        as one message to ``peer``; returns once it is queued, which waits while
        the peer's send window is full. The future resolves (``{"event":
        "acked", "msg_id", "bytes"}``) when the peer acknowledged all of it, or
        fails with a ``BraidError`` and the reason."""
        self._check()
        try:
            return await self.core.queue(peer, data)
        except SendRefused as exc:
            fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            fut.set_exception(BraidError(str(exc)))
            return fut

    async def send(self, peer: str, data: bytes | memoryview) -> int:
        """Send one message and wait until the peer acknowledged all of it; its id."""
        reply = await (await self.submit(peer, data))
        return int(reply["msg_id"])

    async def connect_peer(self, peer: str) -> None:
        """Open (or check) the connection to ``peer``: fails fast with the reason."""
        self._check()
        try:
            await self.core.connection(peer)
        except (SendRefused, ConnectionError) as exc:
            raise BraidError(str(exc)) from None

    async def stats(self) -> dict[str, Any]:
        """The daemon's stats shape (``braid stats``), for this endpoint."""
        if not self._opened:
            raise BraidError("not open")
        return {"event": "stats", "inproc": True, **self.core.stats()}

    async def recv(self) -> tuple[str, bytes]:
        """The next message delivered to this host: (peer, bytes). Taking it
        gives its receive credit back to the sending peer."""
        if not self._opened:
            raise BraidError("not open")
        core = self.core
        while True:
            item = core.take()
            if item is not None:
                return item[0], item[2]
            if self._closed:
                raise BraidError(f"{self.cfg.name} closed")
            core.inbox_ready.clear()
            await core.inbox_ready.wait()


def _load(target: str | Path | DaemonConfig, secret: bytes | None) -> tuple[DaemonConfig,
                                                                          bytes | None]:
    try:
        cfg = target if isinstance(target, DaemonConfig) else load_config(target)
        return cfg, secret if secret is not None else load_secret(cfg)
    except ConfigError as exc:
        raise BraidError(str(exc)) from None


class _Open:
    def __init__(self, target: str | Path | DaemonConfig, secret: bytes | None,
                 log: Log | None, close_timeout: float) -> None:
        cfg, key = _load(target, secret)
        self.endpoint = LocalEndpoint(cfg, secret=key, log=log, close_timeout=close_timeout)

    async def __aenter__(self) -> LocalEndpoint:
        return await self.endpoint.open()

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.endpoint.close()

    def __await__(self) -> Any:
        return self.endpoint.open().__await__()


def open_local(target: str | Path | DaemonConfig, *, secret: bytes | None = None,
               log: Log | None = None, close_timeout: float = 2.0) -> _Open:
    """``async with braid.open(config) as ep`` (or ``ep = await braid.open(...)``):
    the host of ``config`` (a daemon .toml or a ``DaemonConfig``) served in
    this process. ``secret`` overrides the config's key file."""
    return _Open(target, secret, log, close_timeout)
