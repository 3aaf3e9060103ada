"""A qlog-style event log: JSON lines of ``{"time", "name", "data"}``.

The daemon writes one with ``QlogWriter``; ``braid trace plot run.qlog``
reads it back with ``read_qlog``. The schema (event names and their data
fields) is in docs/trace.md. Time is whatever the caller passes — the
sans-I/O core's ``now`` in seconds — minus an optional origin; the writer
never reads a clock, and it flushes every ``flush_every`` events or when
event time has moved ``flush_interval`` seconds past the last flush, so a
crash loses a bounded tail and a busy connection does not write per event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

SCHEMA: Final = "braid-qlog-1"
EVENT_NAMES: Final = frozenset({
    "packet_sent", "packet_received", "ack", "nack", "trim", "retransmit", "ev_state", "cwnd",
    "fault", "message_delivered", "message_handed",
})


@dataclass(frozen=True, slots=True)
class QlogEvent:
    time: float
    name: str
    data: dict[str, Any]


class QlogWriter:
    """Writes events as JSON lines; usable as a context manager.

    ``sink`` is a path (opened for writing, closed by ``close``) or an open
    text file (left open). A first ``meta`` line records the schema.
    """

    def __init__(self, sink: str | Path | IO[str], *, title: str = "", time_origin: float = 0.0,
                 flush_every: int = 256, flush_interval: float = 1.0) -> None:
        if isinstance(sink, str | Path):
            self._f: IO[str] = open(sink, "w", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._f, self._owned = sink, False
        self.origin = time_origin
        self.flush_every = flush_every
        self.flush_interval = flush_interval
        self._pending = 0
        self._last_flush: float | None = None
        self.closed = False
        self._write({"time": 0.0, "name": "meta",
                     "data": {"schema": SCHEMA, "title": title, "time_origin": time_origin}})
        self.flush()

    def _write(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def event(self, time: float, name: str, **data: Any) -> None:
        """Record one event; ``name`` should be one of ``EVENT_NAMES``."""
        if self.closed:
            raise ValueError("event on a closed QlogWriter")
        t = time - self.origin
        self._write({"time": round(t, 9), "name": name, "data": data})
        self._pending += 1
        if self._last_flush is None:
            self._last_flush = t
        if self._pending >= self.flush_every or t - self._last_flush >= self.flush_interval:
            self.flush()
            self._last_flush = t

    # Typed helpers: the field names are the schema.
    def packet_sent(self, time: float, *, psn: int, plane: int, ev: int, size: int,
                    type: str = "DATA", retx: bool = False, dcid: int | None = None) -> None:
        self.event(time, "packet_sent", type=type, psn=psn, plane=plane, ev=ev, size=size,
                   retx=retx, dcid=dcid)

    def packet_received(self, time: float, *, psn: int, plane: int, ev: int, size: int,
                        type: str = "DATA", trimmed: str = "no", ce: bool = False,
                        dcid: int | None = None) -> None:
        self.event(time, "packet_received", type=type, psn=psn, plane=plane, ev=ev, size=size,
                   trimmed=trimmed, ce=ce, dcid=dcid)

    def ack(self, time: float, *, cum_psn: int, ack_psn: int, plane: int, ev: int,
            rtt: float | None = None, ce: bool = False, acked_bytes: int | None = None) -> None:
        self.event(time, "ack", cum_psn=cum_psn, ack_psn=ack_psn, plane=plane, ev=ev, rtt=rtt,
                   ce=ce, acked_bytes=acked_bytes)

    def nack(self, time: float, *, psn: int, reason: str, plane: int, ev: int) -> None:
        self.event(time, "nack", psn=psn, reason=reason, plane=plane, ev=ev)

    def trim(self, time: float, *, psn: int, plane: int, ev: int, where: str) -> None:
        self.event(time, "trim", psn=psn, plane=plane, ev=ev, where=where)

    def retransmit(self, time: float, *, psn: int, plane: int, ev: int, cause: str,
                   old_plane: int | None = None, old_ev: int | None = None) -> None:
        self.event(time, "retransmit", psn=psn, plane=plane, ev=ev, cause=cause,
                   old_plane=old_plane, old_ev=old_ev)

    def ev_state(self, time: float, *, plane: int, ev: int, old: str, new: str,
                 cause: str = "") -> None:
        self.event(time, "ev_state", plane=plane, ev=ev, old=old, new=new, cause=cause)

    def cwnd(self, time: float, *, cwnd: int, inflight: int, pacing_rate: float | None = None,
             plane: int | None = None) -> None:
        self.event(time, "cwnd", cwnd=cwnd, inflight=inflight, pacing_rate=pacing_rate,
                   plane=plane)

    def fault(self, time: float, *, kind: str, target: str, detail: str = "") -> None:
        self.event(time, "fault", kind=kind, target=target, detail=detail)

    def message_delivered(self, time: float, *, peer: str, msg_id: int, size: int) -> None:
        self.event(time, "message_delivered", peer=peer, msg_id=msg_id, size=size)

    def message_handed(self, time: float, *, peer: str, msg_id: int, size: int) -> None:
        self.event(time, "message_handed", peer=peer, msg_id=msg_id, size=size)

    def flush(self) -> None:
        self._f.flush()
        self._pending = 0

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        if self._owned:
            self._f.close()
        self.closed = True

    def __enter__(self) -> QlogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QlogError(ValueError):
    """A line of a qlog file that is not a JSON event."""


def read_qlog(path: str | Path) -> Iterator[QlogEvent]:
    """Events of a JSON-lines qlog file, streaming; ``meta`` lines are skipped."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
                ev = QlogEvent(float(obj["time"]), str(obj["name"]), dict(obj.get("data") or {}))
            except (ValueError, KeyError, TypeError) as exc:
                raise QlogError(f"{path}:{n}: not a qlog event ({exc})") from None
            if ev.name != "meta":
                yield ev


def is_qlog(path: str | Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    return head.startswith(b"{")
