"""The eBPF ports' departure gaps: a saturated link's busy gaps sit at one
ideal frame time, a trickle records none (testbed/bpf/port.c, ``tc/gap``)."""

from __future__ import annotations

import json
import os
import subprocess
import time
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
    # Lateness: every frame that left was timed against the virtual queue,
    # and a link that keeps its rate is not behind the ideal one (a late
    # timer of a busy machine moves single frames, not the median).
    late = ebpf.late_summary(d["late_hist"], d["late_max_ns"], 10_000_000)
    assert late["frames"] >= 0.8 * out["packets"], late
    assert late["p50"] is not None and late["p50"] < 0.5, late
    trickle_late = ebpf.late_summary(ebpf.gap_delta(g0[PORT], g1[PORT])["late_hist"], None,
                                     10_000_000)
    assert trickle_late["frames"] >= 20 and trickle_late["p99"] < 0.5, trickle_late
    # The bytes lateness rests on: the far end saw every accepted byte leave
    # (the blast's frames, 1,514 bytes each, all counted at both ends).
    assert st["departed_bytes"] >= out["packets"] * 1514, st
    assert 0 <= st["accepted_bytes"] - st["departed_bytes"] < 2 * 1514, st
    print(f"10 Mbit/s blast lateness: {late}")


def test_a_shaper_behind_the_ideal_link_reads_as_lateness(make_testbed: Any) -> None:
    """The link's shaper made slower than the port's rate (as a machine whose
    shaper timers fire late would make it): frames leave ever later than the
    port's virtual queue says, and the lateness the fidelity monitor judges
    grows far past one frame time; the busy gaps alone would show only a
    steady 2x."""
    tb = make_testbed({"hosts": 2, "planes": 1,
                       "link": {"element": True, "h1:p0": {"down": {"rate": "10mbit"}}}})
    plane = tb.ebpf(0)
    port = plane._load()["ports"][PORT]
    plane._tc(ebpf.htb_commands(port["out_if"], 5_000_000, port["mtu"], replace=True,
                                buffer=int(port["settings"].get("buffer") or 256 * 1024)))
    g0 = tb.port_gaps()
    out = _send(tb, 400, 600)
    d = ebpf.gap_delta(g0[PORT], tb.port_gaps()[PORT])
    late = ebpf.late_summary(d["late_hist"], d["late_max_ns"], 10_000_000)
    assert out["packets"] > 100, out
    assert late["frames"] >= 100 and late["p99"] > 5, late
    print(f"half-rate shaper lateness: {late}")


def test_a_port_reshaped_mid_blast_keeps_its_byte_counts_level(make_testbed: Any) -> None:
    # Replacing the HTB (a rate change) drops what it held after the port
    # counted it; without a resync the link would read as behind its ideal
    # by those bytes for the rest of a busy run.
    tb = make_testbed({"hosts": 2, "planes": 1,
                       "link": {"element": True, "h1:p0": {"down": {"rate": "10mbit"}}}})
    rx = tb.popen("h1", udptool("recv", "--count", "1500", "--timeout", "12", "--idle", "1.5"),
                  stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    assert json.loads(rx.stdout.readline())["ready"]
    tx = tb.popen("h0", udptool("send", "--to", tb.address("h1", 0), "--count", "1500",
                                "--size", str(PAYLOAD), "--pps", "1240"),
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the port's queue fills within ~0.3 s
            st = tb.port_stats()[PORT]
            if st["accepted_bytes"] - st["departed_bytes"] > 20 * 1514:
                break
            time.sleep(0.05)
        held = st["accepted_bytes"] - st["departed_bytes"]
        assert held > 20 * 1514, st  # a busy queue to purge
        tb.ebpf(0).set(["h1:p0"], "down", {"rate_bps": 5_000_000})
        tx.wait(timeout=20)
        rx.communicate(timeout=20)
    finally:
        for p in (tx, rx):
            if p.poll() is None:
                p.kill()
                p.wait()
    st = tb.port_stats()[PORT]
    assert 0 <= st["accepted_bytes"] - st["departed_bytes"] < 2 * 1514, (held, st)
