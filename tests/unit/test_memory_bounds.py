"""Bounded memory, as tested numbers (docs/daemon.md "Bounded memory").

Each test measures with ``tracemalloc`` what one unit of peer-driven state
costs and asserts a ceiling; the ceilings, not the measurements, are in the
docs. ``python tests/unit/test_memory_bounds.py`` prints the measurements.
Allocation counts do not depend on machine load, so these are not timing tests.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from dataclasses import replace

from duplex import CFG, SECRET, endpoints

from transport.connection import Connection
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.path_health import _MAX_OUTSTANDING_PROBES

#: The ceilings written in docs/daemon.md.
HALF_OPEN_MAX = 64 << 10  # bytes per half-open responder (one INIT), 4 planes x 32 EVs
PARTIAL_OVERHEAD_MAX = 600  # bookkeeping bytes per incomplete message (one slice held)
INFLIGHT_PER_PACKET_MAX = 600  # bytes of sender bookkeeping per packet in flight
#: The daemon's shape (the "host" connection profile: 32 EVs per plane), 4 planes.
DAEMON_SHAPE = replace(CFG, planes=4, evs_per_plane=32)


def measure(fn: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        keep = fn()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before, keep


def half_open_bytes(n: int = 40, tries: int = 3) -> float:
    """The least of ``tries`` measurements: tracemalloc also counts what
    another thread allocates meanwhile (pytest-xdist's channel to its
    controller), which only ever adds."""
    return min(_half_open_once(n) for _ in range(tries))


def _half_open_once(n: int) -> float:
    inits = []
    for i in range(n):
        a = Endpoint(config=DAEMON_SHAPE, secret=SECRET, rng=random.Random(1000 + i))
        a.connect("b", 0.0)
        inits += [d for _, d, _ in a.datagrams_to_send(0.0)]
    b = Endpoint(config=DAEMON_SHAPE, secret=SECRET, rng=random.Random(5))
    b.receive_datagram(inits[0], RxInfo(0), 0.0, "x")  # first-use allocations
    b.datagrams_to_send(0.0)

    def fill() -> Endpoint:
        for g in inits[1:]:
            b.receive_datagram(g, RxInfo(0), 0.0, "x")
        b.datagrams_to_send(0.0)  # the ACCEPTs leave
        return b

    used, _ = measure(fill)
    assert len(b.connections) == n
    return used / (n - 1)


def slice_overhead_bytes() -> tuple[float, int]:
    _, _, d = endpoints()
    conn = d.ep["a"].connect("b", 0.0)
    d.run_until(0.1, lambda: conn.is_established and bool(d.ep["b"].connections))
    (resp,) = d.ep["b"].connections.values()
    assert conn._sealer is not None
    size = CFG.payload_size
    n = 400
    payload = b"p" * size
    dgrams = [conn._sealer.seal_data(psn=i, ev=1, plane=0, msg_id=i + 1, msg_offset=0,
                                     msg_len=2 * size, timestamp=i, payload=payload)
              for i in range(n)]

    d.ep["b"].receive_datagram(dgrams[0], RxInfo(0), d.now, "a")  # builds the opener

    def feed() -> None:
        for g in dgrams[1:]:
            d.ep["b"].receive_datagram(g, RxInfo(0), d.now, "a")

    used, _ = measure(feed)
    held = resp.receiver.state_size["partial_bytes"]
    assert held == n * size
    return (used - (n - 1) * size) / (n - 1), resp.receiver.state_size["partial_messages"]


def inflight_bytes() -> float:
    cfg = replace(CFG, congestion="fixed", congestion_params={"window": 4 << 20})
    _, _, d = endpoints(cfg)
    conn: Connection = d.ep["a"].connect("b", 0.0)
    d.run_until(0.1, lambda: conn.is_established)
    conn.send_message(b"m" * (600 * cfg.payload_size))

    def send() -> int:
        n = 0
        for _ in range(20):
            n += len(d.ep["a"].datagrams_to_send(d.now))
        return n

    used, _ = measure(send)
    n = len(conn.sender.inflight)
    assert n >= 500
    return used / n


def test_half_open_handshake_is_bounded() -> None:
    assert half_open_bytes() <= HALF_OPEN_MAX


def test_reassembly_costs_its_payload_plus_a_bounded_overhead() -> None:
    per_slice, partial = slice_overhead_bytes()
    assert per_slice <= PARTIAL_OVERHEAD_MAX, per_slice
    assert partial == 400


def test_inflight_bookkeeping_per_packet_is_bounded() -> None:
    assert inflight_bytes() <= INFLIGHT_PER_PACKET_MAX


def test_outstanding_probes_are_capped() -> None:
    assert _MAX_OUTSTANDING_PROBES <= 4096


if __name__ == "__main__":
    print(f"half-open responder: {half_open_bytes():.0f} B")
    per, _ = slice_overhead_bytes()
    print(f"reassembly overhead per incomplete one-slice message: {per:.0f} B")
    print(f"sender bookkeeping per packet in flight: {inflight_bytes():.0f} B")
