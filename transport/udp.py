"""UDP sockets of one plane, and the peer table that maps addresses to peers.

Per plane: one *listening* socket bound to the plane's local address and
Braid port (everything we receive arrives here), plus a pool of *sending*
sockets bound to the same address and kernel-chosen source ports. An EV is
carried as the source port (``ev % pool``) — what an L4-hashing ECMP fabric
spreads on — and, on IPv6, also as the flow label (IPV6_FLOWINFO_SEND).

Every socket sends ECT(0) with Braid's DATA codepoint by default (IP_TOS /
IPV6_TCLASS); other codepoints (control, retransmission) go per packet as
ancillary data on ``sendmsg`` — one syscall either way, no per-packet
setsockopt. The listening socket asks for the received TOS / traffic class
(IP_RECVTOS / IPV6_RECVTCLASS): CE and DSCP (a trimmed-last-hop header is
told from a fabric trim by its DSCP).

Batching (Linux): a run of datagrams for one EV goes out in one ``sendmsg``
with UDP_SEGMENT (GSO; the kernel cuts it into datagrams, each with the same
source port and flow label), and the listening socket sets UDP_GRO, so a GSO
batch that crosses a veth unsplit arrives as one ``recvmsg`` with its
segment size in ancillary data. A kernel that refuses either is detected
and the plane falls back to one datagram per system call.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Hashable
from dataclasses import dataclass

from wire.constants import ECN_CE, UDP_PORT, Dscp, tos

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
IPV6_FLOWINFO_SEND = 33
_INT = struct.Struct("i")
#: Ancillary-data space for one TOS / traffic-class value.
ANC_SPACE = socket.CMSG_SPACE(4)
SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
#: Kernel receive timestamps (``struct timespec``, CLOCK_REALTIME) on a socket;
#: the control message has the same number (Linux, 64-bit time).
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
#: Receive ancillary space: TOS / traffic class, the GRO segment size, and a
#: receive timestamp when asked for (``PlaneSockets(rx_timestamps=True)``).
RX_ANC_SPACE = 2 * socket.CMSG_SPACE(4) + socket.CMSG_SPACE(16)
#: Limits of one GSO send: segments (the kernel allows 64 or 128) and bytes
#: (a UDP datagram's length field).
GSO_MAX_SEGMENTS = 64
GSO_MAX_BYTES = 65000
_U16 = struct.Struct("H")

PeerKey = Hashable
SockAddr = tuple[str, int] | tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class PlaneAddr:
    """Where one plane listens: address and UDP port."""

    host: str
    port: int = UDP_PORT

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_addr(text: str, default_port: int = UDP_PORT) -> PlaneAddr:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; raises ValueError."""
    text = text.strip()
    port = default_port
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"'{text}': missing ']'")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"'{text}': expected ':port' after ']'")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = int(p)
    else:
        host = text
    ipaddress.ip_address(host)  # ValueError for names: planes are addressed by IP
    if not 0 < port < 65536:
        raise ValueError(f"'{text}': port {port} out of range")
    return PlaneAddr(host, port)


def _tos_level(family: socket.AddressFamily) -> tuple[int, int]:
    if family == socket.AF_INET6:
        return socket.IPPROTO_IPV6, socket.IPV6_TCLASS
    return socket.IPPROTO_IP, socket.IP_TOS


