"""One reliable multipath connection, as a sans-I/O state machine.

Driven by ``receive_datagram(data, rx, now)``, ``handle_timer(now)`` and the
API calls ``send_message`` / ``close`` / ``reset``; it hands out
``datagrams_to_send(now)`` as ``(bytes, TxPath)``, ``next_timer()`` and
events (``next_event()``). It never reads a clock or touches a socket.

The halves live in their own modules: ``sender`` (in-flight table, loss
inference), ``receiver`` (PSN tracking, SACK/NACK, reassembly), ``paths``
(EV set and health, chosen by name), ``congestion`` (window and pacing,
chosen by name). This module wires them together and runs the handshake.
"""

from __future__ import annotations

import math
from collections import deque

from congestion import registry as cc_registry
from congestion.base import AckSample
from transport.config import ConnectionConfig
from transport.conn_state import TERMINAL, ConnEvent, ConnState, next_state
from transport.datagram import RxInfo, TxPath
from transport.ev_state import EvState
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    Event,
    MessageAcked,
    MessageDelivered,
)
from transport.host_share import HostShare
from transport.path_health import PathHealth
from transport.paths import PathPolicy, get_policy
from transport.psn import wire as psn_wire
from transport.receiver import Receiver, SliceError
from transport.sender import RECOVERY_KEYS, TWIN_AFTER_LOSSES, Sender, SentPacket
from wire.codec import HandshakeCodec, Opener, Packet, Sealer, peek_untrusted
from wire.constants import COUNTER_MAX, VERSION, CloseReason, Dscp, Flag, NackReason, PacketType
from wire.errors import WireError
from wire.keys import DirectionKeys, derive_connection_keys, new_nonce
from wire.packets import (
    Accept,
    Close,
    CommonHeader,
    Data,
    Init,
    Nack,
    Probe,
    ProbeAck,
    Reset,
    Sack,
)

_CLOSE_RETRIES = 5
#: What the sender allows for the peer's ACK delay before its SACKs report one
#: (the SACK ``ACK Delay`` field; ``Sender.ack_delay`` learns it from there).
PEER_ACK_DELAY = 20e-6
#: An ACK delay up to this is shorter than an event-loop wakeup: the I/O layer
#: sends such held SACKs once it has read its sockets (``flush_ack``).
FLUSH_ACK_DELAY = 100e-6
#: Probe id of a credit probe: the receiver answers it with a SACK (its
#: current credit edge), not a PROBE_ACK; path probes count from 1.
_CREDIT_PROBE_ID = 0
# Plain ints for the per-packet paths: `IntFlag & int` runs Python-level enum
# code (~0.5 µs a time, measured by the wire benchmark's author).
_ACK_REQ = int(Flag.ACK_REQ)
_ECN_ECHO = int(Flag.ECN_ECHO)
_RETX = int(Flag.RETX)
_LAST = int(Flag.LAST)
_DSCP_DATA = int(Dscp.DATA)
_DSCP_RETX = int(Dscp.RETX)
#: Queueing delay (as a fraction of the base RTT) above which a loss counts
#: as congestion for the congestion controller.
_CONGESTIVE_QUEUEING = 0.25


def _us(now: float) -> int:
    return int(now * 1e6) & 0xFFFFFFFF


