"""The send queue: messages waiting to be cut into segments, receive credit,
the PSN window, and what goes out next (retransmissions first)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from transport.ev_state import Ev

_U32 = 0xFFFFFFFF


@dataclass(slots=True, eq=False)
class SentPacket:
    psn: int
    msg_id: int
    offset: int
    length: int
    msg_len: int
    last: bool
    ev: Ev | None = None
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
    lost_ev: Ev | None = None
    #: Was its latest loss reported to the congestion controller (so that a
    #: copy acknowledged after all can take it back there too)?
    cc_lost: bool = False
    #: Times declared lost by the loss rules (not counting tail-loss probes).
    losses: int = 0
    #: Its latest resend went out as two copies on two EVs with one
    #: timestamp (``TWIN_AFTER_LOSSES``; ``InflightTable.on_verdicts`` sets
    #: it): only a SACK it triggered says which EV carried the copy that
    #: arrived (its echo EV); an ack by the cumulative PSN or the bitmap does
    #: not.
    twin: bool = False
    #: The second copy's EV and its key (``ev`` / ``ev_key`` are the first's).
    twin_ev: Ev | None = None
    twin_key: int = -1
    #: The whole message this segment is a slice of (retransmissions re-read it).
    data: bytes | memoryview | None = None


@dataclass(slots=True)
class _Outbound:
    msg_id: int
    #: The message (bytes as given, so a segment is one slice; else a view).
    data: bytes | memoryview
    total: int
    next_offset: int = 0


class SendQueue:
    """What waits to be sent (part of ``Sender``)."""

    _lost: dict[int, SentPacket]
    _msg_segments: dict[int, int]
    _msg_size: dict[int, int]
    _outbound: deque[_Outbound]
    credit_edge: int
    cum_acked: int
    inflight: dict[int, SentPacket]
    new_bytes_sent: int
    next_msg_id: int
    next_psn: int
    payload_size: int
    psn_window: int
    retx_queue: deque[SentPacket]

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

    def new_bytes_upto(self, limit: int) -> int:
        """New bytes queued (not yet sent once), counted up to ``limit``."""
        n = 0
        for ob in self._outbound:
            n += ob.total - ob.next_offset
            if n >= limit:
                return limit
        return n

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

    def put_back(self, p: SentPacket) -> None:
        """``p`` (from ``next_packet`` / ``next_new``) did not leave (no usable
        EV): it goes out first next time."""
        self.retx_queue.appendleft(p)

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

    def take(self, n: int) -> tuple[list[SentPacket], bool]:
        """Up to ``n`` segments of new data, as ``next_new`` would give them
        one by one (it stops where that returns None), without copying their
        payloads (each carries its message in ``data``), and whether more
        new data is queued behind the last."""
        taken: list[SentPacket] = []
        outbound = self._outbound
        size = self.payload_size
        while len(taken) < n and outbound:
            if self.next_psn - self.cum_acked >= self.psn_window:
                break
            ob = outbound[0]
            total = ob.total
            off = ob.next_offset
            m = total - off
            if m > size:
                m = size
            if self.new_bytes_sent + m > self.credit_edge:
                break  # the receiver has no room for it yet
            self.new_bytes_sent += m
            end = off + m
            p = SentPacket(self.next_psn, ob.msg_id, off, m, total, end >= total)
            self.next_psn += 1
            p.data = ob.data
            taken.append(p)
            if end >= total:
                outbound.popleft()
            else:
                ob.next_offset = end
        return taken, bool(outbound)

    def _payload_of(self, p: SentPacket) -> bytes:
        data = p.data
        assert data is not None  # acknowledged packets are never resent
        return bytes(data[p.offset : p.offset + p.length])
