"""The DATA fast path of ``Opener.open_untrusted`` against the generic path.

``open_untrusted`` decodes DATA packets without header extensions on a fast
path (one unpack, inlined checks). Whatever the bytes, it must answer
exactly as the generic path does -- same packet or same ``WireError``
reason -- with and without a header from ``peek_untrusted``.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import (
    Data,
    Flag,
    Opener,
    Sealer,
    WireError,
    derive_connection_keys,
    peek_untrusted,
    trim_point,
)
from wire.codec import Packet
from wire.constants import COUNTER_MAX, HEADER_TAG_LEN, VERSION, PacketType
from wire.packets import HEADER_WORDS

_KEYS = derive_connection_keys(
    bytes(range(32)), initiator_nonce=bytes(16), responder_nonce=bytes([1]) * 16,
    initiator_cid=1, responder_cid=2,
)
SEND, _ = _KEYS.for_initiator()
_, RECV = _KEYS.for_responder()

SOME = settings(
    max_examples=3_000, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Outcome = tuple[str, Packet | str]


def _outcome(fn: object, *args: object) -> Outcome:
    try:
        return ("ok", fn(*args))  # type: ignore[operator]
    except WireError as exc:
        return ("error", exc.reason)


def _three_ways(raw: bytes, plaintext: bool, epoch: int = 0) -> list[Outcome]:
    keys = None if plaintext else RECV

    def fresh() -> Opener:
        return Opener(keys, epoch=epoch)

    generic = _outcome(fresh()._open_generic, raw, None)
    fast = _outcome(fresh().open_untrusted, raw)
    try:
        h = peek_untrusted(raw)
    except WireError as exc:
        with_header: Outcome = ("error", exc.reason)
    else:
        with_header = _outcome(fresh().open_untrusted, raw, h)
    return [generic, fast, with_header]


@st.composite
def data_and_payload(draw: st.DrawFn) -> tuple[Data, bytes]:
    payload = draw(st.binary(max_size=64))
    msg_len = draw(st.integers(len(payload), (1 << 64) - 1))
    u32 = st.integers(0, 0xFFFF_FFFF)
    body = Data(
        psn=draw(u32), ev=draw(u32), plane=draw(st.integers(0, 0xFF)),
        payload_len=len(payload), msg_id=draw(u32),
        msg_offset=draw(st.integers(0, msg_len - len(payload))), msg_len=msg_len,
        timestamp=draw(u32),
    )
    return body, payload


@st.composite
def data_datagrams(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A sealed DATA datagram, then maybe trimmed, cut, extended or bit-flipped."""
    plaintext = draw(st.booleans())
    body, payload = draw(data_and_payload())
    sealer = Sealer(None if plaintext else SEND, dcid=draw(st.integers(0, 0xFFFF_FFFF)))
    sealer.counter = draw(st.integers(0, COUNTER_MAX))
    sealer.epoch = draw(st.sampled_from([0, 0, 0, 1]))
    raw = sealer.seal(body, payload, draw(st.integers(0, 0x7F)))
    kind = draw(st.sampled_from(["none", "trim", "cut", "extend", "flip", "flip"]))
    if kind == "trim":
        cut = trim_point(raw)
        raw = raw if cut is None else raw[:cut]
    elif kind == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif kind == "extend":
        raw = raw + draw(st.binary(min_size=1, max_size=20))
    elif kind == "flip":
        out = bytearray(raw)
        for _ in range(draw(st.integers(1, 3))):
            out[draw(st.integers(0, min(len(raw), 90) - 1))] ^= draw(st.integers(1, 255))
        raw = bytes(out)
    return raw, plaintext


@SOME
@given(data_datagrams())
def test_fast_path_answers_as_the_generic_path(d: tuple[bytes, bool]) -> None:
    raw, plaintext = d
    generic, fast, with_header = _three_ways(raw, plaintext)
    assert fast == generic
    assert with_header == generic


