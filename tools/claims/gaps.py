"""Why does a fault-free Braid stream have empty 10 ms bins? Evidence per bin.

Inputs: the receiving application's 10 ms byte bins (from the worker) and
the *sending* daemon's qlog (``--daemon-qlog``): DATA sends, retransmits,
NACKs, every SACK with its cumulative PSN, and a cwnd/inflight sample every
10 ms from the daemon's own timer. All timestamps are CLOCK_MONOTONIC.

Each empty application bin gets the first cause that the evidence supports:

1. ``handoff``: SACKs seen by the sender *before* the bin prove the
   receiving daemon already held more complete messages than the
   application had been handed by the bin's end: the daemon -> Unix socket
   -> client path (or the client's scheduling) held them.
2. ``sender_stall``: the sending daemon logged nothing at all for more than
   15 ms around the bin although its 10 ms cwnd timer was due: its event
   loop did not run (CPU scheduling on a shared 2-core machine).
3. ``retransmission``: a NACK or retransmit within 50 ms before the bin: a
   message waits for a lost or trimmed packet (delivery is per message).
4. ``window``: no DATA sent in the bin while inflight was at the window
   (ack-clocked: the window or SACK batching paced the sender).
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
    out: dict[str, list[Any]] = {"events": [], "sent": [], "retx": [], "acks": [], "cwnd": []}
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
            elif name == "cwnd":
                out["cwnd"].append((t, int(d.get("cwnd") or 0), int(d.get("inflight") or 0)))
    for k in ("events", "sent", "retx"):
        out[k].sort()
    out["acks"].sort()
    out["cwnd"].sort()
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


def classify(bins: list[int], go: float, q: dict[str, list[Any]], msg_bytes: int,
             packets_per_msg: int, first_bin: int, end_bin: int, mss: int = 1368
             ) -> dict[str, Any]:
    """Cause of every empty application bin in [first_bin, end_bin)."""
    acks = [a for a in q["acks"] if a[0] >= go]
    ack_t = [a[0] for a in acks]
    psn0 = acks[0][1] if acks else 0
    cw_t = [c[0] for c in q["cwnd"]]
    delivered = 0
    cum_app = []
    for v in bins:
        delivered += v
        cum_app.append(delivered)
    causes: Counter[str] = Counter()
    per_bin = []
    for b in range(first_bin, min(end_bin, len(bins))):
        if bins[b]:
            continue
        lo, hi = go + b * BIN, go + (b + 1) * BIN
        cause = "other"
        i = bisect.bisect_left(ack_t, lo) - 1
        daemon_msgs = (acks[i][1] - psn0) // packets_per_msg if i >= 0 else 0
        app_msgs = cum_app[b] // msg_bytes
        if daemon_msgs > app_msgs + 1:  # +1: the first message's PSN offset is unknown
            cause = "handoff"
        elif _largest_silence(q["events"], lo - 0.005, hi + 0.005) > 0.015:
            cause = "sender_stall"
        elif _count(q["retx"], lo - 0.05, hi):
            cause = "retransmission"
        elif not _count(q["sent"], lo, hi):
            j = bisect.bisect_right(cw_t, hi) - 1
            if j >= 0 and q["cwnd"][j][2] + mss >= q["cwnd"][j][1]:
                cause = "window"
        causes[cause] += 1
        per_bin.append({"bin": b, "cause": cause, "daemon_msgs": daemon_msgs,
                        "app_msgs": app_msgs})
    return {"empty_bins": sum(causes.values()), "causes": {c: causes[c] for c in CAUSES},
            "bins": per_bin[:200]}
