"""Key log (``braid daemon --keylog``): per-connection keys open any plane's packets
without the handshake in the capture; malformed logs are one clear error."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tools.trace.decode import read_packets
from tools.trace.keyring import KeyRing
from wire import keylog
from wire.keys import DirectionKeys
from wire.packets import Accept, Init

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SESSION = FIX / "session.pcap"


def _keylog_of_fixture(tmp_path: Path) -> Path:
    """The key log a daemon would have written for the fixture's connection(s)."""
    ring = KeyRing.from_file(FIX / "cluster.key")
    for _ in read_packets(SESSION, verifier=ring):
        pass
    assert ring.connections >= 1
    path = tmp_path / "keys.log"
    lines = ["# a comment", ""]
    for dcid, keys in ring._keys.items():
        lines += [f"{keylog.LABEL} {dcid} {k.header.hex()} {k.payload.hex()}" for k in keys]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_keylog_opens_packets_without_the_handshake(tmp_path: Path) -> None:
    log = _keylog_of_fixture(tmp_path)
    key_only, log_only = KeyRing.from_file(FIX / "cluster.key"), KeyRing.from_files(None, log)
    no_hs = [p for p in read_packets(SESSION) if p.header is not None
             and not isinstance(p.body, Init | Accept)]
    assert len(no_hs) > 10
    # The same packets, handshake removed: the cluster key alone opens nothing ...
    for p in no_hs:
        key_only.check(p)
    assert {p.auth for p in no_hs} == {"nokey"}
    # ... the key log opens every one and recovers the payloads.
    fresh = [p for p in read_packets(SESSION) if p.header is not None
             and not isinstance(p.body, Init | Accept)]
    for p in fresh:
        log_only.check(p)
    assert {p.auth for p in fresh} == {"ok"}
    assert any(p.payload for p in fresh)


def test_keylog_rejects_a_forged_packet(tmp_path: Path) -> None:
    ring = KeyRing.from_files(None, _keylog_of_fixture(tmp_path))
    pkts = [p for p in read_packets(SESSION) if p.header is not None
            and not isinstance(p.body, Init | Accept)]
    victim = pkts[0]
    data = bytearray(victim.udp.payload)
    data[-1] ^= 1
    victim.udp.payload = bytes(data)
    ring.check(victim)
    assert victim.auth.startswith("fail:")


def test_a_dcid_with_two_key_sets_tries_both(tmp_path: Path) -> None:
    log = _keylog_of_fixture(tmp_path)
    dcid = int(log.read_text().split(keylog.LABEL)[1].split()[0])
    bogus = DirectionKeys(header=b"\1" * 32, payload=b"\2" * 32)
    with open(log, "a") as f:  # a later connection reused the id: newest is tried first
        f.write(f"{keylog.LABEL} {dcid} {bogus.header.hex()} {bogus.payload.hex()}\n")
    ring = KeyRing.from_files(None, log)
    pkts = [p for p in read_packets(SESSION, verifier=ring) if p.header is not None
            and p.header.dcid == dcid and not isinstance(p.body, Init | Accept)]
    assert pkts and {p.auth for p in pkts} == {"ok"}


def test_format_and_parse_round_trip_and_file_mode(tmp_path: Path) -> None:
    a = DirectionKeys(header=os.urandom(32), payload=os.urandom(32))
    b = DirectionKeys(header=os.urandom(32), payload=os.urandom(32))
    path = tmp_path / "k.log"
    path.write_text("")
    os.chmod(path, 0o644)
    with keylog.open_for_append(path) as f:
        f.write(keylog.format_lines(local_cid=7, remote_cid=9, send=a, recv=b))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # narrowed, never widened
    assert keylog.load(path) == {9: [a], 7: [b]}


@pytest.mark.parametrize("line", [
    f"{keylog.LABEL} 12 abc def",
    f"{keylog.LABEL} x {'0' * 64} {'0' * 64}",
    f"{keylog.LABEL} 1 {'g' * 64} {'0' * 64}",
])
def test_malformed_line_is_named(line: str) -> None:
    with pytest.raises(keylog.KeyLogError, match="line 2"):
        keylog.parse("# ok\n" + line + "\n", "k.log")


def test_cli_keylog_errors_are_one_line(tmp_path: Path) -> None:
    from test_cli_errors import one_line_error
    from test_daemon import braid_cli

    bad = tmp_path / "bad.log"
    bad.write_text(f"{keylog.LABEL} 1 2 3\n")
    one_line_error(braid_cli("trace", "decode", str(SESSION), "--keylog", str(bad)),
                   "line 1")
    one_line_error(braid_cli("trace", "stats", str(SESSION), "--keylog",
                             str(tmp_path / "missing")), "missing")


def test_stats_counts_verification(tmp_path: Path) -> None:
    from tools.trace.stats import TraceStats

    ring = KeyRing.from_files(FIX / "cluster.key", _keylog_of_fixture(tmp_path))
    s = TraceStats().add_all(read_packets(SESSION, verifier=ring)).to_json()
    assert s["auth"] == {"ok": s["total"]["packets"]}
