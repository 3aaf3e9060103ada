"""Teardown leaves no namespace, veth or process — also after a failed build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from netns_helpers import links_root, ns_list, udptool

from testbed import nsutil
from testbed.fabric import Testbed, netem_available

ELEMENT_SPEC = {"hosts": 2, "planes": 2, "link": {"rate": "50mbit", "element": "userspace",
                                                  "host": {"down": {"trim": "16KB"}}}}


def test_element_testbed_teardown_via_cli(tmp_path: Path, unique_name: str) -> None:
    """`up` in one process, `down` in another: element processes and namespaces go."""
    topo = tmp_path / "t.toml"
    topo.write_text("hosts = 2\nplanes = 2\n[link]\nelement = \"userspace\"\n")
    env = {**os.environ, "BRAID_RUN_DIR": str(tmp_path / "run")}
    braid = [str(Path(sys.executable).parent / "braid"), "testbed"]
    before = links_root()
    r = subprocess.run([*braid, "up", str(topo), "--name", unique_name], env=env,
                       capture_output=True, text=True, timeout=60)
    try:
        assert r.returncode == 0, r.stderr
        state = json.loads((tmp_path / "run" / unique_name / "state.json").read_text())
        pids = [o["pid"] for o in state["objects"] if o["type"] == "process"]
        assert len(pids) == 2 and all(nsutil.pid_alive(p) for p in pids)
        veths = [o for o in state["objects"] if o["type"] == "veth"]
        assert len(veths) == 8  # 4 element links x 2 veth pairs
    finally:
        r = subprocess.run([*braid, "down", "--name", unique_name], env=env,
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not any(nsutil.pid_alive(p) for p in pids)
    assert not {n for n in ns_list() if n.startswith(f"br{unique_name}-")}
    assert links_root() == before
    r = subprocess.run([*braid, "down", "--name", unique_name], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "not found" in r.stdout


def test_failed_build_cleans_up(run_root: Path, unique_name: str,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: Testbed) -> None:
        raise KeyboardInterrupt  # as if Ctrl-C hit the build half-way

    monkeypatch.setattr(Testbed, "_routes", boom)
    with pytest.raises(KeyboardInterrupt):
        Testbed.up(ELEMENT_SPEC, name=unique_name, run_root=run_root)
    assert not {n for n in ns_list() if n.startswith(f"br{unique_name}-")}
    assert not (run_root / unique_name).exists()


def test_element_pids_gone_after_down(make_testbed: object) -> None:
    tb = make_testbed(ELEMENT_SPEC)  # type: ignore[operator]
    pids = [o["pid"] for o in tb.state.objects("process")]
    assert pids and all(nsutil.pid_alive(p) for p in pids)
    tb.down()
    assert not any(nsutil.pid_alive(p) for p in pids)
    assert not {n for n in ns_list() if n.startswith(tb.prefix)}


def test_kernel_link_down_without_element(make_testbed: object) -> None:
    tb = make_testbed({"hosts": 2, "planes": 1})  # type: ignore[operator]
    assert not tb.topo.links[0].element

    def transfer(count: int) -> int:
        rx = tb.popen("h1", udptool("recv", "--count", str(count), "--timeout", "1.5",
                                    "--idle", "0.5"), stdout=subprocess.PIPE, text=True)
        assert json.loads(rx.stdout.readline())["ready"]
        tb.exec("h0", udptool("send", "--to", tb.address("h1", 0), "--count", str(count)),
                capture_output=True, timeout=30)
        return int(json.loads(rx.communicate(timeout=10)[0])["packets"])

    tb.fault("link h1:p0 down")
    assert transfer(20) == 0
    tb.fault("link h1:p0 up")
    import time

    deadline = time.monotonic() + 5
    got = 0
    while time.monotonic() < deadline and got < 20:  # carrier comes back asynchronously
        got = transfer(20)
    assert got == 20


def test_netem_link_delay(make_testbed: object) -> None:
    ok, why = netem_available()
    if not ok:
        pytest.skip(f"sch_netem not available on this kernel: {why}")
    tb = make_testbed({"hosts": 2, "planes": 1,  # type: ignore[operator]
                       "link": {"delay": "20ms"}})
    assert not tb.topo.links[0].element  # netem carries the delay, no element needed
    r = tb.exec("h0", ["tc", "qdisc", "show", "dev", "p0"], capture_output=True, text=True)
    assert "netem" in r.stdout
