"""The figures of `braid bench claims`, computed exactly from made-up data."""

from __future__ import annotations

import itertools

import pytest

from tools.claims import metrics as m
from tools.claims.worker import HEADER, LAST, Worker


def test_percentile_nearest_rank_and_p100_is_max() -> None:
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert m.percentile(xs, 50) == 3.0
    assert m.percentile(xs, 100) == 5.0
    assert m.percentile(xs, 0) == 1.0
    assert m.percentile([], 50) is None
    assert m.summary(xs) == {"n": 5, "p50": 3.0, "p99": 5.0, "p100": 5.0}


def test_step_times_wait_for_the_slowest_host() -> None:
    done = {0: [1.1, 1.2, 1.9], 1: [1.15, 1.5, 1.6], 2: [1.05, 1.3]}
    # only 2 steps finished everywhere; each ends at the latest host
    assert m.step_times(done, go=1.0) == pytest.approx([0.15, 0.35])
    assert m.step_times({0: [], 1: [1.0]}, go=0.0) == []
    assert m.step_times({}, go=0.0) == []


def test_windows_and_gaps() -> None:
    bins = [1] * 5 + [0] * 3 + [1] + [0] * 2 + [1] * 9
    assert m.windows([1, 2, 3, 4], 2) == [3, 5, 7]
    assert m.windows([1], 2) == []
    assert m.gaps(bins, 0, len(bins)) == (3, 5)
    assert m.gaps(bins, 9, len(bins)) == (2, 2)


def test_failover_settles_after_the_last_short_window() -> None:
    cap = 8e6  # 1 MB/s: 10 kB per 10 ms bin, 100 kB per window
    bins = [10_000] * 100 + [0] * 5 + [10_000] * 100  # a 50 ms hole at bin 100
    r = m.failover(bins, fault_bin=100, end_bin=len(bins), capacity_bps=cap)
    # windows containing any empty bin hold 95 kB or less (< 90 kB only with 2+
    # empty bins); the last short window starts at bin 103
    assert r["settle_ms"] == pytest.approx(40.0)
    assert r["longest_gap_ms"] == pytest.approx(50.0)
    assert r["empty_bins"] == 5
    never = m.failover([10_000] * 50 + [0] * 150, 50, 200, cap)
    assert never["settle_ms"] is None
    clean = m.failover([10_000] * 200, 100, 200, cap)
    assert clean["settle_ms"] == 0 and clean["longest_gap_ms"] == 0


def test_jain_index() -> None:
    assert m.jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert m.jain([1.0, 0.0]) == pytest.approx(0.5)
    assert m.jain([]) is None and m.jain([0.0, 0.0]) is None
    flows = [[10] * 20, [10] * 10 + [0] * 10]
    assert m.jain_windows(flows, 0, 20) == pytest.approx([1.0, 0.5])


def test_time_to_share() -> None:
    flow = [0] * 10 + [1] * 30
    # first window (10 bins) with >= 8 bytes starts at bin 8 and ends at bin 18
    assert m.time_to_share(flow, 5, 8, len(flow)) == 13
    assert m.time_to_share([0] * 40, 0, 1, 40) is None


