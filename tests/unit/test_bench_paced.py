"""The pure parts of ``braid bench paced``: /proc samples, the saturation
flag, delivery worst cases, wakeup figures, verdicts and the report table;
and the wakeup counter it reads from ``EndpointIO.stats()`` (real sockets on
loopback)."""

from __future__ import annotations

from typing import Any

import pytest
from test_aio import transfer

import tools.bench.paced as bp
from tools.claims import cpu

STAT = """cpu  1000 20 300 5000 50 10 70 5 0 0
cpu0 500 10 150 2500 25 5 35 2 0 0
intr 12345
"""


def test_parse_stat_columns_names_every_column() -> None:
    c = cpu.parse_stat_columns(STAT)
    assert c["user"] == 1000 and c["softirq"] == 70 and c["steal"] == 5
    assert c["busy"] == 1000 + 20 + 300 + 10 + 70
    assert c["total"] == c["busy"] + 5000 + 50 + 5


def test_parse_stat_columns_short_line_and_missing_line() -> None:
    c = cpu.parse_stat_columns("cpu 1 2 3 4\n")
    assert c["irq"] == c["softirq"] == c["steal"] == 0 and c["busy"] == 6
    with pytest.raises(ValueError):
        cpu.parse_stat_columns("intr 1\n")


def test_columns_between_in_cpu_seconds() -> None:
    a = cpu.parse_stat_columns(STAT)
    b = cpu.parse_stat_columns("cpu  1100 20 300 5100 50 10 170 5 0 0\n")
    d = cpu.columns_between(a, b)
    tick = cpu.tick_seconds()
    assert d["softirq"] == pytest.approx(100 * tick)
    assert d["busy"] == pytest.approx(200 * tick)
    assert d["total"] == pytest.approx(300 * tick)


def test_machine_columns_reads_this_machine() -> None:
    c = cpu.machine_columns()
    assert c is not None and c["total"] >= c["busy"] > 0


def test_saturation_flag_above_five_percent_of_intervals() -> None:
    calm = [0.5] * 95 + [0.99] * 5  # exactly 5%: not saturated
    s = bp.saturation(calm)
    assert s["saturated_share"] == 0.05 and not s["cpu_saturated"] and s["flag"] is None
    hot = [0.5] * 94 + [0.96] * 6
    s = bp.saturation(hot)
    assert s["cpu_saturated"] and s["flag"] == bp.SATURATED_FLAG
    assert bp.saturation([])["cpu_saturated"] is False


def test_busiest_second_is_a_one_second_window() -> None:
    samples = [0.2] * 20 + [1.0] * 10 + [0.2] * 20
    assert bp.busiest_second(samples) == 1.0
    assert bp.busiest_second([0.3, 0.5]) == 0.4
    assert bp.busiest_second([]) is None


def test_delivery_worst_finds_gap_and_slowest_100ms() -> None:
    per = round(0.1 / bp.BIN)
    bins = [1250] * (10 * per)  # 1250 B per 10 ms = 1 Mbit/s
    for i in range(3 * per + 2, 3 * per + 7):  # 50 ms without delivery
        bins[i] = 0
    w = bp.delivery_worst(bins + [0] * 50, 1.0)
    assert w["longest_gap_ms"] == pytest.approx(50.0)
    assert w["median_100ms_mbit"] == pytest.approx(1.0)
    assert w["worst_100ms_mbit"] == pytest.approx(0.5)
    assert bp.delivery_worst([0] * 100, 1.0)["longest_gap_ms"] is None


def test_wakeup_figures_with_and_without_counter() -> None:
    before = {"h0": {"rx_datagrams": 0, "tx_datagrams": 0,
                     "wakeups": {"readable": 0, "timer": 0, "kick": 0}},
              "h1": {"rx_datagrams": 0, "tx_datagrams": 0,
                     "wakeups": {"readable": 0, "timer": 0, "kick": 0}}}
    after = {"h0": {"rx_datagrams": 100, "tx_datagrams": 900,
                    "wakeups": {"readable": 300, "timer": 150, "kick": 50}},
             "h1": {"rx_datagrams": 900, "tx_datagrams": 100,
                    "wakeups": {"readable": 400, "timer": 100, "kick": 0}}}
    w = bp.wakeup_figures(before, after, 2.0)
    assert w["h0"]["wakeups_per_s"] == 250 and w["h0"]["datagrams_per_wakeup"] == 2.0
    assert w["h0"]["by_cause"] == {"readable": 300, "timer": 150, "kick": 50}
    assert w["all"] == {"datagrams_per_s": 1000.0, "wakeups_per_s": 500.0,
                        "datagrams_per_wakeup": 2.0}
    old = bp.wakeup_figures({"h0": {"rx_datagrams": 0}}, {"h0": {"rx_datagrams": 10}}, 1.0)
    assert old["h0"]["wakeups"] is None and old["all"]["wakeups_per_s"] is None
    assert old["all"]["datagrams_per_s"] == 10.0


