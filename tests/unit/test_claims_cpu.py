"""The machine's CPU beside each claims run (tools/claims/cpu.py, report)."""

from __future__ import annotations

import os
import time

import pytest

from tools.claims import cpu
from tools.claims.report import cpu_by_row, targets

STAT = """cpu  100 10 50 800 20 5 15 40 7 0
cpu0 50 5 25 400 10 2 8 20 0 0
intr 12345
"""


def test_parse_stat_counts_busy_steal_and_leaves_guest_out() -> None:
    j = cpu.parse_stat(STAT)
    assert j.busy == 100 + 10 + 50 + 5 + 15
    assert j.steal == 40
    assert j.total == j.busy + 800 + 20 + 40  # guest (7) is inside user already
    with pytest.raises(ValueError):
        cpu.parse_stat("intr 1\n")


def _stat(user: int, system: int, idle: int, softirq: int, steal: int = 0) -> str:
    return (f"cpu  {user} 0 {system} {idle} 0 0 {softirq} {steal} 0 0\n"
            "cpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\nintr 1\n")


def test_busy_is_what_was_not_idle_with_the_clock() -> None:
    # One second on 2 CPUs: the ticks saw 40 busy and 100 idle of the 2 x TICK;
    # the rest no tick saw (interrupt work on a tickless idle CPU) and it was
    # not idle either: it is busy.
    tick = cpu.tick_seconds()
    a = cpu.parse_stat(_stat(1000, 500, 8000, 100), wall_s=100.0)
    b_text = _stat(1000 + 20, 500 + 10, 8000 + round(0.5 / tick), 100 + 10)
    b = cpu.parse_stat(b_text, wall_s=101.0)
    assert b.total - a.total == pytest.approx(2 / tick)
    share = cpu.busy_between(a, b)
    assert share == pytest.approx(1 - 0.5 / 2)  # everything but the idle half-second
    ticked = cpu.busy_between(cpu.parse_stat(_stat(1000, 500, 8000, 100)), cpu.parse_stat(b_text))
    assert ticked is not None and share is not None and ticked < share  # what the ticks alone say
    cols_a = cpu.parse_stat_columns(_stat(1000, 500, 8000, 100), wall_s=100.0)
    cols_b = cpu.parse_stat_columns(b_text, wall_s=101.0)
    d = cpu.columns_between(cols_a, cols_b)
    assert d["total"] == pytest.approx(2.0)
    assert d["busy"] == pytest.approx(1.5)
    assert d["unticked"] == pytest.approx(2.0 - 0.5 - (20 + 10 + 10) * tick)
    # Without the clock, nothing is unticked.
    assert cpu.parse_stat_columns(b_text)["unticked"] == 0
    # The counters a moment off the clock never give a share outside [0, 1].
    late = cpu.parse_stat(_stat(1000, 500, 8000 + round(3 / tick), 100), wall_s=101.0)
    assert cpu.busy_between(a, late) == 0.0


def test_run_share_is_a_fraction_of_all_cpus() -> None:
    a = cpu.Jiffies(busy=100, steal=0, total=1000)
    b = cpu.Jiffies(busy=250, steal=10, total=1200)
    s = cpu.run_share(a, b, wall_s=1.0, cpus=2, daemons_s=0.5, workers_s=4.0)
    assert s is not None
    assert s["busy"] == 0.75 and s["steal"] == 0.05
    assert s["daemons"] == 0.25
    assert s["workers"] == 1.0  # capped: 4 s over 1 s x 2 CPUs is a clock skew
    assert cpu.run_share(None, b, 1.0, 2, None, None) is None
    assert cpu.run_share(a, a, 1.0, 2, None, None) is None  # no ticks elapsed


def test_the_machine_counters_move_with_real_work() -> None:
    before = cpu.machine()
    me0 = cpu.process_seconds(os.getpid())
    assert before is not None and me0 is not None
    end = time.monotonic() + 0.3
    x = 0
    while time.monotonic() < end:  # bounded busy loop: 0.3 s
        x += 1
    after = cpu.machine()
    me1 = cpu.process_seconds(os.getpid())
    assert after is not None and me1 is not None
    assert after.total > before.total and after.busy > before.busy
    assert me1 > me0  # this process used CPU, whatever else the machine did
    assert cpu.process_seconds(2**22 + 12345) is None  # no such pid


