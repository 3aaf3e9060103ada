"""Regression guard for the real-I/O path: ``braid bench goodput --quick``.

Every stack (Braid at 1500 and jumbo MTU, kernel TCP, aioquic) must move
its whole payload between two namespaces. No timing assertion: speed is the
benchmark's business (docs/benchmarks.md), not a test's on a busy machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_bench_goodput_quick_completes(tmp_path: Path) -> None:
    before = _namespaces()
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "bench", "goodput", "--quick",
                             "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    data = json.loads((tmp_path / "goodput.json").read_text())
    results = data["results"]
    assert set(results) == {"braid", "braid-jumbo", "tcp", "quic"}
    for stack, res in results.items():
        assert res["complete"], f"{stack} did not deliver everything: {res}"
        assert res["bytes"] >= data["size"]
    for stack in ("braid", "braid-jumbo"):
        detail = results[stack]["detail"]
        assert detail["failed"] is None, detail
    # The benchmark's namespaces are gone again.
    # (Only this run's: their names end in the bench process's pid; another
    # process on the machine may be running a benchmark of its own.)
    assert not {n for n in _namespaces() - before
                if n.startswith("bg") and n.endswith(str(proc.pid % 100000))}


def test_bench_goodput_braid_beside_idle_connections_completes(tmp_path: Path) -> None:
    """``braid-idle``: the transfer beside 16 established idle connections
    delivers everything, and the run reports its ratio to plain ``braid``."""
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "bench", "goodput", "--stacks",
                           "braid,braid-idle", "--size", "8MiB", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "goodput.json").read_text())
    for stack in ("braid", "braid-idle"):
        res = data["results"][stack]
        assert res["complete"] and res["bytes"] >= data["size"], res
        assert res["detail"]["failed"] is None, res["detail"]
    assert data["ratios"]["braid_idle_vs_braid"] > 0
