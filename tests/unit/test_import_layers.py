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


#: transport/ from the top down: a module may import only modules of a layer
#: below its own (api -> daemon -> aio -> endpoint -> connection -> path_health
#: -> paths -> ev_state / sender / receiver). A module missing here fails the
#: test, so each new one is placed on purpose.
TRANSPORT_LAYERS: list[list[str]] = [
    # The in-process endpoint (the host's rules in the application's process)
    # and the client API of a daemon.
    ["transport.local"],
    ["transport.api"],
    # The daemon and its parts, lowest last (docs/daemon.md); hostcore holds
    # the host's rules the daemon and the in-process endpoint share.
    ["transport.daemon"],
    ["transport.daemon_control"],
    ["transport.hostcore"],
    ["transport.daemon_log"],
    ["transport.daemon_config"],
    ["transport.aio"],
    ["transport.aio_send"],
    ["transport.udp", "transport.timerfd", "transport.eventloop", "transport.queue_wait",
     "transport.rx_moderation",
     "transport.inbox", "transport.control"],
    ["transport.endpoint"],
    # The connection, one object built in layers (conn_core at the bottom).
    ["transport.connection"],
    ["transport.conn_scheduler"],
    ["transport.conn_dispatch"],
    ["transport.conn_lifecycle"],
    ["transport.conn_handshake"],
    ["transport.conn_core"],
    ["transport.host_share"],
    ["transport.path_health"],
    # Paths: the policies over the EV set (ev_core at its bottom).
    ["transport.paths"],
    ["transport.paths.policies"],
    ["transport.paths.policy"],
    ["transport.paths.rotation"],
    ["transport.paths.ev_set"],
    ["transport.paths.probes"],
    ["transport.paths.liveness"],
    ["transport.paths.ev_core"],
    ["transport.paths.plane_share"],
    # The sender, one object in parts (send_queue at the bottom), and the
    # loss policy whose verdicts the in-flight table records.
    ["transport.sender"],
    ["transport.tlp_rto"],
    ["transport.inflight"],
    ["transport.loss_policy"],
    ["transport.loss_detect"],
    ["transport.send_queue", "transport.receiver"],
    # Facts every layer reads: the EV state table, the path model.
    ["transport.ev_state", "transport.paths.rtt", "transport.psn"],
    ["transport", "transport.config", "transport.conn_state", "transport.datagram",
     "transport.events"],
]

#: The sans-I/O core: everything the connection is made of. It takes ``now``
#: as an argument and hands datagrams back; it never reads a clock or
#: touches a socket (only the I/O adapter, transport/aio.py, does).
_IO_LAYERS = 1 + next(i for i, layer in enumerate(TRANSPORT_LAYERS)
                      if "transport.endpoint" in layer)
_NO_CLOCK_OR_SOCKET = {"time", "socket", "asyncio", "select", "selectors", "uvloop",
                       "datetime", "threading", "signal", "os"}


def _rank() -> dict[str, int]:
    return {m: i for i, layer in enumerate(TRANSPORT_LAYERS) for m in layer}


def test_every_transport_module_has_a_layer() -> None:
    rank = _rank()
    missing = sorted(m for m in _modules() if m.split(".")[0] == "transport" and m not in rank)
    assert missing == [], f"place these in TRANSPORT_LAYERS: {missing}"
    gone = sorted(m for m in rank if m not in _modules())
    assert gone == [], f"no longer exist: {gone}"


def test_transport_imports_only_downwards() -> None:
    rank = _rank()
    graph = _graph()
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if m in rank
                 for d in deps if d in rank and rank[d] <= rank[m])
    assert bad == [], "imports at or above the importer's layer: " + "; ".join(bad)


def test_the_core_never_imports_a_clock_or_a_socket() -> None:
    known = _modules()
    core = [m for layer in TRANSPORT_LAYERS[_IO_LAYERS - 1:] for m in layer]
    assert "transport.endpoint" in core and "transport.aio" not in core
    bad = []
    for m in core:
        tree = ast.parse(known[m].read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [f"{m} imports {n}" for n in names if n.split(".")[0] in _NO_CLOCK_OR_SOCKET]
    assert bad == []


def test_the_layer_check_sees_an_upward_import() -> None:
    """The rule above, on a made-up graph: a core module importing the
    connection is caught."""
    rank = _rank()
    graph = {"transport.sender": {"transport.connection"}}
    bad = [f"{m} -> {d}" for m, deps in graph.items() for d in deps if rank[d] <= rank[m]]
    assert bad == ["transport.sender -> transport.connection"]


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
