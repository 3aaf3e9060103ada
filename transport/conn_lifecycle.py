"""The connection's lifecycle: timers (loss, TLP, RTO, probes, credit,
silence, expiry), closing, and the peer forgetting us."""

from __future__ import annotations

from transport.conn_core import _CLOSE_RETRIES, _CREDIT_PROBE_ID, _us
from transport.conn_handshake import ConnHandshake
from transport.conn_state import ConnEvent, ConnState
from transport.datagram import TxPath
from transport.events import ConnectionClosed
from transport.loss_policy import LossCause
from transport.psn import wire as psn_wire
from wire.constants import CloseReason, Dscp
from wire.packets import Close, Probe


class ConnLifecycle(ConnHandshake):
    """Part of ``Connection``: timers and closing."""

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
            cands.append(self.paths.ev_set.next_timer())
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
            t = self.cc.next_send_time(now=self._now, size=self._release_bytes())
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
            self.receiver.sack_causes["timer"] += 1
            self._send_sack(now, batch=self.receiver.batch_delay is not None)
        s = self.sender
        lt = s.loss_timer()
        if lt is not None and now >= lt:
            self._on_lost(s.detect_losses(now), now, cause=LossCause.INFERRED)
        tlp = s.tlp_deadline()
        probed = tlp is not None and now >= tlp and bool(s.on_tlp(now))
        rd = None if probed else s.rto_deadline()  # the probe goes out first
        if rd is not None and now >= rd:
            expired = s.on_rto(now)
            if expired:
                self.cc.on_timeout(now=now)
                self._on_lost(expired, now, cause=LossCause.RTO)
                if not self.cc.can_send(in_flight=s.bytes_in_flight,
                                        size=self.config.payload_size):
                    self._on_lost(s.sweep_inflight(), now, cause=LossCause.SWEEP)
            if s.consecutive_rtos > self.config.max_rto_retries:
                self._fail(ConnEvent.RETRY_BUDGET_SPENT,
                           f"retry budget spent: {s.consecutive_rtos} consecutive timeouts "
                           f"without progress for {now - s.last_progress:.3f}s (srtt "
                           f"{s.rtt.srtt * 1e3:.1f} ms, rto {s.rto() * 1e3:.0f} ms, parked "
                           f"planes: {self.paths.parked_planes()})", tell_peer=True, now=now)
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
