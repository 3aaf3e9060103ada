"""Connection parameters (one frozen dataclass, validated once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
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
    #: ... and at most this much of one plane's rate (``plane_rate``; never
    #: under one packet; 0: ``spray_run`` alone): a run lands in one
    #: plane's queue at once, and the planes drift apart by runs, so its
    #: length is queue in time, not in packets. 1 ms keeps 8 packets at
    #: 100 Mbit/s and makes a run one packet at 12 (decision 0037).
    spray_run_time: float = 1e-3
    #: Bytes a DATA packet adds on the wire beyond its payload: its header
    #: and tags (84), UDP (8), IP (40 for IPv6, as ``payload_size`` is sized)
    #: and Ethernet (14). ``plane_rate`` is counted on the wire and the pacer
    #: counts payload, so its cap is ``pace_share`` of the line rate. 0: the
    #: pacer may send payload at the full line rate, ~109% of the wire's rate
    #: (the simulated fabric's scenarios a-k are calibrated that way).
    frame_overhead: int = 0
    #: The share of the wire's line rate the pacer may use (``pace_share``).
    #: Under 1 the first hop's queue drains between a host's wakeups (on the
    #: testbed a shaped port's standing queue costs a softirq per packet) but
    #: the link's 10 ms windows then carry the host's jitter, with no queue to
    #: cover it: the host profile leaves 1% (decision 0045). The window's cap
    #: (maxwnd) is unchanged.
    pace_headroom: float = 1.0
    #: The endpoint's connections that have data to send share one maxwnd
    #: (NSCC deviation 8, ``transport/host_share.py``): False gives each its own.
    host_share: bool = True

    def run_packets(self, k: int | None = None) -> int:
        """The spray run a connection uses: ``k`` (default ``spray_run``)
        packets, at most ``spray_run_time`` of a plane's rate, at least one."""
        k = self.spray_run if k is None else k
        if self.spray_run_time > 0:
            k = min(k, max(1, int(self.plane_rate * self.spray_run_time // self.payload_size)))
        return k

    def pace_share(self) -> float:
        """The share of the line rate (``plane_rate`` x planes) the controller
        may pace payload at: payload / (payload + ``frame_overhead``) x
        ``pace_headroom``."""
        return self.payload_size / (self.payload_size + self.frame_overhead) \
            * self.pace_headroom

    def __post_init__(self) -> None:
        if not 1 <= self.planes <= 255:
            raise ValueError("planes must be 1..255")
        if self.evs_per_plane < 1:
            raise ValueError("evs_per_plane must be ≥ 1")
        if not 0 <= self.frame_overhead <= 65000:
            raise ValueError("frame_overhead must be 0..65000 bytes")
        if not 0 < self.pace_headroom <= 1:
            raise ValueError("pace_headroom must be in (0, 1]")
        if not 64 <= self.payload_size <= 65000:
            raise ValueError("payload_size must be 64..65000")
        if not 1 <= self.spray_run <= 64:
            raise ValueError("spray_run must be 1..64")
        if not 0 <= self.spray_run_time <= 1:
            raise ValueError("spray_run_time must be 0..1 seconds")
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


#: Named starting points for a ``ConnectionConfig``: each maps fields to the
#: value they take instead of the dataclass default. ``profile(name, **kw)``
#: builds one (``kw`` replaces whole fields, ``congestion_params`` included).
#:
#: ``fabric`` — the simulator's scenarios (``testbed.sim.scenarios.default_config``
#: adds the fabric's own plane rate, base RTT and an RTO of 10 base RTTs):
#:
#: - ``evs_per_plane`` 16: enough EVs to spread over the simulated spines and
#:   few enough to keep scenario state small; the dataclass keeps 32.
#:
#: ``host`` — a software host, what ``braid daemon`` runs (overridable in the
#: TOML ``[connection]`` table) and what the host-like scenarios and benches
#: copy. The RTT a Python endpoint sees is dominated by its own event loop
#: (~0.1-3 ms), so:
#:
#: - ``congestion_params.target_delay`` 2 ms and ``min_rto`` 40 ms: measured with
#:   ``braid bench goodput``, 5 ms / 0.5 ms gave spurious RTOs and a small
#:   window; min_rto stays 40 ms because on the eBPF fabric the RTT a busy
#:   Python daemon sees still spikes to 50-130 ms (docs/daemon.md).
#: - ``congestion_params.burst_packets`` 64: pacing bursts must cover the
#:   loop's 1 ms timer granularity.
#: - ``ack_every`` 32: one SACK per 32 DATA packets, not 4: 16 halved the
#:   per-packet Python work on both sides and doubled goodput, 32 took another
#:   ~14% off the CPU per GB (docs/daemon.md); the 64-PSN SACK bitmap still
#:   covers two SACKs' worth.
#: - ``initial_rtt`` 1 ms: only NSCC's first guess; it learns the base RTT from
#:   samples (the namespace testbed's ~0.05 ms through eBPF ports and ~1-10 ms
#:   through userspace ones both work).
#: - ``plane_rate`` 10 Gbit/s: not learned; a host should be told its plane's
#:   bottleneck (the testbed writes ``testbed.topology.connection_plane_rate``),
#:   10 Gbit/s is only the default.
#: - ``evs_per_plane`` 32, ``idle_fail_timeout`` 5 s, ``handshake_timeout`` 2 s:
#:   a busy host may stall for a second without the connection failing.
#: - ``frame_overhead`` 146, ``pace_headroom`` 0.99: ``plane_rate`` is the
#:   wire's rate and the pacer counts payload; without them the host paced
#:   ~109% of the wire and kept a standing queue at its first hop (decision
#:   0045).
#: - ``spray_run`` 8: runs of 8 packets per EV, one UDP GSO send each
#:   (docs/benchmarks.md, "CPU per gigabyte": what it costs in load balance,
#:   scenarios a-j).
PROFILES: dict[str, dict[str, Any]] = {
    "fabric": {
        "evs_per_plane": 16,
    },
    "host": {
        "evs_per_plane": 32,
        "ack_every": 32,
        "plane_rate": 1.25e9,
        "initial_rtt": 1e-3,
        "min_rto": 40e-3,
        "idle_fail_timeout": 5.0,
        "handshake_timeout": 2.0,
        "congestion_params": {"burst_packets": 64, "target_delay": 2e-3},
        "spray_run": 8,
        "frame_overhead": 146,
        "pace_headroom": 0.99,
    },
}


def profile_values(name: str) -> dict[str, Any]:
    """A fresh copy of profile ``name``'s field values (dicts copied too)."""
    try:
        values = PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown connection profile {name!r}; known: "
                       f"{', '.join(sorted(PROFILES))}") from None
    return {k: dict(v) if isinstance(v, dict) else v for k, v in values.items()}


def profile(name: str, **overrides: Any) -> ConnectionConfig:
    """``ConnectionConfig`` of profile ``name`` with ``overrides`` on top."""
    return ConnectionConfig(**{**profile_values(name), **overrides})
