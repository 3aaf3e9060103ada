"""Daemon hardening: client churn, hostile control input, key file modes,
Ctrl-C, abandoned sends, bounded close — against real daemon subprocesses on
loopback (helpers from test_daemon)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_daemon import PY, REPO, Host, braid_cli, run, write_configs

import braid
from transport.api import Client

#: Keeps a connection alive while its peer is SIGSTOPped (no RTO/idle failure).
PATIENT = "[connection]\nidle_fail_timeout = 600.0\nmax_rto_retries = 100000\n"


def wait_for(pred: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``pred`` until truthy (a liveness bound, not a speed assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stats(h: Host) -> dict[str, Any]:
    r = braid_cli("stats", "--config", str(h.config), "--json", timeout=30)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


@pytest.fixture
def patient(tmp_path: Path) -> Iterator[tuple[Host, Host]]:
    a, b = write_configs(tmp_path, extra=PATIENT)
    try:
        yield a.start(), b.start()
    finally:
        for h in (a, b):
            if h.proc is not None and h.proc.poll() is None:
                h.proc.send_signal(signal.SIGCONT)
        a.stop()
        b.stop()


# -- defect 2: a receiver that exited must not swallow later messages -------------------------


def test_exited_recv_client_does_not_swallow_the_next_transfer(
        patient: tuple[Host, Host]) -> None:
    a, b = patient
    for _ in range(3):  # three one-chunk transfers, all waiting in b's inbox
        r = braid_cli("send", "--config", str(a.config), "--to", "b", "--size", "3000")
        assert r.returncode == 0, r.stderr
    wait_for(lambda: stats(b)["inbox"]["messages"] == 3, "3 messages in b's inbox")
    seen = set()
    for i in range(3):  # each receiver takes one and exits; nothing may go with it
        r = braid_cli("recv", "--config", str(b.config), "--count", "1", "--json",
                      "--timeout", "20")
        assert r.returncode == 0, f"receiver {i}: {r.stderr}"
        done = json.loads(r.stdout.strip().splitlines()[-1])
        assert done["verified"] and done["bytes"] == 3000
        seen.add(done["transfer_id"])
    assert len(seen) == 3
    st = stats(b)
    assert st["inbox"]["messages"] == 0 and st["inbox"]["handed_out"] == 0
    assert st["inbox"]["bytes"] == 0


def test_api_receiver_that_leaves_hands_unread_messages_to_the_next(
        patient: tuple[Host, Host]) -> None:
    a, b = patient
    msgs = [os.urandom(1000 + i) for i in range(10)]

    async def main() -> list[bytes]:
        async with braid.connect(a.socket) as tx:
            for m in msgs:
                await tx.send("b", m)
        async with braid.connect(b.socket) as rx:  # takes one, leaves 9 written ahead
            first = [(await rx.recv())[1]]
        async with braid.connect(b.socket) as rx:
            return first + [(await asyncio.wait_for(rx.recv(), 20))[1] for _ in range(9)]

    got = run(main())
    assert got == msgs  # all of them, once each, in order


# -- defect 9: hostile control input ----------------------------------------------------------


def _connect(s: socket.socket, path: Path) -> None:
    for _ in range(600):  # the listen backlog may be full for a moment (EAGAIN)
        try:
            s.connect(str(path))
            return
        except BlockingIOError:
            time.sleep(0.05)
    raise AssertionError(f"cannot connect to {path}")


def _exchange(path: Path, line: bytes) -> list[bytes]:
    """Send one raw line; every line the daemon answers until it closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        _connect(s, path)
        s.settimeout(20)
        s.sendall(line)
        s.shutdown(socket.SHUT_WR)
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    return buf.splitlines()


def _strict_json(line: bytes) -> dict[str, Any]:
    def bad(name: str) -> None:
        raise ValueError(f"{name} in a reply")

    obj = json.loads(line, parse_constant=bad)
    assert isinstance(obj, dict)
    return obj


