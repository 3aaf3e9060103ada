"""The in-flight table: what was sent on which EV and when, SACK processing,
RTT samples (connection, per plane, per EV) and the recovery histogram."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from transport.ev_state import Ev
from transport.loss_detect import LossDetection
from transport.loss_policy import LossVerdict
from transport.paths.rtt import RttEstimator
from transport.psn import unwrap
from transport.send_queue import SentPacket
from wire.packets import Sack, ack_delay_seconds

#: had to be resent took from its first send to its acknowledgement
#: (``recovered``; the last bucket is everything slower).
RECOVERY_BOUNDS_MS = (2, 5, 10, 20, 50)
#: Their names in ``Connection.stats``, one per bucket.
RECOVERY_KEYS = (*(f"recovered_lt_{b}ms" for b in RECOVERY_BOUNDS_MS),
                 f"recovered_ge_{RECOVERY_BOUNDS_MS[-1]}ms")
#: Resent packets remembered after their acknowledgement, so that the SACK
#: of an older copy arriving later still shows the loss was spurious.
RESENT_MEMORY = 256


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
    #: What of ``rtt``'s echo was host delay, taken out of it: the peer's
    #: hold beyond the allowance (its socket wait included) and this host's
    #: wait to read the SACK (seconds).
    host_delay: float = 0.0


class InflightTable(LossDetection):
    """Packets in flight and what each SACK says of them (part of ``Sender``)."""

    _ack_delay_floor: float
    _ack_now: float
    _echoes: deque[int]
    _peer_hold: float
    _resent_acked: dict[int, SentPacket]
    _seq: int
    _tlps: int
    bytes_acked: int
    consecutive_rtos: int
    every_rtt: RttEstimator
    last_progress: float
    packets_sent: int
    probes_due: int
    recovered: list[int]
    retransmissions: int
    rto_backoff: int
    slowest_recovery: float
    slowest_recovery_sends: int
    twin_resends: int

    def on_sent(self, p: SentPacket, *, ev: Ev, ev_key: int, now: float, timestamp: int) -> None:
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

    def on_sent_run(self, run: list[SentPacket], *, ev: Ev, ev_key: int, now: float,
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

    def on_twin_sent(self, p: SentPacket, ev: Ev, ev_key: int) -> None:
        """``p``'s resend also went out as a second copy on ``ev``
        (``TWIN_AFTER_LOSSES``), same timestamp."""
        p.twin_ev, p.twin_key = ev, ev_key
        self.twin_resends += 1
        self.retransmissions += 1
        self.packets_sent += 1

    def on_verdicts(self, lost: Sequence[SentPacket], verdicts: Sequence[LossVerdict]) -> int:
        """Record the loss policy's verdicts on the packets just declared lost
        (which plane and EV were charged, whether the controller heard it,
        whether to resend as twins); the bytes the controller hears."""
        cc_bytes = 0
        for p, v in zip(lost, verdicts, strict=True):
            if v.twin:
                p.twin = True
            if v.to_controller:
                p.cc_lost = True
                cc_bytes += p.length
            ev = p.ev
            if ev is not None:
                p.lost_plane = ev.plane
                p.lost_ev = ev
        return cc_bytes

    def take_back_loss(self, p: SentPacket) -> tuple[int, Ev | None, bool]:
        """``p`` was declared lost and is acknowledged after all: the plane and
        EV its loss was charged to (-1 / None: none) and whether the
        controller heard it; each is cleared so it is taken back once."""
        out = (p.lost_plane, p.lost_ev, p.cc_lost)
        p.lost_plane, p.lost_ev, p.cc_lost = -1, None, False
        return out

    def take_back_plane(self, p: SentPacket) -> int:
        """The plane ``p``'s loss was charged to (-1: none), cleared."""
        plane, p.lost_plane = p.lost_plane, -1
        return plane

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
        (SACK processing is per acknowledged packet: keep it lean)."""
        inflight, lost = self.inflight, self._lost
        ev_acked = self._ev_acked_seq
        segments = self._msg_segments
        newly = res.newly_acked
        nbytes = 0
        for psn in psns:
            p = inflight.get(psn)
            if p is None:
                # (Most misses were acknowledged already: ``lost`` is mostly empty.)
                if lost and (p := lost.get(psn)) is not None:
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
        self.path_model.plane_sample(plane, rtt)
        res.plane_rtt = (plane, rtt)

    def _held_out(self, rtt: float, ack_delay: int) -> float:
        """The RTT sample without the time the receiver held the packet
        (SACK ``ACK Delay``), as QUIC does; never below the smallest sample
        so far, so a peer cannot shrink it with a made-up delay."""
        held = ack_delay_seconds(ack_delay) - self._ack_delay_floor
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

    def on_sack(self, sack: Sack, *, now: float, now_us: int, lag: float = 0.0,
                detect: bool = True) -> AckResult:
        """What ``sack`` says. ``now_us``: when it reached this host (the
        echo's clock); ``lag``: how long before ``now`` that was (RxInfo).
        ``detect`` False: no loss inference here (``res.lost`` stays empty;
        the caller runs ``detect_losses`` once the read is done)."""
        res = AckResult()
        self._ack_now = now
        inflight = self.inflight
        lost = self._lost
        cum_psn = unwrap(sack.cum_psn, self.cum_acked)
        ack_psn = unwrap(sack.ack_psn, cum_psn)
        # The triggering packet first: its echo says which copy arrived. It is
        # the only packet of this SACK that can be the RTT sample (``sampled``):
        # whatever the rest acknowledges has another PSN.
        sampled: SentPacket | None = None
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
            sampled = p
        elif (p := lost.get(ack_psn)) is not None:
            self._ack(p, res, sack.echo_ts, was_lost=True)
            sampled = p
        if p is not None and res.late and res.late[-1] is p:
            self._late_echo(res, p, sack, now_us)
        if self._resent_acked and (q := self._resent_acked.get(ack_psn)) is not None \
                and sack.echo_ts and sack.echo_ts != q.timestamp:
            # A resent packet acknowledged already, and now a SACK names an
            # older copy of it (the receiver repeats its SACK for a
            # duplicate): that copy arrived after all, so its loss was only
            # lateness (a slower plane's, a longer queue's).
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
        if sampled is not None and sampled.timestamp == sack.echo_ts:
            # Only a SACK that acknowledges its echoed packet first says how
            # long the receiver holds SACKs back (a repeat, a hole refresh or
            # a credit update echoes whatever came last, however long ago).
            if sack.ack_delay or self._peer_hold or lag:
                # The timers allow for the SACK's whole stay in the hosts:
                # the peer's hold and our own wait to read it.
                self._learn_hold(ack_delay_seconds(sack.ack_delay) + lag)
            rtt = self._echo_rtt(sack, now_us)
            if 0 < rtt < 60:
                if sack.ack_delay:
                    res.host_delay = ((now_us - sack.echo_ts) & 0xFFFFFFFF) / 1e6 - rtt
                res.host_delay += lag
                self.rtt.update(rtt)
                self.every_rtt.update(rtt)
                if not sampled.twin:  # a twin's path is not known
                    key = (sampled.ev.plane << 16) | sampled.ev.value if sampled.ev else -1
                    self.path_model.ev_sample(key, rtt)
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
            # row of the claims.) Without it a flow behind a
            # standing queue sampled only the packets that beat its probe
            # timer, kept an srtt of 3 ms against a 10 ms queue, and resent
            # by probe half of what it sent (the claims' fairness row at 25
            # Mbit/s). Not for the time rule, the EVs, the planes or NSCC:
            # these samples are the late packets (fed to NSCC they cost
            # fairness under unequal host jitter in virtual time).
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
            if 0 < rtt < 60 and self.path_model.tracks(sack.plane):
                self._plane_sample(res, sack.plane, rtt)
        if res.newly_acked:
            self.last_progress = now
            self.rto_backoff = 0
            self.consecutive_rtos = 0
            self._tlps = 0
            self.probes_due = 0
        if detect:
            res.lost = self.detect_losses(now)
        return res
