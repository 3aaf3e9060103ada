"""No import circles among Braid's packages, and no layer imports upwards
where the brief forbids it (testbed must not reach into tools).

Imports are read with ``ast`` from every module — top level, inside
functions and under ``TYPE_CHECKING`` alike: a circle through a lazy or a
typing-only import is still two modules that cannot be understood apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("wire", "transport", "congestion", "testbed", "tools", "braid")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name if is_pkg else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            r = resolve(t)
            if r is not None and r != name:
                found.add(r)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    # A module importing its own package's __init__ (``from testbed import x``) is
    # not a circle by itself unless __init__ imports it back; keep all edges.
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges to a package's ``__init__`` that only re-exports are kept, but a
    package ``__init__`` importing its submodules is how packages work: an edge
    submodule -> own package __init__ -> submodule is not a design circle."""
    out = {}
    for mod, deps in graph.items():
        out[mod] = {d for d in deps if not (mod.startswith(d + ".") and d in graph)}
    return out


def test_no_import_circles() -> None:
    cycles = _cycles(_without_package_inits(_graph()))
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_testbed_does_not_import_tools() -> None:
    graph = _graph()
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.split(".")[0] == "testbed"
                 for d in deps if d.split(".")[0] == "tools")
    assert bad == []


def test_the_checker_sees_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: ``transport.daemon`` and its parts, lowest first: each imports only parts
#: before it (the configuration and the logs know nothing of peers or of the
#: control socket; ``transport.hostcore``, the host's rules, knows nothing of
#: the control socket or the daemon; ``transport.daemon`` ties them together).
#: The in-process endpoint, ``transport.local``, sits on the host's rules and
#: above the daemon's parts (none of them imports it).
DAEMON_PARTS = ("transport.daemon_config", "transport.daemon_log", "transport.hostcore",
                "transport.daemon_control", "transport.daemon", "transport.local")


def test_the_daemon_parts_import_only_downwards() -> None:
    graph = _graph()
    bad = sorted(f"{m} -> {d}" for i, m in enumerate(DAEMON_PARTS)
                 for d in graph[m] & set(DAEMON_PARTS[i + 1:]))
    assert bad == []
