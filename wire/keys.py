"""Key material: the cluster secret, and keys derived from it by HKDF.

Every host of a cluster shares one 32-byte secret (``braid keygen``). From it:
- a handshake key that authenticates INIT/ACCEPT (HMAC-SHA256, so it needs
  no nonce and a replayed INIT cannot break it), and
- per connection and per direction, a header key (AES-GMAC over the header,
  so a trimmed packet is authenticated from its header alone) and a payload
  key (AES-256-GCM), salted with both handshake nonces so every connection
  has fresh keys.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

CLUSTER_KEY_LEN: Final = 32
NONCE_LEN: Final = 16
KEY_FILE_TAG: Final = "braid-cluster-key-v1"
_LABEL: Final = b"braid v1 "


class KeyFileError(ValueError):
    """A cluster key file that is missing, unreadable or malformed."""


@dataclass(frozen=True, slots=True)
class DirectionKeys:
    """Keys for one direction of one connection."""

    header: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class ConnectionKeys:
    """Both directions: initiator→responder and responder→initiator."""

    i2r: DirectionKeys
    r2i: DirectionKeys

    def for_initiator(self) -> tuple[DirectionKeys, DirectionKeys]:
        """(send keys, receive keys) as seen by the initiator."""
        return self.i2r, self.r2i

    def for_responder(self) -> tuple[DirectionKeys, DirectionKeys]:
        """(send keys, receive keys) as seen by the responder."""
        return self.r2i, self.i2r


def new_cluster_key() -> bytes:
    return secrets.token_bytes(CLUSTER_KEY_LEN)


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_LEN)


def format_key_file(secret: bytes) -> str:
    return f"{KEY_FILE_TAG} {secret.hex()}\n"


def parse_key_file(text: str, source: str = "key file") -> bytes:
    """The secret in a key file's text; errors name the source."""
    parts = text.split()
    if len(parts) != 2 or parts[0] != KEY_FILE_TAG:
        raise KeyFileError(f"{source}: expected '{KEY_FILE_TAG} <64 hex digits>'")
    try:
        secret = bytes.fromhex(parts[1])
    except ValueError:
        raise KeyFileError(f"{source}: the key is not hexadecimal") from None
    if len(secret) != CLUSTER_KEY_LEN:
        raise KeyFileError(f"{source}: the key must be {CLUSTER_KEY_LEN} bytes, got {len(secret)}")
    return secret


def write_key_file(path: Path, secret: bytes) -> None:
    """Write a key file readable by its owner only (created 0600, never widened)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(format_key_file(secret))


def load_key_file(path: Path, *, owner_only: bool = False) -> bytes:
    """The secret in a key file. ``owner_only`` (the daemon) refuses a file
    that group or others may read, as ssh refuses such a private key."""
    try:
        if owner_only:
            check_key_file_mode(path)
        text = path.read_text()
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror}") from None
    return parse_key_file(text, str(path))


def check_key_file_mode(path: Path) -> None:
    """Raise ``KeyFileError`` if group or others have any access to ``path``."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path}: permissions {mode:04o} are too open; the cluster key must "
                           f"be accessible by its owner only (chmod 600 {path})")


def _hkdf(secret: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(secret)


def handshake_key(secret: bytes) -> bytes:
    return _hkdf(secret, b"braid handshake", _LABEL + b"handshake")


def derive_connection_keys(
    secret: bytes,
    *,
    initiator_nonce: bytes,
    responder_nonce: bytes,
    initiator_cid: int,
    responder_cid: int,
) -> ConnectionKeys:
    """Fresh keys for one connection, bound to both nonces and both ids."""
    salt = initiator_nonce + responder_nonce
    ids = initiator_cid.to_bytes(4, "big") + responder_cid.to_bytes(4, "big")

    def direction(name: bytes) -> DirectionKeys:
        return DirectionKeys(
            header=_hkdf(secret, salt, _LABEL + name + b" header " + ids),
            payload=_hkdf(secret, salt, _LABEL + name + b" payload " + ids),
        )

    return ConnectionKeys(i2r=direction(b"i2r"), r2i=direction(b"r2i"))