@pytest.mark.parametrize("line", [
    b"[" * 200_000 + b"]" * 200_000 + b"\n",
    b'{"cmd": "stats", "id": ' + b"[" * 100 + b"]" * 100 + b"}\n",
    b'{"cmd": "stats", "id": NaN}\n',
    b'{"cmd": "nope", "id": -Infinity}\n',
    b'{"cmd": "stats", "id": ' + b"9" * 40 + b"}\n",
    b"\xff\xfe{}\n",
])
def test_hostile_control_lines_get_one_json_error_and_leave_the_daemon_alone(
        tmp_path: Path, line: bytes) -> None:
    a, _ = write_configs(tmp_path)
    try:
        a.start()
        replies = _exchange(a.socket, line)
        assert len(replies) == 1, replies
        reply = _strict_json(replies[0])
        assert reply["event"] == "error" and "\n" not in reply["error"]
        st = _exchange(a.socket, b'{"cmd": "stats", "id": 7}\n{"cmd": "nope"}\n')
        assert _strict_json(st[0])["event"] == "stats"  # the daemon is unaffected
    finally:
        a.stop()
    assert a.log is not None
    log = a.log.read_text()
    assert "Traceback" not in log and "exception" not in log.lower(), log


# -- defect 9: key file readable by others ------------------------------------------------------


def test_daemon_refuses_a_key_file_others_can_read(tmp_path: Path) -> None:
    a, _ = write_configs(tmp_path)
    key = tmp_path / "cluster.key"
    assert os.stat(key).st_mode & 0o777 == 0o600  # as written by write_key_file
    key.chmod(0o640)
    r = subprocess.run([PY, "-m", "tools.cli", "daemon", "--config", str(a.config)],
                       capture_output=True, text=True, timeout=30, cwd=REPO)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "too open" in lines[0] and "chmod 600" in lines[0], r.stderr
    assert not a.socket.exists()


def test_keygen_writes_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    out = tmp_path / "k.key"
    r = subprocess.run([PY, "-m", "tools.cli", "keygen", "-o", str(out)], capture_output=True,
                       text=True, timeout=30, cwd=REPO, preexec_fn=lambda: os.umask(0))
    assert r.returncode == 0, r.stderr
    assert os.stat(out).st_mode & 0o777 == 0o600


# -- defect 9: Ctrl-C in braid send; the daemon cancels what the client abandoned -------------


