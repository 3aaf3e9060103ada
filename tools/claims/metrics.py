"""Figures from raw run data: step times, 10 ms receive bins, fairness.

Pure functions (no I/O, no clock) so they are unit-tested exactly.
Conventions: a *bin* is 10 ms of received payload bytes; a *window* is 10
consecutive bins (100 ms) sliding by one bin. The worst case counts: every
summary carries the maximum next to the median.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

BIN_S = 0.01
WINDOW_BINS = 10


def percentile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); p100 is the maximum."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return float(s[k])


def summary(xs: Sequence[float]) -> dict[str, float | int | None]:
    return {"n": len(xs), "p50": percentile(xs, 50), "p99": percentile(xs, 99),
            "p100": percentile(xs, 100)}


def step_times(done: dict[int, list[float]], go: float) -> list[float]:
    """Job step times from each host's per-step completion times.

    Step k of the job ends when the *last* host holds everything of step k:
    T_k = max over hosts; the step time is T_k - T_(k-1), T_(-1) = go. Only
    steps every host completed count.
    """
    if not done:
        return []
    n = min(len(v) for v in done.values())
    if n == 0:
        return []
    ends = [max(v[k] for v in done.values()) for k in range(n)]
    return [b - a for a, b in zip([go, *ends[:-1]], ends, strict=True)]


def add_bins(series: Sequence[Sequence[int]]) -> list[int]:
    n = max((len(s) for s in series), default=0)
    out = [0] * n
    for s in series:
        for i, v in enumerate(s):
            out[i] += v
    return out


def windows(bins: Sequence[int], width: int = WINDOW_BINS) -> list[int]:
    """Bytes in each sliding window of ``width`` bins (index = first bin)."""
    if len(bins) < width:
        return []
    acc = sum(bins[:width])
    out = [acc]
    for i in range(width, len(bins)):
        acc += bins[i] - bins[i - width]
        out.append(acc)
    return out


def gaps(bins: Sequence[int], lo: int, hi: int) -> tuple[int, int]:
    """(longest run of empty bins, number of empty bins) in bins[lo:hi]."""
    longest = run = empty = 0
    for v in bins[lo:hi]:
        if v == 0:
            run += 1
            empty += 1
            longest = max(longest, run)
        else:
            run = 0
    return longest, empty


def longest_pause(arrivals: Sequence[float], start: float, end: float
                  ) -> tuple[float, float] | None:
    """(longest time without a message arrival, when it began) from the last
    arrival at or before ``start`` (or ``start`` itself) until ``end``; a
    pause still open at ``end`` counts up to ``end``. Millisecond-exact where
    10 ms bins only say "one bin" (the compound row's stall limit is ~10 ms).
    None without any arrival after ``start``."""
    xs = sorted(arrivals)
    i = bisect.bisect_right(xs, start)
    if i >= len(xs) or xs[i] > end:
        return None
    prev = xs[i - 1] if i > 0 else start
    best, at = 0.0, prev
    for t in xs[i:]:
        if t > end:
            break
        if t - prev > best:
            best, at = t - prev, prev
        prev = t
    if end - prev > best:
        best, at = end - prev, prev
    return best, at


def settle_bins(bins: Sequence[int], start: int, end: int, window_target: float
                ) -> int | None:
    """Bins from ``start`` until every later 100 ms window (up to ``end``)
    carries at least ``window_target`` bytes; None if that never happens."""
    w = windows(bins[:end])
    if not w or start >= len(w):
        return None
    last_bad = None
    for i in range(start, len(w)):
        if w[i] < window_target:
            last_bad = i
    if last_bad is None:
        return 0
    if last_bad + 1 >= len(w):
        return None
    return last_bad + 1 - start


def failover(bins: Sequence[int], fault_bin: int, end_bin: int, capacity_bps: float,
             first_bin: int = 0, share: float = 0.9) -> dict[str, float | int | None]:
    """Settle time (ms after ``fault_bin`` until goodput holds >= ``share`` of
    ``capacity_bps`` in every 100 ms window to ``end_bin``), the longest gap
    and the total stall (empty 10 ms bins) from ``first_bin`` to ``end_bin``."""
    target = share * capacity_bps / 8 * BIN_S * WINDOW_BINS
    s = settle_bins(bins, fault_bin, end_bin, target)
    longest, empty = gaps(bins, first_bin, end_bin)
    span = max(1, end_bin - first_bin)
    return {"settle_ms": None if s is None else s * BIN_S * 1000,
            "longest_gap_ms": longest * BIN_S * 1000, "stall_ms": empty * BIN_S * 1000,
            "empty_bins": empty,
            "goodput_mbps": sum(bins[first_bin:end_bin]) * 8 / (span * BIN_S) / 1e6}


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 = perfectly fair."""
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    if sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


def jain_windows(per_flow: Sequence[Sequence[int]], lo: int, hi: int,
                 width: int = WINDOW_BINS) -> list[float]:
    """Jain's index of the flows' bytes in consecutive (non-overlapping)
    windows of ``width`` bins within [lo, hi)."""
    out = []
    for a in range(lo, hi - width + 1, width):
        j = jain([sum(f[a:a + width]) for f in per_flow])
        if j is not None:
            out.append(j)
    return out


def time_to_share(flow: Sequence[int], start_bin: int, share_bytes_per_window: float,
                  end_bin: int) -> int | None:
    """Bins from ``start_bin`` until the flow's 100 ms window first carries at
    least ``share_bytes_per_window``; None if it never does before ``end_bin``."""
    w = windows(flow[:end_bin])
    for i in range(start_bin, len(w)):
        if w[i] >= share_bytes_per_window:
            return i + WINDOW_BINS - start_bin  # the window's end is when it got there
    return None


#: Messages a newcomer's rate is measured over (``time_to_share_arrivals``).
SHARE_MSGS = 4


def time_to_share_arrivals(own: Sequence[float], running: Sequence[Sequence[float]],
                           start: float, end: float, *, msgs: int = SHARE_MSGS,
                           frac: float = 0.8) -> float | None:
    """Seconds from ``start`` until a newcomer's rate over its last ``msgs``
    message arrivals first reaches ``frac`` of the mean rate of the flows
    running then (``running``, the newcomer's own arrivals among them) over
    the same interval; None if that never happens by ``end``.

    Messages are all the same size, so rates are counts. The newcomer's rate
    is exact between two of its own arrivals (``msgs`` messages in
    ``t[i] - t[i - msgs]``), where a fixed window's count is off by up to one
    message; the mean counts every running flow's arrivals in that interval.
    Unlike ``time_to_share`` (100 ms windows, never below 100 ms) this
    resolves a few round trips: at the fair rate the earliest possible figure
    is about ``msgs`` + 1 message times after the start.
    """
    xs = sorted(t for t in own if start <= t <= end)
    if msgs < 1 or not running:
        return None
    flows = [sorted(f) for f in running]
    for i in range(msgs, len(xs)):
        lo, hi = xs[i - msgs], xs[i]
        if hi <= lo:
            continue
        total = sum(bisect.bisect_right(f, hi) - bisect.bisect_right(f, lo) for f in flows)
        if msgs >= frac * total / len(flows):
            return hi - start
    return None


def burst_phases(done: Sequence[float], starts: dict[int, Sequence[float]], go: float
                 ) -> dict[str, list[float]]:
    """Split each incast burst's step time at the moment its data began.

    ``done``: when the receiver held burst k whole; ``starts``: per sender,
    when it handed burst k to its stack. ``release``: from the end of burst
    k-1 (``go`` for the first) to the first sender's start of burst k (the
    release message's flight through both stacks and applications);
    ``data``: from that start to the burst's end (what the transport takes to
    carry N x S); ``spread``: first to last sender's start. Only bursts every
    sender started and the receiver finished count.
    """
    n = min([len(done), *(len(v) for v in starts.values())]) if starts else 0
    out: dict[str, list[float]] = {"release": [], "data": [], "spread": []}
    prev = go
    for k in range(n):
        first = min(v[k] for v in starts.values())
        last = max(v[k] for v in starts.values())
        out["release"].append(first - prev)
        out["data"].append(done[k] - first)
        out["spread"].append(last - first)
        prev = done[k]
    return out
