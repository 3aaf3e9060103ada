"""Transport and endpoint hardening: each test is a defect that must not
come back. Sans-I/O pairs in virtual time (tests/unit/duplex.py)."""

from __future__ import annotations

import os
import random
import tracemalloc
from dataclasses import replace

from duplex import CFG, SECRET, Duplex, endpoints

from transport.aio import EndpointIO
from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.datagram import RxInfo, TxPath
from transport.endpoint import Endpoint
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    MessageAcked,
    MessageDelivered,
)
from transport.udp import PeerTable, PlaneAddr
from wire.codec import peek_untrusted
from wire.constants import PacketType


def established(d: Duplex) -> tuple[Connection, Connection]:
    conn = d.ep["a"].connect("b", d.now)
    assert d.run_until(d.now + 1.0, lambda: bool(d.ep["b"].connections)
                       and conn.is_established)
    d.run_until(d.now + 0.01)
    (resp,) = d.ep["b"].connections.values()
    return conn, resp


def delivered(d: Duplex) -> list[bytes]:
    return [e.data for e in d.of("b", MessageDelivered)]  # type: ignore[attr-defined]


def plane_checker(d: Duplex) -> list[int]:
    """Records the plane of every datagram either endpoint hands out."""
    seen: list[int] = []
    for ep in d.ep.values():
        orig = ep.datagrams_to_send

        def wrapped(now: float, orig=orig):  # type: ignore[no-untyped-def]
            out = orig(now)
            seen.extend(p.plane for _, _, p in out)
            return out

        ep.datagrams_to_send = wrapped  # type: ignore[method-assign]
    return seen


# -- defect 1: an idle connection fails on its next send ------------------------------


def test_idle_gap_longer_than_idle_fail_timeout_then_send() -> None:
    _, _, d = endpoints()
    conn, _ = established(d)
    conn.send_message(b"first")
    assert d.run_until(d.now + 1.0, lambda: len(delivered(d)) == 1)
    idle = 3 * CFG.idle_fail_timeout
    d.run_until(d.now + idle)
    conn.send_message(b"after the idle gap")
    assert d.run_until(d.now + 1.0, lambda: len(d.of("a", MessageAcked)) == 2)
    assert not d.of("a", ConnectionFailed), d.of("a", ConnectionFailed)
    assert delivered(d) == [b"first", b"after the idle gap"]


# -- defect 4: every plane index from the wire is untrusted ---------------------------


def test_one_plane_close_goes_out_on_plane_zero_every_retry() -> None:
    cfg = replace(CFG, planes=1)
    _, _, d = endpoints(cfg)
    seen = plane_checker(d)
    conn, _ = established(d)
    d.tamper = lambda direction, data: [] if direction == "ba" else [data]  # CLOSE unanswered
    conn.close(d.now)
    assert d.run_until(d.now + 60.0, lambda: conn.is_terminal)
    assert d.of("a", ConnectionClosed)
    assert seen and set(seen) == {0}


def test_sack_goes_back_on_the_arrival_plane_not_the_written_one() -> None:
    _, _, d = endpoints()
    conn, _ = established(d)
    assert conn._sealer is not None
    dgram = conn._sealer.seal_data(psn=0, ev=3, plane=200, msg_id=1, msg_offset=0, msg_len=5,
                                   timestamp=1, payload=b"hello", flags=2)
    b = d.ep["b"]
    b.receive_datagram(dgram, RxInfo(1), d.now, "a")
    out = b.datagrams_to_send(d.now)
    sacks = [p for _, data, p in out if peek_untrusted(data).ptype is PacketType.SACK]
    assert sacks and all(p.plane == 1 for p in sacks)


def test_endpoint_io_counts_a_bad_plane_instead_of_raising() -> None:
    ep = Endpoint(config=CFG, secret=SECRET)
    io = EndpointIO(ep, [PlaneAddr("127.0.0.1", 1), PlaneAddr("127.0.0.1", 2)],
                    PeerTable(2, [1, 2]))  # not opened: no sockets at all
    io._send([("b", b"x", TxPath(7, 0, 46))])
    assert io.tx_errors == {"bad_plane": 1}


