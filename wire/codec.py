"""Sealing packets and opening untrusted datagrams.

``Sealer`` (one per connection and direction) turns bodies into datagrams
under a fresh 48-bit counter each; ``Opener`` authenticates, checks
freshness and decodes. ``HandshakeCodec`` does the same for INIT/ACCEPT
under the cluster's handshake key. Every function that reads network bytes
ends in ``_untrusted`` and raises only ``WireError``.

Layout: header (common + body) | header tag | payload ciphertext | payload tag.
- header tag = AES-GMAC(header key, nonce, aad=header): what a trimming
  switch keeps stays authenticated on its own.
- payload = AES-GCM(payload key, nonce, payload, aad=header+header tag):
  an untrimmed packet is fully authenticated by this one check.
- nonce = 0x00000000 | epoch (16 bits) | counter (48 bits), unique per key.

Two implementations, one API: the classes here prefixed ``Py`` are the
reference; ``wire/_fastwire*.c`` is their compiled twin for DATA packets and
the replay window (OpenSSL EVP). ``Sealer``, ``Opener`` and
``ReplayWindow`` name the compiled ones when the extension is built and
``BRAID_PURE`` is unset, else the reference (``IMPLEMENTATION`` says which,
chosen once at import). Both give the same bytes and the same decisions
(tests/unit/test_wire_c_equivalence.py).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass
from operator import index as _index
from typing import TYPE_CHECKING, Any, Final, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from wire.constants import (
    COMMON_HEADER_LEN,
    COUNTER_MAX,
    HEADER_TAG_LEN,
    MAX_HEADER_WORDS,
    PAYLOAD_TAG_LEN,
    VERSION,
    Flag,
    NackReason,
    PacketType,
)
from wire.errors import WireError
from wire.keys import NONCE_LEN, DirectionKeys, handshake_key
from wire.packets import (
    BODY_STRUCT,
    COMMON,
    DATA_BODY,
    HEADER_WORDS,
    Accept,
    Body,
    CommonHeader,
    Data,
    Init,
    Nack,
    UnknownConn,
    pack_body,
    unpack_body,
)

_NONCE: Final = struct.Struct("!IHHI")
_NONCE_BYTES: Final = _NONCE.size
#: Common header + DATA body in one struct: one pack/unpack per DATA packet on the hot
#: path. Key epoch (16 bits) and counter (48 bits) travel as one 64-bit field here
#: (same bytes as COMMON's ``HHI``): it is also the nonce, as a 12-byte big-endian int.
_DATA_HEADER: Final = struct.Struct("!BBBBIQ" + DATA_BODY.format.lstrip("!"))
assert _DATA_HEADER.size == COMMON.size + DATA_BODY.size
_COUNTER_MASK: Final = COUNTER_MAX
#: Plain ints: ``int & IntFlag`` goes through Python-level enum code, costly per packet.
_PLAINTEXT: Final = int(Flag.PLAINTEXT)
_NOT_PLAINTEXT: Final = ~_PLAINTEXT

_ZERO_TAG: Final = bytes(HEADER_TAG_LEN)
_DATA_WORDS: Final = HEADER_WORDS[PacketType.DATA]
_TYPES: Final = {int(t): t for t in PacketType}
#: Types sealed under the cluster handshake key, outside any connection.
_HANDSHAKE_TYPES: Final = frozenset({PacketType.INIT, PacketType.ACCEPT,
                                     PacketType.UNKNOWN_CONN})
_NACK_REASONS: Final = frozenset(int(r) for r in NackReason)
DEFAULT_REPLAY_WINDOW: Final = 8192
_DATA: Final = PacketType.DATA
#: Header bytes of a DATA packet without extensions, and where its header tag ends.
_DATA_HLEN: Final = _DATA_WORDS * 4
_DATA_CUT: Final = _DATA_HLEN + HEADER_TAG_LEN
_DATA_HEADER_UNPACK: Final = _DATA_HEADER.unpack_from
#: What ``Opener.open_data_untrusted`` returns: the unpacked header, and the payload.
DataFields = tuple[tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int,
                         int], bytes | None]


@dataclass(slots=True)
class Packet:
    """An authenticated, fresh, decoded packet.

    ``payload`` is None when a switch trimmed it (``trimmed`` is then True);
    the header was still authenticated by its own tag.
    """

    header: CommonHeader
    body: Body
    payload: bytes | None
    trimmed: bool


def peek_untrusted(data: bytes) -> CommonHeader:
    """Parse and sanity-check the common header only (for demultiplexing).

    Nothing is authenticated yet: use the result only to find the keys.
    """
    if len(data) < COMMON_HEADER_LEN + HEADER_TAG_LEN:
        raise WireError("short", f"{len(data)} bytes")
    ver, ptype_raw, flags, words, dcid, epoch, hi, lo = COMMON.unpack_from(data, 0)
    if ver != VERSION:
        raise WireError("version", f"version {ver}")
    ptype = _TYPES.get(ptype_raw)
    if ptype is None:
        raise WireError("type", f"type {ptype_raw}")
    if words < HEADER_WORDS[ptype] or words > MAX_HEADER_WORDS:
        raise WireError("header_len", f"{words} words for {ptype.name}")
    if len(data) < words * 4 + HEADER_TAG_LEN:
        raise WireError("short", f"{len(data)} bytes, header needs {words * 4 + HEADER_TAG_LEN}")
    return CommonHeader(ver, ptype, flags, words, dcid, epoch, (hi << 32) | lo)


def _check_body(body: Body) -> None:
    if isinstance(body, Data):
        if body.msg_offset > body.msg_len or body.payload_len > body.msg_len - body.msg_offset:
            raise WireError("field", "DATA slice lies outside its message")
    elif isinstance(body, Nack) and body.reason not in _NACK_REASONS:
        raise WireError("field", f"unknown NACK reason {body.reason}")


_Bytes = bytes | bytearray | memoryview


class _Aead(Protocol):
    """What the codec needs of an AEAD under one key: cryptography's ``AESGCM``
    (the reference) or ``wire._fastwire.AESGCM`` (keyed OpenSSL contexts)."""

    def encrypt(self, nonce: bytes, data: _Bytes, associated_data: _Bytes | None) -> bytes: ...

    def decrypt(self, nonce: bytes, data: _Bytes, associated_data: _Bytes | None) -> bytes: ...


class _Window(Protocol):
    """A replay window as the generic open path uses it."""

    @property
    def highest(self) -> int: ...

    def check(self, counter: int) -> None: ...

    def commit(self, counter: int) -> None: ...


class PyReplayWindow:
    """Sliding window over 48-bit counters (RFC 4303's idea, slot per counter).

    Slot ``c % size`` remembers the counter stored there; inside the window
    only ``c`` itself maps to that slot, so no bitmap shifting is needed.
    The window must exceed the reordering that spraying causes, hence the
    generous default.
    """

    __slots__ = ("_slots", "highest", "size")

    def __init__(self, size: int = DEFAULT_REPLAY_WINDOW) -> None:
        self.size = size
        self._slots = [-1] * size
        self.highest = -1

    def check(self, counter: int) -> None:
        if counter > self.highest:
            return
        if self.highest - counter >= self.size:
            raise WireError("replay", f"counter {counter} is older than the window")
        if self._slots[counter % self.size] == counter:
            raise WireError("replay", f"counter {counter} seen before")

    def commit(self, counter: int) -> None:
        self._slots[counter % self.size] = counter
        if counter > self.highest:
            self.highest = counter


class _SealerGeneric:
    """What both sealers share: every packet type but DATA goes through
    ``seal``, rarely enough per packet to stay in Python."""

    __slots__ = ()
    counter: int
    dcid: int
    epoch: int
    plaintext: bool
    _hdr: _Aead | None

    def seal_data(
        self, psn: int, ev: int, plane: int, msg_id: int, msg_offset: int, msg_len: int,
        timestamp: int, payload: bytes | memoryview, flags: int = 0,
    ) -> bytes:
        raise NotImplementedError

    def seal_data_run(
        self, psn: int, ev: int, plane: int, msg_id: int, msg_offset: int, msg_len: int,
        timestamp: int, payload: bytes | memoryview, segment: int, flags: int = 0,
        last_flags: int = 0,
    ) -> tuple[bytes, int, int]:
        """``payload`` cut into ``segment``-byte slices, each sealed as its
        own DATA datagram (consecutive PSNs and offsets, ``last_flags`` added
        on the last), back to back in one buffer as UDP GSO sends them:
        ``(buffer, count, size of the first datagram)``. The same bytes as
        ``seal_data`` called once per slice."""
        if not 0 < segment <= 0xFFFF:
            raise ValueError("segment must be 1 .. 65535 payload bytes")
        n = max(1, -(-len(payload) // segment))
        out = [self.seal_data((psn + i) & 0xFFFFFFFF, ev, plane, msg_id,
                              msg_offset + i * segment, msg_len, timestamp,
                              payload[i * segment:(i + 1) * segment],
                              (flags | last_flags) if i == n - 1 else flags)
               for i in range(n)]
        return b"".join(out), n, len(out[0])

    def _next_counter(self) -> int:
        c = self.counter
        if c > COUNTER_MAX:
            raise OverflowError("packet counter exhausted: the connection must be re-keyed")
        self.counter = c + 1  # type: ignore[misc]  # a slot of each concrete sealer
        return c

    def seal(self, body: Body, payload: bytes = b"", flags: int = 0) -> bytes:
        """One datagram for ``body`` (and ``payload`` for DATA)."""
        if isinstance(body, Data):
            return self.seal_data(
                psn=body.psn, ev=body.ev, plane=body.plane, msg_id=body.msg_id,
                msg_offset=body.msg_offset, msg_len=body.msg_len, timestamp=body.timestamp,
                payload=payload, flags=flags,
            )
        if payload:
            raise ValueError("only DATA carries a payload")
        if body.TYPE in _HANDSHAKE_TYPES:
            raise ValueError("INIT/ACCEPT are sealed by HandshakeCodec")
        c = self._next_counter()
        flags = (_index(flags) & _NOT_PLAINTEXT) | (_PLAINTEXT if self.plaintext else 0)
        words = HEADER_WORDS[body.TYPE]
        header = COMMON.pack(
            VERSION, body.TYPE, flags, words, self.dcid, self.epoch, c >> 32, c & 0xFFFFFFFF
        ) + pack_body(body)
        if self._hdr is None:
            return header + _ZERO_TAG
        nonce = _NONCE.pack(0, self.epoch, c >> 32, c & 0xFFFFFFFF)
        return header + self._hdr.encrypt(nonce, b"", header)


class PySealer(_SealerGeneric):
    """Encodes and protects packets for one direction of one connection
    (the reference implementation; ``Sealer`` is this or its C twin).

    ``keys=None`` is the insecure plaintext mode: nothing is encrypted or
    authenticated and every packet says so in its flags. Every call uses a
    fresh counter, so a retransmission is sealed anew.
    """

    __slots__ = ("_hdr", "_pay", "counter", "dcid", "epoch", "plaintext")

    def __init__(self, keys: DirectionKeys | None, *, dcid: int, epoch: int = 0) -> None:
        self.dcid = dcid
        self.epoch = epoch
        self.counter = 0
        self.plaintext = keys is None
        self._hdr: _Aead | None = None if keys is None else AESGCM(keys.header)
        self._pay: _Aead | None = None if keys is None else AESGCM(keys.payload)

    def seal_data(
        self, psn: int, ev: int, plane: int, msg_id: int, msg_offset: int, msg_len: int,
        timestamp: int, payload: bytes | memoryview, flags: int = 0,
    ) -> bytes:
        """The hot path: a DATA datagram without building a ``Data`` object
        (arguments in this order may be passed by position: the sender's run
        loop does, keyword matching costs per packet)."""
        # _next_counter() inlined: a method call is a measurable share of this path.
        c = self.counter
        if c > COUNTER_MAX:
            raise OverflowError("packet counter exhausted: the connection must be re-keyed")
        self.counter = c + 1
        if flags.__class__ is not int:
            flags = _index(flags)  # ``IntFlag & int`` runs Python-level enum code (~0.6 µs)
        # An epoch outside 16 bits makes ``ec`` overflow the 64-bit field: struct.error.
        ec = (self.epoch << 48) | c
        hdr = self._hdr
        pay = self._pay
        if hdr is None or pay is None:
            return _DATA_HEADER.pack(
                VERSION, 3, flags | _PLAINTEXT, _DATA_WORDS, self.dcid, ec,
                psn, ev, plane, 0, len(payload), msg_id, msg_offset, msg_len, timestamp,
            ) + _ZERO_TAG + payload
        header = _DATA_HEADER.pack(
            VERSION, 3, flags & _NOT_PLAINTEXT, _DATA_WORDS, self.dcid, ec,
            psn, ev, plane, 0, len(payload), msg_id, msg_offset, msg_len, timestamp,
        )
        # The nonce is 4 zero bytes + epoch + counter: ``ec`` as 12 big-endian bytes.
        nonce = ec.to_bytes(_NONCE_BYTES, "big")
        aad = header + hdr.encrypt(nonce, b"", header)
        return aad + pay.encrypt(nonce, payload, aad)


class _OpenerGeneric:
    """What both openers share: ``open_untrusted`` and the generic path."""

    __slots__ = ()
    epoch: int
    plaintext: bool
    replay: _Window
    _hdr: _Aead | None
    _pay: _Aead | None

    def open_data_untrusted(self, data: bytes | memoryview) -> DataFields | None:
        raise NotImplementedError

    def open_untrusted(self, data: bytes, header: CommonHeader | None = None) -> Packet:
        """Decode ``data``; raises only ``WireError``.

        ``header`` may be the result of an earlier ``peek_untrusted(data)``.
        A DATA datagram that ends right after its header tag was trimmed by
        a switch: it is accepted on the strength of its header tag alone.
        """
        if len(data) >= _DATA_CUT and (
            header is None or (header.ptype is _DATA and header.header_words == _DATA_WORDS)
        ):
            opened = self.open_data_untrusted(data)
            if opened is not None:
                (_v, _t, flags, _w, dcid, ec, psn, ev, plane, _r, plen, mid, moff, mlen,
                 ts), payload = opened
                return Packet(
                    header if header is not None
                    else CommonHeader(VERSION, _DATA, flags, _DATA_WORDS, dcid, ec >> 48,
                                      ec & _COUNTER_MASK),
                    Data(psn, ev, plane, plen, mid, moff, mlen, ts), payload, payload is None,
                )
        return self._open_generic(data, header)

    def _open_generic(self, data: bytes, header: CommonHeader | None) -> Packet:
        h = header if header is not None else peek_untrusted(data)
        ptype = h.ptype
        if ptype in _HANDSHAKE_TYPES:
            raise WireError("type", f"{ptype.name} outside the handshake")
        if h.epoch != self.epoch:
            raise WireError("epoch", f"key epoch {h.epoch}, expected {self.epoch}")
        if bool(h.flags & _PLAINTEXT) != self.plaintext:
            raise WireError(
                "plaintext",
                "plaintext packet on an encrypted connection" if not self.plaintext
                else "encrypted packet on a plaintext connection",
            )
        counter = h.counter
        replay = self.replay
        if counter <= replay.highest:
            replay.check(counter)
        hlen = h.header_words * 4
        cut = hlen + HEADER_TAG_LEN
        body = unpack_body(ptype, data, COMMON_HEADER_LEN)
        payload: bytes | None = None
        trimmed = False
        is_data = False
        if isinstance(body, Data):
            is_data = True
            extra = len(data) - cut
            expect = body.payload_len + (0 if self._pay is None else PAYLOAD_TAG_LEN)
            if extra == 0 and expect > 0:
                trimmed = True
            elif extra != expect:
                raise WireError(
                    "payload_len", f"{extra} payload bytes, header says {body.payload_len}"
                )
        elif len(data) != cut:
            raise WireError("payload_len", f"{len(data) - cut} trailing bytes on {ptype.name}")
        if self._hdr is not None and self._pay is not None:
            # 4 zero bytes + epoch + counter, as sent (the epoch was checked above).
            nonce = _NONCE.pack(0, h.epoch, counter >> 32, counter & 0xFFFFFFFF)
            try:
                if is_data and not trimmed:
                    # One AEAD check covers header, header tag and payload.
                    payload = self._pay.decrypt(nonce, data[cut:], data[:cut])
                else:
                    self._hdr.decrypt(nonce, data[hlen:cut], data[:hlen])
            except InvalidTag:
                raise WireError("tag", f"{ptype.name} failed authentication") from None
        elif is_data and not trimmed:
            payload = data[cut:]
        _check_body(body)
        replay.commit(counter)
        return Packet(h, body, payload, trimmed)


class PyOpener(_OpenerGeneric):
    """Authenticates, checks freshness and decodes one direction's datagrams
    (the reference implementation; ``Opener`` is this or its C twin)."""

    __slots__ = ("_hdr", "_pay", "epoch", "plaintext", "replay")

    def __init__(
        self, keys: DirectionKeys | None, *, epoch: int = 0,
        replay_window: int = DEFAULT_REPLAY_WINDOW,
    ) -> None:
        self.epoch = epoch
        self.plaintext = keys is None
        self._hdr: _Aead | None = None if keys is None else AESGCM(keys.header)
        self._pay: _Aead | None = None if keys is None else AESGCM(keys.payload)
        self.replay: PyReplayWindow = PyReplayWindow(replay_window)

    def open_data_untrusted(self, data: bytes | memoryview) -> DataFields | None:
        """The receive fast path: a DATA datagram without header extensions
        (every DATA packet v1 sends), opened without building any object.

        Returns ``(fields, payload)``: ``fields`` is the unpacked common
        header + DATA body (version, type, flags, words, dcid, epoch << 48 |
        counter, psn, ev, plane, reserved, payload length, msg id, msg
        offset, msg length, timestamp) and ``payload`` the plaintext, None
        if a switch trimmed it. Returns None for any other datagram (use
        ``open_untrusted``); raises ``WireError`` exactly where
        ``open_untrusted`` would (same checks, same order, same reasons).
        ``data`` may be a view of a reused buffer: nothing returned refers to it.
        """
        if len(data) < _DATA_CUT:
            return None
        fields = _DATA_HEADER_UNPACK(data)
        if fields[0] != VERSION or fields[1] != 3 or fields[3] != _DATA_WORDS:
            return None
        ec = fields[5]
        if ec >> 48 != self.epoch:
            raise WireError("epoch", f"key epoch {ec >> 48}, expected {self.epoch}")
        plaintext = self.plaintext
        if (fields[2] & _PLAINTEXT != 0) != plaintext:
            raise WireError(
                "plaintext",
                "plaintext packet on an encrypted connection" if not plaintext
                else "encrypted packet on a plaintext connection",
            )
        counter = ec & _COUNTER_MASK
        replay = self.replay
        highest = replay.highest
        if counter <= highest:
            replay.check(counter)
        extra = len(data) - _DATA_CUT
        pay = self._pay
        plen = fields[10]
        trimmed = False
        payload: bytes | None = None
        if extra == 0 and (plen > 0 or pay is not None):
            trimmed = True
        elif extra != plen + (0 if pay is None else PAYLOAD_TAG_LEN):
            raise WireError("payload_len", f"{extra} payload bytes, header says {plen}")
        hdr = self._hdr
        if hdr is not None and pay is not None:
            # 4 zero bytes + epoch + counter: the values just checked, as sent.
            nonce = ec.to_bytes(_NONCE_BYTES, "big")
            try:
                if trimmed:
                    hdr.decrypt(nonce, data[_DATA_HLEN:_DATA_CUT], data[:_DATA_HLEN])
                else:
                    # One AEAD check covers header, header tag and payload.
                    payload = pay.decrypt(nonce, data[_DATA_CUT:], data[:_DATA_CUT])
            except InvalidTag:
                raise WireError("tag", "DATA failed authentication") from None
        elif not trimmed:
            payload = bytes(data[_DATA_CUT:])
        moff = fields[12]
        mlen = fields[13]
        if moff > mlen or plen > mlen - moff:
            raise WireError("field", "DATA slice lies outside its message")
        # ReplayWindow.commit, inlined.
        replay._slots[counter % replay.size] = counter
        if counter > highest:
            replay.highest = counter
        return fields, payload



class HandshakeCodec:
    """INIT, ACCEPT and UNKNOWN_CONN under the cluster handshake key
    (HMAC-SHA256/128): the packets a host sends without connection keys.

    ``secret=None`` is the insecure plaintext mode.
    """

    __slots__ = ("_key",)

    def __init__(self, secret: bytes | None) -> None:
        self._key = None if secret is None else handshake_key(secret)

    @property
    def plaintext(self) -> bool:
        return self._key is None

    def _tag(self, header: bytes) -> bytes:
        assert self._key is not None
        return hmac.digest(self._key, header, hashlib.sha256)[:HEADER_TAG_LEN]

    def seal(self, body: Init | Accept | UnknownConn, *, dcid: int, flags: int = 0) -> bytes:
        if not isinstance(body, UnknownConn) and (len(body.nonce) != NONCE_LEN or (
            isinstance(body, Accept) and len(body.echo_nonce) != NONCE_LEN
        )):
            raise ValueError("handshake nonces are 16 bytes")
        flags = (flags & ~_PLAINTEXT) | (_PLAINTEXT if self._key is None else 0)
        words = HEADER_WORDS[body.TYPE]
        header = COMMON.pack(VERSION, body.TYPE, flags, words, dcid, 0, 0, 0) + pack_body(body)
        return header + (_ZERO_TAG if self._key is None else self._tag(header))

    def open_untrusted(self, data: bytes, header: CommonHeader | None = None) -> Packet:
        h = header if header is not None else peek_untrusted(data)
        if h.ptype not in _HANDSHAKE_TYPES:
            raise WireError("type", f"{h.ptype.name} is not a handshake packet")
        cut = h.header_len + HEADER_TAG_LEN
        if len(data) != cut:
            raise WireError("payload_len", f"{len(data) - cut} trailing bytes on {h.ptype.name}")
        if bool(h.flags & _PLAINTEXT) != (self._key is None):
            raise WireError("plaintext", "handshake security mode does not match")
        if self._key is not None and not hmac.compare_digest(
            self._tag(data[: h.header_len]), data[h.header_len:cut]
        ):
            raise WireError("tag", f"{h.ptype.name} failed authentication")
        body = unpack_body(h.ptype, data, COMMON_HEADER_LEN)
        return Packet(h, body, None, False)


@functools.cache
def c_classes() -> tuple[type[Any], type[Any], type[Any]] | None:
    """The C-backed ``(Sealer, Opener, ReplayWindow)``, or None when the
    extension ``wire._fastwire`` is not built here.

    The C types do DATA (``seal_data``, ``seal_data_run``,
    ``open_data_untrusted``, ``open_data_many``) and the replay window; the
    other packet types go through the same Python code as the reference
    (``_SealerGeneric``, ``_OpenerGeneric``) on the extension's AES-GCM.
    """
    try:
        from wire import _fastwire
    except ImportError:
        return None

    class Sealer(_fastwire.SealerCore, _SealerGeneric):  # type: ignore[override]
        __slots__ = ()

    class Opener(_fastwire.OpenerCore, _OpenerGeneric):  # type: ignore[override,misc]
        __slots__ = ()

    for cls in (Sealer, Opener):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
        cls.__doc__ = f"The C-backed twin of Py{cls.__name__} (same bytes, same decisions)."
    return Sealer, Opener, _fastwire.ReplayWindow


def _choose() -> str:
    if os.environ.get("BRAID_PURE", "") not in ("", "0"):
        return "python"
    return "python" if c_classes() is None else "c"


#: Which codec ``Sealer``/``Opener``/``ReplayWindow`` are: ``"c"`` (the
#: extension, when it built) or ``"python"`` (the reference, also chosen by
#: ``BRAID_PURE=1`` in the environment). Chosen once, at import.
IMPLEMENTATION: Final[str] = _choose()

if TYPE_CHECKING:
    # Both implementations have the reference's API: type against it.
    Sealer = PySealer
    Opener = PyOpener
    ReplayWindow = PyReplayWindow
else:
    Sealer, Opener, ReplayWindow = (
        (PySealer, PyOpener, PyReplayWindow) if IMPLEMENTATION == "python" else c_classes()
    )

__all__ = [
    "BODY_STRUCT",
    "IMPLEMENTATION",
    "HandshakeCodec",
    "Opener",
    "Packet",
    "PyOpener",
    "PyReplayWindow",
    "PySealer",
    "ReplayWindow",
    "Sealer",
    "c_classes",
    "peek_untrusted",
]
