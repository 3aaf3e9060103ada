"""Congestion-control scenarios: the worst cases of NSCC on a
software-host fabric, each with a one-message-at-a-time and a pipelined client.

- ``scenario_jitter``: 0-3 ms of per-packet delay jitter, no loss, no queue:
  delay noise must not look like congestion (no QuickAdapt, no empty 10 ms bin).
- ``scenario_taildrop``: 100 Mbit/s planes whose bottleneck port tail-drops
  (no ECN, no trimming: a tbf): loss must bring the window down.
- ``scenario_app_limited``: a sender that offers less than the fabric carries,
  with random (non-congestive) loss: QuickAdapt must not measure the
  application and call it the network.

The connection is configured as the daemon configures it on a host
(``transport.config.PROFILES["host"]``: 2 ms delay target, 1 ms RTT
guess, 40 ms minimum RTO), with the plane rate the testbed hands it.
Shared by tests/unit/test_scenarios.py and ``braid bench sim``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from testbed import topology
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
from transport.config import profile_values
from transport.events import Event, MessageAcked, MessageDelivered

Client = Literal["serial", "pipelined", "paced"]
#: Rate of one testbed plane (100 Mbit/s, examples/*.toml), bytes/s.
PLANE_RATE = 12.5e6
BIN = 10e-3


def testbed_fabric(*, planes: int = 2, rate: float = PLANE_RATE, delay: float = 50e-6,
                   jitter: float = 0.0, buffer: int = 256 << 10, nic_rate: float | None = None,
                   loss: float = 0.0, senders: int = 1, seed: int = 1) -> Fabric:
    """``planes`` x ``rate`` planes, one switch each (1 spine), tail drop everywhere
    (no ECN, no trimming: what tbf does). ``jitter`` delays each packet the sender
    ``a`` sends by [0, jitter) s, in order (a busy event loop: the RTT varies
    by up to ``jitter``); ``nic_rate`` makes
    the host links faster than the plane (the bottleneck is then the switch
    port towards the receiver)."""
    up = LinkSpec(rate=nic_rate or rate, delay=delay, buffer=4 << 20)
    sp = LinkSpec(rate=rate, delay=delay, buffer=buffer, loss=loss)
    dn = LinkSpec(rate=rate, delay=delay, buffer=buffer)
    hosts = ("a",) if senders == 1 else tuple(f"a{i}" for i in range(senders))
    fab = make_fabric(planes=planes, spines=1, rate=rate, uplink=up, spine=sp, downlink=dn,
                      seed=seed, hosts=(*hosts, "b"))
    if jitter:
        for h in hosts:
            for p in range(planes):
                fab.link("uplink", h, p).jitter = jitter
    return fab


def host_config(fab: Fabric, *, plane_rate: float, seed: int = 1, **kw: Any) -> Any:
    """The daemon's connection config on this fabric, ``plane_rate`` as handed over."""
    base = profile_values("host")
    base.update({"plane_rate": plane_rate, "seed": seed})
    base.update(kw)
    return default_config(fab, **base)


def feed(sim: Simulator, senders: list[Peer], payload: bytes, end: float, *,
         on_ack: bool = True) -> Callable[[Peer], None]:
    """``submit(peer)``: queue ``payload`` on ``peer``'s connection (until
    ``end``, and while it has not failed). With ``on_ack`` each sender also
    submits another copy whenever one of its messages is acknowledged, so
    what it was given stays queued (a pipelined client)."""

    def submit(a: Peer) -> None:
        if sim.now < end and a.failed is None:
            a.conn.send_message(payload)
            sim.wake(a)

    def on_event(peer: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked):
            submit(peer)

    if on_ack:
        for a in senders:
            a.on_event = on_event
    return submit


