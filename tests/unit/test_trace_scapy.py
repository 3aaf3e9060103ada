"""The scapy layer: built packets equal wire.codec bytes; captures dissect like decode."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.utils import RawPcapReader

from tools.trace.decode import read_packets, to_json
from tools.trace.scapy_braid import (
    BODY_LAYERS,
    Braid,
    BraidAccept,
    BraidClose,
    BraidData,
    BraidInit,
    BraidNack,
    BraidProbe,
    BraidProbeAck,
    BraidReset,
    BraidSack,
)
from wire.codec import HandshakeCodec, Sealer
from wire.constants import Dscp, Flag, PacketType, tos, trim_point
from wire.packets import Accept, Close, Init, Nack, Probe, ProbeAck, Reset, Sack

FIX = Path(__file__).resolve().parents[1] / "fixtures"

CASES: list[tuple[object, Packet]] = [
    (Sack(10, 11, 0xF0F0, 12, 13, 14, 15, 16, 1),
     BraidSack(cum_psn=10, bitmap_base=11, bitmap=0xF0F0, ack_psn=12, echo_ev=13, echo_ts=14,
               rwnd=15, ce_count=16, plane=1)),
    (Nack(5, 6, 7, 8, 2, 3),
     BraidNack(psn=5, echo_ev=6, cum_psn=7, echo_ts=8, reason="TRIMMED_LAST_HOP", plane=3)),
    (Probe(1, 2, 3, 4, 5), BraidProbe(probe_id=1, ev=2, psn=3, timestamp=4, plane=5)),
    (ProbeAck(1, 2, 3, 4, 5), BraidProbeAck(probe_id=1, ev=2, psn=3, timestamp=4, plane=5)),
    (Close(2, 99), BraidClose(reason="RETRY_BUDGET", final_psn=99)),
    (Reset(3, 7), BraidReset(reason=3, final_psn=7)),
]


@pytest.mark.parametrize(("body", "layer"), CASES, ids=lambda c: type(c).__name__)
def test_control_round_trip(body: object, layer: Packet) -> None:
    want = Sealer(None, dcid=0xABCD, epoch=2).seal(body)  # type: ignore[arg-type]
    built = Braid(flags="PLAINTEXT", dcid=0xABCD, epoch=2, counter=0) / layer
    assert bytes(built) == want
    back = Braid(want)
    assert back.type == body.TYPE  # type: ignore[attr-defined]
    assert isinstance(back.payload, BODY_LAYERS[PacketType(back.type)])
    assert bytes(back) == want


def test_data_round_trip_and_trim() -> None:
    s = Sealer(None, dcid=7)
    s.counter = 0x1_0000_0005  # exercises the 48-bit counter split
    want = s.seal_data(psn=9, ev=300, plane=2, msg_id=4, msg_offset=64, msg_len=192,
                       timestamp=123456, payload=b"p" * 64, flags=Flag.RETX | Flag.LAST)
    built = (Braid(flags="RETX+LAST+PLAINTEXT", dcid=7, counter=0x1_0000_0005)
             / BraidData(psn=9, ev=300, plane=2, msg_id=4, msg_offset=64, msg_len=192,
                         timestamp=123456) / Raw(b"p" * 64))
    assert bytes(built) == want
    cut = trim_point(want)
    assert cut is not None
    for dscp, kind in ((Dscp.TRIMMED, "fabric"), (Dscp.TRIMMED_LAST_HOP, "last-hop"),
                       (Dscp.DATA, "yes")):
        pkt = IP(bytes(IP(tos=tos(dscp)) / UDP(sport=40300, dport=4747) / Raw(want[:cut])))
        data = pkt[BraidData]
        assert data.trimmed and data.trim_kind() == kind
        assert f"trimmed={kind}" in pkt.summary()
        assert "Braid DATA" in pkt.summary() and "psn=9" in pkt.summary()
    whole = IP(bytes(IP() / UDP(sport=40300, dport=4747) / Raw(want)))
    assert not whole[BraidData].trimmed and whole[Raw].load == b"p" * 64


def test_handshake_round_trip() -> None:
    hs = HandshakeCodec(None)
    init = Init(0x11, b"\x01" * 16, 4, 128, 9000, 77)
    acc = Accept(0x22, b"\x02" * 16, b"\x01" * 16, 4, 128, 9000, 78)
    assert bytes(Braid(type="INIT", flags="PLAINTEXT") / BraidInit(
        src_cid=0x11, nonce=b"\x01" * 16, planes=4, evs=128, mtu=9000, timestamp=77)
    ) == hs.seal(init, dcid=0)
    assert bytes(Braid(type="ACCEPT", flags="PLAINTEXT", dcid=0x11) / BraidAccept(
        src_cid=0x22, nonce=b"\x02" * 16, echo_nonce=b"\x01" * 16, planes=4, evs=128,
        mtu=9000, timestamp=78)) == hs.seal(acc, dcid=0x11)


def test_bound_to_udp_4747_both_directions() -> None:
    raw = Sealer(None, dcid=1).seal(Close(0, 0))
    for sport, dport in ((40000, 4747), (4747, 40000)):
        pkt = IP(bytes(IP() / UDP(sport=sport, dport=dport) / Raw(raw)))
        assert Braid in pkt and BraidClose in pkt
    assert Braid not in IP(bytes(IP() / UDP(sport=1, dport=2) / Raw(raw)))


def test_scapy_dissects_fixture_like_decode() -> None:
    """Every field the scapy layer shows equals the streaming decoder's, packet by packet."""
    ours = [p for p in read_packets(FIX / "session.pcap")]
    theirs = [Ether(data) for data, _meta in RawPcapReader(str(FIX / "session.pcap"))]
    assert len(ours) == len(theirs)
    for mine, pkt in zip(ours, theirs, strict=True):
        if mine.header is None:
            continue
        b = pkt[Braid]
        assert (b.type, int(b.flags), b.dcid, b.counter) == (
            mine.header.ptype, mine.header.flags, mine.header.dcid, mine.header.counter)
        body = pkt[BODY_LAYERS[mine.header.ptype]]
        for name, value in to_json(mine)["body"].items():
            if name == "reason_name":
                continue
            got = body.getfieldval(name)
            assert (got.hex() if isinstance(got, bytes) else got) == value, name
        if isinstance(body, BraidData):
            assert body.trim_kind() == mine.trim_kind
        assert len(pkt.summary()) > 20 and "\n" not in pkt.summary()
