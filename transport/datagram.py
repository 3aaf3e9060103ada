"""What travels between the sans-I/O core and whatever moves bytes.

The core hands out ``(bytes, TxPath)`` pairs and takes ``(bytes, RxInfo)``;
the real I/O adapter, the simulated fabric and tests all speak only this.
An adapter that sends a spray run in one UDP GSO call may ask for runs
whole (``Endpoint.sealed_runs``): a new-data run then comes as one
``SealedRun`` (its datagrams back to back, as GSO takes them) in place of
its datagrams.
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


class SealedRun:
    """``count`` datagrams of one run, sealed back to back into ``buf``:
    each ``size`` bytes, the last maybe shorter (UDP GSO's layout, one
    ``sendmsg``). ``datagrams()`` cuts it into what it stands for."""

    __slots__ = ("buf", "count", "size")

    def __init__(self, buf: bytes, count: int, size: int) -> None:
        self.buf = buf
        self.count = count
        self.size = size

    def datagrams(self) -> list[bytes]:
        buf, size = self.buf, self.size
        return [buf[i:i + size] for i in range(0, len(buf), size)]

    def __len__(self) -> int:
        return len(self.buf)

    def __repr__(self) -> str:
        return f"SealedRun({self.count} x {self.size} bytes, {len(self.buf)} in all)"


#: One item the core hands out: a datagram, or a run of them (``SealedRun``).
Outgoing = bytes | SealedRun


def unrun(out: list[tuple[Outgoing, TxPath]]) -> list[tuple[bytes, TxPath]]:
    """``out`` with every ``SealedRun`` cut into its datagrams, in order."""
    flat: list[tuple[bytes, TxPath]] = []
    for data, path in out:
        if isinstance(data, SealedRun):
            flat += [(d, path) for d in data.datagrams()]
        else:
            flat.append((data, path))
    return flat


class Tap(Protocol):
    """Sees every datagram sent and received (for qlog); costs nothing when unset."""

    def on_tx(self, now: float, data: bytes, path: TxPath) -> None: ...

    def on_rx(self, now: float, data: bytes, rx: RxInfo) -> None: ...
