"""A host's many connections, as one sans-I/O multiplexer (no sockets, no clock).

The I/O adapter hands every datagram it reads to ``Endpoint.receive_datagram``
together with a *peer key* — whatever identifies the sender to the I/O layer
(a configured peer name, or the address an INIT came from). The endpoint
routes by destination connection id (``peek_untrusted``), opens INITs itself
(authenticated with ``HandshakeCodec`` under the cluster key) and creates the
responder with ``Connection.accept``; a retransmitted INIT (same nonce) goes
to the connection it already created, which re-sends its ACCEPT. Whatever it
cannot use is counted by reason in ``drops`` and dropped.

Output is ``datagrams_to_send(now) -> [(peer, bytes, TxPath)]``: the I/O
layer maps (peer, plane) to an address and the EV to a source port / flow
label. An I/O layer that sends a run in one UDP GSO call sets
``sealed_runs`` and takes ``runs_to_send(now)``, where a new-data run is one
``SealedRun`` (its datagrams back to back) in place of its datagrams; with
``paced_runs`` it also has the pacer release new data a run at a time.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.datagram import Outgoing, RxInfo, TxPath
from transport.events import ConnectionClosed, ConnectionFailed, Event
from transport.host_share import HostShare
from wire.codec import IMPLEMENTATION, HandshakeCodec, peek_untrusted
from wire.constants import HEADER_TAG_LEN, VERSION, Dscp, PacketType
from wire.errors import WireError
from wire.packets import HEADER_WORDS, CommonHeader, Init, UnknownConn

PeerKey = Hashable
#: INIT nonces remembered after their connection is gone, so a late duplicate
#: INIT does not open a second connection.
_NONCE_MEMORY = 4096
#: Packet types a host answers with UNKNOWN_CONN when it lacks their connection.
#: The receive fast path's test for DATA without header extensions, and its
#: destination connection id (offset 4 of the common header).
_DATA_TYPE = int(PacketType.DATA)
_DATA_WORDS = HEADER_WORDS[PacketType.DATA]
_DATA_CUT = _DATA_WORDS * 4 + HEADER_TAG_LEN
_DCID = struct.Struct("!I").unpack_from


def data_run(datagrams: Sequence[bytes | memoryview], start: int) -> tuple[int, int]:
    """``(cid, end)``: ``datagrams[start:end]`` look like DATA without header
    extensions for connection ``cid``, as many in a row as there are; cid -1
    (and end ``start + 1``): ``datagrams[start]`` does not. The reference of
    ``wire._fastwire.data_run``, which the compiled codec uses."""
    def cid_of(data: bytes | memoryview) -> int:
        if len(data) >= _DATA_CUT and data[1] == _DATA_TYPE and data[3] == _DATA_WORDS \
                and data[0] == VERSION:
            return int(_DCID(data, 4)[0])
        return -1

    cid, end, n = cid_of(datagrams[start]), start + 1, len(datagrams)
    if cid >= 0:
        while end < n and cid_of(datagrams[end]) == cid:
            end += 1
    return cid, end


def _compiled_data_run() -> Callable[[list[Any], int], tuple[int, int]]:
    if IMPLEMENTATION != "c":
        return data_run
    from wire import _fastwire
    return _fastwire.data_run


_DATA_RUN = _compiled_data_run()
_ANSWER_UNKNOWN = frozenset({PacketType.DATA, PacketType.SACK, PacketType.NACK,
                             PacketType.PROBE, PacketType.PROBE_ACK, PacketType.CLOSE})


class Endpoint:
    """Many ``Connection`` objects behind one set of sockets.

    ``accept=False`` makes a client-only endpoint (every INIT is dropped as
    ``not_accepting``). ``max_connections`` bounds what an authenticated but
    misbehaving peer can make us allocate.
    """

    def __init__(self, *, config: ConnectionConfig, secret: bytes | None,
                 accept: bool = True, max_connections: int = 1024,
                 rng: random.Random | None = None, unknown_rate: float = 200.0,
                 unknown_burst: int = 20) -> None:
        self.config = config
        self.secret = secret
        self.accepting = accept
        self.max_connections = max_connections
        self._hs = HandshakeCodec(secret)
        self._rng = rng or random.SystemRandom()
        self.connections: dict[int, Connection] = {}
        self._peer: dict[int, PeerKey] = {}
        self._init_nonce: dict[bytes, int] = {}
        self._events: deque[tuple[Connection, Event]] = deque()
        #: Connections whose receiver holds a SACK back (``flush_acks``).
        self._ack_pending: dict[int, Connection] = {}
        #: Connections whose SACKs of this read wait for loss inference
        #: (``read_batches``, ``end_read``).
        self._read_pending: dict[int, Connection] = {}
        self.drops: dict[str, int] = {}
        self.accepted = 0
        self.initiated = 0
        # UNKNOWN_CONN answers: a token bucket, so a flood of packets for
        # unknown ids cannot make us a reflector; no state per source.
        self.unknown_rate = unknown_rate
        self.unknown_burst = unknown_burst
        self._unknown_tokens = float(unknown_burst)
        self._unknown_t: float | None = None
        self._stateless: list[tuple[PeerKey, bytes, TxPath]] = []
        self.unknown_answered = 0
        #: This host's sending connections share its maxwnd (``host_share``).
        self.host_share = HostShare() if config.host_share else None
        #: New-data runs as one ``SealedRun`` each (``transport.datagram``):
        #: set by an I/O layer that sends a run in one UDP GSO call. Off, every
        #: item of ``datagrams_to_send`` is one datagram.
        self.sealed_runs = False
        #: Paced new data leaves a spray run at a time (``Connection.paced_runs``):
        #: set by an I/O layer for which a wakeup and a send cost more than
        #: packet-exact spacing buys. Off (the simulator), packet by packet.
        self.paced_runs = False
        #: The I/O layer reads every plane's socket to the end before it acts
        #: (``Connection.read_batches``): loss inference runs once per read
        #: (``end_read``) instead of after each SACK. Off (the simulator, a
        #: datagram at a time), after each SACK.
        self.read_batches = False

    # -- bookkeeping -------------------------------------------------------------

    def _drop(self, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1

    def _new_cid(self) -> int:
        for _ in range(64):
            cid = self._rng.getrandbits(32)
            if cid and cid not in self.connections:
                return cid
        raise RuntimeError("no free connection id")  # 64 collisions in 2**32: a broken rng

    def peer_of(self, conn: Connection) -> PeerKey:
        """The peer key a connection was opened for (or its INIT came from)."""
        return self._peer[conn.local_cid]

    def connections_to(self, peer: PeerKey) -> Iterator[Connection]:
        for cid, conn in self.connections.items():
            if self._peer[cid] == peer:
                yield conn

    def on_path_unreachable(self, peer: PeerKey, plane: int, now: float, count: int = 1
                            ) -> None:
        """The I/O could not send to ``peer`` on ``plane`` (no route, link
        down): every connection to that peer routes around the plane."""
        for conn in list(self.connections_to(peer)):
            conn.on_path_unreachable(plane, now, count)

    # -- API ---------------------------------------------------------------------

    def connect(self, peer: PeerKey, now: float,
                config: ConnectionConfig | None = None) -> Connection:
        """Open a connection to ``peer``; its INIT is in the next datagrams_to_send."""
        cid = self._new_cid()
        cfg = config or self.config
        conn = Connection.initiate(config=replace(cfg, seed=cfg.seed ^ cid), secret=self.secret,
                                   local_cid=cid, now=now)
        conn.host_share = self.host_share
        conn.sealed_runs = self.sealed_runs
        conn.paced_runs = self.paced_runs
        conn.read_batches = self.read_batches
        self.connections[cid] = conn
        self._peer[cid] = peer
        self.initiated += 1
        return conn

    # -- input -------------------------------------------------------------------

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float,
                         peer: PeerKey) -> Connection | None:
        """Route one datagram; returns the connection it went to, if any."""
        try:
            h = peek_untrusted(data)
        except WireError as exc:
            self._drop(exc.reason)
            return None
        if h.ptype is PacketType.INIT:
            return self._on_init(data, rx, now, peer)
        if h.ptype is PacketType.UNKNOWN_CONN:
            return self._on_unknown_conn(data, h, now)
        conn = self.connections.get(h.dcid)
        if conn is None:
            self._drop("unknown_cid")
            self._answer_unknown(h, rx, now, peer)
            return None
        conn.receive_datagram(data, rx, now, h)
        self._collect(conn, received=True)
        return conn

    def receive_datagrams(self, datagrams: Iterable[bytes | memoryview], rx: RxInfo,
                          now: float, peer: PeerKey) -> None:
        """``receive_datagram`` for each of a batch from one source (a GRO
        read): a run of DATA without header extensions for one connection goes
        to it in one call (``Connection.receive_data_batch``); everything else
        the usual way. The datagrams may be views of the I/O layer's buffer:
        nothing keeps them."""
        conns = self.connections
        batch = datagrams if isinstance(datagrams, list) else list(datagrams)
        i, n = 0, len(batch)
        while i < n:
            cid, end = _DATA_RUN(batch, i)
            conn = conns.get(cid) if cid >= 0 else None
            if conn is not None:
                conn.receive_data_batch(batch if i == 0 and end == n else batch[i:end], rx, now)
                # Events stay in arrival order: collect before anything else runs.
                self._collect(conn, received=True)
            else:
                for data in batch[i:end]:
                    self.receive_datagram(bytes(data), rx, now, peer)
            i = end

    def _on_init(self, data: bytes, rx: RxInfo, now: float, peer: PeerKey) -> Connection | None:
        try:
            pkt = self._hs.open_untrusted(data)
        except WireError as exc:
            # 'tag' here is the responder's view of a key mismatch.
            self._drop(exc.reason)
            return None
        init = pkt.body
        assert isinstance(init, Init)
        cid = self._init_nonce.get(init.nonce)
        if cid is not None:
            conn = self.connections.get(cid)
            if conn is None:
                self._drop("stale_init")
                return None
            conn.receive_datagram(data, rx, now, pkt.header)  # re-sends its ACCEPT
            return conn
        if not self.accepting:
            self._drop("not_accepting")
            return None
        if len(self.connections) >= self.max_connections:
            self._drop("too_many_connections")
            return None
        if init.planes != self.config.planes:
            # Both ends must agree on the plane count (EV plane fields index it).
            self._drop("plane_mismatch")
            return None
        if not 64 <= init.mtu <= 65000:
            self._drop("bad_mtu")  # it sizes the reassembly slices
            return None
        lcid = self._new_cid()
        conn = Connection.accept(config=replace(self.config, seed=self.config.seed ^ lcid),
                                 secret=self.secret, local_cid=lcid, init=init, now=now)
        conn.host_share = self.host_share
        conn.sealed_runs = self.sealed_runs
        conn.paced_runs = self.paced_runs
        conn.read_batches = self.read_batches
        self.connections[lcid] = conn
        self._peer[lcid] = peer
        self._init_nonce[init.nonce] = lcid
        if len(self._init_nonce) > _NONCE_MEMORY:
            for old in list(self._init_nonce)[: _NONCE_MEMORY // 2]:
                del self._init_nonce[old]
        self.accepted += 1
        self._collect(conn, received=True)
        return conn

    def _answer_unknown(self, h: CommonHeader, rx: RxInfo, now: float, peer: PeerKey) -> None:
        """Tell the sender we do not know its connection (we restarted, or
        expired it): it learns in one RTT instead of after its retry budget."""
        if h.ptype not in _ANSWER_UNKNOWN or h.dcid == 0:
            return
        if self._unknown_t is not None:
            self._unknown_tokens = min(float(self.unknown_burst), self._unknown_tokens
                                       + (now - self._unknown_t) * self.unknown_rate)
        self._unknown_t = now
        if self._unknown_tokens < 1.0:
            self._drop("unknown_conn_rate_limited")
            return
        self._unknown_tokens -= 1.0
        pkt = self._hs.seal(UnknownConn(h.dcid, h.counter), dcid=0)
        plane = rx.plane if 0 <= rx.plane < self.config.planes else 0
        self._stateless.append((peer, pkt, TxPath(plane, 0, Dscp.CONTROL)))
        self.unknown_answered += 1

    def _on_unknown_conn(self, data: bytes, h: CommonHeader, now: float) -> Connection | None:
        try:
            pkt = self._hs.open_untrusted(data, h)
        except WireError as exc:
            self._drop(exc.reason)
            return None
        body = pkt.body
        assert isinstance(body, UnknownConn)
        for conn in self.connections.values():
            if conn.remote_cid == body.cid and conn.on_unknown_conn(body.echo_counter, now):
                self._collect(conn, received=True)
                return conn
        self._drop("unknown_conn_unmatched")
        return None

    # -- timers and output ---------------------------------------------------------

    def next_timer(self) -> float | None:
        best: float | None = None
        for conn in self.connections.values():
            t = conn.next_timer()
            if t is not None and (best is None or t < best):
                best = t
        return best

    def end_read(self, now: float) -> None:
        """The input has been read to the end (every plane's socket): the
        connections that took SACKs infer their losses now (``read_batches``).
        The timer and output passes call it first, so an I/O layer that
        does not still has them inferred before anything leaves."""
        pending, self._read_pending = self._read_pending, {}
        for conn in pending.values():
            conn.end_read(now)
            self._collect(conn)

    def handle_timer(self, now: float) -> None:
        """Run every connection's due timers."""
        if self._read_pending:
            self.end_read(now)
        for conn in list(self.connections.values()):
            t = conn.next_timer()
            if t is not None and t <= now:
                conn.handle_timer(now)
                self._collect(conn)

    def datagrams_to_send(self, now: float) -> list[tuple[PeerKey, bytes, TxPath]]:
        """What every connection has due, one datagram per item."""
        if self._read_pending:
            self.end_read(now)
        out, self._stateless = self._stateless, []
        for cid, conn in self.connections.items():
            batch = conn.datagrams_to_send(now)
            if batch:
                peer = self._peer[cid]
                out += [(peer, d, p) for d, p in batch]
            self._collect(conn)
        return out

    def runs_to_send(self, now: float) -> list[tuple[PeerKey, Outgoing, TxPath]]:
        """``datagrams_to_send`` with new-data runs whole (``SealedRun``)
        when ``sealed_runs`` is set: for an I/O layer that sends a run in
        one UDP GSO call."""
        if self._read_pending:
            self.end_read(now)
        out: list[tuple[PeerKey, Outgoing, TxPath]] = []
        out += self._stateless
        self._stateless = []
        for cid, conn in self.connections.items():
            batch = conn.runs_to_send(now)
            if batch:
                peer = self._peer[cid]
                out += [(peer, d, p) for d, p in batch]
            self._collect(conn)
        return out

    def _collect(self, conn: Connection, received: bool = False) -> None:
        """``conn``'s events, in order; after input (``received``), whether
        DATA now waits for its SACK (``flush_acks``). Only input holds a
        SACK back, and ``flush_acks`` keeps what it leaves held: the output
        and timer passes need not ask every connection (an idle one costs a
        pass what it must)."""
        while (ev := conn.next_event()) is not None:
            self._events.append((conn, ev))
        if received:
            if conn.ack_pending():
                self._ack_pending[conn.local_cid] = conn
            if conn.loss_check_pending:
                self._read_pending[conn.local_cid] = conn

    def flush_acks(self, now: float) -> None:
        """Every SACK held back by the ACK delay goes out now (``Connection.
        flush_ack``): call when the input has been read to the end. The
        connections are the ones that received DATA since the last flush.
        The read is over: the SACKs' losses are inferred first (``end_read``)."""
        if self._read_pending:
            self.end_read(now)
        pending, self._ack_pending = self._ack_pending, {}
        for cid, conn in pending.items():
            conn.flush_ack(now)
            if conn.ack_pending():  # not due yet: it waits for later reads
                self._ack_pending[cid] = conn

    def next_event(self) -> tuple[Connection, Event] | None:
        """The next (connection, event) of any connection, in order."""
        return self._events.popleft() if self._events else None

    def reap(self) -> list[Connection]:
        """Forget terminal connections; call right after ``datagrams_to_send``
        so their last datagrams (CLOSE, RESET) have been taken."""
        gone = [c for c in self.connections.values() if c.is_terminal]
        for conn in gone:
            if self.host_share is not None:
                self.host_share.note(conn, False)
            self._ack_pending.pop(conn.local_cid, None)
            self._read_pending.pop(conn.local_cid, None)
            del self.connections[conn.local_cid]
            del self._peer[conn.local_cid]
        return gone

    def set_spray_run(self, k: int) -> None:
        """Change the spray granularity of every connection, present and future
        (the I/O layer drops to 1 when the kernel cannot batch a run anyway:
        runs then only make bursts), each still capped by its plane's rate
        (``ConnectionConfig.run_packets``)."""
        self.config = replace(self.config, spray_run=k)
        for conn in self.connections.values():
            conn.paths.spray_run = conn.config.run_packets(k)

    def close_all(self, now: float) -> None:
        for conn in list(self.connections.values()):
            conn.close(now)
            self._collect(conn)

    def stats(self) -> dict[str, object]:
        return {
            "connections": len(self.connections),
            "accepted": self.accepted,
            "initiated": self.initiated,
            "unknown_conn_sent": self.unknown_answered,
            "drops": dict(self.drops),
        }


def is_end(ev: Event) -> bool:
    """True for the events that end a connection."""
    return isinstance(ev, ConnectionClosed | ConnectionFailed)
