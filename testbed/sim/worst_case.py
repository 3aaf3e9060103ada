"""The core's worst case for liveness: scenarios k–n.

Each scenario runs with two clients, because liveness must not depend on
traffic volume: ``one`` keeps one message in flight (the natural loop over
``send()``, which waits for the acknowledgement), ``pipelined`` queues every
message up front (``submit``). Shared by tests/unit/test_worst_case.py and
``braid bench sim`` (virtual time, so the figures are exact).

- (k) compound fault: plane 0 grays (30% one-way loss, on the data or on the
  ack direction), then planes 1–3 die silently;
- (l) last live plane with gray ack loss (planes 1–3 dead from the start);
- (m) application-limited sender (small messages, idle gaps, random loss),
  one plane dies silently halfway;
- (n) PSN wrap mid-transfer (initial PSN just below 2**32).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric, Packet
from testbed.sim.scenarios import (
    Peer,
    _establish,
    _reassemble,
    connect_pair,
    default_config,
    make_fabric,
    max_delivery_gap,
    pattern,
)
from transport.events import Event, MessageAcked
from transport.sender import SentPacket

CLIENTS = ("one", "pipelined")
DIRECTIONS = ("data", "ack")


def _start_client(sim: Simulator, a: Peer, data: bytes, msg_size: int, client: str,
                  interval: float = 0.0) -> None:
    """``one``: next message when the previous one is acknowledged; ``pipelined``:
    everything queued now; with ``interval`` > 0 (application-limited), a new
    message every ``interval`` seconds (``one``: at most one unacknowledged)."""
    chunks = [data[i : i + msg_size] for i in range(0, len(data), msg_size)]
    it = iter(chunks)
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; known: {', '.join(CLIENTS)}")
    if interval > 0:
        state = {"waiting": False, "left": len(chunks)}

        def tick() -> None:
            if state["left"] <= 0 or a.failed is not None:
                return
            if client == "pipelined" or not state["waiting"]:
                nxt = next(it, None)
                if nxt is not None:
                    a.conn.send_message(nxt)
                    state["left"] -= 1
                    state["waiting"] = True
                    sim.wake(a)
            sim.at(sim.now + interval, tick)

        def on_event(p: Peer, ev: Event, now: float) -> None:
            if isinstance(ev, MessageAcked):
                state["waiting"] = False

        a.on_event = on_event
        tick()
        return
    if client == "pipelined":
        for c in chunks:
            a.conn.send_message(c)
        sim.wake(a)
        return

    def next_message(p: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked):
            nxt = next(it, None)
            if nxt is not None:
                p.conn.send_message(nxt)

    a.on_event = next_message
    a.conn.send_message(next(it))
    sim.wake(a)


class _PlaneWatch:
    """Per plane: the send time of the newest packet whose answer came back
    (exactly, Karn), read from the sender's acknowledgements."""

    def __init__(self, a: Peer, planes: int) -> None:
        self.answered_sent = [float("-inf")] * planes
        health = a.conn.health
        orig = health.on_acked

        def on_acked(acked: Any, now: float, **kw: Any) -> None:
            acked = list(acked)
            for p in acked:
                if isinstance(p, SentPacket) and p.ev is not None and p.ack_exact:
                    pl = p.ev.plane
                    if p.sent_time > self.answered_sent[pl]:
                        self.answered_sent[pl] = p.sent_time
            orig(acked, now, **kw)

        health.on_acked = on_acked  # type: ignore[method-assign]


def _parked_at(a: Peer, plane: int, after: float) -> tuple[float, float] | None:
    """When ``plane`` was first parked at or after ``after``, and the smoothed
    RTT then (None: never)."""
    return next(((t, srtt) for t, p, srtt in a.conn.paths.ev_set.park_log
                 if p == plane and t >= after), None)


def _parks(a: Peer, plane: int) -> int:
    parks: int = a.conn.paths.ev_set.snapshot()["planes"][plane]["parks"]
    return parks


