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
    trims: dict[str, Thinned] = field(default_factory=dict)  # kind -> (t, psn)
    nacks: Thinned = field(default_factory=Thinned)
    retx: Thinned = field(default_factory=Thinned)
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

    def trim(self, t: float, psn: int, kind: str) -> None:
        self.trims.setdefault(kind, Thinned()).add(self.rel(t), psn)
        self.events += 1

    def nack(self, t: float, psn: int) -> None:
        self.nacks.add(self.rel(t), psn)
        self.events += 1

    def retransmission(self, t: float, psn: int) -> None:
        self.retx.add(self.rel(t), psn)
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
                d.trim(pkt.time, b.psn, pkt.trim_kind)
            if h.flags & Flag.RETX:
                d.retransmission(pkt.time, b.psn)
        elif isinstance(b, Nack):
            d.nack(pkt.time, b.psn)
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
                d.retransmission(ev.time, int(x["psn"]))
        elif ev.name == "packet_received" and not have_sent and x.get("type", "DATA") == "DATA":
            d.data(ev.time, int(x["psn"]), int(x.get("plane", 0)), int(x.get("size", 0)))
        elif ev.name == "trim":
            d.trim(ev.time, int(x["psn"]), str(x.get("where", "yes")))
        elif ev.name == "nack":
            d.nack(ev.time, int(x["psn"]))
        elif ev.name == "retransmit":
            d.retransmission(ev.time, int(x["psn"]))
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


def render(d: PlotData, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 3 if d.cwnd.points else 2
    fig, axes = plt.subplots(rows, 1, figsize=(11, 3.2 * rows + 1), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1.5, 1.2][:rows]})
    ax: Any = axes[0]
    cmap = plt.get_cmap("tab10")
    for plane in sorted(d.psn):
        xs, ys = _xy(d.psn[plane].points)
        ax.scatter(xs, ys, s=4, color=cmap(plane % 10), label=f"plane {plane}", linewidths=0)
    styles = {"fabric": ("x", "red"), "last-hop": ("x", "darkorange"), "yes": ("x", "purple")}
    for kind, series in sorted(d.trims.items()):
        marker, color = styles.get(kind, ("x", "gray"))
        xs, ys = _xy(series.points)
        ax.scatter(xs, ys, s=36, marker=marker, color=color, label=f"trim ({kind})")
    for series, marker, color, label in ((d.nacks, "v", "black", "NACK"),
                                         (d.retx, "o", "green", "retransmission")):
        if series.points:
            xs, ys = _xy(series.points)
            ax.scatter(xs, ys, s=30, marker=marker, facecolors="none", edgecolors=color,
                       label=label)
    for t, label in d.marks:
        for a in axes:
            a.axvline(t, color="gray", linestyle=":", linewidth=0.8)
        ax.annotate(label, (t, 1), xycoords=("data", "axes fraction"), rotation=90,
                    fontsize=7, va="top", ha="right", color="gray")
    ax.set_ylabel("PSN")
    ax.set_title(title)
    if d.psn or d.trims:
        ax.legend(loc="upper left", fontsize=8, markerscale=2)
    ax2: Any = axes[1]
    for plane in sorted(d.rate):
        bins = d.rate[plane]
        bins.coarsen(RATE_BINS)
        xs = [i * bins.width for i in range(len(bins.bytes))]
        ax2.step(xs, [b * 8 / bins.width / 1e6 for b in bins.bytes], where="post",
                 color=cmap(plane % 10), label=f"plane {plane}")
    ax2.set_ylabel("Mbit/s")
    if rows == 3:
        xs, ys = _xy(d.cwnd.points)
        axes[2].plot(xs, ys, color="black", linewidth=1)
        axes[2].set_ylabel("cwnd (bytes)")
    axes[-1].set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_file(path: Path, out: Path, *, title: str | None = None) -> int:
    """Plot a pcap or qlog file to PNG ``out``; returns the number of events plotted."""
    d = from_qlog(path) if is_qlog(path) else from_pcap(path)
    render(d, out, title or path.name)
    return d.events
