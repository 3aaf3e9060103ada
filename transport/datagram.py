"""What travels between the sans-I/O core and whatever moves bytes.

The core hands out ``(bytes, TxPath)`` pairs and takes ``(bytes, RxInfo)``;
the real I/O adapter, the simulated fabric and tests all speak only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TxPath:
    """The path a datagram is sent on: a plane, and an EV inside that plane.

    ``ev`` steers the packet inside the plane (the I/O adapter maps it to a
    UDP source port / IPv6 flow label; the simulated fabric hashes it onto
    one of the plane's paths). ``dscp`` is the codepoint to send with
    (``wire.constants.Dscp``); ECT(0) is always set for data.
    """

    plane: int
    ev: int
    dscp: int


@dataclass(frozen=True, slots=True)
class RxInfo:
    """What the network tells the receiver besides the bytes.

    ``dscp`` distinguishes a header trimmed in the fabric from one trimmed at
    the last hop; ``ce`` is the ECN Congestion Experienced mark. ``lag``:
    how long before the ``now`` it is handled with the datagram reached this
    host (seconds; the kernel's receive stamp, when the I/O layer has one,
    else 0). It is host delay, not the fabric's: the receiver counts it in
    the hold its SACK reports, and the sender times a SACK from its arrival
    (docs/congestion.md, "Host delay").
    """

    plane: int
    ce: bool = False
    dscp: int = 0
    lag: float = 0.0


class Tap(Protocol):
    """Sees every datagram sent and received (for qlog); costs nothing when unset."""

    def on_tx(self, now: float, data: bytes, path: TxPath) -> None: ...

    def on_rx(self, now: float, data: bytes, rx: RxInfo) -> None: ...
