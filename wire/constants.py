"""Numbers of Braid's wire format v1 (see wire/SPEC.md).

Everything that another component needs to agree on — the trimming switch
element, the simulated fabric, the scapy layer, the Wireshark dissector —
reads it from here, so the format is defined in one place.
"""

from __future__ import annotations

import enum
from typing import Final

VERSION: Final = 1
#: Default UDP port of Braid (destination port; the source port carries the EV).
UDP_PORT: Final = 4747

#: Common header: version, type, flags, header words, dst conn id, epoch, counter.
COMMON_HEADER_LEN: Final = 16
#: Integrity tag that closes every header (AES-GMAC, or HMAC-SHA256/128 for handshakes).
HEADER_TAG_LEN: Final = 16
#: AES-GCM tag after a sealed payload.
PAYLOAD_TAG_LEN: Final = 16
#: Largest header (in 4-byte words, excluding the tag) a v1 decoder accepts.
MAX_HEADER_WORDS: Final = 64
#: Byte offset of the header-length field (in 4-byte words, tag excluded).
HEADER_WORDS_OFFSET: Final = 3
#: The per-packet counter is 48 bits; a connection fails before it wraps.
COUNTER_MAX: Final = (1 << 48) - 1
#: Receive credit (bytes of new DATA payload) a sender may use before it has
#: heard any SACK; every receiver grants at least this much (SPEC "Receive credit").
INITIAL_CREDIT: Final = 1 << 20

#: SACK ``ACK Delay``: how long the echoed packet was in the receiving host
#: before the SACK, counted in units of 1 / ACK_DELAY_HZ seconds (8 µs) and
#: coded in one byte (``wire.packets.ack_delay_code``: exact to 1.016 ms,
#: then within 1/16), saturating at code ACK_DELAY_MAX (253.95 ms).
ACK_DELAY_HZ: Final = 125_000
ACK_DELAY_MAX: Final = 255
#: Codes below this are units; from it on, 16 codes per doubling.
ACK_DELAY_LINEAR: Final = 128


class PacketType(enum.IntEnum):
    INIT = 1
    ACCEPT = 2
    DATA = 3
    SACK = 4
    NACK = 5
    PROBE = 6
    PROBE_ACK = 7
    CLOSE = 8
    RESET = 9
    #: "I do not know this connection": a restarted host's answer to a packet
    #: of a connection it lost (authenticated with the handshake key).
    UNKNOWN_CONN = 10


class Flag(enum.IntFlag):
    """Bits of the common header's flags byte (meaning depends on type)."""

    NONE = 0
    #: DATA: this is a retransmission.
    RETX = 0x01
    #: DATA: the receiver should send a SACK at once.
    ACK_REQ = 0x02
    #: DATA: last packet of its message.
    LAST = 0x04
    #: SACK: at least one packet since the last SACK arrived CE-marked.
    ECN_ECHO = 0x08
    #: The payload is NOT encrypted and NOT authenticated (insecure mode).
    PLAINTEXT = 0x80


class NackReason(enum.IntEnum):
    TRIMMED = 1
    TRIMMED_LAST_HOP = 2
    OUT_OF_WINDOW = 3
    NO_BUFFER = 4
    NO_RESOURCE = 5
    NO_BITMAP = 6
    CLOSING = 7
    UNEXPECTED = 8


class CloseReason(enum.IntEnum):
    NORMAL = 0
    IDLE = 1
    RETRY_BUDGET = 2
    PROTOCOL_ERROR = 3
    SHUTDOWN = 4
    AUTH_FAILED = 5


class Dscp(enum.IntEnum):
    """DSCP codepoints Braid sets (data/control) and switches set (trims)."""

    DATA = 10  # AF11
    RETX = 12  # AF12: retransmissions visible in captures
    CONTROL = 46  # EF: SACK, NACK, probes, handshake: served first, never trimmed
    TRIMMED = 40  # CS5: a fabric switch cut the payload
    TRIMMED_LAST_HOP = 41  # the last-hop (receiver-facing) port cut the payload


#: Packet types that never carry a payload and are served by the priority queue.
CONTROL_TYPES: Final = frozenset(t for t in PacketType if t is not PacketType.DATA)

#: ECN codepoints in the low two bits of the IP TOS / traffic class byte.
ECN_NOT_ECT: Final = 0
ECN_ECT1: Final = 1
ECN_ECT0: Final = 2
ECN_CE: Final = 3


def tos(dscp: int, ecn: int = ECN_ECT0) -> int:
    """The IP TOS byte for a DSCP codepoint and an ECN codepoint."""
    return (dscp << 2) | ecn


def trim_point(datagram: bytes | bytearray | memoryview) -> int | None:
    """Where a trimming switch cuts a Braid datagram (UDP payload), or None.

    A DATA packet is cut right after its header tag: what is kept is the full,
    authenticated header. Other packet types are never trimmed. This reads
    only two bytes and trusts nothing; a malformed datagram is simply not
    trimmable.
    """
    if len(datagram) < COMMON_HEADER_LEN or datagram[0] != VERSION:
        return None
    if datagram[1] != PacketType.DATA:
        return None
    cut = datagram[HEADER_WORDS_OFFSET] * 4 + HEADER_TAG_LEN
    if cut < COMMON_HEADER_LEN or cut >= len(datagram):
        return None
    return cut
