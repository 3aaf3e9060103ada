"""``braid daemon``: one per host; Braid connections to configured peers, served
to local applications over a Unix socket (mode 0600, see ``transport.control``).

Configuration is TOML (``load_config``); errors name the file, the key and,
for syntax errors, the line. SIGTERM / SIGINT / a ``shutdown`` request drain
gracefully: new sends are refused, queued data is sent until acknowledged
(at most ``drain_timeout``), then connections are closed with the peer.
Logs are one ``key=value`` line per event on stderr.

The daemon is split by responsibility: ``daemon_config`` (the TOML file),
``daemon_log`` (logs and the qlog tap), ``transport.hostcore`` (the host's
rules, shared with the in-process endpoint: peers, send windows, events,
reconnection, inbox credit, close, stats), ``daemon_control`` (the Unix
socket and receive streams); this module ties them together with signals,
the qlog and the key log. Their public names are importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import IO

from transport import control
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
from transport.endpoint import PeerKey
from transport.events import (
    ConnectionEstablished,
    Event,
    EvStateChanged,
    MessageDelivered,
)
from transport.hostcore import UNREACHABLE, HostCore, _bind_fails, _flat, _jsonable

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
    "_bind_fails",
    "_jsonable",
    "auto_payload",
    "load_config",
    "load_secret",
    "parse_config",
    "run_daemon",
]


class Daemon(ControlServer, HostCore):
    """A ``HostCore`` (peers, send windows, inbox and credit, reconnection,
    stats: ``transport/hostcore.py``) served over the control socket, with
    signals, the qlog tap and the key log."""

    def __init__(self, cfg: DaemonConfig, *, secret: bytes | None, log: Log | None = None,
                 qlog: QlogSink | None = None) -> None:
        HostCore.__init__(self, cfg, secret=secret, log=log or Log(),
                          on_event=self._daemon_event,
                          closing="daemon is shutting down; not accepting new work")
        self.qlog = qlog
        if qlog is not None:
            self.io.tap = QlogTap(qlog)
        self._stop = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self._receivers: dict[asyncio.StreamWriter, _RecvStream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._cwnd: dict[int, int] = {}
        self._rtos: dict[int, int] = {}
        self._keylog: IO[str] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.open(loop)
        except OSError as exc:
            bad = self.failing_plane()
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
        code = 0
        left = await self.finish(self.cfg.drain_timeout, linger=2.0)
        if left:
            self.log("error", "drain_timeout", unacked_bytes=left,
                     timeout=self.cfg.drain_timeout)
            code = 1
        # Hand what arrived to the local receivers before going (waiting a
        # bounded time for one to come if none is attached).
        end = time.monotonic() + min(self.cfg.drain_timeout, 10.0)
        while (self.inbox or self.handed_out()) and time.monotonic() < end:
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
        self.close_io()
        if self.qlog is not None:
            self.qlog.close()
        if self._keylog is not None:
            self._keylog.close()
        self.log("info", "daemon_stopped", code=code, **_flat(self.io.stats()))
        return code

    # -- events from the transport (after HostCore's rules) -----------------------------------

    def _daemon_event(self, conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, MessageDelivered):
            if self.qlog is not None:
                self.qlog.event(time.monotonic(), "message_delivered", peer=str(peer),
                                msg_id=ev.msg_id, size=len(ev.data))
        elif isinstance(ev, ConnectionEstablished):
            if self._keylog is not None and conn.traffic_keys is not None:
                from wire.keylog import format_lines

                send, recv = conn.traffic_keys
                self._keylog.write(format_lines(local_cid=conn.local_cid,
                                                remote_cid=ev.remote_cid, send=send,
                                                recv=recv))
        elif isinstance(ev, EvStateChanged) and self.qlog is not None:
            self.qlog.event(self.io.now(), "ev_state", plane=ev.plane, ev=ev.ev, old=ev.old,
                            new=ev.new, cause="")

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


def run_daemon(cfg: DaemonConfig, *, secret: bytes | None, log: Log,
               qlog_factory: Callable[[], QlogSink] | None = None) -> int:
    """Run the daemon on uvloop until it is stopped; the exit code."""
    from transport.eventloop import new_event_loop

    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        daemon = Daemon(cfg, secret=secret, log=log,
                        qlog=qlog_factory() if qlog_factory is not None else None)
        return loop.run_until_complete(daemon.run())
    finally:
        loop.close()
