"""The daemon's local control protocol: line-delimited JSON over a Unix socket.

Every message is one JSON object on one line. A message that carries bytes
(a message to send, a message delivered) says how many in ``"len"``; exactly
that many raw bytes follow the newline — no base64, so a 1 GiB transfer
costs one copy per hop.

Requests (client → daemon), each may carry an ``"id"`` echoed in replies:
  {"cmd": "send", "peer": NAME, "len": N} + N bytes
      → {"event": "queued", "msg_id": M}   … later {"event": "acked", "msg_id": M, "bytes": N}
      or {"event": "error", "error": TEXT}
  {"cmd": "connect", "peer": NAME}  → {"event": "connected", "peer": NAME} or error
  {"cmd": "recv"}    → a stream of {"event": "message", "peer": P, "msg_id": M, "seq": S,
                      "len": N} + N bytes; the client answers {"cmd": "ack", "seq": S}
                      (cumulative) once it has a message. A message leaves the daemon
                      only when acknowledged: what a receive stream had not acknowledged
                      when it ended goes back to the front of the inbox for the next one.
  {"cmd": "stats"}   → {"event": "stats", ...}
  {"cmd": "shutdown"} → {"event": "ok"}; the daemon then drains and exits
A daemon shutting down tells every client {"event": "shutdown"} last.

Input is untrusted: a line that is not a JSON object (also ``NaN``/``Infinity``,
which are not JSON, and nesting deeper than ``MAX_DEPTH``) is a
``ProtocolError``: the daemon answers one error line and closes that
connection; nothing else is affected. An ``"id"`` must be an integer (within
64 bits) or a short string, so every reply echoing it is valid JSON.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

#: Longest JSON line accepted (a request is small; stats can be a few 100 kB).
MAX_LINE: Final = 16 << 20
#: Largest byte body on one request (the core's max message size is larger).
MAX_BODY: Final = 1 << 30
#: Deepest JSON nesting accepted (requests are flat; the parser recurses).
MAX_DEPTH: Final = 32


class ProtocolError(Exception):
    """A malformed control message (the connection is closed after it)."""


def encode(obj: dict[str, Any], body: bytes | memoryview | None = None) -> bytes:
    if body is not None:
        obj = {**obj, "len": len(body)}
    line = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    return line if body is None else line + bytes(body)


def write(writer: asyncio.StreamWriter, obj: dict[str, Any],
          body: bytes | memoryview | None = None) -> None:
    """Queue one message (never raises for a client that went away)."""
    if writer.is_closing():
        return
    if body is None:
        writer.write(encode(obj))
    else:
        writer.writelines([encode({**obj, "len": len(body)}), body])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(line: bytes) -> int:
    """Deepest bracket nesting, counted without parsing (brackets inside
    strings count too: an over-estimate, harmless at this limit)."""
    depth = best = 0
    for c in line.translate(None, _NOT_BRACKETS):
        depth += 1 if c in b"[{" else -1
        if depth > best:
            best = depth
            if best > MAX_DEPTH:
                break
    return best


_NOT_BRACKETS: Final = bytes(c for c in range(256) if c not in b"[]{}")


def parse_line(line: bytes) -> dict[str, Any]:
    """One control line as a JSON object; raises only ``ProtocolError``."""
    if _depth(line) > MAX_DEPTH:
        raise ProtocolError(f"control message nested deeper than {MAX_DEPTH} levels")
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise ProtocolError("control line is not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("control message is not a JSON object")
    rid = obj.get("id")
    if not (rid is None or (isinstance(rid, str) and len(rid) <= 256) or (
            isinstance(rid, int) and not isinstance(rid, bool) and -(1 << 63) <= rid < 1 << 64)):
        raise ProtocolError("'id' must be an integer or a string of at most 256 characters")
    return obj


async def read(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes | None] | None:
    """The next message and its body; None at a clean end of stream."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise ProtocolError("connection closed in the middle of a message") from None
        return None
    except asyncio.LimitOverrunError:
        raise ProtocolError(f"control line longer than {MAX_LINE} bytes") from None
    obj = parse_line(line)
    n = obj.get("len")
    if n is None:
        return obj, None
    if not isinstance(n, int) or not 0 <= n <= MAX_BODY:
        raise ProtocolError(f"bad body length {n!r}")
    try:
        body = await reader.readexactly(n)
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed in the middle of a body") from None
    return obj, body
