"""The handshake: INIT / ACCEPT, keys, and the initiator's retries."""

from __future__ import annotations

from typing import Self

from transport.config import ConnectionConfig
from transport.conn_core import _CREDIT_PROBE_ID, ConnCore, _us
from transport.conn_state import ConnEvent, ConnState
from transport.datagram import RxInfo
from transport.events import ConnectionEstablished
from wire.codec import Packet, Sealer
from wire.keys import derive_connection_keys
from wire.packets import Accept, Init, Probe


class ConnHandshake(ConnCore):
    """Part of ``Connection``: how it starts."""

    @classmethod
    def initiate(cls, *, config: ConnectionConfig, secret: bytes | None, local_cid: int,
                 now: float) -> Self:
        conn = cls(config=config, secret=secret, local_cid=local_cid, now=now, initiator=True)
        init = Init(local_cid, conn._nonce, config.planes, config.evs_per_plane,
                    config.payload_size, _us(now))
        conn._hs_packet = conn._hs.seal(init, dcid=0)
        conn._send_handshake(now)
        return conn

    @classmethod
    def accept(cls, *, config: ConnectionConfig, secret: bytes | None, local_cid: int,
               init: Init, now: float) -> Self:
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

    def _send_handshake(self, now: float) -> None:
        assert self._hs_packet is not None
        # Each retry goes out on the next plane: a dead plane cannot block it.
        plane = self._hs_tries % self.config.planes
        self._control.append((self._hs_packet, self._ctl_path(plane)))
        self._hs_tries += 1
        first = max(4 * self.config.initial_rtt, self.config.min_rto)
        wait = first * (1 << min(self._hs_tries, 12))
        self._hs_deadline = now + wait
