"""A link down that the host sees (carrier loss), with real namespaces.

``link h0:p0 unplug`` takes the far end of h0's plane-0 veth down: h0 loses
carrier and ignores its routes there, so the daemon's sends on plane 0 fail
with ENETUNREACH. The daemon must treat that as the plane being unusable
(park it, resend elsewhere), count it, never crash, deliver everything
byte-exact over plane 1, and use plane 0 again once the link is back.
No timing is asserted: every wait is on a condition, bounded generously.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

pytestmark = pytest.mark.netns


def _conn_to(stats: dict[str, Any], peer: str) -> dict[str, Any]:
    for c in stats.get("connections", []):
        if c.get("peer") == peer and c["stats"].get("state") == "established":
            return dict(c["stats"])
    raise AssertionError(f"no established connection to {peer}: {stats.get('connections')}")


def _wait_unroutable(tb: Any) -> None:
    dst, src = tb.address("h1", 0), tb.address("h0", 0)
    for _ in range(600):  # bounded: 60 s
        r = tb.exec("h0", ["ip", "route", "get", dst, "from", src], capture_output=True,
                    text=True)
        if r.returncode != 0:
            return
        time.sleep(0.1)
    raise AssertionError("h0 still routes over plane 0 after its link went down")


@pytest.mark.parametrize("element", [False, True], ids=["veth", "ebpf-element"])
def test_unplugged_link_is_routed_around_and_used_again(make_testbed: Any,
                                                        element: bool) -> None:
    from testbed.daemons import running, socket_path, start_daemons, stop_daemons
    from testbed.ebpf import ebpf_available
    from testbed.faults import compile_fault, parse_fault
    from transport.api import connect

    if element and not ebpf_available()[0]:
        pytest.skip("eBPF switch ports unavailable here")
    spec: dict[str, Any] = {"hosts": 2, "planes": 2}
    if element:
        spec["link"] = {"element": True, "rate": "200mbit"}
    tb = make_testbed(spec)

    def fault(text: str) -> None:
        for step in compile_fault(tb, parse_fault(text)):
            step.apply()

    rng = random.Random(13)
    before = [rng.randbytes(1 << 20) for _ in range(8)]
    after = [rng.randbytes(1 << 20) for _ in range(4)]

    async def exchange(a: Any, b: Any, msgs: list[bytes]) -> None:
        futs = [await a.submit("h1", m) for m in msgs]
        got = [(await asyncio.wait_for(b.recv(), 120))[1] for _ in msgs]
        for f in futs:
            await asyncio.wait_for(f, 120)
        assert sorted(got) == sorted(msgs)  # every message, byte-exact

    async def main() -> dict[str, Any]:
        a = await connect(socket_path(tb, "h0"))
        b = await connect(socket_path(tb, "h1"))
        try:
            await exchange(a, b, [b"hello"])  # the connection is up on both planes
            await asyncio.to_thread(fault, "link h0:p0 unplug")  # pyroute2: no running loop
            # The kernel applies a carrier change in its link-watch work, up to
            # a second later: wait until h0 itself has no route on plane 0
            # (until then its sends vanish silently, as into a blackhole).
            await asyncio.to_thread(_wait_unroutable, tb)
            await exchange(a, b, before)
            down = await a.stats()
            await asyncio.to_thread(fault, "link h0:p0 plug")
            # Plane 0 comes back when a probe of it is answered: wait for it
            # (bounded), keeping the connection busy meanwhile.
            deadline = time.monotonic() + 120
            while 0 in _conn_to(await a.stats(), "h1")["parked_planes"]:
                assert time.monotonic() < deadline, _conn_to(await a.stats(), "h1")
                await exchange(a, b, [b"tick"])
                await asyncio.sleep(0.05)
            await exchange(a, b, after)
            return {"down": down, "up": await a.stats()}
        finally:
            await a.close()
            await b.close()

    start_daemons(tb, keylog=False)
    try:
        res = asyncio.run(asyncio.wait_for(main(), 600))
        alive = running(tb)
    finally:
        stop_daemons(tb)
    assert sorted(alive) == ["h0", "h1"], alive  # neither daemon crashed
    io = res["down"]["io"]
    assert io["tx_unreachable"] and io["tx_unreachable"][0] > 0, io
    assert not io["tx_unreachable"][1:] or not any(io["tx_unreachable"][1:]), io
    conn = _conn_to(res["down"], "h1")
    assert conn["unreachable_sends"] > 0, conn
    log = _conn_to(res["up"], "h1")["plane_log"]
    parks = [e for e in log if e[1] == 0 and e[2] == "parked"]
    assert parks and parks[0][4] == "local", (log, conn, io)  # parked on the send error itself
    assert any(e[1] == 0 and e[2] == "up" and e[0] > parks[0][0] for e in log), log
    assert 0 not in _conn_to(res["up"], "h1")["parked_planes"]
