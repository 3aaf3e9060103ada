"""Key log lines, in the spirit of TLS's SSLKEYLOGFILE.

A daemon started with a key log appends, for every connection it establishes,
the keys of both directions, each named by the connection id packets of that
direction carry as their destination (``dcid``)::

    BRAID_DCID_KEYS <dcid, decimal> <header key, hex> <payload key, hex>

With these lines a capture of *any* plane can be verified and opened, even
when the handshake (which travels on plane 0) is not in it. Whoever holds the
file can read the traffic of those connections: it is created mode 0600.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from wire.keys import DirectionKeys

LABEL = "BRAID_DCID_KEYS"
_KEY_HEX = 64


class KeyLogError(ValueError):
    """A key log that cannot be read or has a malformed line."""


def format_lines(*, local_cid: int, remote_cid: int, send: DirectionKeys,
                 recv: DirectionKeys) -> str:
    """Two lines: packets to the peer carry ``remote_cid``, packets to us ``local_cid``."""
    return "".join(f"{LABEL} {cid} {k.header.hex()} {k.payload.hex()}\n"
                   for cid, k in ((remote_cid, send), (local_cid, recv)))


def open_for_append(path: str | Path) -> IO[str]:
    """Append-only, created 0600; an existing file readable by others is narrowed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", buffering=1)  # line-buffered: a crash loses no line
    except BaseException:
        os.close(fd)
        raise


def parse(text: str, source: str = "key log") -> dict[int, list[DirectionKeys]]:
    """dcid -> its keys, newest last (a dcid may recur across connections).
    Blank lines and ``#`` comments are skipped; other labels are ignored."""
    out: dict[int, list[DirectionKeys]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#") or parts[0] != LABEL:
            continue
        try:
            if len(parts) != 4 or len(parts[2]) != _KEY_HEX or len(parts[3]) != _KEY_HEX:
                raise ValueError
            cid = int(parts[1])
            keys = DirectionKeys(header=bytes.fromhex(parts[2]),
                                 payload=bytes.fromhex(parts[3]))
        except ValueError:
            raise KeyLogError(f"{source}: line {n}: expected '{LABEL} <dcid> <64 hex digits> "
                              f"<64 hex digits>'") from None
        known = out.setdefault(cid, [])
        if keys not in known:
            known.append(keys)
    return out


def load(path: str | Path) -> dict[int, list[DirectionKeys]]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise KeyLogError(f"{path}: {exc.strerror}") from None
    return parse(text, str(path))
