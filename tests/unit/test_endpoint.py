"""Endpoint: two real endpoints exchanging datagrams in memory (no sockets)."""

from __future__ import annotations

import os
import random

import pytest

from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    Event,
    MessageAcked,
    MessageDelivered,
)

SECRET = bytes(range(32))
CFG = ConnectionConfig(planes=2, evs_per_plane=8, plane_rate=1.25e9, initial_rtt=100e-6,
                       min_rto=1e-3, handshake_timeout=0.05)


class Wire:
    """Moves datagrams between two endpoints in virtual time (10 µs per step)."""

    def __init__(self, a: Endpoint, b: Endpoint) -> None:
        self.a, self.b = a, b
        self.now = 0.0
        self.events: dict[str, list[tuple[Connection, Event]]] = {"a": [], "b": []}
        self.drop_next: list[bytes] = []
        self.captured: list[bytes] = []

    def step(self) -> None:
        self.now += 10e-6
        for src, dst, name in ((self.a, self.b, "a"), (self.b, self.a, "b")):
            self.before_pass(src)
            for _peer, data, path in src.datagrams_to_send(self.now):
                self.captured.append(data)
                if not self.lose():
                    dst.receive_datagram(data, RxInfo(path.plane), self.now, name)
            t = src.next_timer()
            if t is not None and t <= self.now:
                src.handle_timer(self.now)
        for name, ep in (("a", self.a), ("b", self.b)):
            while (item := ep.next_event()) is not None:
                self.events[name].append(item)
            ep.reap()

    def before_pass(self, src: Endpoint) -> None:
        """Called before each endpoint's pass (a hook for subclasses)."""

    def lose(self) -> bool:
        """Whether the datagram about to be delivered is lost (never, here)."""
        return False

    def run(self, until: object, steps: int = 200_000) -> None:
        for _ in range(steps):
            self.step()
            if callable(until) and until():
                return
        raise AssertionError("condition not reached")

    def of(self, name: str, kind: type) -> list[Event]:
        return [e for _, e in self.events[name] if isinstance(e, kind)]


def pair(**kw: object) -> tuple[Endpoint, Endpoint, Wire]:
    a = Endpoint(config=CFG, secret=SECRET, rng=random.Random(1))
    b = Endpoint(config=CFG, secret=kw.get("b_secret", SECRET),  # type: ignore[arg-type]
                 rng=random.Random(2))
    return a, b, Wire(a, b)


def test_pair_moves_messages_byte_exact() -> None:
    a, b, w = pair()
    conn = a.connect("b", 0.0)
    assert conn.local_cid != 0
    msgs = [os.urandom(n) for n in (1, 1368, 1369, 200_000, 3 << 20)]
    for m in msgs:
        conn.send_message(m)
    w.run(lambda: len(w.of("b", MessageDelivered)) == len(msgs))
    got = sorted((e.msg_id, e.data) for e in w.of("b", MessageDelivered))  # type: ignore[attr-defined]
    assert [d for _, d in got] == msgs
    w.run(lambda: len(w.of("a", MessageAcked)) == len(msgs))
    # The responder knows which peer its connection belongs to.
    (resp,) = b.connections.values()
    assert b.peer_of(resp) == "a"
    assert a.peer_of(conn) == "b"
    assert w.of("a", ConnectionEstablished) and w.of("b", ConnectionEstablished)
    conn.close(w.now)
    w.run(lambda: w.of("a", ConnectionClosed) and w.of("b", ConnectionClosed))
    w.run(lambda: not a.connections and not b.connections, steps=10)


def test_retransmitted_init_reuses_the_connection() -> None:
    a, b, _ = pair()
    a.connect("b", 0.0)
    (_, init, path), = a.datagrams_to_send(0.0)
    for i in range(3):
        b.receive_datagram(init, RxInfo(path.plane), 1e-3 * i, "a")
    assert len(b.connections) == 1
    assert b.accepted == 1
    # One ACCEPT per copy of the INIT (the first was lost, say).
    accepts = b.datagrams_to_send(0.01)
    assert len(accepts) == 3
    assert len({d for _, d, _ in accepts}) == 1


def test_forged_and_malformed_datagrams_are_counted() -> None:
    a, b, w = pair()
    conn = a.connect("b", 0.0)
    conn.send_message(b"x" * 5000)
    w.run(lambda: w.of("b", MessageDelivered))
    b.receive_datagram(b"", RxInfo(0), w.now, "a")
    b.receive_datagram(b"\x07" + bytes(40), RxInfo(0), w.now, "a")
    # A DATA datagram for a connection id nobody has.
    data = bytearray(w.captured[1])
    data[4:8] = (0xDEADBEEF).to_bytes(4, "big")
    b.receive_datagram(bytes(data), RxInfo(0), w.now, "a")
    # An INIT with a flipped tag bit.
    init = bytearray(w.captured[0])
    init[-1] ^= 1
    b.receive_datagram(bytes(init), RxInfo(0), w.now, "x")
    assert b.drops == {"short": 1, "version": 1, "unknown_cid": 1, "tag": 1}
    assert len(b.connections) == 1


