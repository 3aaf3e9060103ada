"""From a captured link-layer frame to the UDP payload of a Braid datagram.

Only what the trace tools need is parsed (IPv4/IPv6, UDP, the TOS / traffic
class byte that carries DSCP and ECN); everything else is skipped, cheaply.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Final

from tools.trace.pcapio import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from wire.constants import UDP_PORT

_ETH_IPV4: Final = 0x0800
_ETH_IPV6: Final = 0x86DD
_VLAN_TYPES: Final = frozenset({0x8100, 0x88A8})
_H: Final = struct.Struct("!H")
_UDP: Final = struct.Struct("!HHHH")


@dataclass(slots=True)
class UdpDatagram:
    """A UDP datagram inside a captured frame (addresses kept as raw bytes)."""

    src_raw: bytes
    dst_raw: bytes
    sport: int
    dport: int
    tos: int
    payload: bytes

    @property
    def src(self) -> str:
        return _ntop(self.src_raw)

    @property
    def dst(self) -> str:
        return _ntop(self.dst_raw)

    @property
    def dscp(self) -> int:
        return self.tos >> 2

    @property
    def ecn(self) -> int:
        return self.tos & 3


def _ntop(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _network_offset(linktype: int, data: bytes) -> tuple[int, int] | None:
    """(offset of the IP header, ethertype) for a frame, or None."""
    if linktype == LINKTYPE_ETHERNET:
        if len(data) < 14:
            return None
        off, etype = 14, _H.unpack_from(data, 12)[0]
        while etype in _VLAN_TYPES and len(data) >= off + 4:
            etype = _H.unpack_from(data, off + 2)[0]
            off += 4
        return off, etype
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if not data:
            return None
        return 0, _ETH_IPV4 if data[0] >> 4 == 4 else _ETH_IPV6
    if linktype == LINKTYPE_LINUX_SLL:
        return (16, _H.unpack_from(data, 14)[0]) if len(data) >= 16 else None
    if linktype == LINKTYPE_LINUX_SLL2:
        return (20, _H.unpack_from(data, 0)[0]) if len(data) >= 20 else None
    if linktype == LINKTYPE_NULL:
        if len(data) < 5:
            return None
        return 4, _ETH_IPV4 if data[4] >> 4 == 4 else _ETH_IPV6
    return None


def udp_of_frame(linktype: int, data: bytes, port: int = UDP_PORT) -> UdpDatagram | None:
    """The UDP datagram to or from ``port`` in a frame, or None.

    Fragments other than the first, and frames that are not IP/UDP, are
    skipped. A frame cut by the capture snap length yields what was captured.
    """
    where = _network_offset(linktype, data)
    if where is None:
        return None
    off, etype = where
    if etype == _ETH_IPV4:
        if len(data) < off + 20 or data[off] >> 4 != 4 or data[off + 9] != 17:
            return None
        if _H.unpack_from(data, off + 6)[0] & 0x1FFF:
            return None
        ihl = (data[off] & 0x0F) * 4
        tos = data[off + 1]
        src, dst = data[off + 12:off + 16], data[off + 16:off + 20]
        total = _H.unpack_from(data, off + 2)[0]
        end = min(off + total, len(data)) if total else len(data)
        udp = off + ihl
    elif etype == _ETH_IPV6:
        if len(data) < off + 40 or data[off] >> 4 != 6 or data[off + 6] != 17:
            return None  # extension headers are not used by Braid
        tos = ((data[off] & 0x0F) << 4) | (data[off + 1] >> 4)
        src, dst = data[off + 8:off + 24], data[off + 24:off + 40]
        end = min(off + 40 + _H.unpack_from(data, off + 4)[0], len(data))
        udp = off + 40
    else:
        return None
    if end < udp + 8:
        return None
    sport, dport, ulen, _csum = _UDP.unpack_from(data, udp)
    if sport != port and dport != port:
        return None
    if ulen >= 8:
        end = min(end, udp + ulen)
    return UdpDatagram(src, dst, sport, dport, tos, data[udp + 8:end])
