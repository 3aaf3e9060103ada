"""A packet lost again after its resend goes out as two copies (decision 0002).

On the claims fabric's compound fault (the surviving plane loses 30% of the
data at random) one packet was sent 9 times over 46 ms: each loss costs a
loss-detection delay, and its message waits. From the second loss on, when
no queue stands behind the loss, the connection resends such a packet as two
copies on two EVs with one timestamp (``sender.TWIN_AFTER_LOSSES``); the SACK
a copy triggers names its EV, other acks say when, not which path.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from sender_kit import Ev as _Ev
from sender_kit import new_sender as _sender
from sender_kit import sack as _sack

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Fabric, Packet
from testbed.sim.scenarios import Peer, _establish, connect_pair
from testbed.sim.scenarios_cc import PLANE_RATE, feed, host_config
from testbed.sim.scenarios_cc import testbed_fabric as make_testbed_fabric
from transport.connection import _DSCP_RETX
from transport.sender import TWIN_AFTER_LOSSES, Sender


def _lost_twice(s: Sender) -> Any:
    """PSN 0 declared lost, resent, declared lost again; PSNs 1, 2 acked."""
    s.enqueue(b"x" * 3000)
    pk = [item[0] for item in (s.next_packet() for _ in range(3)) if item is not None]
    assert len(pk) == 3
    p0, p1, p2 = pk
    a, b, c, d = (_Ev(0, v) for v in range(1, 5))
    s.on_sent(p0, ev=a, ev_key=1, now=0.0, timestamp=0)
    s.on_sent(p1, ev=b, ev_key=2, now=1e-6, timestamp=1)
    s.on_sack(_sack(0, 1, 1, b), now=0.3e-3, now_us=300)  # PSN 1 only
    assert s.detect_losses(5e-3) == [p0] and p0.losses == 1
    assert s.next_packet() is not None
    s.on_sent(p0, ev=c, ev_key=3, now=5e-3, timestamp=5000)
    s.on_sent(p2, ev=d, ev_key=4, now=5.001e-3, timestamp=5001)
    s.on_sack(_sack(0, 2, 5001, d), now=5.3e-3, now_us=5300)  # PSN 2, not the resend
    assert s.detect_losses(20e-3) == [p0]  # the resend is lost too
    assert p0.losses == TWIN_AFTER_LOSSES == 2
    assert s.next_packet() is not None
    # What the connection does for a twin: two copies, one timestamp.
    first, second = _Ev(0, 5), _Ev(0, 6)
    p0.twin = True
    s.on_sent(p0, ev=first, ev_key=5, now=20e-3, timestamp=20_000)
    p0.twin_ev, p0.twin_key = second, 6
    return p0, first, second


def test_the_sack_a_twin_copy_triggers_names_the_copy_that_came() -> None:
    s = _sender()
    p0, _first, second = _lost_twice(s)
    res = s.on_sack(_sack(3, 0, 20_000, second), now=20.3e-3, now_us=20_300)
    assert res.newly_acked == [p0] and p0.ack_exact and p0.ev is second
    assert res.rtt is not None and abs(res.rtt - 300e-6) < 1e-9
    assert res.plane_rtt == (0, res.rtt)
    assert s.spurious_losses == 0  # one timestamp: the other copy is no "older copy"


def test_a_twin_acked_by_the_cumulative_psn_credits_no_path() -> None:
    s = _sender()
    p0, first, _second = _lost_twice(s)
    s.enqueue(b"y" * 1000)
    item = s.next_packet()
    assert item is not None
    p3 = item[0]
    s.on_sent(p3, ev=_Ev(0, 7), ev_key=7, now=20.001e-3, timestamp=20_001)
    # A SACK triggered by PSN 3 acknowledges PSN 0 by the cumulative PSN.
    res = s.on_sack(_sack(4, 3, 20_001, _Ev(0, 7)), now=20.3e-3, now_us=20_300)
    assert p0 in res.newly_acked and not p0.ack_exact and p0.ev is first
    assert s.largest_acked_seq >= p0.seq  # the send order still counts


def _run(fab: Fabric, senders: list[str], *, fault: Any = None, duration: float = 0.6,
         cc: dict[str, Any] | None = None
         ) -> tuple[list[Peer], list[Peer], dict[tuple[float, int], set[int]]]:
    config = host_config(fab, plane_rate=PLANE_RATE, seed=1)
    if cc:
        config = replace(config, congestion_params={**config.congestion_params, **cc})
    copies: dict[tuple[float, int], set[int]] = {}

    def trace(event: str, now: float, pkt: Packet, link: object, reason: str) -> None:
        # Every resend a sender puts on the wire, by (instant, size) -> its EVs.
        if event == "sent" and pkt.src in senders and not pkt.control \
                and pkt.dscp == _DSCP_RETX:
            copies.setdefault((now, pkt.size), set()).add(pkt.ev)

    sim = Simulator(fab, trace=trace)
    pairs = [connect_pair(sim, h, "b", config=config, cids=(10 + i, 100 + i))
             for i, h in enumerate(senders)]
    for _, b in pairs:
        b.keep_data = False
    _establish(sim, *[p for pair in pairs for p in pair], limit=0.5)
    t0, end = sim.now, sim.now + duration
    submit = feed(sim, [a for a, _ in pairs], bytes(64 << 10), end)
    for a, _ in pairs:
        for _ in range(16):
            submit(a)
    if fault is not None:
        sim.at(t0 + 0.05, fault)
    sim.run(until=end, max_events=20_000_000)
    return [a for a, _ in pairs], [b for _, b in pairs], copies


def test_twin_copies_leave_on_two_evs_and_shorten_the_worst_message_wait() -> None:
    # The daemon's connection on two 100 Mbit/s planes: plane 0 dies and
    # plane 1 loses 30% of the data, 64 KiB messages, 16 queued (the compound
    # row in virtual time). Seeds 1-3 without the copies: the longest pause
    # between message deliveries 18.6 / 15.1 / 17.2 ms; with them 14.6 /
    # 14.2 / 15.8 (srtt 2.6 ms).
    fab = make_testbed_fabric(planes=2, seed=1)
    at: list[float] = []

    def fault() -> None:
        fab.set_plane_down(0, True)
        fab.link("uplink", "a", 1).gray_loss = 0.3
        assert fab.sim is not None
        at.append(fab.sim.now)

    (a,), (b,), copies = _run(fab, ["a"], fault=fault)
    assert a.failed is None and a.conn.sender.rto_events == 0
    twins = a.conn.sender.twin_resends
    assert twins > 0, "no packet was resent as two copies"
    st = a.conn.stats()
    assert st["twin_resends"] == twins and float(st["rttvar"]) > 0  # type: ignore[arg-type]
    # Every resent packet is in the recovery histogram (~900: the host paces
    # under its share of the line rate); the slowest took rounds.
    snd = a.conn.sender
    assert sum(snd.recovered) > 800 and snd.slowest_recovery_sends >= 3
    assert st["slowest_recovery"] == snd.slowest_recovery > 5e-3
    assert st["recovered_ge_50ms"] == snd.recovered[-1]
    # Resends that left in pairs at one instant, on two EVs.
    assert sum(1 for evs in copies.values() if len(evs) >= 2) >= twins // 2
    times = [at[0], *(t for t, _, _ in b.delivered if t >= at[0])]
    gap = max(y - x for x, y in itertools.pairwise(times))
    assert gap < 17e-3, gap


def test_congestive_losses_are_not_resent_twice() -> None:
    # 4-to-1 through 64 KB tail-drop buffers without loss-as-mark (a loss is
    # no mark: the queue stands at the buffer, `braid bench sim`'s
    # incast4-no-loss-mark): a third of the packets dropped, many of them
    # twice, with a queue behind every drop. Copies would only feed the queue
    # (with them that row read 0.89 of capacity instead of 0.95).
    fab = make_testbed_fabric(planes=2, senders=4, buffer=64 << 10, seed=2)
    senders, _, _ = _run(fab, [f"a{i}" for i in range(4)], duration=0.3,
                         cc={"loss_as_mark": False})
    resent = sum(a.conn.sender.retransmissions for a in senders)
    assert resent > 1000, resent
    assert all(a.conn.sender.twin_resends == 0 for a in senders)
