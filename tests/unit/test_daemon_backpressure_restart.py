"""Backpressure and restarts against real ``braid daemon`` processes on loopback: a full inbox
withholds credit instead of dropping, and a restarted receiving daemon is
noticed and every unacknowledged message re-sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path

from test_daemon import Host, braid_cli, free_port, run, write_configs

import braid
from wire.keys import new_cluster_key, write_key_file

#: Generous retry budgets: the receiver is down for as long as a Python
#: process takes to start on a busy CI machine, and that must not fail the
#: sender before the restarted daemon can answer.
PATIENT = ("[connection]\nidle_fail_timeout = 60.0\nmax_rto_retries = 1000\n"
           "max_rto = 0.25\n")


def stats(config: Path) -> dict[str, object]:
    r = braid_cli("stats", "--config", str(config), "--json")
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout)
    return out


def test_full_inbox_withholds_credit_nothing_dropped(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path, extra="recv_buffer = 2097152")  # 2 MiB per connection
    msgs = [os.urandom(512 << 10) for _ in range(12)]  # 6 MiB, nobody reading yet
    try:
        a.start()
        b.start()

        async def main() -> tuple[list[bytes], dict[str, object], int]:
            async with braid.connect(a.socket) as tx:
                futs = [await tx.submit("b", m) for m in msgs]
                await asyncio.sleep(3.0)  # longer than idle_fail_timeout would allow
                acked_early = sum(f.done() for f in futs)
                mid = stats(b.config)
                async with braid.connect(b.socket) as rx:
                    got = [(await asyncio.wait_for(rx.recv(), 30))[1] for _ in msgs]
                results = await asyncio.gather(*futs)
                assert all(r["event"] == "acked" for r in results)
            return got, mid, acked_early

        got, mid, acked_early = run(main())  # type: ignore[misc]
    finally:
        a.stop()
        b.stop()
    assert got == msgs  # every message, byte-exact, in order, once
    inbox = mid["inbox"]
    assert isinstance(inbox, dict)
    assert inbox["dropped"] == 0 and inbox["bytes"] <= 2 << 20, inbox
    assert acked_early < len(msgs)  # the sender really waited for credit
    assert a.log is not None and "connection_failed" not in a.log.read_text()


def test_restarted_receiver_gets_every_unacknowledged_message(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path, extra=PATIENT)
    before = os.urandom(1000)
    msgs = [os.urandom(n) for n in (1, 5000, 300_000, 70_000, 2)]
    try:
        a.start()
        b.start()

        async def main() -> list[bytes]:
            async with braid.connect(a.socket) as tx:
                async with braid.connect(b.socket) as rx:
                    await tx.send("b", before)
                    assert (await asyncio.wait_for(rx.recv(), 10))[1] == before
                assert b.proc is not None
                b.proc.send_signal(signal.SIGKILL)  # a crash: no CLOSE, state lost
                b.proc.wait(10)
                b.socket.unlink()  # what a crash leaves behind; start() waits for a new one
                futs = [await tx.submit("b", m) for m in msgs]  # into the void
                await asyncio.sleep(0.3)
                b.start()
                async with braid.connect(b.socket) as rx:
                    got = [(await asyncio.wait_for(rx.recv(), 30))[1] for _ in msgs]
                results = await asyncio.gather(*futs)
                assert all(r["event"] == "acked" for r in results), results
                return got

        got = run(main())
    finally:
        a.stop()
        b.stop()
    assert sorted(got) == sorted(msgs)  # each once (delivery order is completion order)
    assert a.log is not None
    log = a.log.read_text()
    assert "event=peer_restarted" in log and "resending=5" in log, log
    assert "connection_failed" not in log


def test_one_plane_daemon_sends_close_on_sigterm(tmp_path: Path) -> None:
    """Defect 4: with one plane, CLOSE went out on 'plane 1' and EndpointIO
    raised IndexError mid-service, so the peer never heard the close."""
    write_key_file(tmp_path / "cluster.key", new_cluster_key())
    port = free_port("127.0.0.2")
    hosts = []
    for name, mine, peer, theirs in (("a", "127.0.0.2", "b", "127.0.0.3"),
                                     ("b", "127.0.0.3", "a", "127.0.0.2")):
        cfg = tmp_path / f"host-{name}.toml"
        sock = tmp_path / f"{name}.sock"
        cfg.write_text(f'name = "{name}"\nkey = "cluster.key"\nsocket = "{sock}"\n'
                       f'planes = ["{mine}:{port}"]\n'
                       f'[peers.{peer}]\nplanes = ["{theirs}:{port}"]\n')
        hosts.append(Host(name, cfg, sock))
    a, b = hosts
    try:
        a.start()
        b.start()

        async def main() -> None:
            async with braid.connect(a.socket) as tx:
                await tx.send("b", b"one plane")

        run(main())
        assert a.stop() == 0
        assert b.log is not None
        deadline = 50
        while "closed by peer" not in b.log.read_text() and deadline:
            time.sleep(0.1)
            deadline -= 1
    finally:
        a.stop()
        b.stop()
    assert a.log is not None and "Traceback" not in a.log.read_text()
    assert "closed by peer" in b.log.read_text(), b.log.read_text()


def test_a_stopping_receiver_accepts_no_new_connection_and_loses_nothing(tmp_path: Path) -> None:
    # The receiving daemon is stopped (SIGTERM) while the sender still has
    # queued messages: its close discards them and the sending daemon
    # reconnects at once to send them again. A stopping daemon must not
    # accept that connection: messages acknowledged into its inbox after its
    # receivers were told it is going would be lost (the soak's one "acked,
    # never received" message).
    from transport.api import BraidError

    a, b = write_configs(tmp_path)
    msgs = [i.to_bytes(4, "big") + os.urandom(60_000) for i in range(150)]
    try:
        a.start()
        b.start()

        async def main() -> tuple[list[bytes], list[object]]:
            got: list[bytes] = []
            async with braid.connect(a.socket) as tx, braid.connect(b.socket) as rx:
                async def read() -> None:
                    try:
                        while True:
                            got.append((await asyncio.wait_for(rx.recv(), 30))[1])
                    except (BraidError, TimeoutError):
                        pass

                reader = asyncio.ensure_future(read())
                await tx.send("b", msgs[0])
                futs: list[tuple[bytes, asyncio.Future[dict[str, object]]]] = []
                assert b.proc is not None
                for k, m in enumerate(msgs[1:]):
                    if k == 20:
                        b.proc.send_signal(signal.SIGTERM)
                    # the sender's clients go on submitting through the stop
                    with contextlib.suppress(BraidError):
                        futs.append((m, await tx.submit("b", m)))
                    await asyncio.sleep(0.01)
                # (what is still pending once b is gone is not acknowledged)
                await asyncio.wait([f for _, f in futs], timeout=6)
                await asyncio.wait_for(reader, 40)
            acked = [m for m, f in futs if f.done() and not f.cancelled()
                     and f.exception() is None and f.result().get("event") == "acked"]
            return got, [msgs[0], *acked]

        got, acked = run(main())
        assert b.proc is not None
        b.proc.wait(30)
    finally:
        a.stop()
        b.stop()
    assert set(acked) <= set(got), (len(acked), len(got))
    assert b.log is not None
    log = b.log.read_text()
    stop_at = log.index("event=shutdown_requested")
    assert "event=connection_established" not in log[stop_at:], log[stop_at:]
