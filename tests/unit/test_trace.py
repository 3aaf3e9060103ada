"""Trace tools on committed fixtures: golden decode, stats, key verification, readers."""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import pytest

from tools.cli import main as braid_main
from tools.trace.decode import format_line, read_packets, to_json
from tools.trace.keyring import KeyRing
from tools.trace.pcapio import LINKTYPE_ETHERNET, PcapWriter, open_capture
from tools.trace.stats import TraceStats
from tools.trace.synth import frame, write_synthetic
from wire.codec import Sealer
from wire.keys import format_key_file

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SESSION = FIX / "session.pcap"
PLAIN = FIX / "plaintext_afpacket.pcap"


def _decode_text(pcap: Path, verifier: KeyRing | None = None) -> str:
    pkts = list(read_packets(pcap, verifier=verifier))
    return "".join(format_line(p, pkts[0].time) + "\n" for p in pkts)


@pytest.mark.parametrize("name", ["session", "plaintext_afpacket"])
def test_golden_decode(name: str) -> None:
    pcap = FIX / f"{name}.pcap"
    assert _decode_text(pcap) == (FIX / f"{name}.decode.txt").read_text()
    got = [json.loads(json.dumps(to_json(p))) for p in read_packets(pcap)]
    want = [json.loads(line) for line in (FIX / f"{name}.decode.jsonl").read_text().splitlines()]
    assert got == want


def test_cli_decode_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert braid_main(["trace", "decode", str(SESSION)]) == 0
    assert capsys.readouterr().out == (FIX / "session.decode.txt").read_text()


def test_every_type_and_trim_kind_in_fixture() -> None:
    pkts = list(read_packets(SESSION))
    assert {p.ptype_name for p in pkts} == {
        "INIT", "ACCEPT", "DATA", "SACK", "NACK", "PROBE", "PROBE_ACK", "CLOSE", "RESET",
        "MALFORMED"}
    trims = {p.body.psn: p.trim_kind for p in pkts if p.trimmed}  # type: ignore[union-attr]
    assert trims == {6: "fabric", 7: "last-hop"}
    assert any(p.udp.ecn == 3 for p in pkts)


def test_key_verifies_and_opens_every_packet() -> None:
    ring = KeyRing.from_file(FIX / "cluster.key")
    pkts = [p for p in read_packets(SESSION, verifier=ring) if p.header is not None]
    assert {p.auth for p in pkts} == {"ok"}
    assert ring.connections == 1
    data = [p for p in pkts if p.ptype_name == "DATA" and not p.trimmed]
    # The fixture's message is bytes(range(256)) * 2, 64 bytes per PSN.
    for p in data:
        off = p.body.msg_offset  # type: ignore[union-attr]
        assert p.payload == (bytes(range(256)) * 2)[off:off + 64]
    assert _decode_text(SESSION, KeyRing.from_file(FIX / "cluster.key")) == (
        FIX / "session.decode-key.txt").read_text()


def test_wrong_key_fails_authentication(tmp_path: Path) -> None:
    key = tmp_path / "other.key"
    key.write_text(format_key_file(bytes(32)))
    pkts = [p for p in read_packets(SESSION, verifier=KeyRing.from_file(key)) if p.header]
    assert {p.auth for p in pkts} == {"fail:tag", "nokey"}


def test_stats_numbers_on_fixture() -> None:
    s = TraceStats().add_all(read_packets(SESSION)).to_json()
    assert s == json.loads((FIX / "session.stats.json").read_text())
    data_conn = s["connections"]["0x2002"]
    assert data_conn["data"] == 10
    assert data_conn["retx"] == 2
    assert data_conn["trims"] == {"fabric": 1, "last_hop": 1, "unmarked": 0}
    assert data_conn["peer_dcid"] == 0x1001
    assert data_conn["rtt_us"]["samples"] == 8
    assert 1000 < data_conn["rtt_us"]["p50"] < 50_000  # the responder waits 1 ms per SACK
    assert s["connections"]["0x1001"]["nacks"] == {"TRIMMED": 1, "TRIMMED_LAST_HOP": 1}
    assert s["malformed"] == {"version": 1}
    assert data_conn["longest_data_gap_s"] > 0.004