def test_fast_path_trimmed_and_epoch_cases() -> None:
    body = Data(1, 2, 3, 4, 5, 0, 10, 6)
    for plaintext in (False, True):
        sealer = Sealer(None if plaintext else SEND, dcid=9, epoch=3)
        raw = sealer.seal(body, b"abcd")
        cut = trim_point(raw)
        assert cut is not None
        for dgram in (raw, raw[:cut]):
            ok = _three_ways(dgram, plaintext, epoch=3)
            assert ok[0][0] == "ok" and ok[1:] == ok[:1] * 2
            pkt = ok[0][1]
            assert isinstance(pkt, Packet) and pkt.body == body
            assert pkt.header.epoch == 3 and pkt.trimmed is (dgram is not raw)
            assert _three_ways(dgram, plaintext, epoch=4) == [("error", "epoch")] * 3


def test_seal_data_takes_intflag_flags_and_checks_the_epoch() -> None:
    kw = dict(psn=1, ev=2, plane=3, msg_id=4, msg_offset=0, msg_len=5, timestamp=6,
              payload=b"hello")
    a = Sealer(SEND, dcid=7).seal_data(**kw, flags=Flag.RETX | Flag.LAST)  # type: ignore[arg-type]
    b = Sealer(SEND, dcid=7).seal_data(**kw, flags=int(Flag.RETX | Flag.LAST))  # type: ignore[arg-type]
    assert a == b
    assert Opener(RECV).open_untrusted(a).header.flags == Flag.RETX | Flag.LAST
    top = Sealer(SEND, dcid=7, epoch=0xFFFF).seal_data(**kw)  # type: ignore[arg-type]
    assert Opener(RECV, epoch=0xFFFF).open_untrusted(top).header.epoch == 0xFFFF
    for bad in (0x1_0000, -1):
        with pytest.raises(struct.error):
            Sealer(SEND, dcid=7, epoch=bad).seal_data(**kw)  # type: ignore[arg-type]


def _tuple_outcome(raw: bytes, plaintext: bool) -> tuple[str, object]:
    """``open_data_untrusted`` on a view of a scratch buffer that is then
    scribbled over: what it returns must not refer to the buffer."""
    buf = bytearray(raw)
    try:
        got = Opener(None if plaintext else RECV).open_data_untrusted(memoryview(buf))
    except WireError as exc:
        return ("error", exc.reason)
    buf[:] = bytes(len(buf))
    if got is None:
        return ("none", None)
    (_v, _t, _f, _w, _d, _ec, psn, ev, plane, _r, plen, mid, moff, mlen,
     ts), payload = got
    return ("ok", Packet(peek_untrusted(raw), Data(psn, ev, plane, plen, mid, moff, mlen, ts),
                         payload, payload is None))


@SOME
@given(data_datagrams())
def test_tuple_path_answers_as_the_generic_path(d: tuple[bytes, bool]) -> None:
    """The object-free receive path (``open_data_untrusted``, on views of a
    reused buffer): the generic path's packet or error, or None for what is
    not DATA without header extensions (the caller then opens it generically)."""
    raw, plaintext = d
    generic = _three_ways(raw, plaintext)[0]
    got = _tuple_outcome(raw, plaintext)
    if got[0] == "none":
        words = HEADER_WORDS[PacketType.DATA]
        assert len(raw) < words * 4 + HEADER_TAG_LEN or raw[0] != VERSION \
            or raw[1] != PacketType.DATA or raw[3] != words
    else:
        assert got == generic


def test_tuple_path_returns_none_for_other_packets() -> None:
    from wire import Sack

    sack = Sealer(SEND, dcid=7).seal(Sack(1, 2, 3, 4, 5, 6, 7, 0, 0))
    assert Opener(RECV).open_data_untrusted(sack) is None
    assert Opener(RECV).open_data_untrusted(b"\x01\x03") is None