def _run(*, client: str, setup: Callable[[Simulator, Fabric, Peer, Peer, dict[str, Any]], None],
         size: int, msg_size: int, seed: int, until: float, interval: float = 0.0,
         planes: int = 4, **cfg: Any) -> dict[str, Any]:
    fab = make_fabric(planes=planes, seed=seed)
    deliveries: list[float] = []
    sends: list[list[float]] = [[] for _ in range(planes)]

    def trace(event: str, now: float, pkt: Packet, link: Any, reason: str) -> None:
        if pkt.control or pkt.dst != "b":
            return
        if event == "delivered":
            deliveries.append(now)
        elif event == "sent":
            sends[pkt.plane].append(now)

    sim = Simulator(fab, trace=trace)
    config = default_config(fab, seed=seed, **cfg)
    a, b = connect_pair(sim, "a", "b", config=config,
                        b_config=replace(config, seed=config.seed + 7919))
    _establish(sim, a, b)
    watch = _PlaneWatch(a, planes)
    marks: dict[str, Any] = {"t0": sim.now}
    setup(sim, fab, a, b, marks)
    data = pattern(size, seed)
    start = sim.now
    _start_client(sim, a, data, msg_size, client, interval)
    sim.run(until=start + until, done=lambda: a.acked_bytes >= size or a.failed is not None,
            max_events=20_000_000)
    end = max((t for t, _, _ in b.delivered), default=sim.now)
    s = a.conn.sender
    return {
        "ok": _reassemble(b) == data, "failed": a.failed, "start": start, "end": end,
        "seconds": end - start, "rtos": s.rto_events, "tlps": getattr(s, "tlp_probes", 0),
        "retransmissions": s.retransmissions, "srtt": s.rtt.srtt, "min_rtt": s.rtt.min_rtt,
        "probe_interval": a.conn.paths.ev_set.probe_initial,
        "packet_deliveries": deliveries, "sends": sends, "watch": watch, "marks": marks,
        "a": a, "b": b, "sim": sim, "fabric": fab,
    }


def _gap_after(r: dict[str, Any], t: float) -> float:
    times = [u for u in r["packet_deliveries"] if u >= t]
    return max_delivery_gap(times, t, r["end"])


