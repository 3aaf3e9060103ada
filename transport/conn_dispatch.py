"""The receive path: every datagram of the connection, dispatched by type.

Two entries with one outcome: ``receive_datagram`` (any packet, as objects)
and ``receive_data``, the fast path for DATA (``Opener.open_data_untrusted``
straight into ``Receiver.on_slice``); tests/unit/test_rx_fastpath.py holds
them to the same result on the same datagrams.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from congestion.base import AckSample
from transport.conn_core import (
    _ACK_REQ,
    _CREDIT_PROBE_ID,
    _ECN_ECHO,
    _LAST,
    ACK_BATCH_DELAY,
    FLUSH_ACK_DELAY,
    SRTT_LOG_EVERY,
    SRTT_LOG_LEN,
    _us,
)
from transport.conn_lifecycle import ConnLifecycle
from transport.conn_state import TERMINAL, ConnEvent, ConnState
from transport.datagram import RxInfo
from transport.events import ConnectionClosed, MessageAcked, MessageDelivered
from transport.loss_policy import LossCause
from transport.psn import wire as psn_wire
from transport.receiver import SliceError
from wire.codec import IMPLEMENTATION, Opener, Packet, peek_untrusted
from wire.constants import COUNTER_MAX, VERSION, CloseReason, Dscp, NackReason, PacketType
from wire.errors import WireError
from wire.packets import (
    Close,
    CommonHeader,
    Data,
    Nack,
    Probe,
    ProbeAck,
    Reset,
    Sack,
)


def _compiled_place() -> Callable[..., tuple[int, int, object, int]] | None:
    """The compiled receive path (``wire._fastwire.place_slices``) when the
    C codec is in use, else None (``BRAID_PURE=1``: the reference)."""
    if IMPLEMENTATION != "c":
        return None
    from wire import _fastwire
    return _fastwire.place_slices


_PLACE_SLICES = _compiled_place()
# place_slices' answers: what the datagram before ``next`` needs from Python.
_K_URGENT, _K_ERROR, _K_GENERIC, _K_SLOW = 1, 2, 3, 4


class ConnDispatch(ConnLifecycle):
    """Part of ``Connection``: what arrives."""

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
            self._on_sack(body, pkt.header.flags, now, rx.lag)
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
        self._on_opened(opened, rx, now)

    def receive_data_batch(self, datagrams: list[bytes | memoryview], rx: RxInfo,
                           now: float) -> None:
        """``receive_data`` for each of ``datagrams`` (one read, in order),
        with the compiled receive path where it is built: the common slice
        (the next of a message in progress) is opened and placed in C
        (``wire._fastwire.place_slices``), and each other datagram returns to
        the per-datagram code above, already opened. Same receiver, same SACKs
        and events as ``receive_data`` one by one (tests/unit/test_rx_batch.py)."""
        place = _PLACE_SLICES
        opener = self._opener
        if place is None or opener is None:
            for data in datagrams:
                self.receive_data(data, rx, now)
            return
        r = self.receiver
        i, n = 0, len(datagrams)
        plane, ce, held = rx.plane, rx.ce, now - rx.lag
        while i < n:
            if self.state in TERMINAL or self._opener is not opener:
                for data in datagrams[i:]:
                    self.receive_data(data, rx, now)
                return
            self._now = now
            self._stirred = True
            self._timer_known = False
            i, kind, item, opened = place(r, opener, datagrams, i, plane, ce, held)
            if opened:
                self.last_heard = now
                self.confirmed = True
            if kind == _K_SLOW:
                self._on_opened(item, rx, now)  # type: ignore[arg-type]
                continue
            if r.delivered:
                for msg_id, msg in r.take_delivered():
                    self._events.append(MessageDelivered(msg_id, msg))
            if kind == _K_URGENT:
                self._send_sack(now)
            elif kind == _K_ERROR:
                self._drop(item.reason)  # type: ignore[attr-defined]
            elif kind == _K_GENERIC:
                self.receive_datagram(bytes(datagrams[i - 1]), rx, now)

    def _on_opened(self, opened: tuple[tuple[int, ...], bytes | None], rx: RxInfo,
                   now: float) -> None:
        """A DATA packet opened by the fast path: into the receiver."""
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
            # Held since it reached the host, not since this read (rx.lag).
            urgent = r.on_slice(cum + d, ev, ts, rx.plane, mid, moff, mlen, payload, rx.ce,
                                now - rx.lag, flags & _ACK_REQ != 0, flags & _LAST != 0)
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
            urgent = r.on_data(body, pkt.payload, ce=rx.ce, now=now - rx.lag,
                               ack_req=bool(pkt.header.flags & _ACK_REQ), plane=rx.plane,
                               last=bool(pkt.header.flags & _LAST))
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
        """The I/O layer has read its sockets to the end: send the SACK the
        ACK delay holds back if it is due (``Receiver.flush_due``: its first
        packet held ``ACK_BATCH_DELAY``, a LAST packet, freed credit), else
        let it wait for the packets of later reads, up to that bound
        (docs/decisions/0021-ack-per-batch-and-paced-runs.md). Only for an
        ACK delay shorter than a wakeup (``FLUSH_ACK_DELAY``); a longer one
        is a coalescing window the SACK waits out on its timer. A driver that
        never calls this (the simulator, packet by packet) keeps the ACK
        delay's timer."""
        r = self.receiver
        if r.ack_delay > FLUSH_ACK_DELAY:
            return
        if r.batch_delay is None:  # the I/O layer reports its reads: batch
            r.set_batch_delay(ACK_BATCH_DELAY)
        if r.flush_due(now) and self.is_established:
            self._stir()
            self._send_sack(now, batch=True)

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

    def _on_sack(self, sack: Sack, flags: int, now: float, lag: float = 0.0) -> None:
        if self._sack_beyond_sent(sack):
            self._drop("sack_beyond_sent")
            self._fail(ConnEvent.PROTOCOL_ERROR, "protocol error by peer: SACK for "
                       f"PSNs never sent (next PSN {self.sender.next_psn})",
                       tell_peer=True, now=now, code=CloseReason.PROTOCOL_ERROR)
            return
        # Timed from when the SACK reached this host: the time it waited
        # for this read is ours, not the path's (``lag``, RxInfo).
        batched = self.read_batches
        res = self.sender.on_sack(sack, now=now, now_us=_us(now - lag), lag=lag,
                                  detect=not batched)
        if batched and now - lag > self._loss_check_at:
            self._loss_check_at = now - lag
        self._persist_tries = 0  # the peer answers
        if self.sender.on_credit(sack.rwnd):
            self._persist_at = None
            self._persist_backoff = 0
        if res.rtt is not None:
            self.health.set_rtt(self.sender.rtt.srtt, self.sender.ack_delay)
            if now >= self._srtt_log_next:
                self._srtt_log_next = now + SRTT_LOG_EVERY
                if self.srtt_log is None:
                    self.srtt_log = deque(maxlen=SRTT_LOG_LEN)
                self.srtt_log.append((now, self.sender.rtt.srtt))
        if res.plane_rtt is not None and res.plane_rtt[0] < self.config.planes:
            # The plane is what the peer's SACK echoes: only one we have counts.
            plane, prtt = res.plane_rtt
            self.health.plane_rtt(plane, prtt, now)
            self.cc.on_plane_rtt(plane=plane, rtt=prtt)
        ecn = bool(flags & _ECN_ECHO)
        self.health.on_acked(res.newly_acked, now, ecn_ev=sack.echo_ev if ecn else None,
                             sampled=res.sampled, rtt=res.rtt)
        spurious = 0
        for p in res.late:
            # A spurious loss (declared lost, acknowledged after all): taken
            # back from whatever its verdict charged (transport/loss_policy.py).
            lost_plane, lost_ev, cc_lost = self.sender.take_back_loss(p)
            if lost_plane >= 0:
                self.paths.ev_set.on_late_plane(lost_plane)
            if lost_ev is not None:
                # How late: the SACK's echo timed it, or it was sent once
                # and this SACK is the first word of it.
                late = res.late_rtt if p is res.late_echo else \
                    now - p.sent_time if p.transmissions == 1 else None
                self.paths.ev_set.on_late(lost_ev, now, late)
            if cc_lost:
                spurious += p.length
        if spurious:
            self.cc.on_spurious_loss(now=now, lost_bytes=spurious)
        acked = res.acked_bytes
        if acked or ecn:
            self.cc.on_ack(AckSample(
                now=now, acked_bytes=acked, rtt=res.rtt, ecn=ecn, ev=sack.echo_ev,
                # The plane we sent the sampled packet on, not the peer's word.
                plane=res.sampled.ev.plane if res.sampled is not None and res.sampled.ev
                else sack.plane % self.config.planes, in_flight=self.sender.bytes_in_flight + acked,
                host_delay=res.host_delay,
            ))
        for msg_id, size in res.messages_acked:
            self._events.append(MessageAcked(msg_id, size))
        self._on_lost(res.lost, now, cause=LossCause.INFERRED)
        self._note_ev_changes()
        if self.state is ConnState.DRAINING:
            self._maybe_send_close(now)

    @property
    def loss_check_pending(self) -> bool:
        """SACKs of this read were taken without loss inference (``end_read``)."""
        return self._loss_check_at != -math.inf

    def end_read(self, now: float) -> None:
        """The read is over (``read_batches``): infer the losses its SACKs
        imply, once, at the time the newest of them reached this host.

        Per SACK, a plane whose socket is read first acknowledged newer
        packets than the SACKs still queued in the other planes' sockets,
        and after a host stall the time rule, judged at the time of the read,
        declared those planes' older packets lost and parked the planes for
        silence: a fault-free 6 s transfer over the demo fabric's four planes
        counted 35 parks (more the later a plane's socket is read) and 2,760
        spurious losses (docs/decisions/0047)."""
        at = self._loss_check_at
        if at == -math.inf:
            return
        self._loss_check_at = -math.inf
        if self.is_terminal or not self.is_established:
            return
        lost = self.sender.detect_losses(min(at, now))
        if lost:
            self._now = now
            self._stir()
            self._on_lost(lost, now, cause=LossCause.INFERRED)
            self._note_ev_changes()
            if self.state is ConnState.DRAINING:
                self._maybe_send_close(now)

    def _on_nack(self, nack: Nack, now: float) -> None:
        if nack.reason in (NackReason.TRIMMED, NackReason.TRIMMED_LAST_HOP):
            last_hop = nack.reason == NackReason.TRIMMED_LAST_HOP
            p = self.sender.on_nack_trimmed(nack.psn, nack.echo_ts)
            if p is None:
                # Declared lost before its trim was heard: congestion, not a
                # lossy plane (the plane shares take the loss back).
                q = self.sender.lost_copy(nack.psn, nack.echo_ts)
                if q is not None and (lost_plane := self.sender.take_back_plane(q)) >= 0:
                    self.paths.ev_set.on_late_plane(lost_plane)
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
            base = now - p.sent_time + hops * p.length / self.config.plane_rate \
                if p.sent_time else None
            self.cc.on_nack(now=now, trimmed_bytes=p.length, last_hop=last_hop, rtt=base,
                            plane=p.ev.plane if p.ev else None)
            if p.ev is not None:
                self.health.on_trim(p.ev, now, last_hop=last_hop, sent=p.sent_time)
                if base is not None:
                    self.health.plane_base(p.ev.plane, base)
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