def test_time_to_share_arrivals_times_a_newcomer_to_the_message() -> None:
    # an old flow delivers a message every 10 ms; a newcomer starting at 1.0 s
    # ramps up (40, 30, 20 ms apart), then runs at the same rate
    old = [0.005 + 0.01 * k for k in range(200)]
    new = [1.05, 1.09, 1.12, 1.14, *(1.15 + 0.01 * k for k in range(80))]
    # over its last 4 messages it first carries >= 80% of the running mean at
    # 1.17 s: 4 messages in (1.12, 1.17] against the old flow's 5
    t = m.time_to_share_arrivals(new, [old, new], 1.0, 2.0)
    assert t == pytest.approx(0.17)
    # the 100 ms windows of the same arrivals cannot say less than 100 ms
    bins = [0] * 200
    for x in new:
        bins[int(x / 0.01)] += 1
    w = m.time_to_share(bins, 100, 0.8 * 10, 200)
    assert w is not None and w * m.BIN_S >= 0.1
    # a newcomer held at half the rate never gets there
    slow = [1.0 + 0.02 * k for k in range(1, 50)]
    assert m.time_to_share_arrivals(slow, [old, slow], 1.0, 2.0) is None
    # nothing running, or too few arrivals: no figure
    assert m.time_to_share_arrivals(new, [], 1.0, 2.0) is None
    assert m.time_to_share_arrivals(new[:4], [old, new[:4]], 1.0, 2.0) is None
    # the end bounds the search
    assert m.time_to_share_arrivals(new, [old, new], 1.0, 1.16) is None


def test_worker_messages_are_checked_byte_for_byte() -> None:
    spec = {"run": 7, "me": 1, "stack": "tcp", "pattern": "alltoall", "size": 4096}
    tx = Worker(spec)
    rx = Worker({**spec, "me": 2})
    good = tx.message(3, 0, LAST, 4096)
    rx.on_message(good, 0.0)
    assert rx.ok_bytes == 4096 and rx.got[(3, 0)] == {1} and rx.last_seen[3]
    bad = bytearray(good)
    bad[HEADER.size + 100] ^= 1
    rx.on_message(bytes(bad), 0.0)
    assert rx.bad == 1 and rx.errors
    rx.on_message(Worker({**spec, "run": 8}).message(3, 0, 0, 16), 0.0)
    assert rx.stale == 1  # another run's message: ignored, not corrupt
    rx.on_message(b"short", 0.0)
    assert rx.bad == 2


def test_only_the_plain_full_matrix_is_named_claims() -> None:
    from tools.claims.naming import section_name
    from tools.claims.rows import DEFAULT_ROWS, STACKS

    assert section_name(list(DEFAULT_ROWS)) == "claims"
    assert section_name(list(reversed(DEFAULT_ROWS)), stacks=list(STACKS)) == "claims"
    # Every other run is a variant, named after what differs: some rows only ...
    assert section_name([*DEFAULT_ROWS, "gaps"]) == "claims-" + "-".join(DEFAULT_ROWS) + "-gaps"
    assert section_name(["gaps"]) == "claims-gaps"
    assert section_name(["failover", "invisibility"]) == "claims-invisibility-failover"
    # ... another fabric ...
    assert section_name(list(DEFAULT_ROWS), 4, 50) == "claims-" + "-".join(DEFAULT_ROWS) + "-4x50"
    assert section_name(["invisibility"], 4, 50) == "claims-invisibility-4x50"
    assert section_name(list(DEFAULT_ROWS), mtu=4208) == \
        "claims-" + "-".join(DEFAULT_ROWS) + "-mtu4208"
    assert section_name(["incast"], 4, 50, 9000) == "claims-incast-4x50-mtu9000"
    # ... daemon settings of its own (--connection) ...
    assert section_name(list(DEFAULT_ROWS), connection={"ack_delay": 3e-4}) == \
        "claims-" + "-".join(DEFAULT_ROWS) + "-ack_delay0.0003"
    assert section_name(["incast"], connection={}) == "claims-incast"
    # ... a diagnosis switched on, fewer stacks, the other element, a quick run.
    full = "claims-" + "-".join(DEFAULT_ROWS)
    assert section_name(list(DEFAULT_ROWS), queue_wait=True) == full + "-queuewait"
    assert section_name(list(DEFAULT_ROWS), daemon_qlog=True) == full + "-qlog"
    assert section_name(list(DEFAULT_ROWS), stacks=["tcp", "braid"]) == full + "-braid-tcp"
    # The matrix's own order, whatever the order given (a JSON sorts its keys).
    assert section_name(sorted(DEFAULT_ROWS), quick=True) == full + "-quick"
    assert section_name(list(DEFAULT_ROWS), element="userspace") == full + "-userspace"
    assert section_name(list(DEFAULT_ROWS), quick=True) == full + "-quick"


