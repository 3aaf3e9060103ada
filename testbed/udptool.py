"""A tiny UDP sender/receiver for exercising a testbed (no dependency on wire/).

    python -m testbed.udptool recv --port 4747 --count 100 --timeout 3
    python -m testbed.udptool send --to 10.0.1.2 --count 100 --size 1200 \\
        --sports 20000-20063 --braid --tos 0x2a

``recv`` prints one JSON object: packets, bytes, per-size and per-TOS counts
(read with IP_RECVTOS), per-source-port counts. ``send --braid`` crafts a
Braid-like DATA datagram: a valid v1 common header (version 1, type DATA,
header words) followed by a header tag and payload, so a trimming port can
cut it with ``wire.constants.trim_point``.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from collections import Counter

from wire.constants import COMMON_HEADER_LEN, HEADER_TAG_LEN, UDP_PORT, VERSION, PacketType

IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
IPV6_RECVTCLASS = getattr(socket, "IPV6_RECVTCLASS", 66)
IPV6_TCLASS = getattr(socket, "IPV6_TCLASS", 67)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
#: Header words used by crafted DATA datagrams (40-byte header + 16-byte tag kept on trim).
CRAFT_HEADER_WORDS = 10


_PATTERN = bytes(range(256)) * (65536 // 256 + 2)


def braid_like_data(size: int, seq: int) -> bytes:
    """A datagram trim_point() accepts: cut at CRAFT_HEADER_WORDS*4 + HEADER_TAG_LEN."""
    head = bytearray(CRAFT_HEADER_WORDS * 4 + HEADER_TAG_LEN)
    head[0], head[1], head[2], head[3] = VERSION, PacketType.DATA, 0, CRAFT_HEADER_WORDS
    struct.pack_into("!Q", head, 8, seq)
    assert len(head) >= COMMON_HEADER_LEN
    # Byte i of the body is (seq + i) & 0xFF: a slice of one repeating
    # pattern, so a sender blasts at the socket's speed, not Python's.
    n = max(0, size - len(head))
    off = seq & 0xFF
    return bytes(head) + _PATTERN[off:off + n]


def cmd_send(a: argparse.Namespace) -> int:
    lo, _, hi = a.sports.partition("-")
    sports = list(range(int(lo), int(hi or lo) + 1)) if lo else [0]
    socks = []
    v6 = ":" in a.to
    for sp in sports:
        s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        if a.tos is not None:
            if v6:
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, int(a.tos, 0))
            else:
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(a.tos, 0))
        s.bind(("::" if v6 and a.bind == "0.0.0.0" else a.bind, sp))
        socks.append(s)
    gap = 1.0 / a.pps if a.pps else 0.0
    start = time.monotonic()
    sent = errors = 0
    for n in range(a.count):
        data = braid_like_data(a.size, n) if a.braid else bytes(a.size)
        if a.stamp:  # wall-clock send time for recv --delays (same machine, same clock)
            data = struct.pack("!Q", time.time_ns()) + data[8:]
        try:
            socks[n % len(socks)].sendto(data, (a.to, a.port))
            sent += 1
        except OSError:
            errors += 1
        if gap:
            delay = start + (n + 1) * gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    print(json.dumps({"sent": sent, "errors": errors,
                      "seconds": round(time.monotonic() - start, 4)}))
    return 0


def cmd_recv(a: argparse.Namespace) -> int:
    v6 = a.family == 6
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root): no RcvbufErrors
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    if v6:  # dual stack: IPv4 arrives too, its TOS via IP_RECVTOS
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)
    s.bind(("::" if v6 and a.bind == "0.0.0.0" else a.bind, a.port))
    if a.delays:
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.settimeout(a.idle)
    delays: list[int] = []
    sizes: Counter[int] = Counter()
    toses: Counter[int] = Counter()
    sports: Counter[int] = Counter()
    packets = nbytes = 0
    print(json.dumps({"ready": True}), flush=True)
    deadline = time.monotonic() + a.timeout
    while packets < a.count and time.monotonic() < deadline:
        try:
            data, anc, _flags, addr = s.recvmsg(65535, 256)
        except TimeoutError:
            if packets:
                break  # idle after traffic: the sender is done
            continue
        packets += 1
        nbytes += len(data)
        sizes[len(data)] += 1
        sports[addr[1]] += 1
        for level, typ, val in anc:
            if (level == socket.IPPROTO_IP and typ in (IP_RECVTOS, socket.IP_TOS)) or (
                    level == socket.IPPROTO_IPV6 and typ == IPV6_TCLASS):
                toses[val[0]] += 1  # TOS is one byte, TCLASS an int (low byte first)
            elif level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(data) >= 8:
                sec, nsec = struct.unpack("qq", val[:16])  # kernel receive time
                delays.append(sec * 1_000_000_000 + nsec - struct.unpack("!Q", data[:8])[0])
    print(json.dumps({"packets": packets, "bytes": nbytes,
                      "sizes": {str(k): v for k, v in sizes.items()},
                      "tos": {str(k): v for k, v in toses.items()},
                      "sports": {str(k): v for k, v in sports.items()},
                      **({"delays_ns": delays} if a.delays else {})}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.udptool")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0")
    r.add_argument("--family", type=int, choices=(4, 6), default=4,
                   help="6: a dual-stack IPv6 socket (reads the traffic class)")
    r.add_argument("--port", type=int, default=UDP_PORT)
    r.add_argument("--count", type=int, default=1 << 30)
    r.add_argument("--timeout", type=float, default=10.0, help="overall limit, seconds")
    r.add_argument("--idle", type=float, default=1.0, help="stop after this idle time")
    r.add_argument("--delays", action="store_true",
                   help="report one-way delays (ns) of send --stamp datagrams: kernel "
                        "receive time (SO_TIMESTAMPNS) minus the stamped send time")
    r.set_defaults(func=cmd_recv)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, default=UDP_PORT)
    s.add_argument("--count", type=int, default=100)
    s.add_argument("--size", type=int, default=1000)
    s.add_argument("--sports", default="", help="source port range 'lo-hi', one socket each")
    s.add_argument("--tos", default=None, help="IP TOS byte, e.g. 0x2a (DSCP DATA, ECT0)")
    s.add_argument("--pps", type=float, default=0.0, help="pace at this many packets/s")
    s.add_argument("--braid", action="store_true", help="send Braid-like DATA datagrams")
    s.add_argument("--stamp", action="store_true",
                   help="first 8 bytes: wall-clock send time in ns (for recv --delays)")
    s.set_defaults(func=cmd_send)
    a = p.parse_args(argv)
    return int(a.func(a))


if __name__ == "__main__":
    sys.exit(main())
