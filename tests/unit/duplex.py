"""Two endpoints joined by a delaying in-memory link, in event-driven virtual time.

Shared by the hardening regression tests and the stateful property test.
Time jumps straight to the next thing that can happen (a datagram arriving,
a timer), so an idle gap of seconds costs nothing; every loop is bounded.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.events import Event

SECRET = bytes(range(32))
CFG = ConnectionConfig(planes=2, evs_per_plane=8, plane_rate=1.25e9, initial_rtt=2e-3,
                       min_rto=5e-3, handshake_timeout=0.5)

#: (direction "ab"/"ba", datagram) -> what to put on the link instead (drop: []).
Tamper = Callable[[str, bytes], list[bytes]]


class Duplex:
    def __init__(self, a: Endpoint, b: Endpoint, *, delay: float = 1e-3) -> None:
        self.ep = {"a": a, "b": b}
        self.delay = delay
        self.now = 0.0
        self._q: list[tuple[float, int, str, bytes, int]] = []
        self._seq = 0
        self.events: dict[str, list[tuple[Connection, Event]]] = {"a": [], "b": []}
        self.tamper: Tamper | None = None
        self.delivered_datagrams = 0
        #: Deliver through ``Endpoint.receive_datagrams`` (the I/O adapter's fast
        #: path) from a reused buffer; False: ``receive_datagram`` with bytes.
        self.batched = True
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)

    def put(self, direction: str, data: bytes, plane: int = 0, extra: float = 0.0) -> None:
        """Put one datagram on the link (tests use it to inject forged ones)."""
        self._seq += 1
        heapq.heappush(self._q, (self.now + self.delay + extra, self._seq, direction, data,
                                 plane))

    def replace(self, name: str, ep: Endpoint) -> None:
        """A restarted host: a new endpoint where the old one was."""
        self.ep[name] = ep

    def _pump(self) -> None:
        for name, peer in (("a", "b"), ("b", "a")):
            ep = self.ep[name]
            t = ep.next_timer()
            if t is not None and t <= self.now:
                ep.handle_timer(self.now)
            for _peer, data, path in ep.datagrams_to_send(self.now):
                direction = name + peer
                out = [data] if self.tamper is None else self.tamper(direction, data)
                for d in out:
                    self.put(direction, d, path.plane)
            while (item := ep.next_event()) is not None:
                self.events[name].append(item)
            ep.reap()

    def _deliver_due(self) -> None:
        while self._q and self._q[0][0] <= self.now:
            _, _, direction, data, plane = heapq.heappop(self._q)
            dst = self.ep[direction[1]]
            if self.batched:
                # As the I/O adapter does: a view of a reused buffer, which is
                # scribbled over afterwards (nothing may keep the view).
                n = len(data)
                self._buf[:n] = data
                dst.receive_datagrams((self._view[:n],), RxInfo(plane), self.now, direction[0])
                self._buf[:n] = bytes(n)
            else:
                dst.receive_datagram(data, RxInfo(plane), self.now, direction[0])
            self.delivered_datagrams += 1

    def _next_time(self) -> float | None:
        cands = [self.ep[n].next_timer() for n in ("a", "b")]
        if self._q:
            cands.append(self._q[0][0])
        return min((t for t in cands if t is not None), default=None)

    def run_until(self, t_end: float, stop: Callable[[], bool] | None = None,
                  max_steps: int = 2_000_000) -> bool:
        """Advance to ``t_end`` (or until ``stop()``); True if stopped early."""
        self._pump()
        for _ in range(max_steps):
            if stop is not None and stop():
                return True
            t = self._next_time()
            if t is None or t > t_end:
                self.now = max(self.now, t_end)
                self._deliver_due()
                self._pump()
                return stop is not None and stop()
            # A timer in the past (or now) still moves time a hair forward so
            # a connection that cannot act on it yet cannot spin us forever.
            self.now = max(self.now + 1e-7, t)
            self._deliver_due()
            self._pump()
        raise AssertionError("virtual time did not advance: too many steps")

    def of(self, name: str, kind: type) -> list[Event]:
        return [e for _, e in self.events[name] if isinstance(e, kind)]


def endpoints(cfg: ConnectionConfig = CFG, seed: int = 1,
              b_cfg: ConnectionConfig | None = None) -> tuple[Endpoint, Endpoint, Duplex]:
    a = Endpoint(config=cfg, secret=SECRET, rng=random.Random(seed))
    b = Endpoint(config=b_cfg or cfg, secret=SECRET, rng=random.Random(seed + 1))
    return a, b, Duplex(a, b)
