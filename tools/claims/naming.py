"""A claims run's name: the plain full matrix's, whose figures are the
current results in docs/claims.md, or a variant's, named after what
differs (its plots, JSON and markdown carry the name)."""

from __future__ import annotations

from typing import Any

DOCS_NAME = "claims"


def section_name(rows: list[str], planes: int = 2, rate_mbit: int = 100,
                 mtu: int = 1500, connection: dict[str, Any] | None = None,
                 queue_wait: bool = False, *, quick: bool = False,
                 stacks: list[str] | None = None, element: str = "ebpf",
                 daemon_qlog: bool = False) -> str:
    """The run's name: ``claims`` for the plain full matrix (every default row,
    every stack, 2 planes x 100 Mbit/s at MTU 1500, eBPF ports, default daemon
    settings, no diagnosis switched on, not ``--quick``), the only run whose
    figures are the claims' current results in docs/claims.md. Any other run
    is a variant, named after what differs (``claims-gaps``,
    ``claims-...-4x50``, ``claims-...-mtu4208``, ``claims-...-ack_delay0.0003``,
    ``claims-...-queuewait``, ...); a variant names its plots after it and
    writes them with its JSON and markdown to the --out directory, never to
    the docs. Rows and stacks are named in the matrix's own order, whatever
    order they were given or stored in (the JSON sorts its keys)."""
    from tools.claims.rows import DEFAULT_ROWS, ROWS, STACKS

    rows = [r for r in ROWS if r in rows] + sorted(set(rows) - set(ROWS))

    fabric = "" if (planes, rate_mbit) == (2, 100) else f"-{planes}x{rate_mbit}"
    if mtu != 1500:
        fabric += f"-mtu{mtu}"
    for k, v in sorted((connection or {}).items()):
        fabric += "-" + "".join(ch for ch in f"{k}{v}" if ch.isalnum() or ch in "._")
    if queue_wait:
        fabric += "-queuewait"
    if stacks is not None and set(stacks) != set(STACKS):
        fabric += "-" + "-".join([st for st in STACKS if st in stacks]
                                 + sorted(set(stacks) - set(STACKS)))
    if element != "ebpf":
        fabric += f"-{element}"
    if daemon_qlog:
        fabric += "-qlog"
    if quick:
        fabric += "-quick"
    if set(rows) == set(DEFAULT_ROWS) and not fabric:
        return DOCS_NAME
    return DOCS_NAME + "-" + "-".join(rows) + fabric


def run_name(data: dict[str, Any]) -> str:
    """``section_name`` of a run's JSON (or of the arguments of one to come)."""
    element = str(data.get("element") or "ebpf")
    return section_name(list(data["rows"]), data.get("planes", 2), data.get("rate_mbit", 100),
                        data.get("mtu", 1500), data.get("connection"),
                        bool(data.get("queue_wait")), quick=bool(data.get("quick")),
                        stacks=data.get("stacks"),
                        # "none, ...": rows on plain links of their own, no element
                        element="ebpf" if element.lower().startswith(("ebpf", "none"))
                        else "userspace",
                        daemon_qlog=bool(data.get("daemon_qlog")))


def is_variant(data: dict[str, Any]) -> bool:
    """Whether a run is anything other than the plain full matrix."""
    return run_name(data) != DOCS_NAME
