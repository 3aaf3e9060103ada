"""The link element: a userspace bump-in-the-wire emulating a switch egress port.

Two veth ends (``a`` towards the host/leaf, ``b`` towards the leaf/spine) are
bridged by AF_PACKET raw sockets. Each direction is a *port* with an emulated
egress queue:

* rate (virtual finish times, so the average rate is exact even though the
  poll timer is coarse), buffer in bytes, propagation delay;
* two classes: control (DSCP CONTROL, already-trimmed headers, non-IP such as
  ARP) served strictly first and never trimmed, and data;
* trimming, NDP-style: a Braid DATA datagram (UDP to ``UDP_PORT`` whose payload
  ``trim_point()`` accepts) arriving while the data queue holds more than the
  trim threshold is cut to its header, re-marked DSCP TRIMMED (or
  TRIMMED_LAST_HOP on a last-hop port) and queued as control. IP total length,
  IP checksum, UDP length and UDP checksum are rewritten, so an ordinary UDP
  socket receives the header (real trimming switches do not fix them; the
  testbed does, on purpose: docs/testbed.md);
* CE marking of ECT packets while the data queue is above the ECN threshold;
* faults: random loss, down (blackhole), per-direction (gray) settings.

One process serves all element links of a plane (``--spec``), writes counters
to ``--stats`` (JSON, atomically, every 0.5 s) and takes commands on a Unix
datagram socket ``--ctl``: ``{"link": "h3:p1", "dir": "up"|"down"|"both",
"set": {"loss": 0.05, "down": true, ...}}``, answered with ``{"ok": ...}``.

The checksum of forwarded (untrimmed) frames is left alone: the fabric turns
off tx checksum offload on the veths that feed an element, so the kernel
completes it before the frame reaches us.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from wire.constants import ECN_CE, UDP_PORT, Dscp, trim_point

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
ETH_HLEN = 14
#: Frames read per socket per wake-up: bounds latency of the other direction.
RX_BATCH = 64
#: Frames sent per port per service call.
TX_BATCH = 256
STATS_PERIOD = 0.5
CONTROL_DSCPS = frozenset({Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMED_LAST_HOP})
SETTABLE = ("rate_bps", "buffer", "delay", "loss", "trim", "ecn", "last_hop", "down")


def checksum(data: bytes | bytearray | memoryview) -> int:
    """RFC 1071 Internet checksum."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def trim_frame(frame: bytes, ihl: int, cut: int, dscp: int) -> bytearray:
    """Cut the UDP payload of an IPv4 frame to ``cut`` bytes and fix every field."""
    udp = ETH_HLEN + ihl
    out = bytearray(frame[: udp + 8 + cut])
    out[ETH_HLEN + 1] = (dscp << 2) | (out[ETH_HLEN + 1] & 0x3)
    struct.pack_into("!H", out, ETH_HLEN + 2, ihl + 8 + cut)
    struct.pack_into("!H", out, ETH_HLEN + 10, 0)
    struct.pack_into("!H", out, ETH_HLEN + 10, checksum(out[ETH_HLEN:udp]))
    struct.pack_into("!H", out, udp + 4, 8 + cut)
    struct.pack_into("!H", out, udp + 6, 0)
    pseudo = out[ETH_HLEN + 12: ETH_HLEN + 20] + struct.pack("!BBH", 0, 17, 8 + cut)
    c = checksum(pseudo + out[udp:])
    struct.pack_into("!H", out, udp + 6, c or 0xFFFF)
    return out


def trim_frame6(frame: bytes, cut: int, dscp: int) -> bytearray:
    """IPv6 (no extension headers) version of ``trim_frame``: no IP checksum."""
    udp = ETH_HLEN + 40
    out = bytearray(frame[: udp + 8 + cut])
    ecn = (out[ETH_HLEN + 1] >> 4) & 0x3
    tclass = (dscp << 2) | ecn
    out[ETH_HLEN] = 0x60 | (tclass >> 4)
    out[ETH_HLEN + 1] = ((tclass & 0xF) << 4) | (out[ETH_HLEN + 1] & 0xF)
    struct.pack_into("!H", out, ETH_HLEN + 4, 8 + cut)
    struct.pack_into("!H", out, udp + 4, 8 + cut)
    struct.pack_into("!H", out, udp + 6, 0)
    pseudo = out[ETH_HLEN + 8: ETH_HLEN + 40] + struct.pack("!IxxxB", 8 + cut, 17)
    c = checksum(pseudo + out[udp:])
    struct.pack_into("!H", out, udp + 6, c or 0xFFFF)
    return out


