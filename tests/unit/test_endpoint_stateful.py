"""A stateful property test of an Endpoint pair plus an adversary that holds
the keys (hypothesis ``RuleBasedStateMachine``).

Rules interleave sends, idle gaps, loss / duplication / reordering, forged
DATA (structurally inconsistent slices), forged SACK (acknowledging PSNs never
sent) and NACK, and restarts of the receiving host. Invariants:
- nothing raises (any exception fails the test);
- state stays bounded: receive credit, reassembly, connections, in-flight;
- a message is delivered at most once per connection; on a connection that
  did not fail, every delivered message is byte-exact, and after the faults
  heal every message sent on it is delivered and acknowledged. A connection
  may instead fail — but always with a reason.

What a key holder can do and no receiver can detect (acknowledge a PSN that
was sent but not received, re-encrypt a slice with other bytes of the same
shape) is deliberately not in the adversary's repertoire: it is the
definition of holding the keys, not a robustness bug.

Reproducible in CI: derandomized, a fixed example budget (about 20 s on an
idle machine).
"""

from __future__ import annotations

import random
from dataclasses import replace

from duplex import CFG, SECRET, Duplex
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from transport.connection import Connection
from transport.endpoint import Endpoint
from transport.events import ConnectionFailed, MessageAcked, MessageDelivered
from wire.constants import NackReason, PacketType
from wire.packets import DATA_BODY, Nack, Sack

#: Small windows so credit, reassembly and retransmission limits are reached.
SM_CFG = replace(CFG, recv_window=1 << 20, max_message_size=256 << 10, idle_fail_timeout=3.0,
                 max_rto_retries=12, idle_timeout=20.0, half_open_timeout=2.0)
MAX_CONNECTIONS = 8


