"""``braid bench core-paced``: the in-memory paced transfer completes at every
pass interval, and what a pass carries grows with the interval."""

from __future__ import annotations

import math

from tools.bench.core_paced import run_one


def test_the_transfer_completes_and_longer_passes_carry_more_packets() -> None:
    size = 1 << 20
    short, long = run_one(pass_us=100, size=size), run_one(pass_us=1000, size=size)
    for r in (short, long):
        # Every byte arrived over 2 x 100 Mbit/s: at least the serialisation
        # time, and no more than a few times it (nothing stalled).
        wire = size / (2 * 100e6 / 8)
        assert wire <= r["virtual_s"] < 4 * wire, r
        assert r["data_packets"] >= size // 4096
        assert all(math.isfinite(v) and v > 0 for v in r["cpu_s"].values())
    # A pass every 1 ms carries several times the DATA of one every 100 us,
    # and the receiver's SACK batch (0.5 ms) sends fewer SACKs per packet.
    assert long["data_per_pass"] > 4 * short["data_per_pass"]
    assert long["sacks"] / long["data_packets"] < short["sacks"] / short["data_packets"]


def test_a_slow_plane_pays_its_pass_for_fewer_packets(tmp_path: object) -> None:
    import argparse
    import json
    from pathlib import Path

    from tools.bench import core_paced

    slow = run_one(rate_bps=12e6, pass_us=1000, size=1 << 20)
    wire = (1 << 20) / (2 * 12e6 / 8)
    assert wire <= slow["virtual_s"] < 4 * wire, slow
    assert slow["data_per_pass"] < 4  # ~2 DATA per 1 ms pass at 2 x 12 Mbit/s
    # The CLI: one row per rate and interval, results written where asked.
    parser = argparse.ArgumentParser()
    core_paced.add_arguments(parser)
    parser.add_argument("--out"), parser.add_argument("--quick", action="store_true")
    parser.add_argument("--update-docs", action="store_true"), parser.add_argument("--docs")
    args = parser.parse_args(["--quick", "--rate", "100,12", "--pass-us", "1000",
                              "--out", str(tmp_path)])
    assert core_paced.run(args) == 0
    data = json.loads((Path(str(tmp_path)) / "core-paced.json").read_text())
    assert set(data["results"]) == {"100/1000", "12/1000"}
