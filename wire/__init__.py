"""Braid wire format v1: packet layouts, sealing and untrusted decoding.

See ``wire/SPEC.md`` for the byte-level specification.
"""

from wire.codec import HandshakeCodec, Opener, Packet, ReplayWindow, Sealer, peek_untrusted
from wire.constants import (
    UDP_PORT,
    VERSION,
    CloseReason,
    Dscp,
    Flag,
    NackReason,
    PacketType,
    trim_point,
)
from wire.errors import WireError
from wire.keys import ConnectionKeys, DirectionKeys, derive_connection_keys
from wire.packets import (
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
    UnknownConn,
)

__all__ = [
    "UDP_PORT",
    "VERSION",
    "Accept",
    "Body",
    "Close",
    "CloseReason",
    "CommonHeader",
    "ConnectionKeys",
    "Data",
    "DirectionKeys",
    "Dscp",
    "Flag",
    "HandshakeCodec",
    "Init",
    "Nack",
    "NackReason",
    "Opener",
    "Packet",
    "PacketType",
    "Probe",
    "ProbeAck",
    "ReplayWindow",
    "Reset",
    "Sack",
    "Sealer",
    "UnknownConn",
    "WireError",
    "derive_connection_keys",
    "peek_untrusted",
    "trim_point",
]
