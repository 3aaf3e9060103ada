"""Socket-queue waits: the histogram, and real kernel timestamps on a real socket."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from test_daemon import PY, REPO, braid_cli, write_configs

from transport.aio import EndpointIO
from transport.config import ConnectionConfig
from transport.endpoint import Endpoint
from transport.queue_wait import MAX_BUCKET, QueueWait
from transport.udp import PeerTable, PlaneAddr


def test_histogram_quantiles_and_window() -> None:
    q = QueueWait()
    for w in [50e-6] * 90 + [3e-3] * 9 + [40e-3]:
        q.add(w)
    q.add(-1.0)  # a clock stepped back: counted as no wait
    s = q.summary()
    assert s["reads"] == 101
    assert 64 <= s["p50_us"] <= 64 and s["p99_us"] == 4096  # bucket upper bounds
    assert s["max_us"] == pytest.approx(40e3)
    assert s["mean_us"] == pytest.approx((90 * 50 + 9 * 3000 + 40000) / 101)
    before = QueueWait.from_summary(s)
    assert before.summary() == s
    for _ in range(10):
        q.add(0.2)
    d = q.since(before)
    assert d.count == 10 and d.total == pytest.approx(2.0)
    assert 0.2 <= d.max <= 0.2 * 2  # the bucket's upper bound
    assert d.summary()["p50_us"] == pytest.approx(d.max * 1e6)
    assert QueueWait().summary()["p99_us"] == 0.0
    q.add(1e9)  # far beyond the last bucket's start: lands in it
    assert q.buckets[MAX_BUCKET] == 1
    with pytest.raises(ValueError):
        QueueWait.from_summary({"reads": 1})


def test_endpoint_io_measures_how_long_datagrams_sat_in_the_socket() -> None:
    """Datagrams sent to a daemon's plane socket while its loop is busy wait
    there; the kernel's stamps say how long.

    The kernel turns receive timestamping on through deferred work after the
    socket asks for it: until that has run, a datagram arrives unstamped and
    is stamped when read (a wait of ~0). So the test first waits, bounded,
    until a datagram held back 20 ms reads as held back, then measures."""
    port = _free_port()

    async def main() -> dict[str, object]:
        ep = Endpoint(config=ConnectionConfig(planes=1), secret=None)
        io = EndpointIO(ep, [PlaneAddr("127.0.0.1", port)], PeerTable(1, [port]),
                        queue_wait=True)
        io.open()
        try:
            assert io.planes[0].rx_timestamps and io.queue_wait is not None
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _ in range(100):  # bounded: ~3 s at most
                    s.sendto(b"\x01junk", ("127.0.0.1", port))
                    time.sleep(0.02)
                    await asyncio.sleep(0.01)
                    if io.queue_wait.max >= 0.015:
                        break
                else:
                    raise AssertionError("the kernel never stamped an arrival")
                await asyncio.sleep(0.01)
                before = QueueWait.from_summary(io.queue_wait.summary())
                for _ in range(5):
                    s.sendto(b"\x01junk", ("127.0.0.1", port))
                time.sleep(0.05)  # the loop is blocked: they wait in the queue
            await asyncio.sleep(0.05)  # now it reads them
            return io.queue_wait.since(before).summary()
        finally:
            io.close()

    s = asyncio.run(main())
    assert isinstance(s["reads"], int) and 1 <= s["reads"] <= 5, s  # a GRO read carries several
    assert isinstance(s["mean_us"], float) and s["mean_us"] >= 45_000, s  # at least the block
    assert isinstance(s["max_us"], float) and s["max_us"] >= 45_000, s


def test_off_by_default() -> None:
    port = _free_port()

    async def main() -> object:
        ep = Endpoint(config=ConnectionConfig(planes=1), secret=None)
        io = EndpointIO(ep, [PlaneAddr("127.0.0.1", port)], PeerTable(1, [port]),
                        host_stamps=False)
        io.open()
        try:
            # neither the histogram nor the stamps (host_stamps asks for
            # the stamps without the histogram)
            assert not io.planes[0].rx_timestamps
            return io.stats()["queue_wait"]
        finally:
            io.close()

    assert asyncio.run(main()) is None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_daemon_key_queue_wait_reaches_stats(tmp_path: Path) -> None:
    """``queue_wait = true`` in a daemon's config: after a transfer, ``braid
    stats`` shows the waits (JSON and text); a non-boolean value is refused."""
    a, b = write_configs(tmp_path, extra="queue_wait = true")
    try:
        a.start()
        b.start()
        src = tmp_path / "m.bin"
        src.write_bytes(os.urandom(1 << 20))
        recv = subprocess.Popen([PY, "-m", "tools.cli", "recv", "--config", str(b.config),
                                 "--out", str(tmp_path / "out"), "--count", "1", "--json",
                                 "--timeout", "60"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=REPO)
        try:
            r = braid_cli("send", "--config", str(a.config), "--to", "b", "--file", str(src))
            assert r.returncode == 0, r.stderr
            _out, err = recv.communicate(timeout=60)
            assert recv.returncode == 0, err
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        for h in (a, b):
            st = json.loads(braid_cli("stats", "--config", str(h.config), "--json").stdout)
            qw = st["io"]["queue_wait"]
            assert qw["reads"] > 0 and qw["max_us"] >= qw["mean_us"] >= 0, qw
            assert all(p["rx_timestamps"] for p in st["io"]["planes"])
        text = braid_cli("stats", "--config", str(b.config)).stdout
        assert "socket-queue wait of" in text, text
    finally:
        a.stop()
        b.stop()
    cfg = tmp_path / "bad.toml"
    cfg.write_text(a.config.read_text().replace("queue_wait = true", 'queue_wait = "yes"'))
    r = braid_cli("daemon", "--config", str(cfg))
    assert r.returncode == 2 and "key 'queue_wait': expected true or false" in r.stderr, r.stderr


def test_host_stamps_tell_the_core_how_long_a_read_waited() -> None:
    """``host_stamps``: a datagram that sat in the socket while the loop was
    blocked reaches the core with that wait as its lag (``RxInfo.lag``,
    which the receiver counts in its SACK's hold and the sender takes out of
    its RTT sample); without the key every lag is 0."""
    from transport.datagram import RxInfo, TxPath

    class Lags:
        def __init__(self) -> None:
            self.lags: list[float] = []

        def on_tx(self, now: float, data: bytes, path: TxPath) -> None:
            pass

        def on_rx(self, now: float, data: bytes, rx: RxInfo) -> None:
            self.lags.append(rx.lag)

    async def main(stamps: bool) -> list[float]:
        port = _free_port()
        ep = Endpoint(config=ConnectionConfig(planes=1), secret=None)
        io = EndpointIO(ep, [PlaneAddr("127.0.0.1", port)], PeerTable(1, [port]),
                        host_stamps=stamps)
        tap = io.tap = Lags()
        io.open()
        try:
            assert io.planes[0].rx_timestamps == stamps and io.queue_wait is None
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _ in range(40 if stamps else 3):  # bounded: the kernel's stamping starts late
                    tap.lags.clear()
                    s.sendto(b"\x01junk", ("127.0.0.1", port))
                    time.sleep(0.05)  # the loop is blocked: it waits in the queue
                    for _ in range(200):  # now it is read (bounded: 2 s, a busy machine)
                        await asyncio.sleep(0.01)
                        if tap.lags:
                            break
                    if tap.lags and tap.lags[0] >= 0.045:
                        break
            return list(tap.lags)
        finally:
            io.close()

    lags = asyncio.run(main(True))
    assert lags and 0.045 <= lags[0] < 5.0, lags
    off = asyncio.run(main(False))
    assert off == [0.0], off