def test_the_fabric_takes_a_plane_count_and_rate_within_bounds() -> None:
    from tools.claims import fabric as cf
    from tools.claims.rows import plane_cap_bps
    from tools.common.errors import UserError

    try:
        cf.configure(4, 50)
        assert cf.topology(4)["planes"] == 4 and cf.topology(4)["link"]["rate"] == "50mbit"
        assert plane_cap_bps("tcp", cf.PLANES) == pytest.approx(4 * 50e6 * 1448 / 1514)
        for bad in ((1, 100), (9, 100), (2, 4), (2, 5000)):
            with pytest.raises(UserError):
                cf.configure(*bad)
        assert (cf.PLANES, cf.RATE_MBIT) == (4, 50)  # a refused call changes nothing
    finally:
        cf.configure()
    assert (cf.PLANES, cf.RATE_MBIT, cf.MTU) == (2, 100, 1500)


def test_capacities_follow_the_fabric_mtu() -> None:
    """Every stack fills a bigger frame with more payload; the capacity a row
    divides by must follow, or a jumbo run would flatter every ratio."""
    from tools.claims import fabric as cf
    from tools.claims.rows import eff, plane_cap_bps
    from tools.common.errors import UserError

    # Braid's daemons size DATA to the path MTU: 1388 bytes at 1500, 4096 at 4208.
    assert eff("braid") == pytest.approx(1388 / 1514)
    assert eff("braid-taildrop", 4208) == pytest.approx(4096 / 4222)
    assert eff("tcp") == eff("mptcp") == pytest.approx(1448 / 1514)
    try:
        cf.configure(2, 100, 4208)
        assert cf.topology(4)["link"]["mtu"] == 4208
        assert plane_cap_bps("braid", 2) == pytest.approx(2 * 100e6 * 4096 / 4222)
        assert plane_cap_bps("tcp") == pytest.approx(100e6 * 4156 / 4222)
        for bad in (1279, 9001):
            with pytest.raises(UserError, match="--mtu"):
                cf.configure(2, 100, bad)
        assert cf.MTU == 4208
    finally:
        cf.configure()
    assert cf.topology(4)["link"]["mtu"] == 1500


def test_plane_events_time_the_park_from_the_fault() -> None:
    from tools.claims.rows import plane_events

    go = 100.0
    log = [[go + 0.5, 0, "parked", 0.001, "silence"],   # before the fault: a false park
           [go + 0.5005, 0, "up", 0.001, "probe"],
           [go + 1.0061, 1, "parked", 0.002, "silence"],  # not the plane asked about
           [go + 1.008, 0, "parked", 0.002, "local"],
           [go + 1.5, 0, "up", 0.002, "probe"]]
    res = {0: {"go": go, "conns": [{"peer": "h3", "plane_log": log, "probe_interval": 0.004,
                                   "unreachable_sends": 7}]},
           3: {"go": go, "conns": [{"peer": "h0", "plane_log": [[go + 1.02, 0, "parked",
                                                                 0.002, "silence"]]}]}}
    pe = plane_events(res, (1.0, 1.002))
    assert pe["parked_after_ms"] == pytest.approx(6.0)  # from the fault step's end
    assert pe["parked_after_srtt"] == pytest.approx(3.0)
    assert pe["parked_cause"] == "local" and pe["unreachable_sends"] == 7
    assert pe["probe_interval_ms"] == pytest.approx(4.0)
    assert [e["host"] for e in pe["events"]].count("h3") == 1
    # a park while the fault's step was still running counts as 0 ms
    assert plane_events(res, (1.005, 1.010))["parked_after_ms"] == 0.0
    assert plane_events(res, (1.6, 1.6))["parked_after_ms"] is None  # never parked after
    # a daemon that logs the srtt of the moment the plane went silent (the
    # sixth field): the park counts in those srtts, and in the park's too
    log[3] = [go + 1.008, 0, "parked", 0.002, "silence", 0.0015]
    pe = plane_events(res, (1.0, 1.002))
    assert pe["parked_after_srtt"] == pytest.approx(4.0)
    assert pe["parked_after_srtt_at_park"] == pytest.approx(3.0)
    assert pe["srtt_silent_ms"] == pytest.approx(1.5)