def size_buffer(sock: socket.socket, opt_force: int, opt: int, size: int) -> int:
    """Set a socket buffer, forcing past the sysctl limit when we may (root)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, opt_force, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)
    return sock.getsockopt(socket.SOL_SOCKET, opt)


class PlaneSockets:
    """The listening socket and the EV-carrying send pool of one plane."""

    def __init__(self, index: int, addr: PlaneAddr, *, pool: int, rcvbuf: int,
                 sndbuf: int, batch: bool = True, rx_timestamps: bool = False) -> None:
        self.index = index
        self.addr = addr
        self.family = addr.family
        self.is_v6 = self.family == socket.AF_INET6
        level, opt = _tos_level(self.family)
        #: Ancillary data per DSCP, built once (ECT(0) is always set).
        self.cmsg = {int(d): [(level, opt, _INT.pack(tos(int(d))))] for d in Dscp}
        self.listen = self._socket(addr.port, rcvbuf, sndbuf)
        if self.is_v6:
            self.listen.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        else:
            self.listen.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        #: The kernel stamps each datagram on arrival (transport/queue_wait.py).
        self.rx_timestamps = False
        if rx_timestamps:
            try:
                self.listen.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self.rx_timestamps = True
            except OSError:
                pass
        self.rcvbuf = self.listen.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        #: UDP GSO on send / GRO on receive in use (``batch`` and the kernel allow).
        self.gso = batch
        self.gro = False
        if batch:
            try:
                self.listen.setsockopt(SOL_UDP, UDP_GRO, 1)
                self.gro = True
            except OSError:
                pass
        self._gso_cmsg: dict[int, tuple[int, int, bytes]] = {}
        self.pool: list[socket.socket] = []
        try:
            for _ in range(pool):
                self.pool.append(self._socket(0, 4096, sndbuf))
        except BaseException:
            self.close()
            raise
        if not self.pool:
            self.pool.append(self.listen)
        self.source_ports = [s.getsockname()[1] for s in self.pool]

    def _socket(self, port: int, rcvbuf: int, sndbuf: int) -> socket.socket:
        s = socket.socket(self.family, socket.SOCK_DGRAM)
        try:
            s.setblocking(False)
            level, opt = _tos_level(self.family)
            s.setsockopt(level, opt, tos(Dscp.DATA))
            if self.is_v6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO_SEND, 1)
            size_buffer(s, SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf)
            size_buffer(s, SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf)
            s.bind((self.addr.host, port))
        except BaseException:
            s.close()
            raise
        return s

    def gso_cmsg(self, size: int) -> tuple[int, int, bytes]:
        """Ancillary data asking the kernel to cut a send into ``size``-byte datagrams."""
        c = self._gso_cmsg.get(size)
        if c is None:
            c = self._gso_cmsg[size] = (SOL_UDP, UDP_SEGMENT, _U16.pack(size))
        return c

    def close(self) -> None:
        for s in {id(s): s for s in [self.listen, *self.pool]}.values():
            s.close()

    def rx_queue_drops(self) -> int:
        """Datagrams the kernel dropped at our listening socket (full buffer)."""
        return udp_socket_drops(self.listen)


def udp_socket_drops(sock: socket.socket) -> int:
    """The 'drops' column of /proc/net/udp{,6} for this socket (0 if not found)."""
    try:
        ino = os.fstat(sock.fileno()).st_ino
    except OSError:
        return 0
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(name) as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) >= 13 and cols[9] == str(ino):
                        return int(cols[12])
        except OSError:
            continue
    return 0


def parse_tos(ancdata: list[tuple[int, int, bytes]]) -> tuple[bool, int]:
    """(CE, DSCP) from IP_TOS / IPV6_TCLASS ancillary data."""
    for _level, _type, data in ancdata:
        if data:
            v = data[0]  # IP_TOS is one byte; IPV6_TCLASS an int (little-endian here)
            return (v & 3) == ECN_CE, v >> 2
    return False, 0


class PeerTable:
    """Configured peers: name -> address per plane, and (plane, source IP) -> name.

    A datagram from an address no peer has is given the key ``"ip"`` and
    nothing is stored for it: a spoofed source costs no memory. Only once a
    connection keyed by that address exists (an authenticated INIT from it)
    does the I/O layer ``learn`` its route on the plane a packet of that
    connection came in on (replies go to the source IP at the plane's own
    port: the cluster uses one port per plane); ``prune`` forgets learned
    routes when their last connection is gone. Configure peers to use every
    plane from the first packet.
    """

    #: Learned (unconfigured) peers kept at most; beyond it nothing is learned.
    MAX_LEARNED = 4096

    def __init__(self, planes: int, local_ports: list[int]) -> None:
        self.planes = planes
        self.local_ports = local_ports
        self.routes: dict[PeerKey, list[PlaneAddr | None]] = {}
        self.by_source: dict[tuple[int, str], PeerKey] = {}
        self._sockaddr: dict[tuple[PeerKey, int, int], SockAddr] = {}
        self._learned: set[PeerKey] = set()

    def add(self, name: PeerKey, addrs: list[PlaneAddr]) -> None:
        if len(addrs) != self.planes:
            raise ValueError(f"peer {name}: {len(addrs)} addresses for {self.planes} planes")
        self.routes[name] = list(addrs)
        for plane, a in enumerate(addrs):
            self.by_source[(plane, a.host)] = name

    def lookup(self, plane: int, host: str) -> PeerKey:
        """The peer a datagram from ``host`` on ``plane`` is from (stores nothing)."""
        key = self.by_source.get((plane, host))
        return host if key is None else key

    def learn(self, plane: int, host: str) -> None:
        """Route replies to ``host`` on ``plane``: call only for a source that
        has a connection (it authenticated), never for a mere datagram."""
        if (plane, host) in self.by_source:
            return
        if host not in self._learned:
            if host in self.routes or len(self._learned) >= self.MAX_LEARNED:
                return
            self._learned.add(host)
            self.routes[host] = [None] * self.planes
        route = self.routes[host]
        route[plane] = PlaneAddr(host, self.local_ports[plane])
        self.by_source[(plane, host)] = host

    def prune(self, live: set[PeerKey]) -> None:
        """Forget learned routes of peers that no longer have a connection."""
        for key in [k for k in self._learned if k not in live]:
            self._learned.discard(key)
            self.routes.pop(key, None)
            for plane in range(self.planes):
                if self.by_source.get((plane, str(key))) == key:
                    del self.by_source[(plane, str(key))]
        self._sockaddr.clear()

    def __len__(self) -> int:
        """Entries held (configured and learned): what a flood must not grow."""
        return len(self.routes) + len(self.by_source) + len(self._sockaddr)

    def sockaddr(self, peer: PeerKey, plane: int, ev: int) -> SockAddr | None:
        """Destination for (peer, plane); on IPv6 the flow label carries the EV."""
        key = (peer, plane, ev)
        sa = self._sockaddr.get(key)
        if sa is None:
            route = self.routes.get(peer)
            a = route[plane] if route is not None and plane < len(route) else None
            if a is None:
                return None
            sa = (a.host, a.port, ev & 0xFFFFF, 0) if ":" in a.host else (a.host, a.port)
            if len(self._sockaddr) > 1 << 16:
                self._sockaddr.clear()
            self._sockaddr[key] = sa
        return sa


#: Bytes of a datagram that are not payload, besides the IP header: UDP (8),
#: DATA header + header tag (68), payload tag (16).
DATAGRAM_OVERHEAD = 8 + 68 + 16
IP_MTU = 14
IPV6_MTU = 24


def path_mtu(local: PlaneAddr, remote: PlaneAddr) -> int | None:
    """The kernel's MTU towards ``remote`` from ``local`` (the route's first
    hop; None if it cannot tell, e.g. no route)."""
    v6 = local.family == socket.AF_INET6
    try:
        with socket.socket(local.family, socket.SOCK_DGRAM) as s:
            s.bind((local.host, 0))
            s.connect((remote.host, remote.port))
            if v6:
                return int(s.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU))
            return int(s.getsockopt(socket.IPPROTO_IP, IP_MTU))
    except OSError:
        return None


def payload_for_mtu(mtu: int, *, v6: bool) -> int:
    """The largest DATA payload whose datagram fits ``mtu``."""
    return mtu - (40 if v6 else 20) - DATAGRAM_OVERHEAD


def errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "EIO")