class Connection:
    """Use ``Connection.initiate`` or ``Connection.accept`` (via ``Endpoint``)."""

    def __init__(self, *, config: ConnectionConfig, secret: bytes | None, local_cid: int,
                 now: float, initiator: bool) -> None:
        self.config = config
        self.initiator = initiator
        self.local_cid = local_cid
        self.remote_cid = 0
        self.state = ConnState.HANDSHAKING
        self.failure_reason: str | None = None
        self._secret = secret
        self._hs = HandshakeCodec(secret)
        self._nonce = new_nonce()
        self._peer_nonce = b""
        self._sealer: Sealer | None = None
        self._opener: Opener | None = None
        # A responder builds its opener (and its 8192-slot replay window) only
        # when the first connection packet arrives: a replayed INIT costs less.
        self._opener_keys: DirectionKeys | bool | None = False
        #: (send, receive) keys once derived, for a key log (``wire.keylog``).
        self.traffic_keys: tuple[DirectionKeys, DirectionKeys] | None = None
        self._created = now
        self._now = now
        c = config
        self.paths: PathPolicy = get_policy(
            c.path_policy, planes=c.planes, evs_per_plane=c.evs_per_plane,
            seed=c.seed, base_rtt=c.initial_rtt, spray_run=c.spray_run,
            **{"late_floor": c.min_rto / 4, **c.path_params},
        )
        self.cc = cc_registry.for_connection(
            c.congestion, mtu=c.payload_size, base_rtt=c.initial_rtt,
            line_rate=c.plane_rate * c.planes, params=c.congestion_params)
        #: The endpoint's sending connections, which share its maxwnd (None: alone).
        self.host_share: HostShare | None = None
        self.sender = Sender(
            payload_size=c.payload_size, initial_rtt=c.initial_rtt, min_rto=c.min_rto,
            max_rto=c.max_rto, reorder_fraction=c.reorder_fraction,
            ack_delay=min(c.ack_delay, PEER_ACK_DELAY),
            psn_window=c.psn_window, initial_psn=c.initial_psn,
        )
        self.receiver = Receiver(
            ack_every=c.ack_every, ack_delay=c.ack_delay, psn_window=c.psn_window,
            max_message_size=c.max_message_size, slice_size=c.payload_size,
            recv_window=c.recv_window, hold_delivered=c.hold_delivered,
            initial_psn=c.initial_psn,
        )
        self._events: deque[Event] = deque()
        self._control: list[tuple[bytes, TxPath]] = []
        #: Data TxPaths by (plane << 24 | EV << 8 | DSCP): immutable, built once.
        self._tx_paths: dict[int, TxPath] = {}
        self._hs_packet: bytes | None = None
        self._hs_deadline: float | None = None
        self._hs_tries = 0
        self._close_deadline: float | None = None
        self._close_tries = 0
        self._close_reason = CloseReason.NORMAL
        self.health = PathHealth(self.paths, planes=c.planes, now=now, ack_every=c.ack_every)
        self._ctl_rr = 0
        self.sender.last_progress = now
        #: Last authenticated packet of the peer (responder expiry); a responder
        #: is "confirmed" once one arrived after its ACCEPT.
        self.last_heard = now
        self.confirmed = initiator
        self._persist_at: float | None = None
        self._persist_tries = 0  # unanswered credit probes (reset by any SACK)
        self._persist_backoff = 0  # reset only when credit arrives
        self.dropped: dict[str, int] = {}
        self.trims_fabric = 0
        #: Sends the host's own stack refused for want of a route (link down).
        self.unreachable_sends = 0
        self.trims_last_hop = 0
        #: Planes whose first data packet has not gone out yet: it asks for an
        #: immediate ACK. The controller's per-plane base RTT is that plane's
        #: smallest sample; with ACKs every ``ack_every`` packets a plane's
        #: first sample could come from a packet sent behind the connection's
        #: own initial window (issue 12: 4-to-1 incast, the second plane's base
        #: read 4.3 ms for a 0.6 ms path, so half of all ACKs said "no queue" at
        #: 4 ms of queueing). With one plane every sample shares one base and
        #: the first regular ACK is taken as it always was (asking there
        #: shrinks the first RTT estimate below the initial window's own
        #: queue: scenario i then called queued packets lost).
        self._rtt_unsampled: set[int] = set(range(c.planes)) if c.planes > 1 else set()
        #: Work avoidance for a host with many connections, whose I/O layer
        #: asks every one of them on every pass (``Endpoint``): while nothing
        #: has reached the connection (a datagram, a timer, an API call) since
        #: a ``datagrams_to_send`` that found nothing to send, the next one
        #: answers [] without looking, and ``next_timer`` keeps its answer
        #: until something does. Output that time alone makes due (pacing,
        #: probes, retransmission) has a deadline in ``next_timer``, and a due
        #: deadline comes in through ``handle_timer``.
        self._stirred = True
        self._timer_known = False
        self._timer_at: float | None = None

    # -- construction ------------------------------------------------------------

    @classmethod
    def initiate(cls, *, config: ConnectionConfig, secret: bytes | None, local_cid: int,
                 now: float) -> Connection:
        conn = cls(config=config, secret=secret, local_cid=local_cid, now=now, initiator=True)
        init = Init(local_cid, conn._nonce, config.planes, config.evs_per_plane,
                    config.payload_size, _us(now))
        conn._hs_packet = conn._hs.seal(init, dcid=0)
        conn._send_handshake(now)
        return conn

    @classmethod
    def accept(cls, *, config: ConnectionConfig, secret: bytes | None, local_cid: int,
               init: Init, now: float) -> Connection:
        """The responder side, created by an endpoint for an authenticated INIT."""
        conn = cls(config=config, secret=secret, local_cid=local_cid, now=now, initiator=False)
        conn.remote_cid = init.src_cid
        conn._peer_nonce = init.nonce
        conn.receiver.slice_size = init.mtu  # the endpoint checked its range
        accept = Accept(local_cid, conn._nonce, init.nonce, config.planes,
                        config.evs_per_plane, config.payload_size, _us(now))
        conn._hs_packet = conn._hs.seal(accept, dcid=init.src_cid)
        conn._install_keys(initiator_nonce=init.nonce, responder_nonce=conn._nonce,
                           initiator_cid=init.src_cid, responder_cid=local_cid)
        conn._control.append((conn._hs_packet, conn._ctl_path(0)))
        conn._transition(ConnEvent.INIT_ACCEPTED)
        conn._events.append(ConnectionEstablished(local_cid, init.src_cid))
        return conn

    def _install_keys(self, *, initiator_nonce: bytes, responder_nonce: bytes,
                      initiator_cid: int, responder_cid: int) -> None:
        if self._secret is None:
            self._sealer = Sealer(None, dcid=self.remote_cid)
            self._opener_keys = None
            return
        keys = derive_connection_keys(
            self._secret, initiator_nonce=initiator_nonce, responder_nonce=responder_nonce,
            initiator_cid=initiator_cid, responder_cid=responder_cid,
        )
        send, recv = keys.for_initiator() if self.initiator else keys.for_responder()
        self.traffic_keys = (send, recv)
        self._sealer = Sealer(send, dcid=self.remote_cid)
        self._opener_keys = recv

    # -- state -------------------------------------------------------------------

    def _transition(self, event: ConnEvent) -> None:
        self.state = next_state(self.state, event)

    @property
    def is_established(self) -> bool:
        return self.state in (ConnState.ESTABLISHED, ConnState.DRAINING)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    def _fail(self, event: ConnEvent, reason: str, *, tell_peer: bool, now: float,
              code: CloseReason = CloseReason.RETRY_BUDGET, peer_forgot: bool = False) -> None:
        if self.is_terminal:
            return
        if tell_peer and self._sealer is not None:
            self._control.append((self._sealer.seal(Reset(code, psn_wire(self.sender.next_psn))),
                                  self._ctl_path(0)))
        # The table draws the expected failing edges (docs/state-machines.md);
        # a failure is final from any state, so it is applied unconditionally.
        self.state = ConnState.FAILED
        self.failure_reason = reason
        self.receiver.discard()
        self._events.append(ConnectionFailed(reason, peer_forgot))

    # -- API ---------------------------------------------------------------------

    def send_message(self, data: bytes) -> int:
        """Queue one message; returns its id. Delivered whole or not at all."""
        if self.state not in (ConnState.HANDSHAKING, ConnState.ESTABLISHED):
            raise RuntimeError(f"cannot send in state {self.state.value}")
        if len(data) > self.config.max_message_size:
            raise ValueError("message larger than max_message_size")
        self._stir()
        return self.sender.enqueue(data)

    def cancel_message(self, msg_id: int) -> bool:
        """Withdraw a queued message if none of it was sent yet (True), else
        leave it to finish (False). Nothing goes on the wire either way."""
        self._stir()
        return self.sender.cancel(msg_id)

    def close(self, now: float) -> None:
        """Finish sending what is queued, then close with the peer."""
        self._stir()
        if self.state is ConnState.HANDSHAKING:
            self._transition(ConnEvent.CLOSE_CALLED)
            self._events.append(ConnectionClosed("closed before the handshake completed"))
            return
        if self.state is ConnState.ESTABLISHED:
            self._transition(ConnEvent.CLOSE_CALLED)
            self._maybe_send_close(now)

    def reset(self, now: float, reason: str = "reset by application") -> None:
        self._stir()
        self._fail(ConnEvent.RESET_CALLED, reason, tell_peer=True, now=now,
                   code=CloseReason.SHUTDOWN)

    def consume(self, nbytes: int, now: float) -> None:
        """The application took ``nbytes`` of delivered messages (with
        ``hold_delivered``): grant that credit back to the peer."""
        self._now = now
        self._stir()
        if self.receiver.consume(nbytes) and self.is_established:
            self._send_sack(now)  # it was told of little room: say there is more

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    #: How many of our latest packets an UNKNOWN_CONN may echo.
    UNKNOWN_ECHO_SPAN = 1 << 16

    def on_unknown_conn(self, echo_counter: int, now: float) -> bool:
        """An authenticated UNKNOWN_CONN names our peer's id: accept it only if
        it echoes a counter we sealed recently (an old recording is useless)."""
        self._stir()
        sealer = self._sealer
        if sealer is None or self.is_terminal or self.state is ConnState.HANDSHAKING:
            return False
        if not sealer.counter - self.UNKNOWN_ECHO_SPAN <= echo_counter < sealer.counter:
            self._drop("stale_unknown_conn")
            return False
        self._now = now
        if self.state is ConnState.CLOSING:
            # Our CLOSE was answered and its state reaped; the answer was lost.
            self._transition(ConnEvent.PEER_FORGOT)
            self._close_deadline = None
            self._events.append(ConnectionClosed("closed (the peer had already forgotten it)"))
            return True
        self._fail(ConnEvent.PEER_FORGOT, "peer does not know this connection "
                   "(it restarted or forgot it)", tell_peer=False, now=now, peer_forgot=True)
        return True

    # -- paths -------------------------------------------------------------------

    def _ctl_path(self, plane: int) -> TxPath:
        """Control packets go back on the plane they answer (a dead plane then
        stays silent, which is what the peer needs to notice), on a GOOD EV of
        it if there is one (ECMP hashes the source port the same way for a
        SACK as for DATA: not into a spine our own data found queued or
        dead), else on any EV not found dead, else on any.

        ``plane`` must be a plane this host received on or chose itself, never
        a number read from a packet; anything outside 0..planes-1 is folded
        back into range so no caller can name a plane that does not exist.
        ``spray_run`` in a row share one EV, so a burst of SACKs is one GSO send."""
        plane %= self.config.planes
        evs = self.paths.ev_set.plane_evs(plane)
        self._ctl_rr += 1
        n = len(evs)
        i = (self._ctl_rr // self.paths.spray_run) % n
        # GOOD first: not through a spine our own data found hot (SKIP) or
        # dead (ASSUMED_BAD); then anything not dead; then anything.
        for k in range(n):
            ev = evs[(i + k) % n]
            if ev.state is EvState.GOOD:
                return TxPath(plane, ev.value, Dscp.CONTROL)
        for k in range(n):
            ev = evs[(i + k) % n]
            if ev.state is not EvState.ASSUMED_BAD and ev.state is not EvState.DENIED:
                return TxPath(plane, ev.value, Dscp.CONTROL)
        return TxPath(plane, evs[i].value, Dscp.CONTROL)

    # -- input -------------------------------------------------------------------

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float,
                         header: CommonHeader | None = None) -> None:
        self._now = now
        self._stirred = True
        self._timer_known = False
        if self.is_terminal:
            self._drop("closed")
            return
        try:
            h = header if header is not None else peek_untrusted(data)
            if h.ptype is PacketType.INIT or h.ptype is PacketType.ACCEPT:
                self._on_handshake(self._hs.open_untrusted(data, h), rx, now)
                return
            if self._opener is None:
                if self._opener_keys is False:
                    self._drop("no_keys")
                    return
                assert not isinstance(self._opener_keys, bool)
                self._opener = Opener(self._opener_keys)
            pkt = self._opener.open_untrusted(data, h)
        except WireError as exc:
            self._drop(exc.reason)
            return
        self.last_heard = now
        self.confirmed = True
        body = pkt.body
        if isinstance(body, Data):
            self._on_data(pkt, body, rx, now)
        elif isinstance(body, Sack):
            self._on_sack(body, pkt.header.flags, now)
        elif isinstance(body, Nack):
            self._on_nack(body, now)
        elif isinstance(body, Probe):
            self._on_probe(body, rx, now)
        elif isinstance(body, ProbeAck):
            self._on_probe_ack(body, now)
        elif isinstance(body, Close):
            self._on_close(body, now)
        elif isinstance(body, Reset):
            name = CloseReason(body.reason).name if body.reason in CloseReason._value2member_map_ \
                else str(body.reason)
            if self.state is ConnState.CLOSING:
                self._transition(ConnEvent.RESET_RECEIVED)
                self._events.append(ConnectionClosed("reset by peer while closing"))
            else:
                self._fail(ConnEvent.RESET_RECEIVED, f"reset by peer ({name})",
                           tell_peer=False, now=now)

    def receive_data(self, data: bytes | memoryview, rx: RxInfo, now: float) -> None:
        """The receive fast path (``Endpoint.receive_datagrams``): a datagram
        that looks like DATA without header extensions for this connection.
        Same outcome as ``receive_datagram``, but an untrimmed in-window slice
        builds no header, body or packet object on its way to the receiver.
        ``data`` may be a view of the I/O layer's buffer: nothing keeps it."""
        opener = self._opener
        if opener is None or self.state in TERMINAL:
            self.receive_datagram(bytes(data), rx, now)
            return
        self._now = now
        self._stirred = True
        self._timer_known = False
        try:
            opened = opener.open_data_untrusted(data)
        except WireError as exc:
            self._drop(exc.reason)
            return
        if opened is None:
            self.receive_datagram(bytes(data), rx, now)
            return
        self.last_heard = now
        self.confirmed = True
        (_v, _t, flags, _w, dcid, ec, wpsn, ev, plane, _r, plen, mid, moff, mlen,
         ts), payload = opened
        r = self.receiver
        cum = r.cum_psn
        d = (wpsn - cum) & 0xFFFFFFFF  # transport.psn.unwrap, inlined
        if d >= 0x80000000:
            d -= 0x100000000
        if payload is None or d >= r.psn_window:
            # Trimmed or out of window: the NACK paths, with objects.
            body = Data(wpsn, ev, plane, plen, mid, moff, mlen, ts)
            header = CommonHeader(VERSION, PacketType.DATA, flags, _w, dcid, ec >> 48,
                                  ec & COUNTER_MAX)
            self._on_data(Packet(header, body, payload, payload is None), body, rx, now)
            return
        try:
            urgent = r.on_slice(cum + d, ev, ts, rx.plane, mid, moff, mlen, payload, rx.ce, now,
                                flags & _ACK_REQ != 0)
        except SliceError as exc:
            self._bad_slice(exc, now)
            return
        if r.delivered:
            for msg_id, msg in r.take_delivered():
                self._events.append(MessageDelivered(msg_id, msg))
        if urgent:
            self._send_sack(now)

    def _bad_slice(self, exc: SliceError, now: float) -> None:
        # Only a holder of the connection keys can get here: a broken or
        # hostile peer. Its data can no longer be trusted to reassemble.
        self._drop(exc.reason)
        self._fail(ConnEvent.PROTOCOL_ERROR, f"protocol error by peer: {exc}",
                   tell_peer=True, now=now, code=CloseReason.PROTOCOL_ERROR)

    def _on_handshake(self, pkt: Packet, rx: RxInfo, now: float) -> None:
        body = pkt.body
        if isinstance(body, Init):
            # The responder already answered this INIT; the ACCEPT was lost.
            if not self.initiator and body.nonce == self._peer_nonce and self._hs_packet:
                self._control.append((self._hs_packet, self._ctl_path(rx.plane)))
            else:
                self._drop("unexpected_init")
            return
        if not isinstance(body, Accept) or not self.initiator \
                or body.echo_nonce != self._nonce:
            self._drop("unexpected_accept")
            return
        if self.state is not ConnState.HANDSHAKING:
            return  # a duplicate ACCEPT
        if not 64 <= body.mtu <= 65000:
            self._drop("bad_mtu")
            return
        self.receiver.slice_size = body.mtu
        self.remote_cid = body.src_cid
        self._peer_nonce = body.nonce
        self._install_keys(initiator_nonce=self._nonce, responder_nonce=body.nonce,
                           initiator_cid=self.local_cid, responder_cid=body.src_cid)
        self._hs_deadline = None
        self._transition(ConnEvent.ACCEPT_RECEIVED)
        self.sender.last_progress = now
        self.health.reset_heard(now)
        # Confirm at once (the responder forgets a half-open handshake soon):
        # a credit probe costs the peer nothing while it has received no data.
        assert self._sealer is not None
        self._control.append((self._sealer.seal(Probe(_CREDIT_PROBE_ID, 0, 0, _us(now), 0)),
                              self._ctl_path(rx.plane)))
        self._events.append(ConnectionEstablished(self.local_cid, self.remote_cid))

    def _on_data(self, pkt: Packet, body: Data, rx: RxInfo, now: float) -> None:
        assert self._sealer is not None
        r = self.receiver
        if pkt.trimmed:
            last_hop = rx.dscp == Dscp.TRIMMED_LAST_HOP
            if r.in_window(body.psn) and r.unwrap(body.psn) >= r.cum_psn:
                nack = r.on_trimmed(body, last_hop=last_hop)
                self._control.append((self._sealer.seal(nack), self._ctl_path(rx.plane)))
            return
        if not r.in_window(body.psn):
            nack = r.out_of_window_nack(body)
            self._control.append((self._sealer.seal(nack), self._ctl_path(rx.plane)))
            return
        assert pkt.payload is not None
        try:
            urgent = r.on_data(body, pkt.payload, ce=rx.ce, now=now,
                               ack_req=bool(pkt.header.flags & _ACK_REQ), plane=rx.plane)
        except SliceError as exc:
            self._bad_slice(exc, now)
            return
        if r.delivered:
            for msg_id, data in r.take_delivered():
                self._events.append(MessageDelivered(msg_id, data))
        if urgent:
            self._send_sack(now)

    def ack_pending(self) -> bool:
        """Received DATA waits for its SACK (the receiver's ACK delay runs)."""
        return self.receiver.ack_pending()

    def flush_ack(self, now: float) -> None:
        """Send the SACK the ACK delay holds back, now, if that delay is
        shorter than a wakeup (``FLUSH_ACK_DELAY``): the I/O layer has read
        everything that had arrived, so nothing more could join it in time,
        and waiting would cost a timer wakeup. A longer ACK delay is a
        coalescing window the SACK waits out."""
        if self.receiver.ack_delay <= FLUSH_ACK_DELAY and self.is_established \
                and self.receiver.ack_pending():
            self._stir()
            self._send_sack(now)

    def _send_sack(self, now: float) -> None:
        assert self._sealer is not None
        for due in self.receiver.make_sacks(now, self.sender.rtt.srtt):
            flags = _ECN_ECHO if due.ecn_echo else 0
            self._control.append((self._sealer.seal(due.sack, flags=flags),
                                  self._ctl_path(due.plane)))

    def _sack_beyond_sent(self, sack: Sack) -> bool:
        """Does the SACK acknowledge a PSN we never sent? Only a lying or broken
        peer says so (serial arithmetic: an old duplicate is not "beyond")."""
        nxt = self.sender.next_psn
        # x is "at or beyond" y when (x - y) mod 2^32 is below 2^31.
        if (sack.cum_psn - nxt - 1) & 0xFFFFFFFF < 0x80000000:
            return True
        if (sack.ack_psn - nxt) & 0xFFFFFFFF < 0x80000000:
            return True
        bm = sack.bitmap
        return bm != 0 and (sack.bitmap_base + bm.bit_length() - 1 - nxt) & 0xFFFFFFFF \
            < 0x80000000

    def _on_sack(self, sack: Sack, flags: int, now: float) -> None:
        if self._sack_beyond_sent(sack):
            self._drop("sack_beyond_sent")
            self._fail(ConnEvent.PROTOCOL_ERROR, "protocol error by peer: SACK for "
                       f"PSNs never sent (next PSN {self.sender.next_psn})",
                       tell_peer=True, now=now, code=CloseReason.PROTOCOL_ERROR)
            return
        res = self.sender.on_sack(sack, now=now, now_us=_us(now))
        self._persist_tries = 0  # the peer answers
        if self.sender.on_credit(sack.rwnd):
            self._persist_at = None
            self._persist_backoff = 0
        if res.rtt is not None:
            self.health.set_rtt(self.sender.rtt.srtt, self.sender.ack_delay)
        if res.plane_rtt is not None:
            plane, prtt = res.plane_rtt
            self.health.plane_rtt(plane, prtt, now)
            self.cc.on_plane_rtt(plane=plane, rtt=prtt)
        ecn = bool(flags & _ECN_ECHO)
        self.health.on_acked(res.newly_acked, now, ecn_ev=sack.echo_ev if ecn else None,
                             sampled=res.sampled, rtt=res.rtt)
        spurious = 0
        for p in res.late:
            if p.lost_plane >= 0:
                self.paths.on_late(p.lost_plane)
                p.lost_plane = -1
            if p.lost_ev is not None:
                # How late: the SACK's echo timed it, or it was sent once
                # and this SACK is the first word of it.
                late = res.late_rtt if p is res.late_echo else \
                    now - p.sent_time if p.transmissions == 1 else None
                self.paths.on_late_ev(p.lost_ev, now, late)
                p.lost_ev = None
            if p.cc_lost:
                spurious += p.length
                p.cc_lost = False
        if spurious:
            self.cc.on_spurious_loss(now=now, lost_bytes=spurious)
        acked = res.acked_bytes
        if acked or ecn:
            self.cc.on_ack(AckSample(
                now=now, acked_bytes=acked, rtt=res.rtt, ecn=ecn, ev=sack.echo_ev,
                # The plane we sent the sampled packet on, not the peer's word.
                plane=res.sampled.ev.plane if res.sampled is not None and res.sampled.ev
                else sack.plane % self.config.planes, in_flight=self.sender.bytes_in_flight + acked,
            ))
        for msg_id, size in res.messages_acked:
            self._events.append(MessageAcked(msg_id, size))
        self._on_lost(res.lost, now, timeout=False)
        self._note_ev_changes()
        if self.state is ConnState.DRAINING:
            self._maybe_send_close(now)

    def _on_lost(self, lost: list[SentPacket], now: float, *, timeout: bool) -> None:
        if not lost:
            return
        # Which losses speak of congestion? In a trimming fabric congestion
        # shows up as trims, ECN and delay, so:
        # - a drop with no queueing delay behind it is corruption or a gray
        #   path (the controller's own delay target says how much queueing is
        #   normal: a userspace testbed jitters);
        # - a loss on an EV that already lost recently is that path failing
        #   (a rebooting spine keeps eating what is sprayed onto it until the
        #   EV is parked). Cutting the window for each such loss made
        #   QuickAdapt spiral to one packet while 15 of 16 paths were fine.
        # Path failures are the EV health machinery's job (below).
        rtt = self.sender.rtt
        queueing = rtt.srtt - rtt.min_rtt
        target = self.cc.target_delay
        congestive = queueing > max(_CONGESTIVE_QUEUEING * rtt.min_rtt, target)
        if not timeout and not congestive:
            # A packet lost again after its resend, on a path that loses
            # without a queue: two copies next time (sender.TWIN_AFTER_LOSSES).
            for p in lost:
                if p.losses >= TWIN_AFTER_LOSSES:
                    p.twin = True
        if timeout:
            for p in lost:
                p.cc_lost = True
            self.cc.on_loss(now=now, lost_bytes=sum(p.length for p in lost))
        elif congestive:
            fresh = 0
            for p in lost:
                if not self.health.recently_lossy(p.ev):
                    p.cc_lost = True
                    fresh += p.length
            if fresh:
                self.cc.on_loss(now=now, lost_bytes=fresh)
        self.health.on_lost(lost, now, timeout=timeout)

    def _on_nack(self, nack: Nack, now: float) -> None:
        if nack.reason in (NackReason.TRIMMED, NackReason.TRIMMED_LAST_HOP):
            last_hop = nack.reason == NackReason.TRIMMED_LAST_HOP
            p = self.sender.on_nack_trimmed(nack.psn, nack.echo_ts)
            if p is None:
                # Declared lost before its trim was heard: congestion, not a
                # lossy plane (the plane shares take the loss back).
                q = self.sender.lost_copy(nack.psn, nack.echo_ts)
                if q is not None and q.lost_plane >= 0:
                    self.paths.on_late(q.lost_plane)
                    q.lost_plane = -1
                return
            if last_hop:
                self.trims_last_hop += 1
            else:
                self.trims_fabric += 1
            # The trimmed header skipped the trimming port's data queue: its
            # round trip is the path's without that queue, less the data's
            # serialization on each hop after the trim (added back here: one
            # hop after a last-hop trim, two after a fabric one).
            hops = 1 if last_hop else 2
            self.cc.on_nack(now=now, trimmed_bytes=p.length, last_hop=last_hop,
                            rtt=now - p.sent_time + hops * p.length / self.config.plane_rate
                            if p.sent_time else None,
                            plane=p.ev.plane if p.ev else None)
            if p.ev is not None:
                self.health.on_trim(p.ev, now, last_hop=last_hop, sent=p.sent_time)
            self._note_ev_changes()
        elif nack.reason == NackReason.OUT_OF_WINDOW:
            self._drop("nack_out_of_window")

    def _on_probe(self, probe: Probe, rx: RxInfo, now: float) -> None:
        assert self._sealer is not None
        if probe.probe_id == _CREDIT_PROBE_ID:
            self._send_sack(now)  # a sender waiting for credit: where is the edge now?
            return
        ack = ProbeAck(probe.probe_id, probe.ev, psn_wire(self.receiver.cum_psn), probe.timestamp,
                       probe.plane)
        self._control.append((self._sealer.seal(ack), self._ctl_path(rx.plane)))

    def _on_probe_ack(self, ack: ProbeAck, now: float) -> None:
        if not self.health.on_probe_ack(ack, now):
            self._drop("stale_probe_ack")
            return
        self._note_ev_changes()

    def _on_close(self, close: Close, now: float) -> None:
        assert self._sealer is not None
        if self.state is not ConnState.CLOSING:
            self._control.append((self._sealer.seal(Close(CloseReason.NORMAL,
                                                          psn_wire(self.sender.next_psn))),
                                  self._ctl_path(0)))
        pending = self.sender.has_pending
        self._transition(ConnEvent.CLOSE_RECEIVED)
        self._close_deadline = None
        reason = "closed" if self.initiator_of_close else "closed by peer"
        if pending:
            reason += " with unsent data discarded"
        self._events.append(ConnectionClosed(reason))

    @property
    def initiator_of_close(self) -> bool:
        return self._close_tries > 0

    def _maybe_send_close(self, now: float) -> None:
        if self.state is ConnState.DRAINING and not self.sender.has_pending:
            self._transition(ConnEvent.ALL_ACKED)
            self._send_close(now)

    def _send_close(self, now: float) -> None:
        assert self._sealer is not None
        self._close_tries += 1
        pkt = self._sealer.seal(Close(self._close_reason, psn_wire(self.sender.next_psn)))
        self._control.append((pkt, self._ctl_path(self._close_tries)))
        self._close_deadline = now + max(4 * self.sender.rtt.srtt, self.config.min_rto) * (
            1 << self._close_tries)

    def on_path_unreachable(self, plane: int, now: float, count: int = 1) -> None:
        """The I/O could not hand ``count`` datagrams of ours to the network on
        ``plane`` (ENETUNREACH, EHOSTUNREACH, ENETDOWN, EPERM: the host's link
        is down or it has no route there). That is certain evidence, unlike a
        silence: park the plane now (unless it is the last one up) and resend
        what is in flight on it elsewhere; its probes bring it back."""
        self._now = now
        self._stir()
        self.unreachable_sends += count
        if self.is_terminal or not self.is_established:
            return
        plane %= self.config.planes
        if self.paths.ev_set.park_unreachable(plane, now):
            self.sender.sweep_plane(plane)
        self._note_ev_changes()

    def _note_ev_changes(self) -> None:
        """Report EV state changes as events."""
        self._events.extend(self.health.take_changes())

    # -- timers ------------------------------------------------------------------

    def _send_handshake(self, now: float) -> None:
        assert self._hs_packet is not None
        # Each retry goes out on the next plane: a dead plane cannot block it.
        plane = self._hs_tries % self.config.planes
        self._control.append((self._hs_packet, self._ctl_path(plane)))
        self._hs_tries += 1
        first = max(4 * self.config.initial_rtt, self.config.min_rto)
        wait = first * (1 << min(self._hs_tries, 12))
        self._hs_deadline = now + wait

    def _stir(self) -> None:
        """Something reached the connection: the next ``datagrams_to_send``
        looks, and ``next_timer`` is computed afresh."""
        self._stirred = True
        self._timer_known = False

    def next_timer(self) -> float | None:
        if self._timer_known:
            return self._timer_at
        t = self._next_timer()
        self._timer_at = t
        self._timer_known = True
        return t

    def _next_timer(self) -> float | None:
        if self.is_terminal:
            return None
        if self.state is ConnState.HANDSHAKING:
            return self._hs_deadline
        s = self.sender
        cands = [
            self.receiver.timer(), s.loss_timer(), s.rto_deadline(), self._close_deadline,
            s.tlp_deadline(),
        ]
        if self.is_established:
            # Probes go out only while established (datagrams_to_send): a due
            # probe timer in any other state would fire again at once, forever.
            cands.append(self.paths.next_timer())
        if s.has_outstanding:
            cands.append(s.last_progress + self.config.idle_fail_timeout)
        if self._persist_at is not None:
            cands.append(self._persist_at)
        cands.append(self._expiry())
        if (s.retx_queue or s.has_new_data) and self.cc.can_send(
            in_flight=s.bytes_in_flight, size=self.config.payload_size
        ):
            # Only a pacing wait is a timer; if we could send now and did not,
            # something else (no usable EV, PSN window) blocks, with its own timer.
            t = self.cc.next_send_time(now=self._now, size=self.config.payload_size)
            if t > self._now:
                cands.append(t)
        return min((t for t in cands if t is not None), default=None)

    def handle_timer(self, now: float) -> None:
        self._now = now
        self._stir()
        if self.is_terminal:
            return
        if self.state is ConnState.HANDSHAKING:
            if self._hs_deadline is not None and now >= self._hs_deadline and self.initiator:
                if now - self._created >= self.config.handshake_timeout:
                    self._fail(ConnEvent.HANDSHAKE_TIMEOUT,
                               f"peer unreachable: no answer to the handshake after "
                               f"{self._hs_tries} tries in {now - self._created:.3f}s",
                               tell_peer=False, now=now)
                else:
                    self._send_handshake(now)
            return
        if self.receiver.timer_due(now):
            self._send_sack(now)
        s = self.sender
        lt = s.loss_timer()
        if lt is not None and now >= lt:
            self._on_lost(s.detect_losses(now), now, timeout=False)
        tlp = s.tlp_deadline()
        probed = tlp is not None and now >= tlp and bool(s.on_tlp(now))
        rd = None if probed else s.rto_deadline()  # the probe goes out first
        if rd is not None and now >= rd:
            expired = s.on_rto(now)
            if expired:
                self.cc.on_timeout(now=now)
                self._on_lost(expired, now, timeout=True)
                if not self.cc.can_send(in_flight=s.bytes_in_flight,
                                        size=self.config.payload_size):
                    self.health.on_lost(s.sweep_inflight(), now, timeout=False)
            if s.consecutive_rtos > self.config.max_rto_retries:
                self._fail(ConnEvent.RETRY_BUDGET_SPENT,
                           f"retry budget spent: {s.consecutive_rtos} consecutive timeouts "
                           f"without progress", tell_peer=True, now=now)
                return
        if s.has_outstanding and now >= s.last_progress + self.config.idle_fail_timeout:
            self._fail(ConnEvent.RETRY_BUDGET_SPENT,
                       f"no acknowledgement for {now - s.last_progress:.3f}s "
                       f"(parked planes: {self.paths.parked_planes()})", tell_peer=True, now=now)
            return
        if self._persist_at is not None and now >= self._persist_at:
            self._credit_probe(now)
            if self.is_terminal:
                return
        exp = self._expiry()
        if exp is not None and now >= exp:
            self._expire(now)
            return
        if self._close_deadline is not None and now >= self._close_deadline:
            if self._close_tries >= _CLOSE_RETRIES:
                self._transition(ConnEvent.CLOSE_TIMEOUT)
                self._close_deadline = None
                self._events.append(ConnectionClosed("closed (peer did not confirm)"))
            else:
                self._send_close(now)
        self._note_ev_changes()

    def _credit_probe(self, now: float) -> None:
        """Waiting for credit with nothing outstanding: the SACK that opens the
        window may have been lost, so ask (a PROBE with id 0) with backoff;
        a peer that never answers fails the connection, never hangs it."""
        s = self.sender
        if not s.credit_blocked or s.has_outstanding:
            self._persist_at = None
            self._persist_tries = self._persist_backoff = 0
            return
        if self._persist_tries > self.config.max_rto_retries:
            self._fail(ConnEvent.RETRY_BUDGET_SPENT,
                       f"peer stopped answering: {self._persist_tries} credit probes "
                       f"unanswered", tell_peer=True, now=now)
            return
        assert self._sealer is not None
        ev = self.health.pick(now, None, s.rtt.srtt)
        plane, value = (ev.plane, ev.value) if ev is not None else (0, 0)
        probe = Probe(_CREDIT_PROBE_ID, value, s.cum_acked, _us(now), plane)
        self._control.append((self._sealer.seal(probe), TxPath(plane, value, Dscp.CONTROL)))
        self._persist_tries += 1
        self._persist_backoff = min(self._persist_backoff + 1, 10)
        # A receiver that answers but grants nothing is asked ever more rarely.
        self._persist_at = now + min(s.rto() * (1 << self._persist_backoff),
                                     self.config.max_rto)

    def _expiry(self) -> float | None:
        """When a responder is forgotten: a half-open one (nothing heard since
        the ACCEPT) soon, an idle one (nothing outstanding either way, nothing
        heard) after ``idle_timeout``. Initiators never expire: they have an
        application behind them that decides."""
        if self.initiator or self.state is not ConnState.ESTABLISHED:
            return None
        if not self.confirmed:
            return self._created + self.config.half_open_timeout
        if self.config.idle_timeout <= 0 or self.sender.has_pending \
                or self.receiver.messages_in_progress:
            return None
        return self.last_heard + self.config.idle_timeout

    def _expire(self, now: float) -> None:
        half_open = not self.confirmed
        self._transition(ConnEvent.EXPIRED)  # silently: there is no one to tell
        self.receiver.discard()
        self._events.append(ConnectionClosed(
            "expired: the initiator never confirmed the handshake" if half_open
            else f"expired: idle for {now - self.last_heard:.1f}s"))

    # -- output ------------------------------------------------------------------

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        if not self._stirred:
            return []  # nothing reached us since a call that found nothing
        self._timer_known = False
        out = self._output(now)
        self._stirred = bool(out)  # output may have more behind it (max_burst)
        return out

    def _output(self, now: float) -> list[tuple[bytes, TxPath]]:
        self._now = now
        share = self.host_share
        if share is not None:
            share.note(self, self.is_established and self.sender.has_pending)
        out = self._control
        self._control = []
        if not self.is_established:
            return out
        sealer = self._sealer
        assert sealer is not None
        self.health.send_probes(now, sealer, psn=psn_wire(self.sender.cum_acked),
                                timestamp=_us(now),
                                out=out)
        s, cc, cfg = self.sender, self.cc, self.config
        size = cfg.payload_size
        budget = cfg.max_burst
        # Issue 14: the window and the pacer are checked per packet as numbers
        # (one send_quota, one on_sent_run), new data is taken a spray run
        # at a time (one EV pick, one in-flight and one EV update per run),
        # and a run's TxPath is one object.
        window, tokens, need, rate = cc.send_quota(now=now, size=size)
        sizes: list[int] = []
        health = self.health
        next_new, seal_data, append = s.next_new, sealer.seal_data, out.append
        retx_queue = s.retx_queue
        unsampled = self._rtt_unsampled
        tx_paths = self._tx_paths
        ts = _us(now)
        # A peer that holds SACKs back longer than we allow for anyway (its
        # SACKs' ACK Delay) is asked for one by the packet that fills the window.
        fill_req = s.ack_delay > PEER_ACK_DELAY
        while budget > 0 and (retx_queue or s.has_new_data):
            in_flight = s.bytes_in_flight
            if in_flight and in_flight + size > window and not (
                    s.probes_due and retx_queue and retx_queue[0].tlp
                    and self.paths.parked_planes()):
                # With a plane parked, a tail-loss probe goes out whatever
                # the window (as RFC 8985 7.3's probe does): a window held by
                # packets in flight on the dead plane, which nothing will
                # answer, otherwise waits for the RTO. (Not otherwise: probes
                # past the window cost the 8-flow fairness scenario 0.98 ->
                # 0.95 of its Jain median.)
                cc.can_send(in_flight=in_flight, size=size)  # window-bound: the controller notes it
                break
            if tokens < need and now + (need - tokens) / rate > now:
                break
            if retx_queue:
                item = s.next_packet()
                if item is None:
                    break
                p, payload = item
                retx = p.transmissions > 0
                ev = health.pick(now, p.ev if retx else None, s.rtt.srtt)
                if ev is None:
                    retx_queue.appendleft(p)
                    break
                flags = (_RETX if retx else 0) | (_LAST if p.last else 0)
                if not retx_queue and not s.has_new_data:
                    flags |= _ACK_REQ  # the tail: don't make the receiver wait
                elif fill_req and in_flight + len(payload) + size > window:
                    flags |= _ACK_REQ  # it fills the window: only a SACK opens it
                plane, value = ev.plane, ev.value
                if unsampled and plane in unsampled:
                    flags |= _ACK_REQ  # this plane's base RTT, before a queue forms
                    unsampled.discard(plane)
                key = (plane << 16) | value
                dscp = _DSCP_RETX if retx else _DSCP_DATA
                path = tx_paths.get((key << 8) | dscp)
                if path is None:
                    path = tx_paths[(key << 8) | dscp] = TxPath(plane, value, dscp)
                append((seal_data(
                    psn=p.psn & 0xFFFFFFFF, ev=value, plane=plane, msg_id=p.msg_id,
                    msg_offset=p.offset, msg_len=p.msg_len, timestamp=ts, payload=payload,
                    flags=flags,
                ), path))
                s.on_sent(p, ev=ev, ev_key=key, now=now, timestamp=ts)
                health.on_sent(ev, now)
                if s.probes_due and p.tlp:
                    s.probes_due -= 1
                n = len(payload)
                sizes.append(n)
                tokens -= n
                budget -= 1
                if p.twin and budget > 0:
                    # Lost after a resend already: a second copy on another
                    # EV, same timestamp (sender.TWIN_AFTER_LOSSES).
                    ev2 = health.pick(now, ev, s.rtt.srtt)
                    if ev2 is not None and ev2 is not ev:
                        key2 = (ev2.plane << 16) | ev2.value
                        path2 = tx_paths.get((key2 << 8) | dscp)
                        if path2 is None:
                            path2 = tx_paths[(key2 << 8) | dscp] = TxPath(ev2.plane, ev2.value,
                                                                          dscp)
                        append((seal_data(
                            psn=p.psn & 0xFFFFFFFF, ev=ev2.value, plane=ev2.plane,
                            msg_id=p.msg_id, msg_offset=p.offset, msg_len=p.msg_len,
                            timestamp=ts, payload=payload, flags=flags,
                        ), path2))
                        p.twin_ev, p.twin_key = ev2, key2
                        s.twin_resends += 1
                        s.retransmissions += 1
                        s.packets_sent += 1
                        sizes.append(n)
                        tokens -= n
                        budget -= 1
                continue
            # New data: a run of up to k packets on the EV the policy picks once.
            seg = next_new()
            if seg is None:
                break
            p, payload, more = seg
            # What may leave now, so that a run takes only its plane's part.
            room = budget
            if in_flight:
                room = min(room, max(1, int((window - in_flight) // size)))
            else:
                room = min(room, max(1, int(window // size)))
            if tokens < math.inf:
                room = min(room, max(1, 1 + int((tokens - need) // size)))
            ev, k = health.pick_run(now, room)
            if ev is None:
                retx_queue.appendleft(p)
                break
            plane, value = ev.plane, ev.value
            key = (plane << 16) | value
            path = tx_paths.get((key << 8) | _DSCP_DATA)
            if path is None:
                path = tx_paths[(key << 8) | _DSCP_DATA] = TxPath(plane, value, _DSCP_DATA)
            run: list[SentPacket] = []
            sent = 0
            while True:
                flags = _LAST if p.last else 0
                if not more:
                    flags |= _ACK_REQ  # the tail: don't make the receiver wait
                elif fill_req and in_flight + p.length + size > window:
                    flags |= _ACK_REQ  # it fills the window: only a SACK opens it
                if unsampled and plane in unsampled:
                    flags |= _ACK_REQ  # this plane's base RTT, before a queue forms
                    unsampled.discard(plane)
                # Positional: keyword matching is a measurable share per packet.
                append((seal_data(p.psn & 0xFFFFFFFF, value, plane, p.msg_id, p.offset,
                                  p.msg_len, ts, payload, flags), path))
                run.append(p)
                sent += 1
                n = p.length
                tokens -= n
                in_flight += n
                # The loop's own checks, for the next packet of the run.
                if sent == k or not more:
                    break
                if in_flight and in_flight + size > window:
                    cc.can_send(in_flight=in_flight, size=size)
                    break
                if tokens < need and now + (need - tokens) / rate > now:
                    break
                seg = next_new()
                if seg is None:
                    break
                p, payload, more = seg
            sizes += [q.length for q in run]
            budget -= sent
            if sent < k:
                health.unsend_run(ev, k - sent)
            s.on_sent_run(run, ev=ev, ev_key=key, now=now, timestamp=ts)
            health.on_sent_run(ev, now, sent)
            if sent < k and more:
                break  # stopped by the window, the pacer, the PSN window or credit
        cc.on_sent_run(now=now, sizes=sizes)
        if self._persist_at is None and s.credit_blocked and not s.has_outstanding:
            self._persist_at = now + s.rto()
        return out

    # -- introspection -----------------------------------------------------------

    def stats(self) -> dict[str, object]:
        s, r = self.sender, self.receiver
        return {
            "state": self.state.value,
            "local_cid": self.local_cid,
            "remote_cid": self.remote_cid,
            "packets_sent": s.packets_sent,
            "retransmissions": s.retransmissions,
            "lost_by_ev_order": s.lost_by_ev_order,
            "lost_by_time": s.lost_by_time,
            "twin_resends": s.twin_resends,
            # Resent packets by first send to ack (sender.RECOVERY_BOUNDS_MS).
            **dict(zip(RECOVERY_KEYS, s.recovered, strict=True)),
            "slowest_recovery": s.slowest_recovery,
            "slowest_recovery_sends": s.slowest_recovery_sends,
            "lost_by_rto": s.lost_by_rto,
            "rtos": s.rto_events,
            "nacks_received": s.nacks,
            "trims_fabric": self.trims_fabric,
            "trims_last_hop": self.trims_last_hop,
            "bytes_acked": s.bytes_acked,
            "bytes_received": r.bytes_received,
            "duplicates_received": r.duplicates,
            "trimmed_received_fabric": r.trimmed_fabric,
            "trimmed_received_last_hop": r.trimmed_last_hop,
            "srtt": s.rtt.srtt,
            # What the time rule waits before it calls a packet lost: about
            # srtt x (1 + reorder fraction) + 2 rttvar + reorder_extra.
            "rttvar": s.rtt.rttvar,
            "reorder_extra": s.reorder_extra,
            "min_rtt": s.rtt.min_rtt,
            "cwnd": self.cc.cwnd,
            "probes_sent": self.health.probes_sent,
            "spurious_losses": s.spurious_losses,
            "parked_planes": self.paths.parked_planes(),
            # When planes were parked and came back (time on the connection's
            # clock, plane, "parked" | "up", srtt then, cause): the newest 64.
            "plane_log": [list(e) for e in list(self.paths.ev_set.plane_log)[-64:]],
            "probe_interval": self.paths.ev_set.probe_initial,
            "unreachable_sends": self.unreachable_sends,
            "lost_unreachable": s.lost_unreachable,
            "dropped": dict(self.dropped),
            # EV state changes by cause: ev_late_ack (skipped for a standing
            # queue), ev_ecn_ack (skipped for marks), ev_loss (condemned),
            # ev_probe_ok (back), ... (docs/state-machines.md).
            **{f"ev_{e.value}": n for e, n in self.paths.ev_set.changed_by.items()},
        }
