"""The sending half of a connection: segmentation, the in-flight table,
SACK/NACK processing and loss inference that survives spraying.

Loss rules (never a fixed duplicate-ACK count, which collapses under
spraying — aioquic #42, quinn #2711):
- per-EV order: a packet is lost if a packet sent *later on the same EV* was
  acknowledged (one EV is one FIFO path);
- time (RACK-like): a packet is lost if something sent after it was
  acknowledged and it has been out longer than its path's RTT plus a reorder
  window;
- a tail-loss probe (after TLP, RFC 8985): when nothing has come back for
  two smoothed RTTs plus the ACK delay, the newest two packets in flight (a
  lone one twice) are sent again (on other EVs), so a lost last packet —
  nothing sent after it to be acknowledged — costs about 3 RTTs, not an
  RTO; at most ``MAX_TLPS`` per silence before the RTO takes over;
- RTO with exponential backoff as the last resort;
- a trimmed-header NACK retransmits at once.
Retransmissions keep their PSN (the receiver's cumulative PSN must be able to
advance) but are sealed under a fresh counter and carry a fresh timestamp,
which the SACK echoes, so RTT samples are never ambiguous. A packet the loss
rules declare lost a second time (its resend was lost too), with no queue
behind the loss, is resent as two copies on two EVs with one timestamp
(``TWIN_AFTER_LOSSES``): on a path that loses at random the worst packet
otherwise takes a loss-detection delay per loss and holds its message; only
the SACK a copy triggers says which path carried it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from transport.psn import unwrap
from wire.constants import ACK_DELAY_HZ, INITIAL_CREDIT
from wire.packets import Sack

#: How far a SACK's bitmap reaches.
_BITMAP_BITS = 64
_U32 = 0xFFFFFFFF
#: Tail-loss probes per silence (progress resets the count).
MAX_TLPS = 4
#: Packets resent by one tail-loss probe.
TLP_PACKETS = 2
#: A packet declared lost this many times (its resend was lost too), with no
#: queueing behind the loss, is resent as two copies on two EVs: on a path
#: that loses at random, the worst packet of a run is otherwise lost again
#: and again, a loss-detection delay each time, and holds its message (issue
#: 13's compound row: 30% loss, one packet sent 9 times over 46 ms). Two
#: copies make a further loss the square of the path's loss rate; they cost
#: (loss rate)^2 of the traffic. Not for congestive losses (a queue behind
#: them): copies there only feed the queue (an incast with 34% tail drops
#: lost 6% of its goodput to them).
TWIN_AFTER_LOSSES = 2
#: Upper bounds (ms) of the loss-recovery histogram: how long a packet that
#: had to be resent took from its first send to its acknowledgement
#: (``recovered``; the last bucket is everything slower).
RECOVERY_BOUNDS_MS = (2, 5, 10, 20, 50)
#: Their names in ``Connection.stats``, one per bucket.
RECOVERY_KEYS = (*(f"recovered_lt_{b}ms" for b in RECOVERY_BOUNDS_MS),
                 f"recovered_ge_{RECOVERY_BOUNDS_MS[-1]}ms")
#: Resent packets remembered after their acknowledgement, so that the SACK
#: of an older copy arriving later still shows the loss was spurious.
RESENT_MEMORY = 256


@dataclass(slots=True, eq=False)
class SentPacket:
    psn: int
    msg_id: int
    offset: int
    length: int
    msg_len: int
    last: bool
    ev: Any = None
    sent_time: float = 0.0
    timestamp: int = 0
    seq: int = 0
    transmissions: int = 0
    acked: bool = False
    #: Was the acknowledged transmission known? (False: a retransmitted packet
    #: acked without an echo naming which copy arrived — Karn's problem.)
    ack_exact: bool = True
    #: Resent by a tail-loss probe: an earlier copy arriving is no sign of
    #: reordering (the probe was a guess), so it must not widen the window.
    tlp: bool = False
    #: When its first copy left (set at its first resend; ``recovered``).
    first_sent: float = 0.0
    #: (plane << 16) | EV value of the latest transmission (-1: not sent).
    ev_key: int = -1
    #: The plane the latest loss declaration was charged to (-1: none), so
    #: that a copy acknowledged after all can take it back.
    lost_plane: int = -1
    #: The EV that latest loss declaration was charged to (None: none).
    lost_ev: Any = None
    #: Was its latest loss reported to the congestion controller (so that a
    #: copy acknowledged after all can take it back there too)?
    cc_lost: bool = False
    #: Times declared lost by the loss rules (not counting tail-loss probes).
    losses: int = 0
    #: Its latest resend went out as two copies on two EVs with one
    #: timestamp (``TWIN_AFTER_LOSSES``; the connection sets it): only a SACK
    #: it triggered says which EV carried the copy that arrived (its echo
    #: EV); an ack by the cumulative PSN or the bitmap does not.
    twin: bool = False
    #: The second copy's EV and its key (``ev`` / ``ev_key`` are the first's).
    twin_ev: Any = None
    twin_key: int = -1
    #: The whole message this segment is a slice of (retransmissions re-read it).
    data: Any = None


@dataclass(slots=True)
class _Outbound:
    msg_id: int
    #: The message (bytes as given, so a segment is one slice; else a view).
    data: bytes | memoryview
    total: int
    next_offset: int = 0


@dataclass(slots=True)
class AckResult:
    """What one SACK taught the sender."""

    newly_acked: list[SentPacket] = field(default_factory=list)
    lost: list[SentPacket] = field(default_factory=list)
    messages_acked: list[tuple[int, int]] = field(default_factory=list)
    rtt: float | None = None
    sampled: SentPacket | None = None
    #: Payload bytes of ``newly_acked``.
    acked_bytes: int = 0
    #: (plane, RTT) of the SACK's echo, also when the packet it echoes was
    #: already acknowledged by a SACK that came back on a faster plane.
    plane_rtt: tuple[int, float] | None = None
    #: Packets declared lost and acknowledged after all (their first copy
    #: was only late).
    late: list[SentPacket] = field(default_factory=list)
    #: The one of ``late`` whose late copy the SACK echoes, and that copy's
    #: round trip (how late it was; the others' are not known).
    late_echo: SentPacket | None = None
    late_rtt: float = 0.0


class RttEstimator:
    """RFC 6298 smoothing plus a windowless minimum (the base RTT)."""

    __slots__ = ("min_rtt", "rttvar", "srtt")

    def __init__(self, initial: float) -> None:
        self.srtt = initial
        self.rttvar = initial / 2
        self.min_rtt = float("inf")

    def update(self, sample: float) -> None:
        if self.min_rtt == float("inf"):
            self.srtt, self.rttvar = sample, sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        self.min_rtt = min(self.min_rtt, sample)


class Sender:
    """Everything about data we sent; paths and congestion live elsewhere."""

    def __init__(self, *, payload_size: int, initial_rtt: float, min_rto: float,
                 max_rto: float, reorder_fraction: float, ack_delay: float,
                 psn_window: int, initial_psn: int = 0) -> None:
        self.payload_size = payload_size
        self.min_rto = min_rto
        self.max_rto = max_rto
        self.reorder_fraction = reorder_fraction
        #: How long the peer's receiver may hold a SACK back, as its SACKs
        #: report it (``ACK Delay``): a max that rises at once and decays over
        #: about 32 SACKs, never below ``ack_delay`` (the allowance before it
        #: reported anything). The loss, probe and silence timers wait for it.
        self.ack_delay = ack_delay
        self._ack_delay_floor = ack_delay
        self._peer_hold = 0.0
        self.psn_window = psn_window
        self.rtt = RttEstimator(initial_rtt)
        #: Every copy's round trip, also an older copy's that a SACK names
        #: after its PSN was resent: times the tail-loss probe only (below).
        self.every_rtt = RttEstimator(initial_rtt)
        # PSNs are unbounded integers here, 32 bits on the wire (transport.psn).
        self.next_psn = initial_psn
        self.next_msg_id = 1
        self.cum_acked = initial_psn
        self.inflight: dict[int, SentPacket] = {}
        self.bytes_in_flight = 0
        self.retx_queue: deque[SentPacket] = deque()
        self._outbound: deque[_Outbound] = deque()
        self._msg_segments: dict[int, int] = {}
        self._msg_size: dict[int, int] = {}
        self._seq = 0
        self.largest_acked_seq = -1
        self._ev_acked_seq: dict[int, int] = {}
        self.rto_backoff = 0
        self.consecutive_rtos = 0
        #: When the last acknowledgement arrived, or when data went out into an
        #: empty pipeline: "no progress" counts only time with something outstanding.
        self.last_progress = 0.0
        #: Receive credit: bytes of new data ever sent stay below the largest
        #: credit edge the receiver granted (wire/SPEC.md "Receive credit").
        self.credit_edge = INITIAL_CREDIT
        self.new_bytes_sent = 0
        self.ev_rtt: dict[int, float] = {}
        #: Smoothed RTT per plane: the floor of every EV's loss threshold on
        #: it. Most EVs have no sample of their own (one per SACK), and the
        #: connection's srtt mixes planes: on a plane 4x slower than the other
        #: every packet would look lost (issue 13, latency case).
        self.plane_rtt: dict[int, float] = {}
        #: Echoes already timed: a SACK repeated without new data (hole
        #: refresh, duplicate) echoes an old packet, whose age is no RTT.
        self._echoes: deque[int] = deque(maxlen=16)
        # Declared lost, not yet resent: an ack may still come (reordering).
        self._lost: dict[int, SentPacket] = {}
        #: Resent packets acknowledged by a SACK that did not name the older
        #: copy (the latest ``RESENT_MEMORY``): that copy's SACK may still come.
        self._resent_acked: dict[int, SentPacket] = {}
        # RACK-style reorder window growth after spurious loss declarations.
        self.reorder_extra = 0.0
        self.spurious_losses = 0
        # Counters for stats.
        self.packets_sent = 0
        self.retransmissions = 0
        self.lost_by_ev_order = 0
        self.lost_by_time = 0
        self.lost_by_rto = 0
        #: Swept from a plane the host could not send on (``sweep_plane``).
        self.lost_unreachable = 0
        self.rto_events = 0
        self.tlp_probes = 0
        #: Resends that went out as two copies (``TWIN_AFTER_LOSSES``).
        self.twin_resends = 0
        #: Resent packets by time from first send to acknowledgement, in the
        #: buckets of ``RECOVERY_BOUNDS_MS``; the slowest, and its sends.
        self.recovered = [0] * (len(RECOVERY_BOUNDS_MS) + 1)
        self.slowest_recovery = 0.0
        self.slowest_recovery_sends = 0
        self._ack_now = 0.0
        self._tlps = 0
        #: Probe packets queued by ``on_tlp`` and not yet sent: they go out
        #: past a full window (the connection counts them down).
        self.probes_due = 0
        self.nacks = 0
        self.bytes_acked = 0

    # -- application data --------------------------------------------------------

    def enqueue(self, data: bytes) -> int:
        msg_id = self.next_msg_id
        self.next_msg_id = (msg_id + 1) & 0xFFFFFFFF or 1
        self._outbound.append(_Outbound(msg_id, data if data.__class__ is bytes
                                        else memoryview(data), len(data)))
        self._msg_segments[msg_id] = max(1, -(-len(data) // self.payload_size))
        self._msg_size[msg_id] = len(data)
        return msg_id

    def cancel(self, msg_id: int) -> bool:
        """Withdraw a queued message none of which has been sent; False if it
        started (it is then finished: the receiver never holds part of one)."""
        for ob in self._outbound:
            if ob.msg_id == msg_id:
                if ob.next_offset:
                    return False
                self._outbound.remove(ob)
                del self._msg_segments[msg_id], self._msg_size[msg_id]
                return True
        return False

    @property
    def has_new_data(self) -> bool:
        return bool(self._outbound)

    @property
    def has_pending(self) -> bool:
        """Anything not yet acknowledged (queued, lost or in flight)?"""
        return bool(self._outbound or self.retx_queue or self.inflight)

    @property
    def has_outstanding(self) -> bool:
        """Sent and not acknowledged (in flight, or lost and not yet resent)?
        Only then can the absence of acknowledgements mean a dead peer."""
        return bool(self.inflight or self.retx_queue)

    @property
    def credit_blocked(self) -> bool:
        """New data waits for the receiver to grant credit."""
        if not self._outbound:
            return False
        ob = self._outbound[0]
        n = min(self.payload_size, ob.total - ob.next_offset)
        return self.new_bytes_sent + n > self.credit_edge

    def on_credit(self, edge: int) -> bool:
        """A SACK's credit edge (low 32 bits); True if it granted more.

        The edge only moves forward (serial-number arithmetic), so a SACK
        overtaken by a newer one cannot take credit back or grant it twice."""
        d = (edge - self.credit_edge) & _U32
        if 0 < d < 1 << 31:
            self.credit_edge += d
            return True
        return False

    @property
    def psn_window_open(self) -> bool:
        return self.next_psn - self.cum_acked < self.psn_window

    def next_packet(self) -> tuple[SentPacket, bytes] | None:
        """The next segment to send: retransmissions first, then new data."""
        while self.retx_queue:
            p = self.retx_queue.popleft()
            if p.acked:
                continue
            self._lost.pop(p.psn, None)
            return p, self._payload_of(p)
        item = self.next_new()
        return None if item is None else (item[0], item[1])

    def next_new(self) -> tuple[SentPacket, bytes, bool] | None:
        """The next segment of new data (``next_packet`` when no
        retransmission waits) and whether more new data is queued behind it,
        or None: nothing queued, or the PSN window or the receiver's credit
        is full."""
        if not self._outbound or self.next_psn - self.cum_acked >= self.psn_window:
            return None
        ob = self._outbound[0]
        total = ob.total
        off = ob.next_offset
        n = total - off
        if n > self.payload_size:
            n = self.payload_size
        if self.new_bytes_sent + n > self.credit_edge:
            return None  # the receiver has no room for it yet
        self.new_bytes_sent += n
        end = off + n
        data = ob.data
        p = SentPacket(self.next_psn, ob.msg_id, off, n, total, end >= total)
        self.next_psn += 1
        p.data = data
        if end >= total:
            self._outbound.popleft()
        else:
            ob.next_offset = end
        return (p, data[off:end] if data.__class__ is bytes else bytes(data[off:end]),
                bool(self._outbound))

    def _payload_of(self, p: SentPacket) -> bytes:
        data: bytes | memoryview = p.data
        return bytes(data[p.offset : p.offset + p.length])

    def on_sent(self, p: SentPacket, *, ev: Any, ev_key: int, now: float, timestamp: int) -> None:
        if p.transmissions:
            self.retransmissions += 1
            if p.transmissions == 1:
                p.first_sent = p.sent_time
        elif not self.inflight and not self.retx_queue:
            # New data into an empty pipeline: an idle stretch is not a silence.
            self.last_progress = now
        if self.inflight.get(p.psn) is not p:  # a probe's second copy is one packet
            self.bytes_in_flight += p.length
        p.ev = ev
        p.sent_time = now
        p.timestamp = timestamp
        p.seq = self._seq
        self._seq += 1
        p.transmissions += 1
        p.ev_key = ev_key
        self.inflight[p.psn] = p
        self.packets_sent += 1

    def on_sent_run(self, run: list[SentPacket], *, ev: Any, ev_key: int, now: float,
                    timestamp: int) -> None:
        """``on_sent`` for first transmissions (``next_new``) that left
        together on one EV, in order."""
        if not run:
            return
        if not self.inflight and not self.retx_queue:
            self.last_progress = now  # new data into an empty pipeline
        inflight = self.inflight
        seq = self._seq
        nbytes = 0
        for p in run:
            nbytes += p.length
            p.ev = ev
            p.sent_time = now
            p.timestamp = timestamp
            p.seq = seq
            seq += 1
            p.transmissions = 1
            p.ev_key = ev_key
            inflight[p.psn] = p
        self._seq = seq
        self.bytes_in_flight += nbytes
        self.packets_sent += len(run)

    # -- acknowledgements --------------------------------------------------------

    def _ack(self, p: SentPacket, res: AckResult, echo_ts: int | None = None,
             was_lost: bool = False) -> None:
        p.acked = True
        if was_lost:
            # We called it lost, it was only late: no resend needed.
            del self._lost[p.psn]
            self.retx_queue.remove(p)
            if p.transmissions > 1:
                self._recovered(p)
            if not p.tlp:
                self._spurious()
                res.late.append(p)
        else:
            del self.inflight[p.psn]
            self.bytes_in_flight -= p.length
            if p.transmissions > 1:
                self._recovered(p)
            if p.transmissions > 1 and not p.tlp:
                if echo_ts is not None and echo_ts != p.timestamp:
                    self._spurious()  # an older copy arrived: the resend was not needed
                    res.late.append(p)
                else:
                    # An older copy may still arrive, and its SACK say so.
                    resent = self._resent_acked
                    resent[p.psn] = p
                    p.data = None  # acknowledged: never read again
                    if len(resent) > RESENT_MEMORY:
                        del resent[next(iter(resent))]
        if p.transmissions == 1 and self.reorder_extra:
            self.reorder_extra *= 0.998
        # Only an ack known to be for the latest copy says anything about the
        # EV it used and about send order; an older copy arriving late would
        # otherwise declare everything sent before the retransmission lost.
        copy = p.transmissions == 1 or echo_ts == p.timestamp
        # A twin's copies left together under one timestamp: an ack of either
        # is exact about the send (order, RTT), not about the path, unless
        # its SACK named the EV (``on_sack`` resolves that).
        exact = copy and not p.twin
        p.ack_exact = exact
        self.bytes_acked += p.length
        res.acked_bytes += p.length
        key = p.ev_key
        if copy:
            if exact and p.seq > self._ev_acked_seq.get(key, -1):
                self._ev_acked_seq[key] = p.seq
            if p.seq > self.largest_acked_seq:
                self.largest_acked_seq = p.seq
        left = self._msg_segments[p.msg_id] - 1
        if left:
            self._msg_segments[p.msg_id] = left
        else:
            del self._msg_segments[p.msg_id]
            res.messages_acked.append((p.msg_id, self._msg_size.pop(p.msg_id)))
        res.newly_acked.append(p)

    def _recovered(self, p: SentPacket) -> None:
        """A packet that had to be resent is acknowledged: how long its data
        took, first send to ack (at the SACK's time), into the histogram."""
        took = self._ack_now - p.first_sent
        ms = took * 1000
        i = 0
        for bound in RECOVERY_BOUNDS_MS:
            if ms < bound:
                break
            i += 1
        self.recovered[i] += 1
        if took > self.slowest_recovery:
            self.slowest_recovery = took
            self.slowest_recovery_sends = p.transmissions

    def _ack_psns(self, psns: Iterable[int], res: AckResult) -> None:
        """``_ack`` each of ``psns`` that is in flight or declared lost, in
        order. A first transmission still in flight (nearly every packet)
        takes an inlined path: its ack is exact and cannot be spurious
        (issue 14: SACK processing is per acknowledged packet, keep it lean)."""
        inflight, lost = self.inflight, self._lost
        ev_acked = self._ev_acked_seq
        segments = self._msg_segments
        newly = res.newly_acked
        nbytes = 0
        for psn in psns:
            p = inflight.get(psn)
            if p is None:
                if (p := lost.get(psn)) is not None:
                    self._ack(p, res, was_lost=True)
                continue
            if p.transmissions != 1:
                self._ack(p, res)
                continue
            p.acked = True
            del inflight[psn]
            nbytes += p.length
            if self.reorder_extra:
                self.reorder_extra *= 0.998
            key, seq = p.ev_key, p.seq
            if seq > ev_acked.get(key, -1):
                ev_acked[key] = seq
            if seq > self.largest_acked_seq:
                self.largest_acked_seq = seq
            msg_id = p.msg_id
            left = segments[msg_id] - 1
            if left:
                segments[msg_id] = left
            else:
                del segments[msg_id]
                res.messages_acked.append((msg_id, self._msg_size.pop(msg_id)))
            newly.append(p)
        # _ack moves these counters itself; sums commute.
        self.bytes_in_flight -= nbytes
        self.bytes_acked += nbytes
        res.acked_bytes += nbytes

    def _echo_rtt(self, sack: Sack, now_us: int) -> float:
        """The round trip of the packet the SACK echoes, less the time the
        peer held the SACK."""
        rtt = ((now_us - sack.echo_ts) & 0xFFFFFFFF) / 1e6
        if sack.ack_delay:  # a held SACK (one call per SACK saved otherwise)
            rtt = self._held_out(rtt, sack.ack_delay)
        return rtt

    def _late_echo(self, res: AckResult, p: SentPacket, sack: Sack, now_us: int) -> None:
        """``p`` is late and the SACK echoes its late copy: time that copy."""
        if sack.echo_ts:
            rtt = self._echo_rtt(sack, now_us)
            if 0 < rtt < 60:
                res.late_echo, res.late_rtt = p, rtt

    def _plane_sample(self, res: AckResult, plane: int, rtt: float) -> None:
        old = self.plane_rtt.get(plane)
        self.plane_rtt[plane] = rtt if old is None else 0.875 * old + 0.125 * rtt
        res.plane_rtt = (plane, rtt)

    def _spurious(self) -> None:
        """A loss declaration was wrong: widen the reorder window (RACK-like)."""
        self.spurious_losses += 1
        if self.rtt.min_rtt != float("inf"):
            self.reorder_extra = min(self.reorder_extra + self.rtt.min_rtt / 4,
                                     2 * self.rtt.srtt)

    def _held_out(self, rtt: float, ack_delay: int) -> float:
        """The RTT sample without the time the receiver held the packet
        (SACK ``ACK Delay``), as QUIC does; never below the smallest sample
        so far, so a peer cannot shrink it with a made-up delay."""
        held = ack_delay / ACK_DELAY_HZ - self._ack_delay_floor
        if held <= 0:  # within the allowance the timers make anyway
            return rtt
        net = rtt - held
        floor = self.rtt.min_rtt  # inf before the first sample
        if net >= floor:
            return net
        return min(rtt, floor) if floor != float("inf") or net <= 0 else net

    def _learn_hold(self, held: float) -> None:
        hold = self._peer_hold
        hold = held if held > hold else hold - (hold - held) / 32
        self._peer_hold = hold
        self.ack_delay = max(self._ack_delay_floor, hold)

    def on_sack(self, sack: Sack, *, now: float, now_us: int) -> AckResult:
        res = AckResult()
        self._ack_now = now
        inflight = self.inflight
        lost = self._lost
        cum_psn = unwrap(sack.cum_psn, self.cum_acked)
        ack_psn = unwrap(sack.ack_psn, cum_psn)
        # The triggering packet first: its echo says which copy arrived.
        p = inflight.get(ack_psn)
        if p is not None:
            if p.twin and sack.echo_ts == p.timestamp:
                # Its echo EV says which of the two copies came.
                tw = p.twin_ev
                if tw is not None and tw.value == sack.echo_ev and tw.plane == sack.plane:
                    p.ev, p.ev_key = tw, p.twin_key
                    p.twin = False
                elif p.ev is not None and p.ev.value == sack.echo_ev and \
                        p.ev.plane == sack.plane:
                    p.twin = False
            self._ack(p, res, sack.echo_ts)
        elif (p := lost.get(ack_psn)) is not None:
            self._ack(p, res, sack.echo_ts, was_lost=True)
        if p is not None and res.late and res.late[-1] is p:
            self._late_echo(res, p, sack, now_us)
        if self._resent_acked and (q := self._resent_acked.get(ack_psn)) is not None \
                and sack.echo_ts and sack.echo_ts != q.timestamp:
            # A resent packet acknowledged already, and now a SACK names an
            # older copy of it (the receiver repeats its SACK for a
            # duplicate): that copy arrived after all, so its loss was only
            # lateness (a slower plane's, a longer queue's; issue 13).
            # Without this a resend was found out only when the older copy's
            # SACK came back first. (A SACK naming the latest copy proves
            # nothing: the older copy's SACK may have been lost instead.)
            del self._resent_acked[ack_psn]
            self._spurious()
            res.late.append(q)
            self._late_echo(res, q, sack, now_us)
        if cum_psn > self.cum_acked:
            # PSNs below cum_psn: walk the in-flight table only over that range.
            if cum_psn - self.cum_acked <= len(inflight):
                self._ack_psns(range(self.cum_acked, cum_psn), res)
            else:
                self._ack_psns([q.psn for q in inflight.values() if q.psn < cum_psn], res)
                for p in [q for q in lost.values() if q.psn < cum_psn]:
                    self._ack(p, res, was_lost=True)
            self.cum_acked = cum_psn
        bm = sack.bitmap
        base = unwrap(sack.bitmap_base, cum_psn)
        # Bits below the cumulative PSN were settled just above: a SACK costs
        # what it newly reports, not the 64 PSNs its bitmap repeats.
        settled = self.cum_acked - base
        if settled > 0:
            bm >>= settled
            base += settled
        if bm:
            psns: list[int] = []
            while bm:
                low = bm & -bm
                psns.append(base + low.bit_length() - 1)
                bm ^= low
            self._ack_psns(psns, res)
        # RTT from the echoed timestamp of the packet that triggered the SACK.
        sampled = next((q for q in res.newly_acked if q.psn == ack_psn), None)
        if sampled is not None and sampled.timestamp == sack.echo_ts:
            # Only a SACK that acknowledges its echoed packet first says how
            # long the receiver holds SACKs back (a repeat, a hole refresh or
            # a credit update echoes whatever came last, however long ago).
            if sack.ack_delay or self._peer_hold:
                self._learn_hold(sack.ack_delay / ACK_DELAY_HZ)
            rtt = self._echo_rtt(sack, now_us)
            if 0 < rtt < 60:
                self.rtt.update(rtt)
                self.every_rtt.update(rtt)
                if not sampled.twin:  # a twin's path is not known
                    key = (sampled.ev.plane << 16) | sampled.ev.value if sampled.ev else -1
                    old = self.ev_rtt.get(key)
                    self.ev_rtt[key] = rtt if old is None else 0.75 * old + 0.25 * rtt
                    if sampled.ev:
                        self._plane_sample(res, sampled.ev.plane, rtt)
                        self._echoes.append(sack.echo_ts)
                res.rtt = rtt
                res.sampled = sampled
        elif sampled is not None and sampled.tlp and sack.echo_ts and \
                sack.echo_ts not in self._echoes:
            # The SACK's trigger is newly acknowledged, but its echo names an
            # older copy than the latest, and a tail-loss probe had resent
            # it: the probe fired before that copy's SACK could come. The
            # copy's round trip, timed by its own echoed send time, is
            # unambiguous (Karn's rule is for ACKs that cannot say which
            # copy came; cf. RFC 7323's timestamps), and it times the
            # probe only. (Copies resent by the time rule do not count: under
            # heavy random loss their late originals made the probe wait
            # longer when a packet was lost again and again; the compound
            # row, docs/claims.md "Session 8".) Without it a flow behind a
            # standing queue sampled only the packets that beat its probe
            # timer, kept an srtt of 3 ms against a 10 ms queue, and resent
            # by probe half of what it sent (issue 13, fairness at 25
            # Mbit/s). Not for the time rule, the EVs, the planes or NSCC:
            # these samples are the late packets (fed to NSCC they cost
            # fairness under unequal host jitter in virtual time;
            # docs/claims.md, "Session 8").
            rtt = self._echo_rtt(sack, now_us)
            self._echoes.append(sack.echo_ts)
            if 0 < rtt < 60:
                self.every_rtt.update(rtt)
        elif sack.echo_ts and sampled is None and sack.echo_ts not in self._echoes:
            # The echoed packet was acknowledged already, by a SACK that came
            # back on another, faster plane: a SACK of a slow plane always
            # arrives late, so without this its plane would never be sampled.
            # The echo still times that packet's round trip (not the
            # connection's srtt: Karn-safe only for the plane).
            rtt = self._echo_rtt(sack, now_us)
            self._echoes.append(sack.echo_ts)
            if 0 < rtt < 60 and (sack.plane in self.plane_rtt or len(self.plane_rtt) < 64):
                self._plane_sample(res, sack.plane, rtt)
        if res.newly_acked:
            self.last_progress = now
            self.rto_backoff = 0
            self.consecutive_rtos = 0
            self._tlps = 0
            self.probes_due = 0
        res.lost = self.detect_losses(now)
        return res

    # -- loss inference ----------------------------------------------------------

    def _threshold(self, key: int) -> float:
        base = max(self.ev_rtt.get(key, 0.0), self.plane_rtt.get(key >> 16, 0.0),
                   self.rtt.srtt)
        return (base * (1 + self.reorder_fraction) + self.ack_delay + 2 * self.rtt.rttvar
                + self.reorder_extra)

    def detect_losses(self, now: float) -> list[SentPacket]:
        lost: list[SentPacket] = []
        largest = self.largest_acked_seq
        ev_acked = self._ev_acked_seq
        for p in self.inflight.values():
            if p.seq > largest:
                break
            key = p.ev_key
            if p.seq < ev_acked.get(key, -1):
                self.lost_by_ev_order += 1
                lost.append(p)
            elif now >= p.sent_time + self._threshold(key):
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

    def tlp_deadline(self) -> float | None:
        """When to send a tail-loss probe: two smoothed RTTs plus the ACK
        delay after the later of the newest send and the last progress. The
        smoothed RTT is the larger of ``rtt``'s and ``every_rtt``'s (which
        also times the late copies of resent packets)."""
        # Armed even with retransmissions queued: a window of one packet (after
        # an RTO) keeps them queued behind a lost packet that nothing else
        # will ever declare lost.
        if not self.inflight or self._tlps >= MAX_TLPS:
            return None
        newest = next(reversed(self.inflight.values()))
        since = max(newest.sent_time, self.last_progress)
        # The late copies count, but never for more than half an RTO (before
        # backoff): one copy that came back very late (or a peer's odd echo)
        # must not hold the probe, and with it the RTO, for long.
        srtt = self.rtt.srtt
        late = self.every_rtt.srtt
        if late > srtt:  # rare: only after a probed packet's original came back late
            srtt = max(srtt, min(late, self._rto_base() / 2))
        return since + 2 * srtt + self.ack_delay

    def on_tlp(self, now: float) -> list[SentPacket]:
        """The probe timer fired: queue the newest ``TLP_PACKETS`` packets in
        flight for resending (a lone packet twice). Each elicits a SACK, so one
        lost probe or SACK (a gray path loses either) does not leave the tail
        to the RTO. Not a loss: no congestion or path penalty follows."""
        out: list[SentPacket] = []
        for p in reversed(self.inflight.values()):
            out.append(p)
            if len(out) >= TLP_PACKETS:
                break
        for p in out:  # newest first, so appendleft leaves them oldest first
            self._mark_lost(p)
            self.retx_queue.pop()
            self.retx_queue.appendleft(p)  # ahead of queued retransmissions
            p.tlp = True
        out.reverse()
        if len(out) == 1:
            # A lone tail packet: probe with two copies of it, or one loss on
            # a gray path wastes the probe as surely as with two packets.
            self.retx_queue.insert(1, out[0])
        if out:
            self._tlps += 1
            self.tlp_probes += 1
            self.probes_due = len(out) + (len(out) == 1)
        return out

    def _rto_base(self) -> float:
        """The RTO before backoff."""
        return max(self.min_rto, self.rtt.srtt + 4 * self.rtt.rttvar + self.ack_delay)

    def rto(self) -> float:
        return min(self.max_rto, self._rto_base() * (1 << self.rto_backoff))

    def rto_deadline(self) -> float | None:
        """The RTO waits for the tail-loss probes still allowed (as RACK-TLP
        re-arms the RTO after a probe): a probe is cheaper, and an RTO cuts
        the window and penalises paths."""
        for p in self.inflight.values():
            deadline = p.sent_time + self.rto()
            tlp = self.tlp_deadline()
            return deadline if tlp is None or tlp < deadline else tlp + self.rtt.srtt
        return None

    def on_rto(self, now: float) -> list[SentPacket]:
        """The RTO fired: what is out longer than it is lost; back off."""
        rto = self.rto()
        expired = [p for p in self.inflight.values() if now >= p.sent_time + rto]
        if not expired:
            return []
        for p in expired:
            self._mark_lost(p)
        self.lost_by_rto += len(expired)
        self.rto_events += 1
        self.rto_backoff = min(self.rto_backoff + 1, 16)
        self.consecutive_rtos += 1
        return expired

    def sweep_plane(self, plane: int) -> list[SentPacket]:
        """Declare lost what is in flight on ``plane``: the host could not
        send there (its link is down), so those packets never left or are
        stuck behind the dead link; retransmitted elsewhere at once."""
        swept = [p for p in self.inflight.values() if p.ev is not None and p.ev.plane == plane]
        for p in swept:
            self._mark_lost(p)
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
