"""Scale smoke test: a 64 MiB-class transfer (48k DATA + 48k ACKs) over 8 planes."""

from __future__ import annotations

import struct
import time

import pytest

from testbed.simfabric import Fabric, FabricSpec, LinkSpec, Simulator
from transport.datagram import RxInfo, TxPath
from wire.constants import VERSION, Dscp, PacketType

N = 48_000
SIZE = 1400


def datagram(conn_id: int, seq: int, size: int, ptype: PacketType = PacketType.DATA) -> bytes:
    """v1 common header (8 header words); trims to 48 bytes like test_simfabric's."""
    head = struct.pack("!BBBBIQ", VERSION, ptype, 0, 8, conn_id, seq)
    return head + bytes(size - len(head))


class WindowSender:
    """Keeps ``window`` datagrams in flight, sprayed round-robin over planes and EVs."""

    def __init__(self, planes: int, evs: int, window: int) -> None:
        self.planes, self.evs, self.window = planes, evs, window
        self.sent = self.acked = 0
        self.template = datagram(2, 0, SIZE)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        out = []
        while self.sent - self.acked < self.window and self.sent < N:
            i = self.sent
            self.sent += 1
            out.append(
                (self.template, TxPath(i % self.planes, i // self.planes % self.evs, Dscp.DATA))
            )
        return out

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None:
        self.acked += 1

    def handle_timer(self, now: float) -> None:
        pass

    def next_timer(self) -> float | None:
        return None


class Acker:
    def __init__(self) -> None:
        self.out: list[tuple[bytes, TxPath]] = []
        self.ack = datagram(1, 0, 64, PacketType.SACK)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        out, self.out = self.out, []
        return out

    def receive_datagram(self, data: bytes, rx: RxInfo, now: float) -> None:
        self.out.append((self.ack, TxPath(rx.plane, len(self.out), Dscp.CONTROL)))

    def handle_timer(self, now: float) -> None:
        pass

    def next_timer(self) -> float | None:
        return None


@pytest.mark.slow
def test_64mib_class_transfer_scale() -> None:
    link = LinkSpec(rate=100e9 / 8 / 8, delay=2e-6, trim_threshold=64_000, ecn_threshold=32_000)
    fabric = Fabric(FabricSpec(8, 4, link, link, link, seed=1, overhead=48))
    sim = Simulator(fabric)
    sender = WindowSender(8, 32, 256)
    sim.add_endpoint("a", sender, peer="b", conn_id=1)
    sim.add_endpoint("b", Acker(), peer="a", conn_id=2)
    t0 = time.perf_counter()  # measures the simulator itself, never fed into it
    sim.run(done=lambda: sender.acked >= N, max_events=2_000_000)
    wall = time.perf_counter() - t0
    assert sender.acked == N
    # line rate of 8 x 12.5 Gb/s planes, give or take the window ramp
    goodput = N * (SIZE + 48) / sim.now
    assert goodput > 0.9 * fabric.aggregate_capacity("a", "b")
    print(f"{2 * N / wall:,.0f} datagrams/s, {sim.events / wall:,.0f} events/s")
