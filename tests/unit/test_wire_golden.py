"""Golden bytes of wire format v1: fixed keys, nonces, ids and counters.

Every packet type is sealed from fixed inputs and compared with hex committed
here, and the same hex appears in ``wire/SPEC.md`` (checked below), so the
spec, the encoder and the decoder cannot drift apart. Regenerate the spec's
blocks with ``python tests/unit/test_wire_golden.py`` after a deliberate
format change (and bump the version).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wire import (
    Accept,
    Close,
    CloseReason,
    Data,
    Flag,
    HandshakeCodec,
    Init,
    Nack,
    NackReason,
    Opener,
    PacketType,
    Probe,
    ProbeAck,
    Reset,
    Sack,
    Sealer,
    UnknownConn,
    WireError,
    derive_connection_keys,
    peek_untrusted,
    trim_point,
)
from wire.packets import Body

SPEC = Path(__file__).resolve().parents[2] / "wire" / "SPEC.md"

SECRET = bytes(range(32))
I_NONCE = bytes.fromhex("00112233445566778899aabbccddeeff")
R_NONCE = bytes.fromhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
I_CID = 0x11111111
R_CID = 0x22222222
#: Counters chosen so both halves of the 48-bit field are visible.
COUNTER = 0x0001_0000_0002
PAYLOAD = b"hello, braid v1!"

DATA = Data(
    psn=1000, ev=0x2A, plane=1, payload_len=len(PAYLOAD), msg_id=7, msg_offset=4096,
    msg_len=8192, timestamp=123456,
)
DATA_FLAGS = Flag.ACK_REQ | Flag.LAST

#: name -> (body, flags) for packets sealed by the initiator's ``Sealer``.
CONNECTION_CASES: dict[str, tuple[Body, int]] = {
    "DATA": (DATA, DATA_FLAGS),
    "SACK": (
        Sack(cum_psn=1000, bitmap_base=1001, bitmap=0x5, ack_psn=1003, echo_ev=0x2A,
             echo_ts=123456, rwnd=65536, ce_count=2, plane=1),
        Flag.ECN_ECHO,
    ),
    "NACK": (
        Nack(psn=1001, echo_ev=0x2A, cum_psn=1000, echo_ts=123456,
             reason=NackReason.TRIMMED_LAST_HOP, plane=1),
        0,
    ),
    "PROBE": (Probe(probe_id=9, ev=0x2B, psn=1002, timestamp=123500, plane=0), 0),
    "PROBE_ACK": (ProbeAck(probe_id=9, ev=0x2B, psn=1000, timestamp=123500, plane=0), 0),
    "CLOSE": (Close(reason=CloseReason.NORMAL, final_psn=2000), 0),
    "RESET": (Reset(reason=CloseReason.PROTOCOL_ERROR, final_psn=2000), 0),
}

INIT = Init(src_cid=I_CID, nonce=I_NONCE, planes=4, evs=128, mtu=4096, timestamp=1000)
ACCEPT = Accept(
    src_cid=R_CID, nonce=R_NONCE, echo_nonce=I_NONCE, planes=4, evs=128, mtu=4096,
    timestamp=1010,
)


#: The responder restarted and no longer knows its id 0x22222222; it echoes
#: the counter of the DATA packet above.
UNKNOWN = UnknownConn(cid=R_CID, echo_counter=COUNTER)


def _keys():  # type: ignore[no-untyped-def]
    return derive_connection_keys(
        SECRET, initiator_nonce=I_NONCE, responder_nonce=R_NONCE,
        initiator_cid=I_CID, responder_cid=R_CID,
    )


def _seal(body: Body, flags: int, *, plaintext: bool = False) -> bytes:
    send, _ = _keys().for_initiator()
    sealer = Sealer(None if plaintext else send, dcid=R_CID)
    sealer.counter = COUNTER
    return sealer.seal(body, PAYLOAD if isinstance(body, Data) else b"", flags)


def golden_packets() -> dict[str, bytes]:
    """Every golden datagram by name, in the order SPEC.md shows them."""
    hs = HandshakeCodec(SECRET)
    out = {
        "INIT": hs.seal(INIT, dcid=0),
        "ACCEPT": hs.seal(ACCEPT, dcid=I_CID),
    }
    for name, (body, flags) in CONNECTION_CASES.items():
        out[name] = _seal(body, flags)
    cut = trim_point(out["DATA"])
    assert cut is not None
    out["DATA_TRIMMED"] = out["DATA"][:cut]
    out["DATA_PLAINTEXT"] = _seal(DATA, DATA_FLAGS, plaintext=True)
    out["INIT_PLAINTEXT"] = HandshakeCodec(None).seal(INIT, dcid=0)
    out["UNKNOWN_CONN"] = hs.seal(UNKNOWN, dcid=0)
    return out


def hexdump(data: bytes) -> str:
    """Offset and 16 bytes per line, the format of SPEC.md's examples."""
    return "\n".join(
        f"{i:04x}  " + " ".join(f"{b:02x}" for b in data[i : i + 16])
        for i in range(0, len(data), 16)
    )


def spec_blocks(text: str) -> dict[str, bytes]:
    """The golden blocks of SPEC.md: ``<!-- golden:NAME -->`` then a text fence."""
    blocks = {}
    for name, body in re.findall(r"<!-- golden:(\w+) -->\s*```text\n(.*?)```", text, re.S):
        hexdigits = "".join("".join(line.split()[1:]) for line in body.strip().splitlines())
        blocks[name] = bytes.fromhex(hexdigits)
    return blocks


