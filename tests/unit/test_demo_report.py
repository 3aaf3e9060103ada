"""The demo's analysis and text report, from synthetic samples (no root): stalls
and gaps are classified by phase (slow start apart), a failed run's report says
what is known and never prints None."""

from __future__ import annotations

from typing import Any

import pytest

from tools.demo.report import analyse, print_report

MB = 1 << 20


def _rows(rates: list[tuple[float, float]], *, dt: float = 0.125) -> list[dict[str, Any]]:
    """Samples every dt: (until_t, bytes per second) segments of receiver progress."""
    rows, got, t = [], 0.0, 0.0
    for until, rate in rates:
        while t < until - 1e-9:
            t = round(t + dt, 6)
            got += rate * dt
            rows.append({"mono": t, "receiver": {"bytes_received": int(got)},
                         "sender": {"packets_sent": int(got / 1368), "retransmissions": 7,
                                    "nacks_received": 2, "rtos": 1, "trims_fabric": 3,
                                    "trims_last_hop": 0},
                         "sender_planes": {"0": {"sent": int(got / 2736)},
                                           "1": {"sent": int(got / 2736)}}})
    return rows


def _analyse(rows: list[dict[str, Any]], fired: list[dict[str, Any]], *, size: int,
             send: dict[str, Any] | None, recv: dict[str, Any] | None) -> dict[str, Any]:
    return analyse(rows=rows, t0=0.0, size=size, fired=fired,
                   events=[{"at": f["t"], "fault": f["event"]} for f in fired], send=send,
                   recv=recv, duration=rows[-1]["mono"], planes=[0, 1], sender="h0",
                   receiver="h3")


def test_slow_start_and_fault_stalls_are_reported_apart() -> None:
    # a slow first second (window opening), full speed, a 1 s outage at 3 s (a fault
    # fired at 2.9 s), full speed again
    rows = _rows([(1.0, 0.2 * MB), (3.0, 10 * MB), (4.0, 0.0), (6.0, 10 * MB)])
    rep = _analyse(rows, [{"t": 2.9, "event": "plane 1 down"}], size=40 * MB, send=None,
                   recv=None)
    st = rep["stalls_by_phase"]
    assert st["slow_start"]["seconds"] >= 0.75 and st["slow_start"]["starts_at"] < 1.0
    assert st["during_faults"]["seconds"] == pytest.approx(1.0, abs=0.26)
    assert 2.9 <= st["during_faults"]["starts_at"] <= 3.25
    # the headline stall is the fault's, not slow start's (t=0.25 s)
    assert rep["longest_stall_starts_at"] == st["during_faults"]["starts_at"]
    assert rep["longest_gap_starts_at"] is not None and rep["longest_gap_starts_at"] >= 2.9
    # 'before faults' goodput leaves slow start out: ~10 MiB/s, not diluted by it
    assert rep["goodput_Mbps"]["before_fault"] == pytest.approx(10 * MB * 8 / 1e6, rel=0.1)
    assert rep["goodput_Mbps"]["before_fault"] > rep["goodput_Mbps"]["during_faults"]


def test_failed_run_report_says_what_is_known_and_no_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows([(2.0, 5 * MB), (4.0, 0.0)])
    rep = _analyse(rows, [{"t": 1.0, "event": "plane 1 down"}], size=64 * MB, send=None,
                   recv=None)
    rep.update({"ok": False, "failure": "no progress for 30 s"})
    print_report(rep)
    out = capsys.readouterr().out
    assert "None" not in out, out
    assert "FAILED: no progress for 30 s" in out
    assert "10.0 of 64 MiB delivered" in out, out
    assert rep["counters"]["retransmissions"] == 7 and rep["counters"]["rtos"] == 1
    assert rep["plane_share_sender"] == {"0": 0.5, "1": 0.5}


def test_failed_before_any_sample_prints_no_none(capsys: pytest.CaptureFixture[str]) -> None:
    rep = analyse(rows=[], t0=0.0, size=64 * MB, fired=[], events=[], send=None, recv=None,
                  duration=3.0, planes=[0, 1], sender="h0", receiver="h3")
    rep.update({"ok": False, "failure": "a daemon exited", "sampler_error": "refused"})
    print_report(rep)
    out = capsys.readouterr().out
    assert "None" not in out and "FAILED: a daemon exited" in out
    assert "no samples (sampler: refused)" in out