def test_cli_stats_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert braid_main(["trace", "stats", "--json", str(PLAIN)]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["connections"]["0x4004"]["data"] == 3
    assert s["total"]["packets"] == 9


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.pcap"
    bad.write_bytes(b"not a capture at all")
    assert braid_main(["trace", "decode", str(bad)]) == 2
    assert braid_main(["trace", "stats", str(tmp_path / "missing.pcap")]) == 2
    err = capsys.readouterr().err
    assert "not a pcap" in err and "no such file" in err


def _to_pcapng(src: Path, dst: Path, ifname: str) -> None:
    """Rewrite a pcap as pcapng (SHB, IDB with if_name and ns resolution, EPBs)."""
    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    frames = list(open_capture(src))
    opts = struct.pack("<HH", 2, len(ifname)) + ifname.encode() + b"\0" * (-len(ifname) % 4)
    opts += struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", frames[0].interface.linktype, 0, 0) + opts)
    for f in frames:
        ts = round(f.time * 1e9)
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(f.data),
                                    f.wire_len) + f.data)
    dst.write_bytes(out)


def test_pcapng_reads_like_pcap(tmp_path: Path) -> None:
    ng = tmp_path / "s.pcapng"
    _to_pcapng(SESSION, ng, "p1")
    a, b = list(read_packets(SESSION)), list(read_packets(ng))
    assert [to_json(p)["body"] for p in a if p.header] == [
        to_json(p)["body"] for p in b if p.header]
    assert all(abs(x.time - y.time) < 1e-6 for x, y in zip(a, b, strict=True))
    # Packets without a plane field take it from the interface name.
    init = next(p for p in b if p.ptype_name == "INIT")
    assert init.iface == "p1" and init.plane == 1


def test_truncated_capture_ends_cleanly(tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(SESSION.read_bytes()[:-30])
    assert len(list(read_packets(cut))) == len(list(read_packets(SESSION))) - 1


def test_writer_round_trip_and_garbage_payloads(tmp_path: Path) -> None:
    path = tmp_path / "w.pcap"
    s = Sealer(None, dcid=5)
    good = s.seal_data(psn=1, ev=2, plane=3, msg_id=0, msg_offset=0, msg_len=4, timestamp=0,
                       payload=b"abcd")
    src, dst = bytes((10, 0, 0, 1)), bytes((10, 0, 0, 2))
    with PcapWriter(path, LINKTYPE_ETHERNET, nanoseconds=True) as w:
        w.write(1.5, frame(src, dst, 40000, 4747, 0, good))
        for junk in (b"", b"\x01", b"\x01\x03" + bytes(40), good[:20], b"\x01\x63" + bytes(50)):
            w.write(2.0, frame(src, dst, 40000, 4747, 0, junk))
        w.write(3.0, frame(src, dst, 40000, 9999, 0, good))  # not Braid's port: skipped
    pkts = list(read_packets(path))
    assert len(pkts) == 6
    assert pkts[0].time == 1.5 and pkts[0].psn == 1 and pkts[0].plane == 3
    assert [p.error for p in pkts[1:]] == ["short", "short", "header_len", "short", "type"]


def test_streaming_memory_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stops growing with the capture once the bounded tables are full.

    The tables' caps are lowered so that both captures overflow them (the
    synthetic trace has no SACKs: every DATA packet stays outstanding); a
    capture four times longer then costs no more memory."""
    import tools.trace.stats as trace_stats

    monkeypatch.setattr(trace_stats, "MAX_OUTSTANDING", 2048)
    monkeypatch.setattr(trace_stats, "MAX_EV_ROWS", 256)

    def peak_of(n_packets: int) -> tuple[int, int]:
        path = tmp_path / f"big{n_packets}.pcap"
        n = write_synthetic(path, n_packets, payload=64)
        tracemalloc.start()
        try:
            stats = TraceStats().add_all(read_packets(path))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert stats.total.packets == n
        return n, peak

    _, small = peak_of(12_000)
    n, large = peak_of(48_000)
    assert n == 48_000
    # Unbounded, the 36,000 more outstanding packets alone would take ~4 MiB.
    assert large < small * 1.25 + (256 << 10), \
        f"peak {small / 2**20:.2f} MiB at 12k packets, {large / 2**20:.2f} MiB at 48k"
