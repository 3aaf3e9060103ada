"""The receive fast path (``Endpoint.receive_datagrams`` -> ``Connection.receive_data``
-> ``Opener.open_data_untrusted`` -> ``Receiver.on_slice``) against the
one-datagram path (``Endpoint.receive_datagram``).

The I/O adapter hands each GRO read to the fast path as views of one reused
buffer. Whatever arrives -- honest traffic, duplicates, trimmed headers,
bit flips, truncations, forged slices under the real keys -- the two paths
must leave both endpoints in the same state: same events in the same order,
same drops by reason, same datagrams sent back, and no reference to the
buffer kept (the Duplex scribbles over it after each delivery).
"""

from __future__ import annotations

import random

import pytest
from duplex import CFG, SECRET, endpoints

from transport.connection import Connection
from transport.datagram import RxInfo
from transport.endpoint import _DATA_CUT, _DATA_TYPE, _DATA_WORDS
from transport.events import MessageDelivered
from wire.codec import HandshakeCodec, peek_untrusted
from wire.constants import HEADER_TAG_LEN, VERSION, trim_point
from wire.packets import Init


def _tamper(seed: int) -> object:
    rng = random.Random(seed)

    def tamper(direction: str, data: bytes) -> list[bytes]:
        r = rng.random()
        if r < 0.05:
            return []
        if r < 0.10:
            return [data, data]  # a duplicate (a replay: dropped by the window)
        if r < 0.15 and direction == "ab":
            cut = trim_point(data)
            return [data if cut is None else data[:cut]]
        if r < 0.19:
            out = bytearray(data)
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
            return [bytes(out)]
        if r < 0.21:
            return [data[: rng.randrange(len(data))]]
        return [data]

    return tamper


def _run(batched: bool, seed: int) -> tuple[list[str], list[str], dict[str, int],
                                             dict[str, int], list[bytes]]:
    _, _, d = endpoints(seed=seed)
    d.batched = batched
    sent: list[bytes] = []

    def record(direction: str, data: bytes) -> list[bytes]:
        out: list[bytes] = tamper(direction, data)  # type: ignore[operator]
        if direction == "ba":
            # Headers only: tags differ between runs (fresh handshake nonces).
            sent.extend(x[:-HEADER_TAG_LEN] for x in out)
        return out

    tamper = _tamper(seed)
    conn = d.ep["a"].connect("b", d.now)
    assert d.run_until(d.now + 1.0, lambda: conn.is_established)
    d.tamper = record
    rng = random.Random(seed)
    size = CFG.payload_size
    for k in range(12):
        conn.send_message(rng.randbytes(rng.choice([1, size - 1, size, size + 1, 7 * size + 5,
                                                    40_000])))
        if k % 3 == 0:
            d.run_until(d.now + 2e-3)
    d.run_until(d.now + 3.0, lambda: len(d.of("b", MessageDelivered)) == 12)
    (resp,) = d.ep["b"].connections.values() or [None]  # type: ignore[list-item]
    # Forged slices under the real keys: an overlap fails the connection.
    assert conn._sealer is not None
    psn = conn.sender.next_psn
    for off, payload in ((0, b"A" * size), (0, b"B" * size)):
        dgram = conn._sealer.seal_data(psn=psn, ev=1, plane=0, msg_id=999, msg_offset=off,
                                       msg_len=2 * size, timestamp=1, payload=payload)
        psn += 1
        if batched:
            d.ep["b"].receive_datagrams((memoryview(dgram),), RxInfo(0), d.now, "a")
        else:
            d.ep["b"].receive_datagram(dgram, RxInfo(0), d.now, "a")
    d.run_until(d.now + 0.5)
    assert isinstance(resp, Connection)
    events = {n: [f"{type(e).__name__}:{e!r}" for _, e in d.events[n]] for n in ("a", "b")}
    return (events["a"], events["b"], d.ep["b"].drops | {f"conn:{k}": v for k, v in
                                                          resp.dropped.items()},
            dict(resp.receiver.state_size), sent)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_fast_path_leaves_the_same_state_as_the_one_datagram_path(seed: int) -> None:
    slow = _run(False, seed)
    fast = _run(True, seed)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2] == slow[2]
    assert fast[3] == slow[3]
    assert fast[4] == slow[4]  # every SACK/NACK/probe b sent, header for header
    assert any("MessageDelivered" in e for e in slow[1])
    assert "conn:slice_overlap" in slow[2]  # the forged overlap was caught both ways