def mark_ce6(frame: bytes) -> bytearray:
    out = bytearray(frame)
    out[ETH_HLEN + 1] |= ECN_CE << 4
    return out


def mark_ce(frame: bytes, ihl: int) -> bytearray:
    out = bytearray(frame)
    out[ETH_HLEN + 1] |= ECN_CE
    struct.pack_into("!H", out, ETH_HLEN + 10, 0)
    struct.pack_into("!H", out, ETH_HLEN + 10, checksum(out[ETH_HLEN: ETH_HLEN + ihl]))
    return out


class Port:
    """One direction of one link: an egress queue feeding ``out``."""

    def __init__(self, name: str, out: socket.socket, cfg: dict[str, Any],
                 rng: random.Random) -> None:
        self.name = name
        self.out = out
        self.rng = rng
        self.rate_bps = int(cfg.get("rate_bps", 0))
        self.buffer = int(cfg.get("buffer", 256 * 1024))
        self.delay = float(cfg.get("delay", 0.0))
        self.loss = float(cfg.get("loss", 0.0))
        self.trim: int | None = cfg.get("trim")
        self.ecn: int | None = cfg.get("ecn")
        self.last_hop = bool(cfg.get("last_hop", False))
        self.down = False
        self.ctrl: deque[bytes | bytearray] = deque()
        self.data: deque[bytes | bytearray] = deque()
        self.ctrl_bytes = 0
        self.data_bytes = 0
        self.busy_until = 0.0
        self.wire: deque[tuple[float, bytes | bytearray]] = deque()  # propagation delay line
        self.c = {"rx": 0, "enqueued": 0, "trimmed": 0, "marked": 0, "dropped": 0, "lost": 0,
                  "blackholed": 0, "sent": 0, "tx_errors": 0, "max_depth": 0,
                  "rx_overflow": 0}

    # -- arrival -----------------------------------------------------------
    def arrive(self, frame: bytes, now: float) -> None:
        c = self.c
        c["rx"] += 1
        if self.down:
            c["blackholed"] += 1
            return
        if self.loss and self.rng.random() < self.loss:
            c["lost"] += 1
            return
        self.service(now)  # drain what has virtually left, so the depth is exact
        if not self.ctrl and not self.data:
            self.busy_until = max(self.busy_until, now)
        n = len(frame)
        # Classify. ihl is the L3 header length (0: not IP); v6 uses 40 (no ext headers).
        control = True
        ihl = 0
        v6 = False
        is_udp_braid = False
        if n >= ETH_HLEN + 20 and frame[12] == 0x08 and frame[13] == 0x00:
            control = (frame[ETH_HLEN + 1] >> 2) in CONTROL_DSCPS
            ihl = (frame[ETH_HLEN] & 0xF) * 4
            is_udp_braid = (frame[ETH_HLEN + 9] == 17
                            and (frame[ETH_HLEN + 6] & 0x3F) == 0 and frame[ETH_HLEN + 7] == 0
                            and n >= ETH_HLEN + ihl + 8
                            and frame[ETH_HLEN + ihl + 2] << 8 | frame[ETH_HLEN + ihl + 3]
                            == UDP_PORT)
        elif n >= ETH_HLEN + 40 and frame[12] == 0x86 and frame[13] == 0xDD:
            v6, ihl = True, 40
            nh = frame[ETH_HLEN + 6]
            tclass = (frame[ETH_HLEN] & 0xF) << 4 | frame[ETH_HLEN + 1] >> 4
            # neighbour discovery (ICMPv6) must get through like ARP does
            control = nh == 58 or (tclass >> 2) in CONTROL_DSCPS
            is_udp_braid = (nh == 17 and n >= ETH_HLEN + 48
                            and frame[ETH_HLEN + 42] << 8 | frame[ETH_HLEN + 43] == UDP_PORT)
        if control:
            self._push_ctrl(frame)
            return
        depth = self.data_bytes
        if self.trim is not None and depth + n > self.trim and is_udp_braid:
            cut = trim_point(memoryview(frame)[ETH_HLEN + ihl + 8:])
            if cut is not None:
                dscp = Dscp.TRIMMED_LAST_HOP if self.last_hop else Dscp.TRIMMED
                c["trimmed"] += 1
                self._push_ctrl(trim_frame6(frame, cut, dscp) if v6
                                else trim_frame(frame, ihl, cut, dscp))
                return
        if depth + n > self.buffer:
            c["dropped"] += 1
            return
        if self.ecn is not None and depth > self.ecn and ihl:
            ecn = (frame[ETH_HLEN + 1] >> 4) & 0x3 if v6 else frame[ETH_HLEN + 1] & 0x3
            if ecn in (1, 2):  # ECT(1) / ECT(0): mark; not-ECT is left alone
                frame = mark_ce6(frame) if v6 else mark_ce(frame, ihl)  # type: ignore[assignment]
                c["marked"] += 1
        self.data.append(frame)
        self.data_bytes += n
        c["enqueued"] += 1
        depth = self.data_bytes + self.ctrl_bytes
        if depth > c["max_depth"]:
            c["max_depth"] = depth

    def _push_ctrl(self, frame: bytes | bytearray) -> None:
        n = len(frame)
        if self.ctrl_bytes + self.data_bytes + n > self.buffer + 64 * 1024:
            self.c["dropped"] += 1  # control has a little headroom above the data buffer
            return
        self.ctrl.append(frame)
        self.ctrl_bytes += n
        self.c["enqueued"] += 1
        depth = self.data_bytes + self.ctrl_bytes
        if depth > self.c["max_depth"]:
            self.c["max_depth"] = depth

    # -- departure ---------------------------------------------------------
    def service(self, now: float) -> None:
        """Send every frame whose virtual departure time has come (bounded)."""
        sent = 0
        while (self.ctrl or self.data) and self.busy_until <= now and sent < TX_BATCH:
            if self.ctrl:
                frame = self.ctrl.popleft()
                self.ctrl_bytes -= len(frame)
            else:
                frame = self.data.popleft()
                self.data_bytes -= len(frame)
            if self.rate_bps:
                self.busy_until += len(frame) * 8 / self.rate_bps
            sent += 1
            if self.delay > 0:
                self.wire.append((self.busy_until + self.delay, frame))
            else:
                self._send(frame)
        while self.wire and self.wire[0][0] <= now:
            self._send(self.wire.popleft()[1])

    def _send(self, frame: bytes | bytearray) -> None:
        try:
            self.out.send(frame)
            self.c["sent"] += 1
        except OSError:
            self.c["tx_errors"] += 1

    def next_wake(self) -> float | None:
        t = None
        if self.ctrl or self.data:
            t = self.busy_until
        if self.wire and (t is None or self.wire[0][0] < t):
            t = self.wire[0][0]
        return t

    def settings(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SETTABLE}

    def set(self, changes: dict[str, Any]) -> None:
        for k, v in changes.items():
            if k not in SETTABLE:
                raise ValueError(f"unknown port setting {k!r} (known: {', '.join(SETTABLE)})")
            setattr(self, k, v)
        if self.down:  # a dead link loses what it held
            self.c["blackholed"] += len(self.ctrl) + len(self.data) + len(self.wire)
            self.ctrl.clear()
            self.data.clear()
            self.wire.clear()
            self.ctrl_bytes = self.data_bytes = 0


