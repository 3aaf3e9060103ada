"""A host's sending connections share one maxwnd (NSCC deviation 8;
transport/host_share.py): the pieces, and two real endpoints in memory."""

from __future__ import annotations

import random
from dataclasses import replace

from test_endpoint import CFG, SECRET, Wire

from congestion.nscc import Nscc
from transport.config import ConnectionConfig
from transport.connection import Connection
from transport.endpoint import Endpoint
from transport.events import MessageAcked
from transport.host_share import HostShare


class _Cc:
    def __init__(self) -> None:
        self.told: list[int] = []

    def set_senders(self, n: int) -> None:
        self.told.append(n)


class _Conn:
    def __init__(self) -> None:
        self.cc = _Cc()


def test_share_counts_senders_and_tells_each_of_them() -> None:
    share, a, b, c = HostShare(), _Conn(), _Conn(), _Conn()
    share.note(a, True)
    assert share.senders == 1 and a.cc.told == [1]
    share.note(a, True)  # no change, no word
    share.note(b, True)
    assert share.senders == 2 and a.cc.told[-1] == 2 and b.cc.told[-1] == 2
    share.note(c, False)  # never sending: nothing moves
    assert len(share) == 2 and c.cc.told == []
    share.note(a, False)
    assert share.senders == 1 and b.cc.told[-1] == 1
    share.note(b, False)
    assert share.senders == 1 and len(share) == 0
    share.note(a, True)  # back: told the count as it is now
    assert a.cc.told[-1] == 1


def test_nscc_gives_each_of_n_senders_a_share_of_maxwnd() -> None:
    cc = Nscc(line_rate=25e6, base_rtt=1e-3, mtu=1500)
    one = cc.max_window
    cc._cwnd = one  # a full window, as a lone sender ends up
    cc.set_senders(3)
    assert cc.max_window == max(one / 3, cc.min_window)
    assert cc.cwnd <= cc.max_window
    assert cc.stats()["host_senders"] == 3
    cc.set_senders(1)
    assert cc.max_window == one
    cc.set_senders(0)  # read as one
    assert cc.max_window == one


def _senders(ep: Endpoint) -> list[float]:
    return sorted(c.cc.stats()["host_senders"] for c in ep.connections.values())


def _two_connections(cfg: ConnectionConfig) -> tuple[Endpoint, Endpoint, Wire,
                                                    Connection, Connection]:
    """Endpoints a and b in memory, and two connections from a to b."""
    a = Endpoint(config=cfg, secret=SECRET, rng=random.Random(1))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(2))
    return a, b, Wire(a, b), a.connect("b", 0.0), a.connect("b", 0.0)


def test_an_endpoint_shares_its_window_between_the_connections_sending() -> None:
    a, b, w, big, small = _two_connections(CFG)
    big.send_message(bytes(4 << 20))
    small.send_message(bytes(64 << 10))
    w.run(lambda: a.host_share is not None and len(a.host_share) == 2)
    assert _senders(a) == [2, 2]
    w.run(lambda: len(w.of("a", MessageAcked)) == 1)
    # The small message is acknowledged: the big one has the host to itself.
    w.run(lambda: a.host_share is not None and len(a.host_share) == 1, steps=1000)
    assert big.cc.stats()["host_senders"] == 1
    w.run(lambda: len(w.of("a", MessageAcked)) == 2)
    w.run(lambda: a.host_share is not None and len(a.host_share) == 0, steps=1000)
    assert b.host_share is not None and len(b.host_share) == 0  # the receiver sent no data


def test_host_share_off_keeps_a_window_per_connection() -> None:
    a, _b, w, c1, c2 = _two_connections(replace(CFG, host_share=False))
    c1.send_message(bytes(1 << 20))
    c2.send_message(bytes(1 << 20))
    w.run(lambda: len(w.of("a", MessageAcked)) == 2)
    assert a.host_share is None and _senders(a) == [1, 1]
