"""``braid bench wire --quick`` runs and writes its results (no speed asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench_common import replace_section, time_callable
from tools.cli import main


def test_bench_wire_quick_writes_json(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# B\n\n<!-- bench:wire:begin -->\nold\n<!-- bench:wire:end -->\n\ntail\n")
    rc = main([
        "bench", "wire", "--quick", "--batches", "1", "--out", str(tmp_path / "res"),
        "--update-docs", "--docs", str(docs),
    ])
    assert rc == 0
    data = json.loads((tmp_path / "res" / "wire.json").read_text())
    assert data["bench"] == "wire" and data["payload_bytes"] == 1400
    for what in ("send", "receive", "round_trip"):
        assert set(data[what]) >= {"full_ops_per_s", "bare_ops_per_s", "ratio"}
        assert data[what]["ratio"] > 0
    assert data["trimmed_open"]["ops_per_s"] > 0
    assert set(data["timings"]) == {
        "send_full", "send_bare", "receive_full", "receive_bare", "trimmed_open",
    }
    text = docs.read_text()
    assert "old" not in text and "full/bare" in text and text.endswith("tail\n")


def test_replace_section_appends_when_missing(tmp_path: Path) -> None:
    docs = tmp_path / "b.md"
    replace_section(docs, "x", "hello")
    replace_section(docs, "x", "again")
    text = docs.read_text()
    assert text.count("<!-- bench:x:begin -->") == 1 and "again" in text and "hello" not in text


def test_time_callable_reports_median() -> None:
    t = time_callable(lambda: None, batches=3, min_batch_s=0.001)
    assert t.batches == 3 and t.best <= t.per_call <= t.worst and t.ops_per_s > 0
