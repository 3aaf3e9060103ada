"""The Wireshark Lua dissector agrees with the Python decoder, field by field."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools.trace.decode import read_packets, to_json
from tools.trace.synth import write_synthetic
from wire.constants import PacketType

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "tools" / "wireshark" / "braid.lua"
FIX = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="tshark is not installed (apt-get install tshark)")

#: tshark field -> how to read it from the Python decoder's JSON (None: absent for the type)
FIELDS: dict[str, Any] = {
    "braid.type": lambda j: PacketType[j["type"]].value,
    "braid.flags": lambda j: j["flags"],
    "braid.dcid": lambda j: j["dcid"],
    "braid.epoch": lambda j: j["epoch"],
    "braid.counter": lambda j: j["counter"],
    "braid.header_words": lambda j: j["header_words"],
    "braid.psn": lambda j: j["body"].get("psn"),
    "braid.ev": lambda j: j["body"].get("ev"),
    "braid.echo_ev": lambda j: j["body"].get("echo_ev"),
    "braid.plane": lambda j: j["body"].get("plane"),
    "braid.ack_psn": lambda j: j["body"].get("ack_psn"),
    "braid.cum_psn": lambda j: j["body"].get("cum_psn"),
    "braid.bitmap": lambda j: j["body"].get("bitmap"),
    "braid.payload_len": lambda j: j["body"].get("payload_len"),
    "braid.msg_offset": lambda j: j["body"].get("msg_offset"),
    "braid.msg_len": lambda j: j["body"].get("msg_len"),
    "braid.timestamp": lambda j: j["body"].get("timestamp"),
    "braid.echo_ts": lambda j: j["body"].get("echo_ts"),
    "braid.nack_reason": lambda j: j["body"].get("reason") if j["type"] == "NACK" else None,
    "braid.close_reason": lambda j: (j["body"].get("reason")
                                     if j["type"] in ("CLOSE", "RESET") else None),
    "braid.final_psn": lambda j: j["body"].get("final_psn"),
    "braid.src_cid": lambda j: j["body"].get("src_cid"),
    "braid.probe_id": lambda j: j["body"].get("probe_id"),
    "braid.evs": lambda j: j["body"].get("evs"),
    "braid.trimmed": lambda j: j["trimmed"],
}


def _tshark(pcap: Path) -> list[dict[str, str]]:
    argv = ["tshark", "-n", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-T", "fields",
            "-E", "separator=\t", "-E", "occurrence=f", "-e", "frame.number", "-e", "braid"]
    for name in FIELDS:
        argv += ["-e", name]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout
    rows = []
    for line in out.splitlines():
        cols = line.split("\t")
        if not cols[1]:
            continue  # not a Braid frame
        rows.append(dict(zip(FIELDS, cols[2:], strict=True)))
    return rows


def _norm(text: str) -> int | str | None:
    if text == "":
        return None
    try:
        return int(text, 0)
    except ValueError:
        return text


def _compare(pcap: Path) -> int:
    ours = [to_json(p) for p in read_packets(pcap) if p.header is not None]
    theirs = [r for r in _tshark(pcap) if r["braid.type"]]
    assert len(ours) == len(theirs)
    for i, (j, row) in enumerate(zip(ours, theirs, strict=True)):
        for name, get in FIELDS.items():
            assert _norm(row[name]) == get(j), f"packet {i + 1} ({j['type']}): {name}"
    return len(ours)


@pytest.mark.parametrize("name", ["session", "plaintext_afpacket"])
def test_dissector_matches_decode_on_fixtures(name: str) -> None:
    assert _compare(FIX / f"{name}.pcap") > 5


def test_dissector_matches_decode_on_synthetic(tmp_path: Path) -> None:
    pcap = tmp_path / "syn.pcap"
    write_synthetic(pcap, 3000, planes=4)
    assert _compare(pcap) == 3000


def test_dissector_info_column_and_malformed() -> None:
    out = subprocess.run(
        ["tshark", "-n", "-X", f"lua_script:{LUA}", "-r", str(FIX / "session.pcap")],
        check=True, capture_output=True, text=True, timeout=60).stdout
    assert "[TRIMMED fabric]" in out and "[TRIMMED last-hop]" in out
    assert "reason=TRIMMED_LAST_HOP" in out and "Braid MALFORMED" in out
