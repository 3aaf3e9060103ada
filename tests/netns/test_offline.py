"""Checks that need no root: topology validation, fault grammar, trim rewriting."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from testbed.element import checksum, mark_ce, trim_frame
from testbed.errors import TestbedError
from testbed.faults import load_timeline, parse_fault
from testbed.topology import load
from testbed.udptool import braid_like_data
from wire.constants import UDP_PORT, Dscp, trim_point

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["two-hosts-4-planes", "leafspine-8x4", "incast-8to1",
                                  "demo-4x4"])
def test_examples_load(name: str) -> None:
    topo = load(EXAMPLES / f"{name}.toml")
    assert topo.hosts >= 2 and topo.planes >= 1 and topo.links


def test_demo_timeline_loads() -> None:
    events = load_timeline(EXAMPLES / "demo-timeline.toml")
    assert events[0].fault.text == "plane 2 down" and events[0].at == 2.0


@pytest.mark.parametrize(("text", "key", "line"), [
    ("hosts = 2\nplanes = 2\n[link]\nrat = '1mbit'\n", "link.rat", 4),
    ("hosts = 2\nplanes = 2\n[link.host.down]\ntrim = 'lots'\n", "link.host.down.trim", 4),
    ("hosts = 1\nplanes = 2\n", "hosts", 1),
    ("planes = 2\n", "hosts", None),
    ("hosts = 4\nplanes = 2\n[fabric]\nkind = 'leafspine'\nleaves = 2\n",
     "fabric.spines", None),
    ("hosts = 2\nplanes = 2\n[fabric]\nkind = 'torus'\n", "fabric.kind", 4),
    ("hosts = 2\nplanes = 1\n[link.\"h7:p0\"]\nrate = '1mbit'\n", 'link."h7:p0"', 3),
])
def test_bad_topology_names_key(tmp_path: Path, text: str, key: str, line: int | None) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(TestbedError) as info:
        load(f)
    msg = str(info.value)
    assert f"key '{key}'" in msg
    if line is not None:
        assert f"bad.toml:{line}:" in msg


def test_invalid_toml_gives_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("hosts = 2\nplanes = = 2\n")
    with pytest.raises(TestbedError, match=r"line 2"):
        load(f)


@pytest.mark.parametrize("text", ["plane 2 down", "spine s1 plane 0 reboot 500ms",
                                  "link h3:p1 loss 5%", "link h1:p0 flap 200ms for 1s",
                                  "link h0:p0 gray up", "switch sw plane 0 down",
                                  "link l0-s1:p0 delay 2ms down", "host h2 heal"])
def test_fault_grammar(text: str) -> None:
    assert parse_fault(text).text == text


@pytest.mark.parametrize("text", ["plane x down", "link h0:p0 loss 120%", "link h0:p0 gray",
                                  "spine 1 plane 0 down", "link h0:p0 flap 1ms for 1h"])
def test_bad_fault(text: str) -> None:
    with pytest.raises(TestbedError):
        parse_fault(text)


def test_timeline_error_names_line(tmp_path: Path) -> None:
    f = tmp_path / "tl.txt"
    f.write_text("at 1 plane 0 down\n\nat 2 plane 0 explode\n")
    with pytest.raises(TestbedError, match=r"tl.txt:3:"):
        load_timeline(f)


def _frame(payload: bytes, tos: int) -> bytes:
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + 8 + len(payload), 1, 0x4000,
                               64, 17, 0, bytes([10, 0, 0, 2]), bytes([10, 0, 1, 2])))
    struct.pack_into("!H", ip, 10, checksum(ip))
    udp = struct.pack("!HHHH", 33333, UDP_PORT, 8 + len(payload), 0)
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + bytes(ip) + udp + payload


def test_trim_frame_fixes_lengths_and_checksums() -> None:
    payload = braid_like_data(1200, 7)
    cut = trim_point(payload)
    assert cut == 56
    out = trim_frame(_frame(payload, Dscp.DATA << 2 | 2), 20, cut, Dscp.TRIMMED_LAST_HOP)
    ip, udp = out[14:34], out[34:]
    assert len(out) == 14 + 20 + 8 + 56
    assert ip[1] == Dscp.TRIMMED_LAST_HOP << 2 | 2
    assert struct.unpack_from("!H", ip, 2)[0] == 20 + 8 + 56
    assert checksum(ip) == 0  # a valid header sums to 0xffff
    assert struct.unpack_from("!H", udp, 4)[0] == 8 + 56
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, 8 + 56)
    assert checksum(pseudo + udp) == 0
    assert bytes(udp[8:]) == payload[:56]
    marked = mark_ce(bytes(out), 20)
    assert marked[15] & 3 == 3 and checksum(marked[14:34]) == 0


def test_trim_frame_agrees_with_scapy() -> None:
    scapy = pytest.importorskip("scapy.all")
    out = trim_frame(_frame(braid_like_data(900, 1), Dscp.DATA << 2), 20, 56, Dscp.TRIMMED)
    pkt = scapy.Ether(bytes(out))
    ref = scapy.Ether(bytes(out))
    del ref[scapy.IP].chksum, ref[scapy.UDP].chksum, ref[scapy.IP].len, ref[scapy.UDP].len
    ref = scapy.Ether(bytes(ref))
    assert pkt[scapy.IP].chksum == ref[scapy.IP].chksum
    assert pkt[scapy.UDP].chksum == ref[scapy.UDP].chksum
    assert pkt[scapy.IP].tos >> 2 == Dscp.TRIMMED


def test_trim_frame6_fixes_lengths_and_checksum() -> None:
    from testbed.element import mark_ce6, trim_frame6

    payload = braid_like_data(1000, 3)
    src, dst = bytes(range(16)), bytes(range(16, 32))
    tclass = Dscp.DATA << 2 | 2
    ip6 = struct.pack("!IHBB16s16s", 6 << 28 | tclass << 20 | 0x12345, 8 + len(payload), 17,
                      64, src, dst)
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x86\xdd" + ip6 + struct.pack(
        "!HHHH", 1, UDP_PORT, 8 + len(payload), 0) + payload
    out = trim_frame6(frame, 56, Dscp.TRIMMED)
    first = struct.unpack_from("!I", out, 14)[0]
    assert first >> 28 == 6 and (first >> 20) & 0xFF == Dscp.TRIMMED << 2 | 2
    assert first & 0xFFFFF == 0x12345  # flow label (an EV carrier) untouched
    assert struct.unpack_from("!H", out, 18)[0] == 8 + 56
    udp = out[54:]
    pseudo = src + dst + struct.pack("!IxxxB", 8 + 56, 17)
    assert checksum(pseudo + udp) == 0
    ce = mark_ce6(bytes(out))
    assert (struct.unpack_from("!I", ce, 14)[0] >> 20) & 3 == 3
