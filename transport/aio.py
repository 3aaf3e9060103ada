"""The I/O adapter: drives an ``Endpoint`` with real UDP sockets on an event loop.

This is the only place below the daemon that reads a clock (``time.monotonic``)
or touches a socket. The fast path is ``loop.add_reader`` on each plane's
listening socket with a drain loop into one preallocated buffer: one
``recvmmsg`` for every datagram queued (``wire._fastwire.drain``) where the
extension is built, one ``recvmsg_into`` per datagram otherwise (an order of
magnitude cheaper per datagram than a ``DatagramProtocol``), then one
*service* pass: hand out what the
connections want to send, dispatch their events, re-arm the single timer
at the earliest ``next_timer()``: under 2 ms ahead a timerfd in the same
epoll, because the loop's own timers are whole milliseconds and spin on
shorter waits (``transport/timerfd.py``), else the loop's timer.

System calls are batched where the kernel helps (docs/benchmarks.md,
"CPU per gigabyte"): a new-data run, which the core produces when
``spray_run`` > 1, comes sealed whole (``SealedRun``, ``sealed_runs``) and
goes out in one ``sendmsg`` with UDP GSO, as do consecutive datagrams for the
same (peer, plane, EV, DSCP) (transport/aio_send.py); the listening socket
has UDP GRO on, so such a batch that reaches it unsplit is read as one and
cut here. With ``spray_run`` = 1 every send is one datagram.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence

from transport.aio_send import DatagramSender
from transport.connection import Connection
from transport.datagram import RxInfo, Tap
from transport.endpoint import Endpoint, PeerKey
from transport.events import Event
from transport.queue_wait import QueueWait
from transport.rx_moderation import RX_HOLDOFF, RX_POLL_TARGET, next_poll_interval
from transport.timerfd import TimerFd
from transport.udp import (
    RX_ANC_SPACE,
    SCM_TIMESTAMPNS,
    SOL_UDP,
    PeerTable,
    PlaneAddr,
    PlaneSockets,
)
from wire.constants import ECN_CE

#: Datagrams read per readiness callback before the connections are serviced
#: (bounds the latency of the ACKs the reads produce).
RX_BUDGET = 256
#: datagrams_to_send() rounds per service pass before yielding to the loop.
TX_ROUNDS = 4
#: A read's slot: a datagram or a GRO batch (at most 64 KB).
RX_SLOT = 65536
#: Slots one recvmmsg fills (the extension's ``drain``; 1 MiB of buffer).
RX_SLOTS = 16
_INT = struct.Struct("i")
_TIMESPEC = struct.Struct("qq")
_SOL_SOCKET = socket.SOL_SOCKET
EventHandler = Callable[[Connection, PeerKey, Event], None]


#: Deadlines nearer than this go on the timerfd (the loop's millisecond timers
#: would spin on them); farther ones stay on the loop's timer, cheaper to move
#: than a ``timerfd_settime`` per pass (2-5% CPU per GB on loopback bulk).
TIMERFD_BELOW = 2e-3


def _drain_c() -> Callable[[int, bytearray, int],
                            list[tuple[int, int, int, tuple[str, int], int]]] | None:
    """``wire._fastwire.drain`` (recvmmsg) where the compiled codec is in use."""
    from wire.codec import IMPLEMENTATION

    if IMPLEMENTATION != "c":
        return None
    from wire import _fastwire

    return getattr(_fastwire, "drain", None)


class EndpointIO(DatagramSender):
    """Sockets for every plane, one timer handle, and the service pass.

    ``on_event(conn, peer, event)`` is called synchronously for every event
    of every connection; keep it short (put work on queues).
    """

    def __init__(self, endpoint: Endpoint, planes: Sequence[PlaneAddr], peers: PeerTable, *,
                 on_event: EventHandler | None = None, pool: int = 16,
                 rcvbuf: int = 32 << 20, sndbuf: int = 8 << 20, batch: bool = True,
                 timerfd: bool = True, queue_wait: bool = False,
                 rx_holdoff: float = RX_HOLDOFF, rx_poll_target: int = RX_POLL_TARGET,
                 host_stamps: bool = False) -> None:
        if len(planes) != endpoint.config.planes:
            raise ValueError(f"{len(planes)} plane addresses for {endpoint.config.planes} planes")
        self.endpoint = endpoint
        # A new-data run comes sealed whole: one GSO send (DatagramSender._send);
        # and paced, it waits for a whole run's tokens (a wakeup and a send
        # cost more than the packet-exact spacing they would buy).
        endpoint.sealed_runs = batch
        endpoint.paced_runs = batch
        # Every read drains all the plane sockets before anything is decided
        # (``_on_readable``, ``_on_timer``): a SACK's losses are inferred once
        # the read is over, not while other planes' SACKs wait unread.
        endpoint.read_batches = True
        self.plane_addrs = list(planes)
        self.peers = peers
        self.on_event = on_event
        self._pool = pool
        self._rcvbuf = rcvbuf
        self._sndbuf = sndbuf
        self._batch = batch
        self.planes: list[PlaneSockets] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        #: The deadline as a timerfd in the loop's epoll (transport/timerfd.py);
        #: None: ``call_later`` (no timerfd here, or ``timerfd=False``).
        self._tfd: TimerFd | None = None
        self._use_tfd = timerfd
        self._kick: asyncio.Handle | None = None
        #: Receive moderation (``RX_HOLDOFF``; 0: off). While ``_poll_at`` is
        #: set the plane sockets are unwatched and the timer polls them then.
        self.rx_holdoff = max(0.0, rx_holdoff)
        self.rx_poll_target = max(0, rx_poll_target)
        #: The poll interval now (adaptive: ``RX_POLL_TARGET``); kept across
        #: polling spells, so a stream that pauses resumes at its rate's.
        self._poll_every = self.rx_holdoff
        self._poll_at: float | None = None
        self._periodic = False  # the timerfd ticks every rx_holdoff (polling)
        self._moved_mark = 0
        # One read of every datagram queued (up to RX_SLOTS, recvmmsg) where
        # the extension is built, else one recvmsg_into per datagram.
        self._drain_c = _drain_c()
        self._read_slots = RX_SLOTS if self._drain_c is not None else 1
        self._buf = bytearray(RX_SLOT * self._read_slots)
        self._view = memoryview(self._buf)
        self._rx_info: dict[tuple[int, int], RxInfo] = {}
        self.rx_datagrams = 0
        self.tx_datagrams = 0
        self.rx_bytes = 0
        self.tx_bytes = 0
        self.tx_errors: dict[str, int] = {}
        #: Datagrams per plane the kernel refused as unreachable (``_UNREACHABLE``).
        self.tx_unreachable: list[int] = []
        #: sendmsg calls that carried a GSO batch (more than one datagram).
        self.gso_sends = 0
        self.tx_sends = 0  # send system calls (one per GSO batch or datagram)
        #: Service passes by what woke them: a plane socket readable, the
        #: timer, a kick (the application queued data). At paced rates each
        #: wakeup carries a packet or two, so per-wakeup costs dominate;
        #: ``braid bench paced`` reports datagrams per wakeup from these.
        self.wakeups = {"readable": 0, "timer": 0, "kick": 0, "poll": 0}
        self.closed = False
        self.tap: Tap | None = None
        #: Socket-queue waits of what this host read (``queue_wait=True``: the
        #: kernel stamps every datagram; transport/queue_wait.py); None: off.
        self.queue_wait: QueueWait | None = QueueWait() if queue_wait else None
        #: Kernel receive stamps tell the core each read's lag (RxInfo.lag).
        self._stamps = host_stamps or queue_wait

    # -- lifecycle ----------------------------------------------------------------

    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind every plane's sockets and start reading (raises OSError, e.g. EADDRINUSE)."""
        self._loop = loop or asyncio.get_running_loop()
        try:
            for i, a in enumerate(self.plane_addrs):
                self.planes.append(PlaneSockets(i, a, pool=self._pool, rcvbuf=self._rcvbuf,
                                                sndbuf=self._sndbuf, batch=self._batch,
                                                rx_timestamps=self._stamps))
        except BaseException:
            self.close()
            raise
        for ps in self.planes:
            self._loop.add_reader(ps.listen.fileno(), self._on_readable, ps)
        if self._use_tfd:
            try:
                self._tfd = TimerFd.open()
            except OSError:
                self._tfd = None  # call_later, with its millisecond granularity
            else:
                self._loop.add_reader(self._tfd.fileno(), self._on_timerfd)

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
        if self._tfd is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._tfd.fileno())
            self._tfd.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "open() first"
        return self._loop

    @staticmethod
    def now() -> float:
        """The core's clock. Not ``loop.time()``: uvloop's is cached per loop
        iteration at 1 ms resolution, far too coarse for RTT samples of tens of
        microseconds. The timer is a timerfd on the same clock (``_arm``)."""
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
        self.wakeups["kick"] += 1
        self.service()

    # -- input ----------------------------------------------------------------------

    def _on_readable(self, ps: PlaneSockets) -> None:
        self.wakeups["readable"] += 1
        # Every plane's socket, from this one on, before the ACKs go: the
        # peer reads a SACK that covers one plane's newer datagrams but not
        # another's older ones (still unread in that plane's socket) as
        # evidence that the other plane went silent. On a CPU-bound host a
        # budget of reads on one plane took longer than the silence rule's
        # few RTTs, and equal planes were parked by turns (one plane 0.16 of
        # the bytes in tests/netns/test_daemon_netns.py). An empty socket
        # costs one EAGAIN read.
        planes = self.planes
        k = planes.index(ps)
        for i in range(len(planes)):
            self._drain(planes[(k + i) % len(planes)])
        # Read to the end: a SACK held back by a short ACK delay goes out now,
        # not after a timer wakeup (docs/daemon.md, "ACK at the end of a read").
        self.endpoint.flush_acks(time.monotonic())
        if self.rx_holdoff and not self.closed:
            self._moderate(polled=False)
        self.service()

    def _moderate(self, *, polled: bool) -> None:
        """Receive moderation (``transport/rx_moderation.py``), decided before
        the service pass so its ``_arm`` knows: a busy wakeup (datagrams read or
        sent since the last decision) unwatches the plane sockets until the
        next poll; an idle one watches them again. After a poll (``polled``)
        the interval adapts (``next_poll_interval``)."""
        loop = self.loop
        total = self.rx_datagrams + self.tx_datagrams
        moved, self._moved_mark = total - self._moved_mark, total
        if moved:
            if self._poll_at is None:
                for ps in self.planes:
                    loop.remove_reader(ps.listen.fileno())
            elif polled:
                every = next_poll_interval(self._poll_every, moved, self.rx_poll_target,
                                           self.rx_holdoff)
                if every != self._poll_every:
                    self._poll_every = every
                    self._periodic = False  # _arm sets the timerfd's new period
            self._poll_at = time.monotonic() + self._poll_every
        elif self._poll_at is not None:
            self._poll_at = None
            for ps in self.planes:
                loop.add_reader(ps.listen.fileno(), self._on_readable, ps)

    def _read(self, ps: PlaneSockets) -> list[tuple[int, int, int, tuple[str, int], int]]:
        """One read of ``ps``'s socket: what ``_fastwire.drain`` returns
        (``(bytes, GRO segment, TOS, address, kernel stamp ns)`` per datagram
        or GRO batch, read i at ``i * RX_SLOT`` of the buffer), by one
        ``recvmmsg`` where the extension is built, else one ``recvmsg_into``.
        Empty: nothing queued. Raises OSError for a queued socket error."""
        if self._drain_c is not None:
            return self._drain_c(ps.listen.fileno(), self._buf, RX_SLOT)
        try:
            n, anc, _flags, addr = ps.listen.recvmsg_into([self._buf], RX_ANC_SPACE)
        except (BlockingIOError, InterruptedError):
            return []
        v = seg = stamp = 0
        for level, _type, cdata in anc:
            if level == SOL_UDP:
                if len(cdata) >= 4:
                    seg = _INT.unpack_from(cdata)[0]
            elif level == _SOL_SOCKET:
                if _type == SCM_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = _TIMESPEC.unpack_from(cdata)
                    stamp = sec * 1_000_000_000 + nsec
            elif cdata:
                v = cdata[0]  # IP_TOS one byte; IPV6_TCLASS an int (little-endian)
        return [(n, seg, v, addr, stamp)]

    def _drain(self, ps: PlaneSockets) -> None:
        view = self._view
        ep = self.endpoint
        receive_many = ep.receive_datagrams
        peers = self.peers
        by_source = peers.by_source
        infos = self._rx_info
        plane = ps.index
        tap = self.tap
        qw = self.queue_wait
        now = time.monotonic()
        wall = time.time()  # a kernel stamp's clock: a read's lag is wall - stamp
        n_rx = 0
        n_bytes = 0
        calls = 0
        last_v = -1
        last_host = ""
        rx = RxInfo(plane)  # replaced at the first datagram (last_v = -1)
        peer: PeerKey = None
        full = self._read_slots
        # Bounded in datagrams (a GRO read carries many) and in reads.
        while n_rx < RX_BUDGET and calls < RX_BUDGET:
            calls += 1
            try:
                rows = self._read(ps)
            except OSError as exc:  # e.g. an ICMP error queued on the socket
                self._count_tx_error(exc)
                break
            if not rows:
                break
            # Consecutive datagrams of one peer with one RxInfo go to the
            # endpoint in one call (views of the buffer, valid until the next read).
            batch: list[memoryview] = []
            batch_rx = rx
            batch_peer: PeerKey = None
            base = -RX_SLOT
            for n, seg, v, addr, stamp in rows:
                base += RX_SLOT
                if v != last_v:
                    known = infos.get((plane, v))
                    if known is None:
                        known = infos[(plane, v)] = RxInfo(plane, (v & 3) == ECN_CE, v >> 2)
                    rx = known
                    last_v = v
                got = rx
                if stamp:
                    lag = wall - stamp * 1e-9
                    if qw is not None:
                        qw.add(time.time() - stamp * 1e-9)
                    if lag > 0.0:
                        got = RxInfo(plane, rx.ce, rx.dscp, lag)
                host = addr[0]
                if host != last_host:  # a drain is mostly one peer's datagrams
                    peer = by_source.get((plane, host))
                    last_host = host
                n_bytes += n
                if peer is not None and tap is None:
                    # The fast path: views of the buffer, no copies (the endpoint
                    # keeps nothing of them); DATA goes straight to its connection.
                    if batch and (got is not batch_rx or peer is not batch_peer):
                        receive_many(batch, batch_rx, now, batch_peer)
                        batch = []
                    batch_rx, batch_peer = got, peer
                    if 0 < seg < n:
                        # A GRO batch: datagrams of ``seg`` bytes, the last maybe shorter.
                        whole = view[base:base + n]
                        views = [whole[off:off + seg] for off in range(0, n, seg)]
                        n_rx += len(views)
                        batch += views
                    else:
                        n_rx += 1
                        batch.append(view[base:base + n])
                    continue
                if batch:
                    receive_many(batch, batch_rx, now, batch_peer)
                    batch = []
                if 0 < seg < n:
                    chunks: Iterable[bytes] = [bytes(view[base + off:base + min(off + seg, n)])
                                               for off in range(0, n, seg)]
                else:
                    chunks = (bytes(view[base:base + n]),)
                for data in chunks:
                    if tap is not None:
                        tap.on_rx(now, data, got)
                    n_rx += 1
                    if peer is not None:
                        ep.receive_datagram(data, got, now, peer)
                        continue
                    # An unknown source: remembered only once it has a connection
                    # (it authenticated), never for a mere datagram.
                    conn = ep.receive_datagram(data, got, now, host)
                    if conn is not None and conn.local_cid in ep.connections and \
                            ep.peer_of(conn) == host:
                        peers.learn(plane, host)
                        peer = by_source.get((plane, host))
            if batch:
                receive_many(batch, batch_rx, now, batch_peer)
            if len(rows) < full:
                break  # the queue is empty (one read fewer than asking again)
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
            out = ep.runs_to_send(time.monotonic())
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

    def _dispatch(self) -> None:
        ep = self.endpoint
        handler = self.on_event
        while (item := ep.next_event()) is not None:
            conn, ev = item
            if handler is not None:
                handler(conn, ep.peer_of(conn), ev)

    def _arm(self) -> None:
        poll = self._poll_at
        tfd = self._tfd
        if poll is not None and tfd is not None:
            # Polling: the sockets are unwatched, and the timerfd ticks every
            # poll interval (no re-arm per pass); every deadline of the
            # connections (the pacer's, mostly) waits for the next tick and is
            # met then, at most ``rx_holdoff`` late.
            if not self._periodic:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                tfd.set(poll, every=self._poll_every)
                self._periodic = True
                self._timer_at = None
            return
        if self._periodic:  # polling ended: back to one deadline
            self._periodic = False
            self._timer_at = None
            if tfd is not None:
                tfd.set(None)
        t = self.endpoint.next_timer()
        if poll is not None:
            t = poll  # no timerfd: the loop's timer polls
        if t == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = t
        tfd = self._tfd
        if t is None:
            if tfd is not None and tfd.armed_at is not None:
                tfd.set(None)
            return
        delay = t - time.monotonic()
        if tfd is not None and delay < TIMERFD_BELOW:
            tfd.set(t)
            return
        # A far deadline: the loop's own timer (cheaper to move than a system
        # call). It may fire up to 1 ms early; the re-arm then takes the rest
        # on the timerfd.
        if tfd is not None and tfd.armed_at is not None:
            tfd.set(None)
        self._timer = self.loop.call_later(max(delay, 0.0), self._on_timer)

    def _on_timerfd(self) -> None:
        assert self._tfd is not None
        if self._tfd.expired():  # not a stale wakeup from before a re-arm
            self._on_timer()

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        polling = self._poll_at is not None
        self.wakeups["poll" if polling else "timer"] += 1
        # Input first: after a busy stretch the loop runs due timers before it
        # polls sockets, and an RTO must not fire over ACKs already queued.
        for ps in self.planes:
            self._drain(ps)
        now = time.monotonic()
        if polling:
            self.endpoint.flush_acks(now)
        self.endpoint.handle_timer(now)
        if polling and not self.closed:
            self._moderate(polled=True)  # what this poll read and the last pass sent
        self.service()

    # -- introspection ---------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        return {
            "rx_datagrams": self.rx_datagrams,
            "tx_datagrams": self.tx_datagrams,
            "rx_bytes": self.rx_bytes,
            "tx_bytes": self.tx_bytes,
            "gso_sends": self.gso_sends,
            "tx_sends": self.tx_sends,
            "wakeups": dict(self.wakeups),
            "poll_every_us": round(self._poll_every * 1e6, 1) if self.rx_holdoff else 0,
            "queue_wait": None if self.queue_wait is None else self.queue_wait.summary(),
            "tx_errors": dict(self.tx_errors),
            "tx_unreachable": list(self.tx_unreachable),
            "peer_table": len(self.peers),
            "planes": [
                {
                    "plane": ps.index,
                    "address": str(ps.addr),
                    "rcvbuf": ps.rcvbuf,
                    "source_ports": len(ps.source_ports),
                    "gso": ps.gso,
                    "gro": ps.gro,
                    "rx_timestamps": ps.rx_timestamps,
                    "rx_queue_drops": ps.rx_queue_drops(),
                }
                for ps in self.planes
            ],
            "endpoint": self.endpoint.stats(),
        }