def run_client(fab: Fabric, config: Any, *, client: Client, msg_size: int = 64 << 10,
               duration: float = 2.0, depth: int = 64, offered: float | None = None,
               warmup: float = 0.1,
               setup: Callable[[Simulator, float], None] | None = None) -> dict[str, Any]:
    """Run one client per sender host (every host but the fabric's last) towards
    the last host for ``duration`` virtual seconds, and measure them.

    ``serial``: the next message is submitted when the previous one is
    acknowledged (``braid.connect().send()`` in a loop). ``pipelined``:
    ``depth`` messages always queued. ``paced``: one message every
    msg_size/``offered`` seconds, whatever happens (an application producing
    at a fixed rate). Figures are over [start + warmup, end]; per-sender
    figures are the worst sender's. ``setup(sim, start)`` schedules faults.
    """
    sim = Simulator(fab)
    *srcs, dst = fab.hosts
    pairs = [connect_pair(sim, src, dst, config=replace(config, seed=config.seed + i),
                          cids=(10 + i, 100 + i)) for i, src in enumerate(srcs)]
    for _, b in pairs:
        b.keep_data = False
    _establish(sim, *[p for pair in pairs for p in pair], limit=0.5)
    payload = bytes(msg_size)
    t0 = sim.now
    end = t0 + duration
    if setup is not None:
        setup(sim, t0)
    submit = feed(sim, [a for a, _ in pairs], payload, end, on_ack=client != "paced")
    for a, _ in pairs:
        if client == "paced":
            assert offered is not None and offered > 0
            gap = msg_size / offered
            for i in range(int(duration / gap)):
                sim.at(t0 + i * gap, lambda a=a: submit(a))  # type: ignore[misc]
        else:
            for _ in range(1 if client == "serial" else depth):
                submit(a)

    # Per sender: (cwnd, srtt, min_rtt) every millisecond.
    samples: list[list[tuple[float, float, float]]] = [[] for _ in pairs]

    def sample() -> None:
        for (a, _), out in zip(pairs, samples, strict=True):
            r = a.conn.sender.rtt
            out.append((float(a.conn.cc.cwnd), r.srtt, r.min_rtt))
        if sim.now + 1e-3 < end:
            sim.at(sim.now + 1e-3, sample)

    sim.at(t0 + warmup, sample)
    sim.run(until=end, max_events=50_000_000)

    lo, hi = t0 + warmup, end
    times = sorted(t for _, b in pairs for t, _, _ in b.delivered if lo <= t <= hi)
    nbins = int((hi - lo) / BIN)
    hit = [False] * nbins
    for t in times:
        k = int((t - lo) / BIN)
        if k < nbins:
            hit[k] = True
    pts = [lo, *times, hi]
    gap_max = max(y - x for x, y in itertools.pairwise(pts))
    delivered = msg_size * len(times)
    cap = fab.aggregate_capacity(srcs[0], dst) * payload_fraction(config.payload_size)
    drops = sum(ln.drop_buffer for ln in fab.links())
    sent_pkts = sum(fab.link("uplink", h, p).enqueued for h in srcs for p in range(fab.planes))
    ctl = [a.conn.cc for a, _ in pairs]
    stats = [c.stats() for c in ctl]
    # The worst sender by srtt over (2 x its minimum + target).
    worst = max(range(len(pairs)), key=lambda i: statistics.fmean(
        s for _, s, _ in samples[i]) / (2 * min(m for _, _, m in samples[i])
                                         + ctl[i].target_delay))
    ws = samples[worst]
    srtt_mean = statistics.fmean(s for _, s, _ in ws)
    min_rtt = min(m for _, _, m in ws)
    cwnds = [w for out in samples for w, _, _ in out]
    return {
        "client": client,
        "senders": len(pairs),
        "failed": [a.failed for a, _ in pairs if a.failed],
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
        "srtt_max": max(s for _, s, _ in ws),
        "min_rtt": min_rtt,
        "target_delay": ctl[worst].target_delay,
        "srtt_limit": 2 * min_rtt + ctl[worst].target_delay,
        "cwnd_min": min(cwnds),
        "cwnd_median": statistics.median(cwnds),
        "max_window": stats[0].get("max_window", float("nan")),
        "quick_adapt": sum(st.get("quick_adapt", 0.0) for st in stats),
        "quick_adapt_app_limited": sum(st.get("quick_adapt_app_limited", 0.0) for st in stats),
        "md": sum(st.get("md", 0.0) for st in stats),
        "random_bytes": sum(st.get("random_bytes", 0.0) for st in stats),
        "mark_revoked_random": sum(st.get("mark_revoked_random", 0.0) for st in stats),
        "rtos": sum(a.conn.sender.rto_events for a, _ in pairs),
        "retransmissions": sum(a.conn.sender.retransmissions for a, _ in pairs),
        "messages": sum(a.acked_msgs for a, _ in pairs),
    }


