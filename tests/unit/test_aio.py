"""The uvloop I/O adapter over loopback: two endpoints in one process."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import socket
import time
from dataclasses import replace

import pytest
from test_daemon import free_ports as _free_ports

from transport import aio
from transport.aio import EndpointIO
from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.datagram import Outgoing, SealedRun, TxPath
from transport.endpoint import Endpoint, PeerKey
from transport.eventloop import new_event_loop
from transport.events import ConnectionFailed, Event, MessageDelivered
from transport.udp import PeerTable, PlaneAddr, PlaneSockets, parse_addr, parse_tos
from wire.constants import ECN_CE, Dscp, tos

SECRET = bytes(range(32))
CFG = ConnectionConfig(planes=2, evs_per_plane=16, plane_rate=1.25e9, initial_rtt=1e-3,
                       min_rto=5e-3, congestion_params={"burst_packets": 64},
                       handshake_timeout=0.3)


def free_ports(n: int = 2) -> list[int]:
    """``n`` distinct free ports, outside the kernel's ephemeral range (see
    ``test_daemon.free_ports``)."""
    return _free_ports("127.0.0.1", n)


def free_port() -> int:
    return _free_ports("127.0.0.1", 1)[0]


def make_pair(host_a: str, host_b: str, *, b_secret: bytes = SECRET,
              on_a: object = None, on_b: object = None,
              cfg: ConnectionConfig = CFG) -> tuple[EndpointIO, EndpointIO]:
    ports = free_ports()
    pa = [PlaneAddr(host_a, p) for p in ports]
    pb = [PlaneAddr(host_b, p) for p in ports]
    ta, tb = PeerTable(2, ports), PeerTable(2, ports)
    ta.add("b", pb)
    tb.add("a", pa)
    ia = EndpointIO(Endpoint(config=cfg, secret=SECRET), pa, ta, on_event=on_a)  # type: ignore[arg-type]
    ib = EndpointIO(Endpoint(config=cfg, secret=b_secret), pb, tb, on_event=on_b)  # type: ignore[arg-type]
    return ia, ib


def run(coro: object) -> object:
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)  # type: ignore[arg-type]
    finally:
        loop.close()


def transfer(host_a: str, host_b: str, size: int, chunk: int = 1 << 20,
             cfg: ConnectionConfig = CFG) -> dict[str, object]:
    got: dict[int, bytes] = {}
    done = asyncio.Event()

    def on_b(conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, MessageDelivered):
            got[ev.msg_id] = ev.data
            if sum(map(len, got.values())) >= size:
                done.set()

    async def main() -> dict[str, object]:
        ia, ib = make_pair(host_a, host_b, on_b=on_b, cfg=cfg)
        ia.open()
        ib.open()
        try:
            data = os.urandom(size)
            conn = ia.connect("b")
            for off in range(0, size, chunk):
                conn.send_message(data[off:off + chunk])
            ia.kick()
            try:
                await asyncio.wait_for(done.wait(), 60)
            except TimeoutError:
                (rc,) = ib.endpoint.connections.values()
                raise AssertionError(f"stalled: sender {conn.stats()} next_timer "
                                     f"{conn.next_timer()}; receiver {rc.stats()}; "
                                     f"io {ia.stats()} {ib.stats()}") from None
            out = b"".join(got[k] for k in sorted(got))
            assert hashlib.sha256(out).digest() == hashlib.sha256(data).digest()
            assert ib.endpoint.peer_of(next(iter(ib.endpoint.connections.values()))) == "a"
            return {"a": ia.stats(), "b": ib.stats(), "conn": conn.stats()}
        finally:
            ia.close()
            ib.close()

    return run(main())  # type: ignore[return-value]


def test_loopback_transfer_byte_exact_encrypted() -> None:
    res = transfer("127.0.0.2", "127.0.0.3", 16 << 20)
    conn = res["conn"]
    assert conn["bytes_acked"] == 16 << 20  # type: ignore[index]
    b = res["b"]
    assert b["rx_bytes"] > 16 << 20  # type: ignore[operator]
    # Both planes carried data.
    a = res["a"]
    assert len(a["planes"]) == 2  # type: ignore[arg-type]


def test_spray_runs_go_out_as_gso_batches_byte_exact() -> None:
    res = transfer("127.0.0.2", "127.0.0.3", 8 << 20, cfg=replace(CFG, spray_run=8))
    assert res["conn"]["bytes_acked"] == 8 << 20  # type: ignore[index]
    a, b = res["a"], res["b"]
    assert a["planes"][0]["gso"] and b["planes"][0]["gro"]  # type: ignore[index]
    # Runs of one EV were handed to the kernel as batches (one sendmsg each)...
    assert a["gso_sends"] > 0  # type: ignore[operator]
    # ...and arrived as datagrams of their own (byte-exact above; a batch is
    # at least two datagrams, whatever a busy machine's socket buffers drop).
    assert b["rx_datagrams"] > a["gso_sends"]  # type: ignore[operator]


class _Recorder:
    """An endpoint stand-in that records the datagrams the I/O layer hands it."""

    def __init__(self) -> None:
        self.config = ConnectionConfig(planes=1)
        self.got: list[tuple[bytes, int]] = []

    def receive_datagram(self, data: bytes, rx: object, now: float, peer: object) -> None:
        self.got.append((data, rx.dscp))  # type: ignore[attr-defined]

    def receive_datagrams(self, datagrams: list[memoryview], rx: object, now: float,
                          peer: object) -> None:
        # Views of the I/O layer's buffer: copied now, before the next read.
        self.got.extend((bytes(d), rx.dscp) for d in datagrams)  # type: ignore[attr-defined]


def test_gro_batch_is_cut_into_its_datagrams() -> None:
    port = free_port()
    table = PeerTable(1, [port])
    table.add("tx", [PlaneAddr("127.0.0.1", port)])
    rec = _Recorder()
    eio = EndpointIO(rec, [PlaneAddr("127.0.0.5", port)], table)  # type: ignore[arg-type]
    loop = new_event_loop()
    tx = PlaneSockets(0, PlaneAddr("127.0.0.1", 0), pool=1, rcvbuf=1 << 16, sndbuf=1 << 20)
    try:
        eio.open(loop)
        ps = eio.planes[0]
        sent = [bytes([i]) * 1000 for i in range(5)] + [b"z" * 300]  # last one shorter
        cmsg = [tx.gso_cmsg(1000), (socket.IPPROTO_IP, socket.IP_TOS, bytes([tos(Dscp.RETX)]))]
        tx.pool[0].sendmsg(sent, cmsg, 0, ("127.0.0.5", port))
        ps.listen.settimeout(2)
        import select

        assert select.select([ps.listen], [], [], 2)[0]
        eio._drain(ps)
        assert [d for d, _ in rec.got] == sent
        assert {dscp for _, dscp in rec.got} == {int(Dscp.RETX)}
        assert eio.rx_datagrams == len(sent)
    finally:
        tx.close()
        eio.close()
        loop.close()


class _NoGsoSocket:
    """A sending socket whose device cannot segment (EIO, as with ``tx off``)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, dest: object) -> int:
        self.sent.append(data)
        return len(data)

    def sendmsg(self, bufs: list[bytes], anc: list[tuple[int, int, bytes]], flags: int,
                dest: object) -> int:
        if any(level == 17 for level, _t, _d in anc):
            raise OSError(errno.EIO, "Input/output error")
        self.sent.extend(bufs)
        return sum(map(len, bufs))


