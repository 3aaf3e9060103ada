"""Plain tail-drop links on a busy host: what a new user's first testbed is.

``tc tbf`` on each host link (no trimming, no ECN: examples/two-hosts-taildrop.toml),
100 Mbit/s planes, and a host whose event loop is late by up to a few ms
(the sender's sends and the receiver's ACKs both wait). Two scenarios:

- ``scenario_taildrop_jitter``: one pipelined stream of 64 KiB messages over
  one or two such planes, 0-``jitter`` s of host delay on both hosts. Judged
  by resends per packet sent, the share of 10 ms bins that carry >= 90% of
  the links' rate once at speed, and deep window cuts (docs/congestion.md,
  "Plain tail-drop links").
- ``scenario_taildrop_planes``: the same on two equal planes whose host delay
  differs per plane (one plane's socket is serviced later than the other's):
  each plane must carry its share of the bytes.

The fabric: the tbf is modelled as the spine port (a NIC-speed uplink feeds
it, so a late host's burst lands in the tbf's queue, as it does on the
testbed where the host's own egress tbf is the bottleneck); the last hop runs
at the same rate, so it never queues. Connections as the daemon configures
them (``scenarios_cc.host_config``). Shared by
tests/unit/test_scenarios_taildrop.py and ``braid bench sim``.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric, Link, LinkSpec, Packet
from testbed.sim.scenarios import _establish, connect_pair, make_fabric
from testbed.sim.scenarios_cc import PLANE_RATE, feed, host_config

#: Measurement bin (s) and the share of a link's rate a bin must carry.
BIN = 10e-3
AT_SPEED = 0.90
#: A deep cut: the window falls below this share of its median at speed.
DEEP_CUT = 0.5
#: The host NIC (a veth: far faster than the shaped plane).
NIC_RATE = 125e6


def taildrop_fabric(*, planes: int = 2, rate: float = PLANE_RATE, buffer: int = 128 << 10,
                    jitter: tuple[float, ...] = (3e-3,), seed: int = 1) -> Fabric:
    """``planes`` x ``rate`` tail-drop planes (``buffer`` bytes each, no ECN,
    no trim); host ``a`` -> ``b``. ``jitter[p]`` (the last entry repeats) is
    the host delay on plane ``p``, applied to a's data and b's ACKs."""
    up = LinkSpec(rate=NIC_RATE, delay=25e-6, buffer=4 << 20)
    sp = LinkSpec(rate=rate, delay=25e-6, buffer=buffer)
    dn = LinkSpec(rate=rate, delay=25e-6, buffer=buffer)
    fab = make_fabric(planes=planes, spines=1, rate=rate, uplink=up, spine=sp, downlink=dn,
                      seed=seed, hosts=("a", "b"))
    for p in range(planes):
        j = jitter[min(p, len(jitter) - 1)]
        for h in ("a", "b"):
            fab.link("uplink", h, p).jitter = j
    return fab


def run_stream(fab: Fabric, *, duration: float = 3.0, msg_size: int = 64 << 10,
               depth: int = 64, warmup: float = 0.2, seed: int = 1,
               plane_rate: float | None = None, host_floor: bool = True,
               measured_growth: bool = True, **cfg: Any) -> dict[str, Any]:
    """One pipelined stream a -> b for ``duration`` virtual s; figures over
    [start + warmup, end]. Per-bin bytes are DATA wire bytes delivered to b
    (resends included: the link carried them). ``host_floor`` and
    ``measured_growth``: NSCC's deviations 11 and 10, on here unless told
    otherwise (the daemon leaves both off: docs/congestion.md)."""
    sim = Simulator(fab)
    told = fab.link("spine", "b", 0, 0).rate if plane_rate is None else plane_rate
    config = host_config(fab, plane_rate=told, seed=seed, **cfg)
    # NSCC deviations 10 and 11 (off by default: docs/congestion.md, "Plain
    # tail-drop links").
    config = replace(config, congestion_params={**config.congestion_params,
                                                "host_floor": host_floor,
                                                "measured_growth": measured_growth})
    a, b = connect_pair(sim, "a", "b", config=config)
    b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    t0 = sim.now
    lo, end = t0 + warmup, t0 + duration
    nbins = int((end - lo) / BIN)
    per_plane = [[0] * nbins for _ in range(fab.planes)]

    drop_times: list[float] = []

    def trace(event: str, now: float, pkt: Packet, link: Link | None, reason: str) -> None:
        if event == "dropped" and not pkt.control:
            drop_times.append(now - t0)
        elif event == "delivered" and pkt.dst == "b" and not pkt.control and not pkt.trimmed:
            k = int((now - lo) / BIN)
            if 0 <= k < nbins:
                per_plane[pkt.plane][k] += pkt.size

    sim.trace = trace
    submit = feed(sim, [a], bytes(msg_size), end)
    for _ in range(depth):
        submit(a)
    cwnd: list[float] = []

    def sample() -> None:
        if sim.now >= lo:
            cwnd.append(float(a.conn.cc.cwnd))
        if sim.now + 1e-3 < end:
            sim.at(sim.now + 1e-3, sample)

    sim.at(t0, sample)
    sim.run(until=end, max_events=50_000_000)

    rate_bin = sum(fab.link("spine", "b", p, 0).rate for p in range(fab.planes)) * BIN
    bins = [sum(col) for col in zip(*per_plane, strict=True)]
    first = next((i for i, x in enumerate(bins) if x >= AT_SPEED * rate_bin), nbins)
    speed = bins[first:]
    at_speed = sum(x >= AT_SPEED * rate_bin for x in speed) / len(speed) if speed else 0.0
    # Deep cuts: entries into "window below DEEP_CUT x its median" once at speed.
    settled = cwnd[int(first * BIN / 1e-3):]
    median = statistics.median(settled) if settled else 0.0
    cuts, below = 0, False
    for w in settled:
        if w < DEEP_CUT * median and not below:
            cuts += 1
        below = w < DEEP_CUT * median
    s = a.conn.sender
    plane_bytes = [sum(col) for col in per_plane]
    total = sum(plane_bytes) or 1
    drops = sum(ln.drop_buffer for ln in fab.links())
    return {
        "failed": a.failed,
        "packets_sent": s.packets_sent,
        "resends": s.retransmissions,
        "resend_fraction": s.retransmissions / max(1, s.packets_sent),
        "tail_drops": drops,
        "drops_first_100ms": sum(1 for t in drop_times if t < 0.1),
        "drops_by_second": [sum(1 for t in drop_times if i <= t < i + 1)
                            for i in range(int(duration + 0.999))],
        "lost_by_ev_order": s.lost_by_ev_order,
        "lost_by_time": s.lost_by_time,
        "lost_by_rto": s.lost_by_rto,
        "spurious_losses": s.spurious_losses,
        "tlp_probes": s.tlp_probes,
        "first_at_speed": first * BIN,
        "bins_at_speed": at_speed,
        "worst_bin": min(speed) / rate_bin if speed else 0.0,
        "bins": len(speed),
        "deep_cuts": cuts,
        "cwnd_median": median,
        "cwnd_min": min(settled) if settled else 0.0,
        "plane_shares": [x / total for x in plane_bytes],
        "cc": a.conn.cc.stats(),
    }


def scenario_taildrop_jitter(*, planes: int = 1, jitter: float = 3e-3,
                             buffer: int = 128 << 10, duration: float = 3.0,
                             seed: int = 1, **cfg: Any) -> dict[str, Any]:
    """One stream over ``planes`` tail-drop planes, 0-``jitter`` s of host delay."""
    fab = taildrop_fabric(planes=planes, buffer=buffer, jitter=(jitter,), seed=seed)
    return run_stream(fab, duration=duration, seed=seed, **cfg)


def scenario_taildrop_planes(*, jitter: tuple[float, float] = (0.5e-3, 3e-3),
                             buffer: int = 128 << 10, duration: float = 3.0,
                             seed: int = 1, **cfg: Any) -> dict[str, Any]:
    """Two equal tail-drop planes, host delay 0-``jitter[p]`` s on plane ``p``."""
    fab = taildrop_fabric(planes=2, buffer=buffer, jitter=jitter, seed=seed)
    return run_stream(fab, duration=duration, seed=seed, **cfg)


__all__ = ["run_stream", "scenario_taildrop_jitter", "scenario_taildrop_planes",
           "taildrop_fabric"]
