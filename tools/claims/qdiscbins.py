"""A plain link's shaper, sampled every few milliseconds inside the sending
host's namespace, and the ideal link it is held against.

A ``taildrop = true`` link is a tbf at the host's egress (testbed/fabric.py):
the link's queue is the tbf's, its departures the tbf's ``bytes``. The
sampler reads both for a few interfaces (``testbed.qdisc_nl``, one netlink
dump per sample, ~15 us). From the samples:

- ``ideal``: what an ideal link at the tbf's rate would have sent, fed the
  same bytes (accepted = dequeued + queued; a virtual queue between samples,
  each interval's arrivals taken at its end: the least the ideal link could
  have sent, so the link is never called late for a burst that came late);
- ``lateness``: how far the real link was behind that ideal one as it sent
  (queued bytes beyond the virtual queue), in times of a 1,514-byte frame,
  weighted by the frames sent: the figure the eBPF ports keep per frame in
  the kernel (``testbed.ebpf.late_summary``), so ``tools.claims.fidelity.
  judge`` takes it as it is. A shaper whose timer or softirq ran late (a
  busy host) falls behind; one that sends early (its token bucket's burst)
  reads 0. Sampled, it is a lower bound: lateness under one interval's
  arrivals at the link rate (``resolution``, ~16 frames at 100 Mbit/s and 2
  ms) reads 0, so a run it calls late was late, and one it passes was not
  late by more than that;
- ``excused``: the 10 ms bins a link fell short in although the ideal link
  would not have (the stack kept the queue supplied): the emulator's, not
  the stack's, and left out of the stack's figures.

Taking each interval's arrivals at its end matters: taken as even, a GSO
run or a paced run that came just before a sample was counted as if the
ideal link had been sending it since the previous one, and the tail-drop
row read 18-35 frames of p99 lateness on a machine 30% busy.

Run as ``python -m tools.claims.qdiscbins IFACES INTERVAL_S`` in the host's
namespace: prints ``{"ready": true}``, samples until a line (or EOF) on
stdin, then prints ``{"samples": [[t, bytes, backlog, ...], ...]}`` (t on
CLOCK_MONOTONIC; ``bytes`` and ``backlog`` of each interface's root qdisc in
turn, 0 when it has none).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Sequence
from typing import Any

from testbed.qdisc_nl import QdiscReader
from tools.claims.linkbins import SamplerProcess, sample_until_told

#: The frame lateness is counted in (a full 1,500-byte packet on Ethernet).
FRAME_BYTES = 1514


def ideal(samples: Sequence[Sequence[float]], rates: Sequence[float]
          ) -> tuple[list[list[float]], list[list[float]]]:
    """Per interface (``rates`` in bytes/s, one per interface): the ideal
    link's cumulative departures at each sample, as samples ``[t, d0, d1,
    ...]`` (``tools.claims.linkbins.link_bins`` bins them), and its virtual
    queue at each sample (bytes). The virtual queue starts at the real one."""
    n = len(rates)
    deps: list[list[float]] = []
    queues: list[list[float]] = [[] for _ in range(n)]
    q = [0.0] * n
    prev: Sequence[float] | None = None
    for s in samples:
        row = [float(s[0])]
        for k in range(n):
            sent, backlog = float(s[1 + 2 * k]), float(s[2 + 2 * k])
            if prev is None:
                q[k] = backlog
            else:
                arrived = (sent + backlog) - (float(prev[1 + 2 * k]) + float(prev[2 + 2 * k]))
                # Arrivals taken as late as the samples allow (at the end
                # of the interval): the ideal link then sends the least it
                # could have, so lateness is never overstated.
                # (A purge, a link reset, reads as bytes leaving unsent.)
                q[k] = max(0.0, max(0.0, q[k] - rates[k] * max(0.0, s[0] - prev[0])) + arrived)
            queues[k].append(q[k])
            row.append(sent + backlog - q[k])
        deps.append(row)
        prev = s
    return deps, queues


def lateness(samples: Sequence[Sequence[float]], rates: Sequence[float],
             t0: float | None = None, t1: float | None = None) -> list[dict[str, Any]]:
    """Per interface, between ``t0`` and ``t1`` (CLOCK_MONOTONIC; None: all):
    frames sent and the p50 / p99 / max of the link's lateness, weighted by
    the frames sent in each sample interval, in ideal frame times and in
    microseconds (``late_summary``'s keys)."""
    _deps, queues = ideal(samples, rates)
    out = []
    for k, rate in enumerate(rates):
        pts: list[tuple[float, float]] = []  # (lateness bytes, frames sent)
        for i in range(1, len(samples)):
            t = samples[i][0]
            if (t0 is not None and t < t0) or (t1 is not None and t > t1):
                continue
            frames = (samples[i][1 + 2 * k] - samples[i - 1][1 + 2 * k]) / FRAME_BYTES
            if frames > 0:
                pts.append((max(0.0, samples[i][2 + 2 * k] - queues[k][i]), frames))
        out.append(_summary(pts, rate))
    return out


def _summary(pts: list[tuple[float, float]], rate: float) -> dict[str, Any]:
    n = sum(w for _v, w in pts)
    res: dict[str, Any] = {"frames": round(n), "p50": None, "p99": None, "max": None,
                           "p50_us": None, "p99_us": None, "max_us": None}
    if n <= 0 or rate <= 0:
        return res
    pts.sort()
    vals = {"max": pts[-1][0]}
    for q in (50, 99):
        rank, seen = q / 100 * n, 0.0
        for v, w in pts:
            seen += w
            if seen >= rank:
                vals[f"p{q}"] = v
                break
    for key, v in vals.items():
        res[key] = round(v / FRAME_BYTES, 3)
        res[f"{key}_us"] = round(v / rate * 1e6, 3)
    return res


def resolution(rate: float, samples: Sequence[Sequence[float]]) -> float | None:
    """The least lateness the samples can show, in frames: what a link at
    ``rate`` (bytes/s) sends in their median interval (a link later than
    ideal by less reads 0, as arrivals are taken at each interval's end)."""
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(samples))
    return round(rate * gaps[len(gaps) // 2] / FRAME_BYTES, 1) if gaps else None


def excused(received: Sequence[int], ideal_bins: Sequence[float], target: float) -> set[int]:
    """The bins a link fell short of ``target`` bytes in although an ideal
    link fed the same bytes would not have: the emulator lost them, not the
    transport (its sender kept the queue supplied)."""
    return {i for i, (got, want) in enumerate(zip(received, ideal_bins, strict=False))
            if got < target <= want}


class ShaperSampler:
    """This module's sampler in each node of a testbed that has plain tbf
    ports (``Testbed.shaped_ports``), for one run window; ``stop`` gives
    their lateness in the shape ``tools.claims.fidelity.judge`` takes
    (``{port: {"gaps": 0, "late": {...}}}``, ports that sent frames only)."""

    def __init__(self, tb: Any, interval: float = 0.002) -> None:
        self.ports: dict[str, list[tuple[str, str, int]]] = tb.shaped_ports()
        self.procs = {node: SamplerProcess(tb, node, "tools.claims.qdiscbins",
                                           [ifname for _n, ifname, _r in ports], interval)
                      for node, ports in self.ports.items()}
        for p in self.procs.values():  # each ready before the run starts (bounded)
            p.wait_ready()

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for node, p in self.procs.items():
            samples = p.stop()
            if len(samples) < 2:
                continue
            ports = self.ports[node]
            rates = [r / 8 for _n, _i, r in ports]
            for (name, _i, rate), late in zip(ports, lateness(samples, rates), strict=True):
                if late["frames"]:
                    out[name] = {"gaps": 0, "late": late, "rate_mbit": round(rate / 1e6, 3),
                                 "resolution_frames": resolution(rate / 8, samples)}
        return out


def main(argv: list[str]) -> int:
    ifaces = argv[0].split(",")
    with QdiscReader() as reader:
        def read() -> list[float]:
            row: list[float] = []
            for q in reader.roots(ifaces):
                row += [q.bytes, q.backlog] if q is not None else [0, 0]
            return row

        samples = sample_until_told(read, float(argv[1]))
    print(json.dumps({"samples": samples}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
