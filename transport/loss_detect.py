"""Loss inference that survives spraying: per-EV send order, a time rule
(RACK-like) with a reorder window that widens after spurious declarations,
trimmed-header NACKs, and sweeps of a plane or of the whole window."""

from __future__ import annotations

from transport.paths.rtt import PathModel, RttEstimator
from transport.psn import unwrap
from transport.send_queue import SendQueue, SentPacket

#: Upper bounds (ms) of the loss-recovery histogram: how long a packet that


class LossDetection(SendQueue):
    """Which packets in flight are lost (part of ``Sender``)."""

    _ev_acked_seq: dict[int, int]
    ack_delay: float
    bytes_in_flight: int
    path_model: PathModel
    largest_acked_seq: int
    lost_by_ev_order: int
    lost_by_rto: int
    lost_by_time: int
    lost_unreachable: int
    lost_on_park: int
    nacks: int
    reorder_extra: float
    reorder_fraction: float
    rtt: RttEstimator
    spurious_losses: int

    # -- loss inference ----------------------------------------------------------

    def _threshold(self, key: int) -> float:
        """The time rule's wait for a packet last sent on EV ``key``: the
        slowest of its EV's, its plane's and the connection's srtt, as base."""
        model = self.path_model
        return self._threshold_at(max(model.ev_srtt.get(key, 0.0),
                                      model.plane_srtt.get(key >> 16, 0.0), self.rtt.srtt))

    def _threshold_at(self, base: float) -> float:
        return (base * (1 + self.reorder_fraction) + self.ack_delay + 2 * self.rtt.rttvar
                + self.reorder_extra)

    def detect_losses(self, now: float) -> list[SentPacket]:
        lost: list[SentPacket] = []
        largest = self.largest_acked_seq
        ev_acked = self._ev_acked_seq
        # Every packet's threshold is at least the one with the connection's
        # srtt as its base (``_threshold`` takes the largest of three, and
        # the same sum of a larger base rounds no lower): a packet younger
        # than that is not lost by time, and its own threshold need not be
        # looked up (the same decisions, at a fraction of the lookups: most
        # packets in flight are young).
        floor = self._threshold_at(self.rtt.srtt)
        for p in self.inflight.values():
            if p.seq > largest:
                break
            key = p.ev_key
            if p.seq < ev_acked.get(key, -1):
                self.lost_by_ev_order += 1
                lost.append(p)
            elif now >= p.sent_time + floor and now >= p.sent_time + self._threshold(key):
                self.lost_by_time += 1
                lost.append(p)
        for p in lost:
            self._mark_lost(p)
            p.losses += 1
        return lost

    def loss_timer(self) -> float | None:
        """When the time rule may next declare a loss."""
        largest = self.largest_acked_seq
        for p in self.inflight.values():
            if p.seq > largest:
                return None
            return p.sent_time + self._threshold(p.ev_key)
        return None

    def _mark_lost(self, p: SentPacket) -> None:
        p.twin = False  # the connection decides again (it knows the queueing)
        p.twin_ev = None
        del self.inflight[p.psn]
        self.bytes_in_flight -= p.length
        self._lost[p.psn] = p
        self.retx_queue.append(p)

    def on_nack_trimmed(self, psn: int, echo_ts: int) -> SentPacket | None:
        """A trimmed header: retransmit at once (if that transmission is still ours).
        ``psn`` is the 32-bit PSN from the NACK."""
        psn = unwrap(psn, self.cum_acked)
        p = self.inflight.get(psn)
        if p is None or p.timestamp != echo_ts:
            return None
        self.nacks += 1
        del self.inflight[psn]
        self.bytes_in_flight -= p.length
        # Served before the rest of the retransmissions: the receiver is waiting.
        self.retx_queue.appendleft(p)
        return p

    def lost_copy(self, psn: int, echo_ts: int) -> SentPacket | None:
        """The packet of a NACK for a copy already declared lost (waiting to
        be resent, or resent: the NACK names an older copy), or None."""
        psn = unwrap(psn, self.cum_acked)
        p = self._lost.get(psn)
        if p is not None:
            return p if p.timestamp == echo_ts else None
        p = self.inflight.get(psn)
        return p if p is not None and p.timestamp != echo_ts and p.lost_plane >= 0 else None

    def sweep_plane(self, plane: int, *, parked: bool = False) -> list[SentPacket]:
        """Declare lost what is in flight on ``plane``: the host could not
        send there (its link is down), so those packets never left or are
        stuck behind the dead link; or (``parked``) path health parked the
        plane, which answered nothing sent for several smoothed RTTs while
        another plane answered later sends. Retransmitted elsewhere at once
        (a copy that arrives after all is taken back as a late one)."""
        swept = [p for p in self.inflight.values() if p.ev is not None and p.ev.plane == plane]
        for p in swept:
            self._mark_lost(p)
        if parked:
            self.lost_on_park += len(swept)
        else:
            self.lost_unreachable += len(swept)
        return swept

    def sweep_inflight(self) -> list[SentPacket]:
        """Declare everything still in flight lost (after an RTO, when the
        window has no room): after an outage, stale packets counted in
        flight would otherwise block the one retransmission that could
        prove the path is back."""
        swept = list(self.inflight.values())
        for p in swept:
            self._mark_lost(p)
        self.lost_by_rto += len(swept)
        return swept

    def _spurious(self) -> None:
        """A loss declaration was wrong: widen the reorder window (RACK-like)."""
        self.spurious_losses += 1
        if self.rtt.min_rtt != float("inf"):
            self.reorder_extra = min(self.reorder_extra + self.rtt.min_rtt / 4,
                                     2 * self.rtt.srtt)
