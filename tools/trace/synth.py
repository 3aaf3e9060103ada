"""Synthetic but real Braid traffic, framed and written to pcap.

Used by the benchmark and the memory test: the datagrams come from
``wire.codec`` (plaintext mode, so a million of them are cheap), spread over
planes and EVs, with some trims, NACKs, retransmissions and SACKs.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Final

from tools.trace.pcapio import LINKTYPE_ETHERNET, PcapWriter
from wire.codec import Sealer
from wire.constants import ECN_CE, ECN_ECT0, UDP_PORT, Dscp, Flag, NackReason, tos, trim_point
from wire.packets import Nack, Sack

_ETH: Final = bytes.fromhex("020000000002" "020000000001" "0800")
_IP: Final = struct.Struct("!BBHHHBBH4s4s")
_UDP: Final = struct.Struct("!HHHH")


def _checksum(header: bytes) -> int:
    s: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src: bytes, dst: bytes, sport: int, dport: int, tos_byte: int, payload: bytes) -> bytes:
    """An Ethernet/IPv4/UDP frame (UDP checksum 0: allowed over IPv4)."""
    total = 28 + len(payload)
    ip = _IP.pack(0x45, tos_byte, total, 0, 0x4000, 64, 17, 0, src, dst)
    ip = ip[:10] + _checksum(ip).to_bytes(2, "big") + ip[12:]
    return _ETH + ip + _UDP.pack(sport, dport, 8 + len(payload), 0) + payload


def write_synthetic(path: str | Path, packets: int, *, planes: int = 4, evs: int = 64,
                    payload: int = 1024, seed: int = 1) -> int:
    """Write about ``packets`` frames of one plaintext connection; returns the count."""
    rnd = random.Random(seed)
    tx, rx = Sealer(None, dcid=0xB0B), Sealer(None, dcid=0xA11CE)
    body = bytes(payload)
    t = 1_700_000_000.0
    written = psn = 0
    with PcapWriter(path, LINKTYPE_ETHERNET, nanoseconds=True) as w:
        while written < packets:
            plane = psn % planes
            ev = rnd.randrange(evs)
            a = bytes((10, plane, 0, 2))
            b = bytes((10, plane, 1, 2))
            retx = rnd.random() < 0.01
            dgram = tx.seal_data(
                psn=psn, ev=ev, plane=plane, msg_id=psn // 64, msg_offset=(psn % 64) * payload,
                msg_len=64 * payload, timestamp=int(t * 1e6) & 0xFFFFFFFF, payload=body,
                flags=Flag.RETX if retx else 0,
            )
            dscp = Dscp.RETX if retx else Dscp.DATA
            ecn = ECN_CE if rnd.random() < 0.02 else ECN_ECT0
            r = rnd.random()
            if r < 0.02:
                cut = trim_point(dgram)
                assert cut is not None
                dgram = dgram[:cut]
                dscp = Dscp.TRIMMED if r < 0.01 else Dscp.TRIMMED_LAST_HOP
            w.write(t, frame(a, b, 40000 + ev, UDP_PORT, tos(dscp, ecn), dgram))
            written += 1
            t += 1e-5
            if dscp in (Dscp.TRIMMED, Dscp.TRIMMED_LAST_HOP):
                reason = NackReason.TRIMMED if dscp == Dscp.TRIMMED else NackReason.TRIMMED_LAST_HOP
                ctl = rx.seal(Nack(psn, ev, psn, 0, reason, plane))
            else:
                ctl = rx.seal(Sack(psn, psn, 1, psn, ev, int(t * 1e6) & 0xFFFFFFFF, 1 << 20,
                                   1 if ecn == ECN_CE else 0, plane))
            if written < packets and (psn % 2 == 1 or len(dgram) < 100):
                w.write(t - 5e-6, frame(b, a, 40000 + ev, UDP_PORT, tos(Dscp.CONTROL, 0), ctl))
                written += 1
            psn += 1
    return written
