"""The receiving half of a connection: PSN tracking, SACK/NACK generation,
message reassembly by offset, and the receive credit it grants.

Each PSN is placed exactly once, so a message's byte count can be trusted to
say when it is whole, however the packets were sprayed and reordered. The
peer is not trusted beyond that: a slice must start on a multiple of the
peer's announced payload size and be exactly that long (shorter only at the
end of its message), every slice of a message must name the same length,
and no slice may be placed twice; anything else is a protocol error
(``SliceError``). Nothing is allocated for what a slice *claims* (the
message length): a message is kept as the slices that arrived, joined when
the last one does.

Credit (back-pressure, wire/SPEC.md "Receive credit"): the receiver holds at
most ``recv_window`` bytes — slices of incomplete messages plus, with
``hold_delivered``, delivered messages the application has not consumed yet.
Every SACK carries the credit edge ``freed + recv_window`` (low 32 bits of
a byte count); a sender keeps the bytes of new data it ever sent below the
largest edge it heard, so the receiver never has to drop anything it could
acknowledge. A slice beyond the edge (a sender that ignores credit) is not
recorded, not acknowledged, and counted in ``no_buffer``.

ACKs are coalesced: a SACK goes out after ``ack_every`` packets, at once for
a packet that asks for it (ACK_REQ), is CE-marked or repeats, and otherwise
when the ACK delay runs out. Every SACK says how long the packet it echoes
was held (``ACK Delay``), and the sender takes that out of its RTT sample
(docs/daemon.md, "ACK coalescing").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transport.psn import unwrap, wire
from wire.constants import INITIAL_CREDIT, NackReason
from wire.packets import Data, Nack, Sack, ack_delay_code

_BITMAP_BITS = 64
SACK_CAUSES = ("ack_req", "ce", "every", "duplicate", "no_buffer", "hole", "last_or_credit",
               "batch_due", "timer")
_U32 = 0xFFFFFFFF
_HALF = 1 << 31


class SliceError(ValueError):
    """A DATA slice inconsistent with its message: a protocol error of the peer."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(slots=True)
class _Assembly:
    msg_len: int
    slices: dict[int, bytes] = field(default_factory=dict)
    received: int = 0


@dataclass(slots=True)
class AckDue:
    """What the connection should send: a SACK describing the triggering packet."""

    sack: Sack
    plane: int
    ecn_echo: bool


