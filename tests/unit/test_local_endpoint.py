"""``braid.open``: hosts served inside the application's process, on loopback
(127.0.0.2 / 127.0.0.3, real UDP sockets, encrypted), and one talking to a
real ``braid daemon``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_daemon import REPO, run, write_configs

import braid


def test_send_submit_recv_and_stats(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)

    async def main() -> None:
        async with braid.open(a.config) as ea, braid.open(b.config) as eb:
            mid = await ea.send("b", b"hello")
            assert isinstance(mid, int)
            assert await asyncio.wait_for(eb.recv(), 10) == ("a", b"hello")
            payload = bytearray(os.urandom(100_000))
            fut = await eb.submit("a", memoryview(payload))
            reply = await asyncio.wait_for(fut, 10)
            assert reply["event"] == "acked" and reply["bytes"] == len(payload)
            peer, data = await asyncio.wait_for(ea.recv(), 10)
            assert peer == "b" and data == payload
            st = await ea.stats()
            assert st["inproc"] is True and st["name"] == "a" and st["encrypted"] is True
            (conn,) = [c for c in st["connections"] if c["role"] == "initiator"]
            assert conn["peer"] == "b" and conn["stats"]["bytes_acked"] >= 5
            assert st["unacked"] == {"b": {"messages": 0, "bytes": 0}}
            assert st["delivered"]["bytes"] == len(payload)

    run(main())


def test_many_in_flight_all_arrive_byte_exact(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)
    msgs = [os.urandom(64 << 10) + i.to_bytes(4, "big") for i in range(300)]

    async def main() -> list[bytes]:
        async with braid.open(a.config) as ea, braid.open(b.config) as eb:
            async def rx() -> list[bytes]:
                return [(await eb.recv())[1] for _ in msgs]

            got = asyncio.ensure_future(rx())
            futs = [await ea.submit("b", m) for m in msgs]
            replies = await asyncio.wait_for(asyncio.gather(*futs), 60)
            assert [r["bytes"] for r in replies] == [len(m) for m in msgs]
            return await asyncio.wait_for(got, 30)

    got = run(main())
    # Messages are delivered as they complete (sprayed packets finish them
    # out of send order), each exactly once.
    assert sorted(got) == sorted(msgs)  # type: ignore[call-overload]


def test_large_message(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)
    big = os.urandom(24 << 20)

    async def main() -> tuple[str, bytes]:
        async with braid.open(a.config) as ea, braid.open(b.config) as eb:
            rx = asyncio.ensure_future(eb.recv())
            await asyncio.wait_for(ea.send("b", big), 120)
            return await asyncio.wait_for(rx, 30)

    peer, data = run(main())  # type: ignore[misc]
    assert peer == "a" and data == big


def test_unknown_peer_closed_endpoint_and_second_open(tmp_path: Path) -> None:
    a, _b = write_configs(tmp_path)

    async def main() -> None:
        async with braid.open(a.config) as ea:
            with pytest.raises(braid.BraidError, match=r"unknown peer 'nobody'.*peers: b"):
                await ea.send("nobody", b"x")
            fut = await ea.submit("nobody", b"x")
            with pytest.raises(braid.BraidError, match="unknown peer"):
                await fut
            with pytest.raises(braid.BraidError, match="unknown peer"):
                await ea.connect_peer("nobody")
            # Only one process (or endpoint) binds a host's planes.
            with pytest.raises(braid.BraidError, match="already serves a's planes"):
                await braid.open(a.config)
        with pytest.raises(braid.BraidError, match="closing"):
            await ea.send("b", b"x")

    run(main())


@pytest.mark.parametrize("other_key", [False, True], ids=["absent", "other-key"])
def test_unreachable_or_mismatched_peer_fails_with_reason(tmp_path: Path,
                                                          other_key: bool) -> None:
    # b does not run, or runs with another cluster key: the handshake fails
    # with the daemon's reason, never hangs.
    a, b = write_configs(tmp_path, key_b=other_key,
                         extra="[connection]\nhandshake_timeout = 0.5\n")

    async def main() -> float:
        async with braid.open(a.config) as ea:
            eb = await braid.open(b.config) if other_key else None
            t0 = time.monotonic()
            try:
                with pytest.raises(braid.BraidError,
                                   match=r"^peer unreachable or key mismatch "):
                    await asyncio.wait_for(ea.send("b", b"x"), 20)
                with pytest.raises(braid.BraidError, match=r"^peer unreachable"):
                    await asyncio.wait_for(ea.connect_peer("b"), 20)
            finally:
                if eb is not None:
                    await eb.close()
            return time.monotonic() - t0

    assert run(main()) < 20  # type: ignore[operator]


_RECEIVER = """
import asyncio, sys
import braid
async def main():
    async with braid.open(sys.argv[1]) as ep:
        print("ready", flush=True)
        while True:
            await ep.recv()
