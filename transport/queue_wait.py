"""How long datagrams waited in a host's socket queue before it read them.

The kernel stamps every datagram when it reaches the host's stack
(``SO_TIMESTAMPNS``); the I/O layer compares the stamp with the clock when it
reads the datagram. The difference is time the packet spent in this host,
not in the fabric: a busy event loop, or a process waiting for a CPU. Every
RTT a peer measures through this host contains it, and a delay-based
controller cannot tell it from a queue in a switch. Measured per read (a GRO
read of many datagrams carries one stamp) into log2 buckets of microseconds:
O(1) memory, one comparison chain per read.
"""

from __future__ import annotations

from typing import Final

#: Buckets: 0 (under 1 µs), then [2^(k-1), 2^k) µs for k = 1..MAX_BUCKET-1, and
#: everything from 2^(MAX_BUCKET-1) µs (~0.5 s) up in the last.
MAX_BUCKET: Final = 20


class QueueWait:
    """Log2 histogram of socket-queue waits (seconds in, microseconds out)."""

    __slots__ = ("buckets", "count", "max", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (MAX_BUCKET + 1)
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, wait: float) -> None:
        """One read's wait. Negative values (a clock stepped backwards) count as 0."""
        if wait < 0.0:
            wait = 0.0
        self.buckets[min(int(wait * 1e6).bit_length(), MAX_BUCKET)] += 1
        self.count += 1
        self.total += wait
        if wait > self.max:
            self.max = wait

    @classmethod
    def from_summary(cls, s: dict[str, object]) -> QueueWait:
        """The histogram a ``summary()`` (e.g. from a daemon's stats) describes."""
        q = cls()
        buckets = s.get("buckets")
        reads, mean, mx = s.get("reads"), s.get("mean_us"), s.get("max_us")
        if not isinstance(buckets, list) or len(buckets) != MAX_BUCKET + 1 or \
                not isinstance(reads, int) or not isinstance(mean, int | float) or \
                not isinstance(mx, int | float):
            raise ValueError(f"not a queue-wait summary: {s!r}")
        q.buckets = [int(n) for n in buckets]
        q.count = reads
        q.total = float(mean) * reads / 1e6
        q.max = float(mx) / 1e6
        return q

    def since(self, earlier: QueueWait) -> QueueWait:
        """What was added after ``earlier`` (a snapshot of this histogram). Its
        maximum is the upper bound of the highest bucket that grew (never above
        this histogram's own maximum)."""
        d = QueueWait()
        d.buckets = [max(0, a - b) for a, b in zip(self.buckets, earlier.buckets, strict=True)]
        d.count = sum(d.buckets)
        d.total = max(0.0, self.total - earlier.total)
        top = max((k for k, n in enumerate(d.buckets) if n), default=None)
        if top is not None:
            d.max = min(float(1 << top) / 1e6, self.max)
        return d

    def quantile_us(self, q: float) -> float:
        """Upper bound (µs) of the bucket holding the ``q`` quantile (0 when empty)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for k, n in enumerate(self.buckets):
            seen += n
            if seen >= rank and n:
                return min(float(1 << k), self.max * 1e6)
        return self.max * 1e6

    def summary(self) -> dict[str, float | int | list[int]]:
        """Reads, mean / p50 / p90 / p99 / max in µs (quantiles: bucket upper bounds,
        so within 2x), and the buckets themselves."""
        n = self.count
        return {
            "reads": n,
            "mean_us": self.total / n * 1e6 if n else 0.0,
            "p50_us": self.quantile_us(0.5),
            "p90_us": self.quantile_us(0.9),
            "p99_us": self.quantile_us(0.99),
            "max_us": self.max * 1e6,
            "buckets": list(self.buckets),
        }
