"""Verify and open captured packets with the cluster key.

Connection keys are not in the capture, but everything they are derived from
is: the cluster secret (given by the user), and the two handshake nonces and
connection ids, which travel in the INIT and ACCEPT of the same capture.
So a verifier that has seen a handshake derives that connection's keys with
``wire.keys.derive_connection_keys`` and checks every later packet with the
real ``wire.codec.Opener`` — header tags, payload AEAD, counter freshness.

A capture of one plane has no handshake (it travels on plane 0), and a capture
started after the connection has none either: a key log written by the daemon
(``braid daemon --keylog``, see ``wire.keylog``) names each connection id's
keys directly. A ring may hold a secret, a key log, or both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tools.trace.decode import TracePacket
from wire.codec import HandshakeCodec, Opener
from wire.errors import WireError
from wire.keys import DirectionKeys, derive_connection_keys, load_key_file
from wire.packets import Accept, Init

#: Handshakes waiting for their ACCEPT; bounded so a capture full of INITs cannot grow it.
MAX_PENDING_INITS = 65536


@dataclass(slots=True)
class KeyRing:
    """A ``Verifier`` for ``tools.trace.decode.read_packets``."""

    secret: bytes | None
    _handshake: HandshakeCodec | None = field(init=False)
    _inits: dict[bytes, int] = field(default_factory=dict)  # initiator nonce -> initiator cid
    # dcid -> candidate keys, newest last (ids are per host: two connections may share one)
    _keys: dict[int, list[DirectionKeys]] = field(default_factory=dict)
    _openers: dict[tuple[int, int, DirectionKeys], Opener] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._handshake = None if self.secret is None else HandshakeCodec(self.secret)

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        return cls(load_key_file(Path(path)))

    @classmethod
    def from_files(cls, key: str | Path | None, keylog: str | Path | None) -> KeyRing:
        """A ring from a cluster key file, a key log, or both."""
        ring = cls(None if key is None else load_key_file(Path(key)))
        if keylog is not None:
            from wire.keylog import load

            for dcid, keys in load(keylog).items():
                for k in keys:
                    ring._add(dcid, k)
        return ring

    @property
    def connections(self) -> int:
        return sum(len(v) for v in self._keys.values()) // 2

    def _add(self, dcid: int, keys: DirectionKeys) -> None:
        known = self._keys.setdefault(dcid, [])
        if keys not in known:
            known.append(keys)

    def check(self, pkt: TracePacket) -> None:
        h, body = pkt.header, pkt.body
        if h is None:
            return
        data = pkt.udp.payload
        if isinstance(body, Init | Accept):
            if pkt.auth == "plaintext":
                self._learn(body)
                return
            if self._handshake is None:
                pkt.auth = "nokey"  # a key log holds traffic keys, not the handshake key
                return
            try:
                self._handshake.open_untrusted(data, h)
            except WireError as exc:
                pkt.auth = f"fail:{exc.reason}"
                return
            pkt.auth = "ok"
            self._learn(body)
            return
        if pkt.auth == "plaintext":
            return
        candidates = self._keys.get(h.dcid)
        if not candidates:
            pkt.auth = "nokey"
            return
        error = ""
        for keys in reversed(candidates):
            opener = self._openers.get((h.dcid, h.epoch, keys))
            if opener is None:
                opener = self._openers[(h.dcid, h.epoch, keys)] = Opener(keys, epoch=h.epoch)
            try:
                opened = opener.open_untrusted(data, h)
            except WireError as exc:
                error = error or exc.reason
                continue
            pkt.auth = "ok"
            pkt.payload = opened.payload
            return
        pkt.auth = f"fail:{error}"

    def _learn(self, body: Init | Accept) -> None:
        if isinstance(body, Init):
            if len(self._inits) >= MAX_PENDING_INITS:
                self._inits.pop(next(iter(self._inits)))
            self._inits[body.nonce] = body.src_cid
            return
        icid = self._inits.get(body.echo_nonce)
        if icid is None or self.secret is None:
            return
        keys = derive_connection_keys(
            self.secret, initiator_nonce=body.echo_nonce, responder_nonce=body.nonce,
            initiator_cid=icid, responder_cid=body.src_cid,
        )
        # Packets carry the *destination* connection id: the responder's id on
        # initiator→responder packets, the initiator's id on the way back.
        self._add(body.src_cid, keys.i2r)
        self._add(icid, keys.r2i)
