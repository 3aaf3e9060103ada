"""Decode Braid packets in a capture: one record per packet, text or JSON.

Headers are parsed with ``wire.packets``' precompiled structs, straight from
the captured bytes; nothing is authenticated unless a cluster key is given
(``tools.trace.keyring``). A DATA packet that ends right after its header
tag although its header announces a payload was trimmed; the IP DSCP says
where (``Dscp.TRIMMED``: in the fabric, ``Dscp.TRIMMED_LAST_HOP``: at the
receiver-facing port).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, Protocol

from tools.trace.frames import UdpDatagram, udp_of_frame
from tools.trace.pcapio import open_capture
from wire.constants import (
    COMMON_HEADER_LEN,
    HEADER_TAG_LEN,
    MAX_HEADER_WORDS,
    VERSION,
    CloseReason,
    Dscp,
    Flag,
    NackReason,
    PacketType,
)
from wire.packets import (
    COMMON,
    HEADER_WORDS,
    Accept,
    Body,
    Close,
    CommonHeader,
    Data,
    Init,
    Nack,
    Probe,
    ProbeAck,
    Reset,
    Sack,
    unpack_body,
)

_TYPES: Final = {int(t): t for t in PacketType}
_TYPE_NAMES: Final = {t: t.name for t in PacketType}
_PLAINTEXT: Final = int(Flag.PLAINTEXT)
_DSCP_NAMES: Final = {int(d): d.name for d in Dscp}
_ECN_NAMES: Final = ("Not-ECT", "ECT1", "ECT0", "CE")
_NACK_NAMES: Final = {int(r): r.name for r in NackReason}
_CLOSE_NAMES: Final = {int(r): r.name for r in CloseReason}
_FLAG_BITS: Final = [(int(f), f.name or "") for f in Flag if f is not Flag.NONE]
_PLANE_IN_NAME: Final = re.compile(r"(?:^|[^a-z])p(?:lane)?(\d+)$")


def flag_names(flags: int) -> str:
    names = [name for bit, name in _FLAG_BITS if flags & bit]
    rest = flags & ~sum(bit for bit, _ in _FLAG_BITS)
    if rest:
        names.append(f"0x{rest:02x}")
    return "|".join(names) or "-"


def nack_reason_name(reason: int) -> str:
    return _NACK_NAMES.get(reason, f"UNKNOWN_{reason}")


def close_reason_name(reason: int) -> str:
    return _CLOSE_NAMES.get(reason, f"UNKNOWN_{reason}")


def plane_of_interface(name: str) -> int | None:
    """The plane an interface serves, from its name (testbed host NICs are ``p<N>``)."""
    m = _PLANE_IN_NAME.search(name)
    return int(m.group(1)) if m else None


class Verifier(Protocol):
    def check(self, pkt: TracePacket) -> None: ...


@dataclass(slots=True)
class TracePacket:
    """One Braid datagram seen on the wire."""

    index: int
    time: float
    udp: UdpDatagram
    iface: str
    header: CommonHeader | None
    body: Body | None
    trimmed: bool
    error: str = ""
    #: "" (not checked), "plaintext", "ok", "nokey" or "fail:<WireError reason>"
    auth: str = ""
    payload: bytes | None = None

    @property
    def ptype_name(self) -> str:
        return _TYPE_NAMES[self.header.ptype] if self.header else "MALFORMED"

    @property
    def plane(self) -> int | None:
        b = self.body
        if isinstance(b, Data | Sack | Nack | Probe | ProbeAck):
            return b.plane
        return plane_of_interface(self.iface)

    @property
    def ev(self) -> int | None:
        """The EV field (DATA/PROBE) or the echoed EV (SACK/NACK)."""
        b = self.body
        if isinstance(b, Data | Probe | ProbeAck):
            return b.ev
        if isinstance(b, Sack | Nack):
            return b.echo_ev
        return None

    @property
    def psn(self) -> int | None:
        """DATA/NACK/PROBE: its PSN; SACK: the PSN that triggered it; CLOSE/RESET: final."""
        b = self.body
        if isinstance(b, Data | Nack | Probe | ProbeAck):
            return b.psn
        if isinstance(b, Sack):
            return b.ack_psn
        if isinstance(b, Close | Reset):
            return b.final_psn
        return None

    @property
    def trim_kind(self) -> str:
        """"no", "fabric", "last-hop", or "yes" (trimmed but DSCP not re-marked)."""
        if not self.trimmed:
            return "no"
        dscp = self.udp.dscp
        if dscp == Dscp.TRIMMED:
            return "fabric"
        if dscp == Dscp.TRIMMED_LAST_HOP:
            return "last-hop"
        return "yes"


def decode_datagram_untrusted(
    udp: UdpDatagram, *, index: int = 0, time: float = 0.0, iface: str = ""
) -> TracePacket:
    """Parse a Braid datagram's header; never raises (errors go in ``error``)."""
    data = udp.payload
    pkt = TracePacket(index, time, udp, iface, None, None, False)
    n = len(data)
    if n < COMMON_HEADER_LEN:
        pkt.error = "short"
        return pkt
    ver, ptype_raw, flags, words, dcid, epoch, hi, lo = COMMON.unpack_from(data, 0)
    ptype = _TYPES.get(ptype_raw)
    if ver != VERSION:
        pkt.error = "version"
    elif ptype is None:
        pkt.error = "type"
    elif words < HEADER_WORDS[ptype] or words > MAX_HEADER_WORDS:
        pkt.error = "header_len"
    elif n < words * 4 + HEADER_TAG_LEN:
        pkt.error = "short"
    if pkt.error or ptype is None:
        return pkt
    pkt.header = CommonHeader(ver, ptype, flags, words, dcid, epoch, (hi << 32) | lo)
    body = unpack_body(ptype, data, COMMON_HEADER_LEN)
    pkt.body = body
    if isinstance(body, Data):
        pkt.trimmed = n == words * 4 + HEADER_TAG_LEN and body.payload_len > 0
    if flags & _PLAINTEXT:
        pkt.auth = "plaintext"
        if isinstance(body, Data) and not pkt.trimmed:
            pkt.payload = data[words * 4 + HEADER_TAG_LEN:]
    return pkt