class EndpointPair(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rng = random.Random(0)
        self.a = Endpoint(config=SM_CFG, secret=SECRET, rng=random.Random(1),
                          max_connections=MAX_CONNECTIONS)
        self.b = Endpoint(config=SM_CFG, secret=SECRET, rng=random.Random(2),
                          max_connections=MAX_CONNECTIONS)
        self.d = Duplex(self.a, self.b)
        self.d.tamper = self._tamper
        self.loss = self.dup = self.reorder = 0.0
        self.captured: list[bytes] = []
        self.conn: Connection = self.a.connect("b", 0.0)
        self.conns: list[Connection] = [self.conn]
        #: (initiator cid, msg id) -> payload, per connection of a.
        self.sent: dict[tuple[int, int], bytes] = {}
        self.seq = 0

    # -- the link ------------------------------------------------------------------

    def _tamper(self, direction: str, data: bytes) -> list[bytes]:
        if direction == "ab" and data[1] == PacketType.DATA and len(self.captured) < 64:
            self.captured.append(data)
        r = self.rng.random()
        if r < self.loss:
            return []
        if r < self.loss + self.dup:
            return [data, data]
        if self.rng.random() < self.reorder:
            self.d.put(direction, data, 0, extra=self.rng.uniform(0, 5e-3))
            return []
        return [data]

    # -- rules ---------------------------------------------------------------------

    @rule(size=st.sampled_from([0, 1, 1367, 1368, 1369, 5000, 70_000, 250_000]))
    def send(self, size: int) -> None:
        if self.conn.is_terminal:
            self.conn = self.a.connect("b", self.d.now)
            self.conns.append(self.conn)
        self.seq += 1
        data = bytes((self.seq + i) & 0xFF for i in range(size))
        msg_id = self.conn.send_message(data)
        self.sent[(self.conn.local_cid, msg_id)] = data
        self.d.run_until(self.d.now + 1e-4)  # on the wire: forgeries now race real data

    @rule(gap=st.sampled_from([1e-4, 2e-3, 0.05, 1.0, 7.0]))
    def idle(self, gap: float) -> None:
        self.d.run_until(self.d.now + gap)

    @rule(loss=st.sampled_from([0.0, 0.05, 0.3]), dup=st.sampled_from([0.0, 0.1]),
          reorder=st.sampled_from([0.0, 0.3]))
    def faults(self, loss: float, dup: float, reorder: float) -> None:
        self.loss, self.dup, self.reorder = loss, dup, reorder

    @precondition(lambda self: bool(self.captured))
    @rule(kind=st.sampled_from(["msg_len", "offset", "misaligned", "too_large"]),
          pick=st.integers(0, 63), ahead=st.integers(0, 3))
    def forge_data(self, kind: str, pick: int, ahead: int) -> None:
        """A real DATA packet, re-sealed by the key holder with its structure
        bent, under a PSN the sender has not used yet (so the real packet that
        later takes that PSN looks like a duplicate to the receiver)."""
        conn = self._conn_of(self.captured[pick % len(self.captured)])
        if conn is None or conn._sealer is None:
            return
        _psn, ev, plane, _r, plen, mid, off, mlen, ts = DATA_BODY.unpack_from(
            self.captured[pick % len(self.captured)], 16)
        psn = conn.sender.next_psn + ahead
        size = SM_CFG.payload_size
        if kind == "msg_len":
            mlen = mlen + size
        elif kind == "offset":
            if mlen <= size:
                return
            off = (off + size) % (mlen - mlen % size or mlen)
            plen = min(size, mlen - off)
        elif kind == "misaligned":
            off, plen = 1, min(plen, mlen - 1) if mlen > 1 else 0
            if mlen <= 1:
                return
        else:
            mlen = SM_CFG.max_message_size + 1
        dg = conn._sealer.seal_data(psn=psn, ev=ev, plane=plane, msg_id=mid, msg_offset=off,
                                    msg_len=mlen, timestamp=ts, payload=b"\xee" * plen)
        self.d.put("ab", dg, plane)

    @rule(extra=st.integers(1, 1 << 20))
    def forge_sack_beyond(self, extra: int) -> None:
        """b's key holder acknowledges PSNs a never sent."""
        resp = self._responder()
        if resp is None or resp._sealer is None:
            return
        nxt = self.conn.sender.next_psn
        sack = Sack(nxt + extra, nxt, 1, nxt + extra, 0, 0, 0xFFFFFFFF, 0, 0)
        self.d.put("ba", resp._sealer.seal(sack), 0)

    @rule(psn=st.integers(0, 1 << 16), reason=st.sampled_from(list(NackReason)))
    def forge_nack(self, psn: int, reason: NackReason) -> None:
        resp = self._responder()
        if resp is None or resp._sealer is None:
            return
        self.d.put("ba", resp._sealer.seal(Nack(psn, 0, 0, 0, reason, 0)), 0)

    @rule()
    def restart_receiver(self) -> None:
        self.b = Endpoint(config=SM_CFG, secret=SECRET, rng=random.Random(self.seq + 3),
                          max_connections=MAX_CONNECTIONS)
        self.d.replace("b", self.b)

    # -- helpers -------------------------------------------------------------------

    def _conn_of(self, dgram: bytes) -> Connection | None:
        dcid = int.from_bytes(dgram[4:8], "big")
        return next((c for c in self.conns if c.remote_cid == dcid and not c.is_terminal),
                    None)

    def _responder(self) -> Connection | None:
        return next((c for c in self.b.connections.values()
                     if c.remote_cid == self.conn.local_cid and not c.is_terminal), None)

    def _failed(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for name in ("a", "b"):
            for conn, ev in self.d.events[name]:
                if isinstance(ev, ConnectionFailed):
                    assert ev.reason, "a connection failed without a reason"
                    cid = conn.local_cid if name == "a" else conn.remote_cid
                    out[cid] = ev.reason
        return out

    def _delivered(self) -> dict[tuple[int, int], list[bytes]]:
        out: dict[tuple[int, int], list[bytes]] = {}
        for conn, ev in self.d.events["b"]:
            if isinstance(ev, MessageDelivered):
                out.setdefault((conn.remote_cid, ev.msg_id), []).append(ev.data)
        return out

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def bounded_state(self) -> None:
        for ep in (self.a, self.b):
            assert len(ep.connections) <= MAX_CONNECTIONS + 1
            for c in ep.connections.values():
                sz = c.receiver.state_size
                assert sz["held_bytes"] <= SM_CFG.recv_window
                assert sz["partial_messages"] <= SM_CFG.recv_window // SM_CFG.payload_size
                assert sz["done_ids"] <= SM_CFG.psn_window
                assert c.sender.new_bytes_sent <= c.sender.credit_edge
                assert len(c.sender.inflight) <= SM_CFG.psn_window

    @invariant()
    def delivered_at_most_once_and_exact_unless_failed(self) -> None:
        failed = self._failed()
        for key, copies in self._delivered().items():
            assert len(copies) == 1, f"message {key} delivered {len(copies)} times"
            if key[0] not in failed:
                assert copies[0] == self.sent.get(key), f"message {key} corrupted"

    def teardown(self) -> None:
        # Heal the network, then every message on a surviving connection must
        # arrive and be acknowledged; each failure must carry a reason.
        self.loss = self.dup = self.reorder = 0.0
        self.d.run_until(self.d.now + 60.0, lambda: all(
            c.is_terminal or not c.sender.has_pending for c in self.conns))
        failed = self._failed()
        delivered = self._delivered()
        acked = {(c.local_cid, e.msg_id) for c, e in self.d.events["a"]
                 if isinstance(e, MessageAcked)}
        for key, data in self.sent.items():
            conn = next(c for c in self.conns if c.local_cid == key[0])
            if key[0] in failed or conn.is_terminal:
                continue
            assert delivered.get(key) == [data], f"message {key} lost on a live connection"
            assert key in acked, f"message {key} never acknowledged"


EndpointPair.TestCase.settings = settings(
    max_examples=50, stateful_step_count=50, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)
TestEndpointPair = EndpointPair.TestCase