class Receiver:
    """PSN bookkeeping, reassembly and credit; knows nothing of time except as given.

    ``slice_size`` is the peer's payload size (INIT/ACCEPT ``MTU``).
    """

    def __init__(self, *, ack_every: int, ack_delay: float, psn_window: int,
                 max_message_size: int, slice_size: int, recv_window: int = 64 << 20,
                 hold_delivered: bool = False, initial_psn: int = 0) -> None:
        if not INITIAL_CREDIT <= recv_window < _HALF:
            raise ValueError(f"recv_window must be {INITIAL_CREDIT}..{_HALF - 1} bytes")
        self.ack_every = ack_every
        self.ack_delay = ack_delay
        #: How long a held SACK may wait for more packets across reads (the
        #: ``flush_due`` rule; None: no batching, the ACK delay's timer sends it).
        self.batch_delay: float | None = None
        self._hold = ack_delay
        self.psn_window = psn_window
        self.max_message_size = min(max_message_size, recv_window)
        self.slice_size = slice_size
        self.recv_window = recv_window
        self.hold_delivered = hold_delivered
        #: Next PSN expected in order (an unbounded integer: ``transport.psn``).
        self.cum_psn = initial_psn
        self._above: set[int] = set()
        self._assembly: dict[int, _Assembly] = {}
        #: Messages completed and not taken yet (``take_delivered``).
        self.delivered: list[tuple[int, bytes]] = []
        # Message ids below the floor, and those in ``_done``, were delivered:
        # a new PSN naming one of them is a forged or broken peer, not a resend.
        self._done_floor = 1
        self._done: set[int] = set()
        #: Bytes of slices accepted (each PSN once) and bytes given back.
        self.bytes_received = 0
        self.freed = 0
        self.held_partial = 0
        self._adv_room = recv_window
        self._unacked = 0
        self._ce_since_ack = 0
        self._last: tuple[int, int, int, int] | None = None  # psn, ev, ts, plane
        #: When the packet of ``_last`` arrived: the SACK says how long it held it.
        self._last_at = 0.0
        # PSN range that arrived since the last SACK: spraying scatters it, so
        # one 64-PSN bitmap ending at the last arrival may not cover it.
        self._pend_lo: int | None = None
        #: ... and its top, with the plane that packet came by: a packet of a
        #: faster plane can be far above the last arrival.
        self._pend_hi = -1
        self._pend_hi_plane = 0
        self._ack_deadline: float | None = None
        #: The first packet held since the last SACK, and when it arrived: a
        #: batch SACK echoes it, so its ACK Delay is the batch's hold.
        self._first: tuple[int, int, int, int] | None = None
        self._first_at = 0.0
        #: Something held must reach the sender at the end of this read
        #: (a LAST packet, credit the sender may be waiting for).
        self._flush_now = False
        self._read_at = 0.0  # the last flush_due call
        self._hole_refresh: float | None = None
        self.duplicates = 0
        #: Why SACKs went out (``stats()["sack_causes"]``): on arrival for an
        #: ACK_REQ, a CE mark, every ``ack_every`` packets or a duplicate; at
        #: the end of a read for a hole, a LAST packet or freed credit, or the
        #: batch delay; or on the receiver's timer.
        self.sack_causes = dict.fromkeys(SACK_CAUSES, 0)
        self.trimmed_fabric = 0
        self.trimmed_last_hop = 0
        self.out_of_window = 0
        self.no_buffer = 0

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

    def _check_slice(self, psn: int, mid: int, off: int, mlen: int,
                     n: int) -> _Assembly | None:
        """The assembly this slice extends (None: a new message); raises SliceError."""
        if mlen > self.max_message_size:
            raise SliceError("message_too_large",
                             f"message {mid} of {mlen} bytes exceeds {self.max_message_size}")
        ahead = (mid - self._done_floor) & _U32
        if ahead >= _HALF or mid in self._done:
            raise SliceError("message_replayed", f"new PSN {psn} for delivered message {mid}")
        if ahead >= self.psn_window:
            raise SliceError("message_id_window", f"message {mid} is {ahead} ids ahead")
        size = self.slice_size
        if off % size or n != min(size, mlen - off):
            raise SliceError("slice_shape", f"slice {off}+{n} of message {mid} ({mlen} bytes) "
                             f"is not a {size}-byte segment")
        asm = self._assembly.get(mid)
        if asm is None and len(self._assembly) >= self.max_partial:
            # Each incomplete message of an honest sender holds more than one
            # slice of credit, so it never has this many; a hostile one would
            # make us keep ~0.5 KiB of bookkeeping per 1-byte slice.
            raise SliceError("too_many_partial", f"{len(self._assembly)} incomplete messages")
        if asm is not None:
            if asm.msg_len != mlen:
                raise SliceError("message_length",
                                 f"message {mid} said {asm.msg_len} bytes, now {mlen}")
            if off in asm.slices:
                raise SliceError("slice_overlap", f"message {mid} offset {off} placed twice")
        return asm

    def on_data(self, body: Data, payload: bytes, *, ce: bool, now: float,
                ack_req: bool, plane: int | None = None, last: bool = False) -> bool:
        """A full DATA packet; returns True if a SACK should go out at once.

        ``plane`` is where it arrived (SACKs go back there); raises
        ``SliceError`` for a slice inconsistent with its message."""
        return self.on_slice(unwrap(body.psn, self.cum_psn), body.ev, body.timestamp,
                             body.plane if plane is None else plane, body.msg_id,
                             body.msg_offset, body.msg_len, payload, ce, now, ack_req, last)

    def on_slice(self, psn: int, ev: int, ts: int, plane: int, mid: int, off: int, mlen: int,
                 payload: bytes, ce: bool, now: float, ack_req: bool,
                 last: bool = False) -> bool:
        """``on_data`` without the ``Data`` object (the receive fast path):
        ``psn`` already unwrapped (``unwrap``), ``plane`` where it arrived."""
        if psn < self.cum_psn or psn in self._above:
            # A duplicate means the sender did not hear our SACK: repeat it now.
            self._last = (psn, ev, ts, plane)
            self._last_at = now
            self.duplicates += 1
            self.sack_causes["duplicate"] += 1
            return True
        n = len(payload)
        # The common case first: the next slice of a message in progress (its
        # message-level checks passed when it began); anything else, the full check.
        asm = self._assembly.get(mid)
        size = self.slice_size
        if asm is None or asm.msg_len != mlen or off in asm.slices or off % size \
                or n != (size if mlen - off > size else mlen - off):
            asm = self._check_slice(psn, mid, off, mlen, n)
        if self.bytes_received + n > self.freed + self.recv_window:
            # Beyond the credit granted: not ours to keep, and not acknowledged.
            self.no_buffer += 1
            if self._last is None:
                return False
            self.sack_causes["no_buffer"] += 1
            return True
        self._last = (psn, ev, ts, plane)
        self._last_at = now
        if ce:
            self._ce_since_ack += 1
        # _record(psn), inlined (it is not a duplicate: checked above).
        if psn == self.cum_psn:
            cum = psn + 1
            above = self._above
            if above:
                while cum in above:
                    above.discard(cum)
                    cum += 1
            self.cum_psn = cum
        else:
            self._above.add(psn)
        self.bytes_received += n
        if asm is None:
            if n == mlen:  # a whole message in one slice: no assembly at all
                self._complete(mid, n, payload)
            else:
                self.held_partial += n
                self._assembly[mid] = _Assembly(mlen, {off: payload}, n)
        else:
            asm.slices[off] = payload
            received = asm.received = asm.received + n
            self.held_partial += n
            if received == mlen:
                del self._assembly[mid]
                self.held_partial -= mlen
                slices = asm.slices
                self._complete(mid, mlen, b"".join(
                    [slices[o] for o in range(0, mlen, size)]))
        self._unacked += 1
        lo = self._pend_lo
        if lo is None or psn < lo:
            self._pend_lo = psn
        if psn > self._pend_hi:
            self._pend_hi = psn
            self._pend_hi_plane = plane
        if self._ack_deadline is None:
            self._ack_deadline = now + self._hold
            self._first = (psn, ev, ts, plane)
            self._first_at = now
        if last:
            self._flush_now = True
        # CE marks go back at once so the sender can tell which EV was marked.
        if ack_req or ce or self._unacked >= self.ack_every:
            self.sack_causes["ack_req" if ack_req else "ce" if ce else "every"] += 1
            return True
        return False

    def _complete(self, msg_id: int, msg_len: int, data: bytes) -> None:
        if not self.hold_delivered:
            self.freed += msg_len
            if self._adv_room < self.recv_window // 2:
                self._flush_now = True  # the sender may wait for this credit
        if msg_id == self._done_floor:
            floor = (msg_id + 1) & _U32 or 1
            done = self._done
            while floor in done:
                done.discard(floor)
                floor = (floor + 1) & _U32 or 1
            self._done_floor = floor
        else:
            self._done.add(msg_id)
        self.delivered.append((msg_id, data))

    def consume(self, nbytes: int) -> bool:
        """The application took ``nbytes`` of delivered data (``hold_delivered``):
        that much credit comes back. True if the sender should hear it now (it
        was last told of little room)."""
        held_delivered = self.bytes_received - self.freed - self.held_partial
        self.freed += max(0, min(nbytes, held_delivered))
        return self._adv_room < self.recv_window // 2 and self._last is not None \
            and self.room >= self.recv_window // 2

    @property
    def max_partial(self) -> int:
        """Incomplete messages held at once (see ``_check_slice``)."""
        return max(1, self.recv_window // self.slice_size)

    @property
    def room(self) -> int:
        """Bytes the receiver can still accept."""
        return self.freed + self.recv_window - self.bytes_received

    @property
    def credit_edge(self) -> int:
        """The credit edge as sent in SACK ``Receive Window`` (low 32 bits)."""
        return (self.freed + self.recv_window) & _U32

    def discard(self) -> None:
        """Free every incomplete message (the connection ended)."""
        self._assembly.clear()
        self._done.clear()
        self.held_partial = 0

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
        out, self.delivered = self.delivered, []
        return out

    def _bitmap(self, base: int) -> int:
        bitmap = 0
        above = self._above
        if above:
            for i in range(_BITMAP_BITS):
                if base + i in above:
                    bitmap |= 1 << i
        return bitmap

    def _range_sack(self, out: list[AckDue], start: int, cum: int, rwnd: int,
                    plane: int) -> None:
        """Append a SACK of the 64 PSNs from ``start`` that echoes nothing (its
        ACK PSN the lowest of them received), if any was received."""
        bm = self._bitmap(start)
        if bm:
            first = start + ((bm & -bm).bit_length() - 1)
            out.append(AckDue(Sack(wire(cum), wire(start), bm, wire(first), 0, 0, rwnd, 0,
                                   plane), plane, False))

    def make_sacks(self, now: float, rtt_hint: float, max_extra: int = 3,
                   batch: bool = False) -> list[AckDue]:
        """SACKs for what arrived since the last one: the last carries the
        triggering packet's echo (EV, timestamp); up to ``max_extra`` more
        cover older parts of the range that one bitmap cannot reach, and one
        more the part above the triggering packet's bitmap (a faster plane's
        packets, which arrived before the trigger), on the plane that part
        came by.

        ``batch``: a SACK the batching rule let wait (``flush_due``). With no
        hole it echoes the first packet it holds, not the last: its ACK Delay
        is then the batch's whole hold, which the sender learns and allows
        for (``Sender.ack_delay``), and its RTT sample is as right as any."""
        if self._last is None:
            return []
        psn, ev, ts, plane = self._last
        held_at = self._last_at
        if batch and self._first is not None and not self._above:
            psn, ev, ts, plane = self._first
            held_at = self._first_at
        cum = self.cum_psn
        rwnd = self.credit_edge
        self._adv_room = self.room
        out: list[AckDue] = []
        lo = self._pend_lo
        base = max(cum, psn - (_BITMAP_BITS - 1))
        if lo is not None and lo >= cum:
            start = lo
            while start < base and len(out) < max_extra:
                self._range_sack(out, start, cum, rwnd, plane)
                start += _BITMAP_BITS
        hi = self._pend_hi
        if hi >= base + _BITMAP_BITS:
            # Without this a 4x slower plane's arrivals, each the trigger of a
            # coalesced SACK, left the other plane's packets unreported for a
            # whole slow round trip, and the sender called them lost.
            self._range_sack(out, max(hi - (_BITMAP_BITS - 1), base + _BITMAP_BITS), cum,
                             rwnd, self._pend_hi_plane)
        ce = self._ce_since_ack
        held = ack_delay_code(now - held_at)
        sack = Sack(wire(cum), wire(base), self._bitmap(base), wire(psn), ev, ts, rwnd,
                    min(ce, 0xFFFF), plane, held)
        out.append(AckDue(sack, plane, ce > 0))
        self._unacked = 0
        self._ce_since_ack = 0
        self._ack_deadline = None
        self._first = None
        self._flush_now = False
        self._pend_lo = None
        self._pend_hi = -1
        # While holes remain, keep the sender informed even if it goes quiet:
        # a coalescing receiver without this can deadlock a sender on holes.
        self._hole_refresh = now + max(rtt_hint, self.ack_delay) if self._above else None
        return out

    def ack_pending(self) -> bool:
        """DATA arrived since the last SACK and waits for the ACK delay."""
        return self._ack_deadline is not None

    def set_batch_delay(self, delay: float) -> None:
        """Hold SACKs across reads, up to ``delay`` (``flush_due``): for an I/O
        layer that says where its reads end."""
        self.batch_delay = delay
        self._hold = max(self.ack_delay, delay)

    def flush_due(self, now: float) -> bool:
        """Must the held SACK go out at the end of this read (call once per
        read)? Yes if its first packet would pass the batch delay before the
        next read (reads taken to come as far apart as the last two, at most
        half the delay: later, the timer sends it), and for a LAST packet or
        freed credit; otherwise it waits for the packets of later reads. A
        hole waits too: spraying over planes of unequal delay opens one at
        nearly every read (docs/decisions/0022-sack-holes-wait-and-receive-
        moderation.md); the batch delay bounds how late a loss is heard of."""
        gap = now - self._read_at
        self._read_at = now
        dl = self._ack_deadline
        if dl is None:
            return False
        half = self._hold / 2
        if self._flush_now:
            cause = "last_or_credit"
        elif now + (gap if gap < half else half) >= dl:
            cause = "hole" if self._above else "batch_due"
        else:
            return False
        self.sack_causes[cause] += 1
        return True

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

    @property
    def state_size(self) -> dict[str, int]:
        """What this receiver holds, for the bounded-memory tests and stats."""
        return {"partial_messages": len(self._assembly), "partial_bytes": self.held_partial,
                "held_bytes": self.bytes_received - self.freed,
                "done_ids": len(self._done), "psns_above": len(self._above)}