def test_the_stall_is_judged_in_the_srtt_when_it_began() -> None:
    from tools.claims.runs import srtt_at

    go = 100.0
    # The busiest sending connection's srtt over the run: a queue of ~5 ms
    # while the stream runs, emptied at the end (the run's last srtt).
    busy = {"packets_sent": 900, "srtt": 0.0008,
            "srtt_log": [[go + 0.01 * i, 0.005 if i < 250 else 0.0008] for i in range(1, 260)]}
    idle = {"packets_sent": 10, "srtt_log": [[go + 1.0, 0.05]]}
    res = {0: {"go": go, "conns": [idle, busy]}, 3: {"go": go, "conns": []}}
    assert srtt_at(res, 1.5) == pytest.approx(5.0)
    assert srtt_at(res, 2.555) == pytest.approx(0.8)
    assert srtt_at(res, 0.0) == pytest.approx(5.0)  # before the first entry: the first
    assert srtt_at({0: {"go": go, "conns": [{"packets_sent": 5, "srtt": 0.001}]}}, 1.0) is None


def test_a_connection_logs_its_srtt_every_10_ms_at_most() -> None:
    from testbed.sim.driver import Simulator
    from testbed.sim.scenarios import (
        _establish,
        _send_all,
        connect_pair,
        default_config,
        make_fabric,
        pattern,
    )
    from transport.conn_core import SRTT_LOG_EVERY, SRTT_LOG_LEN

    fab = make_fabric(planes=2, rate=12.5e6)
    sim = Simulator(fab)
    a, b = connect_pair(sim, "a", "b", config=default_config(fab))
    _establish(sim, a, b, limit=0.2)
    _send_all(sim, a, pattern(4 << 20), 1 << 20)
    sim.run(until=sim.now + 0.5, max_events=5_000_000)
    log = a.conn.stats()["srtt_log"]
    assert isinstance(log, list) and 2 <= len(log) <= SRTT_LOG_LEN
    times = [t for t, _ in log]
    assert all(y - x >= SRTT_LOG_EVERY for x, y in itertools.pairwise(times))
    assert all(srtt > 0 for _, srtt in log)


def test_burst_phases_split_each_step_at_the_first_senders_start() -> None:
    # Receiver done at 10.1 and 10.25; senders started bursts at these times.
    done = [10.1, 10.25, 10.4]
    starts = {2: [10.0, 10.13], 3: [10.02, 10.11]}  # burst 2 never started
    ph = m.burst_phases(done, starts, go=9.99)
    assert ph["release"] == pytest.approx([0.01, 0.01])
    assert ph["data"] == pytest.approx([0.1, 0.14])
    assert ph["spread"] == pytest.approx([0.02, 0.02])
    assert m.burst_phases(done, {}, go=9.99) == {"release": [], "data": [], "spread": []}


def test_asymmetric_verdict_names_a_case_not_run() -> None:
    from tools.claims.report import _asym_verdict

    assert _asym_verdict([0.92, None]).startswith("met (half rate")
    assert _asym_verdict([0.85, None]).startswith("NOT met")
    assert _asym_verdict([0.95, 0.88]) == "NOT met"
    assert _asym_verdict([0.95, 0.91]) == "met"
    assert _asym_verdict([None, None]) == "-"