def _stack(stack: str, procs: dict[str, float], busy_s: float, saturated: bool = False
           ) -> dict[str, Any]:
    gb = 1e9
    rx = {"bytes": int(gb), "t_go": 0.0, "t_last": 40.0, "bins": [1] * 4000}
    cols = {"busy": busy_s, "total": 80.0, "softirq": 4.0, "steal": 0.0}
    samples = [0.99 if saturated else 0.5] * 100
    return bp.stack_figures(stack=stack, rx=rx, tx={}, proc_s=procs, cpu=cols,
                            samples=samples, seconds_sent=40.0, capacity_mbit=400.0,
                            braid_procs=[] if stack == "tcp" else list(procs))


def test_stack_figures_per_gb_and_shares() -> None:
    r = _stack("braid", {"tx daemon": 10.0, "rx daemon": 8.0, "tx client": 1.0,
                         "rx client": 1.0}, busy_s=40.0)
    assert r["goodput_mbit"] == 200.0 and r["capacity_share"] == 0.5
    assert r["process_cpu_s_per_GB"]["tx daemon"] == 10.0
    assert r["braid_cpu_s_per_GB"] == r["stack_cpu_s_per_GB"] == 20.0
    assert r["machine_busy"] == 0.5 and r["machine_busy_cpu_s_per_GB"] == 40.0
    assert r["softirq_share"] == 0.05 and not r["cpu_saturated"]
    t = _stack("tcp", {"tx process": 1.0, "rx process": 3.0}, busy_s=8.0)
    assert t["braid_cpu_s_per_GB"] is None and t["stack_cpu_s_per_GB"] == 4.0


def test_verdicts_met_missed_and_saturated() -> None:
    fab = {"stacks": {
        "braid": _stack("braid", {"tx daemon": 2.0}, busy_s=12.0),
        "baseline": _stack("baseline", {"tx daemon": 20.0}, busy_s=30.0),
        "tcp": _stack("tcp", {"tx process": 1.0}, busy_s=10.0)}}
    v = bp.verdicts(fab)
    # Braid above the datagram floor: no verdict while the floor did not run.
    assert [x["verdict"] for x in v] == ["met", "met", "no verdict: a stack did not run"]
    assert v[0]["ratio"] == 0.1 and v[1]["ratio"] == 1.2 and v[2]["floor"]
    udp = _stack("udp", {"tx process": 1.0}, busy_s=8.0)
    udp["complete"] = True
    fab["stacks"]["udp"] = udp
    v = bp.verdicts(fab)
    # (12 - 8) / 10 = 0.4 of TCP's machine CPU per GB once the floor is out.
    assert v[2]["ratio"] == 0.4 and v[2]["verdict"] == "met"
    assert v[2]["values"] == {"braid - udp": 4.0, "tcp": 10.0}
    udp["complete"] = False
    assert "lost more than 1%" in bp.verdicts(fab)[2]["verdict"]
    del fab["stacks"]["udp"]
    fab["stacks"]["tcp"] = _stack("tcp", {"tx process": 1.0}, busy_s=4.0)
    assert bp.verdicts(fab)[1]["verdict"] == "missed"
    fab["stacks"]["baseline"] = _stack("baseline", {"tx daemon": 20.0}, busy_s=30.0,
                                       saturated=True)
    v = bp.verdicts(fab)
    assert v[0]["ratio"] == 0.1 and v[0]["verdict"] == f"no verdict: {bp.SATURATED_FLAG}"
    fab["stacks"]["baseline"] = {"skipped": "no --baseline-tree"}
    assert bp.verdicts(fab)[0]["verdict"].startswith("no verdict: a stack did not run")


