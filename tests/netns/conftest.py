"""Fixtures for the namespace suite: root only, every testbed torn down."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_counter = itertools.count()


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) not installed"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"`ip netns` unavailable: {r.stderr.strip()}"
    return None


_SKIP = _netns_unavailable()
#: Modules here that need neither root nor namespaces (validation, rewriting).
NO_ROOT = {"test_offline.py"}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if here in path.parents and path.name not in NO_ROOT:
            item.add_marker(pytest.mark.netns)
            if _SKIP:
                item.add_marker(pytest.mark.skip(reason=_SKIP))


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def unique_name() -> str:
    return f"t{os.getpid() % 100000}x{next(_counter)}"


@pytest.fixture
def make_testbed(run_root: Path, unique_name: str) -> Iterator[Any]:
    """Factory: ``make_testbed(spec_or_path)``; every testbed is torn down after."""
    from testbed.fabric import Testbed

    made: list[Testbed] = []

    def make(spec: Any, name: str | None = None) -> Testbed:
        tb = Testbed.up(spec, name=name or f"{unique_name}{len(made)}", run_root=run_root)
        made.append(tb)
        return tb

    try:
        yield make
    finally:
        for tb in made:
            tb.down()
