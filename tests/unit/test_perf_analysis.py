"""braid perf's arithmetic: interval rows from daemon counters (a new connection
restarts them), the summary's worst interval and longest delivery gap, and the
byte-exact content check (no root, no daemons)."""

from __future__ import annotations

from tools.cli.perf_run import Perf, Sample, Stream, interval_row, summary


def _s(t: float, delivered: int, retx: int, planes: dict[str, int]) -> Sample:
    return Sample(t, delivered, {"h0>h1": {"retransmissions": retx, "rtos": 0, "trims": 0,
                                           "planes": planes}})


def test_interval_row_and_counter_restart() -> None:
    a = _s(0.0, 0, 10, {"0": 100, "1": 100})
    b = _s(1.0, 1_000_000, 15, {"0": 160, "1": 140})
    r = interval_row(a, b)
    assert r["goodput_bps"] == 8_000_000 and r["retransmissions"] == 5
    assert r["plane_share"] == {"0": 0.6, "1": 0.4}
    # the loss inference's mistakes, counted per interval like the rest
    a.sender["h0>h1"].update(spurious=4, parks=1)
    b.sender["h0>h1"].update(spurious=9, parks=3)
    r = interval_row(a, b)
    assert r["spurious_losses"] == 5 and r["plane_parks"] == 2
    # the peer restarted: counters start again from 0; never a negative count
    c = _s(2.0, 1_500_000, 3, {"0": 20, "1": 20})
    r2 = interval_row(b, c)
    assert r2["retransmissions"] == 3 and r2["plane_share"] == {"0": 0.5, "1": 0.5}


def test_summary_reports_the_worst_next_to_the_median() -> None:
    st = Stream(sid=0, src="h0", dst="h1", size=3_000_000, chunk=1000)
    st.submitted = st.received = 3_000_000
    st.done_sending = True
    perf = Perf({}, [st], duration=None, interval=1.0, stall_timeout=30, verify=True)
    perf.samples = [_s(0, 0, 0, {"0": 0}), _s(1, 1_200_000, 0, {"0": 10}),
                    _s(2, 1_500_000, 0, {"0": 20}), _s(3, 3_000_000, 0, {"0": 30})]
    perf.t0 = 100.0
    perf.deliveries = [100.1, 100.2, 100.3, 101.8, 101.9, 102.95]  # 1.5 s hole at 100.3
    perf.t_end = 2.95
    res = summary(perf)
    assert res["verified"] and res["complete"] and res["failure"] is None
    assert res["worst_interval"]["start"] == 1
    assert res["worst_interval"]["goodput_bps"] == 2_400_000
    assert res["interval_goodput_bps"]["median"] == 9_600_000
    assert res["delivery_gap_s"]["max"] == 1.5 and res["delivery_gap_s"]["max_at"] == 0.3
    assert res["delivery_gap_s"]["median"] < res["delivery_gap_s"]["max"]


def test_content_depends_on_stream_and_offset() -> None:
    a = Stream(sid=0, src="h0", dst="h1", size=None, chunk=4096)
    b = Stream(sid=1, src="h0", dst="h1", size=None, chunk=4096)
    assert a.content(0, 4096) == a.content(0, 4096)
    assert a.content(0, 4096) != a.content(4096, 4096)  # a misplaced chunk fails
    assert a.content(8192, 4096) != b.content(8192, 4096)  # another stream's chunk fails
    assert len(a.content(4096, 100)) == 100 and len(a.content(0, 5)) == 5


def test_an_unfinished_stream_is_not_verified() -> None:
    st = Stream(sid=0, src="h0", dst="h1", size=10, chunk=10)
    st.submitted, st.received, st.done_sending = 10, 5, True
    perf = Perf({}, [st], duration=None, interval=1.0, stall_timeout=30, verify=True)
    perf.samples = [_s(0, 0, 0, {}), _s(1, 5, 0, {})]
    res = summary(perf)
    assert not res["complete"] and not res["verified"]
