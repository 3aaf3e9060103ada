"""Bytes each link of a host received, sampled every few milliseconds inside
the host's namespace: what crossed each plane, resends and headers included,
where the workers' bins count only whole messages delivered to the
application (a 64 KiB message is ~30% of a 10 ms bin at 2 x 100 Mbit/s, too
coarse to judge a bin against the link rate).

Run as ``python -m tools.claims.linkbins IFACES INTERVAL_S`` in the host's
namespace: prints ``{"ready": true}``, samples ``/proc/net/dev`` (per
namespace) every ``INTERVAL_S`` until a line (or EOF) on stdin, then prints
``{"samples": [[t, rx_bytes of each iface...], ...]}`` (t on
CLOCK_MONOTONIC, the clock the workers' go time is on). ``link_bins`` turns
the samples into 10 ms bins relative to go.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tools.claims.metrics import BIN_S

REPO = Path(__file__).resolve().parents[2]

#: At most this many samples (~3 minutes at 2 ms): a bound, never reached by a row.
MAX_SAMPLES = 90_000


def read_rx(ifaces: Sequence[str], text: str) -> list[int]:
    """Received bytes of each of ``ifaces`` in ``/proc/net/dev``'s ``text``
    (0 for an interface not listed)."""
    rx = dict.fromkeys(ifaces, 0)
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        name = name.strip()
        if name in rx and rest.split():
            rx[name] = int(rest.split()[0])
    return [rx[i] for i in ifaces]


def link_bins(samples: Sequence[Sequence[float]], go: float, nbins: int
              ) -> list[list[int]]:
    """Per interface, bytes received in each 10 ms bin from ``go``: the
    increase between two samples is spread over the time between them (a
    steady rate in between), so a bin holds its share whichever samples
    fall in it (whole deltas by the later sample would swing a bin by one
    sample interval's bytes, 20% at 2 ms)."""
    n = len(samples[0]) - 1 if samples else 0
    acc = [[0.0] * nbins for _ in range(n)]
    for prev, cur in itertools.pairwise(samples):
        t0, t1 = prev[0] - go, cur[0] - go
        deltas = [cur[k + 1] - prev[k + 1] for k in range(n)]
        if not any(deltas):
            continue
        if t1 <= t0:  # no time between them: all at the later one
            i = int(t1 / BIN_S)
            if 0 <= i < nbins:
                for k in range(n):
                    acc[k][i] += deltas[k]
            continue
        for i in range(max(0, math.floor(t0 / BIN_S)), min(nbins, math.floor(t1 / BIN_S) + 1)):
            share = (min(t1, (i + 1) * BIN_S) - max(t0, i * BIN_S)) / (t1 - t0)
            if share > 0:
                for k in range(n):
                    acc[k][i] += deltas[k] * share
    return [[round(x) for x in row] for row in acc]


def first_after(samples: Sequence[Sequence[float]], iface: int, t: float, nbytes: int
                ) -> float | None:
    """The first sample time after ``t`` by which interface ``iface`` (its
    index) had received ``nbytes`` more than at the last sample at or before
    ``t``; None if it never did."""
    base = None
    for s in samples:
        if s[0] <= t or base is None:
            base = s[iface + 1]
        elif s[iface + 1] - base >= nbytes:
            return float(s[0])
    return None


class SamplerProcess:
    """A sampler module (``python -m MODULE IFACES INTERVAL``: this one, or
    ``tools.claims.qdiscbins``) running in a testbed node's namespace for
    one run: started here, ``wait_ready`` before the run, ``stop`` after it
    for its samples ([] if it never answered; bounded)."""

    def __init__(self, tb: Any, node: str, module: str, ifaces: Sequence[str],
                 interval: float) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc: subprocess.Popen[str] = tb.popen(
            node, [sys.executable, "-m", module, ",".join(ifaces), str(interval)],
            cwd=str(REPO), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, text=True)

    def wait_ready(self, timeout: float = 30.0) -> bool:
        assert self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return bool(r) and '"ready"' in self.proc.stdout.readline()

    def stop(self) -> list[list[float]]:
        try:
            out, _ = self.proc.communicate("stop\n", timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return []
        for line in reversed(out.splitlines()):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                samples: list[list[float]] = json.loads(line)["samples"]
                return samples
        return []


def sample_until_told(read: Callable[[], list[float]], interval: float) -> list[list[float]]:
    """``[t, *read()]`` every ``interval`` s (t on CLOCK_MONOTONIC) until a
    line, or EOF, on stdin; at most ``MAX_SAMPLES`` rows. Prints
    ``{"ready": true}`` first (the run starts once every sampler is)."""
    samples: list[list[float]] = []
    print(json.dumps({"ready": True}), flush=True)
    while len(samples) < MAX_SAMPLES:
        t = time.monotonic()
        samples.append([round(t, 6), *read()])
        r, _, _ = select.select([sys.stdin], [], [], max(0.0, interval - (time.monotonic() - t)))
        if r:
            break
    return samples


def main(argv: list[str]) -> int:
    ifaces = argv[0].split(",")
    with open("/proc/net/dev") as f:
        def read() -> list[float]:
            f.seek(0)
            return [float(x) for x in read_rx(ifaces, f.read())]

        samples = sample_until_told(read, float(argv[1]))
    print(json.dumps({"samples": samples}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
