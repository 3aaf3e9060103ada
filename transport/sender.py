"""The sending half of a connection: segmentation, the in-flight table,
SACK/NACK processing and loss inference that survives spraying.

One object in four parts, bottom up: ``send_queue`` (messages, credit, the
PSN window), ``loss_detect`` (the loss rules), ``inflight`` (the in-flight
table, SACKs, RTT samples), ``tlp_rto`` (tail-loss probe, RTO); this module
builds it.

Loss rules (never a fixed duplicate-ACK count, which collapses under
spraying: QUIC stacks that keep RFC 9002's fixed packet threshold, aioquic
and quinn among them, declare reordered packets lost and resend them):
- per-EV order: a packet is lost if a packet sent *later on the same EV* was
  acknowledged (one EV is one FIFO path);
- time (RACK-like): a packet is lost if something sent after it was
  acknowledged and it has been out longer than its path's RTT plus a reorder
  window;
- a tail-loss probe (after TLP, RFC 8985): when nothing has come back for
  two smoothed RTTs plus the ACK delay, the newest two packets in flight (a
  lone one twice) are sent again (on other EVs), so a lost last packet —
  nothing sent after it to be acknowledged — costs about 3 RTTs, not an
  RTO; at most ``MAX_TLPS`` per silence before the RTO takes over;
- RTO with exponential backoff as the last resort;
- a trimmed-header NACK retransmits at once.
Retransmissions keep their PSN (the receiver's cumulative PSN must be able to
advance) but are sealed under a fresh counter and carry a fresh timestamp,
which the SACK echoes, so RTT samples are never ambiguous. A packet the loss
rules declare lost a second time (its resend was lost too), with no queue
behind the loss, is resent as two copies on two EVs with one timestamp
(``TWIN_AFTER_LOSSES``): on a path that loses at random the worst packet
otherwise takes a loss-detection delay per loss and holds its message; only
the SACK a copy triggers says which path carried it.
"""

from __future__ import annotations

from collections import deque

from transport.inflight import RECOVERY_BOUNDS_MS, RECOVERY_KEYS, AckResult
from transport.loss_policy import TWIN_AFTER_LOSSES
from transport.paths.rtt import PathModel, RttEstimator
from transport.send_queue import SentPacket, _Outbound
from transport.tlp_rto import MAX_TLPS, TLP_PACKETS, TailProbes
from wire.constants import INITIAL_CREDIT

__all__ = [
    "MAX_TLPS",
    "RECOVERY_BOUNDS_MS",
    "RECOVERY_KEYS",
    "TLP_PACKETS",
    "TWIN_AFTER_LOSSES",
    "AckResult",
    "RttEstimator",
    "Sender",
    "SentPacket",
]


class Sender(TailProbes):
    """Everything about data we sent; paths and congestion live elsewhere."""

    def __init__(self, *, payload_size: int, initial_rtt: float, min_rto: float,
                 max_rto: float, reorder_fraction: float, ack_delay: float,
                 psn_window: int, initial_psn: int = 0,
                 path_model: PathModel | None = None) -> None:
        self.payload_size = payload_size
        self.min_rto = min_rto
        self.max_rto = max_rto
        self.reorder_fraction = reorder_fraction
        #: How long the peer's receiver may hold a SACK back, as its SACKs
        #: report it (``ACK Delay``): a max that rises at once and decays over
        #: about 32 SACKs, never below ``ack_delay`` (the allowance before it
        #: reported anything). The loss, probe and silence timers wait for it.
        self.ack_delay = ack_delay
        self._ack_delay_floor = ack_delay
        self._peer_hold = 0.0
        self.psn_window = psn_window
        self.rtt = RttEstimator(initial_rtt)
        #: Every copy's round trip, also an older copy's that a SACK names
        #: after its PSN was resent: times the tail-loss probe only (below).
        self.every_rtt = RttEstimator(initial_rtt)
        # PSNs are unbounded integers here, 32 bits on the wire (transport.psn).
        self.next_psn = initial_psn
        self.next_msg_id = 1
        self.cum_acked = initial_psn
        self.inflight: dict[int, SentPacket] = {}
        self.bytes_in_flight = 0
        self.retx_queue: deque[SentPacket] = deque()
        self._outbound: deque[_Outbound] = deque()
        self._msg_segments: dict[int, int] = {}
        self._msg_size: dict[int, int] = {}
        self._seq = 0
        self.largest_acked_seq = -1
        self._ev_acked_seq: dict[int, int] = {}
        self.rto_backoff = 0
        self.consecutive_rtos = 0
        #: When the last acknowledgement arrived, or when data went out into an
        #: empty pipeline: "no progress" counts only time with something outstanding.
        self.last_progress = 0.0
        #: Receive credit: bytes of new data ever sent stay below the largest
        #: credit edge the receiver granted (wire/SPEC.md "Receive credit").
        self.credit_edge = INITIAL_CREDIT
        self.new_bytes_sent = 0
        #: Per-plane and per-EV RTT (shared with the EV set: one owner of
        #: each plane's RTT); the loss thresholds read it.
        self.path_model = path_model if path_model is not None else PathModel()
        #: Echoes already timed: a SACK repeated without new data (hole
        #: refresh, duplicate) echoes an old packet, whose age is no RTT.
        self._echoes: deque[int] = deque(maxlen=16)
        # Declared lost, not yet resent: an ack may still come (reordering).
        self._lost: dict[int, SentPacket] = {}
        #: Resent packets acknowledged by a SACK that did not name the older
        #: copy (the latest ``RESENT_MEMORY``): that copy's SACK may still come.
        self._resent_acked: dict[int, SentPacket] = {}
        # RACK-style reorder window growth after spurious loss declarations.
        self.reorder_extra = 0.0
        self.spurious_losses = 0
        # Counters for stats.
        self.packets_sent = 0
        self.retransmissions = 0
        self.lost_by_ev_order = 0
        self.lost_by_time = 0
        self.lost_by_rto = 0
        #: Swept from a plane the host could not send on (``sweep_plane``).
        self.lost_unreachable = 0
        #: Swept from a plane path health parked (``sweep_plane(parked=True)``).
        self.lost_on_park = 0
        self.rto_events = 0
        self.tlp_probes = 0
        #: Resends that went out as two copies (``TWIN_AFTER_LOSSES``).
        self.twin_resends = 0
        #: Resent packets by time from first send to acknowledgement, in the
        #: buckets of ``RECOVERY_BOUNDS_MS``; the slowest, and its sends.
        self.recovered = [0] * (len(RECOVERY_BOUNDS_MS) + 1)
        self.slowest_recovery = 0.0
        self.slowest_recovery_sends = 0
        self._ack_now = 0.0
        self._tlps = 0
        #: Probe packets queued by ``on_tlp`` and not yet sent: they go out
        #: past a full window (the connection counts them down).
        self.probes_due = 0
        self.nacks = 0
        self.bytes_acked = 0
