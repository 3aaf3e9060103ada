"""A pure-Python capture: AF_PACKET socket → pcap, for hosts without tcpdump.

The socket is ``SOCK_DGRAM`` (the kernel strips the link header and tells us
the interface, direction and link type), filtered in the kernel by a classic
BPF program equivalent to ``udp port 4747``, timestamped by the kernel
(``SO_TIMESTAMPNS``); frames are written as ``LINKTYPE_LINUX_SLL2`` — the
same "cooked" format ``tcpdump -i any`` writes — so the interface index and
direction survive. Like libpcap, outgoing copies on loopback are skipped (each
loopback packet is also seen incoming).

Run as ``python -m tools.trace.afpacket --iface lo -o x.pcap [--count N]
[--duration S]``; ``ip netns exec NS`` in front captures inside a namespace.
"""

from __future__ import annotations

import argparse
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Final

from tools.trace.pcapio import LINKTYPE_LINUX_SLL2, PcapWriter
from wire.constants import UDP_PORT

ETH_P_ALL: Final = 0x0003
SO_ATTACH_FILTER: Final = 26
SO_TIMESTAMPNS: Final = 35
PACKET_OUTGOING: Final = 4
ARPHRD_LOOPBACK: Final = 772
_SKF_AD_PROTOCOL: Final = 0xFFFFF000  # SKF_AD_OFF + SKF_AD_PROTOCOL: skb->protocol
_SNAPLEN: Final = 65535
_TIMESPEC: Final = struct.Struct("@qq")
_SLL2: Final = struct.Struct("!HHIHBB8s")


def bpf_udp_port(port: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF for ``udp port PORT`` on a SOCK_DGRAM socket (network header at 0).

    IPv4 (first fragments only) and IPv6 without extension headers, like
    the program ``tcpdump -dd udp port PORT`` compiles.
    """
    ld_w, ld_h, ld_b, ld_h_ind, ldx_msh = 0x20, 0x28, 0x30, 0x48, 0xB1
    jeq, jset, ret = 0x15, 0x45, 0x06
    # (label, code, k, jump-if-true label, jump-if-false label); None = next instruction
    src: list[tuple[str, int, int, str | None, str | None]] = [
        ("", ld_w, _SKF_AD_PROTOCOL, None, None),   # A = skb->protocol
        ("", jeq, 0x0800, None, "v6"),
        ("", ld_b, 9, None, None),                  # IPv4 protocol
        ("", jeq, 17, None, "reject"),
        ("", ld_h, 6, None, None),                  # flags + fragment offset
        ("", jset, 0x1FFF, "reject", None),
        ("", ldx_msh, 0, None, None),               # X = IPv4 header length
        ("", ld_h_ind, 0, None, None),              # UDP source port
        ("", jeq, port, "accept", None),
        ("", ld_h_ind, 2, None, None),              # UDP destination port
        ("", jeq, port, "accept", "reject"),
        ("v6", jeq, 0x86DD, None, "reject"),
        ("", ld_b, 6, None, None),                  # IPv6 next header
        ("", jeq, 17, None, "reject"),
        ("", ld_h, 40, None, None),
        ("", jeq, port, "accept", None),
        ("", ld_h, 42, None, None),
        ("", jeq, port, "accept", "reject"),
        ("accept", ret, _SNAPLEN, None, None),
        ("reject", ret, 0, None, None),
    ]
    where = {label: i for i, (label, *_rest) in enumerate(src) if label}
    prog = []
    for i, (_label, code, k, jt, jf) in enumerate(src):
        t = 0 if jt is None else where[jt] - i - 1
        f = 0 if jf is None else where[jf] - i - 1
        prog.append((code, t, f, k))
    return prog


def attach_filter(sock: socket.socket, prog: Sequence[tuple[int, int, int, int]]) -> None:
    import ctypes

    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw)
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def capture(
    output: str, *, iface: str | None = None, port: int = UDP_PORT, count: int | None = None,
    duration: float | None = None, restore_signals: bool = True,
) -> int:
    """Capture to ``output`` until count/duration/SIGINT/SIGTERM; returns packets written.

    ``restore_signals=False`` keeps the stop handler installed afterwards, so a
    SIGINT that races with a capture ending on its own cannot kill the
    process while it exits (the command-line entry point wants that).
    """
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    stop = False

    def _stop(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        attach_filter(sock, bpf_udp_port(port))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if iface:
            sock.bind((iface, ETH_P_ALL))
        sock.settimeout(0.2)
        print(f"listening on {iface or 'all interfaces'}", file=sys.stderr, flush=True)
        deadline = None if duration is None else time.monotonic() + duration
        with PcapWriter(output, LINKTYPE_LINUX_SLL2, nanoseconds=True, flush_each=True) as w:
            while not stop and (count is None or w.count < count):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                try:
                    data, anc, _flags, addr = sock.recvmsg(_SNAPLEN, 64)
                except TimeoutError:
                    continue
                except InterruptedError:
                    continue
                ifname, proto, pkttype, hatype, hwaddr = addr[:5]
                if pkttype == PACKET_OUTGOING and hatype == ARPHRD_LOOPBACK:
                    continue
                ts = time.time()
                for level, kind, value in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = _TIMESPEC.unpack(value[:_TIMESPEC.size])
                        ts = sec + nsec * 1e-9
                idx = socket.if_nametoindex(ifname) if ifname else 0
                sll2 = _SLL2.pack(proto, 0, idx, hatype, pkttype, min(len(hwaddr), 8),
                                  hwaddr[:8].ljust(8, b"\0"))
                w.write(ts, sll2 + data)
            return w.count
    finally:
        if restore_signals:
            for s, h in old.items():
                signal.signal(s, h)
        sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.trace.afpacket")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--iface")
    p.add_argument("--port", type=int, default=UDP_PORT)
    p.add_argument("--count", type=int)
    p.add_argument("--duration", type=float)
    a = p.parse_args(argv)
    n = capture(a.output, iface=a.iface, port=a.port, count=a.count, duration=a.duration,
                restore_signals=False)
    print(f"{n} packets captured", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
