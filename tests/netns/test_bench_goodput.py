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
    r = subprocess.run([sys.executable, "-m", "tools.cli", "bench", "goodput", "--quick",
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
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
    assert not {n for n in _namespaces() - before if n.startswith("bg")}
