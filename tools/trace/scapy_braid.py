"""Scapy layers for Braid wire format v1 (after scapy's contrib/bfd.py).

``Braid`` is the 16-byte common header; one body layer per packet type
follows it (``bind_layers`` on the type byte), ending with the 16-byte header
tag. DATA's payload (ciphertext + AEAD tag, or plaintext) is a ``Raw`` layer;
a DATA layer that announces ``payload_len > 0`` but has nothing after its
tag was trimmed by a switch, and its summary says where, from the IP DSCP.
Layers are bound to UDP port 4747 in both directions.

    >>> from tools.trace import scapy_braid  # registers the layers
    >>> pkt = IP()/UDP(sport=40001)/Braid(type="DATA", flags="PLAINTEXT")/BraidData(psn=1)
"""

from __future__ import annotations

from typing import Any

from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    LongField,
    ShortEnumField,
    ShortField,
    StrLenField,
    XIntField,
    XLongField,
    XStrFixedLenField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet, Raw, bind_bottom_up, bind_layers

from wire.constants import (
    COMMON_HEADER_LEN,
    HEADER_TAG_LEN,
    UDP_PORT,
    VERSION,
    CloseReason,
    Dscp,
    Flag,
    NackReason,
    PacketType,
)
from wire.packets import BODY_STRUCT, HEADER_WORDS

_TYPE_NAMES = {int(t): t.name for t in PacketType}
_NACK_NAMES = {int(r): r.name for r in NackReason}
_CLOSE_NAMES = {int(r): r.name for r in CloseReason}
#: Flag names from bit 0 upwards, as scapy's FlagsField wants them.
_FLAG_NAMES = [next((f.name or "" for f in Flag if f == 1 << i), f"bit{i}") for i in range(8)]


def _ext_len(pkt: Packet, ptype: PacketType) -> int:
    """Header words beyond the v1 body (room to grow): carried as opaque bytes."""
    under = pkt.underlayer
    words = getattr(under, "header_words", None) if under is not None else None
    if not words:
        return 0
    return max(0, int(words) * 4 - COMMON_HEADER_LEN - BODY_STRUCT[ptype].size)


def _tail(ptype: PacketType) -> list[Any]:
    return [
        StrLenField("ext", b"", length_from=lambda p: _ext_len(p, ptype)),
        XStrFixedLenField("tag", bytes(HEADER_TAG_LEN), HEADER_TAG_LEN),
    ]


def _prefix(pkt: Packet) -> str:
    """"Braid DATA dcid=0x.. ctr=.. flags=.." from the common header below a body layer."""
    under = pkt.underlayer
    if not isinstance(under, Braid):
        return str(pkt.name)
    flags = under.sprintf("%Braid.flags%") or "-"
    return f"{pkt.name} dcid={under.dcid:#x} ctr={under.counter} flags={flags} "


def _dscp(pkt: Packet) -> int | None:
    first = pkt.firstlayer()
    if IP in first:
        return int(first[IP].tos) >> 2
    if IPv6 in first:
        return int(first[IPv6].tc) >> 2
    return None


