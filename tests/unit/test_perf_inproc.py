"""``braid perf --inproc``'s engine on loopback (no namespaces): one worker
process per host runs the host's endpoint (``braid.open``) and its side of the
streams; the coordinator only asks for counters."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_daemon import run, write_configs

import braid
from tools.cli.perf_run import InprocPerf, Stream, WorkerError, summary


def _perf(tmp: Path, configs: dict[str, str], size: int | None, duration: float | None
          ) -> InprocPerf:
    streams = [Stream(sid=i, src="a", dst="b", size=size, chunk=256 << 10) for i in range(2)]
    return InprocPerf(configs, lambda h: [], streams,
                      logs={h: str(tmp / f"{h}.log") for h in configs}, duration=duration,
                      interval=0.5, stall_timeout=30, verify=True)


def test_two_streams_verified_with_worker_cpu(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)
    perf = _perf(tmp_path, {"a": str(a.config), "b": str(b.config)}, 6 << 20, None)
    run(perf.run())
    res = summary(perf)
    assert res["verified"] and res["failure"] is None, res["failure"]
    assert res["bytes"] == 2 * (6 << 20)
    assert all(s["verified"] and s["bytes"] == 6 << 20 for s in res["streams"])
    assert res["retransmissions"] >= 0 and sorted(res["plane_share"]) == ["0", "1"]
    assert len(perf.deliveries) == 2 * 24  # every chunk, timed
    assert sorted(perf.cpu_s) == ["a", "b"] and all(v > 0 for v in perf.cpu_s.values())


def test_timed_run_ends_near_its_deadline(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)
    perf = _perf(tmp_path, {"a": str(a.config), "b": str(b.config)}, None, 1.5)
    run(perf.run())
    res = summary(perf)
    assert res["verified"] and res["bytes"] > 0
    assert 1.5 <= res["seconds"] < 10
    assert all(s.complete for s in perf.streams)


def test_worker_that_cannot_bind_fails_the_run_with_the_reason(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)

    async def main() -> None:
        async with braid.open(a.config):  # this process holds a's planes
            perf = _perf(tmp_path, {"a": str(a.config), "b": str(b.config)}, 1 << 20, None)
            with pytest.raises(WorkerError, match="already serves a's planes"):
                await perf.run()

    run(main())
