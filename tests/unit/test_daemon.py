"""Two ``braid daemon`` subprocesses on loopback (127.0.0.2 / 127.0.0.3), encrypted."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import braid
from transport.eventloop import new_event_loop
from wire.keys import new_cluster_key, write_key_file

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


#: Test daemons' ports come from below the kernel's ephemeral range
#: (ip_local_port_range starts at 32768 by default): a port the kernel handed
#: out to a bind(0) was later taken by another socket's bind(0) (a daemon's
#: own sending sockets, a client's), and the daemon of the next step failed
#: with "port in use" (CI flakes, 2 in 6 runs). Random per process, so
#: concurrent test runs rarely meet; each pick is checked by binding it.
_PORT_RNG = random.Random(os.getpid() ^ time.monotonic_ns())


def free_ports(host: str = "127.0.0.1", n: int = 2) -> list[int]:
    """``n`` distinct ports free on ``host`` and on every address (a socket
    bound to 0.0.0.0 blocks them all), held while picking."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(2000):  # bounded
            if len(ports) == n:
                return ports
            p = _PORT_RNG.randrange(20000, 32000)
            if p in ports:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("0.0.0.0", p))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(p)
        raise RuntimeError(f"no {n} free ports in 20000-32000 on {host}")
    finally:
        for s in socks:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(host, 1)[0]