EXPECTED: dict[str, str] = {
    "INIT": (
        "0101000c0000000000000000000000001111111100112233445566778899aabb"
        "ccddeeff0400008010000000000003e8a888bdedc00bf52720c1893dfb0d7f84"
    ),
    "ACCEPT": (
        "0102001011111111000000000000000022222222a0a1a2a3a4a5a6a7a8a9aaab"
        "acadaeaf00112233445566778899aabbccddeeff0400008010000000000003f2"
        "0c65064fcd3d02a2d1611ae0cefbfc52"
    ),
    "DATA": (
        "0103060d222222220000000100000002000003e80000002a0100001000000007"
        "000000000000100000000000000020000001e2409fbeb186659740fc4497fbfe"
        "e7636492fe078a06d9c551e3a28f15bb27488a70c6a0b4a93251217cdf2481d9"
        "86247288"
    ),
    "SACK": (
        "0104080d222222220000000100000002000003e8000003e90000000000000005"
        "000003eb0000002a0001e240000100000002010058c4f74028ddd900bc9eecc1"
        "65909432"
    ),
    "NACK": (
        "01050009222222220000000100000002000003e90000002a000003e80001e240"
        "02010000a445f68cec254879727be1a92346703f"
    ),
    "PROBE": (
        "01060009222222220000000100000002000000090000002b000003ea0001e26c"
        "0000000030f3cabe0bb55b429dd4f583b46e7e2e"
    ),
    "PROBE_ACK": (
        "01070009222222220000000100000002000000090000002b000003e80001e26c"
        "0000000057eb9767884523759880687852d4c73e"
    ),
    "CLOSE": (
        "0108000622222222000000010000000200000000000007d04cdd23d9199b7550"
        "4827d39dc14c0ae9"
    ),
    "RESET": (
        "0109000622222222000000010000000200030000000007d03c2199a771dd0775"
        "e95629b7d54e7d8d"
    ),
    "DATA_TRIMMED": (
        "0103060d222222220000000100000002000003e80000002a0100001000000007"
        "000000000000100000000000000020000001e2409fbeb186659740fc4497fbfe"
        "e7636492"
    ),
    "DATA_PLAINTEXT": (
        "0103860d222222220000000100000002000003e80000002a0100001000000007"
        "000000000000100000000000000020000001e240000000000000000000000000"
        "0000000068656c6c6f2c20627261696420763121"
    ),
    "INIT_PLAINTEXT": (
        "0101800c0000000000000000000000001111111100112233445566778899aabb"
        "ccddeeff0400008010000000000003e800000000000000000000000000000000"
    ),
    "UNKNOWN_CONN": (
        "010a0007000000000000000000000000222222220000000100000002fa8734ee"
        "c521f6d1a230736f7e885fdb"
    ),
}


def test_every_type_has_a_golden() -> None:
    names = set(golden_packets())
    assert {t.name for t in PacketType} <= names


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_bytes(name: str) -> None:
    assert golden_packets()[name].hex() == EXPECTED[name]


def test_expected_covers_all() -> None:
    assert set(EXPECTED) == set(golden_packets())


def test_spec_matches_encoder() -> None:
    blocks = spec_blocks(SPEC.read_text())
    golden = golden_packets()
    assert set(blocks) == set(golden), "SPEC.md golden blocks differ from the test's set"
    for name, data in golden.items():
        assert blocks[name] == data, f"SPEC.md example {name} drifted from the encoder"


@pytest.mark.parametrize("name", list(CONNECTION_CASES))
def test_golden_decodes_to_its_inputs(name: str) -> None:
    _, recv = _keys().for_responder()
    body, flags = CONNECTION_CASES[name]
    pkt = Opener(recv).open_untrusted(golden_packets()[name])
    assert pkt.body == body
    assert pkt.header.counter == COUNTER
    assert pkt.header.dcid == R_CID
    assert pkt.header.flags == flags
    assert pkt.trimmed is False
    assert pkt.payload == (PAYLOAD if name == "DATA" else None)


def test_golden_trimmed_decodes() -> None:
    _, recv = _keys().for_responder()
    pkt = Opener(recv).open_untrusted(golden_packets()["DATA_TRIMMED"])
    assert pkt.trimmed and pkt.payload is None and pkt.body == DATA


def test_golden_plaintext_decodes() -> None:
    g = golden_packets()
    pkt = Opener(None).open_untrusted(g["DATA_PLAINTEXT"])
    assert pkt.payload == PAYLOAD and pkt.header.flags & Flag.PLAINTEXT
    # The plaintext payload is visible on the wire, unencrypted.
    assert g["DATA_PLAINTEXT"].endswith(PAYLOAD)
    init = HandshakeCodec(None).open_untrusted(g["INIT_PLAINTEXT"])
    assert init.body == INIT


def test_golden_handshake_decodes() -> None:
    hs = HandshakeCodec(SECRET)
    g = golden_packets()
    assert hs.open_untrusted(g["INIT"]).body == INIT
    assert hs.open_untrusted(g["ACCEPT"]).body == ACCEPT
    assert peek_untrusted(g["ACCEPT"]).dcid == I_CID
    assert hs.open_untrusted(g["UNKNOWN_CONN"]).body == UNKNOWN
    # Only the handshake codec opens it: it is no connection's packet.
    _, recv = _keys().for_responder()
    with pytest.raises(WireError) as exc:
        Opener(recv).open_untrusted(g["UNKNOWN_CONN"])
    assert exc.value.reason == "type"
    # Without the cluster key it cannot be made: another key's tag fails.
    with pytest.raises(WireError) as exc:
        HandshakeCodec(bytes(32)).open_untrusted(g["UNKNOWN_CONN"])
    assert exc.value.reason == "tag"


if __name__ == "__main__":
    for _name, _data in golden_packets().items():
        print(f"<!-- golden:{_name} -->\n```text\n{hexdump(_data)}\n```\n")
    print({k: v.hex() for k, v in golden_packets().items()})
