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
  {"cmd": "recv"}    → a stream of {"event": "message", "peer": P, "msg_id": M, "len": N} + N bytes
  {"cmd": "stats"}   → {"event": "stats", ...}
  {"cmd": "shutdown"} → {"event": "ok"}; the daemon then drains and exits
A daemon shutting down tells every client {"event": "shutdown"} last.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

#: Longest JSON line accepted (a request is small; stats can be a few 100 kB).
MAX_LINE: Final = 16 << 20
#: Largest byte body on one request (the core's max message size is larger).
MAX_BODY: Final = 1 << 30


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
    try:
        obj = json.loads(line)
    except ValueError:
        raise ProtocolError("control line is not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("control message is not a JSON object")
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
