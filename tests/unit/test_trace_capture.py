"""Capture for real, in namespaces this test creates and removes (root only).

Both backends (tcpdump and the pure-Python AF_PACKET writer), testbed
host/plane resolution from a run directory, ``--all``, and the fixture
generator itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.cli import main as braid_main
from tools.trace import capture
from tools.trace.afpacket import bpf_udp_port
from tools.trace.decode import read_packets
from wire.codec import Sealer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import make_fixtures  # noqa: E402

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 `ip` is not installed"),
]
BACKENDS = ["afpacket"] + (["tcpdump"] if shutil.which("tcpdump") else [])


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"brtrace-t{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _send_in(netns: str, n: int, port: int = 4747) -> None:
    s = make_fixtures.socket_in(netns, 0, "127.0.0.1")
    seal = Sealer(None, dcid=9)
    try:
        for psn in range(n):
            s.sendto(seal.seal_data(psn=psn, ev=1, plane=0, msg_id=0, msg_offset=0, msg_len=3,
                                    timestamp=0, payload=b"abc"), ("127.0.0.1", port))
        s.sendto(b"not braid", ("127.0.0.1", 5555))  # filtered out by the capture
    finally:
        s.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_capture_backends_in_a_namespace(netns: str, backend: str, tmp_path: Path) -> None:
    out = tmp_path / f"{backend}.pcap"
    cap = capture.start(capture.Target(out, netns, "lo"), backend=backend)
    try:
        cap.wait_ready()
        _send_in(netns, 5)
        time.sleep(0.3)
    finally:
        assert cap.stop() == 0
    pkts = list(read_packets(out))
    # Loopback: every packet once (not also as its outgoing copy), only port 4747.
    assert [p.psn for p in pkts] == [0, 1, 2, 3, 4]
    assert all(p.udp.dport == 4747 and p.ptype_name == "DATA" for p in pkts)


def test_afpacket_stops_after_count(netns: str, tmp_path: Path) -> None:
    out = tmp_path / "n.pcap"
    cap = capture.start(capture.Target(out, netns, "lo"), backend="afpacket", count=3)
    cap.wait_ready()
    _send_in(netns, 6)
    cap.proc.wait(10)
    cap.stop()
    assert len(list(read_packets(out))) == 3


def test_bpf_program_is_well_formed() -> None:
    prog = bpf_udp_port(4747)
    assert prog[-2] == (0x06, 0, 0, 65535) and prog[-1] == (0x06, 0, 0, 0)
    for i, (code, jt, jf, _k) in enumerate(prog):
        if code & 0x07 == 0x05:  # jumps stay inside the program
            assert i + 1 + jt < len(prog) and i + 1 + jf < len(prog)


@pytest.fixture
def fake_testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Two 'hosts' as a testbed would name them, each with plane NICs p0/p1 joined by veths."""
    tag = uuid.uuid4().hex[:4]
    prefix = f"brt{tag}-"
    hosts = {h: prefix + h for h in ("h0", "h1")}
    run = tmp_path / "run"
    (run / f"t{tag}").mkdir(parents=True)
    objs: list[dict[str, object]] = [{"type": "netns", "name": ns} for ns in hosts.values()]
    try:
        for ns in hosts.values():
            subprocess.run(["ip", "netns", "add", ns], check=True)
        for p in (0, 1):
            subprocess.run(["ip", "-n", hosts["h0"], "link", "add", f"p{p}", "type", "veth",
                            "peer", "name", f"p{p}", "netns", hosts["h1"]], check=True)
            objs.append({"type": "veth", "ns": hosts["h0"], "ifname": f"p{p}",
                         "peer_ns": hosts["h1"], "peer": f"p{p}"})
            for i, ns in enumerate(hosts.values()):
                subprocess.run(["ip", "-n", ns, "addr", "add", f"10.{p}.{i}.2/16", "dev",
                                f"p{p}"], check=True)
                subprocess.run(["ip", "-n", ns, "link", "set", f"p{p}", "up"], check=True)
        (run / f"t{tag}" / "state.json").write_text(json.dumps(
            {"name": f"t{tag}", "prefix": prefix, "status": "up", "objects": objs}))
        monkeypatch.setenv("BRAID_RUN_DIR", str(run))
        yield hosts
    finally:
        for ns in hosts.values():
            subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)


def _send_plane(hosts: dict[str, str], plane: int, n: int) -> None:
    s = make_fixtures.socket_in(hosts["h0"], 0, f"10.{plane}.0.2")
    seal = Sealer(None, dcid=plane + 1)
    try:
        for psn in range(n):
            dgram = seal.seal_data(psn=psn, ev=7, plane=plane, msg_id=0, msg_offset=0,
                                   msg_len=1, timestamp=0, payload=b"x")
            s.sendto(dgram, (f"10.{plane}.1.2", 4747))
            time.sleep(0.01)
    finally:
        s.close()


