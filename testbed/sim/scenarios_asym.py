"""Asymmetric planes: one connection over two unequal planes.

The claims bench's ``asymmetric`` row in virtual time, on a fabric shaped
like the claims testbed (100 Mbit/s planes, 256 KB buffers, ECN and trimming
on the fabric's ports towards the receiver, none on the host uplink, and
~0.5 ms of software-host latency per hop so the base RTT is a host's, not a
switch's):

- ``half_rate``: every plane-1 link at half rate. Capacity: 1.5 planes.
- ``latency``: plane 1's base RTT ``rtt_factor`` (4) times plane 0's.
  Capacity: 2 planes.

A transport that sprays evenly over planes caps the total at 2 x the slow
plane's rate (0.67 of capacity at half rate), or needs a window sized for the
slow plane's RTT on every plane. Goodput over the sum of plane capacities
should be >= 0.9, as MPTCP's per-subflow windows reach on the real testbed.
Shared by tests/unit/test_scenarios_asym.py and ``braid bench sim``.
"""

from __future__ import annotations

from typing import Any, Literal

from testbed.sim import scenarios as S
from testbed.sim.fabric import Fabric, LinkSpec
from testbed.sim.scenarios import make_fabric
from testbed.sim.scenarios_cc import PLANE_RATE, Client, host_config, run_client

Case = Literal["half_rate", "latency"]
#: Per-link delay standing in for a software host's latency (RTT ~2 ms).
HOP_DELAY = 0.5e-3


def asym_fabric(case: Case, *, rtt_factor: float = 4.0, jitter: float = 0.0,
                seed: int = 31) -> Fabric:
    up = LinkSpec(rate=PLANE_RATE, delay=HOP_DELAY, buffer=256 << 10)
    sp = LinkSpec(rate=PLANE_RATE, delay=HOP_DELAY, buffer=256 << 10,
                  ecn_threshold=16 << 10, trim_threshold=32 << 10)
    dn = LinkSpec(rate=PLANE_RATE, delay=HOP_DELAY, buffer=256 << 10,
                  trim_threshold=32 << 10)
    fab = make_fabric(planes=2, spines=2, rate=PLANE_RATE, uplink=up, spine=sp, downlink=dn,
                      seed=seed)
    if jitter:
        # A busy host: every packet the sender sends waits [0, jitter) s.
        for p in range(fab.planes):
            fab.link("uplink", "a", p).jitter = jitter
    if case == "half_rate":
        for ln in fab.links(1):
            ln.rate = PLANE_RATE / 2
    else:
        # Every plane-1 element gets the same extra delay, so that plane 1's
        # idle RTT is rtt_factor x plane 0's (both directions cross 3 elements).
        base = fab.base_rtt("a", "b", plane=0, size=1500, ack_size=120)
        extra = (rtt_factor - 1) * base / 6
        for ln in fab.links(1):
            ln.delay += extra
    return fab


def scenario_asymmetric(*, case: Case = "half_rate", client: Client = "pipelined",
                        duration: float = 1.0, rtt_factor: float = 4.0,
                        jitter: float = 0.0, seed: int = 31) -> dict[str, Any]:
    """One sender, one receiver, two unequal planes; the connection is
    configured as the daemon configures it (told the nominal plane rate)."""
    fab = asym_fabric(case, rtt_factor=rtt_factor, jitter=jitter, seed=seed)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    r = run_client(fab, cfg, client=client, duration=duration, warmup=0.2)
    r["case"] = case
    r["plane_rtt"] = [fab.base_rtt("a", "b", plane=p, size=1500, ack_size=120)
                      for p in range(fab.planes)]
    return r


def scenario_gray_heal(*, loss: float = 0.5, gray_from: float = 0.05, gray_to: float = 0.2,
                       size: int = 24 << 20, seed: int = 9) -> dict[str, Any]:
    """A host uplink of plane 0 loses ``loss`` of what it carries from
    ``gray_from`` to ``gray_to`` s, then heals (4 planes of 2 spines at
    100 Mbit/s). The plane shares must cap the gray plane while it loses and
    give it its even share back once it heals: counted per update interval, a
    capped plane's loss fraction stopped being sampled, and the cap outlived
    the fault (``braid demo``: 11% of the packets on the healed plane for the
    rest of the transfer). Returns plane 0's weight over time (10 ms steps)
    and the share of packets it carried in each period."""
    weights: list[tuple[float, float]] = []
    sent0: list[tuple[float, int, int]] = []

    def setup(sim: Any, fab: Fabric, a: Any, b: Any) -> None:
        t0 = sim.now
        up = fab.link("uplink", "a", 0)

        def gray(on: bool) -> None:
            up.loss = loss if on else 0.0

        sim.at(t0 + gray_from, lambda: gray(True))
        sim.at(t0 + gray_to, lambda: gray(False))

        def sample() -> None:
            shares = a.conn.paths.shares
            weights.append((sim.now - t0, shares.weight[0]))
            evs = a.conn.paths.evs
            sent0.append((sim.now - t0, sum(e.sent for e in evs if e.plane == 0),
                          sum(e.sent for e in evs)))
            if sim.now - t0 < 5.0:
                sim.at(sim.now + 10e-3, sample)

        sim.at(t0, sample)

    r = S.run_transfer(size=size, seed=seed, setup=setup, until=10.0,
                       fabric_kw={"spines": 2, "rate": PLANE_RATE, "delay": 100e-6})

    def share(lo: float, hi: float) -> float:
        pts = [(s0, s) for t, s0, s in sent0 if lo <= t <= hi]
        if len(pts) < 2:
            return float("nan")
        d0, d = pts[-1][0] - pts[0][0], pts[-1][1] - pts[0][1]
        return d0 / d if d else float("nan")

    end = r["end"] - r["start"]
    r["plane0_weight"] = weights
    r["plane0_share"] = {"before": share(0.0, gray_from), "gray": share(gray_from + 0.05, gray_to),
                         "after": share(gray_to + 0.15, end)}
    r["healed_after"] = next((t - gray_to for t, w in weights if t > gray_to and w == 1.0),
                             None)
    return r