def scenario_jitter(*, client: Client = "pipelined", jitter: float = 3e-3,
                    duration: float = 2.0, seed: int = 21) -> dict[str, Any]:
    """0-``jitter`` s of delay on every packet the sender sends, no loss, no queue."""
    fab = testbed_fabric(jitter=jitter, seed=seed)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    return run_client(fab, cfg, client=client, duration=duration)


#: The tail-drop testbed: 100 Mbit/s planes behind 1 Gbit/s host NICs, 256 KB
#: tail-drop buffers, no ECN, no trimming (what tbf gives).
TAILDROP_TOPOLOGY: dict[str, Any] = {
    "hosts": 2, "planes": 2,
    "link": {"rate": "100mbit", "buffer": "256KB", "host": {"up": {"rate": "1gbit"}}},
}


def scenario_taildrop(*, client: Client = "pipelined", plane_rate: float | None = None,
                      senders: int = 1, buffer: int | None = None, duration: float = 2.0,
                      loss_as_mark: bool = True, seed: int = 22) -> dict[str, Any]:
    """``senders`` hosts to one receiver over ``TAILDROP_TOPOLOGY``: the planes'
    switch ports are the bottleneck and tail-drop. ``plane_rate`` is what the
    connection is told; by default what the testbed hands the daemon
    (testbed.topology.connection_plane_rate); the daemon's default, 1.25e9 B/s,
    is 100x too high here. ``loss_as_mark`` False turns off
    Braid's deviation from UEC (docs/congestion.md) for comparison."""
    topo = topology.load(TAILDROP_TOPOLOGY)
    rate = topology.plane_bottleneck_rate(topo, 0)
    host = topo.links[0]
    assert rate is not None
    fab = testbed_fabric(rate=rate, nic_rate=host.up.rate_bps / 8,
                         buffer=host.down.buffer if buffer is None else buffer,
                         planes=topo.planes, senders=senders, seed=seed)
    told = topology.connection_plane_rate(topo) if plane_rate is None else plane_rate
    assert told is not None
    cfg = host_config(fab, plane_rate=told, seed=seed)
    cfg = replace(cfg, congestion_params={**cfg.congestion_params, "loss_as_mark": loss_as_mark})
    return run_client(fab, cfg, client=client, duration=duration)


def scenario_busy_compound(*, client: Client = "pipelined", jitter: float = 3e-3,
                           loss: float = 0.3, die_at: float = 0.5, duration: float = 1.2,
                           loss_as_mark: bool = True, seed: int = 1) -> dict[str, Any]:
    """The claims row's compound fault on a busy host, in virtual time: the
    claims fabric (``claims_fabric``), every host's sends late by up to
    ``jitter``; at ``die_at`` s plane 0 dies and plane 1 loses ``loss`` of
    the data one way (the receiver's last hop). The stream has seen no ECN
    mark or trim (it never filled a fabric queue): losses come in every RTT
    from the fault on, so no loss-free RTT says what delay the path carries,
    and a random loss with a queue behind it is judged a tail-drop overflow:
    deviation 1 turns delay into the mark (docs/congestion.md), and the
    host's delay, up to 3 ms against the 2 ms target, cuts the window every
    RTT. The loss classifier finds the path losing at random when the
    losses go on through ``UNSTOPPED_RTTS`` RTTs of those cuts
    (transport/loss_policy.py): delay stands down, its cuts are given back,
    and the losses are no longer heard as congestion. A window that
    collapses in fewer RTTs than that (seeds 8 and 9) still stalls; the
    figures for seeds 1-12 are in docs/benchmarks.md."""
    fab = claims_fabric(("a", "b"), seed=seed, jitter=jitter)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    cfg = replace(cfg, congestion_params={**cfg.congestion_params, "loss_as_mark": loss_as_mark})

    def setup(sim: Simulator, t0: float) -> None:
        def die() -> None:
            fab.set_plane_down(0, True)
            fab.link("downlink", "b", 1).gray_loss = loss

        sim.at(t0 + die_at, die)

    return run_client(fab, cfg, client=client, duration=duration, depth=16, setup=setup)


