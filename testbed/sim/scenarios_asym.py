"""Asymmetric planes (issue 13): one connection over two unequal planes.

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