def _run_cli_while(argv: list[str], action: object, ready: list[Path]) -> int:
    """Run the capture CLI in a thread; once every file in ``ready`` exists (a
    capture opens its file only after its socket listens), run ``action``.
    Waiting for the files, not a fixed sleep: a busy machine starts the capture
    processes late, and packets sent before they listen are never seen."""
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(braid_main(argv)))
    t.start()
    deadline = time.monotonic() + 30
    while not all(f.exists() for f in ready) and time.monotonic() < deadline:
        time.sleep(0.05)
    action()  # type: ignore[operator]
    t.join(60)
    assert not t.is_alive()
    return result[0]


def test_capture_host_plane_via_testbed(fake_testbed: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "h1p1.pcap"
    code = _run_cli_while(
        ["trace", "capture", "--host", "h1", "--plane", "1", "-o", str(out), "--duration", "6"],
        lambda: (_send_plane(fake_testbed, 1, 4), _send_plane(fake_testbed, 0, 2)), [out])
    assert code == 0
    pkts = list(read_packets(out))
    assert [(p.plane, p.psn) for p in pkts] == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_capture_all_interfaces(fake_testbed: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "all"
    argv = ["trace", "capture", "--all", "-o", str(out), "--duration", "6",
            "--backend", "afpacket"]
    files = [out / f"h{h}-p{p}.pcap" for h in (0, 1) for p in (0, 1)]
    code = _run_cli_while(
        argv, lambda: (_send_plane(fake_testbed, 0, 2), _send_plane(fake_testbed, 1, 3)), files)
    assert code == 0
    counts = {f.name: len(list(read_packets(f))) for f in sorted(out.glob("*.pcap"))}
    assert counts == {"h0-p0.pcap": 2, "h0-p1.pcap": 3, "h1-p0.pcap": 2, "h1-p1.pcap": 3}


def test_fixture_generator_reproduces_the_committed_shape(tmp_path: Path) -> None:
    """Regenerating the fixtures gives the same packets (times aside) as committed."""
    secret = make_fixtures.load_key_file(make_fixtures.HERE / "cluster.key")
    pcap = tmp_path / "session.pcap"
    make_fixtures.record(pcap, "afpacket", "session", secret)
    fresh = [(p.ptype_name, p.psn, p.trim_kind, p.udp.dscp, p.udp.ecn) for p in read_packets(pcap)]
    committed = [(p.ptype_name, p.psn, p.trim_kind, p.udp.dscp, p.udp.ecn)
                 for p in read_packets(make_fixtures.HERE / "session.pcap")]
    assert fresh == committed


def test_capture_errors_are_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAID_RUN_DIR", str(tmp_path / "none"))
    assert braid_main(["trace", "capture", "--host", "h0", "-o", str(tmp_path / "x.pcap")]) == 2
    assert braid_main(["trace", "capture", "--netns", "brtrace-missing", "--iface", "lo",
                       "-o", str(tmp_path / "y.pcap"), "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "no running testbed" in err and "failed" in err


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
def test_capture_on_a_real_testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--all`` and ``--host/--plane`` against ``braid testbed up`` (skipped if it fails)."""
    pytest.importorskip("testbed.fabric", reason="the testbed package is not there yet")
    name = f"tr{uuid.uuid4().hex[:6]}"
    run = tmp_path / "run"
    env = dict(os.environ, BRAID_RUN_DIR=str(run))
    braid = [sys.executable, "-m", "tools.cli", "testbed"]
    topo = ROOT / "examples" / "two-hosts-4-planes.toml"
    up = subprocess.run([*braid, "up", str(topo), "--name", name], env=env, capture_output=True,
                        text=True, timeout=120, cwd=ROOT)
    try:
        if up.returncode != 0:
            pytest.skip(f"braid testbed up failed: {up.stderr.strip()[-300:]}")
        monkeypatch.setenv("BRAID_RUN_DIR", str(run))
        prefix = json.loads((run / name / "state.json").read_text())["prefix"]
        hosts = {"h0": prefix + "h0", "h1": prefix + "h1"}
        out = tmp_path / "all"
        code = _run_cli_while(
            ["trace", "capture", "--all", "-o", str(out), "--duration", "6"],
            lambda: (_send_plane_testbed(hosts, 2, 3)),
            [out / f"h{h}-p{p}.pcap" for h in (0, 1) for p in range(4)])
        assert code == 0
        counts = {f.name: len(list(read_packets(f))) for f in out.glob("*.pcap")}
        assert len(counts) == 8  # 2 hosts x 4 planes
        assert counts["h0-p2.pcap"] == counts["h1-p2.pcap"] == 3
        assert sum(counts.values()) == 6
    finally:
        subprocess.run([*braid, "down", "--name", name], env=env, capture_output=True,
                       timeout=120, cwd=ROOT)


def _send_plane_testbed(hosts: dict[str, str], plane: int, n: int) -> None:
    """h0 → h1 on one plane, testbed addressing (host i, plane p = 10.p.i.2)."""
    s = make_fixtures.socket_in(hosts["h0"], 0, f"10.{plane}.0.2")
    seal = Sealer(None, dcid=0x55)
    try:
        for psn in range(n):
            s.sendto(seal.seal_data(psn=psn, ev=3, plane=plane, msg_id=0, msg_offset=0,
                                    msg_len=1, timestamp=0, payload=b"y"),
                     (f"10.{plane}.1.2", 4747))
            time.sleep(0.01)
    finally:
        s.close()
