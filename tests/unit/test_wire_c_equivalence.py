"""The compiled codec (``wire._fastwire``) against the Python reference.

Same inputs, same bytes out; same datagrams in, same decision (the same
fields and payload, or a ``WireError`` with the same reason) and the same
replay-window state after it. Whatever ``BRAID_PURE`` says, both
implementations are loaded here side by side (``wire.codec.c_classes``).
"""

from __future__ import annotations

import os
import select
import socket
import struct
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import Close, Nack, Probe, Sack, WireError, derive_connection_keys, trim_point
from wire.codec import PyOpener, PyReplayWindow, PySealer, c_classes
from wire.constants import COUNTER_MAX

_C = c_classes()
pytestmark = pytest.mark.skipif(
    _C is None, reason="wire._fastwire is not built here (pip install -e . builds it)")

_KEYS = derive_connection_keys(
    bytes(range(32)), initiator_nonce=bytes(16), responder_nonce=bytes([1]) * 16,
    initiator_cid=1, responder_cid=2,
)
SEND, _ = _KEYS.for_initiator()
_, RECV = _KEYS.for_responder()

SOME = settings(
    max_examples=700, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

u32 = st.integers(0, 0xFFFF_FFFF)
u64 = st.integers(0, (1 << 64) - 1)


def _impls() -> tuple[Any, Any, Any]:
    assert _C is not None
    return _C


def _outcome(fn: Any, *args: Any, **kw: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args, **kw))
    except WireError as exc:
        return ("wire", exc.reason)
    except (struct.error, OverflowError, TypeError, ValueError) as exc:
        return ("error", type(exc).__name__)
    except InvalidTag:
        return ("error", "InvalidTag")


@st.composite
def seal_args(draw: st.DrawFn) -> dict[str, Any]:
    payload = draw(st.binary(max_size=80))
    return dict(
        psn=draw(u32), ev=draw(u32), plane=draw(st.integers(0, 0xFF)), msg_id=draw(u32),
        msg_offset=draw(u64), msg_len=draw(u64), timestamp=draw(u32), payload=payload,
        flags=draw(st.integers(0, 0xFF)),
    )


@SOME
@given(seal_args(), st.booleans(), st.integers(0, COUNTER_MAX), u32,
       st.sampled_from([0, 1, 0xFFFF]))
def test_seal_data_gives_the_same_bytes(kw: dict[str, Any], plaintext: bool, counter: int,
                                        dcid: int, epoch: int) -> None:
    csealer_cls = _impls()[0]
    keys = None if plaintext else SEND
    py, c = PySealer(keys, dcid=dcid, epoch=epoch), csealer_cls(keys, dcid=dcid, epoch=epoch)
    py.counter = c.counter = counter
    assert c.seal_data(**kw) == py.seal_data(**kw)
    args = [kw[k] for k in ("psn", "ev", "plane", "msg_id", "msg_offset", "msg_len",
                            "timestamp", "payload", "flags")]
    # Positional, as the run loop passes them (past the last counter: OverflowError).
    assert _outcome(c.seal_data, *args) == _outcome(py.seal_data, *args)
    assert c.counter == py.counter


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["psn", "ev", "plane", "msg_id", "msg_offset", "msg_len", "timestamp",
                        "flags", "payload", "epoch", "dcid", "counter"]),
       st.sampled_from([-1, 1 << 8, 1 << 16, 1 << 32, 1 << 64, 1 << 70, 1.5, "x"]),
       st.booleans())
def test_seal_data_refuses_what_the_reference_refuses(field: str, bad: Any,
                                                      plaintext: bool) -> None:
    csealer_cls = _impls()[0]
    keys = None if plaintext else SEND
    kw: dict[str, Any] = dict(psn=1, ev=2, plane=3, msg_id=4, msg_offset=0, msg_len=9,
                              timestamp=5, payload=b"abc", flags=0)
    outs = []
    for cls in (PySealer, csealer_cls):
        s = cls(keys, dcid=7)
        args = dict(kw)
        if field in ("epoch", "dcid", "counter"):
            if not isinstance(bad, int) or bad < 0 or bad >= 1 << 63:
                continue  # the C sealer keeps these as C integers: not settable
            setattr(s, field, bad)
        elif field == "payload":
            args["payload"] = bytes(1 << 16) if bad == 1 << 16 else b"x"
        else:
            args[field] = bad
        outs.append((_outcome(s.seal_data, **args), s.counter))
    assert len(set(map(repr, outs))) <= 1, outs


@SOME
@given(st.sampled_from(["sack", "nack", "probe", "close"]), st.booleans(),
       st.integers(0, COUNTER_MAX), st.integers(0, 0xFF))
def test_control_packets_give_the_same_bytes(kind: str, plaintext: bool, counter: int,
                                             flags: int) -> None:
    csealer_cls = _impls()[0]
    body = {"sack": Sack(1, 2, 3, 4, 5, 6, 7, 8, 9), "nack": Nack(1, 2, 3, 4, 1, 5),
            "probe": Probe(1, 2, 3, 4, 5), "close": Close(0, 9)}[kind]
    keys = None if plaintext else SEND
    py, c = PySealer(keys, dcid=3), csealer_cls(keys, dcid=3)
    py.counter = c.counter = counter
    assert c.seal(body, flags=flags) == py.seal(body, flags=flags)  # type: ignore[arg-type]


