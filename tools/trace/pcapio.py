"""Streaming pcap / pcapng reading and pcap writing, with no dependencies.

Scapy's ``rdpcap`` builds every packet as an object graph and keeps them all
(about 1 GB for 100k packets); the trace tools instead read one record at a
time from a buffered file, so memory stays bounded by the largest frame.
Both classic pcap (µs or ns, either byte order) and pcapng (SHB / IDB / EPB /
SPB, several interfaces, ``if_tsresol``, ``if_name``) are read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

LINKTYPE_NULL: Final = 0
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_IPV4: Final = 228
LINKTYPE_IPV6: Final = 229
LINKTYPE_LINUX_SLL2: Final = 276

PCAP_MAGIC_US: Final = 0xA1B2C3D4
PCAP_MAGIC_NS: Final = 0xA1B23C4D
PCAPNG_SHB: Final = 0x0A0D0D0A
_BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D
_READ_BUFFER: Final = 1 << 20


class PcapError(ValueError):
    """A file that is not a readable pcap or pcapng capture."""


@dataclass(frozen=True, slots=True)
class Interface:
    """One capture interface (pcap files have exactly one, unnamed)."""

    linktype: int
    name: str = ""


@dataclass(slots=True)
class Frame:
    """One captured frame: time in seconds since the epoch, link-layer bytes."""

    time: float
    data: bytes
    wire_len: int
    interface: Interface


def open_capture(path: str | Path) -> Iterator[Frame]:
    """Frames of a pcap or pcapng file, one at a time."""
    f = open(path, "rb", buffering=_READ_BUFFER)  # noqa: SIM115 - closed by the generator
    head = f.read(4)
    if len(head) < 4:
        f.close()
        raise PcapError(f"{path}: too short to be a capture")
    magic_le = struct.unpack("<I", head)[0]
    if magic_le == PCAPNG_SHB:
        return _closing(f, _read_pcapng(f, head, str(path)))
    return _closing(f, _read_pcap(f, head, str(path)))


def _closing(f: BinaryIO, it: Iterator[Frame]) -> Iterator[Frame]:
    try:
        yield from it
    finally:
        f.close()


def _read_pcap(f: BinaryIO, head: bytes, path: str) -> Iterator[Frame]:
    for endian in ("<", ">"):
        magic = struct.unpack(endian + "I", head)[0]
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            break
    else:
        raise PcapError(f"{path}: not a pcap or pcapng file (magic {head.hex()})")
    scale = 1e-6 if magic == PCAP_MAGIC_US else 1e-9
    rest = f.read(20)
    if len(rest) < 20:
        raise PcapError(f"{path}: truncated pcap header")
    linktype = struct.unpack(endian + "IHHiIII", head + rest)[6] & 0xFFFF
    iface = Interface(linktype)
    rec = struct.Struct(endian + "IIII")
    read = f.read
    while True:
        hdr = read(16)
        if len(hdr) < 16:
            return  # a truncated last record (capture killed mid-write) ends the file
        sec, frac, caplen, wire_len = rec.unpack(hdr)
        data = read(caplen)
        if len(data) < caplen:
            return
        yield Frame(sec + frac * scale, data, wire_len, iface)


def _read_pcapng(f: BinaryIO, head: bytes, path: str) -> Iterator[Frame]:
    endian = "<"
    ifaces: list[tuple[Interface, float]] = []
    pending = head
    while True:
        raw = pending + f.read(8 - len(pending))
        pending = b""
        if len(raw) < 8:
            return
        block_type = struct.unpack("<I", raw[:4])[0]
        if block_type == PCAPNG_SHB:
            bom_raw = f.read(4)
            if len(bom_raw) < 4:
                raise PcapError(f"{path}: truncated pcapng section header")
            endian = "<" if struct.unpack("<I", bom_raw)[0] == _BYTE_ORDER_MAGIC else ">"
            total = struct.unpack(endian + "I", raw[4:8])[0]
            body = bom_raw + f.read(max(total - 16, 0))
            ifaces = []  # a new section starts a new interface list
        else:
            block_type, total = struct.unpack(endian + "II", raw)
            if total < 12:
                raise PcapError(f"{path}: bad pcapng block length {total}")
            body = f.read(total - 12)
            if len(body) < total - 12:
                return  # truncated last block
        f.read(4)  # trailing copy of the block length
        if block_type == 6:
            if_id, hi, lo, caplen, wire_len = struct.unpack_from(endian + "IIIII", body, 0)
            iface, scale = ifaces[if_id] if if_id < len(ifaces) else (Interface(-1), 1e-6)
            yield Frame(((hi << 32) | lo) * scale, body[20:20 + caplen], wire_len, iface)
        elif block_type == 1:
            ifaces.append(_parse_idb(body, endian))
        elif block_type == 3 and ifaces:
            wire_len = struct.unpack_from(endian + "I", body, 0)[0]
            yield Frame(0.0, body[4:4 + min(wire_len, len(body) - 4)], wire_len, ifaces[0][0])


def _parse_idb(body: bytes, endian: str) -> tuple[Interface, float]:
    linktype = struct.unpack_from(endian + "H", body, 0)[0]
    name = ""
    scale = 1e-6
    off = 8
    while off + 4 <= len(body):
        code, length = struct.unpack_from(endian + "HH", body, off)
        value = body[off + 4:off + 4 + length]
        if code == 0:
            break
        if code == 2:
            name = value.rstrip(b"\0").decode("utf-8", "replace")
        elif code == 9 and value:
            r = value[0]
            scale = 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r
        off += 4 + ((length + 3) & ~3)
    return Interface(linktype, name), scale


class PcapWriter:
    """A classic pcap writer (µs or ns timestamps); use as a context manager."""

    def __init__(
        self, path: str | Path, linktype: int = LINKTYPE_ETHERNET, *, snaplen: int = 262144,
        nanoseconds: bool = False, flush_each: bool = False,
    ) -> None:
        self._f = open(path, "wb", buffering=_READ_BUFFER)  # noqa: SIM115
        self._ns = nanoseconds
        self._flush_each = flush_each
        self._rec = struct.Struct("<IIII")
        magic = PCAP_MAGIC_NS if nanoseconds else PCAP_MAGIC_US
        self._f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
        self.count = 0

    def write(self, time: float, data: bytes, wire_len: int | None = None) -> None:
        sec = int(time)
        frac = round((time - sec) * (1e9 if self._ns else 1e6))
        if frac >= (1_000_000_000 if self._ns else 1_000_000):
            sec, frac = sec + 1, 0
        n = len(data)
        self._f.write(self._rec.pack(sec, frac, n, n if wire_len is None else wire_len))
        self._f.write(data)
        self.count += 1
        if self._flush_each:
            self._f.flush()

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
