"""Congestion-control scenarios (issue 12): the worst cases of NSCC on a
software-host fabric, each with a one-message-at-a-time and a pipelined client.

- ``scenario_jitter``: 0-3 ms of per-packet delay jitter, no loss, no queue:
  delay noise must not look like congestion (no QuickAdapt, no empty 10 ms bin).
- ``scenario_taildrop``: 100 Mbit/s planes whose bottleneck port tail-drops
  (no ECN, no trimming: a tbf): loss must bring the window down.
- ``scenario_app_limited``: a sender that offers less than the fabric carries,
  with random (non-congestive) loss: QuickAdapt must not measure the
  application and call it the network.

The connection is configured as the daemon configures it on a host
(``transport.daemon.HOST_CONNECTION_DEFAULTS``: 2 ms delay target, 1 ms RTT
guess, 40 ms minimum RTO), with the plane rate the testbed hands it.
Shared by tests/unit/test_scenarios.py and ``braid bench sim``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric, LinkSpec
from testbed.sim.scenarios import (
    Peer,
    _establish,
    connect_pair,
    default_config,
    make_fabric,
    payload_fraction,
)
from transport.daemon import HOST_CONNECTION_DEFAULTS
from transport.events import Event, MessageAcked

Client = Literal["serial", "pipelined", "paced"]
#: Rate of one testbed plane (100 Mbit/s, examples/*.toml), bytes/s.
PLANE_RATE = 12.5e6
BIN = 10e-3


def testbed_fabric(*, planes: int = 2, rate: float = PLANE_RATE, delay: float = 50e-6,
                   jitter: float = 0.0, buffer: int = 256 << 10, nic_rate: float | None = None,
                   loss: float = 0.0, seed: int = 1) -> Fabric:
    """``planes`` x ``rate`` planes, one switch each (1 spine), tail drop everywhere
    (no ECN, no trimming: what tbf does). ``jitter`` delays each packet the sender
    ``a`` sends by [0, jitter) s, in order (a busy event loop: the RTT varies
    by up to ``jitter``); ``nic_rate`` makes
    the host links faster than the plane (the bottleneck is then the switch
    port towards the receiver)."""
    up = LinkSpec(rate=nic_rate or rate, delay=delay, buffer=4 << 20)
    sp = LinkSpec(rate=rate, delay=delay, buffer=buffer, loss=loss)
    dn = LinkSpec(rate=rate, delay=delay, buffer=buffer)
    fab = make_fabric(planes=planes, spines=1, rate=rate, uplink=up, spine=sp, downlink=dn,
                      seed=seed)
    if jitter:
        for p in range(planes):
            fab.link("uplink", "a", p).jitter = jitter
    return fab


def host_config(fab: Fabric, *, plane_rate: float, seed: int = 1, **kw: Any) -> Any:
    """The daemon's connection config on this fabric, ``plane_rate`` as handed over."""
    base = {k: v for k, v in HOST_CONNECTION_DEFAULTS.items() if k != "congestion_params"}
    base["congestion_params"] = dict(HOST_CONNECTION_DEFAULTS["congestion_params"])
    base.update({"plane_rate": plane_rate, "seed": seed})
    base.update(kw)
    return default_config(fab, **base)


@dataclass
class _Clock:
    start: float
    end: float


