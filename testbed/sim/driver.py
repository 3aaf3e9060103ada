"""Virtual-time, event-driven driver of sans-I/O endpoints over a :class:`Fabric`.

One heap of ``(time, seq, callback, a, b)``; ``seq`` breaks ties in insertion
order, so a run is a pure function of the fabric seed and the endpoints.
Per datagram and hop there is one propagation event, plus one service event
while the element is backlogged; nothing is allocated per hop.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable, Iterable
from heapq import heappop, heappush
from typing import Any, Final, Protocol

from testbed.sim.fabric import Fabric, Link, Packet, TraceFn
from transport.datagram import RxInfo, TxPath
from wire.constants import Dscp, trim_point

#: Destination connection id: bytes 4..8 of every Braid datagram, big-endian u32.
_CONN_ID: Final = struct.Struct("!I")
_TRIMMED: Final = int(Dscp.TRIMMED)
_TRIMMED_LAST_HOP: Final = int(Dscp.TRIMMED_LAST_HOP)



class Endpoint(Protocol):
    """What the simulator drives (the sans-I/O connection core satisfies it)."""

    def datagrams_to_send(self, now: float) -> Iterable[tuple[bytes, TxPath]]: ...

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None: ...

    def handle_timer(self, now: float) -> None: ...

    def next_timer(self) -> float | None: ...


class EventBudgetExceeded(RuntimeError):
    """``run`` processed ``max_events`` events and the stop condition was not met."""


class _Attachment:
    __slots__ = ("conn_id", "endpoint", "host", "peer", "timer_at", "timer_gen")

    def __init__(self, host: str, conn_id: int | None, peer: str, endpoint: Endpoint) -> None:
        self.host = host
        self.conn_id = conn_id
        self.peer = peer
        self.endpoint = endpoint
        self.timer_at: float | None = None
        self.timer_gen = 0


class Simulator:
    """Drives endpoints attached to hosts of ``fabric`` in virtual time (seconds)."""

    def __init__(self, fabric: Fabric, *, trace: TraceFn | None = None) -> None:
        if fabric.sim is not None:
            raise ValueError("this Fabric is already driven by another Simulator")
        fabric.sim = self
        self.fabric = fabric
        self.trace: TraceFn | None = trace
        self.now = 0.0
        #: Events processed so far (all runs).
        self.events = 0
        #: Datagrams that reached a host with no endpoint for their connection id.
        self.unroutable = 0
        self._heap: list[tuple[float, int, Callable[[Any, Any], None], Any, Any]] = []
        self._seq = itertools.count().__next__
        self._random = fabric.rng.random
        self._overhead = fabric.overhead
        self._routes = fabric._routes
        self._conns: dict[tuple[str, int], _Attachment] = {}
        self._fallback: dict[str, _Attachment] = {}
        self._by_endpoint: dict[int, _Attachment] = {}
        self._next_pid = 0

    # ----------------------------------------------------------------- setup

    def add_endpoint(
        self, host: str, endpoint: Endpoint, *, peer: str, conn_id: int | None = None
    ) -> None:
        """Attach ``endpoint`` on ``host``; everything it sends goes to host ``peer``.

        Arriving datagrams are routed by their destination connection id
        (bytes 4..8): to the endpoint registered with that ``conn_id`` on the
        destination host, else to the host's ``conn_id=None`` endpoint (a
        listener), else counted as unroutable. Hosts are added to the fabric
        as needed. The endpoint is polled at the current virtual time.
        """
        for h in (host, peer):
            self.fabric.add_host(h)
        if id(endpoint) in self._by_endpoint:
            raise ValueError("endpoint already attached")
        att = _Attachment(host, conn_id, peer, endpoint)
        if conn_id is None:
            if host in self._fallback:
                raise ValueError(f"host {host!r} already has a conn_id=None endpoint")
            self._fallback[host] = att
        else:
            if not 0 <= conn_id <= 0xFFFFFFFF:
                raise ValueError("conn_id is a u32")
            if (host, conn_id) in self._conns:
                raise ValueError(f"conn_id {conn_id} already registered on {host!r}")
            self._conns[(host, conn_id)] = att
        self._by_endpoint[id(endpoint)] = att
        self._push(self.now, self._poll, att, None)

    def at(self, t: float, action: Callable[[], object]) -> None:
        """Run ``action()`` at virtual time ``t`` (faults, rate changes, API calls)."""
        if t < self.now:
            raise ValueError(f"cannot schedule in the past ({t} < now {self.now})")
        self._push(t, self._call, action, None)

    def wake(self, endpoint: Endpoint) -> None:
        """Poll ``endpoint`` (send + re-read its timer) at the current time, e.g. after
        an API call made on it from an ``at`` action."""
        self._push(self.now, self._poll, self._by_endpoint[id(endpoint)], None)

    # ------------------------------------------------------------------- run

    def run(
        self,
        until: float | None = None,
        *,
        done: Callable[[], bool] | None = None,
        max_events: int = 10_000_000,
    ) -> float:
        """Process events until virtual time ``until`` (then ``now == until``), until
        ``done()`` is true (checked before every event), or until nothing is left
        to do. Raises :class:`EventBudgetExceeded` after ``max_events`` events of
        this call. Returns the virtual time reached."""
        heap = self._heap
        pop = heappop
        limit = math.inf if until is None else until
        n = 0
        try:
            while heap and heap[0][0] <= limit:
                if done is not None and done():
                    return self.now
                if n >= max_events:
                    raise EventBudgetExceeded(
                        f"event budget of {max_events} exhausted at virtual time "
                        f"{self.now:.9f} s with {len(heap)} events pending"
                        " (an endpoint re-arming a due timer, or a too small budget?)"
                    )
                t, _, fn, a, b = pop(heap)
                self.now = t
                fn(a, b)
                n += 1
        finally:
            self.events += n
        if until is not None and self.now < until and not (done is not None and done()):
            self.now = until
        return self.now

    def stats(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "events": self.events,
            "unroutable": self.unroutable,
            "links": self.fabric.stats(),
        }

    # ------------------------------------------------------------- internals

    def _push(self, t: float, fn: Callable[[Any, Any], None], a: Any, b: Any) -> None:
        heappush(self._heap, (t, self._seq(), fn, a, b))

    def _call(self, action: Callable[[], object], _: None) -> None:
        action()

    def _poll(self, att: _Attachment, _: object) -> None:
        """After anything that may produce output: send it, re-arm the timer."""
        now = self.now
        ep = att.endpoint
        for data, path in ep.datagrams_to_send(now):
            self._send(att, data, path)
        t = ep.next_timer()
        if t != att.timer_at:
            att.timer_at = t
            att.timer_gen += 1
            if t is not None:
                heappush(
                    self._heap,
                    (t if t > now else now, self._seq(), self._fire, att, att.timer_gen),
                )

    def _fire(self, att: _Attachment, gen: int) -> None:
        if gen != att.timer_gen:
            return  # superseded by a later next_timer() answer
        att.timer_at = None
        att.endpoint.handle_timer(self.now)
        self._poll(att, None)

    def _send(self, att: _Attachment, data: bytes, path: TxPath) -> None:
        route = self._routes.get((att.host, att.peer, path.plane, path.ev))
        if route is None:
            route = self.fabric.route(att.host, att.peer, path.plane, path.ev)
        pid = self._next_pid
        self._next_pid = pid + 1
        pkt = Packet(
            pid,
            data,
            len(data) + self._overhead,
            att.host,
            att.peer,
            path.plane,
            path.ev,
            path.dscp,
            route,
            self.now,
        )
        if self.trace is not None:
            self.trace("sent", self.now, pkt, None, "")
        self._enter(route[0], pkt)

    def _drop(self, link: Link, pkt: Packet, reason: str) -> None:
        if reason == "buffer":
            link.drop_buffer += 1
        elif reason == "loss":
            link.drop_loss += 1
        elif reason == "gray":
            link.drop_gray += 1
        else:
            link.drop_down += 1
        if self.trace is not None:
            self.trace("dropped", self.now, pkt, link, reason)

    def _enter(self, link: Link, pkt: Packet) -> None:
        """``pkt`` arrives at the egress queue of ``link``."""
        if link._down:
            self._drop(link, pkt, "down")
            return
        if link.loss and self._random() < link.loss:
            self._drop(link, pkt, "loss")
            return
        if link.gray_loss and self._random() < link.gray_loss:
            self._drop(link, pkt, "gray")
            return
        size = pkt.size
        if not pkt.control:
            q = link.dbytes
            limit = link.buffer
            trim = link.trim
            if trim and link.trim_threshold is not None and link.trim_threshold < limit:
                limit = link.trim_threshold
            if q + size > limit:
                cut = trim_point(pkt.data) if trim else None
                if cut is not None:
                    # Trim: keep the authenticated header, serve it with priority.
                    pkt.data = pkt.data[:cut]
                    pkt.size = size = cut + self._overhead
                    pkt.control = pkt.trimmed = True
                    pkt.dscp = _TRIMMED_LAST_HOP if link.last_hop else _TRIMMED
                    link.trimmed += 1
                    if self.trace is not None:
                        self.trace("trimmed", self.now, pkt, link, "")
                elif q + size > link.buffer:
                    self._drop(link, pkt, "buffer")
                    return
            if not pkt.control:
                ecn = link.ecn_threshold
                if ecn is not None and q > ecn and not pkt.ce:
                    pkt.ce = True
                    link.marked += 1
                    if self.trace is not None:
                        self.trace("marked", self.now, pkt, link, "")
                link.dq.append(pkt)
                link.dbytes = q + size
        if pkt.control:
            if link.cbytes + size > link.control_buffer:
                self._drop(link, pkt, "buffer")
                return
            link.cq.append(pkt)
            link.cbytes += size
        link.enqueued += 1
        depth = link.dbytes + link.cbytes
        if depth > link.max_queue:
            link.max_queue = depth
        if not link.kick_pending:
            if self.now >= link.busy_until:
                self._transmit(link)
            else:
                link.kick_pending = True
                heappush(self._heap, (link.busy_until, self._seq(), self._kick, link, link.gen))

    def _kick(self, link: Link, gen: int) -> None:
        if gen != link.gen:
            return  # the link went down since; its queue is gone
        link.kick_pending = False
        self._transmit(link)

    def _transmit(self, link: Link) -> None:
        """Start serialising the head packet (control first), schedule its arrival
        at the next element, and the next service if more is queued."""
        if link.cq:
            pkt = link.cq.popleft()
            link.cbytes -= pkt.size
        else:
            pkt = link.dq.popleft()
            link.dbytes -= pkt.size
        size = pkt.size
        done = self.now + size / link.rate
        link.busy_until = done
        link.bytes += size
        arrive = done + link.delay
        if link.jitter:
            arrive += self._random() * link.jitter
            if not link.reorder:
                if arrive < link.last_arrival:
                    arrive = link.last_arrival
                link.last_arrival = arrive
        pkt.gen = link.gen
        heap = self._heap
        seq = self._seq
        heappush(heap, (arrive, seq(), self._land, pkt, link))
        if link.cq or link.dq:
            link.kick_pending = True
            heappush(heap, (done, seq(), self._kick, link, link.gen))

    def _land(self, pkt: Packet, link: Link) -> None:
        """``pkt`` finished crossing ``link``: on to the next element, or delivered."""
        if pkt.gen != link.gen:
            self._drop(link, pkt, "down")  # link went down while pkt was on it
            return
        link.delivered += 1
        hop = pkt.hop + 1
        pkt.hop = hop
        if hop < 3:
            self._enter(pkt.route[hop], pkt)
            return
        data = pkt.data
        att = None
        if len(data) >= 8:
            att = self._conns.get((pkt.dst, _CONN_ID.unpack_from(data, 4)[0]))
        if att is None:
            att = self._fallback.get(pkt.dst)
            if att is None:
                self.unroutable += 1
                if self.trace is not None:
                    self.trace("dropped", self.now, pkt, link, "unroutable")
                return
        if self.trace is not None:
            self.trace("delivered", self.now, pkt, link, "")
        att.endpoint.receive_datagram(data, RxInfo(pkt.plane, pkt.ce, pkt.dscp), self.now)
        self._poll(att, None)
