"""What the connection learns about its paths, fed to the path policy.

The EV set (``transport/paths/``) owns EV states; this module feeds it the
evidence (per ACK, per trim, per probe, and per loss as the loss policy
classified it), keeps each EV's loss score, runs the probes, gives the
policy the evidence of life a retransmission's EV is re-picked by
(``_life``), and turns state changes into events. The EVs themselves are
picked by the policy (``transport/paths/policy.py``: ``choose_ev``,
``choose_run``, ``control_ev``).
Kept apart from the connection so the connection only wires halves together.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from transport.datagram import Outgoing, TxPath
from transport.events import EvStateChanged
from transport.loss_policy import LOSS_PENALTY, LossVerdict
from transport.paths import Ev, PathPolicy
from transport.sender import SentPacket
from wire.codec import Sealer
from wire.constants import Dscp
from wire.packets import Probe, ProbeAck

_MAX_OUTSTANDING_PROBES = 4096
#: A plane's newest answer is timely if it came within this many of the
#: connection's smoothed RTTs of the packet it answered.
TIMELY_RTTS = 8


class PathHealth:
    def __init__(self, paths: PathPolicy, *, planes: int, now: float,
                 ack_every: int = 4) -> None:
        self.paths = paths
        self.planes = planes
        # One lost SACK leaves up to ack_every sends unanswered: more than
        # that is a plane that stopped answering.
        es = paths.ev_set
        es.plane_silent_sends = max(es.plane_silent_sends, ack_every + 1)
        #: Per-EV loss score by EV value (``loss_policy.LOSS_PENALTY``).
        self._score: dict[int, int] = {}
        #: Last time anything came back from each plane (ACK, trim NACK,
        #: probe): the path model's, which the EV set writes as it hears.
        self.model = es.model
        self.model.heard[:planes] = [now] * planes
        self._probes: dict[int, tuple[Ev, float]] = {}
        self._next_probe_id = 1
        self.probes_sent = 0
        self.stale_probe_acks = 0

    @property
    def plane_heard(self) -> list[float]:
        return self.model.heard

    @plane_heard.setter
    def plane_heard(self, heard: list[float]) -> None:
        self.model.heard[:] = heard

    def reset_heard(self, now: float) -> None:
        self.model.heard[:] = [now] * self.planes

    def loss_score(self, ev: Ev) -> int:
        return self._score.get(ev.value, 0)

    def plane_answered_sent(self, plane: int) -> float:
        return self.paths.ev_set.plane_answered_sent(plane)

    def on_sent(self, ev: Ev, now: float) -> None:
        """A data packet left on ``ev`` (times the plane's unanswered sends)."""
        self.paths.ev_set.on_sent(ev, now)

    def on_sent_run(self, ev: Ev, now: float, n: int) -> None:
        """``n`` data packets left on ``ev`` at ``now``."""
        self.paths.ev_set.on_sent_run(ev, now, n)

    def set_rtt(self, srtt: float, ack_delay: float) -> None:
        """The measured smoothed RTT: plane silence is counted in it."""
        self.paths.ev_set.set_rtt(srtt, ack_delay)

    def plane_rtt(self, plane: int, rtt: float, now: float) -> None:
        """A round-trip sample of one plane: its liveness is timed by it, and
        the policy may weigh planes by it."""
        self.paths.ev_set.on_plane_rtt(plane, rtt, now)

    def plane_base(self, plane: int, rtt: float) -> None:
        """A round trip through ``plane`` without its data queue (a trimmed
        header's): the policy's plane shares take it as a base RTT."""
        self.paths.ev_set.on_plane_base(plane, rtt)

    def on_acked(self, acked: Iterable[SentPacket], now: float, *, ecn_ev: int | None,
                 sampled: SentPacket | None, rtt: float | None) -> None:
        """Credit each EV whose packet was acknowledged (exactly: see Karn)."""
        scores = self._score
        if ecn_ev is None:
            self._on_acked_runs(acked, now, sampled, rtt)
            return
        for p in acked:
            ev = p.ev
            if ev is None or not p.ack_exact:
                continue
            self.paths.ev_set.on_ack(ev, now, ev.value == ecn_ev, rtt if p is sampled else None,
                              p.sent_time)
            s = scores.get(ev.value)
            if s:
                scores[ev.value] = s - 1

    def _on_acked_runs(self, acked: Iterable[SentPacket], now: float,
                       sampled: SentPacket | None, rtt: float | None) -> None:
        """``on_acked`` without an ECN echo, one call per run of consecutive
        packets of one EV (a spray run is acknowledged together): without a
        mark, one EV's per-packet credits commute (counts add, the plane hears
        the newest send time, the loss score decays by the count), so
        crediting a run at once leaves the state per-packet crediting would
        (SACK processing per run, not per packet)."""
        run_ev: Ev | None = None
        n = 0
        newest = 0.0
        run_rtt: float | None = None
        for p in acked:
            ev = p.ev
            if ev is None or not p.ack_exact:
                continue
            if ev is not run_ev:
                if run_ev is not None:
                    self._credit_run(run_ev, n, now, run_rtt, newest)
                run_ev, n, newest, run_rtt = ev, 0, p.sent_time, None
            n += 1
            if p.sent_time > newest:
                newest = p.sent_time
            if p is sampled:
                run_rtt = rtt
        if run_ev is not None:
            self._credit_run(run_ev, n, now, run_rtt, newest)

    def _credit_run(self, ev: Ev, n: int, now: float, rtt: float | None,
                    newest: float) -> None:
        self.paths.ev_set.on_acks(ev, now, n, rtt, newest)
        s = self._score.get(ev.value)
        if s:
            self._score[ev.value] = max(0, s - n)

    def on_lost(self, lost: Sequence[SentPacket], verdicts: Sequence[LossVerdict],
                now: float) -> None:
        """Apply the loss policy's verdicts (``transport/loss_policy.py``):
        a condemned EV goes ASSUMED_BAD and its score starts again; any other
        loss raises the EV's score and is evidence about its plane only, where
        the time since the plane's oldest unanswered send decides."""
        for p, v in zip(lost, verdicts, strict=True):
            ev = p.ev
            if ev is None:
                continue
            if v.condemn:
                self.paths.ev_set.on_loss(ev, now, p.sent_time)
                self._score[ev.value] = 0
            else:
                self.paths.ev_set.on_plane_loss(ev, now, p.sent_time)
                self._score[ev.value] = self._score.get(ev.value, 0) + LOSS_PENALTY

    def on_trim(self, ev: Ev, now: float, *, last_hop: bool, sent: float | None = None) -> None:
        self.paths.ev_set.on_trim(ev, now, last_hop, sent)

    def _life(self, plane: int, now: float, srtt: float) -> int:
        """How much evidence of life ``plane`` shows: 2 if it answered within
        the last two smoothed RTTs and that answer was timely, 1 if its newest
        answer was timely however long ago (an idle plane), 0 if that answer
        came more than ``TIMELY_RTTS`` smoothed RTTs after the packet it
        answered (what it answered is unknown, no packet timed yet: judged by
        recency alone).

        Timely matters as much as recent: a plane behind seconds of queue (a
        rate cut's) answers all the time, but each answer is for a packet sent
        seconds ago. Counted as alive, it drew every resend of a window
        shrunk to one packet by the RTO, held each beyond the next RTO, and
        the retry budget was spent while the healthy planes idled
        (testbed/sim/scenarios_peer_gone.py, a plane cut to 1/100)."""
        heard, answered = self.model.heard[plane], self.plane_answered_sent(plane)
        if answered > -math.inf and heard - answered > TIMELY_RTTS * srtt:
            return 0
        return 2 if heard >= now - 2 * srtt else 1

    def control_path(self, plane: int) -> TxPath:
        """Control packets go back on the plane they answer (a dead plane then
        stays silent, which is what the peer needs to notice), on a GOOD EV of
        it if there is one (ECMP hashes the source port the same way for a
        SACK as for DATA: not into a spine our own data found queued or
        dead), else on any EV not found dead, else on any.

        ``plane`` must be a plane this host received on or chose itself, never
        a number read from a packet; anything outside 0..planes-1 is folded
        back into range so no caller can name a plane that does not exist.
        The policy picks the EV (``PathPolicy.control_ev``)."""
        plane %= self.planes
        return TxPath(plane, self.paths.control_ev(plane).value, Dscp.CONTROL)

    def pick_run(self, now: float, limit: int) -> tuple[Ev | None, int]:
        """``pick`` for new data, for up to ``limit`` packets at once: the EV
        and how many packets take it (the rest of the policy's spray run,
        or one on the last resort: ``PathPolicy.choose_run``). Unsent ones go
        back with ``unsend_run``."""
        return self.paths.choose_run(now, limit)

    def unsend_run(self, ev: Ev, n: int) -> None:
        self.paths.unsend_run(ev, n)

    def pick(self, now: float, avoid: Ev | None, srtt: float) -> Ev | None:
        """The EV for the next packet (``PathPolicy.choose_ev``); a
        retransmission (``avoid`` is the EV it last took) is re-picked by the
        evidence of life of each plane here (``_life``)."""
        if avoid is None:
            return self.paths.choose_ev(now)
        return self.paths.choose_ev(now, avoid, lambda plane: self._life(plane, now, srtt))

    # -- probes ------------------------------------------------------------------

    def send_probes(self, now: float, sealer: Sealer, *, psn: int, timestamp: int,
                    out: list[tuple[Outgoing, TxPath]]) -> None:
        for ev in self.paths.ev_set.due_probes(now):
            pid = self._next_probe_id
            self._next_probe_id = (pid + 1) & 0xFFFFFFFF or 1
            self._probes[pid] = (ev, now)
            probe = Probe(pid, ev.value, psn, timestamp, ev.plane)
            out.append((sealer.seal(probe), TxPath(ev.plane, ev.value, Dscp.CONTROL)))
            self.paths.ev_set.on_probe_sent(ev, now)
            self.probes_sent += 1
        if len(self._probes) > _MAX_OUTSTANDING_PROBES:  # answers that never came
            for pid in list(self._probes)[: _MAX_OUTSTANDING_PROBES // 2]:
                del self._probes[pid]

    def on_probe_ack(self, ack: ProbeAck, now: float) -> bool:
        entry = self._probes.pop(ack.probe_id, None)
        if entry is None:
            self.stale_probe_acks += 1
            return False
        ev, sent = entry
        self.paths.ev_set.on_probe_ack(ev, now, now - sent)
        return True

    def take_changes(self) -> list[EvStateChanged]:
        changes = self.paths.ev_set.changes
        if not changes:
            return []
        out = [EvStateChanged(ev.plane, ev.value, old.value, new.value)
               for ev, old, new in changes]
        changes.clear()
        return out