# -- defect 6: reassembly trusts the peer --------------------------------------------


def _forge(conn: Connection, *, psn: int, msg_id: int, off: int, msg_len: int,
           payload: bytes) -> bytes:
    assert conn._sealer is not None
    return conn._sealer.seal_data(psn=psn, ev=1, plane=0, msg_id=msg_id, msg_offset=off,
                                  msg_len=msg_len, timestamp=psn, payload=payload)


def test_overlapping_slices_fail_the_connection_never_deliver_zeros() -> None:
    _, _, d = endpoints()
    conn, resp = established(d)
    size = CFG.payload_size
    b = d.ep["b"]
    b.receive_datagram(_forge(conn, psn=0, msg_id=1, off=0, msg_len=2 * size,
                              payload=b"A" * size), RxInfo(0), d.now, "a")
    # Same slice again under a new PSN: counted twice on the old code, which
    # then delivered a message whose second half was zeros.
    b.receive_datagram(_forge(conn, psn=1, msg_id=1, off=0, msg_len=2 * size,
                              payload=b"B" * size), RxInfo(0), d.now, "a")
    d.run_until(d.now + 0.01)
    assert not delivered(d)
    assert resp.is_terminal and "protocol error" in (resp.failure_reason or "")
    assert resp.dropped.get("slice_overlap") == 1
    assert resp.receiver.state_size["partial_bytes"] == 0  # freed
    # The peer is told (RESET), so the sender fails too, with a reason.
    assert d.run_until(d.now + 0.1, lambda: bool(d.of("a", ConnectionFailed)))


def test_message_length_must_not_change_between_slices() -> None:
    _, _, d = endpoints()
    conn, resp = established(d)
    size = CFG.payload_size
    b = d.ep["b"]
    b.receive_datagram(_forge(conn, psn=0, msg_id=1, off=0, msg_len=2 * size,
                              payload=b"A" * size), RxInfo(0), d.now, "a")
    b.receive_datagram(_forge(conn, psn=1, msg_id=1, off=size, msg_len=size + 10,
                              payload=b"B" * 10), RxInfo(0), d.now, "a")
    assert resp.dropped.get("message_length") == 1 and resp.is_terminal
    assert not [e for _, e in d.events["b"] if isinstance(e, MessageDelivered)]


def test_misaligned_slice_and_replayed_message_are_protocol_errors() -> None:
    _, _, d = endpoints()
    conn, resp = established(d)
    b = d.ep["b"]
    b.receive_datagram(_forge(conn, psn=0, msg_id=1, off=7, msg_len=100, payload=b"x" * 93),
                       RxInfo(0), d.now, "a")
    assert resp.dropped == {"slice_shape": 1}
    _, _, d = endpoints()
    conn, resp = established(d)
    b = d.ep["b"]
    b.receive_datagram(_forge(conn, psn=0, msg_id=1, off=0, msg_len=3, payload=b"abc"),
                       RxInfo(0), d.now, "a")
    b.receive_datagram(_forge(conn, psn=1, msg_id=1, off=0, msg_len=3, payload=b"abc"),
                       RxInfo(0), d.now, "a")
    while (item := b.next_event()) is not None:
        d.events["b"].append(item)
    assert delivered(d) == [b"abc"]  # once, not twice
    assert resp.dropped == {"message_replayed": 1}


def test_claimed_message_length_is_not_allocated_up_front() -> None:
    cfg = replace(CFG, recv_window=1 << 30, max_message_size=1 << 30)
    _, _, d = endpoints(cfg)
    conn, resp = established(d)
    b = d.ep["b"]
    size = cfg.payload_size
    dgrams = [_forge(conn, psn=i, msg_id=i + 1, off=0, msg_len=(1 << 30) - 1,
                     payload=b"z" * size) for i in range(8)]
    tracemalloc.start()
    try:
        for g in dgrams:
            b.receive_datagram(g, RxInfo(0), d.now, "a")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Old code: bytearray(msg_len) per message, 8 GiB claimed. Now: the slices.
    assert peak < 1 << 20, peak
    assert resp.receiver.state_size["partial_bytes"] == 8 * size


