"""The simulated fabric, driven by small real endpoints (no mocks)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable

import pytest

from testbed.simfabric import (
    EventBudgetExceeded,
    Fabric,
    FabricSpec,
    Link,
    LinkSpec,
    Packet,
    Simulator,
    TraceFn,
)
from transport.datagram import RxInfo, TxPath
from wire.constants import HEADER_TAG_LEN, VERSION, Dscp, PacketType

HEADER_WORDS = 8  # 32-byte header + 16-byte tag: a DATA datagram trims to 48 bytes
TRIMMED_LEN = HEADER_WORDS * 4 + HEADER_TAG_LEN
_HDR = struct.Struct("!BBBBIQ")


def datagram(conn_id: int, seq: int, size: int, ptype: PacketType = PacketType.DATA) -> bytes:
    """A datagram with a valid v1 common header (enough for trim_point)."""
    head = _HDR.pack(VERSION, ptype, 0, HEADER_WORDS, conn_id, seq)
    body = head + bytes(HEADER_WORDS * 4 - len(head) + HEADER_TAG_LEN)
    assert size >= len(body)
    return body + bytes(size - len(body))


def seq_of(data: bytes) -> int:
    return int(_HDR.unpack_from(data)[5])


class Blaster:
    """Sends ``count`` numbered datagrams to ``conn_id``: all at once, or one per ``gap``."""

    def __init__(
        self,
        conn_id: int,
        count: int,
        size: int = 1000,
        *,
        path: Callable[[int], TxPath] = lambda i: TxPath(0, 0, Dscp.DATA),
        gap: float = 0.0,
        ptype: Callable[[int], PacketType] = lambda i: PacketType.DATA,
        start: float = 0.0,
    ) -> None:
        self.conn_id = conn_id
        self.count = count
        self.size = size
        self.path = path
        self.gap = gap
        self.ptype = ptype
        self.sent = 0
        self.next_at = start
        self.received: list[tuple[float, bytes, RxInfo]] = []

    def _one(self) -> tuple[bytes, TxPath]:
        i = self.sent
        self.sent += 1
        return datagram(self.conn_id, i, self.size, self.ptype(i)), self.path(i)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        if self.sent >= self.count or now < self.next_at:
            return []
        if self.gap == 0.0:
            return [self._one() for _ in range(self.count - self.sent)]
        self.next_at += self.gap
        return [self._one()]

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None:
        self.received.append((now, data, rx))

    def handle_timer(self, now: float) -> None:
        pass

    def next_timer(self) -> float | None:
        return self.next_at if self.sent < self.count else None


class Sink:
    """Records arrivals; answers each one with a SACK-typed control datagram if asked."""

    def __init__(self, reply_to: int | None = None) -> None:
        self.arrivals: list[tuple[float, int, int, RxInfo]] = []
        self.reply_to = reply_to
        self.out: list[tuple[bytes, TxPath]] = []

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        out, self.out = self.out, []
        return out

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None:
        self.arrivals.append((now, seq_of(data), len(data), rx))
        if self.reply_to is not None:
            ack = datagram(self.reply_to, seq_of(data), 64, PacketType.SACK)
            self.out.append((ack, TxPath(rx.plane, seq_of(data), Dscp.CONTROL)))

    def handle_timer(self, now: float) -> None:
        pass

    def next_timer(self) -> float | None:
        return None


FAST = LinkSpec(rate=1e9, delay=0.0)


def spec(
    *,
    planes: int = 1,
    spines: int = 1,
    uplink: LinkSpec = FAST,
    spine: LinkSpec = FAST,
    downlink: LinkSpec = FAST,
    seed: int = 1,
) -> FabricSpec:
    return FabricSpec(planes, spines, uplink, spine, downlink, seed=seed)


def pair(
    fs: FabricSpec, sender: Blaster, sink: Sink, trace: TraceFn | None = None
) -> tuple[Simulator, Fabric]:
    fabric = Fabric(fs)
    sim = Simulator(fabric, trace=trace)
    sim.add_endpoint("a", sender, peer="b", conn_id=1)
    sim.add_endpoint("b", sink, peer="a", conn_id=sender.conn_id)
    return sim, fabric


def test_rate_limit_back_to_back() -> None:
    n, size, rate = 2000, 1000, 1e6
    sink = Sink()
    sim, _ = pair(spec(uplink=LinkSpec(rate=rate, delay=0.001, buffer=10**8)), Blaster(2, n), sink)
    sim.run(until=10.0)
    assert len(sink.arrivals) == n
    assert [s for _, s, _, _ in sink.arrivals] == list(range(n))
    span = sink.arrivals[-1][0] - sink.arrivals[0][0]
    assert span == pytest.approx((n - 1) * size / rate, rel=0.01)
    assert sim.now == 10.0


def test_propagation_delay_and_base_rtt() -> None:
    fs = spec(
        uplink=LinkSpec(rate=1e6, delay=0.001),
        spine=LinkSpec(rate=2e6, delay=0.002),
        downlink=LinkSpec(rate=4e6, delay=0.003),
    )
    sink = Sink()
    sim, fabric = pair(fs, Blaster(2, 1), sink)
    sim.run()
    expected = 0.006 + 1000 / 1e6 + 1000 / 2e6 + 1000 / 4e6
    assert sink.arrivals[0][0] == pytest.approx(expected)
    assert fabric.one_way_delay("a", "b", size=1000) == pytest.approx(expected)
    assert fabric.base_rtt("a", "b") == pytest.approx(0.012)
    assert fabric.base_rtt("a", "b", size=1000, ack_size=0) == pytest.approx(expected + 0.006)


def test_aggregate_capacity() -> None:
    fs = spec(
        planes=4,
        spines=2,
        uplink=LinkSpec(rate=10e6, delay=0),
        spine=LinkSpec(rate=4e6, delay=0),
        downlink=LinkSpec(rate=12e6, delay=0),
    )
    fabric = Fabric(fs, ["a", "b"])
    assert fabric.aggregate_capacity("a", "b") == pytest.approx(4 * 8e6)
    fabric.set_plane_down(3, True)
    fabric.link("spine", "b", 0, 1).down = True
    assert fabric.aggregate_capacity("a", "b") == pytest.approx(2 * 8e6 + 4e6)


def run_traced(seed: int) -> list[tuple[str, float, int, str, str]]:
    events: list[tuple[str, float, int, str, str]] = []

    def trace(ev: str, now: float, pkt: Packet, link: Link | None, reason: str) -> None:
        events.append((ev, now, pkt.id, link.name if link else "", reason))

    lossy = LinkSpec(rate=1e6, delay=0.001, jitter=0.0005, loss=0.05, buffer=20_000)
    fs = spec(planes=2, spines=4, uplink=lossy, spine=lossy, downlink=lossy, seed=seed)
    sender = Blaster(2, 400, path=lambda i: TxPath(i % 2, (i * 7919) % 64, Dscp.DATA), gap=4e-4)
    sim, _ = pair(fs, sender, Sink(reply_to=1), trace=trace)
    sim.run(until=1.0)
    return events


def test_determinism() -> None:
    a = run_traced(7)
    assert a == run_traced(7)
    assert a != run_traced(8)
    kinds = {e[0] for e in a}
    assert {"sent", "delivered", "dropped"} <= kinds


def test_ecmp_stable_and_spread() -> None:
    fs = spec(planes=2, spines=4, seed=3)
    f1, f2 = Fabric(fs, ["a", "b"]), Fabric(fs, ["a", "b"])
    picks = [f1.spine_for("a", "b", 1, ev) for ev in range(1000)]
    assert picks == [f1.spine_for("a", "b", 1, ev) for ev in range(1000)]
    assert picks == [f2.spine_for("a", "b", 1, ev) for ev in range(1000)]
    for k in range(4):
        assert 190 <= picks.count(k) <= 310
    other = Fabric(spec(planes=2, spines=4, seed=4), ["a", "b"])
    assert picks != [other.spine_for("a", "b", 1, ev) for ev in range(1000)]
    # The packet really crosses the hashed spine.
    ev = 17
    k = f1.spine_for("a", "b", 0, ev)
    sim = Simulator(f1)
    sim.add_endpoint("a", Blaster(2, 10, path=lambda i: TxPath(0, ev, Dscp.DATA)), peer="b")
    sim.add_endpoint("b", Sink(), peer="a", conn_id=2)
    sim.run()
    assert f1.link("spine", "b", 0, k).delivered == 10
    assert sum(f1.link("spine", "b", 0, j).enqueued for j in range(4)) == 10


@pytest.mark.parametrize("where", ["spine", "downlink"])
def test_trim_above_threshold(where: str) -> None:
    slow = LinkSpec(rate=1e6, delay=0.0001, trim_threshold=4000)
    fs = spec(spine=slow) if where == "spine" else spec(downlink=slow)
    sink = Sink()
    sim, fabric = pair(fs, Blaster(2, 20), sink)
    sim.run()
    assert len(sink.arrivals) == 20
    full = [a for a in sink.arrivals if a[2] == 1000]
    trimmed = [a for a in sink.arrivals if a[2] != 1000]
    # one in service + 4000 bytes of queue; the other 15 lose their payload
    assert [a[1] for a in full] == [0, 1, 2, 3, 4]
    assert len(trimmed) == 15
    want = Dscp.TRIMMED if where == "spine" else Dscp.TRIMMED_LAST_HOP
    assert {(a[2], a[3].dscp) for a in trimmed} == {(TRIMMED_LEN, want)}
    assert {a[3].dscp for a in full} == {Dscp.DATA}
    # headers are served with priority: all arrive before the queued full packets
    assert max(a[0] for a in trimmed) < full[1][0]
    link = fabric.link("spine", "b", 0, 0) if where == "spine" else fabric.link("downlink", "b", 0)
    assert link.trimmed == 15


def test_no_trim_means_tail_drop() -> None:
    fs = spec(downlink=LinkSpec(rate=1e6, delay=0, buffer=4000, trim=False))
    sink = Sink()
    sim, fabric = pair(fs, Blaster(2, 20), sink)
    sim.run()
    assert [a[1] for a in sink.arrivals] == [0, 1, 2, 3, 4]
    assert fabric.link("downlink", "b", 0).stats()["dropped"]["buffer"] == 15


def test_trim_on_full_buffer_without_threshold() -> None:
    fs = spec(downlink=LinkSpec(rate=1e6, delay=0, buffer=4000, trim=True))
    sink = Sink()
    sim, _ = pair(fs, Blaster(2, 20), sink)
    sim.run()
    assert sorted(a[2] for a in sink.arrivals) == [TRIMMED_LEN] * 15 + [1000] * 5


def test_control_bypasses_data_queue() -> None:
    n = 50
    ctrl = n - 1
    for trim_threshold in (None, 1000):
        fs = spec(
            uplink=LinkSpec(rate=1e6, delay=0, trim_threshold=trim_threshold, ecn_threshold=0)
        )
        sink = Sink()
        sender = Blaster(
            2, n, ptype=lambda i: PacketType.SACK if i == ctrl else PacketType.DATA, size=200
        )
        sim, _ = pair(fs, sender, sink)
        sim.run()
        order = [a[1] for a in sink.arrivals]
        ctl = next(a for a in sink.arrivals if a[1] == ctrl)
        assert ctl[2] == 200 and not ctl[3].ce  # never trimmed, never marked
        if trim_threshold is None:
            assert order[:2] == [0, ctrl]  # right after the packet being serialised
        else:
            # packets 1..5 fill the 1000-byte data queue; 6..48 are trimmed and,
            # like the SACK, overtake the queued full packets in the priority queue.
            assert order == [0, *range(6, 49), ctrl, 1, 2, 3, 4, 5]


def test_ecn_marks_above_threshold() -> None:
    fs = spec(uplink=LinkSpec(rate=1e6, delay=0, ecn_threshold=3000))
    sink = Sink()
    sim, fabric = pair(fs, Blaster(2, 20), sink)
    sim.run()
    marks = {a[1]: a[3].ce for a in sink.arrivals}
    # packet 0 in service, 1..3 see <= 2000 queued, 4 sees 3000 (not above), 5.. see more
    assert [s for s, ce in sorted(marks.items()) if ce] == list(range(5, 20))
    assert fabric.link("uplink", "a", 0).marked == 15


def test_loss_rate_and_gray() -> None:
    n = 20_000
    fs = spec(
        uplink=LinkSpec(rate=1e9, delay=0, buffer=10**7),
        spine=LinkSpec(rate=1e9, delay=0, loss=0.1),
    )
    sink = Sink()
    sim, fabric = pair(fs, Blaster(2, n, size=100), sink)
    fabric.link("downlink", "b", 0).gray_loss = 0.05
    sim.run()
    assert len(sink.arrivals) / n == pytest.approx(0.9 * 0.95, abs=0.01)
    st = fabric.stats()
    assert st["spine:b:p0:s0"]["dropped"]["loss"] == pytest.approx(0.1 * n, rel=0.1)
    assert st["downlink:b:p0"]["dropped"]["gray"] == pytest.approx(0.05 * 0.9 * n, rel=0.1)
    json.dumps(sim.stats())  # plain data


def test_link_down_drops_in_flight_and_queued() -> None:
    fs = spec(spine=LinkSpec(rate=1e6, delay=0.010))
    sink = Sink()
    sim, fabric = pair(fs, Blaster(2, 20), sink)
    spine = fabric.link("spine", "b", 0, 0)
    # At 5 ms packets 0..4 have left the spine queue and are on its wire, the
    # rest wait in the queue: all of them must vanish.
    sim.at(0.005, lambda: setattr(spine, "down", True))
    sim.at(0.050, lambda: setattr(spine, "down", False))
    sim.run(until=0.1)
    assert sink.arrivals == []
    assert spine.drop_down == 20
    # back up: traffic flows again
    sender2 = Blaster(3, 5)
    sim.add_endpoint("a", sender2, peer="b", conn_id=9)
    sink2 = Sink()
    sim.add_endpoint("b", sink2, peer="a", conn_id=3)
    sim.run(until=0.2)
    assert len(sink2.arrivals) == 5


def test_plane_down_only_hits_that_plane() -> None:
    fs = spec(planes=2, spines=2)
    sink = Sink()
    sender = Blaster(2, 100, path=lambda i: TxPath(i % 2, i, Dscp.DATA), gap=1e-3)
    sim, fabric = pair(fs, sender, sink)
    sim.at(0.0495, lambda: fabric.set_plane_down(1, True))
    sim.run()
    planes = [a[3].plane for a in sink.arrivals]
    assert planes.count(0) == 50 and planes.count(1) == 25
    assert fabric.plane_stats()[1]["dropped"] == 25


def test_jitter_keeps_order_unless_reorder() -> None:
    def arrivals(reorder: bool) -> list[int]:
        ln = LinkSpec(rate=1e9, delay=0.001, jitter=0.001, reorder=reorder)
        sink = Sink()
        sim, _ = pair(spec(uplink=ln), Blaster(2, 200, gap=1e-5), sink)
        sim.run()
        return [a[1] for a in sink.arrivals]

    assert arrivals(False) == list(range(200))
    got = arrivals(True)
    assert sorted(got) == list(range(200)) and got != list(range(200))


def test_incast_8_to_1_demux_by_conn_id() -> None:
    fs = spec(planes=2, spines=2, downlink=LinkSpec(rate=1e7, delay=1e-5, trim_threshold=8000))
    fabric = Fabric(fs)
    sim = Simulator(fabric)
    sinks = []
    for i in range(8):
        sim.add_endpoint(
            f"s{i}",
            Blaster(200 + i, 50, path=lambda j: TxPath(j % 2, j, Dscp.DATA)),
            peer="r",
            conn_id=100 + i,
        )
        sink = Sink(reply_to=100 + i)
        sinks.append(sink)
        sim.add_endpoint("r", sink, peer=f"s{i}", conn_id=200 + i)
    sim.run()
    for sink in sinks:
        assert len(sink.arrivals) == 50
    trims = sum(fabric.link("downlink", "r", p).trimmed for p in range(2))
    assert trims > 0
    assert all(a[3].dscp == Dscp.TRIMMED_LAST_HOP for s in sinks for a in s.arrivals if a[2] == 48)
    # unknown connection ids are counted, not delivered
    sim.add_endpoint("x", Blaster(999, 3), peer="r", conn_id=5)
    sim.run()
    assert sim.unroutable == 3


def test_event_budget_exhaustion_raises() -> None:
    class Spinner(Sink):
        def next_timer(self) -> float | None:
            return 0.0  # always due: a livelock the budget must catch

    sim = Simulator(Fabric(spec()))
    sim.add_endpoint("a", Spinner(), peer="b")
    with pytest.raises(EventBudgetExceeded, match="event budget of 1000"):
        sim.run(max_events=1000)


def test_done_predicate_and_until() -> None:
    sink = Sink()
    sim, _ = pair(spec(uplink=LinkSpec(rate=1e6, delay=0)), Blaster(2, 100), sink)
    t = sim.run(done=lambda: len(sink.arrivals) >= 10)
    assert len(sink.arrivals) == 10 and t == pytest.approx(0.010, abs=1e-5)
    assert sim.run(until=0.0505) == 0.0505
    assert len(sink.arrivals) == 50


def test_wake_after_api_call_and_trace_kinds() -> None:
    seen: list[str] = []

    def trace(ev: str, now: float, pkt: Packet, link: Link | None, reason: str) -> None:
        seen.append(ev)

    sender = Blaster(2, 0)
    fs = spec(uplink=LinkSpec(rate=1e6, delay=0, trim_threshold=2000, ecn_threshold=0))
    sink = Sink()
    sim, _ = pair(fs, sender, sink, trace=trace)
    sim.run()
    assert sink.arrivals == []

    def api_call() -> None:  # like conn.send_message(...) from an `at` action
        sender.count = 10
        sim.wake(sender)

    sim.at(1.0, api_call)
    sim.run()
    assert len(sink.arrivals) == 10 and sink.arrivals[0][0] >= 1.0
    assert {"sent", "marked", "trimmed", "delivered"} <= set(seen)
