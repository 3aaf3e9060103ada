"""`braid demo --quick` end to end: byte-exact transfer through a plane kill and a
spine reboot, a real PNG, the faults fired, the dead plane silent, nothing left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import nsutil
from transport.udp import payload_for_mtu

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="braid demo needs root (network namespaces)"),
]


def _namespaces(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob(prefix + "*")) \
        if Path("/run/netns").exists() else []


@pytest.mark.timeout(960)  # the demo fails itself when delivery stops; a busy machine is slow
def test_demo_quick(tmp_path: Path, unique_name: str) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "BRAID_RUN_DIR": str(tmp_path / "run")}
    braid = str(Path(sys.executable).parent / "braid")
    prefix = f"br{unique_name}-"
    try:
        r = subprocess.run([braid, "demo", "--quick", "--capture", "--out", str(out),
                            "--name", unique_name],
                           env=env, capture_output=True, text=True, timeout=900)
        # (generous: the demo itself fails within 30 s of its transfer stalling;
        # on a busy 2-core machine a healthy run may take minutes)
    finally:
        left = _namespaces(prefix)
        if left:  # never leak namespaces, even when the demo is broken
            subprocess.run([braid, "testbed", "down", "--name", unique_name], env=env,
                           capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "=== braid demo report ===" in r.stdout
    assert left == [], f"leftover namespaces: {left}"

    rep = json.loads((out / "report.json").read_text())
    assert rep["ok"] and rep["failure"] is None
    # the run says whether the emulator kept up, in the JSON and the report
    assert rep["fidelity"]["faithful"] in (True, False), rep["fidelity"]
    assert "fidelity: " in r.stdout
    tr = rep["transfer"]
    assert tr["verified"] and tr["received_bytes"] == tr["bytes"] == 64 << 20

    png = out / "demo.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000

    fired = [f["event"] for f in rep["faults_fired"]]
    assert "plane 2 down" in fired and "plane 2 up" in fired
    assert any(e.startswith("spine s1 plane 0 reboot") for e in fired)

    (w,) = [w for w in rep["plane_down_windows"] if w["plane"] == 2]
    el = w["element_packets_to_receiver"]
    others = sum(v for p, v in el.items() if p != "2")
    # Load-independent: shares, not counts (a busy machine sends fewer packets in
    # the same window, so a fixed count fails under load). The transfer ran
    # through the window and plane 2 carried ~nothing of what crossed the fabric.
    assert w["measured_to"] > w["measured_from"], w
    assert rep["transfer"]["first_byte_at"] < w["measured_from"], (rep["transfer"], w)
    assert others > 0, w
    assert el["2"] <= 0.01 * others, w
    # the planes that stayed up carried the traffic over the whole run
    share = rep["plane_share_fabric"]
    assert all(share[p] > 0.15 for p in ("0", "1", "3")), share

    assert rep["goodput_timeline"] and rep["goodput_Mbps"]["overall"] > 0
    # Daemons size DATA to the path MTU (demo-4x4: 1500-byte IPv4 links).
    assert rep["counters"]["packets"] > (64 << 20) // payload_for_mtu(1500, v6=False)
    # no daemon / send / recv process of this demo is left running
    mine = [pid for pid in os.listdir("/proc") if pid.isdigit() and pid != str(os.getpid())
            and str(out) in nsutil.pid_cmdline(int(pid))]
    assert mine == [], mine

    # --capture: one pcap per receiver plane, decodable by braid trace
    pcaps = sorted(out.glob("h3-p*.pcap"))
    assert [p.name for p in pcaps] == [f"h3-p{i}.pcap" for i in range(4)]
    st = subprocess.run([braid, "trace", "stats", "--json", str(pcaps[0])],
                        capture_output=True, text=True, timeout=120)
    assert st.returncode == 0, st.stderr
    total = json.loads(st.stdout)["total"]
    assert total["data"] > 1000 and total["sacks"] > 50, total
    assert rep["captures"] == [str(p) for p in pcaps]
    # the daemons' key log opens a plane whose capture has no handshake
    dec = subprocess.run([braid, "trace", "decode", str(pcaps[1]), "--keylog",
                          str(out / "run" / "keylog.txt"), "--limit", "200"],
                         capture_output=True, text=True, timeout=120)
    assert dec.returncode == 0, dec.stderr
    lines = [ln for ln in dec.stdout.splitlines() if " auth=" in ln]
    assert lines and all(ln.endswith("auth=ok") for ln in lines), dec.stdout[-2000:]
