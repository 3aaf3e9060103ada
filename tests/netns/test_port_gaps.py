"""The eBPF ports' departure gaps: a saturated link's busy gaps sit at one
ideal frame time, a trickle records none (testbed/bpf/port.c, ``tc/gap``)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from netns_helpers import udptool

from testbed import ebpf
from testbed.fabric import Testbed

pytestmark = pytest.mark.skipif(os.geteuid() == 0 and not ebpf.ebpf_available()[0],
                                reason=f"eBPF port unavailable: {ebpf.ebpf_available()[1]}"
                                if os.geteuid() == 0 else "needs root")
PORT = "h1:p0/down"
#: 1472 bytes of UDP payload: 1514-byte frames, 1.21 ms each at 10 Mbit/s.
PAYLOAD = 1472


def _send(tb: Testbed, count: int, pps: int) -> dict[str, Any]:
    rx = tb.popen("h1", udptool("recv", "--count", str(count), "--timeout", "12", "--idle",
                                "1.5"), stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    assert json.loads(rx.stdout.readline())["ready"]
    try:
        tb.exec("h0", udptool("send", "--to", tb.address("h1", 0), "--count", str(count),
                              "--size", str(PAYLOAD), "--pps", str(pps)),
                check=True, capture_output=True)
        out: dict[str, Any] = json.loads(rx.communicate(timeout=20)[0])
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    return out


def test_steady_blast_gaps_sit_at_one_frame_time_and_a_trickle_records_none(
        make_testbed: Any) -> None:
    tb = make_testbed({"hosts": 2, "planes": 1,
                       "link": {"element": True, "h1:p0": {"down": {"rate": "10mbit"}}}})
    assert tb.element_kind("h1:p0") == "ebpf"
    g0 = tb.port_gaps()
    assert PORT in g0 and g0[PORT]["rate_bps"] == 10_000_000
    # A trickle: 20 frames/s on a link that takes 826/s never queues.
    _send(tb, 30, 20)
    g1 = tb.port_gaps()
    trickle = ebpf.gap_summary(ebpf.gap_delta(g0[PORT], g1[PORT])["hist"])
    assert trickle["gaps"] == 0, trickle
    # A blast at 1.5 times the link rate keeps the port's queue busy.
    out = _send(tb, 1200, 1240)
    g2 = tb.port_gaps()
    d = ebpf.gap_delta(g1[PORT], g2[PORT])
    s = ebpf.gap_summary(d["hist"], d["max_units"])
    st = tb.port_stats()[PORT]
    assert out["packets"] > 600, out
    # Nearly every frame but the first left a busy queue behind it.
    assert s["gaps"] >= 0.8 * out["packets"], (s, out)
    # HTB releases frames at its rate: the median gap is one frame time (a
    # bucket's upper bound, so up to 12.5% above; an early or late timer
    # moves single gaps, not the median).
    assert 0.75 <= s["p50"] <= 1.25, (s, json.dumps(st))
    print(f"10 Mbit/s blast: {s}")
