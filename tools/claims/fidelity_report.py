"""The claims report's fidelity parts: which verdicts stand, a table per row
and stack, plot markers and the summary figure (tools/claims/fidelity.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tools.claims.fidelity import combine, no_verdict


def _group(stack: str) -> str:
    return "braid" if stack.startswith("braid") else stack


def by_row(data: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (row, stack): its runs' fidelity combined (``fidelity.combine``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in data.get("transfers", []):
        if isinstance(t.get("fidelity"), dict):
            groups.setdefault((t["row"], _group(t["stack"])), []).append(t["fidelity"])
    return {k: combine(v) for k, v in groups.items()}


def row_fidelity(data: Mapping[str, Any], row: str, stacks: Iterable[str] | None = None
                 ) -> dict[str, Any]:
    """A row's fidelity over every stack (a comparison needs them all) or over
    ``stacks`` only; each reason names its stack."""
    only = None if stacks is None else set(stacks)
    parts = []
    for (r, stack), f in by_row(data).items():
        if r == row and (only is None or stack in only):
            parts.append({**f, "reasons": [f"{stack}: {x}" for x in f["reasons"]]})
    return combine(parts)


def compares(target: str) -> bool:
    """Does a target's text measure Braid against another stack ("5x closer
    to 1 than tcp", "10x sooner than mptcp")? Then every stack's runs must
    be faithful for its verdict; otherwise Braid's alone."""
    return " than " in target


def rests_on(target: str, stacks: Iterable[str]) -> list[str]:
    """The stacks, of ``stacks``, whose runs a target's verdict rests on:
    Braid's, and for a comparison those it names after " than " ("10x
    sooner than mptcp": mptcp too, not tcp), every one if it names none."""
    stacks = list(stacks)
    braid = [s for s in stacks if s.startswith("braid")] or ["braid"]
    if not compares(target):
        return braid
    words = set(re.findall(r"[a-z0-9-]+", target.partition(" than ")[2]))
    named = [s for s in stacks if s in words and s not in braid]
    return braid + named if named else stacks


def withhold_verdicts(data: Mapping[str, Any], lines: list[list[str]],
                      row_of: Any) -> None:
    """Replace the met / NOT met of every target line with "no verdict: not
    faithful (reason)" when a run it rests on was not faithful
    (``rests_on``)."""
    cache: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
    runs = by_row(data)
    for line in lines:
        if not line[3].startswith(("met", "NOT met")):
            continue
        row = row_of(line[0])
        stacks = tuple(rests_on(line[0], sorted({st for r, st in runs if r == row})))
        key = (row, stacks)
        if key not in cache:
            cache[key] = row_fidelity(data, row, stacks)
        fid = cache[key]
        if fid["faithful"] is False:
            line[3] = no_verdict(fid)


def _f(x: Any, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def table(data: Mapping[str, Any], cpu: Mapping[tuple[str, str], Mapping[str, Any]]
          | None = None) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, header, rows): one line per row and stack, the fidelity of its
    runs beside the machine's CPU during them (``report.cpu_by_row``)."""
    fid = by_row(data)
    if not fid:
        return None
    cpu = cpu or {}
    rows = []
    for (row, stack), f in fid.items():
        sat = f["cpu_saturated_share"]
        c = cpu.get((row, stack)) or {}
        rows.append([row, stack, str(f["runs"]),
                     {True: "yes", False: "NO", None: "-"}[f["faithful"]],
                     f"{_f(c.get('busy_p50'), 0)} / {_f(c.get('busy_max'), 0)}",
                     "-" if sat is None else f"{sat * 100:.0f}",
                     _f(c.get("daemons_p50"), 0), _f(c.get("daemons_wait_max"), 0),
                     _f(f.get("p99_late_ratio")), _f(f.get("max_late_ratio")),
                     _f(f["p99_gap_ratio"]), "; ".join(f["reasons"][:2]) or "-"])
    return ("fidelity and CPU of each row's runs (docs/claims.md, Fidelity: a run is not "
            "faithful with its hosts saturated (>= 95% busy) in > 5% of 100 ms intervals, "
            "the hypervisor taking > 2% of the CPUs (steal) or a link's p99 lateness > 1 "
            "ideal frame time, and no verdict is taken from it; "
            "busy counts the kernel's packet work and any other work on the machine; "
            "busy-link departure gaps and the daemons' waits for a core are reported, "
            "not judged)",
            ["row", "stack", "runs", "faithful", "machine busy % median / max",
             "saturated % of intervals, max", "Braid daemons % median",
             "a daemon waiting for a core, % of the run, max",
             "p99 lateness / frame time, worst", "max lateness / frame time",
             "p99 busy gap / ideal, worst", "reasons"], rows)


