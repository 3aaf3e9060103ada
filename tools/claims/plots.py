"""The PNGs of ``braid bench claims``: step-time CDFs, every step through
the fault timeline, goodput through each fault, the tail-drop links through
theirs, and the fidelity summary (tools/claims/fidelity_report.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.claims import fidelity_report as fr
from tools.claims import metrics as m
from tools.claims import taildrop
from tools.claims.naming import run_name


def plot(data: dict[str, Any], plots_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots_dir.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    R = data["rows"]
    # The full matrix's plots are claims-*.png; a partial run or another
    # fabric names its own after its docs section, so it never replaces them.
    stem = run_name(data)
    bad = fr.unfaithful(data)  # their series are labelled [NOT FAITHFUL]
    summary = fr.summary_plot(data, plots_dir, stem)
    if summary:
        out.append(summary)
    inv = R.get("invisibility", {}).get("series")
    if inv:
        stacks = sorted({k.split("/")[0] for k in inv})
        fig, axes = plt.subplots(1, len(stacks), figsize=(4.2 * len(stacks), 3.4), squeeze=False,
                                 sharex=True)
        for ax, st in zip(axes[0], stacks, strict=True):
            for key, xs in sorted(inv.items()):
                if key.split("/")[0] != st or not xs:
                    continue
                s = sorted(x * 1000 for x in xs)
                ax.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post",
                        label=fr.mark(bad, "invisibility", key).split("/", 1)[1])
            ax.set_xscale("log")
            ax.set_title(f"{st}: step time CDF")
            ax.set_xlabel("step time (ms)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        axes[0][0].set_ylabel("fraction of steps")
        fig.tight_layout()
        p = plots_dir / f"{stem}-step-cdf.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    if inv:
        import itertools
        import re

        fig, ax = plt.subplots(figsize=(9, 3.6))
        for key, xs in sorted(inv.items()):
            if not key.endswith("/faulted") or not xs:
                continue
            ends = list(itertools.accumulate(xs))
            ax.plot(ends, [x * 1000 for x in xs], marker=".", lw=0.8, ms=3,
                    label=fr.mark(bad, "invisibility", key).replace("/faulted", "", 1))
        for ev in R["invisibility"].get("timeline", []):
            mt = re.match(r"at ([\d.]+) (.*)", ev)
            if mt:
                ax.axvline(float(mt.group(1)), color="k", ls=":", lw=0.7)
                ax.text(float(mt.group(1)), 1.0, " " + mt.group(2), rotation=90, fontsize=6,
                        va="top", transform=ax.get_xaxis_transform())
        ax.set_yscale("log")
        ax.set_xlabel("seconds (end of step)")
        ax.set_ylabel("step time (ms)")
        ax.set_title("invisibility: every step through the fault timeline")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        p = plots_dir / f"{stem}-invisibility-timeline.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    for row, title in (("failover", "plane 0 blackholed; h0:p0 unplugged"), ("compound",
                                                            "plane 0 down + 30% loss on p1")):
        series = R.get(row, {}).get("series")
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(9, 3.6))
        for key, bins in sorted(series.items()):
            w = m.windows(bins, 5)
            ax.plot([(i + 5) * m.BIN_S for i in range(len(w))],
                    [x * 8 / (5 * m.BIN_S) / 1e6 for x in w], label=fr.mark(bad, row, key),
                    lw=1)
        if R[row].get("fault_at") is not None:
            ax.axvline(R[row]["fault_at"], color="k", ls="--", lw=0.8)
        ax.set_xlabel("seconds")
        ax.set_ylabel("goodput (Mbit/s, 50 ms)")
        ax.set_title(f"{row}: {title}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        p = plots_dir / f"{stem}-{row}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    td = taildrop.plot(R, plots_dir, stem, lambda key: fr.mark(bad, taildrop.ROW, key))
    if td:
        out.append(td)
    return out