def braid_cli(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "tools.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, **kw)  # type: ignore[call-overload, no-any-return]


@dataclass
class Host:
    name: str
    config: Path
    socket: Path
    proc: subprocess.Popen[str] | None = None
    log: Path | None = None

    def start(self, *extra: str) -> Host:
        self.log = self.config.with_suffix(".log")
        logf = open(self.log, "w")  # noqa: SIM115
        self.proc = subprocess.Popen([PY, "-m", "tools.cli", "daemon", "--config",
                                      str(self.config), *extra], stdout=logf, stderr=logf,
                                     text=True, cwd=REPO)
        logf.close()
        deadline = time.monotonic() + 15
        while not self.socket.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon {self.name} exited: {self.log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"daemon {self.name} did not start: {self.log.read_text()}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def write_configs(tmp: Path, *, key_b: bool = False, b_addr: str = "127.0.0.3",
                  extra: str = "") -> tuple[Host, Host]:
    key = tmp / "cluster.key"
    write_key_file(key, new_cluster_key())
    if key_b:
        write_key_file(tmp / "other.key", new_cluster_key())
    ports = free_ports("127.0.0.2")
    a_planes = [f"127.0.0.2:{p}" for p in ports]
    b_planes = [f"{b_addr}:{p}" for p in ports]
    hosts = []
    for name, mine, peer, theirs, k in (("a", a_planes, "b", b_planes, "cluster.key"),
                                        ("b", b_planes, "a", a_planes,
                                         "other.key" if key_b else "cluster.key")):
        cfg = tmp / f"host-{name}.toml"
        sock = tmp / f"{name}.sock"
        cfg.write_text(f'name = "{name}"\nkey = "{k}"\nsocket = "{sock}"\n'
                       f"planes = {json.dumps(mine)}\n{extra}\n"
                       f"[peers.{peer}]\nplanes = {json.dumps(theirs)}\n")
        hosts.append(Host(name, cfg, sock))
    return hosts[0], hosts[1]


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[tuple[Host, Host]]:
    a, b = write_configs(tmp_path)
    try:
        yield a.start(), b.start()
    finally:
        a.stop()
        b.stop()


def run(coro: object) -> object:
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_control_socket_is_0600(daemons: tuple[Host, Host]) -> None:
    for h in daemons:
        st = os.stat(h.socket)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600


def test_cli_transfer_64mib_byte_exact(daemons: tuple[Host, Host], tmp_path: Path) -> None:
    a, b = daemons
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(64 << 20))
    out = tmp_path / "out"
    recv = subprocess.Popen([PY, "-m", "tools.cli", "recv", "--config", str(b.config),
                             "--out", str(out), "--count", "1", "--json", "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        time.sleep(0.3)
        r = braid_cli("send", "--config", str(a.config), "--to", "b", "--file", str(src),
                      "--json")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["bytes"] == 64 << 20 and res["goodput_MBps"] > 0
        assert set(res["plane_share"]) == {"0", "1"}
        rout, rerr = recv.communicate(timeout=120)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    assert recv.returncode == 0, rerr
    done = json.loads(rout.strip().splitlines()[-1])
    assert done["verified"] and done["bytes"] == 64 << 20
    got = out / "payload.bin"
    assert hashlib.sha256(got.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()
    st = json.loads(braid_cli("stats", "--config", str(a.config), "--json").stdout)
    (conn,) = [c for c in st["connections"] if c["role"] == "initiator"]
    assert conn["stats"]["bytes_acked"] > 64 << 20
    # EV state changes by cause, as counts (what skipped or condemned paths).
    for cause in ("late_ack", "ecn_ack", "loss", "probe_ok", "rotation_wrap"):
        n = conn["stats"][f"ev_{cause}"]
        assert isinstance(n, int) and n >= 0
    assert st["encrypted"] is True
    text = braid_cli("stats", "--config", str(a.config), "--evs").stdout
    assert "plane" in text and "initiator to b" in text


def test_python_api_send_recv_stats(daemons: tuple[Host, Host]) -> None:
    a, b = daemons

    async def main() -> tuple[str, bytes, dict[str, object]]:
        async with braid.connect(str(b.config)) as rx, braid.connect(a.socket) as tx:
            recv = asyncio.ensure_future(rx.recv())
            await asyncio.sleep(0.1)
            msg_id = await tx.send("b", b"hello braid")
            assert msg_id >= 1
            peer, data = await asyncio.wait_for(recv, 10)
            return peer, data, await tx.stats()

    peer, data, st = run(main())  # type: ignore[misc]
    assert (peer, data) == ("a", b"hello braid")
    assert st["name"] == "a"


def test_sigterm_drains_queued_data(daemons: tuple[Host, Host]) -> None:
    a, b = daemons
    n, size = 24, 1 << 20
    msgs = [os.urandom(size) for _ in range(n)]

    async def main() -> tuple[list[bytes], list[object]]:
        async with braid.connect(b.socket) as rx, braid.connect(a.socket) as tx:
            got: list[bytes] = []

            async def collect() -> None:
                while len(got) < n:
                    got.append((await rx.recv())[1])

            task = asyncio.ensure_future(collect())
            await asyncio.sleep(0.1)
            futs = [await tx.submit("b", m) for m in msgs]
            assert a.proc is not None
            a.proc.send_signal(signal.SIGTERM)  # queued work must still be delivered
            results = await asyncio.gather(*futs, return_exceptions=True)
            await asyncio.wait_for(task, 30)
            return got, results

    got, results = run(main())  # type: ignore[misc]
    assert all(isinstance(r, dict) and r["event"] == "acked" for r in results), results
    assert sorted(got) == sorted(msgs)
    # It exits on its own (a second SIGTERM from stop() could land after its
    # handlers are gone, at the very end, and read as "killed").
    assert a.proc is not None and a.proc.wait(30) == 0
    assert a.log is not None
    log = a.log.read_text()
    assert "event=shutdown_requested cause=SIGTERM" in log
    assert "event=daemon_stopped code=0" in log
    assert not a.socket.exists()


def test_new_work_refused_while_shutting_down(tmp_path: Path) -> None:
    a, _b = write_configs(tmp_path, extra="drain_timeout = 2")
    try:
        a.start()

        async def main() -> str:
            async with braid.connect(a.socket) as tx:
                await tx.shutdown()
                try:
                    await tx.send("b", b"late")
                except braid.BraidError as exc:
                    return str(exc)
                return "sent"

        text = str(run(main()))
        # Refused either explicitly, or because the daemon (with nothing to
        # drain) already finished shutting down and closed the socket.
        assert text != "sent"
        assert any(w in text for w in ("shutting down", "closed", "connection broken")), text
        assert a.proc is not None and a.proc.wait(20) == 0
    finally:
        a.stop()


def test_qlog_records_events(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)
    qlog = tmp_path / "a.qlog"
    try:
        a.start("--qlog", str(qlog))
        b.start()
        r = braid_cli("send", "--config", str(a.config), "--to", "b", "--size", "2MiB")
        assert r.returncode == 0, r.stderr
        assert "goodput" in r.stdout or "MB/s" in r.stdout
    finally:
        a.stop()
        b.stop()
    names = {json.loads(line)["name"] for line in qlog.read_text().splitlines()}
    assert {"packet_sent", "ack", "cwnd"} <= names


def test_message_not_lost_to_a_receive_client_that_went_away(
        daemons: tuple[Host, Host]) -> None:
    """A recv client that disconnects must not swallow the next messages: the
    daemon must not pop them from its inbox and write them to the dead stream
    (a second run on the same daemons would lose its first message and its
    collective never finish)."""
    a, b = daemons

    async def main() -> list[bytes]:
        async with braid.connect(a.socket) as tx:
            async with braid.connect(b.socket) as first:
                await tx.send("b", b"one")
                assert (await asyncio.wait_for(first.recv(), 10))[1] == b"one"
            await asyncio.sleep(0.3)  # the first client is gone; the daemon is idle
            for i in range(3):
                await tx.send("b", b"after-%d" % i)
            async with braid.connect(b.socket) as second:
                return [(await asyncio.wait_for(second.recv(), 5))[1] for _ in range(3)]

    assert run(main()) == [b"after-0", b"after-1", b"after-2"]
