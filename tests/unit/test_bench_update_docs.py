"""``braid bench <name> --update-docs`` writes the docs only from the plain
run: a variant (``--quick``, or a bench option that changes what is
measured) is refused before the bench starts. Parse-level: no bench runs."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from tools.cli import main
from tools.cli.bench import BENCHES


def _stub(monkeypatch: pytest.MonkeyPatch, bench: str) -> list[argparse.Namespace]:
    """Replace the bench's ``run``; the list collects the arguments of each call."""
    calls: list[argparse.Namespace] = []

    def run(args: argparse.Namespace) -> int:
        calls.append(args)
        return 0

    monkeypatch.setattr(importlib.import_module(BENCHES[bench]), "run", run)
    return calls


@pytest.mark.parametrize(("argv", "named"), [
    (["sim", "--quick"], "--quick"),
    (["sim", "--only", "a"], "--only"),
    (["sim", "--spray-run", "8"], "--spray-run"),
    (["wire", "--payload", "64"], "--payload"),
    (["goodput", "--stacks", "braid"], "--stacks"),
    (["goodput", "--size", "1MiB", "--profile"], "--size"),
    (["trace", "--no-tshark"], "--no-tshark"),
    (["endpoint", "--idle", "0,8"], "--idle"),
    (["element", "--quick"], "--quick"),
    (["paced", "--rate", "50"], "--rate"),
    (["paced", "--quick", "--rounds", "2"], "--quick"),
])
def test_a_variant_with_update_docs_is_refused_before_the_bench_runs(
        argv: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls = _stub(monkeypatch, argv[0])
    assert main(["bench", *argv, "--update-docs", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert not calls
    assert "variant" in err and named in err and f"write to {tmp_path}/ only" in err, err


@pytest.mark.parametrize("argv", [
    ["sim"],
    ["wire", "--batches", "5"],
    ["goodput", "--profile"],
    ["paced", "--rounds", "2", "--baseline-tree", "/elsewhere"],
    ["element"],
])
def test_the_plain_run_updates_the_docs(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Options that only repeat or add to what is measured keep a run plain."""
    calls = _stub(monkeypatch, argv[0])
    assert main(["bench", *argv, "--update-docs"]) == 0
    assert len(calls) == 1 and calls[0].update_docs


def test_a_variant_without_update_docs_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stub(monkeypatch, "sim")
    assert main(["bench", "sim", "--quick", "--only", "a"]) == 0
    assert len(calls) == 1


def test_claims_applies_its_own_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The claims bench names a variant and writes it to --out itself."""
    calls = _stub(monkeypatch, "claims")
    assert main(["bench", "claims", "--quick", "--update-docs"]) == 0
    assert len(calls) == 1
