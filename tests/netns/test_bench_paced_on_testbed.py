"""``braid bench paced --quick``: every stack runs over the shaped testbed
fabric and delivers, every CPU figure is there, and nothing is left behind.

No timing assertion: the figures are the benchmark's business
(docs/benchmarks.md), not a test's on a shared machine.
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


def test_bench_paced_quick_completes_and_cleans_up(tmp_path: Path) -> None:
    before = _namespaces()
    # This tree as its own baseline: the --baseline-tree path runs too.
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "bench", "paced", "--quick",
                             "--baseline-tree", str(ROOT), "--out", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "shaped/braid:" in err and "tearing down" in err  # progress lines
    data = json.loads((tmp_path / "paced.json").read_text())
    stacks = data["fabrics"]["shaped"]["stacks"]
    ran = {s for s, r in stacks.items() if not r.get("skipped")}
    assert {"braid", "baseline", "tcp"} <= ran
    for name in ran:
        r = stacks[name]
        assert "error" not in r, (name, r)
        # The datagram floor has no retransmission: on a loaded machine its
        # receiver may drop a share, which the row reports (lost_share).
        assert r["bytes"] > 0 and (r["complete"] or name == "udp"), (name, r)
        assert r["goodput_mbit"] > 0 and r["capacity_share"] > 0
        assert r["process_cpu_s_per_GB"] and all(
            v is not None and v >= 0 for v in r["process_cpu_s_per_GB"].values()), r
        for key in ("machine_busy", "machine_busy_cpu_s_per_GB", "softirq_share",
                    "stack_cpu_s_per_GB"):
            assert r[key] is not None and r[key] >= 0, (name, key, r[key])
        assert isinstance(r["cpu_saturated"], bool) and r["samples"] > 0
    for name in ("braid", "baseline"):
        procs = set(stacks[name]["process_cpu_s_per_GB"])
        assert procs == {"tx daemon", "rx daemon", "tx client", "rx client"}
        assert stacks[name]["braid_cpu_s_per_GB"] > 0
        wk = stacks[name]["wakeups"]["all"]
        assert wk["datagrams_per_s"] > 0
        assert wk["wakeups_per_s"] > 0 and wk["datagrams_per_wakeup"] > 0
    # Two targets, then one "above the datagram floor" per Braid stack that ran.
    floors = [v for v in data["fabrics"]["shaped"]["verdicts"] if v.get("floor")]
    assert len(data["fabrics"]["shaped"]["verdicts"]) == 2 + len(floors)
    assert {"braid", "udp"} <= ran and len(floors) == len({"braid", "inproc"} & ran)
    assert stacks["udp"]["process_cpu_s_per_GB"].keys() == {"tx process", "rx process"}
    assert 0 <= stacks["udp"]["lost_share"] <= 1
    assert (tmp_path / "paced.png").stat().st_size > 0
    assert "braid" in out and "tcp" in out  # the report table
    # This run's testbed namespaces (named after its pid) are gone again.
    assert not {n for n in _namespaces() - before if str(proc.pid % 100000) in n}
    leftover = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True,
                              timeout=10).stdout
    assert "bench_paced.py worker" not in leftover
