"""Dual-stack fabric: IPv6 ECMP (ports + flow label hashed) and IPv6 trimming,
on the eBPF port and on the userspace element."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from netns_helpers import udptool

from testbed.fabric import Testbed
from wire.constants import Dscp

SPEC: dict[str, Any] = {
    "hosts": 4, "planes": 1, "ipv6": True,
    "fabric": {"kind": "leafspine", "leaves": 2, "spines": 2},
    "link": {"rate": "100mbit", "element": True,
             "l1-s0:p0": {"down": {"rate": "5mbit", "trim": "12KB", "ecn": "4KB"}}},
}


@pytest.fixture(scope="module", params=["ebpf", "userspace"])
def tb(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
       ) -> Iterator[Testbed]:
    bed = Testbed.up(SPEC, name=f"v{request.param[0]}{os.getpid() % 100000}",
                     run_root=tmp_path_factory.mktemp("run"), element=request.param)
    try:
        yield bed
    finally:
        bed.down()


def transfer6(tb: Testbed, count: int, *send_args: str) -> dict[str, Any]:
    rx = tb.popen("h3", udptool("recv", "--family", "6", "--count", str(count), "--timeout",
                                "8", "--idle", "0.5"), stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(rx.stdout.readline())["ready"]
        tb.exec("h0", udptool("send", "--to", tb.address("h3", 0, family=6), "--count",
                              str(count), *send_args), check=True, capture_output=True)
        return json.loads(rx.communicate(timeout=15)[0])  # type: ignore[no-any-return]
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()


def test_addresses(tb: Testbed) -> None:
    assert tb.address("h3", 0, family=6) == "fd00:0:0:3::2"
    assert tb.address("h3", 0) == "10.0.3.2"


def test_ipv6_ecmp_spread(tb: Testbed) -> None:
    before = [tb.link_counters(f"p0-s{k}", "l1")["tx_packets"] for k in range(2)]
    out = transfer6(tb, 320, "--sports", "30000-30031", "--size", "300", "--pps", "6000")
    assert out["packets"] == 320
    per_spine = [tb.link_counters(f"p0-s{k}", "l1")["tx_packets"] - before[k]
                 for k in range(2)]
    assert min(per_spine) > 320 * 0.2, per_spine


def test_ipv6_trim_and_mark(tb: Testbed) -> None:
    out = transfer6(tb, 600, "--braid", "--size", "1200", "--sports", "40000-40063",
                    "--tos", hex(Dscp.DATA << 2 | 2))
    time.sleep(0.6)
    st = tb.port_stats()["l1-s0:p0/down"]
    assert st["trimmed"] > 0 and st["marked"] > 0
    # the plain IPv6 UDP socket accepted the rewritten headers: UDP checksum right
    assert out["sizes"].get("56", 0) >= st["trimmed"] * 0.9, out
    assert out["tos"].get(str(Dscp.TRIMMED << 2 | 2), 0) >= st["trimmed"] * 0.9, out
    assert out["tos"].get(str(Dscp.DATA << 2 | 3), 0) > 0, out
