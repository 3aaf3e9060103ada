"""The soak's failure ledger: daemon log lines parsed, each failure set against
the fault timeline and the restarts, explained or not (tools/robustness/soak.py)."""

from __future__ import annotations

from tools.robustness.soak import Failure, Fault, Restart, classify_failures, parse_daemon_log

LOG = """\
ts=1000.000000 level=info event=connection_established peer=h1 role=initiator cid=5 remote_cid=9
ts=1010.500000 level=warning event=connection_failed peer=h1 cid=5 reason="retry budget spent: \
11 consecutive timeouts without progress for 4.100s (srtt 2.0 ms, rto 500 ms, parked planes: [])" \
drops=-
ts=1011.000000 level=info event=connecting peer=h1 cid=6
ts=1012.250000 level=info event=connection_established peer=h1 role=initiator cid=6 remote_cid=3
ts=1020.000000 level=warning event=peer_restarted peer=h1 cid=6 reason="peer does not know" x=1
garbage line with event=connection_failed and no ts
"""


def test_parse_daemon_log_reads_failures_and_reconnects() -> None:
    fails, est = parse_daemon_log("h0", LOG)
    assert [(f.time, f.peer, f.source) for f in fails] == [(1010.5, "h1", "daemon"),
                                                          (1020.0, "h1", "daemon")]
    assert fails[0].reason.startswith("retry budget spent: 11 consecutive timeouts")
    assert "parked planes: []" in fails[0].reason
    assert fails[1].reason == "peer restarted: peer does not know"
    assert est == [(1000.0, "h1"), (1012.25, "h1")]


def _fail(t: float, host: str = "h0", source: str = "daemon") -> Failure:
    return Failure(t, host, "h1" if host == "h0" else "h0", "retry budget spent", source)


def test_peer_restart_with_reconnect_is_explained() -> None:
    restarts = [Restart("h1", stop=1005.0, exited=1006.0, up=1008.0)]
    est = {"h0": [(1012.25, "h1")]}
    (row,) = classify_failures([_fail(1010.5)], [], restarts, est, run_end=2000.0)
    assert row["explained"]
    assert "peer daemon h1 restart (up again 2.5s before)" in row["why"]
    assert "reconnected after 1.8s" in row["why"]
    assert row["restart_nearby"] == "h1 SIGTERM +5.5s before"


def test_restart_without_reconnect_is_unexplained() -> None:
    restarts = [Restart("h1", stop=1005.0, exited=1006.0, up=1008.0)]
    (row,) = classify_failures([_fail(1010.5)], [], restarts, {"h0": []}, run_end=2000.0)
    assert not row["explained"]
    assert "no reconnect within 60s" in row["why"]
    # ... unless the run ended before a reconnect was due.
    (row,) = classify_failures([_fail(1010.5)], [], restarts, {"h0": []}, run_end=1030.0)
    assert row["explained"]


def test_faults_alone_do_not_explain_a_failure() -> None:
    faults = [Fault(1001.0, 1004.0, "plane_down", "plane 1 down"),
              Fault(1007.0, 1009.0, "gray", "link h1:p2 gray up"),
              Fault(900.0, 905.0, "loss", "link h0:p3 loss 5% up")]  # long before
    est = {"h0": [(1012.0, "h1")]}
    (row,) = classify_failures([_fail(1010.5)], faults, [], est, run_end=2000.0)
    assert not row["explained"]
    assert row["faults_active"] == []  # both healed before it
    assert row["faults_recent"] == ["link h1:p2 gray up", "plane 1 down"]
    assert "faults in the 10s before on planes [1, 2]" in row["why"]
    assert row["restart_nearby"] is None


def test_restart_too_long_ago_does_not_explain() -> None:
    restarts = [Restart("h1", stop=980.0, exited=981.0, up=985.0)]
    (row,) = classify_failures([_fail(1010.5)], [], restarts, {"h0": [(1011.0, "h1")]},
                               run_end=2000.0, reach=10.0)
    assert not row["explained"]
    (row,) = classify_failures([_fail(1010.5)], [], restarts, {"h0": [(1011.0, "h1")]},
                               run_end=2000.0, reach=30.0)
    assert row["explained"]


def test_own_daemon_stopping_and_the_final_stop() -> None:
    # A client's error while its own daemon drains: explained, no reconnect needed.
    restarts = [Restart("h0", stop=1010.0, exited=None, up=None)]
    (row,) = classify_failures([_fail(1010.5, source="client")], [], restarts, {},
                               run_end=1012.0)
    assert row["explained"]
    assert row["why"] == "own daemon h0 restart (stopping)"
    # A fault still active at the end (end None) counts as active.
    faults = [Fault(1009.0, None, "rate", "link h0:p0 rate 10mbit")]
    (row,) = classify_failures([_fail(1010.5)], faults, [], {}, run_end=1012.0)
    assert row["faults_active"] == ["link h0:p0 rate 10mbit"]


def test_failures_come_out_in_time_order() -> None:
    rows = classify_failures([_fail(3.0), _fail(1.0), _fail(2.0)], [], [], {}, run_end=10.0)
    assert [r["time"] for r in rows] == [1.0, 2.0, 3.0]
