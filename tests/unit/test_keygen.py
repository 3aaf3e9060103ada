"""``braid keygen``: a 0600 key file that parses, never silently overwritten."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tools.cli import main
from wire.keys import CLUSTER_KEY_LEN, load_key_file, parse_key_file


def test_writes_0600_key_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    assert main(["keygen", "-o", str(path)]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(load_key_file(path)) == CLUSTER_KEY_LEN


def test_keys_are_random(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    main(["keygen", "-o", str(a)])
    main(["keygen", "-o", str(b)])
    assert load_key_file(a) != load_key_file(b)


def test_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.key"
    main(["keygen", "-o", str(path)])
    before = path.read_text()
    capsys.readouterr()
    assert main(["keygen", "-o", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("braid: error: ")
    assert "--force" in err and "Traceback" not in err
    assert path.read_text() == before


def test_force_overwrites_and_keeps_0600(tmp_path: Path) -> None:
    path = tmp_path / "cluster.key"
    path.write_text("old")
    path.chmod(0o644)
    assert main(["keygen", "-o", str(path), "--force"]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(load_key_file(path)) == CLUSTER_KEY_LEN


def test_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert len(parse_key_file(out, "stdout")) == CLUSTER_KEY_LEN


def test_unwritable_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen", "-o", str(tmp_path / "missing" / "k")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("braid: error: cannot write")


def test_directory_target_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