def test_key_mismatch_fails_initiator_and_counts_tag_on_responder() -> None:
    a, b, w = pair(b_secret=bytes(32))
    conn = a.connect("b", 0.0)
    w.run(lambda: w.of("a", ConnectionFailed), steps=100_000)
    (fail,) = w.of("a", ConnectionFailed)
    assert "peer unreachable" in fail.reason  # type: ignore[attr-defined]
    assert conn.is_terminal
    assert b.drops.get("tag", 0) >= 2 and not b.connections


def test_client_only_endpoint_refuses_init() -> None:
    a = Endpoint(config=CFG, secret=SECRET)
    b = Endpoint(config=CFG, secret=SECRET, accept=False)
    a.connect("b", 0.0)
    for _, d, p in a.datagrams_to_send(0.0):
        b.receive_datagram(d, RxInfo(p.plane), 0.0, "a")
    assert b.drops == {"not_accepting": 1}


def test_plane_count_mismatch_is_dropped() -> None:
    a = Endpoint(config=ConnectionConfig(planes=3), secret=SECRET)
    b = Endpoint(config=CFG, secret=SECRET)
    a.connect("b", 0.0)
    for _, d, p in a.datagrams_to_send(0.0):
        b.receive_datagram(d, RxInfo(p.plane), 0.0, "a")
    assert b.drops == {"plane_mismatch": 1}


def test_many_connections_get_distinct_cids() -> None:
    a, b, w = pair()
    conns = [a.connect("b", 0.0) for _ in range(20)]
    assert len({c.local_cid for c in conns}) == 20
    for i, c in enumerate(conns):
        c.send_message(bytes([i]) * 3000)
    w.run(lambda: len(w.of("b", MessageDelivered)) == 20)
    assert len(b.connections) == 20
    assert sorted(e.data[0] for e in w.of("b", MessageDelivered)) == list(range(20))  # type: ignore[attr-defined]


def _first_data_flags(planes: int) -> list[tuple[int, bool]]:
    """(plane, ACK_REQ) of a's first 24 DATA packets of a large message."""
    from dataclasses import replace

    from wire.codec import peek_untrusted
    from wire.constants import Flag, PacketType

    cfg = replace(CFG, planes=planes)
    a = Endpoint(config=cfg, secret=SECRET, rng=random.Random(1))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(2))
    w = Wire(a, b)
    conn = a.connect("b", 0.0)
    w.run(lambda: conn.is_established)
    conn.send_message(bytes(1 << 20))
    out: list[tuple[int, bool]] = []
    now = w.now
    for _ in range(1000):  # undelivered: no ACK, so only the window and pacing pace it
        now += 10e-6
        for data, path in conn.datagrams_to_send(now):
            h = peek_untrusted(data)
            if h.ptype == PacketType.DATA:
                out.append((path.plane, bool(h.flags & Flag.ACK_REQ)))
        if len(out) >= 24:
            break
    return out[:24]


def test_first_data_packet_on_each_plane_asks_for_an_immediate_ack() -> None:
    # NSCC's base RTT per plane is the plane's smallest sample: each plane's
    # first packet is ACKed at once, before the connection's own initial
    # window queues behind it (docs/congestion.md; the 4-to-1 tail-drop
    # incast dropped 2.7% when a plane's first sample came ack_every packets in).
    out = _first_data_flags(2)
    firsts = {plane: next(i for i, (p, _) in enumerate(out) if p == plane) for plane in (0, 1)}
    assert [i for i, (_, req) in enumerate(out) if req] == sorted(firsts.values()), out
    # One plane: every sample shares one base; nothing extra is asked.
    assert not any(req for _, req in _first_data_flags(1))