#: When the serial app-limited client's fabric goes dark (s after the start).
OUTAGE_TIMES = (0.5, 1.0, 1.5)


def scenario_app_limited(*, client: Client = "paced", loss: float = 0.01,
                         offered_fraction: float = 0.4, duration: float = 2.0,
                         msg_size: int = 16 << 10, outage: float | None = None,
                         seed: int = 23) -> dict[str, Any]:
    """The application offers ``offered_fraction`` of capacity (paced) or one
    message at a time (serial); ``loss`` random loss on the planes' switch
    ports (not congestion). Every timeout asks QuickAdapt; an
    application-limited window must stay.

    ``outage``: at each of ``OUTAGE_TIMES`` every plane's switch ports drop
    everything for this long (all spines rebooting at once), so the tail-loss
    probes are lost too and the RTO fires and asks QuickAdapt (random loss
    alone does not: the probes repair it). Default 0.1 s for the serial
    client, whose window never binds, so every such request must be skipped;
    none for the paced one, whose queue fills during an outage until the
    window does bind (QuickAdapt may then act: the sender is not
    application-limited)."""
    fab = testbed_fabric(loss=loss, seed=seed)
    cfg = host_config(fab, plane_rate=PLANE_RATE, seed=seed)
    cap = fab.aggregate_capacity("a", "b") * payload_fraction(cfg.payload_size)
    dark = (0.1 if client == "serial" else 0.0) if outage is None else outage

    def setup(sim: Simulator, t0: float) -> None:
        ports = [ln for ln in fab.links() if ln.name.startswith("spine")]

        def turn(down: bool) -> None:
            for ln in ports:
                ln.down = down

        for t in OUTAGE_TIMES:
            if t < duration:
                sim.at(t0 + t, lambda: turn(True))
                sim.at(t0 + t + dark, lambda: turn(False))

    return run_client(fab, cfg, client=client, duration=duration, msg_size=msg_size,
                      offered=offered_fraction * cap if client == "paced" else None,
                      setup=setup if dark > 0 else None)


def claims_fabric(hosts: tuple[str, ...], *, plane_rate: float = PLANE_RATE, seed: int = 24,
                  jitter: float = 0.0, trim: bool = True, planes: int = 2) -> Fabric:
    """The claims bench's fabric in virtual time: ``planes`` x 2 spines at
    ``plane_rate``, 256 KB buffers, spine ports marking ECN above 16 KB, last
    hops trimming above 32 KB (``trim`` False: tail drop); ``jitter``: every
    host's sends late by [0, jitter) s (a busy event loop)."""
    up = LinkSpec(rate=plane_rate, delay=5e-6, buffer=256 << 10)
    sp = LinkSpec(rate=plane_rate, delay=5e-6, buffer=256 << 10, ecn_threshold=16 << 10)
    dn = LinkSpec(rate=plane_rate, delay=5e-6, buffer=256 << 10,
                  trim_threshold=(32 << 10) if trim else None)
    fab = make_fabric(planes=planes, spines=2, rate=plane_rate, uplink=up, spine=sp,
                      downlink=dn, seed=seed, hosts=hosts)
    if jitter:
        for h in hosts:
            for p in range(planes):
                fab.link("uplink", h, p).jitter = jitter
    return fab