class Braid(Packet):
    name = "Braid"
    fields_desc = [
        ByteField("version", VERSION),
        ByteEnumField("type", PacketType.DATA, _TYPE_NAMES),
        FlagsField("flags", 0, 8, _FLAG_NAMES),
        ByteField("header_words", None),
        XIntField("dcid", 0),
        ShortField("epoch", 0),
        BitField("counter", 0, 48),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.header_words is None:
            ext = getattr(self.payload, "ext", b"") or b""
            words = HEADER_WORDS.get(PacketType(self.type), COMMON_HEADER_LEN // 4)
            pkt = pkt[:3] + bytes([words + len(ext) // 4]) + pkt[4:]
        return pkt + pay

    def mysummary(self) -> str:
        name = _TYPE_NAMES.get(self.type, str(self.type))
        return self.sprintf(f"Braid {name} dcid=%Braid.dcid% ctr=%Braid.counter% "
                            "flags=%Braid.flags%")


class BraidData(Packet):
    name = "Braid DATA"
    fields_desc = [
        IntField("psn", 0),
        IntField("ev", 0),
        ByteField("plane", 0),
        ByteField("reserved", 0),
        ShortField("payload_len", None),
        IntField("msg_id", 0),
        LongField("msg_offset", 0),
        LongField("msg_len", None),  # type: ignore[arg-type]  # None: offset + length
        IntField("timestamp", 0),
        *_tail(PacketType.DATA),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        # payload_len counts the application bytes; in sealed packets the
        # 16-byte AEAD tag follows them, so only plaintext can be inferred.
        if self.payload_len is None:
            pkt = pkt[:10] + len(pay).to_bytes(2, "big") + pkt[12:]
        if self.msg_len is None:
            off = int.from_bytes(pkt[16:24], "big")
            plen = int.from_bytes(pkt[10:12], "big")
            pkt = pkt[:24] + (off + plen).to_bytes(8, "big") + pkt[32:]
        return pkt + pay

    @property
    def trimmed(self) -> bool:
        return bool(self.payload_len) and not bytes(self.payload)

    def trim_kind(self) -> str:
        if not self.trimmed:
            return "no"
        dscp = _dscp(self)
        if dscp == Dscp.TRIMMED:
            return "fabric"
        if dscp == Dscp.TRIMMED_LAST_HOP:
            return "last-hop"
        return "yes"

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf(
            "psn=%BraidData.psn% ev=%BraidData.ev% plane=%BraidData.plane% "
            "msg=%BraidData.msg_id%@%BraidData.msg_offset%/%BraidData.msg_len% "
            "len=%BraidData.payload_len%") + f" trimmed={self.trim_kind()}"


class BraidSack(Packet):
    name = "Braid SACK"
    fields_desc = [
        IntField("cum_psn", 0),
        IntField("bitmap_base", 0),
        XLongField("bitmap", 0),
        IntField("ack_psn", 0),
        IntField("echo_ev", 0),
        IntField("echo_ts", 0),
        IntField("rwnd", 0),
        ShortField("ce_count", 0),
        ByteField("plane", 0),
        ByteField("ack_delay", 0),  # units of 8 us (wire/SPEC.md 3.2)
        *_tail(PacketType.SACK),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf("cum=%BraidSack.cum_psn% ack_psn=%BraidSack.ack_psn% "
                            "echo_ev=%BraidSack.echo_ev% plane=%BraidSack.plane% "
                            "bitmap=%BraidSack.bitmap%")


class BraidNack(Packet):
    name = "Braid NACK"
    fields_desc = [
        IntField("psn", 0),
        IntField("echo_ev", 0),
        IntField("cum_psn", 0),
        IntField("echo_ts", 0),
        ByteEnumField("reason", NackReason.TRIMMED, _NACK_NAMES),
        ByteField("plane", 0),
        ShortField("reserved", 0),
        *_tail(PacketType.NACK),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf("psn=%BraidNack.psn% reason=%BraidNack.reason% "
                            "echo_ev=%BraidNack.echo_ev% plane=%BraidNack.plane%")


class _ProbeBase(Packet):
    fields_desc = [
        IntField("probe_id", 0),
        IntField("ev", 0),
        IntField("psn", 0),
        IntField("timestamp", 0),
        ByteField("plane", 0),
        ByteField("reserved1", 0),
        ShortField("reserved2", 0),
        *_tail(PacketType.PROBE),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + f"id={self.probe_id} psn={self.psn} ev={self.ev} plane={self.plane}"


class BraidProbe(_ProbeBase):
    name = "Braid PROBE"


class BraidProbeAck(_ProbeBase):
    name = "Braid PROBE_ACK"


class BraidInit(Packet):
    name = "Braid INIT"
    fields_desc = [
        XIntField("src_cid", 0),
        XStrFixedLenField("nonce", bytes(16), 16),
        ByteField("planes", 1),
        ByteField("reserved", 0),
        ShortField("evs", 1),
        ShortField("mtu", 1500),
        ShortField("reserved2", 0),
        IntField("timestamp", 0),
        *_tail(PacketType.INIT),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf(
            "scid=%BraidInit.src_cid% planes=%BraidInit.planes% "
            "evs=%BraidInit.evs% mtu=%BraidInit.mtu%")


class BraidAccept(Packet):
    name = "Braid ACCEPT"
    fields_desc = [
        XIntField("src_cid", 0),
        XStrFixedLenField("nonce", bytes(16), 16),
        XStrFixedLenField("echo_nonce", bytes(16), 16),
        ByteField("planes", 1),
        ByteField("reserved", 0),
        ShortField("evs", 1),
        ShortField("mtu", 1500),
        ShortField("reserved2", 0),
        IntField("timestamp", 0),
        *_tail(PacketType.ACCEPT),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf(
            "scid=%BraidAccept.src_cid% planes=%BraidAccept.planes% "
            "evs=%BraidAccept.evs% mtu=%BraidAccept.mtu%")


class _CloseBase(Packet):
    fields_desc = [
        ShortEnumField("reason", CloseReason.NORMAL, _CLOSE_NAMES),
        ShortField("reserved", 0),
        IntField("final_psn", 0),
        *_tail(PacketType.CLOSE),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf(f"reason=%{type(self).__name__}.reason% final_psn="
                            f"%{type(self).__name__}.final_psn%")


class BraidClose(_CloseBase):
    name = "Braid CLOSE"


class BraidReset(_CloseBase):
    name = "Braid RESET"


class BraidUnknownConn(Packet):
    name = "Braid UNKNOWN_CONN"
    fields_desc = [
        XIntField("unknown_cid", 0),
        ShortField("reserved", 0),
        BitField("echo_counter", 0, 48),
        *_tail(PacketType.UNKNOWN_CONN),
    ]

    def mysummary(self) -> str:
        return _prefix(self) + self.sprintf(
            "unknown_cid=%BraidUnknownConn.unknown_cid% "
            "echo_counter=%BraidUnknownConn.echo_counter%")


BODY_LAYERS: dict[PacketType, type[Packet]] = {
    PacketType.DATA: BraidData,
    PacketType.SACK: BraidSack,
    PacketType.NACK: BraidNack,
    PacketType.PROBE: BraidProbe,
    PacketType.PROBE_ACK: BraidProbeAck,
    PacketType.INIT: BraidInit,
    PacketType.ACCEPT: BraidAccept,
    PacketType.CLOSE: BraidClose,
    PacketType.RESET: BraidReset,
    PacketType.UNKNOWN_CONN: BraidUnknownConn,
}

for _ptype, _layer in BODY_LAYERS.items():
    bind_layers(Braid, _layer, type=int(_ptype))
    if _layer is not BraidData:
        bind_layers(_layer, Raw)  # nothing follows a control header; show stray bytes raw
bind_layers(BraidData, Raw)
bind_layers(UDP, Braid, dport=UDP_PORT)
bind_bottom_up(UDP, Braid, sport=UDP_PORT)

__all__ = ["BODY_LAYERS", "Braid", *(layer.__name__ for layer in BODY_LAYERS.values())]
