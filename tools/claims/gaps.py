"""Why does a fault-free Braid stream have empty 10 ms bins? Evidence per bin.

Inputs: the receiving application's message arrival times (from the worker),
the *sending* daemon's qlog (``--daemon-qlog``: DATA sends, retransmits,
NACKs, SACKs, a cwnd/inflight sample every 10 ms from the daemon's own
timer) and the receiving daemon's (when each message became complete and
when it was written to the client). All timestamps are CLOCK_MONOTONIC.

Each pause of 20 ms or more between two message arrivals at the application
(it empties at least one 10 ms bin) gets the first cause the evidence supports:

1. ``handoff``: the receiving daemon's qlog (``message_delivered``) shows
   the message that ended the pause was complete in the daemon for more
   than half the pause: the inbox -> Unix socket -> client path (or the
   client's scheduling) held it. ``message_handed`` splits that into inbox
   wait and socket + client time.
2. ``sender_stall``: the sending daemon logged nothing at all for more than
   15 ms during the pause although its 10 ms cwnd timer was due: its event
   loop did not run (CPU scheduling on a shared 2-core machine).
3. ``retransmission``: a NACK or retransmit within 50 ms before the bin: a
   message waits for a lost or trimmed packet (delivery is per message).
4. ``window``: inflight was at the window
   (ack-clocked: the window or SACK batching paced the sender; fewer than
   one DATA packet per ms was sent during the pause).
5. ``other``: data was sent, nothing above explains the hole (queueing in
   the link elements, pacing).
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

BIN = 0.01
CAUSES = ("handoff", "sender_stall", "retransmission", "window", "other")


def load_qlog(path: Path) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"events": [], "sent": [], "retx": [], "acks": [], "cwnd": [],
                                 "delivered": [], "handed": []}
    origin = 0.0
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            name, d = e.get("name"), e.get("data", {})
            if name == "meta":
                origin = float(d.get("time_origin", 0.0))
                continue
            t = origin + float(e["time"])
            out["events"].append(t)
            if name == "packet_sent" and d.get("type") == "DATA":
                out["retx" if d.get("retx") else "sent"].append(t)
            elif name in ("retransmit", "nack"):
                out["retx"].append(t)
            elif name == "ack":
                out["acks"].append((t, int(d.get("cum_psn", 0))))
            elif name in ("message_delivered", "message_handed"):
                out[name.split("_")[1]].append((t, int(d.get("size", 0))))
            elif name == "cwnd":
                out["cwnd"].append((t, int(d.get("cwnd") or 0), int(d.get("inflight") or 0)))
    for k in ("events", "sent", "retx"):
        out[k].sort()
    for k in ("acks", "cwnd", "delivered", "handed"):
        out[k].sort()
    return out


def _count(ts: list[float], lo: float, hi: float) -> int:
    return bisect.bisect_left(ts, hi) - bisect.bisect_left(ts, lo)


def _largest_silence(ts: list[float], lo: float, hi: float) -> float:
    i = max(0, bisect.bisect_left(ts, lo) - 1)
    j = min(len(ts), bisect.bisect_right(ts, hi) + 1)
    seg = ts[i:j]
    if len(seg) < 2:
        return hi - lo
    return max(b - a for a, b in itertools.pairwise(seg))


def _summary(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p99": None, "p100": None}
    s = sorted(xs)
    return {"p50": round(s[len(s) // 2] * 1000, 2),
            "p99": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 2),
            "p100": round(s[-1] * 1000, 2)}


def classify(arrivals: list[float], go: float, q: dict[str, list[Any]],
             rq: dict[str, list[Any]] | None, msg_len: int, start: float, end: float,
             gap: float = 0.02, mss: int = 1368) -> dict[str, Any]:
    """Cause of every pause of at least ``gap`` seconds between consecutive
    message arrivals at the application, for arrivals in [start, end]
    (seconds after go). A pause that long always empties a 10 ms bin; shorter
    ones are the message granularity (64 KiB = 48 packets). ``q`` is the
    sender's qlog, ``rq`` the receiver's (``message_delivered`` /
    ``message_handed``), matched to the arrivals in order (the inbox is FIFO)."""
    arr = sorted(arrivals)
    deliv: list[float] = []
    handed: list[float] = []
    if rq is not None:
        deliv = [t - go for t, n in rq["delivered"] if t >= go - 0.001 and n == msg_len]
        handed = [t - go for t, n in rq["handed"] if t >= go - 0.001 and n == msg_len]
    matched = len(deliv) >= len(arr) and len(handed) >= len(arr)
    causes: Counter[str] = Counter()
    pauses: list[dict[str, Any]] = []
    total_ms = 0.0
    hand_lat = [arr[k] - deliv[k] for k in range(len(arr))] if matched else []
    inbox_lat = [handed[k] - deliv[k] for k in range(len(arr))] if matched else []
    for k in range(1, len(arr)):
        a, b = arr[k - 1], arr[k]
        if b - a < gap or not start <= a <= end:
            continue
        lo, hi = go + a, go + b
        cause = "other"
        if matched and deliv[k] <= a + (b - a) / 2:
            cause = "handoff"  # complete in the daemon for most of the pause
        elif _largest_silence(q["events"], lo, hi) > 0.015:
            cause = "sender_stall"
        elif _count(q["retx"], lo - 0.05, hi):
            cause = "retransmission"
        else:
            sends = _count(q["sent"], lo, hi)
            j = bisect.bisect_right([c[0] for c in q["cwnd"]], (lo + hi) / 2) - 1
            if sends < (hi - lo) / 0.001 and j >= 0 and \
                    q["cwnd"][j][2] + mss >= q["cwnd"][j][1]:
                cause = "window"
        causes[cause] += 1
        total_ms += (b - a) * 1000
        pauses.append({"at": round(a, 4), "ms": round((b - a) * 1000, 1), "cause": cause,
                       "delivered_ms_before_arrival":
                       round((b - deliv[k]) * 1000, 1) if matched else None,
                       "sent_during": _count(q["sent"], lo, hi),
                       "sender_silence_ms": round(_largest_silence(q["events"], lo, hi) * 1000,
                                                  1)})
    cw = [c for c in q["cwnd"] if go + start <= c[0] <= go + end]
    cw_sorted = sorted(c[1] for c in cw)
    limited = sum(1 for c in cw if c[2] + mss >= c[1])
    return {"pauses": len(pauses), "causes": {c: causes[c] for c in CAUSES},
            "cwnd_samples": len(cw),
            "cwnd_bytes": {"min": cw_sorted[0], "p50": cw_sorted[len(cw_sorted) // 2],
                           "max": cw_sorted[-1]} if cw_sorted else None,
            "window_limited_fraction": round(limited / len(cw), 3) if cw else None,
            "pause_ms_total": round(total_ms, 1),
            "matched_receiver_qlog": matched,
            "handoff_ms": _summary(hand_lat), "inbox_wait_ms": _summary(inbox_lat),
            "detail": pauses[:100]}
