"""Where ``braid bench claims`` writes its report: the plain full matrix may
rewrite the current results in docs/claims.md, a variant run never does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.claims.naming import DOCS_NAME, is_variant, run_name
from tools.claims.report import write_all
from tools.claims.rows import DEFAULT_ROWS, STACKS

DOC = """# The claims

Method text that stays.

<!-- bench:claims:begin -->
the previous current results
<!-- bench:claims:end -->

Reasons that stay.
"""


def _run(**over: Any) -> dict[str, Any]:
    """A claims.json as ``braid bench claims`` writes it, with every row
    recorded as raised (the report must still be written) and no transfers."""
    data: dict[str, Any] = {
        "bench": "claims", "quick": False, "stacks": list(STACKS), "hosts": 11,
        "planes": 2, "rate_mbit": 100, "mtu": 1500, "connection": {}, "queue_wait": False,
        "daemon_qlog": False, "element": "eBPF switch port", "transfers": [],
        "rows": {r: {"error": "RuntimeError: not measured here"} for r in DEFAULT_ROWS},
        "environment": {"time": "2026-12-04T10:00:00+0000", "machine": "x86_64", "cpus": 2,
                        "system": "Linux test", "python": "3.11.7"},
        "commit": "abc1234", "seconds": 1.0}
    data.update(over)
    return data


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs" / "claims.md"
    docs.parent.mkdir()
    docs.write_text(DOC)
    return docs


def test_the_plain_full_run_rewrites_the_current_results(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    data = _run()
    assert not is_variant(data) and run_name(data) == DOCS_NAME
    out = tmp_path / "results"
    write_all(data, out, tmp_path / "docs" / "claims", update_docs=True, docs=str(docs))
    text = docs.read_text()
    assert "the previous current results" not in text
    assert "at commit `abc1234`" in text and "Rows that raised: invisibility" in text
    assert text.count("<!-- bench:claims:begin -->") == 1
    assert text.startswith("# The claims\n\nMethod text that stays.")
    assert text.rstrip().endswith("Reasons that stay.")
    assert json.loads((out / "claims.json").read_text())["commit"] == "abc1234"
    assert "at commit `abc1234`" in (out / "claims.md").read_text()


@pytest.mark.parametrize("over", [
    {"rows": {"incast": {"error": "x"}}},                       # some rows only
    {"quick": True},
    {"queue_wait": True},
    {"daemon_qlog": True},
    {"connection": {"ack_delay": 3e-4}},
    {"mtu": 4208},
    {"planes": 4, "rate_mbit": 50},
    {"stacks": ["braid"]},
    {"element": "userspace (AF_PACKET) link element"},
])
def test_a_variant_writes_to_its_out_directory_only(tmp_path: Path, over: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    docs = _docs(tmp_path)
    data = _run(**over)
    assert is_variant(data) and run_name(data).startswith(DOCS_NAME + "-")
    out = tmp_path / "results"
    plots = tmp_path / "docs" / "claims"
    write_all(data, out, plots, update_docs=True, docs=str(docs))
    assert docs.read_text() == DOC  # untouched, not even a section appended
    assert not plots.exists()  # no picture of a variant lands in the docs
    assert json.loads((out / "claims.json").read_text())["commit"] == "abc1234"
    assert "at commit `abc1234`" in (out / "claims.md").read_text()
    assert "left as it is" in capsys.readouterr().err


def test_a_variant_s_plots_keep_the_name_its_json_gives(tmp_path: Path) -> None:
    """The JSON is written with sorted keys, so the rows come back in another
    order; the name of the plots must not change with it."""
    rows = {r: {"error": "x"} for r in reversed(DEFAULT_ROWS)}
    out = tmp_path / "results"
    write_all(_run(rows=rows, quick=True), out, out, update_docs=False, docs=None)
    again = json.loads((out / "claims.json").read_text())
    assert list(again["rows"]) != list(rows)
    assert run_name(again) == run_name(_run(rows=rows, quick=True))


def test_no_docs_without_update_docs(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    write_all(_run(), tmp_path / "results", tmp_path / "results", update_docs=False,
              docs=str(docs))
    assert docs.read_text() == DOC
    assert (tmp_path / "results" / "claims.md").exists()


def test_the_report_names_no_tracker_or_sitting() -> None:
    """The generated section lands in docs/claims.md, which states results,
    not a diary (tests/unit/test_docs_reference.py holds the docs to it)."""
    from tools.claims.report import markdown

    def steps(n: int, p100: float) -> dict[str, Any]:
        return {"n": n, "p50": 0.03, "p99": 0.05, "p100": p100, "complete": True, "rtos": 0}

    inv = {st: {"fault_free": steps(200, 0.06), "faulted": steps(180, p100),
                "ratio_p100": p100 / 0.06}
           for st, p100 in (("braid", 0.07), ("tcp", 1.2), ("mptcp", 0.9))}
    md = markdown(_run(rows={"invisibility": {"per_stack": inv}}), [], None)
    assert "**Targets, Braid today** (same run)" in md and "| braid | 200 |" in md
    assert "sitting" not in md and "issue" not in md.lower()