def read_packets(
    path: str | Path, *, verifier: Verifier | None = None, include_malformed: bool = True,
) -> Iterator[TracePacket]:
    """Braid packets of a capture in file order (streaming, bounded memory)."""
    index = 0
    for frame in open_capture(path):
        udp = udp_of_frame(frame.interface.linktype, frame.data)
        if udp is None:
            continue
        index += 1
        pkt = decode_datagram_untrusted(
            udp, index=index, time=frame.time, iface=frame.interface.name
        )
        if pkt.header is None and not include_malformed:
            continue
        if verifier is not None and pkt.header is not None:
            verifier.check(pkt)
        yield pkt


def _extra(pkt: TracePacket) -> str:
    h, b = pkt.header, pkt.body
    assert h is not None
    if isinstance(b, Data):
        return (f"dcid={h.dcid:#x} ctr={h.counter} msg={b.msg_id}@{b.msg_offset}/{b.msg_len} "
                f"len={b.payload_len} ts={b.timestamp}")
    if isinstance(b, Sack):
        return (f"dcid={h.dcid:#x} ctr={h.counter} cum={b.cum_psn} base={b.bitmap_base} "
                f"bitmap={b.bitmap:#x} echo_ts={b.echo_ts} rwnd={b.rwnd} ce={b.ce_count}"
                + (f" held={b.ack_delay * 8}us" if b.ack_delay else ""))
    if isinstance(b, Nack):
        return (f"dcid={h.dcid:#x} ctr={h.counter} reason={nack_reason_name(b.reason)} "
                f"cum={b.cum_psn} echo_ts={b.echo_ts}")
    if isinstance(b, Probe | ProbeAck):
        return f"dcid={h.dcid:#x} ctr={h.counter} id={b.probe_id} ts={b.timestamp}"
    if isinstance(b, Init | Accept):
        s = (f"dcid={h.dcid:#x} scid={b.src_cid:#x} planes={b.planes} evs={b.evs} mtu={b.mtu} "
             f"nonce={b.nonce.hex()[:8]}")
        return s + (f" echo={b.echo_nonce.hex()[:8]}" if isinstance(b, Accept) else "")
    if isinstance(b, Close | Reset):
        return f"dcid={h.dcid:#x} ctr={h.counter} reason={close_reason_name(b.reason)}"
    return ""


def _opt(v: int | None) -> str:
    return "-" if v is None else str(v)


def format_line(pkt: TracePacket, t0: float) -> str:
    """One human line: time, src→dst, plane, EV, type, PSN, flags, trim, DSCP/ECN, extras."""
    u = pkt.udp
    dscp = _DSCP_NAMES.get(u.dscp, str(u.dscp))
    head = f"{pkt.time - t0:11.6f} {u.src}:{u.sport}→{u.dst}:{u.dport}"
    tos = f"dscp={dscp} ecn={_ECN_NAMES[u.ecn]}"
    if pkt.header is None:
        return f"{head} MALFORMED {pkt.error} len={len(u.payload)} {tos}"
    auth = f" auth={pkt.auth}" if pkt.auth else ""
    return (f"{head} plane={_opt(pkt.plane)} ev={u.sport}/{_opt(pkt.ev)} {pkt.ptype_name} "
            f"psn={_opt(pkt.psn)} flags={flag_names(pkt.header.flags)} trimmed={pkt.trim_kind} "
            f"{tos} {_extra(pkt)}{auth}")


def to_json(pkt: TracePacket) -> dict[str, Any]:
    """A JSON-ready dict of every decoded field."""
    u = pkt.udp
    out: dict[str, Any] = {
        "index": pkt.index, "time": pkt.time, "src": u.src, "dst": u.dst, "sport": u.sport,
        "dport": u.dport, "dscp": u.dscp, "dscp_name": _DSCP_NAMES.get(u.dscp),
        "ecn": _ECN_NAMES[u.ecn], "udp_len": len(u.payload), "iface": pkt.iface or None,
    }
    if pkt.header is None:
        out.update(type="MALFORMED", error=pkt.error)
        return out
    h = pkt.header
    out.update(
        type=h.ptype.name, flags=h.flags, flag_names=flag_names(h.flags).split("|"),
        dcid=h.dcid, epoch=h.epoch, counter=h.counter, header_words=h.header_words,
        plane=pkt.plane, ev=pkt.ev, psn=pkt.psn, trimmed=pkt.trim_kind,
    )
    body: dict[str, Any] = {}
    for f in fields(pkt.body) if pkt.body is not None else ():
        v = getattr(pkt.body, f.name)
        body[f.name] = v.hex() if isinstance(v, bytes) else v
    if isinstance(pkt.body, Nack):
        body["reason_name"] = nack_reason_name(pkt.body.reason)
    if isinstance(pkt.body, Close | Reset):
        body["reason_name"] = close_reason_name(pkt.body.reason)
    out["body"] = body
    if pkt.auth:
        out["auth"] = pkt.auth
    if pkt.payload is not None:
        out["payload_len"] = len(pkt.payload)
        out["payload_head"] = pkt.payload[:32].hex()
    return out
