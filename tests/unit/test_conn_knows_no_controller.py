"""The connection knows no congestion controller by name: it builds one
through ``congestion.registry`` from its configuration and talks to it
through ``congestion.base`` only. A controller's name, class or module in
``transport/connection.py`` or a ``transport/conn*.py`` would tie the
connection to one controller."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from congestion import registry

REPO = Path(__file__).resolve().parents[2]
CONGESTION = REPO / "congestion"

#: controllers Braid has or is compared with; any of them named in the
#: connection would be a controller it knows.
KNOWN = ("nscc", "dcqcn", "swift", "timely", "hpcc", "eqds", "cubic", "reno", "bbr")
#: congestion/ modules that are the interface or shared machinery, not a controller.
SHARED = frozenset({"__init__", "base", "pacing", "registry"})


def _patterns() -> dict[str, re.Pattern[str]]:
    """What naming a controller looks like: a known name as a word (also the
    start of a class name, ``Nscc...``), a registered name as a string, a
    controller module of congestion/ or a class defined in one."""
    out = {f"controller {w}": re.compile(rf"\b{w}", re.I) for w in KNOWN}
    for name in registry.names():
        out[f"registered name {name!r}"] = re.compile(rf"""["']{re.escape(name)}["']""")
    for path in sorted(CONGESTION.glob("*.py")):
        if path.stem in SHARED:
            continue
        out[f"module congestion.{path.stem}"] = re.compile(rf"\bcongestion\.{path.stem}\b")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                out[f"class {node.name}"] = re.compile(rf"\b{node.name}\b")
    return out


def _connection_files() -> list[Path]:
    return sorted({*REPO.glob("transport/conn*.py"), REPO / "transport" / "connection.py"})


def test_the_connection_names_no_controller() -> None:
    files = _connection_files()
    assert len(files) >= 2 and all(p.is_file() for p in files)
    patterns = _patterns()
    bad = [f"{p.relative_to(REPO)}:{n}: {what}: {line.strip()[:80]}"
           for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
           for what, rx in patterns.items() if rx.search(line)]
    assert not bad, "\n".join(bad)


def test_the_patterns_catch_a_named_controller() -> None:
    patterns = _patterns().values()
    for named in ("from congestion.nscc import Nscc", "cc = cc_registry.get('fixed')",
                  "if isinstance(self.cc, FixedWindow):", "DCQCN's rate cut",
                  "a Swift-like delay target", "NsccParams()"):
        assert any(rx.search(named) for rx in patterns), named
    for fine in ("from congestion import registry as cc_registry",
                 "from congestion.base import AckSample", "a fixed duplicate-ACK count",
                 "self.cc.on_ack(sample)", "c.congestion, mtu=c.payload_size"):
        assert not any(rx.search(fine) for rx in patterns), fine