def test_incast_controls_are_tabled_and_named_in_the_targets() -> None:
    from tools.claims import report

    def run(p100: float, victim: float | None, rtos: int) -> dict[str, object]:
        return {"bursts": 3, "completion_p50_over_ideal": 1.0,
                "completion_p100_over_ideal": p100, "ideal_ms": 90.0, "rtos": rtos,
                "victim_ratio": victim, "complete": True}

    data = {"rows": {"incast": {
        "senders": 8, "per_stack": {"braid": run(1.5, 0.5, 0)},
        "controls": {"braid, victim over tcp": run(1.9, 0.97, 0),
                     "braid, no victim": run(1.14, None, 0)}}}}
    rows = {r[0]: r for _t, _h, rs in report.tables(data) for r in rs}
    assert rows["braid, victim over tcp"][6] == "0.97"
    assert rows["braid, no victim"][3] == "1.14" and rows["braid, no victim"][6] == "-"
    target = next(t for t in report.targets(data) if t[0].startswith("incast"))
    # the verdict is Braid's own run's; the controls only say what the host took
    assert target[-1] == "NOT met"
    assert "victim over kernel TCP 0.97" in target[2] and "no victim 1.14x, 0 RTOs" in target[2]
    del data["rows"]["incast"]["controls"]  # a result without the controls
    target = next(t for t in report.targets(data) if t[0].startswith("incast"))
    assert "controls" not in target[2]


def test_newcomer_target_is_judged_by_arrivals_or_else_by_windows() -> None:
    from tools.claims import report

    def n(share: float | None, windows: float) -> dict[str, object]:
        x: dict[str, object] = {"jain_min": 0.9, "jain_median": 0.97, "jain_span": 0.99,
                                "newcomer_worst_ms": windows, "srtt_ms": 4.0,
                                "newcomer_worst_rtts": windows / 4.0, "complete": True}
        if share is not None:
            x |= {"newcomer_share_worst_ms": share, "newcomer_share_worst_rtts": share / 4.0}
        return x

    def target(data: dict[str, object]) -> list[str]:
        return next(t for t in report.targets(data) if "newcomer" in t[0])

    # 100 ms windows say 220 ms (55 srtt), the arrivals 120 ms (30 srtt)
    data: dict[str, object] = {"rows": {"fairness": {"per_stack": {
        "braid": {"n=2": n(40.0, 100.0), "n=4": n(120.0, 220.0)}}}}}
    t = target(data)
    assert t[-1] == "met" and "120 ms by message arrivals" in t[1] and "30 srtt" in t[1]
    rows = [r for _t, _h, rs in report.tables(data) for r in rs]
    assert rows[1][4:9] == ["120", "30.0", "220", "55.0", "0.99"]
    # a result with only the windows' figure: judged on it, and says so
    data = {"rows": {"fairness": {"per_stack": {
        "braid": {"n=2": n(None, 100.0), "n=4": n(None, 220.0)}}}}}
    t = target(data)
    assert t[-1] == "NOT met" and "by 100 ms windows" in t[1]
    rows = [r for _t, _h, rs in report.tables(data) for r in rs]
    assert rows[1][4] == "-"


def test_longest_pause_is_timed_to_the_arrival_not_the_bin() -> None:
    arr = [0.990, 0.996, 1.002, 1.0141, 1.020, 1.026]
    # from the last arrival at or before the fault (0.996) on: 1.002 -> 1.0141
    lp = m.longest_pause(arr, 1.0, 1.03)
    assert lp is not None
    assert lp[0] == pytest.approx(0.0121) and lp[1] == pytest.approx(1.002)
    # a pause still open at the end counts up to the end
    lp = m.longest_pause(arr, 1.0, 1.05)
    assert lp is not None and lp[0] == pytest.approx(0.024) and lp[1] == pytest.approx(1.026)
    # nothing before the fault: the pause starts at the fault
    lp = m.longest_pause([1.02, 1.025], 1.0, 1.03)
    assert lp is not None and lp[0] == pytest.approx(0.02) and lp[1] == pytest.approx(1.0)
    assert m.longest_pause(arr, 1.03, 1.05) is None  # nothing arrived after it
    # the same pause in 10 ms bins: bin [1.0, 1.01) holds 1.002, [1.01, 1.02) 1.0141:
    # no empty bin at all, though the stream paused 12.1 ms
    bins = [0] * 110
    for t in arr:
        bins[int(t / m.BIN_S)] += 1
    assert m.gaps(bins, 100, 103) == (0, 0)


