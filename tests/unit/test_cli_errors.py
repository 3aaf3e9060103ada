"""User errors of braid daemon / send / recv / stats: one line, exit 2, no traceback."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from test_daemon import Host, braid_cli, write_configs


def one_line_error(r: object, *needles: str) -> str:
    err = r.stderr.strip()  # type: ignore[attr-defined]
    assert r.returncode == 2, (r.returncode, err)  # type: ignore[attr-defined]
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("braid: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_bad_toml_names_the_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "a"\nplanes = ["127.0.0.2"\nsocket = "x"\n')
    one_line_error(braid_cli("daemon", "--config", str(cfg)), str(cfg), "line 3")


def test_missing_and_mistyped_keys_are_named(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "k"\n')
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "missing key 'planes'")
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "k"\nplanes = "127.0.0.2"\n')
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "key 'planes'", "list")
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "k"\nplanes = ["host.example"]\n')
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "key 'planes[0]'")
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "k"\nplanes = ["127.0.0.2"]\n'
                   "[connection]\nplanes = 3\n")
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "connection.planes")
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "k"\nplanes = ["127.0.0.2"]\n'
                   "[peers.b]\nplanes = [\"127.0.0.3\", \"127.0.0.4\"]\n")
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "peers.b.planes", "1 planes")
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "k"\nplanes = ["127.0.0.2"]\nprot = 1\n')
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "unknown key 'prot'")


def test_missing_key_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "a"\nsocket = "a.sock"\nkey = "nope.key"\nplanes = ["127.0.0.2"]\n')
    one_line_error(braid_cli("daemon", "--config", str(cfg)), "key 'key'", "nope.key")


def test_missing_config_file(tmp_path: Path) -> None:
    one_line_error(braid_cli("daemon", "--config", str(tmp_path / "none.toml")), "none.toml")


def test_port_in_use(tmp_path: Path) -> None:
    a, _ = write_configs(tmp_path)
    port = int(json.loads(a.config.read_text().split("planes = ")[1].splitlines()[0])[0]
               .rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.2", port))
        one_line_error(braid_cli("daemon", "--config", str(a.config)), "port in use",
                       f"127.0.0.2:{port}")


def test_second_daemon_on_same_socket(tmp_path: Path) -> None:
    a, _ = write_configs(tmp_path)
    try:
        a.start()
        other = Host("a2", a.config, a.socket)
        r = braid_cli("daemon", "--config", str(other.config))
        one_line_error(r)  # port in use or socket taken: either is one clear line
    finally:
        a.stop()


def test_no_daemon_listening(tmp_path: Path) -> None:
    one_line_error(braid_cli("stats", "--socket", str(tmp_path / "x.sock")), "no daemon")
    one_line_error(braid_cli("send", "--socket", str(tmp_path / "x.sock"), "--to", "b",
                             "--size", "1"), "no daemon")


def test_unknown_peer(tmp_path: Path) -> None:
    a, _ = write_configs(tmp_path)
    try:
        a.start()
        one_line_error(braid_cli("send", "--config", str(a.config), "--to", "zed", "--size",
                                 "1KiB"), "unknown peer 'zed'", "configured peers: b")
    finally:
        a.stop()


def test_peer_unreachable(tmp_path: Path) -> None:
    a, _ = write_configs(tmp_path)  # b is configured but never started
    try:
        a.start()
        t0 = time.monotonic()
        one_line_error(braid_cli("send", "--config", str(a.config), "--to", "b", "--size",
                                 "1KiB"), "peer unreachable")
        assert time.monotonic() - t0 < 15
    finally:
        a.stop()


def test_key_mismatch(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path, key_b=True)
    try:
        a.start()
        b.start()
        one_line_error(braid_cli("send", "--config", str(a.config), "--to", "b", "--size",
                                 "1KiB"), "peer unreachable or key mismatch")
        st = json.loads(braid_cli("stats", "--config", str(b.config), "--json").stdout)
        assert st["io"]["endpoint"]["drops"].get("tag", 0) >= 1
        assert st["connections"] == []
    finally:
        a.stop()
        b.stop()


def test_bad_size_argument() -> None:
    r = braid_cli("send", "--to", "b", "--size", "lots")
    assert r.returncode == 2 and "not a size" in r.stderr and "Traceback" not in r.stderr