def test_a_gro_batch_mixing_connections_and_types_keeps_event_order() -> None:
    """One batch carrying DATA of two connections, a SACK and garbage: events
    come out per connection in arrival order, unknown ids are answered."""
    _, _, d = endpoints()
    c1 = d.ep["a"].connect("b", d.now)
    c2 = d.ep["a"].connect("b", d.now)
    assert d.run_until(d.now + 1.0, lambda: c1.is_established and c2.is_established)
    d.run_until(d.now + 0.01)
    b = d.ep["b"]
    dgrams = []
    for i, c in enumerate((c1, c2, c1, c2)):
        assert c._sealer is not None
        dgrams.append(c._sealer.seal_data(psn=i // 2, ev=1, plane=0, msg_id=i // 2 + 1,
                                          msg_offset=0, msg_len=3, timestamp=1,
                                          payload=bytes([i]) * 3))
    bogus = bytearray(dgrams[0])
    bogus[4:8] = b"\xde\xad\xbe\xef"  # an unknown connection id
    batch = [memoryview(x) for x in (dgrams[0], dgrams[1], b"\x00" * 90, bytes(bogus),
                                     dgrams[2], dgrams[3])]
    d.events["b"].clear()
    b.receive_datagrams(batch, RxInfo(0), d.now, "a")
    got = []
    while (item := b.next_event()) is not None:
        got.append((item[0].remote_cid, item[1]))
    assert [(cid, ev.data) for cid, ev in got if isinstance(ev, MessageDelivered)] == [
        (c1.local_cid, b"\x00" * 3), (c2.local_cid, b"\x01" * 3),
        (c1.local_cid, b"\x02" * 3), (c2.local_cid, b"\x03" * 3)]
    assert b.drops.get("unknown_cid") == 1
    assert b.unknown_answered == 1
    assert len(b.drops) == 2  # the zeros: a bad version


def _receiver_twins(monkeypatch: pytest.MonkeyPatch) -> tuple[Connection, Connection,
                                                               Connection]:
    """An initiator and two responders to its INIT in the same state, with the
    same keys (one responder nonce for both): what one is fed, the other can
    be fed too."""
    import transport.conn_core

    a = Connection.initiate(config=CFG, secret=SECRET, local_cid=1, now=0.0)
    ((init_dgram, _),) = a.datagrams_to_send(0.0)
    init = HandshakeCodec(SECRET).open_untrusted(init_dgram, peek_untrusted(init_dgram)).body
    assert isinstance(init, Init)
    nonce = bytes(range(16, 32))
    monkeypatch.setattr(transport.conn_core, "new_nonce", lambda: nonce)
    b1, b2 = (Connection.accept(config=CFG, secret=SECRET, local_cid=2, init=init, now=0.0)
              for _ in range(2))
    accept = b1.datagrams_to_send(0.0)
    assert accept == b2.datagrams_to_send(0.0)
    for dgram, path in accept:
        a.receive_datagram(dgram, RxInfo(path.plane), 1e-3)
    assert a.is_established and b1.is_established and b2.is_established
    return a, b1, b2


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_receive_data_and_receive_datagram_agree_datagram_for_datagram(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection's two entries side by side: one responder reads every
    datagram with ``receive_datagram``, its twin with ``receive_data`` where
    the endpoint would (DATA without extensions), from a buffer scribbled
    over after each call. After every datagram both have raised the same
    events, dropped the same, hold the same receive state, and send the same
    bytes back (same keys, same counters)."""
    a, slow, fast = _receiver_twins(monkeypatch)
    rng = random.Random(seed)
    tamper = _tamper(seed)
    size = CFG.payload_size
    now = 2e-3
    buf = bytearray(70_000)
    checked = 0
    for _ in range(6):
        for _ in range(3):
            a.send_message(rng.randbytes(rng.choice([1, size, size + 1, 5 * size + 3])))
        sent = [d for dgram, _ in a.datagrams_to_send(now)
                for d in tamper("ab", dgram)]  # type: ignore[operator]
        rng.shuffle(sent)
        for dgram in sent:
            now += 1e-5
            rx = RxInfo(rng.randrange(CFG.planes))
            slow.receive_datagram(dgram, rx, now)
            if len(dgram) >= _DATA_CUT and dgram[1] == _DATA_TYPE and dgram[3] == _DATA_WORDS \
                    and dgram[0] == VERSION:
                buf[: len(dgram)] = dgram
                fast.receive_data(memoryview(buf)[: len(dgram)], rx, now)
                buf[: len(dgram)] = bytes(len(dgram))  # nothing may keep the view
                checked += 1
            else:
                fast.receive_datagram(dgram, rx, now)
            assert [repr(e) for e in iter(slow.next_event, None)] == \
                [repr(e) for e in iter(fast.next_event, None)]
            assert slow.dropped == fast.dropped
            assert slow.receiver.cum_psn == fast.receiver.cum_psn
            assert slow.receiver.state_size == fast.receiver.state_size
        now += 1e-3
        back = slow.datagrams_to_send(now)
        assert back == fast.datagrams_to_send(now)
        for dgram, path in back:
            a.receive_datagram(dgram, RxInfo(path.plane), now)
        a.handle_timer(now)
    assert checked > 20 and slow.receiver.bytes_received > 0
    assert slow.stats() == fast.stats()
