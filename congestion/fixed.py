"""A fixed window, optionally paced: the control case for tests and benches.

It reacts to nothing, so a test can separate what the transport does
(reliability, spraying) from what congestion control does.
"""

from __future__ import annotations

import math

from congestion.base import AckSample
from congestion.pacing import Pacer


class FixedWindow:
    """``window`` bytes in flight at most; ``pacing_rate`` bytes/s (None = unpaced)."""

    def __init__(
        self,
        *,
        window: int = 64 * 1500,
        mtu: int = 1500,
        pacing_rate: float | None = None,
        burst_packets: int = 4,
    ) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self._window = window
        self._pacer = Pacer(
            rate=math.inf if pacing_rate is None else pacing_rate, burst=burst_packets * mtu
        )
        self._acked = 0
        self._trimmed = 0
        self._lost = 0
        self._timeouts = 0

    @property
    def cwnd(self) -> int:
        return self._window

    @property
    def target_delay(self) -> float:
        # No delay target: any queueing behind a loss makes it congestive.
        return 0.0

    def on_ack(self, sample: AckSample) -> None:
        self._acked += sample.acked_bytes

    def set_senders(self, n: int) -> None:
        pass  # a fixed window is fixed

    def set_line_rate(self, rate: float) -> None:
        pass  # a fixed window is fixed

    def on_plane_rtt(self, *, plane: int, rtt: float) -> None:
        pass

    def on_nack(self, *, now: float, trimmed_bytes: int, last_hop: bool,
                rtt: float | None = None, plane: int | None = None) -> None:
        self._trimmed += trimmed_bytes

    def on_loss(self, *, now: float, lost_bytes: int) -> None:
        self._lost += lost_bytes

    def on_spurious_loss(self, *, now: float, lost_bytes: int) -> None:
        pass  # the window never moved for the loss

    def on_timeout(self, *, now: float) -> None:
        self._timeouts += 1

    def can_send(self, *, in_flight: int, size: int) -> bool:
        # An empty pipe always admits one packet so a window smaller than a
        # packet cannot stall the connection.
        return in_flight == 0 or in_flight + size <= self._window

    def next_send_time(self, *, now: float, size: int) -> float:
        return self._pacer.next_send_time(now=now, size=size)

    def on_sent(self, *, now: float, size: int) -> None:
        self._pacer.on_sent(now=now, size=size)

    def send_quota(self, *, now: float, size: int) -> tuple[float, float, float, float]:
        tokens, need = self._pacer.quota(now=now, size=size)
        return float(self._window), tokens, need, self._pacer.rate

    def on_sent_run(self, *, now: float, sizes: list[int]) -> None:
        self._pacer.on_sent_run(now=now, sizes=sizes)

    def stats(self) -> dict[str, float]:
        return {
            "cwnd": float(self._window),
            "pacing_rate": self._pacer.rate,
            "acked_bytes": float(self._acked),
            "trimmed_bytes": float(self._trimmed),
            "lost_bytes": float(self._lost),
            "timeouts": float(self._timeouts),
        }
