"""The I/O adapter: drives an ``Endpoint`` with real UDP sockets on an event loop.

This is the only place below the daemon that reads a clock (``time.monotonic``)
or touches a socket. The fast path is ``loop.add_reader`` on each plane's
listening socket with a drain loop of ``recvmsg_into`` into one preallocated
buffer (an order of magnitude cheaper per datagram than a
``DatagramProtocol``), then one *service* pass: hand out what the
connections want to send, dispatch their events, re-arm the single timer
handle at the earliest ``next_timer()``.

Not used, on purpose (measured, see docs/daemon.md): UDP GSO — a GSO batch
shares one source port, i.e. one EV, which per-packet spraying never has in
a row; and UDP GRO, which coalesces only same-flow datagrams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from transport.connection import Connection
from transport.datagram import RxInfo, TxPath
from transport.endpoint import Endpoint, PeerKey
from transport.events import Event
from transport.udp import ANC_SPACE, PeerTable, PlaneAddr, PlaneSockets, errno_name
from wire.constants import ECN_CE, Dscp

#: Datagrams read per readiness callback before the connections are serviced
#: (bounds the latency of the ACKs the reads produce).
RX_BUDGET = 256
#: datagrams_to_send() rounds per service pass before yielding to the loop.
TX_ROUNDS = 4
_MAX_DGRAM = 65536
_DATA_DSCP = int(Dscp.DATA)

EventHandler = Callable[[Connection, PeerKey, Event], None]


class Tap(Protocol):
    """Sees every datagram sent and received (for qlog); costs nothing when unset."""

    def on_tx(self, now: float, data: bytes, path: TxPath) -> None: ...

    def on_rx(self, now: float, data: bytes, rx: RxInfo) -> None: ...


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (several times cheaper per callback), else asyncio."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class EndpointIO:
    """Sockets for every plane, one timer handle, and the service pass.

    ``on_event(conn, peer, event)`` is called synchronously for every event
    of every connection; keep it short (put work on queues).
    """

    def __init__(self, endpoint: Endpoint, planes: Sequence[PlaneAddr], peers: PeerTable, *,
                 on_event: EventHandler | None = None, pool: int = 16,
                 rcvbuf: int = 32 << 20, sndbuf: int = 8 << 20) -> None:
        if len(planes) != endpoint.config.planes:
            raise ValueError(f"{len(planes)} plane addresses for {endpoint.config.planes} planes")
        self.endpoint = endpoint
        self.plane_addrs = list(planes)
        self.peers = peers
        self.on_event = on_event
        self._pool = pool
        self._rcvbuf = rcvbuf
        self._sndbuf = sndbuf
        self.planes: list[PlaneSockets] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._kick: asyncio.Handle | None = None
        self._buf = bytearray(_MAX_DGRAM)
        self._view = memoryview(self._buf)
        self._rx_info: dict[tuple[int, int], RxInfo] = {}
        self.rx_datagrams = 0
        self.tx_datagrams = 0
        self.rx_bytes = 0
        self.tx_bytes = 0
        self.tx_errors: dict[str, int] = {}
        self.closed = False
        self.tap: Tap | None = None

    # -- lifecycle ----------------------------------------------------------------

    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind every plane's sockets and start reading (raises OSError, e.g. EADDRINUSE)."""
        self._loop = loop or asyncio.get_running_loop()
        try:
            for i, a in enumerate(self.plane_addrs):
                self.planes.append(PlaneSockets(i, a, pool=self._pool, rcvbuf=self._rcvbuf,
                                                sndbuf=self._sndbuf))
        except BaseException:
            self.close()
            raise
        for ps in self.planes:
            self._loop.add_reader(ps.listen.fileno(), self._on_readable, ps)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for h in (self._timer, self._kick):
            if h is not None:
                h.cancel()
        for ps in self.planes:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(ps.listen.fileno())
            ps.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "open() first"
        return self._loop

    @staticmethod
    def now() -> float:
        """The core's clock. Not ``loop.time()``: uvloop's is cached per loop
        iteration at 1 ms resolution, far too coarse for RTT samples of tens of
        microseconds. Timers still go through the loop (``call_later``)."""
        return time.monotonic()

    # -- API used by the daemon ---------------------------------------------------------

    def connect(self, peer: PeerKey) -> Connection:
        if peer not in self.peers.routes:
            raise KeyError(peer)
        conn = self.endpoint.connect(peer, self.now())
        self.kick()
        return conn

    def kick(self) -> None:
        """Run a service pass soon (coalesced): after the application queued data."""
        if self._kick is None and not self.closed:
            self._kick = self.loop.call_soon(self._kicked)

    def _kicked(self) -> None:
        self._kick = None
        self.service()

    # -- input ----------------------------------------------------------------------

    def _on_readable(self, ps: PlaneSockets) -> None:
        self._drain(ps)
        self.service()

    def _drain(self, ps: PlaneSockets) -> None:
        sock = ps.listen
        view = self._view
        bufs = [self._buf]
        ep = self.endpoint
        peers = self.peers
        by_source = peers.by_source
        infos = self._rx_info
        plane = ps.index
        now = time.monotonic()
        n_rx = 0
        n_bytes = 0
        for _ in range(RX_BUDGET):
            try:
                n, anc, _flags, addr = sock.recvmsg_into(bufs, ANC_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # e.g. an ICMP error queued on the socket
                self._count_tx_error(exc)
                break
            v = anc[0][2][0] if anc and anc[0][2] else 0
            rx = infos.get((plane, v))
            if rx is None:
                rx = infos[(plane, v)] = RxInfo(plane, (v & 3) == ECN_CE, v >> 2)
            host = addr[0]
            peer = by_source.get((plane, host))
            data = bytes(view[:n])
            if self.tap is not None:
                self.tap.on_rx(now, data, rx)
            if peer is not None:
                ep.receive_datagram(data, rx, now, peer)
            else:  # an unknown source: remembered only once it has a connection
                conn = ep.receive_datagram(data, rx, now, host)
                if conn is not None and conn.local_cid in ep.connections and \
                        ep.peer_of(conn) == host:
                    peers.learn(plane, host)
            n_rx += 1
            n_bytes += n
        self.rx_datagrams += n_rx
        self.rx_bytes += n_bytes

    # -- output, events, timer ------------------------------------------------------------

    def service(self) -> None:
        """Send what is due, dispatch events, re-arm the timer."""
        if self.closed:
            return
        ep = self.endpoint
        more = False
        for _ in range(TX_ROUNDS):
            out = ep.datagrams_to_send(time.monotonic())
            if not out:
                break
            self._send(out)
        else:
            more = True
        self._dispatch()
        if ep.reap():
            self.peers.prune({ep.peer_of(c) for c in ep.connections.values()})
        if more:
            self.kick()
        self._arm()

    def _send(self, out: list[tuple[PeerKey, bytes, TxPath]]) -> None:
        if self.tap is not None:
            now = time.monotonic()
            for _peer, data, path in out:
                self.tap.on_tx(now, data, path)
        planes = self.planes
        sockaddr = self.peers.sockaddr
        n_tx = 0
        n_bytes = 0
        n_planes = len(planes)
        for peer, data, path in out:
            if not 0 <= path.plane < n_planes:
                # The core folds every plane into range; never let one bad
                # number abort the service pass (a CLOSE behind it would be lost).
                self.tx_errors["bad_plane"] = self.tx_errors.get("bad_plane", 0) + 1
                continue
            ps = planes[path.plane]
            dest = sockaddr(peer, path.plane, path.ev)
            if dest is None:
                self.tx_errors["no_route"] = self.tx_errors.get("no_route", 0) + 1
                continue
            pool = ps.pool
            sock = pool[path.ev % len(pool)]
            try:
                if path.dscp == _DATA_DSCP:
                    sock.sendto(data, dest)
                else:
                    sock.sendmsg([data], ps.cmsg[path.dscp], 0, dest)
            except OSError as exc:
                # A full socket buffer (EAGAIN/ENOBUFS) is a loss like any
                # other: the core recovers it. Count it, never stall.
                self._count_tx_error(exc)
                continue
            n_tx += 1
            n_bytes += len(data)
        self.tx_datagrams += n_tx
        self.tx_bytes += n_bytes

    def _count_tx_error(self, exc: OSError) -> None:
        name = errno_name(exc)
        self.tx_errors[name] = self.tx_errors.get(name, 0) + 1

    def _dispatch(self) -> None:
        ep = self.endpoint
        handler = self.on_event
        while (item := ep.next_event()) is not None:
            conn, ev = item
            if handler is not None:
                handler(conn, ep.peer_of(conn), ev)

    def _arm(self) -> None:
        t = self.endpoint.next_timer()
        if t == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = t
        if t is not None:
            self._timer = self.loop.call_later(max(t - time.monotonic(), 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        # Input first: after a busy stretch the loop runs due timers before it
        # polls sockets, and an RTO must not fire over ACKs already queued.
        for ps in self.planes:
            self._drain(ps)
        self.endpoint.handle_timer(time.monotonic())
        self.service()

    # -- introspection ---------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        return {
            "rx_datagrams": self.rx_datagrams,
            "tx_datagrams": self.tx_datagrams,
            "rx_bytes": self.rx_bytes,
            "tx_bytes": self.tx_bytes,
            "tx_errors": dict(self.tx_errors),
            "peer_table": len(self.peers),
            "planes": [
                {
                    "plane": ps.index,
                    "address": str(ps.addr),
                    "rcvbuf": ps.rcvbuf,
                    "source_ports": len(ps.source_ports),
                    "rx_queue_drops": ps.rx_queue_drops(),
                }
                for ps in self.planes
            ],
            "endpoint": self.endpoint.stats(),
        }

