"""The claims orchestrator's side of a worker run (tools/claims/fabric.py),
without namespaces: results come through a file, and a worker that gives no
result is reported with the reason (exit code, last stderr line), not just
"h0: worker gave no result"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.claims.fabric import ClaimsFabric, _Lines, _parse_result


def _worker(code: str) -> tuple[subprocess.Popen[bytes], _Lines]:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    return p, _Lines(p)


def test_a_result_file_line_is_read_from_the_file(tmp_path: Path) -> None:
    big = {"result": {"bins": {str(k): list(range(5000)) for k in range(8)}}}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(big))
    line = json.dumps({"result_file": str(f)})
    assert len(line) < 200 < len(json.dumps(big)) // 100
    assert _parse_result(line) == big["result"]
    missing = _parse_result(json.dumps({"result_file": str(tmp_path / "none")}))
    assert missing is not None and "unreadable" in missing["errors"][0]
    assert _parse_result(json.dumps({"result": {"x": 1}})) == {"x": 1}  # inline still works
    assert _parse_result('{"result": {"bins": [1, 2') is None  # a cut line is no result


def test_a_worker_without_result_says_why(tmp_path: Path) -> None:
    fab = ClaimsFabric(1, "t", tmp_path)
    fab._errlog(0).write_text("Traceback ...\nValueError: boom\n")
    p, rd = _worker("import sys; print('{\"result\": {\"cut'); sys.exit(3)")
    line = rd.readline(time.monotonic() + 30)
    assert line is not None and _parse_result(line) is None
    rd.unparsed.append(line)
    assert rd.readline(time.monotonic() + 30) is None and rd.eof
    res = fab._no_result(0, p, rd, 68.0)
    why = res["errors"][0]
    assert "exit code 3" in why and "ValueError: boom" in why and "cut" in why, why
    assert "no result file" in why

    # The stdout line was lost but the worker wrote its result: that is the result.
    fab._result_file(0).write_text(json.dumps({"result": {"ok_bytes": 5}}))
    p, rd = _worker("pass")
    assert rd.readline(time.monotonic() + 30) is None
    res = fab._no_result(0, p, rd, 68.0)
    assert res["ok_bytes"] == 5 and "exit code 0" in res["stdout_lost"]


def test_a_worker_still_running_at_the_deadline_is_reported_so(tmp_path: Path) -> None:
    fab = ClaimsFabric(1, "t", tmp_path)
    p, rd = _worker("import time; time.sleep(30)")
    try:
        assert rd.readline(time.monotonic() + 0.2) is None and not rd.eof
        assert "still running" in fab._no_result(0, p, rd, 68.0)["errors"][0]
    finally:
        p.kill()
        p.wait(10)


def test_the_worker_writes_its_result_to_the_file_and_names_it_on_stdout(
        tmp_path: Path) -> None:
    f = tmp_path / "w.result"
    spec = {"run": 1, "me": 0, "stack": "braid", "pattern": "stream", "timeout": 30,
            "socket": str(tmp_path / "no-daemon.sock"), "result_file": str(f)}
    r = subprocess.run([sys.executable, "-m", "tools.claims.worker", json.dumps(spec)],
                       capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip()) == {"result_file": str(f)}
    res = _parse_result(r.stdout.strip())
    assert res is not None and res["fatal"] and "no daemon socket" in res["errors"][0], res


def test_connection_settings_are_checked_as_the_daemon_would() -> None:
    import tomllib

    from tools.claims.fabric import connection_toml, parse_connection
    from tools.common.errors import UserError

    got = parse_connection(["ack_delay=3e-4", " ack_every = 16", "spray_run=8"])
    assert got == {"ack_delay": 3e-4, "ack_every": 16, "spray_run": 8}
    # what the daemon's config file gets reads back the same
    assert tomllib.loads(connection_toml({**got, "plane_rate": 12.5e6})) == {
        **got, "plane_rate": 12.5e6}
    # one parameter of the controller, a TOML dotted key in [connection]
    got = parse_connection(["congestion_params.host_floor=true"])
    assert tomllib.loads(connection_toml(got)) == {"congestion_params": {"host_floor": True}}
    for bad, why in (("ack_delay", "KEY=VALUE"), ("=3", "KEY=VALUE"),
                     ("congestion_params.host_flor=true", "host_flor"),
                     ("no_such_key=1", "unknown key"), ("planes=4", "unknown key"),
                     ("ack_delay=[1, 2]", "number, true/false or a string"),
                     ("ack_delay=1e", "not a TOML scalar"),
                     ("ack_every=0", "ack_every")):
        with pytest.raises(UserError, match=why):
            parse_connection([bad])


def test_bench_help_names_each_bench_s_own_docs_file(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` describes the bench (its module docstring) and says which file
    ``--update-docs`` edits: docs/claims.md for the claims, not benchmarks.md."""
    from tools.cli import build_parser

    parser = build_parser()
    for argv, docs in ((["bench", "claims", "--help"], "docs/claims.md"),
                       (["bench", "element", "--help"], "docs/testbed.md"),
                       (["bench", "wire", "--help"], "docs/benchmarks.md")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == 0
        text = capsys.readouterr().out
        assert f"replace this benchmark's section in {docs}" in text, text
        assert f"braid bench {argv[1]}:" in text, text  # the description
        assert "``" not in text, text
        if argv[1] == "claims":  # the rows it runs, and what it costs
            assert "incast 8->1" in text and "--quick 2-4" in text, text


@pytest.mark.parametrize(("planes", "rate", "msg"), [
    (2, 100, 64 << 10),   # the default fabric: the claims' 64 KiB message
    (2, 12, 8 << 10),     # --rate auto's lowest rung: the same time per message
    (4, 50, 64 << 10),    # the same capacity on more planes
    (4, 100, 64 << 10),   # a faster fabric keeps 64 KiB
    (4, 6, 8 << 10),      # four planes at the aggregate of 2 x 12
    (2, 5, 4 << 10),      # the lowest rate the fabric takes (4 KiB at least)
])
def test_stream_messages_take_the_same_time_at_any_rate(planes: int, rate: int,
                                                        msg: int) -> None:
    from tools.claims import fabric as cf
    from tools.claims.runs import stream_msg

    saved = cf.PLANES, cf.RATE_MBIT, cf.MTU
    try:
        cf.configure(planes=planes, rate_mbit=rate)
        assert stream_msg() == msg
    finally:
        cf.configure(planes=saved[0], rate_mbit=saved[1], mtu=saved[2])
