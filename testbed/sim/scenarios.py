"""Braid connections in the simulated fabric: pairs, transfers, measurements.

Shared by the scenario tests (tests/unit/test_scenarios.py) and
``braid bench sim``, so the numbers in docs/benchmarks.md come from exactly
what CI asserts on.
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric, FabricSpec, LinkSpec
from transport.config import ConnectionConfig, profile_values
from transport.connection import Connection
from transport.datagram import RxInfo, TxPath
from transport.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    Event,
    EvStateChanged,
    MessageAcked,
    MessageDelivered,
)
from transport.host_share import HostShare
from wire.codec import HandshakeCodec
from wire.packets import Init

SECRET = bytes(range(32))
#: Per simulator, each host's ``HostShare``: what its endpoint (one per
#: daemon) keeps for the connections it holds, here shared by the
#: connections ``connect_pair`` puts on that host.
_HOST_SHARES: weakref.WeakKeyDictionary[Simulator, dict[str, HostShare]] = (
    weakref.WeakKeyDictionary())
#: IPv6 + UDP bytes on the wire around every datagram.
OVERHEAD = 48


class Peer:
    """A connection plus what it reported (the sim's endpoint for it)."""

    def __init__(self, conn: Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self.delivered: list[tuple[float, int, bytes]] = []
        self.delivered_bytes = 0
        self.acked_bytes = 0
        self.acked_msgs = 0
        self.established_at: float | None = None
        self.failed: str | None = None
        self.closed: str | None = None
        self.ev_changes: list[tuple[float, EvStateChanged]] = []
        self.keep_data = True
        self.on_event: Callable[[Peer, Event, float], None] | None = None

    # Endpoint protocol ------------------------------------------------------------
    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        return self.conn.datagrams_to_send(now)

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None:
        # The receive fast path, as the real endpoint uses it for DATA (it
        # hands anything else to ``receive_datagram`` itself).
        self.conn.receive_data(data, rx, now)
        self._drain(now)

    def handle_timer(self, now: float) -> None:
        self.conn.handle_timer(now)
        self._drain(now)

    def next_timer(self) -> float | None:
        return self.conn.next_timer()

    def _drain(self, now: float) -> None:
        while (ev := self.conn.next_event()) is not None:
            if isinstance(ev, MessageDelivered):
                self.delivered_bytes += len(ev.data)
                self.delivered.append((now, ev.msg_id, ev.data if self.keep_data else b""))
            elif isinstance(ev, MessageAcked):
                self.acked_bytes += ev.size
                self.acked_msgs += 1
            elif isinstance(ev, ConnectionEstablished):
                self.established_at = now
            elif isinstance(ev, ConnectionFailed):
                self.failed = ev.reason
            elif isinstance(ev, ConnectionClosed):
                self.closed = ev.reason
            elif isinstance(ev, EvStateChanged):
                self.ev_changes.append((now, ev))
            if self.on_event is not None:
                self.on_event(self, ev, now)


def connect_pair(
    sim: Simulator, a_host: str, b_host: str, *, config: ConnectionConfig,
    b_config: ConnectionConfig | None = None, cids: tuple[int, int] = (1, 2),
    secret: bytes | None = SECRET,
) -> tuple[Peer, Peer]:
    """An initiator on ``a_host`` and its responder on ``b_host``, attached to ``sim``.

    The responder is built from the initiator's real INIT datagram (the job
    an ``Endpoint`` does on a real host), then both run the real handshake.
    """
    now = sim.now
    a = Connection.initiate(config=config, secret=secret, local_cid=cids[0], now=now)
    first = a.datagrams_to_send(now)
    init = HandshakeCodec(secret).open_untrusted(first[0][0]).body
    assert isinstance(init, Init)
    b = Connection.accept(config=b_config or replace(config, seed=config.seed + 7919),
                          secret=secret, local_cid=cids[1], init=init, now=now)
    pa, pb = Peer(a, a_host), Peer(b, b_host)
    shares = _HOST_SHARES.setdefault(sim, {})
    for peer in (pa, pb):
        if peer.conn.config.host_share:
            peer.conn.host_share = shares.setdefault(peer.name, HostShare())
    sim.add_endpoint(a_host, pa, peer=b_host, conn_id=cids[0])
    sim.add_endpoint(b_host, pb, peer=a_host, conn_id=cids[1])
    return pa, pb


def make_fabric(*, planes: int = 4, spines: int = 4, rate: float = 1.25e9,
                delay: float = 5e-6, seed: int = 1, uplink: LinkSpec | None = None,
                spine: LinkSpec | None = None, downlink: LinkSpec | None = None,
                hosts: tuple[str, ...] = ("a", "b")) -> Fabric:
    """P planes of ``spines`` paths; by default every element runs at ``rate``
    bytes/s per plane (spine ports at rate/spines... no: at full rate each,
    so the host links are the bottleneck, as in a full-bisection fabric)."""
    up = uplink or LinkSpec(rate=rate, delay=delay, buffer=4 << 20)
    sp = spine or LinkSpec(rate=rate, delay=delay, buffer=1 << 20)
    dn = downlink or LinkSpec(rate=rate, delay=delay, buffer=1 << 20)
    return Fabric(FabricSpec(planes, spines, up, sp, dn, seed=seed, overhead=OVERHEAD), hosts)


#: Connection parameters applied to every scenario's connections (under the
#: scenario's own), e.g. ``{"spray_run": 8}`` from ``braid bench sim --spray-run``.
CONFIG_OVERRIDES: dict[str, Any] = {}


def default_config(fabric: Fabric, **kw: Any) -> ConnectionConfig:
    """A config sized to the fabric: plane rate and base RTT from its links."""
    a, b = fabric.hosts[0], fabric.hosts[1]
    rtt = fabric.base_rtt(a, b, size=1500, ack_size=120)
    rate = fabric.link("uplink", a, 0).rate
    base: dict[str, Any] = profile_values("fabric")
    base.update({
        "planes": fabric.planes, "initial_rtt": rtt,
        "plane_rate": rate, "min_rto": max(10 * rtt, 100e-6),
    })
    base.update(CONFIG_OVERRIDES)
    base.update(kw)
    return ConnectionConfig(**base)


@dataclass
class TransferResult:
    ok: bool
    bytes: int
    start: float
    end: float
    ideal: float
    capacity: float
    max_gap: float
    stats_a: dict[str, Any] = field(default_factory=dict)
    stats_b: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def goodput(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def efficiency(self) -> float:
        return self.goodput / self.capacity if self.capacity else 0.0


def pattern(n: int, seed: int = 0) -> bytes:
    """``n`` pseudo-random bytes (so misplacement is always detected)."""
    out = bytearray()
    block = 0
    key = seed.to_bytes(8, "big")
    while len(out) < n:
        out += hashlib.blake2b(block.to_bytes(8, "big"), key=key, digest_size=64).digest()
        block += 1
    return bytes(out[:n])


def max_delivery_gap(times: list[float], start: float, end: float) -> float:
    pts = [start, *sorted(times), end]
    return max((b - a for a, b in itertools.pairwise(pts)), default=0.0)


# -- scenarios a-j -----------------------------------------------------------------
# Each returns a plain dict of figures; tests assert on them, the bench prints them.

#: Bytes of header around each payload on the wire (IPv6+UDP, DATA header+tag, AEAD tag).
def payload_fraction(payload_size: int) -> float:
    return payload_size / (payload_size + OVERHEAD + 68 + 16)


def _send_all(sim: Simulator, a: Peer, data: bytes, msg_size: int) -> None:
    for i in range(0, len(data), msg_size):
        a.conn.send_message(data[i : i + msg_size])
    sim.wake(a)


def _reassemble(p: Peer) -> bytes:
    return b"".join(d for _, _, d in sorted(p.delivered, key=lambda x: x[1]))


def _establish(sim: Simulator, *peers: Peer, limit: float = 0.01) -> None:
    sim.run(until=sim.now + limit, done=lambda: all(
        p.established_at is not None or p.conn.is_established for p in peers))


def run_transfer(*, size: int = 64 << 20, msg_size: int = 1 << 20, loss: float = 0.0,
                 seed: int = 1, planes: int = 4, evs_per_plane: int = 16,
                 policy: str = "spray",
                 setup: Callable[[Simulator, Fabric, Peer, Peer], None] | None = None,
                 until: float = 5.0, fabric_kw: dict[str, Any] | None = None,
                 **cfg: Any) -> dict[str, Any]:
    """One bulk transfer a→b; scenarios (a) and (b), and the base of others.
    ``fabric_kw``: more ``make_fabric`` arguments (spines, rate, delay)."""
    fab = make_fabric(planes=planes, seed=seed, **(fabric_kw or {}))
    if loss:
        for ln in fab.links():
            if ln.name.startswith("spine"):
                ln.loss = loss
    sim = Simulator(fab)
    config = default_config(fab, evs_per_plane=evs_per_plane, path_policy=policy,
                            seed=seed, **cfg)
    a, b = connect_pair(sim, "a", "b", config=config)
    _establish(sim, a, b)
    data = pattern(size, seed)
    if setup is not None:
        setup(sim, fab, a, b)
    start = sim.now
    _send_all(sim, a, data, msg_size)
    sim.run(until=start + until, done=lambda: a.acked_bytes >= size or a.failed is not None,
            max_events=20_000_000)
    end = max((t for t, _, _ in b.delivered), default=sim.now)
    raw = fab.aggregate_capacity("a", "b") or 1.0
    cap = raw * payload_fraction(config.payload_size)
    secs = max(end - start, 1e-12)
    return {
        "ok": _reassemble(b) == data,
        "bytes": size,
        "seconds": secs,
        "goodput": size / secs if secs else 0.0,
        "capacity": cap,
        "goodput_over_capacity": size / secs / cap if secs else 0.0,
        "goodput_over_raw": size / secs / raw if secs else 0.0,
        "rtos": a.conn.sender.rto_events,
        "retransmissions": a.conn.sender.retransmissions,
        "nacks": a.conn.sender.nacks,
        "failed": a.failed,
        "ev_share_dev": ev_share_dev(a.conn.paths.evs),
        "a": a, "b": b, "sim": sim, "fabric": fab, "start": start, "end": end,
    }


def scenario_incast(*, senders: int = 8, size_each: int = 2 << 20, planes: int = 4,
                    seed: int = 3, msg_size: int = 256 << 10) -> dict[str, Any]:
    """(c) N-to-1 through last-hop ports that trim above a small queue."""
    rate, delay = 1.25e9, 5e-6
    hosts = (*(f"s{i}" for i in range(senders)), "r")
    dn = LinkSpec(rate=rate, delay=delay, buffer=1 << 20, trim_threshold=32 * 1024)
    fab = make_fabric(planes=planes, seed=seed, hosts=hosts, downlink=dn)
    sim = Simulator(fab)
    base = default_config(fab, seed=seed)
    pairs = []
    for i in range(senders):
        cfg = replace(base, seed=seed * 100 + i)
        a, b = connect_pair(sim, f"s{i}", "r", config=cfg, cids=(100 + i, 200 + i))
        pairs.append((a, b))
    _establish(sim, *[p for pair in pairs for p in pair])
    datas = [pattern(size_each, seed + i) for i in range(senders)]
    start = sim.now
    for (a, _), d in zip(pairs, datas, strict=True):
        _send_all(sim, a, d, msg_size)
    total = senders * size_each
    sim.run(until=start + 5.0, done=lambda: all(a.acked_bytes >= size_each for a, _ in pairs),
            max_events=20_000_000)
    end = max(t for _, b in pairs for t, _, _ in b.delivered)
    bottleneck = planes * rate * payload_fraction(base.payload_size)
    ideal = total / bottleneck
    senders_stats = [a.conn.sender for a, _ in pairs]
    return {
        "ok": all(_reassemble(b) == d for (_, b), d in zip(pairs, datas, strict=True)),
        "seconds": end - start,
        "ideal": ideal,
        "completion_over_ideal": (end - start) / ideal,
        "rtos": sum(s.rto_events for s in senders_stats),
        "lost_by_time": sum(s.lost_by_time for s in senders_stats),
        "lost_by_ev_order": sum(s.lost_by_ev_order for s in senders_stats),
        "nacks": sum(s.nacks for s in senders_stats),
        "retransmissions": sum(s.retransmissions for s in senders_stats),
        "trims_last_hop": sum(a.conn.trims_last_hop for a, _ in pairs),
        "trims_fabric": sum(a.conn.trims_fabric for a, _ in pairs),
        "failed": [a.failed for a, _ in pairs if a.failed],
    }


def scenario_plane_down(*, size: int = 32 << 20, msg_size: int = 64 << 10, seed: int = 4,
                        down_at: float = 2e-3, up_at: float = 8e-3) -> dict[str, Any]:
    """(d) Plane 1 of 4 dies silently mid-transfer, comes back later."""
    marks: dict[str, float] = {}

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        t0 = sim.now
        marks["down"] = t0 + down_at
        marks["up"] = t0 + up_at
        sim.at(t0 + down_at, lambda: fab.set_plane_down(1, True))

        def up() -> None:
            fab.set_plane_down(1, False)
            marks["plane1_at_up"] = fab.link("downlink", "b", 1).delivered

        sim.at(t0 + up_at, up)

    per_plane: dict[int, list[float]] = {}

    def trace(event: str, now: float, pkt: Any, link: Any, reason: str) -> None:
        if event == "delivered" and not pkt.control:
            per_plane.setdefault(pkt.plane, []).append(now)

    r = run_transfer(size=size, msg_size=msg_size, seed=seed, setup=setup)
    # A second run with a trace is costly; instead count plane-1 deliveries from
    # the fabric's link counters before and after.
    b: Peer = r["b"]
    a: Peer = r["a"]
    times = [t for t, _, _ in b.delivered]
    win = [t for t in times if marks["down"] - 1e-3 <= t <= marks["down"] + 3e-3]
    gap = max_delivery_gap(win, marks["down"] - 1e-3, min(marks["down"] + 3e-3, r["end"]))
    parked_at = next((t for t, ev in a.ev_changes
                      if ev.plane == 1 and ev.new == "assumed_bad" and t >= marks["down"]), None)
    restored_at = next((t for t, ev in a.ev_changes
                        if ev.plane == 1 and ev.new == "good" and t >= marks["up"]), None)
    fab: Fabric = r["fabric"]
    base_rtt = fab.base_rtt("a", "b", size=1500, ack_size=120)
    cfg = a.conn.config
    probe_interval = 4 * cfg.initial_rtt
    plane1_after = fab.link("downlink", "b", 1).delivered
    r.update({
        "max_gap": gap, "base_rtt": base_rtt, "probe_interval": probe_interval,
        "gap_limit": 3 * base_rtt + probe_interval,
        "parked_after": None if parked_at is None else parked_at - marks["down"],
        "restored_after": None if restored_at is None else restored_at - marks["up"],
        "plane1_delivered_after_up": plane1_after - marks["plane1_at_up"],
        "down_at": marks["down"], "up_at": marks["up"],
        "all_plane1_parked": all(
            ev.state.value != "good" for ev in a.conn.paths.evs if ev.plane == 1
        ) if restored_at is None else None,
    })
    return r


def ev_share_dev(evs: Sequence[Any]) -> float:
    """Largest relative deviation of one EV's packet count from the mean
    (0.2 = some EV carried 20% more or less than an even share)."""
    counts = [ev.sent for ev in evs]
    mean = sum(counts) / len(counts) if counts else 0.0
    return max(abs(c / mean - 1) for c in counts) if mean else 0.0


def _spine_share(fab: Fabric, plane: int, spine: int, dst: str) -> float:
    total = sum(ln.enqueued for ln in fab.links() if ln.name.startswith("spine"))
    return fab.link("spine", dst, plane, spine).enqueued / total if total else 0.0


def scenario_ecn_path(*, size: int = 16 << 20, seed: int = 5) -> dict[str, Any]:
    """(e) One spine path marks every packet with CE; its share should fall."""
    base = run_transfer(size=size, seed=seed)
    fab0: Fabric = base["fabric"]
    share0 = _spine_share(fab0, 0, 0, "b")

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        fab.link("spine", "b", 0, 0).ecn_threshold = -1

    marked = run_transfer(size=size, seed=seed, setup=setup)
    share1 = _spine_share(marked["fabric"], 0, 0, "b")
    return {"ok": base["ok"] and marked["ok"], "share_unmarked": share0,
            "share_marked": share1, "reduction": share0 / share1 if share1 else float("inf"),
            "goodput_over_capacity": marked["goodput_over_capacity"]}


def scenario_gray(*, size: int = 16 << 20, seed: int = 6, drop: float = 0.3) -> dict[str, Any]:
    """(f) One spine path silently drops 30% of what crosses it."""
    base = run_transfer(size=size, seed=seed)
    share0 = _spine_share(base["fabric"], 0, 0, "b")

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        fab.link("spine", "b", 0, 0).gray_loss = drop

    gray = run_transfer(size=size, seed=seed, setup=setup)
    share1 = _spine_share(gray["fabric"], 0, 0, "b")
    return {"ok": gray["ok"], "share_healthy": share0, "share_gray": share1,
            "reduction": share0 / share1 if share1 else float("inf"),
            "goodput_over_capacity": gray["goodput_over_capacity"],
            "retransmissions": gray["retransmissions"]}


def scenario_all_dead(*, seed: int = 7) -> dict[str, Any]:
    """(g) Every plane dies: the connection must fail with a reason, bounded."""
    marks: dict[str, float] = {}

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        marks["down"] = sim.now + 1e-3

        def kill() -> None:
            for p in range(fab.planes):
                fab.set_plane_down(p, True)

        sim.at(marks["down"], kill)

    r = run_transfer(size=64 << 20, seed=seed, setup=setup, until=10.0)
    a: Peer = r["a"]
    failed_at = r["sim"].now
    return {"failed": a.failed, "fail_after": failed_at - marks["down"],
            "state": a.conn.state.value}


def scenario_hostile(*, size: int = 8 << 20, seed: int = 8) -> dict[str, Any]:
    """(h) Forged, tampered, replayed, duplicated packets and forged trimmed
    headers injected mid-transfer, in both directions."""
    import random as _random

    from transport.datagram import RxInfo as _Rx
    from wire.constants import Dscp as _Dscp
    from wire.constants import trim_point as _trim_point

    rng = _random.Random(seed)
    # (capture time, datagram). Only datagrams captured REPLAY_AGE ago are
    # replayed: one still in flight would reach the peer first, an early
    # delivery (reordering within a path, which the EV-order loss rule reads
    # as loss and resends), not a replay.
    captured_ab: list[tuple[float, bytes]] = []
    captured_ba: list[tuple[float, bytes]] = []
    replay_age = 2e-4  # several RTTs of this fabric under load
    injected = {"to_b": 0, "to_a": 0}

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        a_peer: Peer = holder["a"]
        b_peer: Peer = holder["b"]
        orig_a, orig_b = a_peer.datagrams_to_send, b_peer.datagrams_to_send

        def tap_a(now: float) -> list[tuple[bytes, TxPath]]:
            out = orig_a(now)
            if out and len(captured_ab) < 200 and rng.random() < 0.05:
                captured_ab.append((now, out[0][0]))
            return out

        def tap_b(now: float) -> list[tuple[bytes, TxPath]]:
            out = orig_b(now)
            if out and len(captured_ba) < 200 and rng.random() < 0.05:
                captured_ba.append((now, out[0][0]))
            return out

        a_peer.datagrams_to_send = tap_a  # type: ignore[method-assign]
        b_peer.datagrams_to_send = tap_b  # type: ignore[method-assign]

        def attack(target: Peer, pool: list[tuple[float, bytes]], key: str) -> None:
            now = sim.now
            forged: list[tuple[bytes, int]] = []
            for d in [d for t, d in pool if t <= now - replay_age][-20:]:
                forged.append((d, 0))  # replay / duplicate
                t = bytearray(d)
                t[rng.randrange(len(t))] ^= 1 << rng.randrange(8)  # tamper one bit
                forged.append((bytes(t), 0))
                cut = _trim_point(d)
                if cut is not None:
                    f = bytearray(d[:cut])
                    f[cut - 16:cut] = rng.randbytes(16)  # forged "trimmed" header
                    forged.append((bytes(f), int(_Dscp.TRIMMED)))
                    forged.append((d[:cut], int(_Dscp.TRIMMED)))  # replayed trim
            forged.append((rng.randbytes(100), 0))
            for data, dscp in forged:
                target.receive_datagram(data, _Rx(plane=0, dscp=dscp), now)
                injected[key] += 1
            sim.wake(target)

        for k in range(1, 6):
            sim.at(sim.now + k * 4e-4, lambda: attack(holder["b"], captured_ab, "to_b"))
            sim.at(sim.now + k * 4e-4 + 1e-4, lambda: attack(holder["a"], captured_ba, "to_a"))

    holder: dict[str, Peer] = {}

    def setup_hold(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        holder["a"], holder["b"] = a, b
        setup(sim, fab, a, b)

    r = run_transfer(size=size, seed=seed, setup=setup_hold)
    a: Peer = r["a"]
    b: Peer = r["b"]
    dropped_b = sum(b.conn.dropped.values())
    dropped_a = sum(a.conn.dropped.values())
    return {"ok": r["ok"], "injected_to_b": injected["to_b"], "injected_to_a": injected["to_a"],
            "dropped_by_b": dropped_b, "dropped_by_a": dropped_a,
            "drop_reasons_b": dict(b.conn.dropped), "drop_reasons_a": dict(a.conn.dropped),
            "retransmissions": r["retransmissions"], "nacks": r["nacks"],
            "goodput_over_capacity": r["goodput_over_capacity"]}


def _colliding_seeds(fab: Fabric, srcs: tuple[str, str], dst: str, policy: str,
                     evs_per_plane: int) -> tuple[int, int]:
    from transport.paths import get_policy

    found: dict[str, int] = {}
    for src in srcs:
        for seed in range(1, 10_000):
            ev = get_policy(policy, planes=1, evs_per_plane=evs_per_plane, seed=seed).next_ev(0.0)
            if ev is not None and fab.spine_for(src, dst, 0, ev.value) == 0:
                found[src] = seed
                break
    return found[srcs[0]], found[srcs[1]]


def scenario_collision(*, size_each: int = 8 << 20) -> dict[str, Any]:
    """(i) Two flows into one host over 1 plane × 2 spines of half rate each:
    ``single`` flows that hash onto the same spine vs the same with ``spray``."""
    rate, delay = 1.25e9, 5e-6
    times: dict[str, float] = {}
    for policy in ("single", "spray"):
        sp = LinkSpec(rate=rate / 2, delay=delay, buffer=1 << 20)
        fab = make_fabric(planes=1, spines=2, hosts=("a1", "a2", "b"), spine=sp)
        s1, s2 = _colliding_seeds(fab, ("a1", "a2"), "b", "single", 16)
        sim = Simulator(fab)
        base = default_config(fab, planes=1, path_policy=policy)
        p1 = connect_pair(sim, "a1", "b", config=replace(base, seed=s1), cids=(11, 21))
        p2 = connect_pair(sim, "a2", "b", config=replace(base, seed=s2), cids=(12, 22))
        _establish(sim, *p1, *p2)
        d1, d2 = pattern(size_each, 1), pattern(size_each, 2)
        start = sim.now
        _send_all(sim, p1[0], d1, 1 << 20)
        _send_all(sim, p2[0], d2, 1 << 20)
        a1, a2 = p1[0], p2[0]

        def both_done(a1: Peer = a1, a2: Peer = a2) -> bool:
            return a1.acked_bytes >= size_each and a2.acked_bytes >= size_each

        sim.run(until=start + 5.0, done=both_done, max_events=20_000_000)
        ok = _reassemble(p1[1]) == d1 and _reassemble(p2[1]) == d2
        if not ok:
            raise AssertionError(f"{policy}: transfer not byte-exact")
        times[policy] = sim.now - start
        if policy == "single":
            times["single_same_spine"] = float(
                fab.spine_for("a1", "b", 0, p1[0].conn.paths.evs[0].value) == 0)
    return {"ok": True, "single_seconds": times["single"], "spray_seconds": times["spray"],
            "speedup": times["single"] / times["spray"]}


def scenario_spine_down(*, size: int = 32 << 20, seed: int = 9, down_at: float = 1e-3,
                        up_at: float = 5e-3, spine_index: int = 0,
                        fabric_kw: dict[str, Any] | None = None) -> dict[str, Any]:
    """(j) Spine 0 of plane 0 reboots (both directions black, the plane itself
    alive): data *and* SACKs that hash onto it vanish. Goodput should stay
    near the remaining capacity (15/16) and few packets should be resent in vain.
    ``fabric_kw`` {"spines": 2, ...}: half of plane 0's paths die, as in
    ``braid demo``'s fabric; the plane must stay in use (its other half
    carries its full rate)."""
    marks: dict[str, float] = {}

    def setup(sim: Simulator, fab: Fabric, a: Peer, b: Peer) -> None:
        t0 = sim.now
        marks["down"], marks["up"] = t0 + down_at, t0 + up_at

        def spine(down: bool) -> None:
            fab.link("spine", "b", 0, spine_index).down = down  # a -> b data
            fab.link("spine", "a", 0, spine_index).down = down  # b -> a SACKs
            if down:
                marks["acked_at_down"] = a.acked_bytes
            else:
                marks["acked_at_up"] = a.acked_bytes

        sim.at(marks["down"], lambda: spine(True))
        sim.at(marks["up"], lambda: spine(False))

    r = run_transfer(size=size, seed=seed, setup=setup, fabric_kw=fabric_kw)
    during = (marks["acked_at_up"] - marks["acked_at_down"]) / (up_at - down_at)
    cap: float = r["capacity"]
    b: Peer = r["b"]
    r.update({
        "goodput_during_over_capacity": during / cap,
        "duplicates_received": b.conn.receiver.duplicates,
        "spurious_losses": r["a"].conn.sender.spurious_losses,
        "plane0_parks": sum(1 for e in r["a"].conn.paths.ev_set.plane_log
                            if e[1] == 0 and e[2] == "parked"),
    })
    return r
