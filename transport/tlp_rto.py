"""Tail-loss probes (after RFC 8985) and the RTO with backoff: the timers
that act when nothing comes back."""

from __future__ import annotations

from transport.inflight import InflightTable
from transport.send_queue import SentPacket

#: Tail-loss probes per silence (progress resets the count).
MAX_TLPS = 4
#: Packets resent by one tail-loss probe.
TLP_PACKETS = 2
#: A packet declared lost this many times (its resend was lost too), with no


class TailProbes(InflightTable):
    """TLP and RTO (part of ``Sender``)."""

    max_rto: float
    min_rto: float
    rto_events: int
    tlp_probes: int

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

    def on_probe_sent(self) -> None:
        """One of the packets ``on_tlp`` queued went out."""
        self.probes_due -= 1

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