class _PeerRecorder(_Recorder):
    """Also records the peer and the receive lag of each datagram."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[object] = []
        self.lags: list[float] = []

    def receive_datagram(self, data: bytes, rx: object, now: float, peer: object) -> None:
        super().receive_datagram(data, rx, now, peer)
        self.peers.append(peer)
        self.lags.append(rx.lag)  # type: ignore[attr-defined]

    def receive_datagrams(self, datagrams: list[memoryview], rx: object, now: float,
                          peer: object) -> None:
        datagrams = list(datagrams)
        super().receive_datagrams(datagrams, rx, now, peer)
        self.peers += [peer] * len(datagrams)
        self.lags += [rx.lag] * len(datagrams)  # type: ignore[attr-defined]


@pytest.mark.parametrize("reads", ["recvmmsg", "recvmsg_into"])
def test_a_drain_reads_every_queued_datagram_in_order(reads: str) -> None:
    """One drain of a queue mixing codepoints, a GRO batch and a source not
    in the peer table: every datagram once, in order, with its codepoint,
    its source and a kernel stamp's lag, by ``recvmmsg`` (the extension)
    as by one ``recvmsg_into`` per datagram (the reference)."""
    if reads == "recvmmsg" and aio._drain_c() is None:
        pytest.skip("the compiled extension is not in use (BRAID_PURE=1 or not built)")
    port, other = free_ports()
    table = PeerTable(1, [port])
    table.add("tx", [PlaneAddr("127.0.0.1", port)])
    rec = _PeerRecorder()
    eio = EndpointIO(rec, [PlaneAddr("127.0.0.5", port)], table,  # type: ignore[arg-type]
                     host_stamps=True)
    if reads == "recvmsg_into":
        eio._drain_c, eio._read_slots = None, 1
    loop = new_event_loop()
    tx = PlaneSockets(0, PlaneAddr("127.0.0.1", 0), pool=1, rcvbuf=1 << 16, sndbuf=1 << 20)
    stranger = PlaneSockets(0, PlaneAddr("127.0.0.7", other), pool=1, rcvbuf=1 << 16,
                            sndbuf=1 << 20)
    try:
        eio.open(loop)
        ps = eio.planes[0]
        dest = ("127.0.0.5", port)
        retx = [(socket.IPPROTO_IP, socket.IP_TOS, bytes([tos(Dscp.RETX)]))]
        want: list[tuple[bytes, int, object]] = []
        for i in range(40):  # more than one recvmmsg's slots
            d = bytes([i]) * (100 + i)
            if i % 7 == 3:
                tx.pool[0].sendmsg([d], retx, 0, dest)
                want.append((d, int(Dscp.RETX), "tx"))
            elif i == 20:
                stranger.pool[0].sendto(d, dest)
                want.append((d, int(Dscp.DATA), "127.0.0.7"))
            else:
                tx.pool[0].sendto(d, dest)
                want.append((d, int(Dscp.DATA), "tx"))
        batch = [b"g" * 500] * 3 + [b"h" * 20]
        tx.pool[0].sendmsg(batch, [tx.gso_cmsg(500)], 0, dest)
        want += [(d, int(Dscp.DATA), "tx") for d in batch]
        import select

        assert select.select([ps.listen], [], [], 2)[0]
        time.sleep(0.05)  # all of it queued
        eio._drain(ps)
        got = [(d, dscp, peer) for (d, dscp), peer in zip(rec.got, rec.peers, strict=True)]
        assert got == want
        assert eio.rx_datagrams == len(want)
        # (A stamp may be taken at the read itself, lag 0: the kernel turns
        # stamping on for every packet a little after a socket asks for it.)
        assert ps.rx_timestamps and all(0.0 <= lag < 5.0 for lag in rec.lags)
    finally:
        tx.close()
        stranger.close()
        eio.close()
        loop.close()


def test_gso_refused_falls_back_to_datagrams_and_per_packet_spraying() -> None:
    """A device that cannot segment: datagrams that would share a GSO send,
    and a run sealed whole (``SealedRun``), go out one call each, in order,
    nothing lost; spraying drops to one packet per EV."""
    port = free_port()
    table = PeerTable(1, [port])
    table.add("b", [PlaneAddr("127.0.0.1", port)])
    ep = Endpoint(config=replace(CFG, planes=1, spray_run=8), secret=SECRET)
    conn = ep.connect("b", 0.0)
    eio = EndpointIO(ep, [PlaneAddr("127.0.0.6", free_port())], table)
    assert ep.sealed_runs  # asked for by an I/O layer that batches
    loop = new_event_loop()
    try:
        eio.open(loop)
        fake = _NoGsoSocket()
        real = eio.planes[0].pool
        eio.planes[0].pool = [fake]  # type: ignore[list-item]
        path = TxPath(0, 7, int(Dscp.DATA))
        run = SealedRun(b"".join(bytes([i]) * 100 for i in range(3)) + b"\x09" * 40, 4, 100)
        out: list[tuple[PeerKey, Outgoing, TxPath]] = [("b", bytes([i]) * 100, path)
                                                       for i in range(3)]
        out.append(("b", run, path))
        eio._send(out)
        # nothing lost, one call each
        assert fake.sent == [bytes([i]) * 100 for i in range(3)] + run.datagrams()
        assert eio.tx_datagrams == 7
        assert eio.tx_errors == {"gso_refused": 1} and not eio.planes[0].gso
        assert ep.config.spray_run == 1 and conn.paths.spray_run == 1
        eio.planes[0].pool = real
    finally:
        eio.close()
        loop.close()


def test_jumbo_runs_larger_than_one_gso_send_arrive_byte_exact() -> None:
    """8 x 8,888-byte datagrams exceed one UDP GSO send (64 KB): such a run
    goes out in smaller batches, never refused (EMSGSIZE)."""
    cfg = replace(CFG, spray_run=8, payload_size=8888)
    res = transfer("127.0.0.2", "127.0.0.3", 4 << 20, cfg=cfg)
    a = res["a"]
    assert a["tx_errors"] == {}, a["tx_errors"]  # type: ignore[index]
    assert res["conn"]["bytes_acked"] == 4 << 20  # type: ignore[index]


def test_ipv6_traffic_class_and_flow_label() -> None:
    try:
        rx = PlaneSockets(0, PlaneAddr("::1", free_port()), pool=0, rcvbuf=1 << 20,
                          sndbuf=1 << 20)
    except OSError:
        pytest.skip("no IPv6 loopback")
    tx = PlaneSockets(0, PlaneAddr("::1", 0), pool=2, rcvbuf=1 << 20, sndbuf=1 << 20)
    try:
        table = PeerTable(1, [rx.addr.port])
        table.add("rx", [rx.addr])
        dest = table.sockaddr("rx", 0, 0x12345)
        assert dest == ("::1", rx.addr.port, 0x12345, 0)
        tx.pool[1].sendto(b"data", dest)
        tx.pool[0].sendmsg([b"retx"], tx.cmsg[Dscp.RETX], 0, dest)
        rx.listen.settimeout(2)
        seen = []
        for _ in range(2):
            data, anc, _f, _a = rx.listen.recvmsg(100, socket.CMSG_SPACE(4))
            seen.append((data, parse_tos(anc)))
        assert seen == [(b"data", (False, Dscp.DATA)), (b"retx", (False, Dscp.RETX))]
    finally:
        rx.close()
        tx.close()


def test_tos_sent_and_read_back() -> None:
    rx_port, tx_port = free_ports()
    rx = PlaneSockets(0, PlaneAddr("127.0.0.1", rx_port), pool=0, rcvbuf=1 << 20,
                      sndbuf=1 << 20)
    tx = PlaneSockets(0, PlaneAddr("127.0.0.1", tx_port), pool=2, rcvbuf=1 << 20,
                      sndbuf=1 << 20)
    try:
        dest = ("127.0.0.1", rx.addr.port)
        tx.pool[0].sendto(b"data", dest)
        tx.pool[1].sendmsg([b"ctl"], tx.cmsg[Dscp.CONTROL], 0, dest)
        rx.listen.settimeout(2)
        seen = []
        for _ in range(2):
            data, anc, _f, _a = rx.listen.recvmsg(100, socket.CMSG_SPACE(4))
            seen.append((data, parse_tos(anc)))
        assert seen == [(b"data", (False, Dscp.DATA)), (b"ctl", (False, Dscp.CONTROL))]
        assert len(set(tx.source_ports)) == 2
        assert tos(Dscp.DATA) & 3 != ECN_CE
    finally:
        rx.close()
        tx.close()


def test_port_in_use_raises_eaddrinuse() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", port))
        with pytest.raises(OSError) as info:
            PlaneSockets(0, PlaneAddr("127.0.0.1", port), pool=4, rcvbuf=1 << 16, sndbuf=1 << 16)
        assert info.value.errno == errno.EADDRINUSE


def test_key_mismatch_over_sockets() -> None:
    failed: list[str] = []
    done = asyncio.Event()

    def on_a(conn: Connection, peer: PeerKey, ev: Event) -> None:
        if isinstance(ev, ConnectionFailed):
            failed.append(ev.reason)
            done.set()

    async def main() -> dict[str, int]:
        ia, ib = make_pair("127.0.0.2", "127.0.0.3", b_secret=bytes(32), on_a=on_a)
        ia.open()
        ib.open()
        try:
            ia.connect("b")
            await asyncio.wait_for(done.wait(), 10)
            return ib.endpoint.drops
        finally:
            ia.close()
            ib.close()

    drops = run(main())
    assert failed and "peer unreachable" in failed[0]
    assert drops.get("tag", 0) >= 1  # type: ignore[attr-defined]


def test_parse_addr() -> None:
    assert parse_addr("10.0.0.1") == PlaneAddr("10.0.0.1", 4747)
    assert parse_addr("10.0.0.1:5000") == PlaneAddr("10.0.0.1", 5000)
    assert parse_addr("[fd00::1]:5000") == PlaneAddr("fd00::1", 5000)
    assert parse_addr("fd00::1") == PlaneAddr("fd00::1", 4747)
    for bad in ("host.example", "10.0.0.1:0", "[fd00::1", "10.0.0.1:x"):
        with pytest.raises(ValueError):
            parse_addr(bad)
