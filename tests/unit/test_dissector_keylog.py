"""The Wireshark dissector with the key-log preference verifies and decrypts
exactly what the Python key ring does, packet by packet (no handshake needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_keylog import SESSION, _keylog_of_fixture

from tools.trace.decode import read_packets
from tools.trace.keyring import KeyRing

LUA = Path(__file__).resolve().parents[2] / "tools" / "wireshark" / "braid.lua"

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="tshark is not installed (apt-get install tshark)")


def _tshark(pcap: Path, keylog: Path) -> list[tuple[str, str]]:
    out = subprocess.run(
        ["tshark", "-n", "-X", f"lua_script:{LUA}", "-o", f"braid.keylog:{keylog}", "-r",
         str(pcap), "-T", "fields", "-E", "separator=\t", "-e", "braid.auth", "-e",
         "braid.plaintext"], check=True, capture_output=True, text=True, timeout=300).stdout
    rows = []
    for line in out.splitlines():
        auth, _, plain = line.partition("\t")
        rows.append((auth, plain))
    return rows


def test_dissector_matches_the_python_key_ring(tmp_path: Path) -> None:
    log = _keylog_of_fixture(tmp_path)
    ring = KeyRing.from_files(None, log)
    py = [(p.auth, bytes(p.payload).hex() if p.payload else "")
          for p in read_packets(SESSION, verifier=ring, include_malformed=True)]
    lua = _tshark(SESSION, log)
    assert len(lua) == len(py)
    checked = 0
    for (la, lp), (pa, pp) in zip(lua, py, strict=True):
        if pa in ("", "plaintext"):
            continue
        assert la == pa, (la, pa)
        assert lp.replace(":", "") == pp
        checked += 1
    assert checked > 10 and any(pp for _, pp in py)  # payloads were compared too


def test_dissector_rejects_a_wrong_key(tmp_path: Path) -> None:
    log = _keylog_of_fixture(tmp_path)
    lines = log.read_text().splitlines()
    bad = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4:
            parts[2] = ("0" if parts[2][0] != "0" else "1") + parts[2][1:]
        bad.append(" ".join(parts))
    log.write_text("\n".join(bad) + "\n")
    auth = {a for a, _ in _tshark(SESSION, log) if a}
    assert "ok" not in auth and "fail:tag" in auth
