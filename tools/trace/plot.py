"""``braid trace plot``: PSN vs time by plane, per-plane throughput, events.

Input is a pcap/pcapng (decoded with the streaming reader) or a qlog file.
Memory stays bounded: point series are thinned by doubling their stride when
they grow past a cap, and throughput bins merge pairwise when there are too
many of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tools.trace.decode import read_packets
from tools.trace.qlog import is_qlog, read_qlog
from wire.constants import Flag
from wire.packets import Data, Nack

MAX_POINTS: Final = 100_000
MAX_BINS: Final = 4096
RATE_BINS: Final = 100


class Thinned:
    """Keeps at most ``cap`` points, evenly thinned (every k-th, k doubling)."""

    __slots__ = ("cap", "points", "seen", "stride")

    def __init__(self, cap: int = MAX_POINTS) -> None:
        self.cap, self.stride, self.seen = cap, 1, 0
        self.points: list[tuple[float, float]] = []

    def add(self, t: float, y: float) -> None:
        if self.seen % self.stride == 0:
            self.points.append((t, y))
            if len(self.points) > self.cap:
                self.points = self.points[::2]
                self.stride *= 2
        self.seen += 1


class Bins:
    """Bytes per time bin from ``t0``; the bin width doubles to stay under ``MAX_BINS``."""

    __slots__ = ("bytes", "t0", "width")

    def __init__(self, t0: float, width: float = 1e-4) -> None:
        self.t0, self.width = t0, width
        self.bytes: list[float] = []

    def _halve(self) -> None:
        b = self.bytes + [0.0] * (len(self.bytes) % 2)
        self.bytes = [b[k] + b[k + 1] for k in range(0, len(b), 2)]
        self.width *= 2

    def coarsen(self, at_most: int) -> None:
        """Fewer, wider bins: a rate over a few packets per bin is mostly aliasing."""
        while len(self.bytes) > at_most:
            self._halve()

    def add(self, t: float, n: int) -> None:
        i = max(0, int((t - self.t0) / self.width))
        while i >= MAX_BINS:
            self._halve()
            i //= 2
        if i >= len(self.bytes):
            self.bytes.extend([0.0] * (i + 1 - len(self.bytes)))
        self.bytes[i] += n


@dataclass
class PlotData:
    t0: float | None = None
    psn: dict[int, Thinned] = field(default_factory=dict)  # plane -> (t, psn)
    rate: dict[int, Bins] = field(default_factory=dict)  # plane -> bytes per bin
    # (plane or -1 when unknown, kind) -> (t, psn)
    trims: dict[tuple[int, str], Thinned] = field(default_factory=dict)
    nacks: dict[int, Thinned] = field(default_factory=dict)  # plane (-1: unknown) -> (t, psn)
    retx: dict[int, Thinned] = field(default_factory=dict)
    cwnd: Thinned = field(default_factory=Thinned)
    marks: list[tuple[float, str]] = field(default_factory=list)
    events: int = 0

    def rel(self, t: float) -> float:
        if self.t0 is None:
            self.t0 = t
        return t - self.t0

    def data(self, t: float, psn: int, plane: int, size: int) -> None:
        r = self.rel(t)
        self.psn.setdefault(plane, Thinned()).add(r, psn)
        bins = self.rate.get(plane)
        if bins is None:
            bins = self.rate[plane] = Bins(0.0)
        bins.add(r, size)
        self.events += 1

    def trim(self, t: float, psn: int, kind: str, plane: int = -1) -> None:
        self.trims.setdefault((plane, kind), Thinned()).add(self.rel(t), psn)
        self.events += 1

    def nack(self, t: float, psn: int, plane: int = -1) -> None:
        self.nacks.setdefault(plane, Thinned()).add(self.rel(t), psn)
        self.events += 1

    def retransmission(self, t: float, psn: int, plane: int = -1) -> None:
        self.retx.setdefault(plane, Thinned()).add(self.rel(t), psn)
        self.events += 1

    def mark(self, t: float, label: str) -> None:
        if len(self.marks) < 200:
            self.marks.append((self.rel(t), label))
        self.events += 1


def from_pcap(path: Path) -> PlotData:
    d = PlotData()
    for pkt in read_packets(path, include_malformed=False):
        b, h = pkt.body, pkt.header
        assert h is not None
        if isinstance(b, Data):
            d.data(pkt.time, b.psn, b.plane, len(pkt.udp.payload))
            if pkt.trimmed:
                d.trim(pkt.time, b.psn, pkt.trim_kind, b.plane)
            if h.flags & Flag.RETX:
                d.retransmission(pkt.time, b.psn, b.plane)
        elif isinstance(b, Nack):
            d.nack(pkt.time, b.psn, b.plane)
        else:
            d.rel(pkt.time)
    return d


def from_qlog(path: Path) -> PlotData:
    d = PlotData()
    have_sent = False
    for ev in read_qlog(path):
        x = ev.data
        if ev.name == "packet_sent" and x.get("type", "DATA") == "DATA":
            have_sent = True
            d.data(ev.time, int(x["psn"]), int(x.get("plane", 0)), int(x.get("size", 0)))
            if x.get("retx"):
                d.retransmission(ev.time, int(x["psn"]), int(x.get("plane", -1)))
        elif ev.name == "packet_received" and not have_sent and x.get("type", "DATA") == "DATA":
            d.data(ev.time, int(x["psn"]), int(x.get("plane", 0)), int(x.get("size", 0)))
        elif ev.name == "trim":
            d.trim(ev.time, int(x["psn"]), str(x.get("where", "yes")), int(x.get("plane", -1)))
        elif ev.name == "nack":
            d.nack(ev.time, int(x["psn"]), int(x.get("plane", -1)))
        elif ev.name == "retransmit":
            d.retransmission(ev.time, int(x["psn"]), int(x.get("plane", -1)))
        elif ev.name == "cwnd":
            d.cwnd.add(d.rel(ev.time), float(x["cwnd"]))
            d.events += 1
        elif ev.name == "fault":
            d.mark(ev.time, f"{x.get('kind', 'fault')} {x.get('target', '')}".strip())
        elif ev.name == "ev_state" and x.get("new") == "ASSUMED_BAD":
            d.mark(ev.time, f"p{x.get('plane')} ev {x.get('ev')} bad")
        else:
            d.rel(ev.time)
    return d


def _xy(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]


#: More planes than this share one PSN panel instead of one panel each.
MAX_PLANE_PANELS: Final = 8
#: Grey context points (the other planes) drawn per panel, at most.
CONTEXT_POINTS: Final = 20_000


def _marks_for(series: dict[Any, Thinned], plane: int, *, kind: bool = False
               ) -> list[tuple[Any, Thinned]]:
    """The series of one plane (and those of unknown plane, shown everywhere)."""
    out = []
    for key, th in sorted(series.items(), key=lambda kv: str(kv[0])):
        p = key[0] if kind else key
        if p in (plane, -1):
            out.append((key[1] if kind else None, th))
    return out


def _event_strip(ax: Any, marks: list[tuple[float, str]], xmax: float, width_in: float
                 ) -> None:
    """Fault labels in rows so that none overlaps another; EV transitions as ticks."""
    from tools.common.plotting import label_rows

    faults = sorted((t, lab) for t, lab in marks if not lab.endswith(" bad"))
    bad = [t for t, lab in marks if lab.endswith(" bad")]
    x_per_char = xmax / max(width_in, 1.0) * 7 * 0.6 / 72  # 7 pt text
    rows = label_rows(faults, x_per_char=x_per_char)
    nrows = max(rows, default=-1) + 1
    for (t, lab), r in zip(faults, rows, strict=True):
        ax.plot([t, t], [r - 0.35, r + 0.35], color="red", linewidth=1)
        ax.text(t, r, " " + lab, fontsize=7, va="center", ha="left", color="darkred",
                clip_on=True)
    if bad:
        ax.plot(bad, [nrows] * len(bad), "|", color="gray", markersize=6)
    labels = [""] * nrows + ([f"EV ASSUMED_BAD ({len(bad)})"] if bad else [])
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("events", fontsize=8, loc="left")
    ax.tick_params(axis="x", labelbottom=False)


def render(d: PlotData, out: Path, title: str) -> None:
    """Events on top; PSN vs time with one panel per plane (the other planes in
    grey behind, so nothing hides anything); per-plane throughput stacked; the
    congestion window on a range that shows its changes. Legends sit outside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tools.common.plotting import plane_colour, robust_ylim

    planes = sorted(d.psn) or [0]
    per_plane = len(planes) <= MAX_PLANE_PANELS
    psn_panels: list[int | None] = list(planes) if per_plane else [None]
    xmax = max([p[0] for th in d.psn.values() for p in th.points[-1:]]
               + [t for t, _ in d.marks] + [c[0] for c in d.cwnd.points[-1:]] + [1e-6])
    has_marks = bool(d.marks)
    n_fault_labels = len({lab for _, lab in d.marks if not lab.endswith(" bad")})
    heights = ([0.3 + 0.22 * min(n_fault_labels + 1, 8)] if has_marks else []) + \
        [max(1.1, 4.0 / len(psn_panels))] * len(psn_panels) + [1.6] + \
        ([1.3] if d.cwnd.points else [])
    width = 11.0
    fig, axes = plt.subplots(len(heights), 1, figsize=(width, sum(heights) + 1.0), sharex=True,
                             gridspec_kw={"height_ratios": heights, "hspace": 0.15},
                             squeeze=False)
    axs: list[Any] = [a[0] for a in axes]
    k = 0
    if has_marks:
        _event_strip(axs[0], d.marks, xmax, width * 0.8)
        k = 1
    axs[0].set_title(title, fontsize=11, loc="center")
    styles = {"fabric": ("x", "red"), "last-hop": ("x", "darkorange"), "yes": ("x", "purple")}
    handles: dict[str, Any] = {}
    marker_handles: dict[str, Any] = {}
    all_pts = {p: th.points for p, th in d.psn.items()}
    for panel, plane in enumerate(psn_panels):
        ax = axs[k + panel]
        shown = planes if plane is None else [plane]
        if plane is not None and len(planes) > 1:  # the other planes, grey, behind
            ctx = [pt for q in planes if q != plane for pt in all_pts[q]]
            ctx = ctx[::max(1, len(ctx) // CONTEXT_POINTS)]
            xs, ys = _xy(ctx)
            ax.scatter(xs, ys, s=2, color="0.85", linewidths=0, rasterized=True)
        for q in shown:
            xs, ys = _xy(all_pts.get(q, []))
            h = ax.scatter(xs, ys, s=4, color=plane_colour(q), linewidths=0, rasterized=True)
            handles.setdefault(f"plane {q}", h)
        for q in shown:
            for kind, th in _marks_for(d.trims, q, kind=True):
                marker, colour = styles.get(kind, ("x", "gray"))
                xs, ys = _xy(th.points)
                marker_handles.setdefault(f"trim ({kind})", ax.scatter(
                    xs, ys, s=30, marker=marker, color=colour))
            for series, marker, colour, label in ((d.nacks, "v", "black", "NACK"),
                                                  (d.retx, "o", "green", "retransmission")):
                for _k, th in _marks_for(series, q):
                    xs, ys = _xy(th.points)
                    marker_handles.setdefault(label, ax.scatter(
                        xs, ys, s=26, marker=marker, facecolors="none", edgecolors=colour))
        ax.set_ylabel("PSN" if plane is None else f"plane {plane}\nPSN", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        for t, lab in d.marks:
            if not lab.endswith(" bad"):
                ax.axvline(t, color="red", linestyle=":", linewidth=0.7, alpha=0.6)
    handles.update(marker_handles)  # planes first, then the markers
    if handles:
        axs[k].legend(list(handles.values()), list(handles), loc="upper left",
                      bbox_to_anchor=(1.01, 1.0), fontsize=8, markerscale=2, frameon=False)
    rate_ax = axs[k + len(psn_panels)]
    stacks: list[list[float]] = []
    for plane in sorted(d.rate):
        d.rate[plane].coarsen(RATE_BINS)
    width_bins = max((b.width for b in d.rate.values()), default=1.0)
    for plane in sorted(d.rate):  # one bin width for all so they can be stacked
        b = d.rate[plane]
        while b.width < width_bins:
            b._halve()
    nb = max((len(b.bytes) for b in d.rate.values()), default=0)
    xs_common = [i * width_bins for i in range(nb)]
    for plane in sorted(d.rate):
        b = d.rate[plane]
        vals = b.bytes + [0.0] * (nb - len(b.bytes))
        stacks.append([v * 8 / width_bins / 1e6 for v in vals])
    if stacks:
        polys = rate_ax.stackplot(xs_common, *stacks, step="post",
                                  colors=[plane_colour(p) for p in sorted(d.rate)],
                                  alpha=0.8, linewidth=0)
        rate_ax.legend(polys[::-1], [f"plane {p}" for p in sorted(d.rate)][::-1],
                       loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                       frameon=False, title="stacked", title_fontsize=8)
    rate_ax.set_ylabel("Mbit/s\nper plane", fontsize=8)
    if d.cwnd.points:
        cw = axs[-1]
        xs, ys = _xy(d.cwnd.points)
        ys = [y / 1000 for y in ys]  # kB: no offset label to collide with the panel above
        cw.plot(xs, ys, color="black", linewidth=1, drawstyle="steps-post")
        lo, hi = robust_ylim(ys)
        cw.set_ylim(lo, hi)
        off = [y for y in ys if y > hi or y < lo]
        if off:
            cw.text(1.01, 0.0, f"{len(off)} early samples\noff scale (first: {off[0]:.0f} kB)",
                    transform=cw.transAxes, fontsize=7, va="bottom", color="gray")
        cw.set_ylabel("cwnd\n(kB)", fontsize=8)
    axs[-1].set_xlabel("time (s)")
    axs[-1].set_xlim(0, xmax * 1.01)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_file(path: Path, out: Path, *, title: str | None = None) -> int:
    """Plot a pcap or qlog file to PNG ``out``; returns the number of events plotted."""
    d = from_qlog(path) if is_qlog(path) else from_pcap(path)
    render(d, out, title or path.name)
    return d.events