@pytest.mark.parametrize("delay", [50e-6, 1.0])
def test_flush_acks_sends_the_sack_a_short_ack_delay_holds_back(delay: float) -> None:
    # The I/O layer calls flush_acks once it has read its sockets to the end:
    # a SACK waiting for the ACK delay goes out then, not after a timer wakeup
    # (a 20 us ACK delay is below an event loop's timer resolution).
    # A long ACK delay is a coalescing window: the flush leaves it alone.
    from dataclasses import replace

    from transport.conn_core import ACK_BATCH_DELAY
    from wire.codec import peek_untrusted
    from wire.constants import PacketType

    # One plane: no plane's first DATA asks for an immediate ACK.
    cfg = replace(CFG, planes=1, ack_every=64, ack_delay=delay)
    a = Endpoint(config=cfg, secret=SECRET, rng=random.Random(1))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(2))
    w = Wire(a, b)
    conn = a.connect("b", 0.0)
    w.run(lambda: conn.is_established and bool(b.connections))
    w.run(lambda: not conn.sender.bytes_in_flight, steps=1000)  # handshake settled
    conn.send_message(os.urandom(5 * 1368))
    now = w.now + 10e-6
    data = [d for _, d, _ in a.datagrams_to_send(now)]
    assert len(data) >= 3
    for d in data[1:3]:  # neither the first nor the tail (which asks for an ACK)
        b.receive_datagram(d, RxInfo(0), now, "a")
    (resp,) = b.connections.values()
    assert resp.ack_pending()
    held = [peek_untrusted(d).ptype for _, d, _ in b.datagrams_to_send(now)]
    assert PacketType.SACK not in held  # the ACK delay holds it back
    b.flush_acks(now)
    kinds = [peek_untrusted(d).ptype for _, d, _ in b.datagrams_to_send(now)]
    if delay > 100e-6:
        assert PacketType.SACK not in kinds and resp.ack_pending()
        return
    # A short delay batches across reads, its hole too (docs/decisions/0021):
    # the read whose successor would pass the batch delay sends it.
    assert PacketType.SACK not in kinds and resp.ack_pending()
    now += ACK_BATCH_DELAY
    b.flush_acks(now)
    kinds = [peek_untrusted(d).ptype for _, d, _ in b.datagrams_to_send(now)]
    assert kinds.count(PacketType.SACK) == 1 and not resp.ack_pending()
    b.flush_acks(now)  # nothing pending: nothing more
    assert not b.datagrams_to_send(now)


class AuditedWire(Wire):
    """``Wire`` with random loss that, before every pass, checks the work
    avoidance of ``Connection`` (``_stirred``): a connection the endpoint
    will skip must have nothing to send if asked in full, and the deadline
    it keeps must be the one it would compute now."""

    def __init__(self, a: Endpoint, b: Endpoint, loss: float, seed: int) -> None:
        super().__init__(a, b)
        self.rng = random.Random(seed)
        self.loss = loss
        self.skipped = 0
        self.looked = 0

    def before_pass(self, src: Endpoint) -> None:
        for conn in src.connections.values():
            if conn._stirred:
                self.looked += 1
                continue
            self.skipped += 1
            if conn._timer_known:
                assert conn._next_timer() == conn._timer_at, "a stale deadline"
                if conn._timer_at is not None and conn._timer_at <= self.now:
                    # Due: ``step`` runs the timer right after this pass (as
                    # the I/O adapter does), and that stirs the connection.
                    continue
            assert conn._output(self.now) == [], "a skipped connection had output"

    def lose(self) -> bool:
        return self.rng.random() < self.loss


@pytest.mark.parametrize("seed", [3, 4])
def test_idle_connections_are_skipped_and_nothing_is_missed(seed: int) -> None:
    """Several connections, each busy only now and then, 3% loss both ways:
    every message arrives byte-exact, a skipped connection never had
    anything to send or a deadline other than the one it kept, and most
    visits to a connection are skipped (the point of the work avoidance)."""
    a = Endpoint(config=CFG, secret=SECRET, rng=random.Random(seed))
    b = Endpoint(config=CFG, secret=SECRET, rng=random.Random(seed + 100))
    w = AuditedWire(a, b, loss=0.03, seed=seed)
    rng = random.Random(seed)
    conns = [a.connect("b", 0.0) for _ in range(4)]
    sent: list[bytes] = []
    for burst in range(6):
        for i, conn in enumerate(conns):
            if (burst + i) % 3 == 0:  # each connection idles between its bursts
                msg = rng.randbytes(rng.choice((1, 1368, 20_000, 150_000)))
                conn.send_message(msg)
                sent.append(msg)
        w.run(lambda: len(w.of("b", MessageDelivered)) == len(sent))
        w.run(lambda: len(w.of("a", MessageAcked)) == len(sent))
        for _ in range(300):  # idle: only timers (probes, ACK refresh) may stir
            w.step()
    got = sorted(e.data for e in w.of("b", MessageDelivered))  # type: ignore[attr-defined]
    assert got == sorted(sent)
    assert not w.of("a", ConnectionFailed) and not w.of("b", ConnectionFailed)
    assert w.skipped > w.looked
