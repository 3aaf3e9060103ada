"""Packet bodies of wire format v1 and their byte layouts.

Each packet is: common header (16 bytes) | type-specific body | header tag
(16 bytes) | payload (DATA only). The body layouts are module-level
precompiled ``struct.Struct`` objects; ``wire/SPEC.md`` draws them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from wire.constants import (
    ACK_DELAY_HZ,
    ACK_DELAY_LINEAR,
    ACK_DELAY_MAX,
    COMMON_HEADER_LEN,
    PacketType,
)

#: version, type, flags, header words, dst conn id, key epoch, counter hi16, counter lo32
COMMON: Final = struct.Struct("!BBBBIHHI")

DATA_BODY: Final = struct.Struct("!IIBBHIQQI")
SACK_BODY: Final = struct.Struct("!IIQIIIIHBB")
NACK_BODY: Final = struct.Struct("!IIIIBBH")
PROBE_BODY: Final = struct.Struct("!IIIIBBH")
INIT_BODY: Final = struct.Struct("!I16sBBHHHI")
ACCEPT_BODY: Final = struct.Struct("!I16s16sBBHHHI")
CLOSE_BODY: Final = struct.Struct("!HHI")
UNKNOWN_BODY: Final = struct.Struct("!IHHI")

U32_MAX: Final = 0xFFFF_FFFF


@dataclass(slots=True)
class CommonHeader:
    """The first 16 bytes of every packet."""

    version: int
    ptype: PacketType
    flags: int
    header_words: int
    dcid: int
    epoch: int
    counter: int

    @property
    def header_len(self) -> int:
        """Bytes of header before the tag (common header + body + any extension)."""
        return self.header_words * 4


@dataclass(slots=True)
class Data:
    """A data packet: one slice of a message, placed by (msg_id, msg_offset)."""

    psn: int
    ev: int
    plane: int
    payload_len: int
    msg_id: int
    msg_offset: int
    msg_len: int
    timestamp: int

    TYPE = PacketType.DATA


@dataclass(slots=True)
class Sack:
    """Selective ACK: everything below ``cum_psn`` plus a 64-PSN bitmap.

    Bit i of ``bitmap`` (least significant first) says PSN ``bitmap_base + i``
    arrived. ``ack_psn``/``echo_ev``/``echo_ts``/``plane`` describe the packet
    that triggered this SACK so the sender can attribute RTT and marks to a
    path.
    """

    cum_psn: int
    bitmap_base: int
    bitmap: int
    ack_psn: int
    echo_ev: int
    echo_ts: int
    rwnd: int
    ce_count: int
    plane: int
    ack_delay: int = 0

    TYPE = PacketType.SACK


@dataclass(slots=True)
class Nack:
    """Negative ACK of one PSN (sent at once on a trimmed header)."""

    psn: int
    echo_ev: int
    cum_psn: int
    echo_ts: int
    reason: int
    plane: int

    TYPE = PacketType.NACK


@dataclass(slots=True)
class Probe:
    """A probe of one path; ``psn`` names the PSN the sender asks about."""

    probe_id: int
    ev: int
    psn: int
    timestamp: int
    plane: int

    TYPE = PacketType.PROBE


@dataclass(slots=True)
class ProbeAck:
    """The echo of a probe; ``psn`` is the receiver's cumulative PSN."""

    probe_id: int
    ev: int
    psn: int
    timestamp: int
    plane: int

    TYPE = PacketType.PROBE_ACK


@dataclass(slots=True)
class Init:
    """Handshake from the initiator: its connection id, nonce and shape."""

    src_cid: int
    nonce: bytes
    planes: int
    evs: int
    mtu: int
    timestamp: int

    TYPE = PacketType.INIT


@dataclass(slots=True)
class Accept:
    """Handshake answer: responder's id and nonce, the initiator's nonce echoed."""

    src_cid: int
    nonce: bytes
    echo_nonce: bytes
    planes: int
    evs: int
    mtu: int
    timestamp: int

    TYPE = PacketType.ACCEPT


@dataclass(slots=True)
class Close:
    """Orderly close; ``final_psn`` is the next PSN the sender would have used."""

    reason: int
    final_psn: int

    TYPE = PacketType.CLOSE


@dataclass(slots=True)
class Reset:
    """Abortive close: the peer must drop the connection at once."""

    reason: int
    final_psn: int

    TYPE = PacketType.RESET


@dataclass(slots=True)
class UnknownConn:
    """A host's answer to a packet for a connection id it does not have (it
    restarted, or forgot an idle connection). ``cid`` is the unknown id (the
    triggering packet's destination), ``echo_counter`` that packet's counter,
    so only a fresh packet of the named connection can provoke it."""

    cid: int
    echo_counter: int

    TYPE = PacketType.UNKNOWN_CONN


Body = Data | Sack | Nack | Probe | ProbeAck | Init | Accept | Close | Reset | UnknownConn

#: Body struct per type; header words follow from it.
BODY_STRUCT: Final[dict[PacketType, struct.Struct]] = {
    PacketType.DATA: DATA_BODY,
    PacketType.SACK: SACK_BODY,
    PacketType.NACK: NACK_BODY,
    PacketType.PROBE: PROBE_BODY,
    PacketType.PROBE_ACK: PROBE_BODY,
    PacketType.INIT: INIT_BODY,
    PacketType.ACCEPT: ACCEPT_BODY,
    PacketType.CLOSE: CLOSE_BODY,
    PacketType.RESET: CLOSE_BODY,
    PacketType.UNKNOWN_CONN: UNKNOWN_BODY,
}

