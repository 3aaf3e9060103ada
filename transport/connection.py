"""One reliable multipath connection, as a sans-I/O state machine.

Driven by ``receive_datagram(data, rx, now)``, ``handle_timer(now)`` and the
API calls ``send_message`` / ``close`` / ``reset``; it hands out
``datagrams_to_send(now)`` as ``(bytes, TxPath)`` (``runs_to_send(now)``
with new-data runs whole, ``SealedRun``, when ``sealed_runs`` is set),
``next_timer()`` and events (``next_event()``). It never reads a clock or touches a socket.

The halves live in their own modules: ``sender`` (send queue, in-flight
table, loss inference, TLP/RTO), ``receiver`` (PSN tracking, SACK/NACK,
reassembly), ``paths`` (EV set and health, policies chosen by name),
``path_health`` (evidence about paths), ``loss_policy`` (what each loss
means), ``congestion`` (window and pacing, chosen by name). The connection
itself is built in layers: ``conn_core`` (shared state), ``conn_handshake``,
``conn_lifecycle`` (timers, close), ``conn_dispatch`` (receive path),
``conn_scheduler`` (``_output``); this module adds the API and stats.
"""

from __future__ import annotations

from transport.conn_core import _DSCP_RETX, FLUSH_ACK_DELAY, PEER_ACK_DELAY, _us
from transport.conn_scheduler import ConnScheduler
from transport.conn_state import ConnEvent, ConnState
from transport.events import Event
from transport.sender import RECOVERY_KEYS
from wire.constants import CloseReason

__all__ = ["FLUSH_ACK_DELAY", "PEER_ACK_DELAY", "_DSCP_RETX", "Connection", "_us"]


class Connection(ConnScheduler):
    """Use ``Connection.initiate`` or ``Connection.accept`` (via ``Endpoint``)."""

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
            "sack_causes": dict(r.sack_causes),
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
            # The srtt over time (connection clock, srtt), one entry per
            # 10 ms of SACKs at most, the newest 512.
            "srtt_log": [list(e) for e in self.srtt_log or ()],
            "probe_interval": self.paths.ev_set.probe_initial,
            "unreachable_sends": self.unreachable_sends,
            "lost_unreachable": s.lost_unreachable,
            "lost_on_park": s.lost_on_park,
            "dropped": dict(self.dropped),
            # EV state changes by cause: ev_late_ack (skipped for a standing
            # queue), ev_ecn_ack (skipped for marks), ev_loss (condemned),
            # ev_probe_ok (back), ... (docs/state-machines.md).
            **{f"ev_{e.value}": n for e, n in self.paths.ev_set.changed_by.items()},
        }
