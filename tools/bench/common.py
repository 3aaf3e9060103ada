"""What every ``braid bench`` shares: robust timing, progress, results and docs.

Results go to ``<out>/<name>.json`` (``results/`` is git-ignored); with
``--update-docs`` the benchmark's section of ``docs/benchmarks.md``, between
``<!-- bench:<name>:begin -->`` and ``<!-- bench:<name>:end -->``, is replaced
by fresh markdown so the committed numbers always come from the tool.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.common.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DOCS = REPO_ROOT / "docs" / "benchmarks.md"


def progress(msg: str) -> None:
    """One progress line on stderr (stdout keeps the result table)."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Timing:
    """Median seconds per call over several batches, and the spread."""

    per_call: float
    best: float
    worst: float
    batches: int
    calls_per_batch: int

    @property
    def ops_per_s(self) -> float:
        return 1.0 / self.per_call

    def as_dict(self) -> dict[str, float | int]:
        return {
            "ns_per_op": self.per_call * 1e9,
            "ops_per_s": self.ops_per_s,
            "best_ns": self.best * 1e9,
            "worst_ns": self.worst * 1e9,
            "batches": self.batches,
            "calls_per_batch": self.calls_per_batch,
        }


def time_callable(
    fn: Callable[[], object], *, batches: int = 7, min_batch_s: float = 0.2,
    setup: Callable[[], object] | None = None,
) -> Timing:
    """Time ``fn()`` robustly: calibrate a batch size, run several, take the median.

    The batch size grows until one batch lasts ``min_batch_s`` so timer
    resolution and call overhead vanish; the median of ``batches`` batches
    resists a noisy neighbour. ``setup`` (untimed) runs before each batch,
    e.g. to give a decoder a fresh replay window.
    """
    n = 1
    while True:
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_batch_s / 4 or n >= 1 << 24:
            break
        n *= 4 if dt < min_batch_s / 40 else 2
    n = max(1, int(n * min_batch_s / max(dt, 1e-9)))
    samples = []
    for _ in range(batches):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return Timing(statistics.median(samples), min(samples), max(samples), batches, n)


def environment() -> dict[str, Any]:
    """Enough about the machine to make numbers comparable."""
    import cryptography

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "cpus": os.cpu_count(),
        "cryptography": cryptography.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def git_commit() -> str:
    """The commit measured (with '+dirty' when the work tree has changes)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def write_results(
    name: str, data: dict[str, Any], markdown: str, out_dir: str | Path = "results",
    *, update_docs: bool = False, docs: str | Path | None = None,
) -> Path:
    """Write ``<out_dir>/<name>.json``; with ``update_docs`` also the docs section.

    Returns the JSON path. A docs file without the section's markers gets
    the section appended, so a new benchmark needs no manual setup.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{name}.json"
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write results to {out}: {exc.strerror}") from None
    if update_docs:
        replace_section(Path(docs) if docs is not None else DEFAULT_DOCS, name, markdown)
    return path


def replace_section(docs: Path, name: str, markdown: str) -> None:
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    block = f"{begin}\n{markdown.strip()}\n{end}"
    try:
        text = docs.read_text() if docs.exists() else "# Benchmarks\n"
        i, j = text.find(begin), text.find(end)
        if i >= 0 and j > i:
            text = text[:i] + block + text[j + len(end):]
        elif i >= 0 or j >= 0:
            raise UserError(f"{docs}: unbalanced markers for bench section '{name}'")
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(text)
    except OSError as exc:
        raise UserError(f"cannot update {docs}: {exc.strerror}") from None


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*r) for r in rows])
