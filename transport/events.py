"""Events a connection reports to its application (small frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConnectionEstablished:
    local_cid: int
    remote_cid: int


@dataclass(frozen=True, slots=True)
class MessageDelivered:
    """A whole message arrived (placed by offset, in any arrival order)."""

    msg_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class MessageAcked:
    """Every byte of a message we sent was acknowledged by the peer."""

    msg_id: int
    size: int


@dataclass(frozen=True, slots=True)
class EvStateChanged:
    plane: int
    ev: int
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """Orderly end: everything we sent was acknowledged."""

    reason: str


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The connection is gone and undelivered data with it; ``reason`` says why.

    ``peer_forgot``: the peer answered UNKNOWN_CONN (it restarted or expired
    the connection); reconnecting and re-sending what was not acknowledged is
    safe and what the daemon does."""

    reason: str
    peer_forgot: bool = False


Event = (
    ConnectionEstablished
    | MessageDelivered
    | MessageAcked
    | EvStateChanged
    | ConnectionClosed
    | ConnectionFailed
)
