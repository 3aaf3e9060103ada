"""``braid testbed run`` / ``daemons`` argument handling, and the host configs
``braid testbed up`` writes (no root: no fabric is built)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import daemons
from testbed.cli import run_args
from testbed.errors import TestbedError
from testbed.topology import load
from tools.cli import build_parser
from transport.daemon import parse_config


def _run(*argv: str) -> tuple[float, str | None, list[str]]:
    return run_args(build_parser().parse_args(["testbed", "run", *argv]))


def test_options_after_the_timeline_are_options_not_the_command() -> None:
    # '--timeout' is the runner's, not the workload's (else: FileNotFoundError).
    assert _run("tl.toml", "--timeout", "150", "--", "sleep", "1") == (150.0, None,
                                                                      ["sleep", "1"])
    assert _run("tl.toml", "--name", "x", "--timeout", "5") == (5.0, "x", [])
    assert _run("--timeout", "7", "tl.toml", "--", "true") == (7.0, None, ["true"])
    assert _run("tl.toml", "--", "cmd", "--timeout", "3") == (600.0, None,
                                                             ["cmd", "--timeout", "3"])
    assert _run("tl.toml", "sleep", "1") == (600.0, None, ["sleep", "1"])


def test_bad_options_after_the_timeline_are_one_clear_error() -> None:
    with pytest.raises(TestbedError, match="unknown option '--bogus'"):
        _run("tl.toml", "--bogus", "--", "true")
    with pytest.raises(TestbedError, match="--timeout must be positive"):
        _run("tl.toml", "--timeout", "0")


class _FakeTb:
    def __init__(self, tmp: Path, spec: dict[str, Any]) -> None:
        self.topo = load(spec)
        self.name = "t"
        self.run_dir = tmp
        self.hosts = self.topo.host_names
        self.planes = list(range(self.topo.planes))

    def address(self, host: str, plane: int) -> str:
        return f"10.{plane}.{int(host[1:])}.2"


def test_host_configs_are_valid_daemon_configs(tmp_path: Path) -> None:
    tb = _FakeTb(tmp_path, {"hosts": 3, "planes": 2, "fabric": {"kind": "switch"},
                            "link": {"rate": "100mbit", "host": {"up": {"rate": "80mbit"}}}})
    paths = daemons.write_host_configs(tb)
    assert (tmp_path / "cluster.key").stat().st_mode & 0o777 == 0o600
    import tomllib

    cfg = parse_config(tomllib.loads(paths["h1"].read_text()), "h1.toml", paths["h1"].parent)
    assert cfg.name == "h1"
    assert sorted(cfg.peers) == ["h0", "h2"]
    assert [str(a) for a in cfg.peers["h2"]][1].startswith("10.1.2.2")
    assert cfg.key_file is not None and cfg.key_file.resolve() == tmp_path / "cluster.key"
    assert cfg.connection.plane_rate == 80e6 / 8  # the slowest shaped host link, bytes/s
    assert cfg.socket_path == tmp_path / "hosts" / "h1.sock"


def test_unshaped_topology_keeps_the_daemon_default_rate() -> None:
    topo = load({"hosts": 2, "planes": 1, "fabric": {"kind": "switch"}, "link": {"rate": 0}})
    assert daemons.plane_rate_bytes(topo) is None


def test_daemons_parser() -> None:
    a = build_parser().parse_args(["testbed", "daemons", "up", "h0", "h2", "--name", "x"])
    assert (a.action, a.hosts, a.name) == ("up", ["h0", "h2"], "x")