def scenario_incast_bursts(*, senders: int = 8, size: int = 256 << 10, bursts: int = 12,
                           turnaround: float = 1e-3, trim: bool = True, seed: int = 24,
                           jitter: float = 0.0, victim: bool = False,
                           plane_rate: float = PLANE_RATE,
                           **cfg_kw: Any) -> dict[str, Any]:
    """The claims bench's incast row in virtual time: ``senders`` hosts send
    ``size`` bytes each to one receiver in synchronised bursts; the receiver
    releases the next burst ``turnaround`` s after it holds the whole burst
    (the release's flight and the application's reaction). Two 100 Mbit/s
    planes of 2 spines, the claims fabric's ports: last hop trims above 32 KB
    (``trim`` False: tail drop at 256 KB), spine ports mark ECN above 16 KB.
    Connections as the daemon configures them (``cfg_kw`` overrides).
    ``jitter``: every host's sends are delayed by [0, jitter) s, in order (a
    busy event loop, as in ``scenario_jitter``; the receiver's SACKs and NACKs too).
    Each burst's completion is measured from its release to the receiver
    holding all of it, against N x size at both planes' payload rate.

    ``victim``: host ``v`` also runs a pipelined stream of 64 KiB messages
    into ``r`` from the first release to the last burst's end, through the
    same spine ports and last hop as the incast; ``victim_ratio`` is its
    goodput over its goodput alone (``victim=True, senders=0``-like run:
    the same fabric, seed and span, no incast), ``victim_fair`` what a
    fair share of the last hop would give it (alone between bursts, 1/(N+1)
    during them)."""
    hosts = (*(f"a{i}" for i in range(senders)), *(("v",) if victim else ()), "r")
    fab = claims_fabric(hosts, plane_rate=plane_rate, seed=seed, jitter=jitter, trim=trim)
    cfg = host_config(fab, plane_rate=plane_rate, seed=seed, **cfg_kw)
    sim = Simulator(fab)
    pairs = [connect_pair(sim, f"a{i}", "r", config=replace(cfg, seed=seed * 100 + i),
                          cids=(10 + i, 100 + i)) for i in range(senders)]
    for _, b in pairs:
        b.keep_data = False
    vpair: tuple[Peer, Peer] | None = None
    if victim:
        vpair = connect_pair(sim, "v", "r", config=replace(cfg, seed=seed * 100 + 99),
                             cids=(90, 190))
        vpair[1].keep_data = False
    _establish(sim, *[p for pair in pairs for p in pair], *(vpair or ()), limit=0.5)
    payload = bytes(size)
    releases: list[float] = []
    ends: list[float] = []
    firsts: list[float] = []
    got = [0] * senders

    def release() -> None:
        releases.append(sim.now)
        for i, (a, _) in enumerate(pairs):
            got[i] = 0
            a.conn.send_message(payload)
            sim.wake(a)

    def on_delivered(peer: Peer, ev: Event, now: float) -> None:
        if not isinstance(ev, MessageDelivered):
            return
        got[[b for _, b in pairs].index(peer)] += 1
        if len(firsts) < len(releases):
            firsts.append(now)  # the first sender's message of this burst is whole
        if all(got) and len(ends) < len(releases):
            ends.append(now)
            if len(releases) < bursts:
                sim.at(now + turnaround, release)

    for _, b in pairs:
        b.on_event = on_delivered
    trims_at: list[float] = []  # trim times, seconds after the burst's release

    def trace(kind: str, now: float, *_: Any) -> None:
        if kind == "trimmed" and releases:
            trims_at.append(now - releases[-1])

    sim.trace = trace
    if vpair is not None:
        _victim_stream(sim, vpair[0], sim.now + 1e-3, lambda: len(ends) < bursts)
    sim.at(sim.now + 1e-3, release)
    sim.run(until=sim.now + 2.0 * bursts, done=lambda: len(ends) >= bursts,
            max_events=50_000_000)
    ideal = senders * size / (2 * plane_rate * payload_fraction(cfg.payload_size))
    ratios = [(e - r) / ideal for r, e in zip(releases, ends, strict=False)]
    snd = [a.conn.sender for a, _ in pairs]
    vic: dict[str, Any] = {}
    if vpair is not None and ends:
        t0, t1 = releases[0], ends[-1]
        got_v = sum(64 << 10 for t, _, _ in vpair[1].delivered if t0 <= t <= t1)
        rate_v = got_v / (t1 - t0)
        alone = _victim_alone(cfg, jitter=jitter, trim=trim, seed=seed, span=t1 - t0,
                              plane_rate=plane_rate)
        busy = sum(e - r for r, e in zip(releases, ends, strict=False))
        vic = {"victim_goodput": rate_v, "victim_alone": alone,
               "victim_capacity": 2 * plane_rate * payload_fraction(cfg.payload_size),
               "victim_ratio": rate_v / alone if alone else math.nan,
               "victim_fair": ((t1 - t0 - busy) + busy / (senders + 1)) / (t1 - t0),
               "victim_md": vpair[0].conn.cc.stats().get("md", 0.0),
               "victim_delay_is_mark": vpair[0].conn.cc.stats().get("delay_is_mark", 0.0)}
    return {
        **vic,
        "bursts": len(ends),
        "failed": [a.failed for a, _ in pairs if a.failed],
        "ideal": ideal,
        "ratios": ratios,
        "p50": statistics.median(ratios) if ratios else math.inf,
        "p100": max(ratios, default=math.inf),
        "rtos": sum(s.rto_events for s in snd),
        "quick_adapts": sum(a.conn.cc.stats().get("quick_adapt", 0.0) for a, _ in pairs),
        "qa_undone": sum(a.conn.cc.stats().get("qa_undone", 0.0) for a, _ in pairs),
        "spurious_losses": sum(s.spurious_losses for s in snd),
        "mds": sum(a.conn.cc.stats().get("md", 0.0) for a, _ in pairs),
        "nacks": sum(s.nacks for s in snd),
        "retransmissions": sum(s.retransmissions for s in snd),
        "trims": sum(ln.trimmed for ln in fab.links()),
        "marks": sum(ln.marked for ln in fab.links()),
        "drops": sum(ln.drop_buffer for ln in fab.links()),
        "first_done": [(f - r) / ideal for r, f in zip(releases, firsts, strict=False)],
        "trims_first_10ms": sum(1 for t in trims_at if t < 10e-3),
        "trims_last_half": sum(1 for t in trims_at if t > ideal / 2),
    }