def open_port_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # Our own transmissions on this interface must not come back as arrivals.
    s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt in (SO_RCVBUFFORCE, SO_SNDBUFFORCE):
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


class Element:
    def __init__(self, spec: dict[str, Any], stats: Path, ctl: Path, seed: int | None) -> None:
        self.rng = random.Random(seed)
        self.stats_path = stats
        self.ports: dict[str, Port] = {}
        self.links: dict[str, tuple[Port, Port]] = {}
        self.rx: dict[int, tuple[socket.socket, Port]] = {}
        for link in spec["links"]:
            sa, sb = open_port_socket(link["a_if"]), open_port_socket(link["b_if"])
            up = Port(f"{link['name']}/up", sb, link["up"], self.rng)
            down = Port(f"{link['name']}/down", sa, link["down"], self.rng)
            self.ports[up.name], self.ports[down.name] = up, down
            self.links[link["name"]] = (up, down)
            self.rx[sa.fileno()] = (sa, up)
            self.rx[sb.fileno()] = (sb, down)
        ctl.unlink(missing_ok=True)
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ctl.bind(str(ctl))
        os.chmod(ctl, 0o600)
        self.ctl.setblocking(False)
        self.ep = select.epoll()
        for fd in self.rx:
            self.ep.register(fd, select.EPOLLIN)
        self.ep.register(self.ctl.fileno(), select.EPOLLIN)
        self.running = True
        self.started = time.time()

    def write_stats(self) -> None:
        # Frames the kernel dropped because we did not read fast enough never
        # reach arrive(): count them from the packet socket (reading resets it).
        for sock, port in self.rx.values():
            with contextlib.suppress(OSError):
                _packets, drops = struct.unpack(
                    "II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
                port.c["rx_overflow"] += drops
        ports = {name: {**p.c, **p.settings(), "depth": p.data_bytes + p.ctrl_bytes,
                        "element": "userspace"}
                 for name, p in self.ports.items()}
        tmp = self.stats_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "time": time.time(),
                                   "started": self.started, "ports": ports}))
        os.replace(tmp, self.stats_path)

    def control(self) -> None:
        for _ in range(16):
            try:
                msg, addr = self.ctl.recvfrom(65536)
            except BlockingIOError:
                return
            try:
                req = json.loads(msg)
                if req.get("cmd") == "stats":
                    reply: dict[str, Any] = {"ok": True}
                else:
                    ports = self._select(req["link"], req.get("dir", "both"))
                    for p in ports:
                        p.set(req.get("set", {}))
                    reply = {"ok": True, "ports": [p.name for p in ports]}
                self.write_stats()
            except (ValueError, KeyError, TypeError) as exc:
                reply = {"ok": False, "error": str(exc)}
            if addr:
                with contextlib.suppress(OSError):
                    self.ctl.sendto(json.dumps(reply).encode(), addr)

    def _select(self, links: str | list[str], direction: str) -> list[Port]:
        out: list[Port] = []
        for link in [links] if isinstance(links, str) else links:
            if link not in self.links:
                raise KeyError(f"no element link {link!r}")
            up, down = self.links[link]
            out += {"up": [up], "down": [down], "both": [up, down]}[direction]
        return out

    def run(self, netns_file: Path | None) -> None:
        buf = bytearray(65536)
        mv = memoryview(buf)
        next_stats = 0.0
        ports = list(self.ports.values())
        while self.running:
            now = time.monotonic()
            wake = min((t for t in (p.next_wake() for p in ports) if t is not None),
                       default=now + STATS_PERIOD)
            timeout = min(max(wake - now, 0.0), STATS_PERIOD)
            events = self.ep.poll(timeout if timeout > 0 else 0)
            now = time.monotonic()
            for fd, _ev in events:
                if fd == self.ctl.fileno():
                    self.control()
                    continue
                sock, port = self.rx[fd]
                for _ in range(RX_BATCH):
                    try:
                        n = sock.recv_into(buf)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in (errno.ENETDOWN, errno.ENXIO, errno.ENODEV):
                            self.running = False
                        break
                    port.arrive(bytes(mv[:n]), now)
            for p in ports:
                p.service(now)
            if now >= next_stats:
                next_stats = now + STATS_PERIOD
                self.write_stats()
                if netns_file is not None and not netns_file.exists():
                    break  # the testbed was torn down without us: do not linger
        self.write_stats()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.element")
    ap.add_argument("--netns", help="enter this named network namespace first")
    ap.add_argument("--spec", required=True, type=Path)
    ap.add_argument("--stats", required=True, type=Path)
    ap.add_argument("--ctl", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    netns_file = None
    if a.netns:
        from testbed.nsutil import enter, netns_path

        enter(a.netns)
        netns_file = netns_path(a.netns)
    el = Element(json.loads(a.spec.read_text()), a.stats, a.ctl, a.seed)

    def stop(*_: object) -> None:
        el.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    el.run(netns_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