#: v1 header length in 4-byte words (common + body, tag excluded) per type.
HEADER_WORDS: Final[dict[PacketType, int]] = {
    t: (COMMON_HEADER_LEN + s.size) // 4 for t, s in BODY_STRUCT.items()
}

for _t, _s in BODY_STRUCT.items():
    assert (COMMON_HEADER_LEN + _s.size) % 4 == 0, _t


def ack_delay_code(seconds: float) -> int:
    """The SACK ``ACK Delay`` byte for a hold of ``seconds`` (wire/SPEC.md,
    "ACK delay"): whole 8 µs units below code 128 (1.024 ms), then 16 codes
    per doubling, each rounded down (within 1/16), up to code 255
    (253.95 ms); longer saturates. Host waits of a busy receiver run to
    milliseconds (docs/congestion.md, "Host delay"); one byte of units
    stopped at 2.04 ms."""
    units = int(seconds * ACK_DELAY_HZ)
    if units < ACK_DELAY_LINEAR:
        return max(units, 0)
    e = units.bit_length() - 8  # units in [128 << e, 256 << e)
    code = ACK_DELAY_LINEAR + 16 * e + (units >> (e + 3)) - 16
    return min(code, ACK_DELAY_MAX)


def ack_delay_seconds(code: int) -> float:
    """What an ``ACK Delay`` byte says, in seconds (``ack_delay_code``'s inverse,
    the low end of the code's range)."""
    if code < ACK_DELAY_LINEAR:
        return code / ACK_DELAY_HZ
    e, m = divmod(code - ACK_DELAY_LINEAR, 16)
    return ((16 + m) << (e + 3)) / ACK_DELAY_HZ


def pack_body(body: Body) -> bytes:
    """The body's bytes (no common header, no tag)."""
    if isinstance(body, Data):
        return DATA_BODY.pack(
            body.psn, body.ev, body.plane, 0, body.payload_len, body.msg_id,
            body.msg_offset, body.msg_len, body.timestamp,
        )
    if isinstance(body, Sack):
        return SACK_BODY.pack(
            body.cum_psn, body.bitmap_base, body.bitmap, body.ack_psn, body.echo_ev,
            body.echo_ts, body.rwnd, body.ce_count, body.plane, body.ack_delay,
        )
    if isinstance(body, Nack):
        return NACK_BODY.pack(
            body.psn, body.echo_ev, body.cum_psn, body.echo_ts, body.reason, body.plane, 0
        )
    if isinstance(body, Probe | ProbeAck):
        return PROBE_BODY.pack(
            body.probe_id, body.ev, body.psn, body.timestamp, body.plane, 0, 0
        )
    if isinstance(body, Init):
        return INIT_BODY.pack(
            body.src_cid, body.nonce, body.planes, 0, body.evs, body.mtu, 0, body.timestamp
        )
    if isinstance(body, Accept):
        return ACCEPT_BODY.pack(
            body.src_cid, body.nonce, body.echo_nonce, body.planes, 0, body.evs, body.mtu, 0,
            body.timestamp,
        )
    if isinstance(body, UnknownConn):
        c = body.echo_counter
        return UNKNOWN_BODY.pack(body.cid, 0, (c >> 32) & 0xFFFF, c & 0xFFFFFFFF)
    return CLOSE_BODY.pack(body.reason, 0, body.final_psn)


def unpack_body(ptype: PacketType, buf: bytes | memoryview, offset: int) -> Body:
    """Parse a body of a known type; the caller has checked the length.

    Reserved fields are ignored on receipt (room to grow) and enum-valued
    fields are checked by the caller, which knows what it accepts.
    """
    if ptype is PacketType.DATA:
        psn, ev, plane, _r, plen, mid, moff, mlen, ts = DATA_BODY.unpack_from(buf, offset)
        return Data(psn, ev, plane, plen, mid, moff, mlen, ts)
    if ptype is PacketType.SACK:
        cum, base, bm, apsn, eev, ets, rwnd, ce, plane, delay = SACK_BODY.unpack_from(buf, offset)
        return Sack(cum, base, bm, apsn, eev, ets, rwnd, ce, plane, delay)
    if ptype is PacketType.NACK:
        psn, eev, cum, ets, reason, plane, _r = NACK_BODY.unpack_from(buf, offset)
        return Nack(psn, eev, cum, ets, reason, plane)
    if ptype is PacketType.PROBE or ptype is PacketType.PROBE_ACK:
        pid, ev, psn, ts, plane, _r1, _r2 = PROBE_BODY.unpack_from(buf, offset)
        cls = Probe if ptype is PacketType.PROBE else ProbeAck
        return cls(pid, ev, psn, ts, plane)
    if ptype is PacketType.INIT:
        cid, nonce, planes, _r, evs, mtu, _r2, ts = INIT_BODY.unpack_from(buf, offset)
        return Init(cid, nonce, planes, evs, mtu, ts)
    if ptype is PacketType.ACCEPT:
        cid, nonce, echo, planes, _r, evs, mtu, _r2, ts = ACCEPT_BODY.unpack_from(buf, offset)
        return Accept(cid, nonce, echo, planes, evs, mtu, ts)
    if ptype is PacketType.UNKNOWN_CONN:
        cid, _r, hi, lo = UNKNOWN_BODY.unpack_from(buf, offset)
        return UnknownConn(cid, (hi << 32) | lo)
    reason, _r, final_psn = CLOSE_BODY.unpack_from(buf, offset)
    if ptype is PacketType.CLOSE:
        return Close(reason, final_psn)
    return Reset(reason, final_psn)
