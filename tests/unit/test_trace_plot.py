"""Plots from pcaps and qlog files; the QlogWriter's format and flushing."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest

from tools.cli import main as braid_main
from tools.trace.plot import Bins, Thinned
from tools.trace.qlog import EVENT_NAMES, QlogWriter, read_qlog
from tools.trace.synth import write_synthetic

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", head[16:24])
    return w, h


def _check_png(path: Path) -> None:
    w, h = _png_size(path)
    assert 600 <= w <= 3000 and 400 <= h <= 3000
    assert path.stat().st_size > 20_000  # not an empty canvas


def test_plot_fixture_pcap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.png"
    assert braid_main(["trace", "plot", str(FIX / "session.pcap"), "-o", str(out)]) == 0
    _check_png(out)
    assert "16 events" in capsys.readouterr().out  # 10 DATA, 2 trims, 2 NACKs, 2 retx


def test_plot_synthetic_pcap(tmp_path: Path) -> None:
    pcap, out = tmp_path / "s.pcap", tmp_path / "s.png"
    write_synthetic(pcap, 5000, planes=3)
    assert braid_main(["trace", "plot", str(pcap), "-o", str(out)]) == 0
    _check_png(out)


def _write_qlog(path: Path) -> None:
    with QlogWriter(path, title="t", time_origin=10.0) as q:
        t = 10.0
        for psn in range(400):
            t += 1e-5
            q.packet_sent(t, psn=psn, plane=psn % 2, ev=psn % 7, size=1100, retx=psn == 50)
            if psn == 40:
                q.trim(t, psn=psn, plane=0, ev=3, where="last-hop")
                q.nack(t, psn=psn, reason="TRIMMED_LAST_HOP", plane=0, ev=3)
                q.retransmit(t, psn=psn, plane=1, ev=4, cause="nack", old_plane=0, old_ev=3)
            if psn % 20 == 0:
                q.cwnd(t, cwnd=64000 + psn, inflight=32000)
                q.ack(t, cum_psn=psn, ack_psn=psn, plane=0, ev=1, rtt=2e-5)
            if psn == 200:
                q.fault(t, kind="link_down", target="h0:p1")
                q.ev_state(t, plane=1, ev=2, old="GOOD", new="ASSUMED_BAD", cause="timeout")
                q.message_delivered(t, peer="b", msg_id=1, size=4096)
                q.message_handed(t, peer="b", msg_id=1, size=4096)
        q.packet_received(t, psn=1, plane=0, ev=0, size=100, trimmed="fabric", ce=True)


def test_plot_qlog(tmp_path: Path) -> None:
    log, out = tmp_path / "run.qlog", tmp_path / "q.png"
    _write_qlog(log)
    assert braid_main(["trace", "plot", str(log), "-o", str(out)]) == 0
    _check_png(out)


def test_qlog_schema_and_reader(tmp_path: Path) -> None:
    log = tmp_path / "run.qlog"
    _write_qlog(log)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines[0]["name"] == "meta" and lines[0]["data"]["schema"] == "braid-qlog-1"
    events = list(read_qlog(log))
    assert {e.name for e in events} == EVENT_NAMES
    first = events[0]
    assert first.name == "packet_sent" and first.time == pytest.approx(1e-5)
    assert set(first.data) == {"type", "psn", "plane", "ev", "size", "retx", "dcid"}


def test_qlog_flush_is_bounded_by_count_and_event_time() -> None:
    sink = io.StringIO()
    flushes: list[int] = []
    sink.flush = lambda: flushes.append(len(sink.getvalue().splitlines()))  # type: ignore[method-assign]
    q = QlogWriter(sink, flush_every=3, flush_interval=0.5)
    for i in range(7):
        q.event(i * 0.01, "cwnd", cwnd=i, inflight=0)
    q.event(1.0, "fault", kind="x", target="y")  # event time jumped: flush now
    assert flushes == [1, 4, 7, 9]
    q.close()
    assert sink.getvalue().count("\n") == 9 and q.closed
    with pytest.raises(ValueError):
        q.event(2.0, "cwnd", cwnd=0, inflight=0)


def test_bad_qlog_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.qlog"
    bad.write_text('{"time": 0, "name": "meta"}\n{oops\n')
    assert braid_main(["trace", "plot", str(bad), "-o", str(tmp_path / "x.png")]) == 2


def test_thinning_and_bins_stay_bounded() -> None:
    th = Thinned(cap=100)
    for i in range(10_000):
        th.add(i, i)
    assert len(th.points) <= 100 and th.points[0] == (0, 0)
    b = Bins(0.0, width=1e-6)
    for i in range(100_000):
        b.add(i * 1e-5, 10)
    assert sum(b.bytes) == 1_000_000 and len(b.bytes) <= 4096