def test_table_rows_have_every_column() -> None:
    fab = {"stacks": {"braid": _stack("braid", {"tx daemon": 2.0}, busy_s=12.0, saturated=True),
                      "inproc": {"skipped": "braid.open does not exist"},
                      "tcp": {"error": "tcp-rx: exited"}}}
    rows = bp.table_rows(fab)
    assert all(len(r) == len(bp.HEADER) for r in rows)
    assert rows[0][0] == "braid" and rows[0][-1].endswith("FLAG")
    assert rows[1][1] == "skipped" and rows[2][1] == "FAILED"
    assert "met" not in " ".join(bp.verdict_lines({"verdicts": bp.verdicts(fab)}))


def test_topology_shapes_only_the_shaped_fabric() -> None:
    from testbed.topology import load, plane_bottleneck_rate

    shaped = load(bp.topology("shaped", 2, 100))
    assert [plane_bottleneck_rate(shaped, p) for p in range(2)] == [100e6 / 8] * 2
    assert all(lk.element and lk.element_kind == "ebpf" for lk in shaped.links)
    veth = load(bp.topology("veth", 3, 100))
    assert veth.planes == 3 and plane_bottleneck_rate(veth, 0) is None
    assert not any(lk.element for lk in veth.links)


def test_endpoint_io_counts_wakeups() -> None:
    res = transfer("127.0.0.2", "127.0.0.3", 1 << 20)
    a, b = res["a"]["wakeups"], res["b"]["wakeups"]  # type: ignore[index]
    assert set(a) == {"readable", "timer", "kick", "poll"}
    assert a["kick"] >= 1  # the sender's queued message
    assert b["readable"] >= 1  # the receiver read the data
    assert a["readable"] >= 1  # the sender read SACKs


def test_background_net_figure() -> None:
    gb = 1e9
    rx = {"bytes": int(gb), "t_go": 0.0, "t_last": 40.0, "bins": [1] * 4000}
    r = bp.stack_figures(stack="tcp", rx=rx, tx={}, proc_s={"tx process": 1.0},
                         cpu={"busy": 40.0, "total": 80.0}, samples=[0.5], seconds_sent=40.0,
                         capacity_mbit=None, braid_procs=[], background=0.25)
    assert r["background_busy"] == 0.25
    assert r["machine_net_cpu_s_per_GB"] == 20.0  # 40 busy - 0.25 x 80 of other load
    assert r["capacity_share"] is None
    busy_machine = bp.stack_figures(stack="tcp", rx=rx, tx={}, proc_s={}, cpu={"busy": 80.0,
                                    "total": 80.0}, samples=[1.0], seconds_sent=40.0,
                                    capacity_mbit=None, braid_procs=[], background=0.97)
    assert busy_machine["machine_net_cpu_s_per_GB"] is None  # not "0": unknown


def test_merge_rounds_median_and_worst() -> None:
    runs = []
    for i, (cpu_s, worst, sat) in enumerate([(10.0, 50.0, False), (30.0, 20.0, True),
                                              (20.0, 40.0, False)]):
        r = _stack("braid", {"tx daemon": cpu_s}, busy_s=40.0 + i, saturated=sat)
        r["worst_100ms_mbit"] = worst
        r["wakeups"] = {"all": {"wakeups_per_s": 100.0 * (i + 1), "datagrams_per_wakeup": 2.0,
                                "datagrams_per_s": 10.0}}
        runs.append(r)
    runs.append({"error": "tx client: exited"})
    m = bp.merge_rounds(runs)
    assert m["process_cpu_s_per_GB"]["tx daemon"] == 20.0
    assert m["braid_cpu_s_per_GB"] == 20.0 and m["machine_busy_cpu_s"] == 41.0
    assert m["worst_100ms_mbit"] == 20.0  # the worst round's
    assert m["wakeups"]["all"]["wakeups_per_s"] == 200.0
    assert m["rounds"] == 3 and len(m["runs"]) == 4 and m["failed_rounds"]
    assert not m["cpu_saturated"]  # one round of three was saturated: the median was not
    one = {"skipped": "no --baseline-tree"}
    assert bp.merge_rounds([one, one]) is one
