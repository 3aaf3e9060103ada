"""``braid perf`` and ``braid testbed daemons`` on a real namespace testbed:
byte-exact streams (reverse, parallel), JSON, exit codes, a fault timeline that
kills every plane (a one-line failure, never a hang), and teardown of daemons."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import nsutil

REPO = Path(__file__).resolve().parents[2]
BRAID = str(Path(sys.executable).parent / "braid")
SPEC = """hosts = 2
planes = 4
[fabric]
kind = "switch"
[link]
rate = "100mbit"
buffer = "256KB"
[link.host]
element = true
"""


@pytest.fixture
def bed(unique_name: str) -> Iterator[tuple[str, dict[str, str], Path]]:
    run = Path(tempfile.mkdtemp(prefix="brperf"))  # short: AF_UNIX paths
    env = {**os.environ, "BRAID_RUN_DIR": str(run)}
    topo = run / "topo.toml"
    topo.write_text(SPEC)
    r = subprocess.run([BRAID, "testbed", "up", str(topo), "--name", unique_name], env=env,
                       capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        yield unique_name, env, run
    finally:
        subprocess.run([BRAID, "testbed", "down", "--name", unique_name], env=env,
                       capture_output=True, timeout=120)
        shutil.rmtree(run, ignore_errors=True)


def _perf(env: dict[str, str], *args: str, timeout: float = 200
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BRAID, "perf", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _daemon_pids(run: Path, name: str) -> list[int]:
    state = json.loads((run / name / "state.json").read_text())
    return [o["pid"] for o in state["objects"] if o.get("role") == "daemon" and o.get("pid")]


def test_perf_reverse_parallel_json(bed: tuple[str, dict[str, str], Path]) -> None:
    name, env, run = bed
    r = _perf(env, "h0", "h1", "--size", "6MiB", "--parallel", "2", "--reverse", "--json",
              "--name", name)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["verified"] and res["complete"] and res["failure"] is None
    assert res["src"] == "h1" and res["dst"] == ["h0"]
    assert [s["src"] for s in res["streams"]] == ["h1", "h1"]
    assert res["bytes"] == 2 * (6 << 20)
    assert all(s["verified"] and s["bytes"] == 6 << 20 for s in res["streams"])
    assert sorted(res["plane_share"]) == ["0", "1", "2", "3"]
    assert res["intervals"] and res["delivery_gap_s"]["max"] >= res["delivery_gap_s"]["median"]
    assert res["daemons_started"] == ["h1", "h0"]
    # the run says whether the emulator kept up (machine CPU, the ports' gaps)
    fid = res["fidelity"]
    assert fid["faithful"] in (True, False) and isinstance(fid["reasons"], list), fid
    assert 0.0 <= fid["cpu_saturated_share"] <= 1.0, fid
    assert fid["faithful"] == (not fid["reasons"]), fid
    # the daemons it started are gone again, and recorded as gone
    assert not any(nsutil.pid_alive(p) for p in _daemon_pids(run, name))


def test_perf_fails_in_one_line_when_every_plane_dies(
        bed: tuple[str, dict[str, str], Path]) -> None:
    name, env, run = bed
    tl = run / "kill.toml"
    tl.write_text('events = ["at 0.3 plane 0 down", "at 0.3 plane 1 down", '
                  '"at 0.3 plane 2 down", "at 0.3 plane 3 down"]\n')
    r = _perf(env, "h0", "h1", "--size", "1GiB", "--timeline", str(tl), "--stall-timeout",
              "20", "--name", name)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("braid perf: FAILED: "), r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "fault at" in r.stdout and "INCOMPLETE" in r.stdout
    assert "  fidelity: " in r.stdout


def test_daemons_up_status_and_down_removes_them(
        bed: tuple[str, dict[str, str], Path]) -> None:
    name, env, run = bed
    up = subprocess.run([BRAID, "testbed", "daemons", "up", "--name", name], env=env,
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    pids = _daemon_pids(run, name)
    assert len(pids) == 2 and all(nsutil.pid_alive(p) for p in pids)
    st = subprocess.run([BRAID, "testbed", "status", "--name", name, "--json"], env=env,
                        capture_output=True, text=True, timeout=60)
    daemons = json.loads(st.stdout)["daemons"]
    assert sorted(daemons) == ["h0", "h1"] and all(d["alive"] for d in daemons.values())
    # a perf run uses the running daemons and leaves them running
    r = _perf(env, "h0", "h1", "--size", "2MiB", "--json", "--name", name)
    assert r.returncode == 0 and json.loads(r.stdout)["daemons_started"] == [], r.stderr
    assert all(nsutil.pid_alive(p) for p in pids)
    # 'testbed down' removes daemons like every other recorded process
    os.kill(pids[0], signal.SIGSTOP)  # even one that does not answer SIGTERM
    dn = subprocess.run([BRAID, "testbed", "down", "--name", name], env=env,
                        capture_output=True, text=True, timeout=120)
    assert dn.returncode == 0, dn.stderr
    assert not any(nsutil.pid_alive(p) for p in pids)


def test_perf_interrupt_is_one_line(bed: tuple[str, dict[str, str], Path]) -> None:
    name, env, run = bed
    p = subprocess.Popen([BRAID, "perf", "h0", "h1", "--size", "1GiB", "--name", name],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        for _ in range(200):  # wait for the first interval line (bounded)
            line = p.stdout.readline()
            if "Mbit/s" in line or not line:
                break
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("braid perf: interrupted after"), err
    # the daemons it started are stopped, also on Ctrl-C
    assert not any(nsutil.pid_alive(pid) for pid in _daemon_pids(run, name))


def test_perf_inproc_runs_endpoints_in_the_workers(
        bed: tuple[str, dict[str, str], Path]) -> None:
    name, env, run = bed
    r = _perf(env, "h0", "h1", "--inproc", "--size", "32MiB", "--json", "--name", name)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["inproc"] and res["verified"] and res["complete"] and res["failure"] is None
    assert res["bytes"] == 32 << 20 and res["goodput_bps"] > 0
    assert sorted(res["plane_share"]) == ["0", "1", "2", "3"]
    assert res["intervals"] and res["daemons_started"] == [] and not _daemon_pids(run, name)
    # CPU of the run's Braid processes: the two workers and the coordinator
    assert sorted(res["cpu_s"]) == ["perf", "worker h0", "worker h1"]
    assert res["cpu_s"]["worker h0"] > 0 and res["cpu_s_per_GB"] > 0
    # the workers are gone, nothing of theirs left in the namespaces
    left = subprocess.run(["pgrep", "-af", "tools.cli.perf_run worker"], capture_output=True,
                          text=True)
    assert str(run) not in left.stdout
    # the human form: per-interval lines and the summary with its CPU line
    r = _perf(env, "h0", "h1", "--inproc", "--size", "4MiB", "--name", name)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "in-process endpoints" in r.stdout and "verified" in r.stdout
    assert "CPU-s/GB" in r.stdout
    # with a daemon serving h0, --inproc refuses in one line
    up = subprocess.run([BRAID, "testbed", "daemons", "up", "--name", name], env=env,
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    r = _perf(env, "h0", "h1", "--inproc", "--size", "1MiB", "--name", name)
    assert r.returncode != 0 and "a daemon already serves" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
