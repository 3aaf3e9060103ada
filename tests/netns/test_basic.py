"""Bring-up, addressing, exec and teardown of a small single-switch fabric."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from netns_helpers import links_root, ns_list, udptool

from testbed.errors import TestbedError
from testbed.fabric import Testbed

SPEC = {"hosts": 2, "planes": 2, "link": {"rate": "100mbit"}}


def test_up_exec_down_leaves_nothing(run_root: Path, unique_name: str) -> None:
    before_links = links_root()
    tb = Testbed.up(SPEC, name=unique_name, run_root=run_root)
    try:
        assert tb.hosts == ["h0", "h1"] and tb.planes == [0, 1]
        assert tb.address("h1", 1) == "10.1.1.2"
        ours = {n for n in ns_list() if n.startswith(tb.prefix)}
        assert ours == {tb.prefix + n for n in ("h0", "h1", "p0-sw", "p1-sw")}
        state = json.loads((run_root / unique_name / "state.json").read_text())
        assert state["status"] == "up"
        for plane in tb.planes:
            rx = tb.popen("h1", udptool("recv", "--count", "20", "--timeout", "5"),
                          stdout=subprocess.PIPE, text=True)
            assert json.loads(rx.stdout.readline())["ready"]
            tb.exec("h0", udptool("send", "--to", tb.address("h1", plane), "--count", "20"),
                    check=True, capture_output=True)
            out = json.loads(rx.communicate(timeout=10)[0])
            assert out["packets"] == 20
        # a process left running inside a host is killed by down()
        sleeper = tb.popen("h0", ["sleep", "30"])
    finally:
        tb.down()
    assert sleeper.wait(timeout=5) is not None
    assert not {n for n in ns_list() if n.startswith(tb.prefix)}
    assert links_root() == before_links
    assert not (run_root / unique_name).exists()
    tb.down()  # idempotent


def test_up_refuses_live_name_and_down_after_crash(run_root: Path, unique_name: str) -> None:
    tb = Testbed.up(SPEC, name=unique_name, run_root=run_root)
    try:
        with pytest.raises(TestbedError, match="already up"):
            Testbed.up(SPEC, name=unique_name, run_root=run_root)
    finally:
        # simulate a crash: forget the object, tear down from the run dir only
        from testbed.fabric import down_by_name

        assert down_by_name(unique_name, run_root=run_root)
    assert not {n for n in ns_list() if n.startswith(tb.prefix)}
    assert not down_by_name(unique_name, run_root=run_root)


def test_cli_up_status_exec_down(tmp_path: Path, unique_name: str) -> None:
    topo = tmp_path / "t.toml"
    topo.write_text("hosts = 2\nplanes = 2\n[link]\nrate = '100mbit'\n")
    env = {**os.environ, "BRAID_RUN_DIR": str(tmp_path / "run")}
    braid = [str(Path(os.sys.executable).parent / "braid")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(braid + list(args), capture_output=True, text=True, env=env,
                              timeout=60)

    r = cli("testbed", "up", str(topo), "--name", unique_name)
    try:
        assert r.returncode == 0, r.stderr
        r = cli("testbed", "up", str(topo), "--name", unique_name)
        assert r.returncode == 2 and "already up" in r.stderr
        r = cli("testbed", "exec", "--name", unique_name, "h0", "--", "cat",
                "/proc/sys/net/ipv4/ip_forward")
        assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
        r = cli("testbed", "status", "--name", unique_name)
        assert r.returncode == 0 and "h1" in r.stdout and "10.1.1.2" in r.stdout, r.stderr
        tl = tmp_path / "tl.txt"
        tl.write_text("at 0.1 link h1:p0 down\nat 200ms link h1:p0 up\n")
        r = cli("testbed", "run", "--name", unique_name, str(tl), "--", "sleep", "0.6")
        assert r.returncode == 0, r.stderr
        assert "link h1:p0 down" in r.stdout and "link h1:p0 up" in r.stdout
        tl.write_text("at 0.1 link h1:p0 down\nat 0.2 link h1:p0 loss 5%\n")
        r = cli("testbed", "run", "--name", unique_name, str(tl))
        assert r.returncode == 2 and "tl.txt:2" in r.stderr and "no link element" in r.stderr
    finally:
        r = cli("testbed", "down", "--name", unique_name)
    assert r.returncode == 0, r.stderr
    assert not {n for n in ns_list() if n.startswith(f"br{unique_name}-")}
