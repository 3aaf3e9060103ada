"""Connection parameters (one frozen dataclass, validated once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ConnectionConfig:
    """How a connection behaves. Times are seconds, sizes bytes.

    ``payload_size`` defaults to what fits a 1500-byte MTU over IPv6:
    1500 − 40 (IPv6) − 8 (UDP) − 68 (DATA header + tag) − 16 (payload tag).
    """

    planes: int = 4
    evs_per_plane: int = 32
    payload_size: int = 1368
    path_policy: str = "spray"
    path_params: dict[str, Any] = field(default_factory=dict)
    congestion: str = "nscc"
    congestion_params: dict[str, Any] = field(default_factory=dict)
    #: First guess of the path RTT, before any sample (also NSCC's base RTT).
    initial_rtt: float = 100e-6
    #: Line rate of one plane (bytes/s), for the initial window and pacing.
    plane_rate: float = 12.5e6
    #: Receiver: SACK after this many DATA packets, or once ack_delay has run
    #: out (each SACK reports its hold: wire/SPEC.md 3.2, "ACK delay").
    ack_every: int = 4
    ack_delay: float = 20e-6
    #: Loss recovery.
    min_rto: float = 200e-6
    max_rto: float = 0.5
    reorder_fraction: float = 0.25
    #: Consecutive RTOs without any progress before the connection fails.
    max_rto_retries: int = 10
    #: No acknowledged progress for this long while data is outstanding: fail.
    idle_fail_timeout: float = 2.0
    handshake_timeout: float = 2.0
    #: Max PSN distance the receiver tracks above its cumulative PSN.
    psn_window: int = 1 << 16
    #: Largest message; at most recv_window (a message is held whole until delivered).
    max_message_size: int = 64 << 20
    #: Receive credit: bytes this end holds for one connection — slices of
    #: incomplete messages plus, with hold_delivered, delivered messages not
    #: yet consumed (Connection.consume). The peer never sends beyond it.
    recv_window: int = 64 << 20
    #: Delivered messages keep their credit until the application consumes
    #: them (the daemon: until a client took them from its inbox).
    hold_delivered: bool = False
    #: A responder whose initiator never sent an authenticated packet after
    #: the ACCEPT is forgotten after this long (replayed or abandoned INITs).
    half_open_timeout: float = 3.0
    #: A responder with nothing outstanding that heard nothing for this long is
    #: forgotten (its peer crashed or never closed); a later packet of it is
    #: answered with UNKNOWN_CONN and the peer reconnects. 0 = never.
    idle_timeout: float = 60.0
    #: First PSN of the connection (0..2**32-1). PSNs are 32 bits on the wire
    #: and wrap; both ends must use the same value (the handshake does not
    #: carry it). A test knob: start near 2**32 to cross the wrap early.
    initial_psn: int = 0
    #: Largest burst datagrams_to_send() returns per call.
    max_burst: int = 64
    #: Seed of EV selection and rotation (connections must not synchronise).
    seed: int = 0
    #: Spray granularity: consecutive new packets sent on one EV (1 = every
    #: packet on the next EV). k > 1 lets the I/O layer hand a run to the
    #: kernel in one system call (UDP GSO); a run is also at most the
    #: burst's size over the planes that are up. See docs/benchmarks.md for
    #: what it costs in load balance.
    spray_run: int = 1
    #: The endpoint's connections that have data to send share one maxwnd
    #: (NSCC deviation 8, ``transport/host_share.py``): False gives each its own.
    host_share: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.planes <= 255:
            raise ValueError("planes must be 1..255")
        if self.evs_per_plane < 1:
            raise ValueError("evs_per_plane must be ≥ 1")
        if not 64 <= self.payload_size <= 65000:
            raise ValueError("payload_size must be 64..65000")
        if not 1 <= self.spray_run <= 64:
            raise ValueError("spray_run must be 1..64")
        if self.ack_every < 1:
            raise ValueError("ack_every must be ≥ 1")
        if not 1 << 20 <= self.recv_window < 1 << 31:
            raise ValueError("recv_window must be 1 MiB .. 2 GiB - 1")
        if not 0 <= self.max_message_size <= self.recv_window:
            raise ValueError("max_message_size must be 0..recv_window")
        if self.half_open_timeout <= 0 or self.idle_timeout < 0:
            raise ValueError("half_open_timeout must be > 0 and idle_timeout ≥ 0")
        if not 0 <= self.initial_psn <= 0xFFFFFFFF:
            raise ValueError("initial_psn must be 0..2**32-1")
