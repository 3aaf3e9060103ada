"""Modules in the core packages stay under 600 lines (docs/STYLE: split by
responsibility before a module becomes the god object). The C codec's
source (wire/_fastwire.c) is not Python and is not counted."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("transport", "congestion", "wire")
LIMIT = 600


def _sizes() -> dict[str, int]:
    return {str(p.relative_to(REPO)): len(p.read_text().splitlines())
            for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def test_no_core_module_over_600_lines() -> None:
    over = {name: n for name, n in _sizes().items() if n > LIMIT}
    assert over == {}, f"modules over {LIMIT} lines (split them by responsibility): {over}"

