"""``braid bench wire --quick`` runs and writes its results (no speed asserted).

The CLI refuses ``--update-docs`` on a ``--quick`` run (a variant); the docs
section is written here by the bench's own ``run`` on the parsed arguments,
so one short run covers both the JSON and the markdown."""

from __future__ import annotations

import json
from pathlib import Path

import tools.bench.wire as wire_bench
from tools.bench.common import replace_section, time_callable
from tools.cli import build_parser
from wire.codec import c_classes


def test_bench_wire_quick_writes_json(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# B\n\n<!-- bench:wire:begin -->\nold\n<!-- bench:wire:end -->\n\ntail\n")
    args = build_parser().parse_args([
        "bench", "wire", "--quick", "--batches", "1", "--out", str(tmp_path / "res"),
        "--update-docs", "--docs", str(docs),
    ])
    assert wire_bench.run(args) == 0
    data = json.loads((tmp_path / "res" / "wire.json").read_text())
    assert data["bench"] == "wire" and data["payload_bytes"] == 1400
    timings = set(data["timings"])
    assert timings >= {"python.send", "python.receive", "python.receive_objects",
                       "python.trimmed_open", "bare_cryptography.send",
                       "bare_cryptography.receive"}
    assert data["python_trimmed_open_ns"] > 0
    if c_classes() is not None:  # both codecs, the batch calls, the C floors, socket batches
        assert timings >= {"c.send", "c.receive", "c.send_run", "c.receive_many", "c.loop",
                           "bare_evp", "io.python_drain", "io.c_drain"}
        for row in data["rows"].values():
            assert row["round_trip_max_ns"] >= row["round_trip_ns"] > 0
            assert row["ratio_to_bare_evp"] > 0
        assert data["fast_path_ratio"] > 0 and data["io"]["drain_gain"] > 0
    text = docs.read_text()
    assert "old" not in text and "× bare EVP" in text and text.endswith("tail\n")


def test_replace_section_appends_when_missing(tmp_path: Path) -> None:
    docs = tmp_path / "b.md"
    replace_section(docs, "x", "hello")
    replace_section(docs, "x", "again")
    text = docs.read_text()
    assert text.count("<!-- bench:x:begin -->") == 1 and "again" in text and "hello" not in text


def test_time_callable_reports_median() -> None:
    t = time_callable(lambda: None, batches=3, min_batch_s=0.001)
    assert t.batches == 3 and t.best <= t.per_call <= t.worst and t.ops_per_s > 0
