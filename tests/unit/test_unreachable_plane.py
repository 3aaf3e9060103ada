"""A plane the host cannot send on (the I/O saw ENETUNREACH & co.): the core
parks it at once with cause "local", resends its in-flight data elsewhere,
never parks the last plane up, and takes the plane back when a probe of it is
answered. Virtual time (tests/unit/duplex.py); the I/O's part is emulated
exactly as transport/aio.py does it: the refused datagrams never reach the
wire and the endpoint is told (peer, plane, count)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from duplex import endpoints

from congestion.nscc import Nscc
from transport.events import MessageAcked, MessageDelivered


def _unroutable(ep: Any, planes: set[int], refused: list[int]) -> None:
    """Make ``ep``'s sends on ``planes`` fail like a host whose link is down."""
    orig: Callable[[float], list[Any]] = ep.datagrams_to_send

    def send(now: float) -> list[Any]:
        out = orig(now)
        keep = [x for x in out if x[2].plane not in planes]
        for plane in planes:
            n = sum(1 for x in out if x[2].plane == plane)
            if n:
                refused.append(n)
                ep.on_path_unreachable("b", plane, now, n)
        return keep

    ep.datagrams_to_send = send


def test_unreachable_plane_is_parked_at_once_and_comes_back() -> None:
    a, _b, d = endpoints()
    conn = a.connect("b", 0.0)
    assert d.run_until(1.0, lambda: conn.is_established)
    conn.send_message(b"warm")
    assert d.run_until(d.now + 1.0, lambda: len(d.of("a", MessageAcked)) == 1)
    refused: list[int] = []
    _unroutable(a, {0}, refused)
    t_down = d.now
    data = random.Random(1).randbytes(400_000)
    conn.send_message(data)
    assert d.run_until(d.now + 5.0, lambda: len(d.of("a", MessageAcked)) == 2)
    got = [e.data for e in d.of("b", MessageDelivered)]  # type: ignore[attr-defined]
    assert got[-1] == data  # byte-exact over the surviving plane
    st = conn.stats()
    assert refused and st["unreachable_sends"] == sum(refused)
    parks = [e for e in st["plane_log"] if e[1] == 0 and e[2] == "parked"]  # type: ignore[attr-defined]
    assert parks and parks[0][4] == "local"
    # parked by the first refused send, not after a silence
    assert parks[0][0] == min(e[0] for e in st["plane_log"] if e[0] >= t_down)  # type: ignore[attr-defined]
    assert 0 in conn.paths.parked_planes()
    # the controller's line rate is the planes that are up (decision 0030)
    cfg, cc = conn.config, conn.cc
    assert isinstance(cc, Nscc)
    assert cc.line_rate == cfg.plane_rate * (cfg.planes - 1)
    # the link is back: a probe of plane 0 is answered, the plane unparked
    a.datagrams_to_send = type(a).datagrams_to_send.__get__(a)  # type: ignore[method-assign]
    assert d.run_until(d.now + 5.0, lambda: 0 not in conn.paths.parked_planes())
    ups = [e for e in conn.stats()["plane_log"] if e[1] == 0 and e[2] == "up"]  # type: ignore[attr-defined]
    assert ups and ups[-1][4] == "probe" and ups[-1][0] > parks[0][0]
    assert cc.line_rate == cfg.plane_rate * cfg.planes


def test_the_last_plane_up_is_never_parked_on_a_send_error() -> None:
    a, _b, d = endpoints()
    conn = a.connect("b", 0.0)
    assert d.run_until(1.0, lambda: conn.is_established)
    refused: list[int] = []
    _unroutable(a, {0, 1}, refused)  # both links down for a while
    data = b"x" * 50_000
    conn.send_message(data)
    d.run_until(d.now + 0.05)
    assert refused  # it kept trying, bounded by its timers (run_until did not spin)
    local = {e[1] for e in conn.stats()["plane_log"] if e[4] == "local"}  # type: ignore[attr-defined]
    assert len(local) == 1  # the other plane was left up to try (its probes decide)
    a.datagrams_to_send = type(a).datagrams_to_send.__get__(a)  # type: ignore[method-assign]
    assert d.run_until(d.now + 10.0, lambda: bool(d.of("a", MessageAcked)))
    assert [e.data for e in d.of("b", MessageDelivered)] == [data]  # type: ignore[attr-defined]
