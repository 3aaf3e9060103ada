"""PSN serial-number arithmetic (RFC 1982 style).

PSNs are 32 bits on the wire and wrap: after 2**32 packets (about 8 minutes
at 100 Gbit/s) the count starts again at 0. Inside the core a PSN is an
unbounded integer that only grows, so ordering, ranges and windows are plain
integer arithmetic; ``wire`` maps it to its 32 bits when a packet is built
and ``unwrap`` maps 32 bits from a packet back to the integer closest to a
reference the reader is sure of (the receiver's cumulative PSN, the sender's
cumulative ACK). Any PSN a peer can legitimately name lies within 2**31 of
that reference: windows are far smaller.
"""

from __future__ import annotations

from typing import Final

MASK: Final = 0xFFFFFFFF
_HALF: Final = 1 << 31
_SPAN: Final = 1 << 32


def wire(psn: int) -> int:
    """The 32 bits of ``psn`` that go on the wire."""
    return psn & MASK


def unwrap(value: int, ref: int) -> int:
    """The PSN ≡ ``value`` (mod 2**32) closest to ``ref``."""
    d = (value - ref) & MASK
    if d >= _HALF:
        d -= _SPAN
    return ref + d
