"""The soak's connection failures in virtual time: a peer that goes silent
(its daemon restarting) while one plane is slow (a rate cut's queue).

``scenario_peer_gone``: ``a`` sends 64 KiB messages to ``b`` over 4 planes
with the daemon's connection config; from ``slow_at`` plane 3's uplink of
``a`` runs at 1/``cut`` of its rate with a deep buffer (the testbed's
``link h0:p3 rate 10mbit``: seconds of queue), and at ``gone_at`` every plane
goes dark (``b``'s daemon stopped; ``peer_alive`` True: only plane 2 goes
down instead, two planes of four touched, as the soak allows).

What it shows: with the peer gone, the silent planes with a short RTT park
within a few RTTs, and with every plane parked no RTO fires: the
``idle_fail_timeout`` (5 s) ends the connection, "no acknowledgement for 5 s
(parked planes: [0, 1, 2, 3])". A plane whose own answers came seconds late
waits ``PLANE_SILENCE_RTTS`` of *its* RTT before it counts as silent, so it
stays up, the RTO keeps firing on what is sent there, and the retry budget
(``max_rto_retries`` 10: 11 timeouts, 40 ms doubling to the 0.5 s cap,
~4.1 s) ends it first: "retry budget spent: 11 consecutive timeouts without
progress for 4.1 s (... parked planes: [0, 1, 2])". Either way the cause is
the peer's silence; with the peer alive a plane cut to 1/20 (seconds of
queue) and a dead one cost no failure.

With the peer alive, a plane cut to 1/100 behind a 4 MiB buffer
(``cut=100, peer_alive=True``: 1.8 MB queued at 12.5 kB/s, over two minutes)
once spent the retry budget (seeds 2 and 4, parked planes [2]): the RTO at
the plane-down left a window of one packet, and each of the 11 resends went
to the slow plane, which answered all the time (so it looked alive) but
each answer for a packet sent seconds before; planes 0 and 1, healthy,
carried nothing for 4 s. A resend now ranks planes by *timely* answers
(``PathHealth._life``): the slow plane's rank is the lowest, the resends go
to the healthy planes, no RTO fires and ~220 messages are acknowledged in
the 7 s after the plane-down (seeds 2-4).
"""

from __future__ import annotations

from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.scenarios import _establish, connect_pair
from testbed.sim.scenarios_cc import claims_fabric, feed, host_config

RATE = 1.25e6


def scenario_peer_gone(*, seed: int = 2, cut: float = 100.0, buffer: int = 4 << 20,
                       slow_at: float = 0.2,
                       gone_at: float = 3.0, peer_alive: bool = False,
                       after: float = 7.0, **config: Any) -> dict[str, Any]:
    """``config``: connection settings over the daemon's (``host_config``)."""
    fab = claims_fabric(("a", "b"), plane_rate=RATE, seed=seed, jitter=1e-3, planes=4)
    sim = Simulator(fab)
    cfg = host_config(fab, plane_rate=RATE, seed=seed, **config)
    a, b = connect_pair(sim, "a", "b", config=cfg, cids=(1, 2))
    a.keep_data = b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    t0 = sim.now
    submit = feed(sim, [a], bytes(64 << 10), t0 + gone_at + after)
    for _ in range(8):
        submit(a)
    slow = fab.link("uplink", "a", 3)

    def slow_down() -> None:
        slow.rate = RATE / cut
        slow.buffer = buffer

    def dark() -> None:
        for p in (2,) if peer_alive else range(4):
            fab.set_plane_down(p, True)

    failed_at: list[float] = []

    def watch() -> None:
        if a.failed is not None:
            failed_at.append(sim.now - t0)
        elif sim.now < t0 + gone_at + after:
            sim.at(sim.now + 0.01, watch)

    sim.at(t0 + slow_at, slow_down)
    sim.at(t0 + gone_at, dark)
    sim.at(t0, watch)
    acked_before = [0]
    sim.at(t0 + gone_at, lambda: acked_before.__setitem__(0, a.acked_msgs))
    sim.run(until=t0 + gone_at + after, max_events=20_000_000)
    s = a.conn.sender
    return {
        "failed": a.failed,
        "failed_after_gone": failed_at[0] - gone_at if failed_at else None,
        "rto_events": s.rto_events,
        "parked": a.conn.paths.parked_planes(),
        "slow_plane_srtt": a.conn.paths.ev_set.model.answer_srtt.get(3),
        "srtt": s.rtt.srtt,
        "acked_after_gone": a.acked_msgs - acked_before[0],
    }
