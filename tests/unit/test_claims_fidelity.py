"""The fidelity monitor: which runs are faithful, the report's withheld verdicts
and --rate auto's search (tools/claims/fidelity.py, fidelity_report.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import ebpf
from tools.claims import cpu as claims_cpu
from tools.claims import fidelity as fd
from tools.claims import fidelity_report as fr


def _cpu(busy_samples: list[float]) -> dict[str, Any] | None:
    """A real ``run_share`` record over crafted 100 ms samples."""
    a = claims_cpu.Jiffies(busy=0, steal=0, total=0)
    b = claims_cpu.Jiffies(busy=100, steal=0, total=200)
    return claims_cpu.run_share(a, b, 10.0, 2, None, None, busy_samples)


def _port(gaps: list[tuple[int, int]], rate_bps: int = 10**8,
          late: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """A port's raw record: busy gaps as (units of 1/GAP_UNIT ideal, count)
    pairs, lateness as (microseconds, count) pairs (default: every gap's frame
    on time)."""
    hist = [0] * ebpf.GAP_BUCKETS
    for units, n in gaps:
        hist[ebpf.gap_bucket(units)] += n
    late = late if late is not None else [(0, sum(n for _, n in gaps))]
    late_hist = [0] * ebpf.GAP_BUCKETS
    for us, n in late:
        late_hist[ebpf.gap_bucket(us * 1000 // ebpf.LATE_NS_UNIT)] += n
    return {"hist": hist, "max_units": max(u for u, _ in gaps), "rate_bps": rate_bps,
            "late_hist": late_hist, "late_max_ns": max(us for us, _ in late) * 1000}


EMPTY = {"hist": [0] * ebpf.GAP_BUCKETS, "max_units": 0, "rate_bps": 10**8,
         "late_hist": [0] * ebpf.GAP_BUCKETS, "late_max_ns": 0}
CALM = _port([(32, 900), (36, 90), (44, 10)])  # 1.0, 1.125, 1.375 ideal


def test_a_calm_run_is_faithful() -> None:
    gaps = fd.gap_window({"h0:p0/up": EMPTY}, {"h0:p0/up": CALM})
    f = fd.judge(_cpu([0.5] * 96 + [0.97] * 4), gaps)
    assert f["faithful"] is True and f["reasons"] == []
    assert f["cpu_saturated_share"] == 0.04
    assert f["p99_gap_ratio"] == pytest.approx(1.25)  # the 99th percentile's bucket top
    assert f["busy_links"] == 1 and f["busy_gaps"] == 1000
    assert gaps["h0:p0/up"]["rate_mbit"] == 100.0


def test_saturated_hosts_make_a_run_unfaithful() -> None:
    f = fd.judge(_cpu([0.99] * 30 + [0.4] * 70), {"h0:p0/up": ebpf.gap_summary(CALM["hist"])})
    assert f["faithful"] is False
    assert f["reasons"] == ["hosts saturated in 30% of 100 ms intervals (limit 5%)"]


def test_a_run_the_hypervisor_took_cpu_from_is_unfaithful() -> None:
    # No interval saturated, but the hypervisor took 17% of the CPUs: it
    # pauses whole vCPUs, hosts and links alike.
    a = claims_cpu.Jiffies(busy=0, steal=0, total=0)
    for steal, faithful in ((34, False), (2, True)):
        b = claims_cpu.Jiffies(busy=100, steal=steal, total=200)
        f = fd.judge(claims_cpu.run_share(a, b, 10.0, 2, None, None, [0.7] * 100), None)
        assert f["faithful"] is faithful, steal
    assert f["cpu"]["steal"] == 0.01
    b = claims_cpu.Jiffies(busy=100, steal=34, total=200)
    f = fd.judge(claims_cpu.run_share(a, b, 10.0, 2, None, None, [0.7] * 100), None)
    assert f["reasons"] == ["the hypervisor took 17.0% of the CPUs (steal; limit 2%)"]


def test_an_unfaithful_run_says_who_used_the_machine() -> None:
    a = claims_cpu.Jiffies(busy=0, steal=0, total=0)
    b = claims_cpu.Jiffies(busy=190, steal=0, total=200)
    cpu = claims_cpu.run_share(a, b, 10.0, 2, daemons_s=14.2, workers_s=1.8,
                               samples=[0.99] * 50 + [0.5] * 50)
    f = fd.judge(cpu, None)
    assert f["cpu"] == {"busy": 0.95, "steal": 0.0, "daemons": 0.71, "workers": 0.09}
    assert fd.line(f).endswith("(machine 95% busy: daemons 71%, workers 9%)")
    # --rate auto keeps each probe's record.
    r = fd.search_rate(lambda rate: f, (12,))
    assert r["probes"][0]["cpu"] == f["cpu"]
    text = fr.rate_auto_text({"rate_auto": {**r, "ladder": [12], "probe": "3 s"}})
    assert text is not None and "the daemons 71% of the machine" in text


def test_late_departures_make_a_run_unfaithful_and_name_the_link() -> None:
    # 5% of frames left 300 us (2.5 ideal frame times at 100 Mbit/s) behind
    # the ideal link: a shaper timer that fired late.
    late = _port([(32, 950), (96, 50)], late=[(0, 950), (300, 50)])
    gaps = fd.gap_window({}, {"h1:p0/down": late, "h0:p0/up": CALM})
    f = fd.judge(_cpu([0.3] * 100), gaps)
    assert f["faithful"] is False and f["worst_late_link"] == "h1:p0/down"
    assert 2.4 < f["p99_late_ratio"] < 2.6 and f["max_late_ratio"] == pytest.approx(300 / 121.12,
                                                                                    rel=1e-3)
    assert f["reasons"] == ["link h1:p0/down: p99 lateness 2.48 ideal frame times (0.30 ms) "
                            "behind the ideal link (limit 1)"]
    both = fd.judge(_cpu([1.0] * 100), gaps)
    assert len(both["reasons"]) == 2


def test_htb_bursts_with_nothing_late_are_faithful() -> None:
    """HTB may send up to its burst ahead of the rate and then wait: busy
    gaps of 16 ideal frame times, every frame on time or early. That is the
    shaper as designed, not a machine falling behind; the gaps are
    reported, not judged."""
    burst = _port([(1, 900), (16 * 32, 100)], late=[(0, 990), (60, 10)])
    f = fd.judge(_cpu([0.4] * 100), fd.gap_window({}, {"h0:p0/down": burst}))
    assert f["faithful"] is True, f["reasons"]
    assert f["p99_gap_ratio"] == 16.0 and f["p99_late_ratio"] < fd.LATE_P99_MAX


def test_few_busy_gaps_and_nothing_measured_are_not_judged() -> None:
    few = fd.gap_window({}, {"h0:p0/up": _port([(320, fd.MIN_BUSY_GAPS - 1)],
                                               late=[(900, fd.MIN_LATE_FRAMES - 1)])})
    f = fd.judge(None, few)
    assert f["faithful"] is None and f["p99_gap_ratio"] is None
    assert f["p99_late_ratio"] is None
    assert fd.judge(None, None)["faithful"] is None
    assert fd.line(fd.judge(None, None)) == "fidelity: not measured"


def test_queue_waits_are_reported_not_judged() -> None:
    qw = {"h0": {"mean_us": 900.0, "p99_us": 8000.0}, "h1": {"mean_us": 100.0, "p99_us": 500.0}}
    f = fd.judge(_cpu([0.2] * 100), {}, qw)
    assert f["faithful"] is True
    assert f["queue_wait_worst"] == {"host": "h0", "mean_ms": 0.9, "p99_ms": 8.0}


def _transfer(row: str, stack: str, run: str, fid: dict[str, Any]) -> dict[str, Any]:
    return {"row": row, "stack": stack, "run": run, "ok": True, "fidelity": fid}


def test_the_report_withholds_verdicts_of_unfaithful_rows() -> None:
    from tools.claims import report

    def incast(p50: float) -> dict[str, object]:
        # judged at the median burst; the slowest is shown beside it
        return {"bursts": 3, "completion_p50_over_ideal": p50,
                "completion_p100_over_ideal": p50 + 0.3, "ideal_ms": 90.0, "rtos": 0,
                "victim_ratio": 0.9, "complete": True}

    sat = fd.judge(_cpu([1.0] * 40 + [0.2] * 60), None)
    calm = fd.judge(_cpu([0.2] * 100), None)
    data: dict[str, Any] = {"rows": {"incast": {"senders": 8, "per_stack": {
        "braid": incast(1.5)}}}, "transfers": [_transfer("incast", "tcp", "x", calm)]}
    target = next(t for t in report.targets(data) if t[0].startswith("incast"))
    assert target[-1] == "NOT met"  # every run faithful: the verdict stands
    assert "1.50x (p100 1.80x)" in target[1]
    data["rows"]["incast"]["per_stack"]["braid"] = incast(1.1)  # p100 1.4: met at p50
    assert next(t for t in report.targets(data) if t[0].startswith("incast"))[-1] == "met"
    data["rows"]["incast"]["per_stack"]["braid"] = incast(1.5)
    data["transfers"].append(_transfer("incast", "braid", "x", sat))
    target = next(t for t in report.targets(data) if t[0].startswith("incast"))
    assert target[-1] == ("no verdict: not faithful (braid: hosts saturated in 40% of "
                          "100 ms intervals (limit 5%))")
    table = {(r[0], r[1]): r for _t, h, rs in report.tables(data) for r in rs
             if h[0] == "row" and h[3] == "faithful"}
    assert (table[("incast", "braid")][3], table[("incast", "braid")][5]) == ("NO", "40")
    assert table[("incast", "tcp")][3] == "yes"
    md = report.markdown({**data, "environment": {"time": "t", "machine": "m", "cpus": 2,
                                                  "system": "s", "python": "3"},
                          "commit": "c", "quick": True, "hosts": 5, "element": "e",
                          "seconds": 1.0}, [], None)
    assert "no verdict: not faithful" in md and "fidelity and CPU of each row's runs" in md


def test_plots_mark_unfaithful_runs(tmp_path: Path) -> None:
    sat = fd.judge(_cpu([1.0] * 100), None)
    bad = {("invisibility", "braid", "alltoall/faulted"), ("failover", "tcp", "faulted")}
    assert fr.mark(bad, "invisibility", "braid/alltoall/faulted").endswith("[NOT FAITHFUL]")
    assert fr.mark(bad, "invisibility", "braid/alltoall/fault_free") == \
        "braid/alltoall/fault_free"
    assert fr.mark(bad, "failover", "tcp/faulted").endswith("[NOT FAITHFUL]")
    per = {"fault_free": {"p100": 0.05}, "faulted": {"p100": 0.2}}
    data = {"rows": {"invisibility": {"per_stack": {
        "braid": {**per, "floor": {"p100": 0.1}}, "tcp": per}}},
        "transfers": [_transfer("invisibility", "braid", "alltoall/faulted", sat)]}
    assert fr.unfaithful(data) == {("invisibility", "braid", "alltoall/faulted")}
    path = fr.summary_plot(data, tmp_path, "claims")
    assert path is not None and path.name == "claims-summary.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fr.summary_plot({"rows": {}}, tmp_path, "x") is None


def test_rate_auto_takes_the_highest_faithful_rung() -> None:
    tried: list[int] = []

    def probe(rate: int) -> dict[str, Any]:  # faithful from 25 Mbit/s down
        tried.append(rate)
        return fd.judge(_cpu([1.0 if rate > 25 else 0.3] * 100), None)

    said: list[str] = []
    r = fd.search_rate(probe, (12, 100, 25, 50), said.append)
    assert tried == [100, 50, 25] and r["rate_mbit"] == 25 and r["faithful"] is True
    assert [p["faithful"] for p in r["probes"]] == [False, False, True]
    assert "NOT faithful" in said[0] and "faithful" in said[2]


def test_rate_auto_is_bounded_and_settles_on_the_lowest_rung() -> None:
    tried: list[int] = []

    def probe(rate: int) -> dict[str, Any]:
        tried.append(rate)
        return fd.judge(_cpu([1.0] * 100), None)

    r = fd.search_rate(probe, (100, 50, 25, 12))
    assert tried == [100, 50, 25, 12]  # one probe per rung, no more
    assert r == {**r, "rate_mbit": 12, "faithful": False}
    first = fd.search_rate(lambda rate: fd.judge(None, None), (100, 50))
    assert first["rate_mbit"] == 100 and len(first["probes"]) == 1  # nothing to judge by
    with pytest.raises(ValueError):
        fd.search_rate(probe, ())
    text = fr.rate_auto_text({"rate_auto": {**r, "ladder": [100, 50, 25, 12],
                                            "probe": "3 s all-to-all over 4 hosts"}})
    assert text is not None and "chose 12 Mbit/s" in text and "none was," in text


def test_rate_argument_takes_auto_or_a_number() -> None:
    import argparse

    import tools.claims.bench as bench_claims

    assert bench_claims._rate_arg("auto") == "auto" and bench_claims._rate_arg("50") == 50
    with pytest.raises(argparse.ArgumentTypeError):
        bench_claims._rate_arg("fast")


def test_a_late_reference_run_withholds_only_the_comparisons() -> None:
    # Kernel TCP's run had a late link; Braid's were faithful. A target on
    # Braid alone keeps its verdict, one that compares Braid with TCP loses it.
    late = fd.judge(_cpu([0.2] * 100), None)
    late = {**late, "faithful": False, "reasons": ["link h0:p1/up: p99 lateness 2.4"]}
    calm = fd.judge(_cpu([0.2] * 100), None)
    lines = [["asymmetric planes: goodput >= 0.9 of the sum of capacities", "0.96", "", "met"],
             ["invisibility: p100 ratio <= 1.5, >= 5x closer to 1 than tcp and mptcp", "1.2",
              "", "met"]]
    data: dict[str, Any] = {"transfers": [
        _transfer("asymmetric", "braid", "half_rate", calm),
        _transfer("asymmetric", "tcp", "half_rate", late),
        _transfer("invisibility", "braid", "alltoall/faulted", calm),
        _transfer("invisibility", "tcp", "alltoall/faulted", late)]}
    fr.withhold_verdicts(data, lines, lambda t: t.split(":")[0].split()[0])
    assert lines[0][3] == "met"
    assert lines[1][3].startswith("no verdict: not faithful (tcp: link h0:p1/up")
    assert fr.compares(lines[1][0]) and not fr.compares(lines[0][0])


def test_a_comparison_rests_on_the_stacks_it_names() -> None:
    # "10x sooner than mptcp": kernel TCP's late run (it rides one link and
    # is not compared) leaves the verdict; MPTCP's late run withholds it.
    late = {**fd.judge(_cpu([0.2] * 100), None), "faithful": False,
            "reasons": ["link h0:p0/up: p99 lateness 15.6"]}
    calm = fd.judge(_cpu([0.2] * 100), None)
    target = "taildrop links, one silent: the survivor holds >= 90% of its rate >= 10x " \
        "sooner than mptcp"
    for late_stack, want in (("tcp", "met"), ("mptcp", "no verdict: not faithful (mptcp: ")):
        lines = [[target, "5 ms", "", "met"]]
        data: dict[str, Any] = {"transfers": [
            _transfer("taildrop", s, "faulted", late if s == late_stack else calm)
            for s in ("braid", "tcp", "mptcp")]}
        fr.withhold_verdicts(data, lines, lambda t: t.split()[0])
        assert lines[0][3].startswith(want), (late_stack, lines)
    assert fr.rests_on(target, ["braid", "mptcp", "tcp"]) == ["braid", "mptcp"]
    assert fr.rests_on("x: within 20 ms", ["braid", "tcp"]) == ["braid"]
    # a comparison that names no stack it knows rests on every one
    assert fr.rests_on("x: better than the rest", ["braid", "tcp"]) == ["braid", "tcp"]


def test_rate_auto_splits_a_hosts_aggregate_over_the_planes() -> None:
    import tools.claims.bench as bench_claims

    # Two planes keep the ladder the default fabric has always had; four
    # try the same aggregates (4 x 6 is as faithful as 2 x 12 on this
    # machine); eight stop at the fabric's lowest rate.
    assert bench_claims.rate_ladder(2) == [100, 50, 25, 12]
    assert bench_claims.rate_ladder(4) == [50, 25, 12, 6]
    assert bench_claims.rate_ladder(8) == [25, 12, 6]