def run_client(fab: Fabric, config: Any, *, client: Client, msg_size: int = 64 << 10,
               duration: float = 2.0, depth: int = 64, offered: float | None = None,
               warmup: float = 0.1) -> dict[str, Any]:
    """Run one client a->b for ``duration`` virtual seconds and measure it.

    ``serial``: the next message is submitted when the previous one is
    acknowledged (``braid.connect().send()`` in a loop). ``pipelined``:
    ``depth`` messages always queued. ``paced``: one message every
    msg_size/``offered`` seconds, whatever happens (an application producing
    at a fixed rate). Figures are over [start + warmup, end].
    """
    sim = Simulator(fab)
    a, b = connect_pair(sim, "a", "b", config=config)
    b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    payload = bytes(msg_size)
    t0 = sim.now
    clock = _Clock(t0, t0 + duration)

    def submit() -> None:
        if sim.now < clock.end and a.failed is None:
            a.conn.send_message(payload)
            sim.wake(a)

    def on_event(peer: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked) and client != "paced":
            submit()

    a.on_event = on_event
    if client == "paced":
        assert offered is not None and offered > 0
        gap = msg_size / offered
        n = int(duration / gap)
        for i in range(n):
            sim.at(t0 + i * gap, submit)
    else:
        for _ in range(1 if client == "serial" else depth):
            submit()

    samples: list[tuple[float, float, float, float]] = []  # t, cwnd, srtt, min_rtt

    def sample() -> None:
        r = a.conn.sender.rtt
        samples.append((sim.now, float(a.conn.cc.cwnd), r.srtt, r.min_rtt))
        if sim.now + 1e-3 < clock.end:
            sim.at(sim.now + 1e-3, sample)

    sim.at(t0 + warmup, sample)
    sim.run(until=clock.end, max_events=50_000_000)

    lo, hi = t0 + warmup, clock.end
    times = [t for t, _, _ in b.delivered if lo <= t <= hi]
    nbins = int((hi - lo) / BIN)
    hit = [False] * nbins
    for t in times:
        k = int((t - lo) / BIN)
        if k < nbins:
            hit[k] = True
    pts = [lo, *times, hi]
    gap_max = max(y - x for x, y in zip(pts, pts[1:], strict=False))
    delivered = sum(msg_size for t, _, _ in b.delivered if lo <= t <= hi)
    cap = fab.aggregate_capacity("a", "b") * payload_fraction(config.payload_size)
    drops = sum(ln.drop_buffer for ln in fab.links())
    sent_pkts = sum(fab.link("uplink", "a", p).enqueued for p in range(fab.planes))
    srtts = [s for _, _, s, _ in samples]
    min_rtt = min((m for _, _, _, m in samples), default=float("nan"))
    cwnds = [w for _, w, _, _ in samples]
    st = a.conn.cc.stats()
    target = a.conn.cc.target_delay
    srtt_mean = statistics.fmean(srtts) if srtts else float("nan")
    return {
        "client": client,
        "failed": a.failed,
        "goodput": delivered / (hi - lo),
        "capacity": cap,
        "goodput_over_capacity": delivered / (hi - lo) / cap,
        "empty_bins": nbins - sum(hit),
        "bins": nbins,
        "max_gap": gap_max,
        "drops": drops,
        "sent_packets": sent_pkts,
        "drop_fraction": drops / sent_pkts if sent_pkts else 0.0,
        "srtt_mean": srtt_mean,
        "srtt_max": max(srtts, default=float("nan")),
        "min_rtt": min_rtt,
        "target_delay": target,
        "srtt_limit": 2 * min_rtt + target,
        "cwnd_min": min(cwnds, default=float("nan")),
        "cwnd_median": statistics.median(cwnds) if cwnds else float("nan"),
        "max_window": st.get("max_window", float("nan")),
        "quick_adapt": st.get("quick_adapt", 0.0),
        "quick_adapt_app_limited": st.get("quick_adapt_app_limited", 0.0),
        "md": st.get("md", 0.0),
        "rtos": a.conn.sender.rto_events,
        "retransmissions": a.conn.sender.retransmissions,
        "messages": a.acked_msgs,
    }


def scenario_jitter(*, client: Client = "pipelined", jitter: float = 3e-3,
                    duration: float = 2.0, seed: int = 21) -> dict[str, Any]:
    """0-``jitter`` s of delay on every packet the sender sends, no loss, no queue."""
    fab = testbed_fabric(jitter=jitter, seed=seed)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    return run_client(fab, cfg, client=client, duration=duration)


def scenario_taildrop(*, client: Client = "pipelined", plane_rate: float = PLANE_RATE,
                      buffer: int = 256 << 10, duration: float = 2.0,
                      seed: int = 22) -> dict[str, Any]:
    """Hosts on 1 Gbit/s NICs, planes shaped to 100 Mbit/s at the switch port
    towards the receiver, tail drop (``buffer`` bytes), no ECN, no trimming.
    ``plane_rate`` is what the connection is told (the daemon's old default
    was 1.25e9 B/s: 100x too high)."""
    fab = testbed_fabric(nic_rate=10 * PLANE_RATE, buffer=buffer, seed=seed)
    cfg = host_config(fab, plane_rate=plane_rate, seed=seed)
    return run_client(fab, cfg, client=client, duration=duration)


def scenario_app_limited(*, client: Client = "paced", loss: float = 0.01,
                         offered_fraction: float = 0.4, duration: float = 2.0,
                         msg_size: int = 16 << 10,
                         seed: int = 23) -> dict[str, Any]:
    """The application offers ``offered_fraction`` of capacity (paced) or one
    message at a time (serial); ``loss`` random loss on the planes' switch
    ports (not congestion). Every timeout asks QuickAdapt; an
    application-limited window must stay."""
    fab = testbed_fabric(loss=loss, seed=seed)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    cap = fab.aggregate_capacity("a", "b") * payload_fraction(cfg.payload_size)
    return run_client(fab, cfg, client=client, duration=duration, msg_size=msg_size,
                      offered=offered_fraction * cap if client == "paced" else None)
