"""Shared pieces of Braid's plots: fault lanes, labels that do not collide, a
colour per plane, and a y range that shows a series' changes.

Fault lanes: one row per fault target ("plane 2", "link h1:p1", "spine s1
plane 0"), a bar for as long as the target is impaired (down until up, loss
until heal, a reboot for its duration), its action written on the bar. Each
target has its own row, so simultaneous faults never overprint each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: Words that start the action part of a fault ("plane 2 down", "link h3:p1 loss 5%").
ACTIONS = ("down", "up", "heal", "loss", "gray", "delay", "rate", "reboot", "flap")
#: Actions that end an impairment of their target.
ENDS = ("up", "heal")
#: Bar colour per action.
COLOURS = {"down": "#d62728", "reboot": "#9467bd", "flap": "#ff7f0e", "loss": "#bcbd22",
           "gray": "#8c564b", "delay": "#17becf", "rate": "#17becf"}
_DURATION = re.compile(r"^(\d+(?:\.\d*)?)(ms|us|s)?$")


def plane_colour(plane: int) -> Any:
    import matplotlib

    return matplotlib.colormaps["tab10"](plane % 10)


def _seconds(text: str) -> float | None:
    m = _DURATION.match(text)
    if not m:
        return None
    return float(m.group(1)) * {"ms": 1e-3, "us": 1e-6, "s": 1.0, None: 1.0}[m.group(2)]


def split_fault(text: str) -> tuple[str, str]:
    """("plane 2", "down") from "plane 2 down"; unknown shapes: (text, "")."""
    words = text.split()
    for i, w in enumerate(words):
        if w in ACTIONS and i > 0:
            return " ".join(words[:i]), " ".join(words[i:])
    return text, ""


@dataclass(frozen=True)
class Bar:
    start: float
    end: float
    label: str
    kind: str


def fault_lanes(events: list[tuple[float, str]], end: float) -> list[tuple[str, list[Bar]]]:
    """(target, bars) per target, in order of first appearance."""
    lanes: dict[str, list[Bar]] = {}
    open_: dict[str, tuple[float, str, str]] = {}
    for at, text in sorted(events, key=lambda e: e[0]):
        target, action = split_fault(text)
        bars = lanes.setdefault(target, [])
        words = action.split()
        kind = words[0] if words else "down"
        if kind in ENDS:
            if target in open_:
                s, lab, k = open_.pop(target)
                bars.append(Bar(s, at, lab, k))
            continue
        # reboot D / flap P for T: an impairment of known duration
        dur = (_seconds(words[1]) if kind == "reboot" and len(words) > 1 else
               _seconds(words[3]) if kind == "flap" and len(words) > 3 else None)
        if dur is not None:
            bars.append(Bar(at, at + dur, action, kind))
        else:
            if target in open_:  # a new impairment replaces the open one
                s, lab, k = open_.pop(target)
                bars.append(Bar(s, at, lab, k))
            open_[target] = (at, action, kind)
    for target, (s, lab, k) in open_.items():
        lanes[target].append(Bar(s, max(end, s), lab + " (not healed)", k))
    return list(lanes.items())


def draw_fault_lanes(ax: Any, lanes: list[tuple[str, list[Bar]]], *, xmax: float) -> None:
    """Horizontal bars, one row per target, the action written next to each bar."""
    ax.set_ylim(-0.5, max(len(lanes), 1) - 0.5)
    ax.invert_yaxis()
    ax.set_yticks(range(len(lanes)), [t for t, _ in lanes], fontsize=8)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    min_w = xmax / 300
    for row, (_target, bars) in enumerate(lanes):
        for b in bars:
            ax.barh(row, max(b.end - b.start, min_w), left=b.start, height=0.6,
                    color=COLOURS.get(b.kind, "gray"), alpha=0.85)
            ax.text(b.end + xmax / 200, row, b.label, fontsize=7, va="center", ha="left",
                    color="black", clip_on=True)


def fault_spans(lanes: list[tuple[str, list[Bar]]]) -> list[tuple[float, float]]:
    """The union of every bar: when the fabric had at least one fault."""
    spans = sorted((b.start, b.end) for _t, bars in lanes for b in bars)
    out: list[tuple[float, float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def label_rows(marks: list[tuple[float, str]], *, x_per_char: float) -> list[int]:
    """A row per label so that labels in one row do not overlap (greedy, by time)."""
    ends: list[float] = []
    rows = []
    for t, label in marks:
        width = (len(label) + 2) * x_per_char
        for r, e in enumerate(ends):
            if t >= e:
                ends[r] = t + width
                rows.append(r)
                break
        else:
            ends.append(t + width)
            rows.append(len(ends) - 1)
    return rows


def robust_ylim(values: list[float], *, skip_first: float = 0.05) -> tuple[float, float]:
    """A y range over the values after the first ``skip_first`` of them, so a large
    initial value (a configured first guess) does not squash what follows."""
    if not values:
        return 0.0, 1.0
    tail = values[int(len(values) * skip_first):] or values
    lo, hi = min(tail), max(tail)
    if hi <= lo:
        hi = lo + max(abs(lo) * 0.1, 1.0)
    pad = (hi - lo) * 0.08
    return max(0.0, lo - pad), hi + pad
