"""No state per unauthenticated source address."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

from test_aio import CFG, SECRET, free_port, run

from transport.aio import EndpointIO
from transport.connection import Connection
from transport.endpoint import Endpoint, PeerKey
from transport.events import Event, MessageAcked
from transport.udp import PeerTable, PlaneAddr


def held(t: PeerTable) -> int:
    return len(t.routes) + len(t.by_source)


def test_lookup_of_unknown_sources_stores_nothing() -> None:
    t = PeerTable(2, [4747, 4748])
    t.add("b", [PlaneAddr("10.0.0.2"), PlaneAddr("10.0.1.2")])
    before = held(t)
    for i in range(100_000):
        key = t.lookup(i & 1, f"10.9.{(i >> 8) & 255}.{i & 255}")
        assert key == f"10.9.{(i >> 8) & 255}.{i & 255}"
    assert held(t) == before
    assert t.lookup(1, "10.0.1.2") == "b"


def test_learned_routes_are_bounded_and_pruned() -> None:
    t = PeerTable(1, [4747])
    for i in range(PeerTable.MAX_LEARNED + 100):
        t.learn(0, f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
    assert len(t.routes) == PeerTable.MAX_LEARNED
    t.prune({"10.0.0.1"})
    assert list(t.routes) == ["10.0.0.1"] and len(t.by_source) == 1
    assert t.sockaddr("10.0.0.1", 0, 3) == ("10.0.0.1", 4747)


def test_spoofed_sources_leave_no_state_and_a_real_peer_is_learned_then_forgotten() -> None:
    """Datagrams from 200 loopback source addresses (unknown to the table)
    change nothing; an authenticated INIT from an unconfigured address gets a
    route for replies, forgotten once its connection is gone."""
    ports = [free_port()]
    pa, pb = [PlaneAddr("127.0.0.2", ports[0])], [PlaneAddr("127.0.0.3", ports[0])]
    cfg = replace(CFG, planes=1)
    ta, tb = PeerTable(1, ports), PeerTable(1, ports)
    tb.add("a", pa)  # b knows a; a does not know b
    acked = asyncio.Event()
    def on_b(conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, MessageAcked):
            acked.set()

    async def main() -> tuple[int, int, int, int]:
        ia = EndpointIO(Endpoint(config=cfg, secret=SECRET), pa, ta, on_event=None)
        ib = EndpointIO(Endpoint(config=cfg, secret=SECRET), pb, tb, on_event=on_b)
        ia.open()
        ib.open()
        try:
            empty = held(ta)
            for i in range(10, 210):
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.bind((f"127.0.1.{i}", 0))
                    s.sendto(b"\x01" * 64, ("127.0.0.2", ports[0]))
            for _ in range(200):
                if ia.rx_datagrams >= 200:
                    break
                await asyncio.sleep(0.01)
            flooded = held(ta)
            conn = ib.connect("a")
            conn.send_message(b"x" * 5000)
            ib.kick()
            await asyncio.wait_for(acked.wait(), 20)
            learned = len(ta.routes)
            for c in list(ia.endpoint.connections.values()):
                c.reset(ia.now())  # (a RESET goes on plane 0, a CLOSE may not: defect 4)
            ia.kick()
            for _ in range(200):
                if not ia.endpoint.connections:
                    break
                await asyncio.sleep(0.01)
            return empty, flooded, learned, held(ta)
        finally:
            ia.close()
            ib.close()

    empty, flooded, learned, after = run(main())  # type: ignore[misc]
    assert flooded == empty == 0
    assert learned == 1
    assert after == 0
