"""The connection's shared state and the small helpers every part uses.

``Connection`` (``connection.py``) is one object built in layers, bottom up:
this core (state, failure, control paths, the loss verdicts applied),
``conn_handshake`` (INIT/ACCEPT, keys), ``conn_lifecycle`` (timers, close,
expiry), ``conn_dispatch`` (the receive path) and ``conn_scheduler`` (what
goes out, ``_output``).
"""

from __future__ import annotations

import math
from collections import deque

from congestion import registry as cc_registry
from transport.config import ConnectionConfig
from transport.conn_state import TERMINAL, ConnEvent, ConnState, next_state
from transport.datagram import Outgoing, TxPath
from transport.events import ConnectionFailed, Event
from transport.host_share import HostShare
from transport.loss_policy import LossCause, LossHistory, LossKind, QueueSensor, classify
from transport.path_health import PathHealth
from transport.paths import PathPolicy, get_policy
from transport.paths.rtt import PathModel
from transport.psn import wire as psn_wire
from transport.receiver import Receiver
from transport.sender import Sender, SentPacket
from wire.codec import HandshakeCodec, Opener, Sealer
from wire.constants import CloseReason, Dscp, Flag
from wire.keys import DirectionKeys, new_nonce
from wire.packets import Reset

_CLOSE_RETRIES = 5
#: The srtt log's spacing (s) and length (entries): 5 s of a connection's
#: life, newest kept (``Connection.stats``' ``srtt_log``).
SRTT_LOG_EVERY = 10e-3
SRTT_LOG_LEN = 512
_NONE_PARKED: frozenset[int] = frozenset()
#: What the sender allows for the peer's ACK delay before its SACKs report one
#: (the SACK ``ACK Delay`` field; ``Sender.ack_delay`` learns it from there).
PEER_ACK_DELAY = 20e-6
#: An ACK delay up to this is shorter than an event-loop wakeup: the I/O layer
#: sends such held SACKs once it has read its sockets (``flush_ack``).
FLUSH_ACK_DELAY = 100e-6
#: With such an ACK delay, how long a held SACK may wait across reads for
#: more packets before the end of a read sends it (``Receiver.flush_due``):
#: at a paced rate a read brings one or two packets, and a SACK per read cost
#: more CPU than the data (docs/decisions/0021-ack-per-batch-and-paced-runs.md).
ACK_BATCH_DELAY = 500e-6
#: Probe id of a credit probe: the receiver answers it with a SACK (its
#: current credit edge), not a PROBE_ACK; path probes count from 1.
_CREDIT_PROBE_ID = 0
# Plain ints for the per-packet paths: `IntFlag & int` runs Python-level enum
# code (~0.5 µs a time, measured by the wire benchmark's author).
_ACK_REQ = int(Flag.ACK_REQ)
_ECN_ECHO = int(Flag.ECN_ECHO)
_RETX = int(Flag.RETX)
_LAST = int(Flag.LAST)
_DSCP_DATA = int(Dscp.DATA)
_DSCP_RETX = int(Dscp.RETX)


def _us(now: float) -> int:
    return int(now * 1e6) & 0xFFFFFFFF


