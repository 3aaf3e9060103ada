"""The daemon's inbox serves peers round robin (transport/inbox.py), unit and
against real ``braid daemon`` processes on loopback (the claims' fairness row)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from test_daemon import Host, free_ports, run

import braid
from transport.inbox import Inbox
from wire.keys import new_cluster_key, write_key_file


def _drain(box: Inbox) -> list[tuple[str, int, bytes]]:
    out = []
    while box:
        out.append(box.popleft())
    return out


def test_a_late_peer_is_served_next_not_behind_the_backlog() -> None:
    box = Inbox()
    for i in range(10):
        box.append(("a", i, bytes(65536)))
    box.append(("b", 0, bytes(65536)))
    got = [(p, m) for p, m, _ in _drain(box)]
    # A single FIFO handed out b's message eleventh.
    assert got.index(("b", 0)) <= 1, got
    assert [m for p, m in got if p == "a"] == list(range(10))  # order within a peer


def test_backlogged_peers_get_equal_bytes_whatever_their_message_sizes() -> None:
    box = Inbox()
    for i in range(64):
        box.append(("big", i, bytes(65536)))
    for i in range(256):
        box.append(("small", i, bytes(16384)))
    served = {"big": 0, "small": 0}
    for _ in range(80):  # while both are still backlogged
        p, _, data = box.popleft()
        served[p] += len(data)
    assert abs(served["big"] - served["small"]) <= box.quantum, served


def test_requeued_messages_go_first_in_their_order() -> None:
    box = Inbox()
    box.append(("a", 5, b"x"))
    box.append(("b", 7, b"y"))
    box.extendleft(reversed([("a", 3, b"p"), ("b", 4, b"q")]))
    assert len(box) == 4 and sorted(m for _, m, _ in box) == [3, 4, 5, 7]
    assert [(p, m) for p, m, _ in _drain(box)][:2] == [("a", 3), ("b", 4)]
    with pytest.raises(IndexError):
        box.popleft()


def test_message_larger_than_the_quantum_is_served() -> None:
    box = Inbox(quantum=1000)
    box.append(("a", 1, bytes(10_000)))
    box.append(("b", 1, bytes(10)))
    box.append(("b", 2, bytes(10)))
    got = [(p, m) for p, m, _ in _drain(box)]
    assert sorted(got) == [("a", 1), ("b", 1), ("b", 2)]
    assert not box and len(box) == 0


def _three_hosts(tmp: Path) -> tuple[Host, Host, Host]:
    """a and c send to b (each knows b; b knows both)."""
    write_key_file(tmp / "cluster.key", new_cluster_key())
    ports = free_ports("127.0.0.2")
    planes = {n: [f"127.0.0.{ip}:{p}" for p in ports] for n, ip in (("a", 2), ("b", 3),
                                                                    ("c", 4))}
    peers = {"a": ["b"], "c": ["b"], "b": ["a", "c"]}
    hosts = []
    for name in ("a", "b", "c"):
        cfg = tmp / f"host-{name}.toml"
        sock = tmp / f"{name}.sock"
        text = (f'name = "{name}"\nkey = "cluster.key"\nsocket = "{sock}"\n'
                f"planes = {json.dumps(planes[name])}\n")
        for p in peers[name]:
            text += f"\n[peers.{p}]\nplanes = {json.dumps(planes[p])}\n"
        cfg.write_text(text)
        hosts.append(Host(name, cfg, sock))
    return hosts[0], hosts[1], hosts[2]


def test_daemon_hands_a_newcomer_its_turn_ahead_of_a_backlog(tmp_path: Path) -> None:
    """a fills b's inbox (no reader yet), then c sends one message: the first
    reader gets c's message first or second, not after a's whole backlog."""
    a, b, c = _three_hosts(tmp_path)
    backlog = [os.urandom(65536) for _ in range(12)]
    late = os.urandom(1000)
    try:
        a.start()
        b.start()
        c.start()

        async def main() -> list[tuple[str, bytes]]:
            async with braid.connect(a.socket) as ta, braid.connect(c.socket) as tc:
                for f in [await ta.submit("b", m) for m in backlog]:
                    await asyncio.wait_for(f, 30)  # in b's inbox: acked, not read
                await asyncio.wait_for(await tc.submit("b", late), 30)
                async with braid.connect(b.socket) as rx:
                    return [await asyncio.wait_for(rx.recv(), 30) for _ in range(13)]

        got: list[tuple[str, bytes]] = run(main())  # type: ignore[assignment]
    finally:
        for h in (a, b, c):
            h.stop()
    # All of them (a connection delivers in completion order, not submit order).
    assert sorted(d for p, d in got if p == "a") == sorted(backlog)
    assert ("c", late) in got[:2], [p for p, _ in got]