def _victim_stream(sim: Simulator, va: Peer, start: float, going: Callable[[], bool]) -> None:
    """The incast victim's stream: 64 KiB messages from ``start``, 64 in flight
    (one more each time one is acknowledged), while ``going()``."""
    vmsg = bytes(64 << 10)

    def vsubmit(peer: Peer, ev: Event | None = None, now: float = 0.0) -> None:
        if (ev is None or isinstance(ev, MessageAcked)) and va.failed is None and going():
            va.conn.send_message(vmsg)
            sim.wake(va)

    def vstart() -> None:
        for _ in range(64):
            vsubmit(va)

    va.on_event = vsubmit
    sim.at(start, vstart)


def _victim_alone(cfg: Any, *, jitter: float, trim: bool, seed: int, span: float,
                  plane_rate: float = PLANE_RATE) -> float:
    """``scenario_incast_bursts``' victim stream with no incast: its goodput
    over ``span`` s on the same fabric (bytes/s)."""
    fab = claims_fabric(("v", "r"), plane_rate=plane_rate, seed=seed, jitter=jitter, trim=trim)
    sim = Simulator(fab)
    va, vb = connect_pair(sim, "v", "r", config=replace(cfg, seed=seed * 100 + 99),
                          cids=(90, 190))
    vb.keep_data = False
    _establish(sim, va, vb, limit=0.5)
    t0 = sim.now + 1e-3
    end = t0 + span
    _victim_stream(sim, va, t0, lambda: sim.now < end)
    sim.run(until=end, max_events=50_000_000)
    got = sum(64 << 10 for t, _, _ in vb.delivered if t0 <= t <= end)
    return got / span