def test_ctrl_c_in_send_is_one_line_and_the_daemon_drops_the_abandoned_data(
        patient: tuple[Host, Host]) -> None:
    a, b = patient
    r = braid_cli("send", "--config", str(a.config), "--to", "b", "--size", "1000")
    assert r.returncode == 0, r.stderr  # connection up
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)  # nothing gets acknowledged from now on
    send = subprocess.Popen([PY, "-m", "tools.cli", "send", "--config", str(a.config), "--to",
                             "b", "--size", "48MiB", "--chunk", "1MiB"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        queued = wait_for(lambda: stats(a)["unacked"]["b"]["messages"] >= 40 and
                          stats(a)["unacked"]["b"]["messages"], "braid send to queue its data")
        send.send_signal(signal.SIGINT)
        _out, err = send.communicate(timeout=60)
    finally:
        if send.poll() is None:
            send.kill()
            send.wait()
    assert send.returncode == 130
    assert err.strip().splitlines() == ["braid: interrupted"], err
    st = wait_for(lambda: (s := stats(a))["cancelled"]["messages"] > 0 and s, "cancellation")
    # All but the messages already started on the wire are withdrawn...
    started = st["unacked"]["b"]["messages"]
    assert st["cancelled"]["messages"] + started >= queued
    assert started <= 8, st["unacked"]  # what the first window took (no acks since)
    b.proc.send_signal(signal.SIGCONT)
    # ... and only those reach the peer.
    wait_for(lambda: stats(a)["unacked"]["b"]["messages"] == 0, "started messages acked")
    delivered = stats(b)["delivered"]["messages"]
    assert delivered <= 1 + started, delivered


# -- defect 9: leaving `async with braid.connect()` is bounded --------------------------------


def test_close_is_bounded_when_the_daemon_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "deaf.sock"

    async def main() -> bool:
        held: list[asyncio.StreamWriter] = []

        async def deaf(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            held.append(w)  # accept, never read: like a daemon whose send window is full

        server = await asyncio.start_unix_server(deaf, path=str(path))
        try:
            client = Client(str(path))
            client.close_timeout = 0.5
            await client.open()
            stuck = asyncio.ensure_future(client.submit("b", bytes(64 << 20)))
            await asyncio.sleep(0.2)
            assert not stuck.done()  # blocked on a full socket buffer
            stuck.cancel()
            await asyncio.wait_for(client.close(), 60)  # must not block for ever
            return True
        finally:
            for w in held:
                w.close()
            server.close()

    assert run(main()) is True


def test_control_clients_are_bounded(tmp_path: Path) -> None:
    from transport.daemon import MAX_CLIENTS

    a, _ = write_configs(tmp_path)
    held: list[socket.socket] = []
    try:
        a.start()
        for _ in range(MAX_CLIENTS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(s)
            _connect(s, a.socket)
        wait_for(lambda: _exchange(a.socket, b'{"cmd": "stats"}\n')[0].startswith(
            b'{"event":"error"'), "the client over the limit to be refused")
        reply = _strict_json(_exchange(a.socket, b'{"cmd": "stats"}\n')[0])
        assert "too many control clients" in reply["error"]
        for s in held[:8]:
            s.close()
        wait_for(lambda: _strict_json(_exchange(a.socket, b'{"cmd": "stats"}\n')[0])["event"]
                 == "stats", "a freed slot to be served")
    finally:
        for s in held:
            s.close()
        a.stop()


def test_killed_client_blocked_on_a_full_window_queues_nothing_more(tmp_path: Path) -> None:
    """A client whose request waits for send window and that dies meanwhile:
    the daemon notices the hang-up, queues none of its requests, and cancels
    what it queued that had not started."""
    # A small plane rate keeps NSCC's window far below the 4 MiB send window, so
    # only the first message or two can have started when the client dies (on
    # loopback with the 10 Gbit/s default, the window held all four).
    a, b = write_configs(tmp_path, extra="send_window = 4194304\n" + PATIENT
                         + "plane_rate = 2e6\n")
    try:
        a.start()
        b.start()
        r = braid_cli("send", "--config", str(a.config), "--to", "b", "--size", "1000")
        assert r.returncode == 0, r.stderr
        assert b.proc is not None
        b.proc.send_signal(signal.SIGSTOP)
        send = subprocess.Popen([PY, "-m", "tools.cli", "send", "--config", str(a.config),
                                 "--to", "b", "--size", "24MiB", "--chunk", "1MiB"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        try:  # the window (4 MiB) is full: the client's next request is held
            wait_for(lambda: stats(a)["unacked"]["b"]["messages"] >= 3, "a full window")
            time.sleep(0.5)
            send.kill()
            send.wait(30)
        finally:
            if send.poll() is None:
                send.kill()
                send.wait()
        st = wait_for(lambda: (s := stats(a))["cancelled"]["messages"] > 0 and s, "cancellation")
        started = st["unacked"]["b"]["messages"]
        assert started <= 4
        b.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: stats(a)["unacked"]["b"]["messages"] == 0, "started messages acked")
        time.sleep(1.0)  # a request still buffered from the dead client must not go out now
        assert stats(a)["unacked"]["b"]["messages"] == 0
        assert stats(b)["delivered"]["messages"] == 1 + started
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.proc.send_signal(signal.SIGCONT)
        a.stop()
        b.stop()


def test_the_control_socket_accepts_as_soon_as_it_exists(tmp_path: Path) -> None:
    # The socket is bound and listening under a private name and renamed
    # into place: a client that connects the moment the path appears is
    # never refused (bound at the path itself, there was a moment between
    # bind and listen, and a loaded CI host once hit it).
    a, _ = write_configs(tmp_path)
    try:
        a.start()  # returns as soon as the path exists
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(a.socket))  # no retry
        assert not [p for p in a.socket.parent.iterdir() if p.name.startswith(f".{a.socket.name}.")]
    finally:
        a.stop()
