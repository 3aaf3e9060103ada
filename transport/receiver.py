"""The receiving half of a connection: PSN tracking, SACK/NACK generation,
and message reassembly by offset.

Each PSN is placed exactly once, so a message's byte count can be trusted to
say when it is whole, however the packets were sprayed and reordered.
"""

from __future__ import annotations

from dataclasses import dataclass

from transport.psn import unwrap, wire
from wire.constants import NackReason
from wire.packets import Data, Nack, Sack

_BITMAP_BITS = 64


@dataclass(slots=True)
class _Assembly:
    buf: bytearray
    received: int


@dataclass(slots=True)
class AckDue:
    """What the connection should send: a SACK describing the triggering packet."""

    sack: Sack
    plane: int
    ecn_echo: bool


class Receiver:
    """PSN bookkeeping and reassembly; knows nothing of time except as given."""

    def __init__(self, *, ack_every: int, ack_delay: float, psn_window: int,
                 max_message_size: int, initial_psn: int = 0) -> None:
        self.ack_every = ack_every
        self.ack_delay = ack_delay
        self.psn_window = psn_window
        self.max_message_size = max_message_size
        #: Next PSN expected in order (an unbounded integer: ``transport.psn``).
        self.cum_psn = initial_psn
        self._above: set[int] = set()
        self._assembly: dict[int, _Assembly] = {}
        self._delivered: list[tuple[int, bytes]] = []
        self._unacked = 0
        self._ce_since_ack = 0
        self._last: tuple[int, int, int, int] | None = None  # psn, ev, ts, plane
        # PSN range that arrived since the last SACK: spraying scatters it, so
        # one 64-PSN bitmap ending at the last arrival may not cover it.
        self._pend_lo: int | None = None
        self._ack_deadline: float | None = None
        self._hole_refresh: float | None = None
        self.duplicates = 0
        self.trimmed_fabric = 0
        self.trimmed_last_hop = 0
        self.out_of_window = 0
        self.bytes_received = 0

    # -- input -----------------------------------------------------------------

    def _record(self, psn: int) -> bool:
        """Mark ``psn`` received; False if it was already."""
        if psn < self.cum_psn or psn in self._above:
            return False
        if psn == self.cum_psn:
            cum = psn + 1
            above = self._above
            while cum in above:
                above.discard(cum)
                cum += 1
            self.cum_psn = cum
        else:
            self._above.add(psn)
        return True

    def unwrap(self, wire_psn: int) -> int:
        """A PSN read from a packet, as the integer nearest the cumulative PSN."""
        return unwrap(wire_psn, self.cum_psn)

    def in_window(self, wire_psn: int) -> bool:
        return self.unwrap(wire_psn) < self.cum_psn + self.psn_window

    def on_data(self, body: Data, payload: bytes, *, ce: bool, now: float,
                ack_req: bool) -> bool:
        """A full DATA packet; returns True if a SACK should go out at once."""
        psn = unwrap(body.psn, self.cum_psn)
        self._last = (psn, body.ev, body.timestamp, body.plane)
        if ce:
            self._ce_since_ack += 1
        if not self._record(psn):
            # A duplicate means the sender did not hear our SACK: repeat it now.
            self.duplicates += 1
            return True
        self.bytes_received += len(payload)
        if body.msg_len > self.max_message_size:
            raise ValueError("message larger than max_message_size")
        asm = self._assembly.get(body.msg_id)
        if asm is None:
            asm = _Assembly(bytearray(body.msg_len), 0)
            self._assembly[body.msg_id] = asm
        asm.buf[body.msg_offset : body.msg_offset + len(payload)] = payload
        asm.received += len(payload)
        if asm.received >= body.msg_len:
            del self._assembly[body.msg_id]
            self._delivered.append((body.msg_id, bytes(asm.buf)))
        self._unacked += 1
        if self._pend_lo is None or psn < self._pend_lo:
            self._pend_lo = psn
        if self._ack_deadline is None:
            self._ack_deadline = now + self.ack_delay
        # CE marks go back at once so the sender can tell which EV was marked.
        return ack_req or ce or self._unacked >= self.ack_every

    def on_trimmed(self, body: Data, *, last_hop: bool) -> Nack:
        """A header whose payload a switch cut: NACK it at once."""
        if last_hop:
            self.trimmed_last_hop += 1
        else:
            self.trimmed_fabric += 1
        reason = NackReason.TRIMMED_LAST_HOP if last_hop else NackReason.TRIMMED
        return Nack(body.psn, body.ev, wire(self.cum_psn), body.timestamp, reason, body.plane)

    def out_of_window_nack(self, body: Data) -> Nack:
        self.out_of_window += 1
        return Nack(
            body.psn, body.ev, wire(self.cum_psn), body.timestamp, NackReason.OUT_OF_WINDOW,
            body.plane
        )

    # -- output ----------------------------------------------------------------

    def take_delivered(self) -> list[tuple[int, bytes]]:
        out, self._delivered = self._delivered, []
        return out

    def _bitmap(self, base: int) -> int:
        bitmap = 0
        above = self._above
        if above:
            for i in range(_BITMAP_BITS):
                if base + i in above:
                    bitmap |= 1 << i
        return bitmap

    def make_sacks(self, rwnd: int, now: float, rtt_hint: float,
                   max_extra: int = 3) -> list[AckDue]:
        """SACKs for what arrived since the last one: the last carries the
        triggering packet's echo (EV, timestamp); up to ``max_extra`` more
        cover older parts of the range that one bitmap cannot reach."""
        if self._last is None:
            return []
        psn, ev, ts, plane = self._last
        cum = self.cum_psn
        out: list[AckDue] = []
        lo = self._pend_lo
        base = max(cum, psn - (_BITMAP_BITS - 1))
        if lo is not None and lo >= cum:
            start = lo
            while start < base and len(out) < max_extra:
                bm = self._bitmap(start)
                if bm:
                    first = start + ((bm & -bm).bit_length() - 1)
                    out.append(AckDue(Sack(wire(cum), wire(start), bm, wire(first), 0, 0,
                                           rwnd, 0, plane), plane, False))
                start += _BITMAP_BITS
        ce = self._ce_since_ack
        sack = Sack(wire(cum), wire(base), self._bitmap(base), wire(psn), ev, ts, rwnd,
                    min(ce, 0xFFFF), plane)
        out.append(AckDue(sack, plane, ce > 0))
        self._unacked = 0
        self._ce_since_ack = 0
        self._ack_deadline = None
        self._pend_lo = None
        # While holes remain, keep the sender informed even if it goes quiet:
        # a coalescing receiver without this can deadlock a sender on holes.
        self._hole_refresh = now + max(rtt_hint, self.ack_delay) if self._above else None
        return out

    def timer(self) -> float | None:
        a, b = self._ack_deadline, self._hole_refresh
        if a is None:
            return b
        return a if b is None else min(a, b)

    def timer_due(self, now: float) -> bool:
        t = self.timer()
        return t is not None and now >= t

    @property
    def holes(self) -> bool:
        return bool(self._above)

    @property
    def messages_in_progress(self) -> int:
        return len(self._assembly)