def scenario_compound(*, client: str = "one", direction: str = "data",
                      size: int = 8 << 20, msg_size: int = 64 << 10, seed: int = 12,
                      gray: float = 0.3, die_at: float = 1e-3) -> dict[str, Any]:
    """(k) Plane 0 grays (``gray`` one-way loss on the ``direction`` of its
    host links), then at ``die_at`` planes 1–3 die silently. Figures: each dead
    plane's park time after its last answered send, in smoothed RTTs (and
    after the first send that followed it, which is where evidence can start:
    a one-message client may send nothing on a plane for a while); the
    longest gap between data packets reaching b after the death, against
    10 smoothed RTTs + one probe interval; RTOs."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}")

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer, marks: dict[str, Any]) -> None:
        host = "b" if direction == "data" else "a"
        fab.link("downlink", host, 0).gray_loss = gray
        marks["die"] = sim.now + die_at

        def die() -> None:
            for p in range(1, fab.planes):
                fab.set_plane_down(p, True)

        sim.at(marks["die"], die)

    r = _run(client=client, setup=setup, size=size, msg_size=msg_size, seed=seed, until=5.0)
    a: Peer = r["a"]
    die = r["marks"]["die"]
    srtt: float = r["srtt"]
    parked_rtts: list[float | None] = []
    from_first: list[float | None] = []
    for p in range(1, 4):
        park = _parked_at(a, p, die)
        last = r["watch"].answered_sent[p]
        parked_rtts.append(None if park is None else (park[0] - last) / park[1])
        # The first send after it: before that the plane carried nothing
        # (a one-message client can leave a plane idle for several RTTs).
        first = min((u for u in _sends_on(r, p) if u > last), default=None)
        from_first.append(None if park is None or first is None
                          else (park[0] - first) / park[1])
    gap = _gap_after(r, die)
    r.update({
        "client": client, "direction": direction,
        "parked_after_rtts": parked_rtts,
        "worst_parked_after_rtts": max((x for x in parked_rtts if x is not None),
                                       default=None) if None not in parked_rtts else None,
        "parked_after_first_unanswered_rtts": from_first,
        "worst_parked_after_first_unanswered_rtts":
            max((x for x in from_first if x is not None), default=None)
            if None not in from_first else None,
        "max_gap": gap, "gap_limit": 10 * srtt + r["probe_interval"],
        "plane0_parks": _parks(a, 0),
    })
    return r


def scenario_last_plane(*, client: str = "one", size: int = 4 << 20,
                        msg_size: int = 64 << 10, seed: int = 13,
                        gray: float = 0.3) -> dict[str, Any]:
    """(l) Planes 1–3 are dead from the start; the only live plane loses 30% of
    the ACKs coming back. It must never be parked without a failed probe."""

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer, marks: dict[str, Any]) -> None:
        for p in range(1, fab.planes):
            fab.set_plane_down(p, True)
        fab.link("downlink", "a", 0).gray_loss = gray
        marks["die"] = sim.now

    r = _run(client=client, setup=setup, size=size, msg_size=msg_size, seed=seed, until=5.0)
    a: Peer = r["a"]
    srtt: float = r["srtt"]
    r.update({
        "client": client,
        "plane0_parks": _parks(a, 0),
        "max_gap": _gap_after(r, r["start"] + 2e-3),
        "gap_limit": 10 * srtt + r["probe_interval"],
    })
    return r


def scenario_app_limited(*, client: str = "one", count: int = 1000, msg_size: int = 4096,
                         seed: int = 14, loss: float = 0.02,
                         interval_rtts: float = 2.0) -> dict[str, Any]:
    """(m) An application-limited sender: one ``msg_size`` message every
    ``interval_rtts`` base RTTs (``pipelined``: it does not wait for the ACK),
    ``loss`` random loss on every spine; plane 3 dies silently halfway. A
    healthy plane must never be parked (idle time is not silence), the dead
    one must be, within a few smoothed RTTs of its first unanswered send."""
    holder: dict[str, float] = {}

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer, marks: dict[str, Any]) -> None:
        for ln in fab.links():
            if ln.name.startswith("spine"):
                ln.loss = loss
        rtt = fab.base_rtt("a", "b", size=1500, ack_size=120)
        holder["interval"] = interval_rtts * rtt
        marks["die"] = sim.now + count // 2 * holder["interval"]
        sim.at(marks["die"], lambda: fab.set_plane_down(3, True))

    fab0 = make_fabric(seed=seed)
    interval = interval_rtts * fab0.base_rtt("a", "b", size=1500, ack_size=120)
    r = _run(client=client, setup=setup, size=count * msg_size, msg_size=msg_size, seed=seed,
             until=count * interval * 4 + 1.0, interval=interval)
    a: Peer = r["a"]
    die = r["marks"]["die"]
    healthy_parks = sum(_parks(a, p) for p in range(3))
    park = _parked_at(a, 3, die)
    first = min((u for u in _sends_on(r, 3) if u >= die), default=None)
    r.update({
        "client": client, "healthy_plane_parks": healthy_parks,
        "dead_parked_after_rtts": None if park is None or first is None
        else (park[0] - first) / park[1],
        "completion_over_ideal": r["seconds"] / (count * interval),
    })
    return r


def _sends_on(r: dict[str, Any], plane: int) -> list[float]:
    sends: list[list[float]] = r["sends"]
    return sends[plane]


def scenario_psn_wrap(*, client: str = "one", size: int = 4 << 20, msg_size: int = 64 << 10,
                      seed: int = 15, loss: float = 0.01) -> dict[str, Any]:
    """(n) PSNs start 1000 below 2**32 and wrap mid-transfer (1% random loss,
    so SACK bitmaps and retransmissions straddle the wrap)."""

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer, marks: dict[str, Any]) -> None:
        for ln in fab.links():
            if ln.name.startswith("spine"):
                ln.loss = loss

    r = _run(client=client, setup=setup, size=size, msg_size=msg_size, seed=seed, until=5.0,
             initial_psn=(1 << 32) - 1000)
    a: Peer = r["a"]
    r.update({"client": client, "packets": a.conn.sender.packets_sent})
    return r