def unfaithful(data: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """(row, stack, run) of every run that was not faithful."""
    return {(t["row"], t["stack"], t["run"]) for t in data.get("transfers", [])
            if isinstance(t.get("fidelity"), dict) and t["fidelity"].get("faithful") is False}


def mark(bad: set[tuple[str, str, str]], row: str, key: str) -> str:
    """A plot label for series ``key`` ('stack/run' or 'stack'), marked when
    its run was not faithful."""
    stack, _, run = key.partition("/")
    return f"{key} [NOT FAITHFUL]" if (row, stack, run or row) in bad else key


def summary_plot(data: Mapping[str, Any], plots_dir: Path, stem: str) -> Path | None:
    """One PNG: the invisibility row's p100 step time per stack, fault-free and
    under the fault timeline, with Braid's one-plane-down floor; runs that
    were not faithful are hatched and flagged."""
    inv = data.get("rows", {}).get("invisibility", {}).get("per_stack")
    if not inv:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bad = unfaithful(data)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.9 * len(inv)), 3.8))
    width = 0.38
    top = 0.0
    for i, (key, v) in enumerate(inv.items()):
        stack, _, pat = key.partition("/")
        pat = pat or "alltoall"
        for j, (label, color) in enumerate((("fault_free", "tab:blue"),
                                             ("faulted", "tab:orange"))):
            p100 = (v.get(label) or {}).get("p100")
            if p100 is None:
                continue
            ms = p100 * 1000
            top = max(top, ms)
            x = i + (j - 0.5) * width
            nf = ("invisibility", stack, f"{pat}/{label}") in bad
            ax.bar(x, ms, width * 0.95, color=color, alpha=0.45 if nf else 0.9,
                   hatch="xx" if nf else None, edgecolor="red" if nf else color,
                   label=label.replace("_", "-") if i == 0 else None)
            if nf:
                ax.text(x, ms, "not\nfaithful", ha="center", va="bottom", fontsize=7,
                        color="red")
        floor = (v.get("floor") or {}).get("p100")
        if floor is not None:
            ms = floor * 1000
            top = max(top, ms)
            nf = ("invisibility", stack, f"{pat}/floor") in bad
            ax.plot([i - width, i + width], [ms, ms], color="red" if nf else "k", ls="--",
                    lw=1.2, label="floor: plane 1 down throughout" if i == 0 else None)
    ax.set_xticks(range(len(inv)))
    ax.set_xticklabels(list(inv))
    ax.set_ylabel("p100 step time (ms)")
    ax.set_ylim(0, top * 1.25 if top else 1)
    rate = data.get("rate_mbit", 100)
    ax.set_title(f"invisibility: worst step, fault-free vs fault timeline ({rate} Mbit/s "
                 "per plane)\nhatched: the run was not faithful (no verdict from it)",
                 fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    fig.tight_layout()
    plots_dir.mkdir(parents=True, exist_ok=True)
    path = plots_dir / f"{stem}-summary.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _daemons(cpu: Mapping[str, Any] | None) -> str:
    """``, the daemons 71% of the machine``, when the probe's CPU record has it."""
    share = None if not cpu else cpu.get("daemons")
    return "" if share is None else f", the daemons {float(share) * 100:.0f}% of the machine"


def rate_auto_text(data: Mapping[str, Any]) -> str | None:
    """The --rate auto search in one paragraph, or None for a fixed rate."""
    ra = data.get("rate_auto")
    if not ra:
        return None
    probes = "; ".join(
        f"{p['rate_mbit']} Mbit/s: " + ({True: "faithful", False: "not faithful",
                                         None: "not measured"}[p["faithful"]])
        + (f" ({p['reasons'][0]}{_daemons(p.get('cpu'))})" if p.get("reasons") else "")
        for p in ra["probes"])
    return (f"**--rate auto** chose {ra['rate_mbit']} Mbit/s per plane: a {ra['probe']} "
            f"probe run of Braid at each rate of {', '.join(str(r) for r in ra['ladder'])} "
            f"Mbit/s, highest first, until one was faithful ({probes})"
            + ("" if ra.get("faithful") is not False
               else "; none was, so the lowest rate was taken") + ".")
