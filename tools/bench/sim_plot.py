"""Plots of ``braid bench sim``'s invisibility rows (virtual time): every
step of the all-to-all through the fault timeline, against the same run
fault-free and against the floor (the fault-free p100 on one plane fewer),
with the timeline's faults in lanes underneath."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.common.plotting import draw_fault_lanes, fault_lanes


def plot_invisibility(r: dict[str, Any], events: list[tuple[float, str]], title: str,
                      path: Path) -> Path:
    """``r``: ``testbed.sim.scenarios_alltoall.invisibility``'s result;
    ``events``: its timeline as ``(seconds, fault)``. Writes ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ff, fl, floor = r["fault_free"], r["faulted"], r["floor"]
    end = max((t + d for t, d in fl["step_series"] + ff["step_series"]), default=1.0)
    lanes = fault_lanes(events, end)
    # Room for each fault's label after its bar (the lane axis is about 110
    # characters of its labels wide).
    end = max([end] + [b.end / (1 - (len(b.label) + 2) / 110) for _, bars in lanes for b in bars])
    fig, (ax, lane_ax) = plt.subplots(
        2, 1, figsize=(9, 4.4), sharex=True,
        gridspec_kw={"height_ratios": [3, max(1, len(lanes)) * 0.35]})
    for run, label, colour, size in ((ff, "fault-free", "0.6", 2), (fl, "faulted", "C3", 3)):
        ax.plot([t + d for t, d in run["step_series"]],
                [d * 1e3 for _, d in run["step_series"]], ".", ms=size, color=colour,
                label=f"{label}: p50 {run['p50'] * 1e3:.0f} ms, p100 {run['p100'] * 1e3:.0f} ms")
    lines = [(ff["p100"], "fault-free p100", "0.4", ":")]
    if floor is not None:
        lines.append((floor["p100"], "floor: p100 on one plane fewer", "C0", "--"))
    for y, label, colour, style in lines:
        ax.axhline(y * 1e3, color=colour, ls=style, lw=1, label=f"{label} ({y * 1e3:.0f} ms)")
    ax.axhline(ff["ideal"] * 1e3, color="C2", ls="-.", lw=0.8,
               label=f"ideal step ({ff['ideal'] * 1e3:.1f} ms)")
    top = max(fl["p100"], ff["p100"], floor["p100"] if floor else 0.0) * 1e3
    ax.set_ylim(0, top * 1.5)  # room for the legend above the steps
    ax.set_ylabel("step time (ms)")
    ratio = r["ratio_p100"]
    over = r["over_floor"]
    ax.set_title(f"{title}: p100 ratio {ratio:.2f}" if ratio else title, fontsize=10)
    if over:
        ax.set_title(f"{ax.get_title()}, faulted / floor {over:.2f}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=3, framealpha=0.85)
    draw_fault_lanes(lane_ax, lanes, xmax=end)
    lane_ax.set_xlim(0, end)
    lane_ax.set_xlabel("seconds (end of step; virtual time)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