def test_slice_beyond_the_granted_credit_is_not_acknowledged() -> None:
    _, _, d = endpoints()
    conn, resp = established(d)
    b = d.ep["b"]
    size = CFG.payload_size
    window = CFG.recv_window
    # A sender ignoring credit: more new bytes than the receiver granted
    # (two large messages, never completed, so nothing frees credit).
    n = window // size + 2
    mlen = (window // size // 2 + 8) * size
    per_msg = mlen // size
    for i in range(n):
        mid, k = divmod(i, per_msg - 1)  # each lacks its last slice
        b.receive_datagram(_forge(conn, psn=i, msg_id=mid + 1, off=k * size, msg_len=mlen,
                                  payload=b"q" * size), RxInfo(0), d.now, "a")
    assert resp.receiver.no_buffer == 2
    assert resp.receiver.state_size["held_bytes"] <= window
    assert resp.receiver.cum_psn == n - 2


# -- defect 3: back-pressure instead of dropping what was acknowledged ----------------


def test_receiver_that_does_not_consume_withholds_credit_and_sender_waits() -> None:
    b_cfg = replace(CFG, hold_delivered=True, recv_window=2 << 20, max_message_size=1 << 20)
    _, _, d = endpoints(replace(CFG, recv_window=2 << 20, max_message_size=1 << 20), b_cfg=b_cfg)
    conn, resp = established(d)
    msgs = [os.urandom(300_000) for _ in range(20)]  # 6 MB through a 2 MiB window
    for m in msgs:
        conn.send_message(m)
    held_max = 0

    def watch() -> bool:
        nonlocal held_max
        held_max = max(held_max, resp.receiver.state_size["held_bytes"])
        return False

    # The application does not read for far longer than any failure timeout.
    d.run_until(d.now + 4 * CFG.idle_fail_timeout, watch)
    assert not d.of("a", ConnectionFailed) and not d.of("b", ConnectionFailed)
    assert held_max <= b_cfg.recv_window
    got = delivered(d)
    assert 0 < len(got) < len(msgs)
    assert resp.receiver.no_buffer == 0
    # Now it reads: every message arrives, byte-exact, in order, once.
    taken = 0

    def consume() -> bool:
        nonlocal taken
        now_have = delivered(d)
        while taken < len(now_have):
            resp.consume(len(now_have[taken]), d.now)
            taken += 1
        return len(now_have) == len(msgs)

    assert d.run_until(d.now + 30.0, consume)
    assert delivered(d) == msgs
    assert not d.of("a", ConnectionFailed)


def test_window_update_lost_then_credit_probe_recovers() -> None:
    b_cfg = replace(CFG, hold_delivered=True, recv_window=1 << 20, max_message_size=1 << 20)
    _, _, d = endpoints(replace(CFG, recv_window=1 << 20, max_message_size=1 << 20), b_cfg=b_cfg)
    conn, resp = established(d)
    msgs = [os.urandom(400_000) for _ in range(4)]
    for m in msgs:
        conn.send_message(m)
    d.run_until(d.now + 1.0)
    assert len(delivered(d)) == 2 and conn.sender.credit_blocked
    # Every SACK b sends right now is lost: the window update never arrives.
    d.tamper = lambda direction, data: [] if direction == "ba" else [data]
    for m in delivered(d):
        resp.consume(len(m), d.now)
    d.run_until(d.now + 0.05)
    d.tamper = None
    taken = 2

    def consume() -> bool:
        nonlocal taken
        got = delivered(d)
        while taken < len(got):
            resp.consume(len(got[taken]), d.now)
            taken += 1
        return len(got) == 4

    assert d.run_until(d.now + 5.0, consume)
    assert delivered(d) == msgs


def test_dead_receiver_while_credit_blocked_fails_with_a_reason() -> None:
    b_cfg = replace(CFG, hold_delivered=True, recv_window=1 << 20, max_message_size=1 << 20)
    _, _, d = endpoints(replace(CFG, recv_window=1 << 20, max_message_size=1 << 20), b_cfg=b_cfg)
    conn, _ = established(d)
    for _ in range(4):
        conn.send_message(os.urandom(400_000))
    d.run_until(d.now + 1.0)
    assert conn.sender.credit_blocked
    d.tamper = lambda direction, data: []  # b is gone
    assert d.run_until(d.now + 120.0, lambda: conn.is_terminal)
    (fail,) = d.of("a", ConnectionFailed)
    assert "credit probes" in fail.reason  # type: ignore[attr-defined]


# -- defect 7: responder connections expire -------------------------------------------


def test_replayed_inits_expire_and_free_max_connections() -> None:
    b = Endpoint(config=CFG, secret=SECRET, max_connections=16, rng=random.Random(5))
    inits = []
    for i in range(16):
        a = Endpoint(config=CFG, secret=SECRET, rng=random.Random(100 + i))
        a.connect("b", 0.0)
        inits += [data for _, data, _ in a.datagrams_to_send(0.0)]
    for g in inits:  # replayed INITs nobody will ever follow up
        b.receive_datagram(g, RxInfo(0), 0.0, "mallory")
    b.datagrams_to_send(0.0)
    assert len(b.connections) == 16
    a = Endpoint(config=CFG, secret=SECRET, rng=random.Random(99))
    d = Duplex(a, b)
    conn = a.connect("b", 0.0)
    d.run_until(0.1)
    assert b.drops.get("too_many_connections", 0) >= 1 and not conn.is_established
    # The half-open ones go after half_open_timeout; then a real peer gets in.
    assert d.run_until(CFG.half_open_timeout + 1.0, lambda: len(b.connections) <= 1)
    conn = a.connect("b", d.now)
    assert d.run_until(d.now + 1.0, lambda: conn.is_established)
    conn.send_message(b"in")
    assert d.run_until(d.now + 1.0, lambda: bool(d.of("a", MessageAcked)))


def test_confirmed_responder_is_kept_while_used_and_reaped_when_idle() -> None:
    cfg = replace(CFG, idle_timeout=10.0)
    _, _, d = endpoints(cfg)
    conn, resp = established(d)
    for _ in range(4):  # used more slowly than half_open_timeout, never idle_timeout
        d.run_until(d.now + 2 * cfg.half_open_timeout)
        conn.send_message(b"tick")
    assert d.run_until(d.now + 1.0, lambda: len(d.of("a", MessageAcked)) == 4)
    assert not resp.is_terminal
    d.run_until(d.now + cfg.idle_timeout + 1.0)
    assert resp.is_terminal and not d.ep["b"].connections
    (closed,) = d.of("b", ConnectionClosed)
    assert "idle" in closed.reason  # type: ignore[attr-defined]
    assert d.of("b", ConnectionEstablished)


def test_config_rejects_a_message_larger_than_the_receive_window() -> None:
    try:
        ConnectionConfig(recv_window=1 << 20, max_message_size=2 << 20)
    except ValueError as exc:
        assert "max_message_size" in str(exc)
    else:
        raise AssertionError("accepted")


# -- defect 8: a restarted peer says "I do not know this connection" -------------------


def test_restarted_peer_is_noticed_within_a_few_rtts() -> None:
    _, _, d = endpoints()
    conn, _ = established(d)
    conn.send_message(b"before")
    assert d.run_until(d.now + 1.0, lambda: bool(d.of("a", MessageAcked)))
    d.replace("b", Endpoint(config=CFG, secret=SECRET, rng=random.Random(7)))  # restart
    t0 = d.now
    conn.send_message(b"after the restart")
    assert d.run_until(d.now + 5.0, lambda: conn.is_terminal)
    rtt = 2 * d.delay
    assert d.now - t0 < 5 * rtt, d.now - t0  # old code: idle_fail_timeout (2 s) or more
    (fail,) = d.of("a", ConnectionFailed)
    assert fail.peer_forgot and "does not know" in fail.reason  # type: ignore[attr-defined]
    assert d.ep["b"].unknown_answered >= 1


def test_unknown_conn_cannot_be_forged_or_replayed() -> None:
    from wire.codec import HandshakeCodec
    from wire.packets import UnknownConn
    _, _, d = endpoints()
    conn, resp = established(d)
    a = d.ep["a"]
    assert conn._sealer is not None
    counter = conn._sealer.counter - 1
    # Off-path: no cluster key, so no valid tag.
    forged = HandshakeCodec(bytes(32)).seal(UnknownConn(resp.local_cid, counter), dcid=0)
    a.receive_datagram(forged, RxInfo(0), d.now, "b")
    # A recording naming a counter this connection never sent (or long ago).
    hs = HandshakeCodec(SECRET)
    a.receive_datagram(hs.seal(UnknownConn(resp.local_cid, counter + 10), dcid=0),
                       RxInfo(0), d.now, "b")
    a.receive_datagram(hs.seal(UnknownConn(resp.local_cid + 1, counter), dcid=0),
                       RxInfo(0), d.now, "b")
    assert not conn.is_terminal
    assert a.drops.get("tag") == 1 and a.drops.get("unknown_conn_unmatched") == 2
    assert conn.dropped.get("stale_unknown_conn") == 1


def test_unknown_conn_answers_are_rate_limited() -> None:
    _, _, d = endpoints()
    conn, _ = established(d)
    assert conn._sealer is not None
    b = Endpoint(config=CFG, secret=SECRET, rng=random.Random(7), unknown_rate=100,
                 unknown_burst=10)
    for i in range(1000):  # 1000 packets of a forgotten connection within 10 ms
        dg = _forge(conn, psn=i, msg_id=1, off=0, msg_len=1, payload=b"x")
        b.receive_datagram(dg, RxInfo(0), i * 1e-5, "a")
    out = b.datagrams_to_send(0.01)
    assert 10 <= len(out) <= 12, len(out)
    assert b.drops["unknown_conn_rate_limited"] == 1000 - len(out)
    assert not b.connections


def test_many_tiny_incomplete_messages_are_a_protocol_error() -> None:
    cfg = replace(CFG, recv_window=1 << 20, max_message_size=1 << 20)
    _, _, d = endpoints(cfg)
    conn, resp = established(d)
    b = d.ep["b"]
    size = cfg.payload_size
    limit = resp.receiver.max_partial
    # 1-byte tails of 2-slice messages: next to no credit, ~0.5 KiB of
    # bookkeeping each. An honest sender cannot have this many incomplete.
    for i in range(limit + 1):
        b.receive_datagram(_forge(conn, psn=i, msg_id=i + 1, off=size, msg_len=size + 1,
                                  payload=b"t"), RxInfo(0), d.now, "a")
    assert resp.dropped.get("too_many_partial") == 1 and resp.is_terminal
    assert resp.receiver.state_size["partial_messages"] == 0


def test_lost_close_answer_then_unknown_conn_closes_instead_of_failing() -> None:
    _, _, d = endpoints()
    conn, _ = established(d)
    conn.close(d.now)
    # b answers the CLOSE and forgets the connection; its answer is lost.
    d.tamper = lambda direction, data: [] if direction == "ba" and \
        peek_untrusted(data).ptype is PacketType.CLOSE else [data]
    assert d.run_until(d.now + 10.0, lambda: conn.is_terminal)
    assert not d.of("a", ConnectionFailed)
    (closed,) = d.of("a", ConnectionClosed)
    assert "forgotten" in closed.reason  # type: ignore[attr-defined]
