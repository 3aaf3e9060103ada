"""The daemon's logs (one ``key=value`` line per event on stderr) and its
qlog tap (qlog events read from the datagrams' cleartext headers)."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import IO, Any, Protocol

from transport.datagram import RxInfo, TxPath
from wire.codec import peek_untrusted
from wire.constants import HEADER_TAG_LEN, Dscp, Flag, NackReason, PacketType
from wire.packets import Data, Nack, Sack, unpack_body

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Log:
    """One ``key=value`` line per event (``ts`` is wall-clock, for humans)."""

    def __init__(self, level: str = "info", stream: IO[str] | None = None) -> None:
        self.level = LEVELS[level]
        self.stream = stream or sys.stderr

    def __call__(self, level: str, event: str, **kv: object) -> None:
        if LEVELS[level] < self.level:
            return
        parts = [f"ts={time.time():.6f}", f"level={level}", f"event={event}"]
        for k, v in kv.items():
            s = str(v)
            if not s or any(c in s for c in ' "=\n'):
                s = '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'
            parts.append(f"{k}={s}")
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(" ".join(parts) + "\n")
            self.stream.flush()


class QlogSink(Protocol):
    """What the daemon needs of a qlog writer (``tools.trace.qlog.QlogWriter``)."""

    def event(self, time: float, name: str, **data: Any) -> None: ...

    def close(self) -> None: ...


class QlogTap:
    """Turns datagrams into qlog events by reading their (cleartext,
    authenticated) headers — no keys needed, nothing in the core changes."""

    def __init__(self, sink: QlogSink) -> None:
        self.sink = sink

    def on_tx(self, now: float, data: bytes, path: TxPath) -> None:
        if len(data) < 20 or data[1] != PacketType.DATA:
            return
        try:
            h = peek_untrusted(data)
            body = unpack_body(h.ptype, data, 16)
        except Exception:  # a tap must never break the I/O path
            return
        assert isinstance(body, Data)
        retx = bool(h.flags & Flag.RETX)
        self.sink.event(now, "packet_sent", type="DATA", psn=body.psn, plane=path.plane,
                        ev=path.ev, size=len(data), retx=retx, dcid=h.dcid)
        if retx:
            self.sink.event(now, "retransmit", psn=body.psn, plane=path.plane, ev=path.ev,
                            cause="loss_or_nack", old_plane=None, old_ev=None)

    def on_rx(self, now: float, data: bytes, rx: RxInfo) -> None:
        try:
            h = peek_untrusted(data)
            if h.ptype in (PacketType.INIT, PacketType.ACCEPT):
                return
            body = unpack_body(h.ptype, data, 16)
        except Exception:  # a tap must never break the I/O path
            return
        if isinstance(body, Sack):
            self.sink.event(now, "ack", cum_psn=body.cum_psn, ack_psn=body.ack_psn,
                            plane=rx.plane, ev=body.echo_ev, rtt=None, ce=rx.ce,
                            acked_bytes=None)
        elif isinstance(body, Nack):
            reason = NackReason(body.reason).name.lower() if body.reason in \
                NackReason._value2member_map_ else str(body.reason)
            self.sink.event(now, "nack", psn=body.psn, reason=reason, plane=rx.plane,
                            ev=body.echo_ev)
        elif isinstance(body, Data) and len(data) == h.header_len + HEADER_TAG_LEN:
            where = "last_hop" if rx.dscp == Dscp.TRIMMED_LAST_HOP else "fabric"
            self.sink.event(now, "trim", psn=body.psn, plane=rx.plane, ev=body.ev, where=where)