asyncio.run(main())
"""


def test_peer_that_goes_away_fails_pending_futures(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path, extra="[connection]\nidle_fail_timeout = 1.0\n")
    proc = subprocess.Popen([sys.executable, "-c", _RECEIVER, str(b.config)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

        async def main() -> tuple[list[str], float]:
            async with braid.open(a.config) as ea:
                await ea.send("b", b"warm")
                futs = [await ea.submit("b", os.urandom(256 << 10)) for _ in range(16)]
                proc.send_signal(signal.SIGKILL)  # gone: no CLOSE, nothing more acked
                t0 = time.monotonic()
                futs += [await ea.submit("b", os.urandom(256 << 10)) for _ in range(16)]
                res = await asyncio.wait_for(
                    asyncio.gather(*futs, return_exceptions=True), 30)
                took = time.monotonic() - t0
                errs = [str(r) for r in res if isinstance(r, BaseException)]
                assert all(isinstance(r, dict | braid.BraidError) for r in res), res
                return errs, took

        errs, took = run(main())  # type: ignore[misc]
    finally:
        proc.kill()
        proc.wait(10)
    assert errs, "some messages were queued after the peer died: they must fail"
    assert all(e.strip() and "\n" not in e for e in errs), errs
    assert all("acknowledg" in e or "unreachable" in e for e in errs), errs
    assert took < 30


def test_send_window_bounds_unacked_and_recv_releases_credit(tmp_path: Path) -> None:
    # 1 MiB of send window and of receive credit: nothing is read at first.
    a, b = write_configs(tmp_path, extra="send_window = 1048576\nrecv_buffer = 1048576")
    msgs = [os.urandom(256 << 10) for _ in range(24)]  # 6 MiB

    async def main() -> None:
        async with braid.open(a.config) as ea, braid.open(b.config) as eb:
            futs: list[asyncio.Future[dict[str, object]]] = []

            async def produce(part: list[bytes]) -> None:
                for m in part:
                    futs.append(await ea.submit("b", m))

            # Four concurrent producers: the window holds for all of them together.
            producer = asyncio.gather(*(produce(msgs[i::4]) for i in range(4)))
            await asyncio.sleep(1.5)
            assert not producer.done(), "submit must wait for window, not drop or queue all"
            sa, sb = await ea.stats(), await eb.stats()
            assert sa["unacked"]["b"]["bytes"] <= 1 << 20, sa["unacked"]
            assert sb["inbox"]["bytes"] <= 1 << 20, sb["inbox"]
            assert len(futs) < len(msgs)
            got = [(await asyncio.wait_for(eb.recv(), 30))[1] for _ in msgs]
            await asyncio.wait_for(producer, 30)
            await asyncio.wait_for(asyncio.gather(*futs), 30)
            assert sorted(got) == sorted(msgs)

    run(main())


def test_inproc_endpoint_and_daemon_interoperate(tmp_path: Path) -> None:
    a, b = write_configs(tmp_path)
    b.start()
    try:
        async def main() -> None:
            with pytest.raises(braid.BraidError, match="a daemon already serves b's planes"):
                await braid.open(b.config)
            async with braid.open(a.config) as ea, braid.connect(b.socket) as cb:
                data = os.urandom(3 << 20)
                rx = asyncio.ensure_future(cb.recv())
                await asyncio.wait_for(ea.send("b", data), 60)
                assert await asyncio.wait_for(rx, 30) == ("a", data)
                await asyncio.wait_for(cb.send("a", b"from the daemon"), 30)
                assert await asyncio.wait_for(ea.recv(), 30) == ("b", b"from the daemon")

        run(main())
    finally:
        assert b.stop() == 0
