"""Modules in the core packages stay under 600 lines: split by
responsibility before a module becomes the god object (STYLE: aioquic's
3.6k-line connection is the warning). The compiled codec's C sources count
as modules too."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("transport", "congestion", "wire")
SUFFIXES = ("*.py", "*.c", "*.h")
LIMIT = 600


def _sizes() -> dict[str, int]:
    return {str(p.relative_to(REPO)): len(p.read_text().splitlines())
            for pkg in PACKAGES for pattern in SUFFIXES
            for p in sorted((REPO / pkg).rglob(pattern))}


def test_no_core_module_over_600_lines() -> None:
    sizes = _sizes()
    assert any(name.endswith(".c") for name in sizes)  # the C sources are seen
    over = {name: n for name, n in sizes.items() if n > LIMIT}
    assert over == {}, f"modules over {LIMIT} lines (split them by responsibility): {over}"
