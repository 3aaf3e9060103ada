"""Streaming statistics of a capture: per connection (dcid), plane and EV.

Everything is kept in bounded structures — counters, a log-bucket RTT
histogram, and a capped table of DATA packets waiting for their SACK — so a
capture of millions of packets is summarised in constant memory.

RTT. ``wire`` does not fix the unit of DATA ``timestamp`` / SACK ``echo_ts``
(they are opaque 32-bit values echoed by the receiver), so RTT is measured at
the capture point instead: a DATA packet's capture time is matched with the
SACK whose ``ack_psn`` names it. Captured at the sender this is the path RTT;
at the receiver it is the ACK delay. Karn's rule applies: a retransmitted
PSN gives a sample only when the SACK's ``echo_ts`` equals the timestamp of
its latest transmission.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from tools.trace.decode import TracePacket, nack_reason_name
from wire.constants import ECN_CE, Flag, PacketType
from wire.packets import Accept, Data, Init, Nack, Sack

#: Outstanding DATA packets remembered for RTT matching (oldest evicted first).
MAX_OUTSTANDING: Final = 1 << 16
#: Distinct (plane, EV) rows kept; the rest are summed in one "other" row.
MAX_EV_ROWS: Final = 1 << 16
_BUCKETS_PER_DECADE: Final = 20
_RETX: Final = int(Flag.RETX)
_OTHER, _DATA, _SACK, _NACK = range(4)
_TRIM_FABRIC, _TRIM_LAST_HOP, _TRIM_UNMARKED = 1, 2, 3
_TRIM_KINDS: Final = {"fabric": _TRIM_FABRIC, "last-hop": _TRIM_LAST_HOP, "yes": _TRIM_UNMARKED}
_TYPE_NAMES: Final = {t: t.name for t in PacketType}

#: What one packet adds to a row: (bytes, type name, CE, kind, payload len, retx, trim, NACK).
_Features = tuple[int, str, int, int, int, int, int, str]


def _features(pkt: TracePacket) -> _Features:
    body = pkt.body
    assert pkt.header is not None
    tname = _TYPE_NAMES[pkt.header.ptype]
    ce = 1 if pkt.udp.tos & 3 == ECN_CE else 0
    n = len(pkt.udp.payload)
    if isinstance(body, Data):
        trim = _TRIM_KINDS[pkt.trim_kind] if pkt.trimmed else 0
        retx = 1 if pkt.header.flags & _RETX else 0
        return (n, tname, ce, _DATA, body.payload_len, retx, trim, "")
    if isinstance(body, Sack):
        return (n, tname, ce, _SACK, 0, 0, 0, "")
    if isinstance(body, Nack):
        return (n, tname, ce, _NACK, 0, 0, 0, nack_reason_name(body.reason))
    return (n, tname, ce, _OTHER, 0, 0, 0, "")
_MIN_RTT_S: Final = 1e-7


class RttHistogram:
    """Log-scale histogram of RTT samples in seconds (±6% quantiles, O(1) memory)."""

    __slots__ = ("buckets", "count", "max", "min", "total")

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = 0.0

    def add(self, rtt: float) -> None:
        rtt = max(rtt, _MIN_RTT_S)
        self.buckets[math.floor(math.log10(rtt) * _BUCKETS_PER_DECADE)] += 1
        self.count += 1
        self.total += rtt
        self.min = min(self.min, rtt)
        self.max = max(self.max, rtt)

    def quantile(self, q: float) -> float:
        rank = q * (self.count - 1)
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen > rank:
                mid = 10 ** ((b + 0.5) / _BUCKETS_PER_DECADE)
                return min(max(mid, self.min), self.max)
        return self.max

    def summary_us(self) -> dict[str, float | int] | None:
        if not self.count:
            return None
        return {
            "samples": self.count, "min": self.min * 1e6, "p50": self.quantile(0.5) * 1e6,
            "p90": self.quantile(0.9) * 1e6, "p99": self.quantile(0.99) * 1e6,
            "max": self.max * 1e6, "mean": self.total / self.count * 1e6,
        }


@dataclass(slots=True)
class Counters:
    packets: int = 0
    bytes: int = 0
    data: int = 0
    data_bytes: int = 0
    retx: int = 0
    trims_fabric: int = 0
    trims_last_hop: int = 0
    trims_unmarked: int = 0
    sacks: int = 0
    ce: int = 0
    nacks: Counter[str] = field(default_factory=Counter)
    types: Counter[str] = field(default_factory=Counter)

    def add(self, f: _Features) -> None:
        nbytes, tname, ce, kind, plen, retx, trim, nack = f
        self.packets += 1
        self.bytes += nbytes
        self.types[tname] += 1
        self.ce += ce
        if kind == _DATA:
            self.data += 1
            self.data_bytes += plen
            self.retx += retx
            if trim == _TRIM_FABRIC:
                self.trims_fabric += 1
            elif trim == _TRIM_LAST_HOP:
                self.trims_last_hop += 1
            elif trim:
                self.trims_unmarked += 1
        elif kind == _SACK:
            self.sacks += 1
        elif kind == _NACK:
            self.nacks[nack] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "packets": self.packets, "bytes": self.bytes, "data": self.data,
            "data_bytes": self.data_bytes, "retx": self.retx,
            "trims": {"fabric": self.trims_fabric, "last_hop": self.trims_last_hop,
                      "unmarked": self.trims_unmarked},
            "sacks": self.sacks, "ce": self.ce, "nacks": dict(sorted(self.nacks.items())),
            "types": dict(sorted(self.types.items())),
        }


@dataclass(slots=True)
class ConnectionStats(Counters):
    rtt: RttHistogram = field(default_factory=RttHistogram)
    first_data: float | None = None
    last_data: float | None = None
    longest_gap: float = 0.0
    longest_gap_at: float | None = None

    def data_arrival(self, t: float) -> None:
        if self.last_data is not None and t - self.last_data > self.longest_gap:
            self.longest_gap = t - self.last_data
            self.longest_gap_at = self.last_data
        if self.first_data is None:
            self.first_data = t
        self.last_data = t


@dataclass(slots=True)
class _Sent:
    time: float
    timestamp: int
    transmissions: int


class TraceStats:
    """Feed packets with ``add``; read ``to_json()`` or ``format_text()``."""

    def __init__(self) -> None:
        self.total = Counters()
        self.connections: dict[int, ConnectionStats] = {}
        self.planes: dict[int | None, Counters] = {}
        self.evs: dict[tuple[int | None, int | None], Counters] = {}
        self.peer: dict[int, int] = {}  # dcid -> the other direction's dcid (from handshakes)
        self.malformed: Counter[str] = Counter()
        self.auth: Counter[str] = Counter()  # verification results, with --key / --keylog
        self.first: float | None = None
        self.last: float | None = None
        # FIFO-evicted tables: OrderedDict.popitem(last=False) is O(1), whereas
        # next(iter(dict)) slows down as deleted slots pile up at the front.
        self._inits: OrderedDict[bytes, int] = OrderedDict()
        self._sent: OrderedDict[tuple[int, int], _Sent] = OrderedDict()
        self._data_dcid_by_addr: OrderedDict[tuple[bytes, bytes], int] = OrderedDict()
        self.rtt_unmatched = 0

    def add_all(self, packets: Iterable[TracePacket]) -> TraceStats:
        for pkt in packets:
            self.add(pkt)
        return self

    def add(self, pkt: TracePacket) -> None:
        t = pkt.time
        if self.first is None:
            self.first = t
        self.last = t
        h, body = pkt.header, pkt.body
        if h is None:
            self.malformed[pkt.error] += 1
            return
        if pkt.auth and pkt.auth != "plaintext":
            self.auth[pkt.auth] += 1
        f = _features(pkt)
        self.total.add(f)
        conn = self.connections.get(h.dcid)
        if conn is None:
            conn = self.connections[h.dcid] = ConnectionStats()
        conn.add(f)
        plane = pkt.plane
        pc = self.planes.get(plane)
        if pc is None:
            pc = self.planes[plane] = Counters()
        pc.add(f)
        ev = pkt.ev
        if ev is not None:
            key: tuple[int | None, int | None] = (plane, ev)
            ec = self.evs.get(key)
            if ec is None:
                if len(self.evs) >= MAX_EV_ROWS:
                    key = (None, None)
                ec = self.evs.setdefault(key, Counters())
            ec.add(f)
        if isinstance(body, Data):
            conn.data_arrival(t)
            self._data_sent(h.dcid, body, pkt)
        elif isinstance(body, Sack):
            self._sack(h.dcid, body, pkt)
        elif isinstance(body, Init):
            if len(self._inits) >= MAX_OUTSTANDING:
                self._inits.popitem(last=False)
            self._inits[body.nonce] = body.src_cid
        elif isinstance(body, Accept):
            icid = self._inits.pop(body.echo_nonce, None)
            if icid is not None:
                self.peer[icid] = body.src_cid
                self.peer[body.src_cid] = icid

    def _data_sent(self, dcid: int, body: Data, pkt: TracePacket) -> None:
        key = (dcid, body.psn)
        prev = self._sent.pop(key, None)
        if len(self._sent) >= MAX_OUTSTANDING:
            self._sent.popitem(last=False)
        n = 1 if prev is None else prev.transmissions + 1
        self._sent[key] = _Sent(pkt.time, body.timestamp, n)
        addrs = (pkt.udp.src_raw, pkt.udp.dst_raw)
        if addrs not in self._data_dcid_by_addr and len(self._data_dcid_by_addr) >= MAX_OUTSTANDING:
            self._data_dcid_by_addr.popitem(last=False)
        self._data_dcid_by_addr[addrs] = dcid

    def _sack(self, dcid: int, body: Sack, pkt: TracePacket) -> None:
        data_dcid = self.peer.get(dcid)
        if data_dcid is None:
            data_dcid = self._data_dcid_by_addr.get((pkt.udp.dst_raw, pkt.udp.src_raw))
        sent = None if data_dcid is None else self._sent.pop((data_dcid, body.ack_psn), None)
        if sent is None or data_dcid is None:
            self.rtt_unmatched += 1
            return
        if sent.transmissions > 1 and sent.timestamp != body.echo_ts:
            return  # Karn: ambiguous which transmission this acknowledges
        self.connections[data_dcid].rtt.add(pkt.time - sent.time)

    def to_json(self) -> dict[str, Any]:
        conns = {}
        for dcid, c in sorted(self.connections.items()):
            row = c.to_json()
            row["peer_dcid"] = self.peer.get(dcid)
            row["rtt_us"] = c.rtt.summary_us()
            row["longest_data_gap_s"] = c.longest_gap if c.data > 1 else None
            row["longest_data_gap_at_s"] = (
                None if c.longest_gap_at is None or self.first is None
                else c.longest_gap_at - self.first
            )
            conns[f"{dcid:#x}"] = row
        out: dict[str, Any] = {
            "duration_s": 0.0 if self.first is None or self.last is None
            else self.last - self.first,
            "total": self.total.to_json(),
            "malformed": dict(self.malformed),
            "connections": conns,
            "planes": {str(p): c.to_json() for p, c in sorted(
                self.planes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))},
            "evs": [dict(plane=p, ev=e, **c.to_json()) for (p, e), c in sorted(
                self.evs.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0,
                                                  kv[0][1] or 0))],
            "rtt_unmatched_sacks": self.rtt_unmatched,
        }
        if self.auth:  # only with --key / --keylog
            out["auth"] = dict(sorted(self.auth.items()))
        return out
