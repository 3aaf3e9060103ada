"""``braid bench endpoint``: the measurement runs and compares like with like."""

from __future__ import annotations

import math

from tools.bench.endpoint import measure


def test_idle_connections_leave_the_busy_ones_schedule_alone() -> None:
    """The busy connection's transfer takes the same number of passes with
    or without idle connections beside it (virtual time: they change what a
    pass costs, never what it does), and every figure is a real number."""
    alone, crowded = measure(0), measure(3)
    for side in ("sender", "receiver"):
        assert alone[side]["passes"] == crowded[side]["passes"] > 100
        for r in (alone, crowded):
            assert all(math.isfinite(r[side][k]) and r[side][k] > 0
                       for k in ("median_us", "max_us", "mean_us"))