@st.composite
def datagram_stream(draw: st.DrawFn) -> tuple[bool, list[bytes]]:
    """Sealed DATA (and a few control packets), then trimmed, truncated, extended,
    bit-flipped, retargeted, replayed or random: a receiver's day."""
    plaintext = draw(st.booleans())
    sealer = PySealer(None if plaintext else SEND, dcid=5)
    sealer.counter = draw(st.sampled_from([0, 100, COUNTER_MAX - 40]))
    out: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["data", "data", "trim", "cut", "extend", "flip", "replay",
                                     "control", "random", "epoch", "field", "mode"]))
        if kind == "replay" and out:
            out.append(draw(st.sampled_from(out)))
            continue
        if kind == "random":
            out.append(draw(st.binary(max_size=120)))
            continue
        if kind == "control":
            out.append(sealer.seal(Sack(1, 2, 3, 4, 5, 6, 7, 0, 0)))
            continue
        payload = draw(st.binary(max_size=40))
        off = draw(st.integers(0, 64))
        mlen = off + len(payload) + draw(st.integers(0, 8))
        if kind == "field":
            mlen = draw(st.integers(0, max(0, off + len(payload) - 1)))
        raw = sealer.seal_data(draw(u32), draw(u32), draw(st.integers(0, 0xFF)), 9, off, mlen,
                               draw(u32), payload, draw(st.integers(0, 0xFF)))
        if kind == "trim":
            cut = trim_point(raw)
            raw = raw if cut is None else raw[:cut]
        elif kind == "cut":
            raw = raw[: draw(st.integers(0, len(raw)))]
        elif kind == "extend":
            raw += draw(st.binary(min_size=1, max_size=20))
        elif kind == "flip":
            b = bytearray(raw)
            for _ in range(draw(st.integers(1, 3))):
                b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
            raw = bytes(b)
        elif kind == "epoch":
            raw = raw[:8] + b"\x00\x07" + raw[10:]
        elif kind == "mode":
            raw = raw[:2] + bytes([raw[2] ^ 0x80]) + raw[3:]
        out.append(raw)
    return plaintext, out


def _run(opener: Any, dgrams: list[bytes], fast: bool) -> list[tuple[str, Any, int]]:
    got = []
    for d in dgrams:
        if fast:
            o = _outcome(opener.open_data_untrusted, memoryview(bytearray(d)))
        else:
            o = _outcome(opener.open_untrusted, d)
            if o[0] == "ok":
                pkt = o[1]
                o = ("ok", (pkt.header, pkt.body, pkt.payload, pkt.trimmed))
        got.append((o[0], o[1], opener.replay.highest))
    return got


@SOME
@given(datagram_stream(), st.sampled_from([8192, 16]))
def test_openers_take_the_same_decisions(stream: tuple[bool, list[bytes]], window: int) -> None:
    _cs, copener_cls, _cr = _impls()
    plaintext, dgrams = stream
    keys = None if plaintext else RECV
    for fast in (True, False):
        py = _run(PyOpener(keys, replay_window=window), dgrams, fast)
        c = _run(copener_cls(keys, replay_window=window), dgrams, fast)
        assert c == py


@SOME
@given(datagram_stream())
def test_open_data_many_matches_one_by_one(stream: tuple[bool, list[bytes]]) -> None:
    """A GRO batch: every datagram the same size but the last; each opened on its
    own, a bad one loses nothing of the others."""
    _cs, copener_cls, _cr = _impls()
    plaintext, dgrams = stream
    keys = None if plaintext else RECV
    size = len(dgrams[0])
    batch = [dgrams[0]] + [d for d in dgrams[1:] if len(d) == size]
    tail = [d for d in dgrams[1:] if 0 < len(d) < size][:1]
    batch += tail
    if size == 0:
        return
    one, many = copener_cls(keys), copener_cls(keys)
    want = [_outcome(one.open_data_untrusted, d) for d in batch]
    got = many.open_data_many(memoryview(bytearray(b"".join(batch))), size)
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        if isinstance(g, WireError):
            assert w == ("wire", g.reason)
        else:
            assert w == ("ok", g)
    assert many.replay.highest == one.replay.highest


@SOME
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=200),
       st.integers(1, 64))
def test_replay_windows_agree(ops: list[tuple[bool, int]], size: int) -> None:
    crw = _impls()[2]
    py, c = PyReplayWindow(size), crw(size)
    for commit, counter in ops:
        if commit:
            py.commit(counter)
            c.commit(counter)
        else:
            assert _outcome(c.check, counter) == _outcome(py.check, counter)
        assert c.highest == py.highest


@SOME
@given(st.binary(max_size=3000), st.integers(1, 1400), st.booleans(), u32, u64,
       st.integers(0, 0xFF), st.integers(0, 0xFF))
