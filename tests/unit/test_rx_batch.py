"""The compiled receive path (``Connection.receive_data_batch`` ->
``wire._fastwire.place_slices``) against the per-datagram reference
(``receive_data`` one datagram at a time).

Two connection pairs (same seeds; their keys differ, so the bytes compared
are the decrypted SACKs) are fed the same reads: batches of DATA datagrams with
messages of several slices and of one, reordering, resends of PSNs already
placed, CE marks, ACK_REQ and LAST flags, PSNs beyond the window, replays,
bit flips, truncations, trimmed headers and malformed slices under the real
keys. After every read both receivers must hold the same state and both
endpoints must have sent the same bytes, raised the same events and counted
the same drops. Skipped where the extension is not in use (the pure-Python
pass runs the reference only).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from duplex import CFG, endpoints

from transport import conn_dispatch
from transport.connection import Connection
from transport.datagram import RxInfo
from transport.endpoint import _DATA_CUT, _DATA_WORDS, Endpoint, data_run
from transport.events import Event
from wire.codec import Opener
from wire.constants import Flag, PacketType, trim_point

pytestmark = pytest.mark.skipif(conn_dispatch._PLACE_SLICES is None,
                                reason="the compiled receive path is not in use (BRAID_PURE "
                                       "or no extension)")

_SKIP = {"_assembly", "delivered"}


def _receiver_state(conn: Connection) -> dict[str, Any]:
    r = conn.receiver
    state = {k: v for k, v in vars(r).items() if k not in _SKIP}
    state["assembly"] = {m: (a.msg_len, dict(a.slices), a.received)
                         for m, a in r._assembly.items()}
    state["delivered"] = list(r.delivered)
    state["conn"] = (conn.state, conn.confirmed, conn.last_heard)
    return state


class _Pair:
    """One pair, connected; ``batched`` picks the receive path of b."""

    def __init__(self, seed: int, batched: bool) -> None:
        _, _, self.d = endpoints(seed=seed)
        self.batched = batched
        self.conn = self.d.ep["a"].connect("b", 0.0)
        self.d.run_until(0.1, lambda: self.conn.is_established
                         and bool(self.d.ep["b"].connections))
        (self.resp,) = self.d.ep["b"].connections.values()
        keys = self.conn._opener_keys
        assert keys and not isinstance(keys, bool)
        self._opener = Opener(keys)  # a's view of what b sends
        self.events: list[Event] = []
        #: What b sent back, decrypted: (plane, type, flags, body).
        self.sent: list[tuple[int, object, int, object]] = []

    @property
    def b(self) -> Endpoint:
        return self.d.ep["b"]

    def seal(self, psn: int, mid: int, off: int, mlen: int, ts: int, flags: int) -> bytes:
        s = self.conn._sealer
        assert s is not None
        size = CFG.payload_size
        n = min(size, mlen - off) if off < mlen else size
        return bytes(s.seal_data(psn=psn & 0xFFFFFFFF, ev=psn % 7, plane=psn % 2, msg_id=mid,
                                 msg_offset=off, msg_len=mlen, timestamp=ts,
                                 payload=bytes([mid & 0xFF]) * n, flags=flags))

    def read(self, batch: list[bytes], rx: RxInfo, now: float) -> None:
        saved = conn_dispatch._PLACE_SLICES
        if not self.batched:
            conn_dispatch._PLACE_SLICES = None
        try:
            # Views of one reused buffer, as the I/O layer hands them over.
            buf = bytearray(b"".join(batch))
            view = memoryview(buf)
            views, at = [], 0
            for g in batch:
                views.append(view[at:at + len(g)])
                at += len(g)
            self.b.receive_datagrams(views, rx, now, "a")
            buf[:] = bytes(len(buf))  # nothing may keep the buffer
        finally:
            conn_dispatch._PLACE_SLICES = saved
        self.b.flush_acks(now)
        opener = self._opener
        for _p, d, path in self.b.datagrams_to_send(now):
            pkt = opener.open_untrusted(bytes(d))
            self.sent.append((path.plane, pkt.header.ptype, pkt.header.flags, pkt.body))
        while (item := self.b.next_event()) is not None:
            self.events.append(item[1])


def _script(seed: int) -> list[tuple[list[tuple[int, int, int, int, int, int] | str], RxInfo]]:
    """Reads: each a list of slices (psn, mid, off, mlen, ts, flags) or a
    tampering word applied to the previous datagram, and the read's RxInfo."""
    rng = random.Random(seed)
    size = CFG.payload_size
    slices: list[tuple[int, int, int, int, int, int]] = []
    psn, mid = 0, 1
    for _ in range(rng.randrange(6, 14)):
        mlen = rng.choice([size // 2, size, 3 * size, 7 * size + 11, 20 * size])
        for off in range(0, mlen, size):
            flags = 0
            if off + size >= mlen:
                flags |= int(Flag.LAST)
            if rng.random() < 0.05:
                flags |= int(Flag.ACK_REQ)
            slices.append((psn, mid, off, mlen, psn * 10, flags))
            psn += 1
        mid += 1
    # Local reordering, as spraying does.
    for i in range(len(slices) - 1):
        if rng.random() < 0.3:
            j = min(len(slices) - 1, i + rng.randrange(1, 6))
            slices[i], slices[j] = slices[j], slices[i]
    reads: list[tuple[list[tuple[int, int, int, int, int, int] | str], RxInfo]] = []
    i = 0
    while i < len(slices):
        k = rng.randrange(1, 40)
        batch: list[tuple[int, int, int, int, int, int] | str] = list(slices[i:i + k])
        i += k
        r = rng.random()
        if r < 0.15 and i > 2:
            batch.insert(rng.randrange(len(batch) + 1), slices[rng.randrange(i)])  # a resend
        elif r < 0.22:
            batch.insert(rng.randrange(1, len(batch) + 1), "replay")
        elif r < 0.28:
            batch.insert(rng.randrange(1, len(batch) + 1), "flip")
        elif r < 0.32:
            batch.insert(rng.randrange(1, len(batch) + 1), "trim")
        elif r < 0.35:
            batch.insert(rng.randrange(1, len(batch) + 1), "cut")
        elif r < 0.37:
            p = slices[i - 1]
            batch.append((p[0] + 100_000, p[1], p[2], p[3], p[4], 0))  # beyond the window
        elif r < 0.39:
            # A slice inconsistent with its message, under the real keys.
            p = slices[i - 1]
            batch.append((psn, p[1], p[2] + 1, p[3], p[4], 0))
            psn += 1
        reads.append((batch, RxInfo(rng.randrange(2), ce=rng.random() < 0.1,
                                    lag=rng.choice([0.0, 1e-4]))))
    return reads


def _datagrams(pair: _Pair, batch: list[tuple[int, int, int, int, int, int] | str],
               rng: random.Random) -> list[bytes]:
    out: list[bytes] = []
    for item in batch:
        if isinstance(item, str):
            prev = out[-1]
            if item == "replay":
                out.append(prev)
            elif item == "flip":
                g = bytearray(prev)
                g[rng.randrange(len(g))] ^= 1 << rng.randrange(8)
                out[-1] = bytes(g)
            elif item == "trim":
                cut = trim_point(prev)
                if cut is not None:
                    out[-1] = prev[:cut]
            else:
                out[-1] = prev[:rng.randrange(1, len(prev))]
        else:
            out.append(pair.seal(*item))
    return out


@pytest.mark.parametrize("seed", range(1, 41))
def test_batches_leave_the_receiver_as_one_by_one(seed: int) -> None:
    ref, fast = _Pair(seed, batched=False), _Pair(seed, batched=True)
    rng_ref, rng_fast = random.Random(seed), random.Random(seed)
    now = 0.2
    for batch, rx in _script(seed):
        now += 1e-4
        g_ref = _datagrams(ref, batch, rng_ref)
        g_fast = _datagrams(fast, batch, rng_fast)
        assert [len(g) for g in g_ref] == [len(g) for g in g_fast]
        ref.read(g_ref, rx, now)
        fast.read(g_fast, rx, now)
        assert _receiver_state(fast.resp) == _receiver_state(ref.resp)
        assert fast.sent == ref.sent
        assert fast.events == ref.events
        assert fast.b.drops == ref.b.drops
        assert fast.resp.dropped == ref.resp.dropped
    assert ref.events  # messages were delivered


def test_a_read_of_whole_messages_is_delivered_in_order() -> None:
    """The common case end to end: three messages of several slices in one
    read come out whole, in order, and the SACKs the read asked for left."""
    pair = _Pair(7, batched=True)
    size = CFG.payload_size
    batch, psn = [], 0
    for mid, mlen in ((1, 5 * size), (2, 3 * size + 9), (3, 4 * size)):
        for off in range(0, mlen, size):
            last = int(Flag.LAST) if off + size >= mlen else 0
            batch.append(pair.seal(psn, mid, off, mlen, psn, last))
            psn += 1
    pair.read(batch, RxInfo(0), 0.3)
    got = [(e.msg_id, e.data) for e in pair.events if hasattr(e, "data")]
    assert [m for m, _ in got] == [1, 2, 3]
    assert [len(d) for _, d in got] == [5 * size, 3 * size + 9, 4 * size]
    assert got[1][1] == bytes([2]) * (3 * size + 9)
    assert pair.resp.receiver.cum_psn == psn
    assert pair.sent  # acknowledged


@pytest.mark.parametrize("seed", range(1, 21))
def test_data_runs_are_cut_as_the_reference_cuts_them(seed: int) -> None:
    """``wire._fastwire.data_run`` against ``transport.endpoint.data_run``:
    DATA of two connections, other packet types, short datagrams, another
    version, in random order."""
    from wire import _fastwire

    rng = random.Random(seed)
    head = bytes([1, int(PacketType.DATA), 0, _DATA_WORDS])
    batch: list[bytes | memoryview] = []
    for _ in range(rng.randrange(1, 30)):
        cid = rng.choice([1, 2, 0xFFFFFFFF]).to_bytes(4, "big")
        g = head + cid + bytes(_DATA_CUT - 8 + rng.randrange(3))
        r = rng.random()
        if r < 0.1:
            g = g[:_DATA_CUT - 1]
        elif r < 0.2:
            g = bytes([2]) + g[1:]
        elif r < 0.3:
            g = g[:1] + bytes([int(PacketType.SACK)]) + g[2:]
        elif r < 0.35:
            g = g[:3] + bytes([_DATA_WORDS + 1]) + g[4:]
        batch.append(memoryview(g) if rng.random() < 0.5 else g)
    for start in range(len(batch)):
        assert _fastwire.data_run(batch, start) == data_run(batch, start)