def test_the_compound_park_is_judged_in_the_srtt_of_the_moment_the_plane_went_silent() -> None:
    from tools.claims import report

    def row(planes: dict[str, object], stall: float | None) -> dict[str, object]:
        return {"longest_gap_after_fault_ms": 10, "srtt_ms": 1.0, "stall_limit_ms": 14.0,
                "complete": True, "stall_ms": stall, "longest_pause_ms": 20.0,
                "arrival_spacing_ms": 5.5, "planes": planes}

    new = {"parked_after_ms": 8.8, "parked_after_srtt": 2.1, "srtt_silent_ms": 4.14,
           "parked_after_srtt_at_park": 8.8, "parked_cause": "silence",
           "probe_interval_ms": 4.0}
    data = {"rows": {"compound": {"per_stack": {"braid": row(new, 16.7)}}}}
    t = {r[0]: r for r in report.targets(data)}
    park = t["compound: the dead plane parked within 5 srtt of going silent"]
    assert park[-1] == "met" and "went silent 4.14 ms" in park[1] and "8.8 of the park's" in park[1]
    stall = t["compound: no stall longer than 10 srtt + one probe interval"]
    # judged on the timed stall (16.7 ms > 14), not on the one empty bin (10 ms)
    assert stall[-1] == "NOT met" and stall[1].startswith("16.7 ms")
    # a result without those figures: the park in the srtt logged with it, the stall in bins
    old = {k: v for k, v in new.items() if k not in ("srtt_silent_ms",
                                                      "parked_after_srtt_at_park")}
    data = {"rows": {"compound": {"per_stack": {"braid": row(old, None)}}}}
    t = {r[0]: r for r in report.targets(data)}
    assert "logged at the park" in t["compound: the dead plane parked within 5 srtt of going "
                                     "silent"][1]
    assert t["compound: no stall longer than 10 srtt + one probe interval"][-1] == "met"


def test_the_invisibility_floor_is_reported_beside_the_ratio() -> None:
    from tools.claims import report

    def run(p100: float) -> dict[str, object]:
        return {"n": 40, "p50": p100 / 2, "p99": p100, "p100": p100, "complete": True,
                "rtos": 0}

    braid: dict[str, object] = {"fault_free": run(0.060), "faulted": run(0.100),
                                "ratio_p100": 0.100 / 0.060}
    data: dict[str, object] = {"rows": {"invisibility": {"per_stack": {"braid": braid}}}}
    t = next(t for t in report.targets(data) if t[0].startswith("invisibility"))
    assert t[1] == "1.67" and "floor" not in t[1]
    rows = [r for _t, _h, rs in report.tables(data) for r in rs]
    assert len(rows) == 1
    # a full run adds the floor: plane 1 down throughout
    braid["floor"] = {**run(0.080), "skipped_steps": 3}
    braid["ratio_floor_p100"] = 0.100 / 0.080
    t = next(t for t in report.targets(data) if t[0].startswith("invisibility"))
    assert t[1] == "1.67 (faulted / floor 1.25)"
    rows = [r for _t, _h, rs in report.tables(data) for r in rs]
    assert rows[1][0].startswith("braid floor") and rows[1][4] == "80.0"
    assert rows[1][9] == "faulted / floor 1.25"