class ConnCore:
    """State shared by the parts of ``Connection`` (use ``Connection``)."""

    def __init__(self, *, config: ConnectionConfig, secret: bytes | None, local_cid: int,
                 now: float, initiator: bool) -> None:
        self.config = config
        self.initiator = initiator
        self.local_cid = local_cid
        self.remote_cid = 0
        self.state = ConnState.HANDSHAKING
        self.failure_reason: str | None = None
        self._secret = secret
        self._hs = HandshakeCodec(secret)
        self._nonce = new_nonce()
        self._peer_nonce = b""
        self._sealer: Sealer | None = None
        self._opener: Opener | None = None
        # A responder builds its opener (and its 8192-slot replay window) only
        # when the first connection packet arrives: a replayed INIT costs less.
        self._opener_keys: DirectionKeys | bool | None = False
        #: (send, receive) keys once derived, for a key log (``wire.keylog``).
        self.traffic_keys: tuple[DirectionKeys, DirectionKeys] | None = None
        self._created = now
        self._now = now
        c = config
        #: Per-plane and per-EV RTT and last-heard times: one owner, read by
        #: the sender's loss thresholds, the EV set's liveness, path health
        #: and the congestion controller's base RTTs.
        self.path_model = PathModel(c.planes)
        self.paths: PathPolicy = get_policy(
            c.path_policy, planes=c.planes, evs_per_plane=c.evs_per_plane,
            seed=c.seed, base_rtt=c.initial_rtt, spray_run=c.run_packets(),
            **{"late_floor": c.min_rto / 4, "model": self.path_model, **c.path_params},
        )
        self.cc = cc_registry.for_connection(
            c.congestion, mtu=c.payload_size, base_rtt=c.initial_rtt,
            line_rate=c.plane_rate * c.planes, pace_share=c.pace_share(),
            params=c.congestion_params, paths=self.path_model)
        #: The loss classifier's per-connection delay history, fed by a
        #: controller that measures queueing delay (None: it does not).
        self.loss_history: LossHistory | None = None
        #: The controller as a ``QueueSensor``, decided once here (None: it
        #: measures no queueing delay): a runtime protocol check costs ~8 us,
        #: too much for every batch of losses.
        self._sensor: QueueSensor | None = None
        if isinstance(self.cc, QueueSensor):
            self._sensor = self.cc
            self.loss_history = LossHistory(self.cc.calm_rtts)
            self.cc.report_delays(self.loss_history.note_delay)
        #: The endpoint's sending connections, which share its maxwnd (None: alone).
        self.host_share: HostShare | None = None
        self.sender = Sender(
            payload_size=c.payload_size, initial_rtt=c.initial_rtt, min_rto=c.min_rto,
            max_rto=c.max_rto, reorder_fraction=c.reorder_fraction,
            ack_delay=min(c.ack_delay, PEER_ACK_DELAY),
            psn_window=c.psn_window, initial_psn=c.initial_psn, path_model=self.path_model,
        )
        self.receiver = Receiver(
            ack_every=c.ack_every, ack_delay=c.ack_delay, psn_window=c.psn_window,
            max_message_size=c.max_message_size, slice_size=c.payload_size,
            recv_window=c.recv_window, hold_delivered=c.hold_delivered,
            initial_psn=c.initial_psn,
        )
        self._events: deque[Event] = deque()
        #: Planes not parked, as the controller was last told (its line rate).
        self._planes_up: int = self.config.planes
        #: Planes parked, as ``_note_ev_changes`` last saw them.
        self._parked: frozenset[int] = _NONE_PARKED
        #: The smoothed RTT over time (connection clock, srtt), at most one
        #: entry per ``SRTT_LOG_EVERY``, the newest ``SRTT_LOG_LEN``: what a
        #: fault's yardstick reads (the srtt at a stall's start; the one at
        #: the end of a run is the emptied queue's). Made at the first sample:
        #: a half-open connection holds none.
        self.srtt_log: deque[tuple[float, float]] | None = None
        self._srtt_log_next = 0.0  # a constant: a half-open connection's bytes count
        self._control: list[tuple[Outgoing, TxPath]] = []
        #: Data TxPaths by (plane << 24 | EV << 8 | DSCP): immutable, built once.
        self._tx_paths: dict[int, TxPath] = {}
        #: Hand out a new-data run as one ``SealedRun`` (True: the I/O layer
        #: sends it in one UDP GSO call) or as its datagrams (False).
        self.sealed_runs = False
        #: Paced new data waits for the tokens of a spray run per plane that
        #: is up (or of what is queued, if less) and leaves as those runs
        #: (``_output``); False: a packet as soon as its tokens are there.
        self.paced_runs = False
        #: The I/O layer reads every plane's socket to the end before it acts
        #: (``Endpoint.end_read``): loss inference waits for the end of the
        #: read (``_on_sack``, ``end_read``); False: after each SACK.
        self.read_batches = False
        #: A SACK of this read was taken without loss inference: when the
        #: newest of them reached the host (-inf: none).
        self._loss_check_at = -math.inf
        self._hs_packet: bytes | None = None
        self._hs_deadline: float | None = None
        self._hs_tries = 0
        self._close_deadline: float | None = None
        self._close_tries = 0
        self._close_reason = CloseReason.NORMAL
        self.health = PathHealth(self.paths, planes=c.planes, now=now, ack_every=c.ack_every)
        self.sender.last_progress = now
        #: Last authenticated packet of the peer (responder expiry); a responder
        #: is "confirmed" once one arrived after its ACCEPT.
        self.last_heard = now
        self.confirmed = initiator
        self._persist_at: float | None = None
        self._persist_tries = 0  # unanswered credit probes (reset by any SACK)
        self._persist_backoff = 0  # reset only when credit arrives
        self.dropped: dict[str, int] = {}
        self.trims_fabric = 0
        #: Sends the host's own stack refused for want of a route (link down).
        self.unreachable_sends = 0
        self.trims_last_hop = 0
        #: Planes whose first data packet has not gone out yet: it asks for an
        #: immediate ACK. The controller's per-plane base RTT is that plane's
        #: smallest sample; with ACKs every ``ack_every`` packets a plane's
        #: first sample could come from a packet sent behind the connection's
        #: own initial window (a 4-to-1 incast: the second plane's base
        #: read 4.3 ms for a 0.6 ms path, so half of all ACKs said "no queue" at
        #: 4 ms of queueing). With one plane every sample shares one base and
        #: the first regular ACK is taken as it always was (asking there
        #: shrinks the first RTT estimate below the initial window's own
        #: queue: scenario i then called queued packets lost).
        self._rtt_unsampled: set[int] = set(range(c.planes)) if c.planes > 1 else set()
        #: Work avoidance for a host with many connections, whose I/O layer
        #: asks every one of them on every pass (``Endpoint``): while nothing
        #: has reached the connection (a datagram, a timer, an API call) since
        #: a ``datagrams_to_send`` that found nothing to send, the next one
        #: answers [] without looking, and ``next_timer`` keeps its answer
        #: until something does. Output that time alone makes due (pacing,
        #: probes, retransmission) has a deadline in ``next_timer``, and a due
        #: deadline comes in through ``handle_timer``.
        self._stirred = True
        self._timer_known = False
        self._timer_at: float | None = None

    # -- state -------------------------------------------------------------------

    def _transition(self, event: ConnEvent) -> None:
        self.state = next_state(self.state, event)

    @property
    def is_established(self) -> bool:
        return self.state in (ConnState.ESTABLISHED, ConnState.DRAINING)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    def _fail(self, event: ConnEvent, reason: str, *, tell_peer: bool, now: float,
              code: CloseReason = CloseReason.RETRY_BUDGET, peer_forgot: bool = False) -> None:
        if self.is_terminal:
            return
        if tell_peer and self._sealer is not None:
            self._control.append((self._sealer.seal(Reset(code, psn_wire(self.sender.next_psn))),
                                  self._ctl_path(0)))
        # The table draws the expected failing edges (docs/state-machines.md);
        # a failure is final from any state, so it is applied unconditionally.
        self.state = ConnState.FAILED
        self.failure_reason = reason
        self.receiver.discard()
        self._events.append(ConnectionFailed(reason, peer_forgot))

    # -- paths -------------------------------------------------------------------

    def _ctl_path(self, plane: int) -> TxPath:
        """The path of a control packet answering on ``plane`` (``PathHealth.control_path``)."""
        return self.health.control_path(plane)

    # -- input -------------------------------------------------------------------

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _send_sack(self, now: float, batch: bool = False) -> None:
        assert self._sealer is not None
        for due in self.receiver.make_sacks(now, self.sender.rtt.srtt, batch=batch):
            flags = _ECN_ECHO if due.ecn_echo else 0
            self._control.append((self._sealer.seal(due.sack, flags=flags),
                                  self._ctl_path(due.plane)))

    def _on_lost(self, lost: list[SentPacket], now: float, *, cause: LossCause) -> None:
        """Packets the sender declared lost: each is classified once by the
        loss policy (``transport/loss_policy.py``), and the controller, path
        health and the resends read its verdict."""
        if not lost:
            return
        rtt, cc = self.sender.rtt, self.cc
        sensor = self._sensor
        verdicts = classify(lost, cause=cause, srtt=rtt.srtt, min_rtt=rtt.min_rtt,
                            target_delay=cc.target_delay, health=self.health,
                            history=None if sensor is None else self.loss_history,
                            queue_level=0.0 if sensor is None else sensor.queue_level)
        cc_bytes = self.sender.on_verdicts(lost, verdicts)
        if sensor is not None:
            rand = sum(p.length for p, v in zip(lost, verdicts, strict=True)
                       if v.kind is LossKind.RANDOM)
            if rand:
                sensor.on_random_loss(now=now, lost_bytes=rand)
        if cc_bytes or cause is LossCause.RTO:
            if sensor is not None:
                # The classifier's overflow answer, the same for the batch.
                overflow = next((v.overflow for v in verdicts if v.to_controller), None)
                sensor.on_loss(now=now, lost_bytes=cc_bytes, overflow=overflow)
            else:
                cc.on_loss(now=now, lost_bytes=cc_bytes)
        self.health.on_lost(lost, verdicts, now)

    @property
    def initiator_of_close(self) -> bool:
        return self._close_tries > 0

    def _note_ev_changes(self) -> None:
        """Report EV state changes as events."""
        changes = self.health.take_changes()
        if changes:
            self._events.extend(changes)
            parked = frozenset(self.paths.parked_planes())
            # What is in flight on a plane just parked for silence is resent
            # elsewhere now, not one time-rule wait (the dead plane's srtt in
            # it) later, and no longer holds the window shut (decision 0040).
            for plane in parked - self._parked:
                if (self.paths.ev_set.park_cause(plane) == "silence"
                        and self.sender.sweep_plane(plane, parked=True)):
                    self._stir()
            self._parked = parked
            # A plane parked or back: the controller's line rate is the
            # planes that are up (decision 0030).
            up = max(1, self.config.planes - len(parked))
            if up != self._planes_up:
                self._planes_up = up
                self.cc.set_line_rate(self.config.plane_rate * up)

    def _release_bytes(self) -> int:
        """The bytes the pacer's tokens must cover before new data leaves: a
        spray run per plane that is up (or what is queued, if less) with
        ``paced_runs``, one packet otherwise or while resends wait. The send
        loop gates on it and ``next_timer`` arms for it: the same figure, so
        a pacing timer finds its release."""
        size = self.config.payload_size
        s = self.sender
        if self.paced_runs and self.paths.spray_run > 1 and not s.retx_queue:
            return max(size, s.new_bytes_upto(self.paths.spray_run * self._planes_up * size))
        return size

    def _stir(self) -> None:
        """Something reached the connection: the next ``datagrams_to_send``
        looks, and ``next_timer`` is computed afresh."""
        self._stirred = True
        self._timer_known = False