def test_the_sampler_sees_a_saturated_machine_and_stops() -> None:
    # Two busy processes on every CPU make each 100 ms interval saturated,
    # whatever else the machine does.
    import multiprocessing as mp

    n = os.cpu_count() or 1
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_spin, args=(0.8,)) for _ in range(2 * n)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.1)
        sampler = cpu.Sampler().start()
        time.sleep(0.55)
        busy = sampler.stop()
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    assert 3 <= len(busy) <= 6
    assert max(busy) >= cpu.SATURATED
    assert not sampler._thread.is_alive()
    s = cpu.run_share(cpu.Jiffies(0, 0, 10), cpu.Jiffies(5, 0, 20), 1.0, n, None, None,
                      [0.99, 0.5, 0.96, 0.2])
    assert s is not None and s["saturated"] == 0.5


def test_a_process_that_shares_the_cores_waits_for_one() -> None:
    # Two spinning processes on every CPU beside this one: whatever else
    # the machine does, this process is runnable while they hold the cores
    # and its run-queue wait grows.
    import multiprocessing as mp

    n = os.cpu_count() or 1
    me = os.getpid()
    w0 = cpu.wait_seconds(me)
    assert w0 is not None and w0 >= 0
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_spin, args=(0.6,)) for _ in range(2 * n)]
    for p in procs:
        p.start()
    try:
        _spin(0.4)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    w1 = cpu.wait_seconds(me)
    assert w1 is not None and w1 > w0
    assert cpu.processes_waits({0: me, 1: 2**22 + 12345}).keys() == {0}  # the gone one left out


def test_the_fidelity_table_shows_the_daemons_wait_for_a_core() -> None:
    from tools.claims import fidelity_report

    runs = [_transfer("incast", "braid", 0.5), _transfer("incast", "braid", 0.6)]
    for t, w in zip(runs, (0.05, 0.12), strict=True):
        t["fidelity"] = {"faithful": True, "reasons": [], "cpu_saturated_share": 0.0}
        t["cpu"]["daemons_wait"] = w  # type: ignore[index]
    data = {"transfers": runs}
    by = cpu_by_row(data)
    assert by[("incast", "braid")]["daemons_wait_max"] == pytest.approx(12.0)
    tab = fidelity_report.table(data, by)
    assert tab is not None
    _title, header, rows = tab
    col = header.index("a daemon waiting for a core, % of the run, max")
    assert rows[0][col] == "12"


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _transfer(row: str, stack: str, busy: float | None) -> dict[str, object]:
    return {"row": row, "stack": stack, "run": "x", "ok": True,
            "cpu": None if busy is None else {"busy": busy, "steal": 0.0, "daemons": 0.4,
                                              "workers": 0.1, "cpus": 2, "wall_s": 5.0}}


def test_a_missed_target_names_how_busy_the_machine_was() -> None:
    data = {"rows": {"incast": {"per_stack": {
        "braid": {"completion_p50_over_ideal": 1.4, "completion_p100_over_ideal": 1.9,
                  "rtos": 0, "victim_ratio": 0.4, "complete": True}}}},
        "transfers": [_transfer("incast", "braid", 0.97), _transfer("incast", "braid", 0.99),
                      _transfer("incast", "braid-taildrop", 1.0),
                      _transfer("incast", "tcp", 0.5), _transfer("fairness", "braid", None)]}
    by = cpu_by_row(data)
    assert set(by) == {("incast", "braid"), ("incast", "tcp")}  # no record: left out
    assert by[("incast", "braid")]["runs"] == 3  # tail-drop counts as Braid
    assert by[("incast", "braid")]["busy_max"] == pytest.approx(100.0)
    assert by[("incast", "tcp")]["busy_p50"] == pytest.approx(50.0)
    line = next(t for t in targets(data) if t[0].startswith("incast"))
    assert line[3].startswith("NOT met") and "machine CPU busy 99% median, 100% max" in line[3]