def test_seal_data_run_is_consecutive_seal_data(payload: bytes, segment: int, plaintext: bool,
                                                psn: int, off: int, flags: int,
                                                last: int) -> None:
    csealer_cls = _impls()[0]
    off = min(off, (1 << 64) - 1 - len(payload))
    keys = None if plaintext else SEND
    c, py = csealer_cls(keys, dcid=4), PySealer(keys, dcid=4)
    c.counter = py.counter = 77
    buf, n, size = c.seal_data_run(psn, 3, 1, 5, off, off + len(payload), 6, payload, segment,
                                   flags, last)
    chunks = [payload[i:i + segment] for i in range(0, len(payload), segment)] or [b""]
    want = [py.seal_data((psn + i) & 0xFFFF_FFFF, 3, 1, 5, off + i * segment,
                         off + len(payload), 6, ch, flags | (last if i == len(chunks) - 1 else 0))
            for i, ch in enumerate(chunks)]
    assert (buf, n, size) == (b"".join(want), len(want), len(want[0]))
    assert c.counter == py.counter


@SOME
@given(st.binary(max_size=200), st.binary(max_size=60), st.binary(min_size=12, max_size=12),
       st.sampled_from([16, 32]))
def test_aesgcm_matches_cryptography(data: bytes, aad: bytes, nonce: bytes, klen: int) -> None:
    from wire._fastwire import AESGCM as CAESGCM

    key = bytes(range(klen))
    ref, c = AESGCM(key), CAESGCM(key)
    ct = ref.encrypt(nonce, data, aad)
    assert c.encrypt(nonce, data, aad) == ct
    assert c.decrypt(nonce, ct, aad) == data
    with pytest.raises(InvalidTag):
        c.decrypt(nonce, ct[:-1] + bytes([ct[-1] ^ 1]), aad)
    with pytest.raises(InvalidTag):
        c.decrypt(nonce, ct[:15], aad)


def test_replay_attribute_takes_only_the_c_window() -> None:
    _cs, copener_cls, crw = _impls()
    o = copener_cls(RECV)
    o.replay = crw(16)
    assert o.replay.size == 16
    with pytest.raises(TypeError):
        o.replay = PyReplayWindow(16)


def _udp_pair(family: socket.AddressFamily, host: str) -> tuple[socket.socket, socket.socket]:
    rx = socket.socket(family, socket.SOCK_DGRAM)
    tx = socket.socket(family, socket.SOCK_DGRAM)
    rx.bind((host, 0))
    tx.bind((host, 0))
    rx.setblocking(False)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    if family == socket.AF_INET6:
        rx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    else:
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
    return rx, tx


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"),
                                         (socket.AF_INET6, "::1")])
def test_send_gso_and_drain_on_loopback(family: socket.AddressFamily, host: str) -> None:
    """Real sockets: one GSO send of 5 datagrams (the last shorter), read back by
    one recvmmsg with their TOS, source and a kernel timestamp; without GRO on
    the reader, each datagram is its own read."""
    from wire import _fastwire

    if not socket.has_ipv6 and family == socket.AF_INET6:
        pytest.skip("no IPv6")
    try:
        rx, tx = _udp_pair(family, host)
    except OSError as exc:
        pytest.skip(f"no {host}: {exc}")
    with rx, tx:
        sizes = [300] * 4 + [120]
        data = b"".join(os.urandom(n) for n in sizes)
        dest = rx.getsockname()
        try:
            sent = _fastwire.send_gso(tx.fileno(), data, 300, dest, 0x2A)
        except OSError as exc:
            pytest.skip(f"this kernel refuses UDP GSO: {exc}")
        assert sent == len(data)
        buf = bytearray(8 * 2048)
        assert select.select([rx], [], [], 5.0)[0], "nothing arrived"
        rows = _fastwire.drain(rx.fileno(), buf, 2048)
        assert [r[0] for r in rows] == sizes
        assert bytes(buf[:300]) == data[:300]
        assert bytes(buf[4 * 2048: 4 * 2048 + 120]) == data[1200:]
        src = tx.getsockname()
        for nbytes, seg, tos, addr, ts in rows:
            assert seg == 0 and tos == 0x2A and addr[:2] == src[:2] and ts > 0
            assert nbytes in (300, 120)
        assert _fastwire.drain(rx.fileno(), buf, 2048) == []


def test_uninitialised_objects_refuse_to_work() -> None:
    """``__new__`` without ``__init__`` has no keys and no mode: refused, never
    sealed or opened as if it were plaintext."""
    from wire import _fastwire

    s = _fastwire.SealerCore.__new__(_fastwire.SealerCore)
    o = _fastwire.OpenerCore.__new__(_fastwire.OpenerCore)
    with pytest.raises(RuntimeError):
        s.seal_data(1, 2, 3, 4, 0, 1, 5, b"x")
    with pytest.raises(RuntimeError):
        s.seal_data_run(1, 2, 3, 4, 0, 1, 5, b"x", 1)
    with pytest.raises(RuntimeError):
        o.open_data_untrusted(bytes(100))
    with pytest.raises(RuntimeError):
        o.open_data_many(bytes(100), 50)
