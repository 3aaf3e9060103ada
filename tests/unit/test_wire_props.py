"""Property tests of wire format v1: round trips, fuzzing, tampering, replay.

The contract under test (trio's ``_untrusted`` convention): a decoder of
network bytes either returns an authentic, fresh packet or raises
``WireError`` -- nothing else escapes, whatever the bytes. The only
modification of a valid packet a receiver accepts is a DATA packet cut
exactly at its trim point.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import (
    Accept,
    Close,
    Data,
    Flag,
    HandshakeCodec,
    Init,
    Nack,
    NackReason,
    Opener,
    PacketType,
    Probe,
    ProbeAck,
    Reset,
    Sack,
    Sealer,
    WireError,
    derive_connection_keys,
    peek_untrusted,
    trim_point,
)
from wire.constants import COUNTER_MAX, HEADER_TAG_LEN, MAX_HEADER_WORDS, VERSION
from wire.packets import HEADER_WORDS, Body

SECRET = bytes(range(32))
KEYS = derive_connection_keys(
    SECRET, initiator_nonce=bytes(16), responder_nonce=bytes([1]) * 16,
    initiator_cid=1, responder_cid=2,
)
SEND, _ = KEYS.for_initiator()
_, RECV = KEYS.for_responder()
OTHER = derive_connection_keys(
    bytes(32), initiator_nonce=bytes(16), responder_nonce=bytes([1]) * 16,
    initiator_cid=1, responder_cid=2,
).i2r

#: The second pass on the pure-Python reference (``BRAID_PURE=1``,
#: scripts/test.sh) fuzzes with a fifth of the examples: the first pass
#: already fuzzes the codec in use in full, and test_wire_c_equivalence.py
#: checks the two codecs give the same answers.
_SCALE = 5 if os.environ.get("BRAID_PURE", "") not in ("", "0") else 1
FUZZ = settings(
    max_examples=10_000 // _SCALE, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SOME = settings(
    max_examples=1_500 // _SCALE, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
u64 = st.integers(0, (1 << 64) - 1)
counters = st.integers(0, COUNTER_MAX)
nonces = st.binary(min_size=16, max_size=16)
# Flags a caller may pass; PLAINTEXT is the sealer's business.
flags_st = st.integers(0, 0x7F)


@st.composite
def data_and_payload(draw: st.DrawFn) -> tuple[Data, bytes]:
    payload = draw(st.binary(max_size=300))
    msg_len = draw(st.integers(len(payload), (1 << 64) - 1))
    offset = draw(st.integers(0, msg_len - len(payload)))
    body = Data(
        psn=draw(u32), ev=draw(u32), plane=draw(u8), payload_len=len(payload),
        msg_id=draw(u32), msg_offset=offset, msg_len=msg_len, timestamp=draw(u32),
    )
    return body, payload


control_bodies: st.SearchStrategy[Body] = st.one_of(
    st.builds(Sack, u32, u32, u64, u32, u32, u32, u32, u16, u8),
    st.builds(Nack, u32, u32, u32, u32, st.sampled_from(list(NackReason)).map(int), u8),
    st.builds(Probe, u32, u32, u32, u32, u8),
    st.builds(ProbeAck, u32, u32, u32, u32, u8),
    st.builds(Close, u16, u32),
    st.builds(Reset, u16, u32),
)
handshake_bodies: st.SearchStrategy[Init | Accept] = st.one_of(
    st.builds(Init, u32, nonces, u8, u16, u16, u32),
    st.builds(Accept, u32, nonces, nonces, u8, u16, u16, u32),
)


Sealed = tuple[bytes, Body, bytes, int]


@st.composite
def sealed(draw: st.DrawFn, plaintext: bool = False) -> Sealed:
    """(datagram, body, payload, flags) for a random connection packet."""
    sealer = Sealer(None if plaintext else SEND, dcid=draw(u32))
    sealer.counter = draw(counters)
    flags = draw(flags_st)
    if draw(st.booleans()):
        body, payload = draw(data_and_payload())
        return sealer.seal(body, payload, flags), body, payload, flags
    body = draw(control_bodies)
    return sealer.seal(body, b"", flags), body, b"", flags


def _opener(plaintext: bool = False) -> Opener:
    return Opener(None if plaintext else RECV)


# -- round trips ---------------------------------------------------------------


@SOME
@given(st.data(), st.booleans())
def test_round_trip_connection_packets(data: st.DataObject, plaintext: bool) -> None:
    dcid = data.draw(u32)
    counter = data.draw(counters)
    flags = data.draw(flags_st)
    sealer = Sealer(None if plaintext else SEND, dcid=dcid)
    sealer.counter = counter
    if data.draw(st.booleans()):
        body, payload = data.draw(data_and_payload())
        if data.draw(st.booleans()):
            raw = sealer.seal(body, payload, flags)
        else:
            raw = sealer.seal_data(
                psn=body.psn, ev=body.ev, plane=body.plane, msg_id=body.msg_id,
                msg_offset=body.msg_offset, msg_len=body.msg_len, timestamp=body.timestamp,
                payload=payload, flags=flags,
            )
    else:
        body, payload = data.draw(control_bodies), b""
        raw = sealer.seal(body, b"", flags)
    assert sealer.counter == counter + 1
    pkt = _opener(plaintext).open_untrusted(raw)
    assert pkt.body == body
    assert pkt.trimmed is False
    assert pkt.payload == (payload if isinstance(body, Data) else None)
    h = pkt.header
    assert (h.version, h.ptype, h.dcid, h.epoch, h.counter) == (
        VERSION, body.TYPE, dcid, 0, counter,
    )
    assert h.flags == flags | (Flag.PLAINTEXT if plaintext else 0)
    assert h.header_words == HEADER_WORDS[body.TYPE]
    assert peek_untrusted(raw) == h


@SOME
@given(handshake_bodies, u32, flags_st, st.booleans())
def test_round_trip_handshake(body: Init | Accept, dcid: int, flags: int, plain: bool) -> None:
    codec = HandshakeCodec(None if plain else SECRET)
    raw = codec.seal(body, dcid=dcid, flags=flags)
    pkt = codec.open_untrusted(raw)
    assert pkt.body == body and pkt.payload is None and not pkt.trimmed
    assert pkt.header.dcid == dcid
    assert pkt.header.flags == flags | (Flag.PLAINTEXT if plain else 0)


@SOME
@given(data_and_payload(), counters, st.booleans())
def test_trimmed_data_round_trip(dp: tuple[Data, bytes], counter: int, plain: bool) -> None:
    body, payload = dp
    sealer = Sealer(None if plain else SEND, dcid=2)
    sealer.counter = counter
    raw = sealer.seal(body, payload)
    cut = trim_point(raw)
    if plain and not payload:
        assert cut is None  # nothing after the header to trim
        return
    assert cut == HEADER_WORDS[PacketType.DATA] * 4 + HEADER_TAG_LEN
    pkt = _opener(plain).open_untrusted(raw[:cut])
    assert pkt.trimmed and pkt.payload is None and pkt.body == body


# -- arbitrary bytes -----------------------------------------------------------

# Mostly-plausible datagrams reach the deeper checks: right version, any type,
# any header length, any tail.
plausible = st.builds(
    lambda t, f, w, rest: bytes([VERSION, t, f, w]) + rest,
    st.integers(0, 12), u8, st.integers(0, MAX_HEADER_WORDS + 2), st.binary(max_size=400),
)
arbitrary = st.one_of(st.binary(max_size=400), plausible)


@FUZZ
@given(arbitrary)
def test_peek_untrusted_only_wire_error(raw: bytes) -> None:
    try:
        h = peek_untrusted(raw)
    except WireError:
        return
    assert len(raw) >= h.header_len + HEADER_TAG_LEN


@FUZZ
@given(arbitrary, st.booleans())
def test_open_untrusted_only_wire_error(raw: bytes, plaintext: bool) -> None:
    opener = _opener(plaintext)
    try:
        pkt = opener.open_untrusted(raw)
    except WireError:
        return
    # Random bytes can only pass where nothing is authenticated.
    assert plaintext and pkt.header.flags & Flag.PLAINTEXT


@FUZZ
@given(arbitrary, st.booleans())
def test_handshake_open_untrusted_only_wire_error(raw: bytes, plaintext: bool) -> None:
    codec = HandshakeCodec(None if plaintext else SECRET)
    try:
        codec.open_untrusted(raw)
    except WireError:
        return
    assert plaintext


# -- mutations of valid packets ------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bytes, str]:
    raw = draw(sealed())[0]
    kind = draw(st.sampled_from(["flip", "truncate", "extend"]))
    if kind == "flip":
        bit = draw(st.integers(0, len(raw) * 8 - 1))
        out = bytearray(raw)
        out[bit // 8] ^= 0x80 >> (bit % 8)
        return raw, bytes(out), kind
    if kind == "truncate":
        # Prefer the interesting cut: exactly at the trim point.
        cut = trim_point(raw)
        n = draw(st.integers(0, len(raw) - 1) if cut is None or draw(st.booleans()) else
                 st.just(cut))
        return raw, raw[:n], kind
    return raw, raw + draw(st.binary(min_size=1, max_size=40)), kind


@settings(SOME, max_examples=5_000 // _SCALE)
@given(mutated())
def test_mutations_rejected_except_trim(m: tuple[bytes, bytes, str]) -> None:
    raw, bad, kind = m
    try:
        pkt = _opener().open_untrusted(bad)
    except WireError:
        return
    # The one legal mutation: a DATA packet cut exactly at its trim point.
    assert kind == "truncate" and len(bad) == trim_point(raw)
    assert pkt.trimmed and pkt.header.ptype is PacketType.DATA


@SOME
@given(sealed(), st.data())
def test_tampered_bytes_fail_the_tag(s: Sealed, data: st.DataObject) -> None:
    raw, body = s[0], s[1]
    # Any byte except the ones checked before authentication (version, type,
    # flags' plaintext bit, header words, epoch) -- those fail structurally.
    i = data.draw(st.sampled_from([i for i in range(len(raw)) if i not in (0, 1, 3, 8, 9)]))
    delta = data.draw(st.integers(1, 255).filter(lambda d: i != 2 or not d & 0x80))
    bad = bytearray(raw)
    bad[i] ^= delta
    with pytest.raises(WireError) as exc:
        _opener().open_untrusted(bytes(bad))
    # DATA's Payload Length (bytes 26-27) is checked against the length first.
    structural = isinstance(body, Data) and i in (26, 27)
    assert exc.value.reason == ("payload_len" if structural else "tag")


@SOME
@given(handshake_bodies, u32, st.data())
def test_tampered_handshake_rejected(body: Init | Accept, dcid: int, data: st.DataObject) -> None:
    raw = HandshakeCodec(SECRET).seal(body, dcid=dcid)
    i = data.draw(st.integers(0, len(raw) - 1))
    bad = bytearray(raw)
    bad[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(WireError):
        HandshakeCodec(SECRET).open_untrusted(bytes(bad))


# -- freshness -----------------------------------------------------------------


@SOME
@given(sealed())
def test_replay_rejected(s: Sealed) -> None:
    raw = s[0]
    opener = _opener()
    opener.open_untrusted(raw)
    with pytest.raises(WireError) as exc:
        opener.open_untrusted(raw)
    assert exc.value.reason == "replay"


@SOME
@given(data_and_payload(), counters, st.booleans())
def test_trimmed_header_replay_rejected(
    dp: tuple[Data, bytes], counter: int, full_first: bool
) -> None:
    sealer = Sealer(SEND, dcid=2)
    sealer.counter = counter
    raw = sealer.seal(*dp)
    cut = trim_point(raw)
    assert cut is not None
    opener = _opener()
    first, second = (raw, raw[:cut]) if full_first else (raw[:cut], raw[:cut])
    opener.open_untrusted(first)
    with pytest.raises(WireError) as exc:
        opener.open_untrusted(second)
    assert exc.value.reason == "replay"
    # And the full packet after its own trimmed header: the counter is spent.
    with pytest.raises(WireError):
        opener.open_untrusted(raw)


@SOME
@given(data_and_payload(), counters, st.binary(min_size=16, max_size=16))
def test_forged_trimmed_header_rejected(dp: tuple[Data, bytes], counter: int, tag: bytes) -> None:
    sealer = Sealer(SEND, dcid=2)
    sealer.counter = counter
    raw = sealer.seal(*dp)
    cut = trim_point(raw)
    assert cut is not None
    forged = raw[: cut - HEADER_TAG_LEN] + tag
    if forged == raw[:cut]:
        return
    opener = _opener()
    with pytest.raises(WireError) as exc:
        opener.open_untrusted(forged)
    assert exc.value.reason == "tag"
    # A forgery never moves the window: the genuine packet still opens.
    assert opener.open_untrusted(raw).payload == dp[1]


# -- modes and keys ------------------------------------------------------------


@SOME
@given(st.booleans(), st.data())
def test_plaintext_mismatch_rejected_both_ways(sender_plain: bool, data: st.DataObject) -> None:
    raw = data.draw(sealed(plaintext=sender_plain))[0]
    with pytest.raises(WireError) as exc:
        _opener(not sender_plain).open_untrusted(raw)
    assert exc.value.reason == "plaintext"


@pytest.mark.parametrize("sender_plain", [True, False])
def test_handshake_plaintext_mismatch(sender_plain: bool) -> None:
    raw = HandshakeCodec(None if sender_plain else SECRET).seal(
        Init(1, bytes(16), 2, 16, 1500, 0), dcid=0
    )
    with pytest.raises(WireError) as exc:
        HandshakeCodec(SECRET if sender_plain else None).open_untrusted(raw)
    assert exc.value.reason == "plaintext"


@SOME
@given(sealed())
def test_wrong_keys_rejected(s: Sealed) -> None:
    raw = s[0]
    for keys in (OTHER, SEND if SEND != RECV else OTHER, KEYS.r2i):
        with pytest.raises(WireError) as exc:
            Opener(keys).open_untrusted(raw)
        assert exc.value.reason == "tag"


@SOME
@given(handshake_bodies)
def test_wrong_cluster_secret_rejected(body: Init | Accept) -> None:
    raw = HandshakeCodec(SECRET).seal(body, dcid=0)
    with pytest.raises(WireError) as exc:
        HandshakeCodec(bytes(32)).open_untrusted(raw)
    assert exc.value.reason == "tag"


def test_handshake_packets_not_opened_as_connection_packets() -> None:
    raw = HandshakeCodec(SECRET).seal(Init(1, bytes(16), 2, 16, 1500, 0), dcid=0)
    with pytest.raises(WireError) as exc:
        _opener().open_untrusted(raw)
    assert exc.value.reason == "type"
    ctrl = Sealer(SEND, dcid=2).seal(Close(0, 0))
    with pytest.raises(WireError) as exc:
        HandshakeCodec(SECRET).open_untrusted(ctrl)
    assert exc.value.reason == "type"


# -- replay window edges -------------------------------------------------------

W = 64


def _packets(counters_: list[int]) -> dict[int, bytes]:
    sealer = Sealer(SEND, dcid=2)
    out = {}
    for c in counters_:
        sealer.counter = c
        out[c] = sealer.seal(Probe(c & 0xFFFF_FFFF, 0, 0, 0, 0))
    return out


def _reason(opener: Opener, raw: bytes) -> str | None:
    try:
        opener.open_untrusted(raw)
    except WireError as exc:
        return exc.reason
    return None


def test_window_edge_exactly() -> None:
    top = 1000
    pk = _packets([top, top - W, top - W + 1, top + 1])
    opener = Opener(RECV, replay_window=W)
    assert _reason(opener, pk[top]) is None
    assert _reason(opener, pk[top - W]) == "replay"  # just outside: older than the window
    assert _reason(opener, pk[top - W + 1]) is None  # the oldest acceptable counter
    assert _reason(opener, pk[top - W + 1]) == "replay"  # but only once
    assert _reason(opener, pk[top + 1]) is None
    assert _reason(opener, pk[top - W + 1]) == "replay"  # now out of the window


def test_window_far_jump_forgets_old() -> None:
    pk = _packets([5, 5 + 10 * W, 6])
    opener = Opener(RECV, replay_window=W)
    assert _reason(opener, pk[5]) is None
    assert _reason(opener, pk[5 + 10 * W]) is None
    assert _reason(opener, pk[6]) == "replay"


@SOME
@given(st.permutations(list(range(W))), st.integers(0, 1 << 40))
def test_reordering_within_window_accepted(order: list[int], base: int) -> None:
    pk = _packets([base + i for i in range(W)])
    opener = Opener(RECV, replay_window=W)
    for i in order:
        assert _reason(opener, pk[base + i]) is None
    for i in order[:8]:
        assert _reason(opener, pk[base + i]) == "replay"


@SOME
@given(st.lists(st.integers(0, 3 * W), min_size=1, max_size=60))
def test_window_matches_model(seq: list[int]) -> None:
    """The window agrees with the obvious set-based model of RFC 4303."""
    pk = _packets(sorted(set(seq)))
    opener = Opener(RECV, replay_window=W)
    seen: set[int] = set()
    highest = -1
    for c in seq:
        ok = c not in seen and (c > highest or highest - c < W)
        assert (_reason(opener, pk[c]) is None) == ok
        if ok:
            seen.add(c)
            highest = max(highest, c)


def test_caller_cannot_mislabel_the_security_mode() -> None:
    """A PLAINTEXT bit passed by a caller must not make an encrypted packet unreadable."""
    raw = Sealer(SEND, dcid=2).seal(Close(0, 1), flags=Flag.PLAINTEXT | Flag.RETX)
    assert _opener().open_untrusted(raw).header.flags == Flag.RETX
    hs = HandshakeCodec(SECRET).seal(Init(1, bytes(16), 2, 16, 1500, 0), dcid=0, flags=0x80)
    assert HandshakeCodec(SECRET).open_untrusted(hs).header.flags == 0
