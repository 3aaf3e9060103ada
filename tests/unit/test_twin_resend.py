"""A packet lost again after its resend goes out as two copies (issue 13).

On the claims fabric's compound fault (the surviving plane loses 30% of the
data at random) one packet was sent 9 times over 46 ms: each loss costs a
loss-detection delay, and its message waits. From the second loss on, the
sender resends such a packet as two copies on two EVs with one timestamp
(``sender.TWIN_AFTER_LOSSES``); an ack of it then says when, not which path.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.sim.driver import Simulator
from testbed.sim.fabric import Packet
from testbed.sim.scenarios import Peer, _establish, connect_pair
from testbed.sim.scenarios_cc import PLANE_RATE, host_config
from testbed.sim.scenarios_cc import testbed_fabric as make_testbed_fabric
from transport.connection import _DSCP_RETX
from transport.events import Event, MessageAcked
from transport.sender import TWIN_AFTER_LOSSES, Sender
from wire.packets import Sack


@dataclass(frozen=True)
class _Ev:
    plane: int
    value: int


def _sender() -> Sender:
    return Sender(payload_size=1000, initial_rtt=100e-6, min_rto=1.0, max_rto=2.0,
                  reorder_fraction=0.25, ack_delay=10e-6, psn_window=1 << 16)


def _sack(cum: int, ack_psn: int, echo_ts: int, ev: _Ev) -> Sack:
    return Sack(cum, cum, 0, ack_psn, ev.value, echo_ts, 0, 0, ev.plane)


def test_a_packet_lost_after_its_resend_is_marked_for_two_copies() -> None:
    assert TWIN_AFTER_LOSSES == 2
    s = _sender()
    s.enqueue(b"x" * 3000)  # PSN 0 will be lost twice; 1 and 2 are acked
    a, b, c, d, e = (_Ev(0, v) for v in range(1, 6))
    pk = [item[0] for item in (s.next_packet() for _ in range(3)) if item is not None]
    assert len(pk) == 3
    p0, p1, p2 = pk
    s.on_sent(p0, ev=a, ev_key=1, now=0.0, timestamp=0)
    s.on_sent(p1, ev=b, ev_key=2, now=1e-6, timestamp=1)
    s.on_sack(_sack(0, 1, 1, b), now=0.3e-3, now_us=300)  # PSN 1 only
    assert s.detect_losses(5e-3) == [p0]
    assert p0.losses == 1 and not p0.twin  # a first loss: one copy
    item = s.next_packet()
    assert item is not None and item[0] is p0
    s.on_sent(p0, ev=c, ev_key=3, now=5e-3, timestamp=5000)
    s.on_sent(p2, ev=d, ev_key=4, now=5.001e-3, timestamp=5001)
    s.on_sack(_sack(0, 2, 5001, d), now=5.3e-3, now_us=5300)  # PSN 2, not the resend
    assert s.detect_losses(20e-3) == [p0]  # the resend is lost too
    assert p0.losses == 2 and p0.twin
    item = s.next_packet()
    assert item is not None and item[0] is p0
    s.on_sent(p0, ev=e, ev_key=5, now=20e-3, timestamp=20_000)
    # Either copy's SACK echoes 20_000: the ack times the round trip but
    # credits no EV (it may have been the other copy's).
    res = s.on_sack(_sack(3, 0, 20_000, e), now=20.3e-3, now_us=20_300)
    assert res.newly_acked == [p0] and not p0.ack_exact
    assert res.rtt is not None and abs(res.rtt - 300e-6) < 1e-9
    assert res.plane_rtt is None  # nor a plane's RTT
    assert s.spurious_losses == 0  # one timestamp: the other copy is no "older copy"


def test_twin_copies_leave_on_two_evs_and_shorten_the_worst_message_wait() -> None:
    # The daemon's connection on two 100 Mbit/s planes: plane 0 dies and
    # plane 1 loses 30% of the data, 64 KiB messages, 16 queued (the compound
    # row in virtual time). Seeds 1-3 without the copies: the longest pause
    # between message deliveries 18.6 / 15.1 / 17.2 ms; with them 14.3 /
    # 12.9 / 12.6 (srtt 2.6 ms).
    fab = make_testbed_fabric(planes=2, seed=1)
    config = host_config(fab, plane_rate=PLANE_RATE, seed=1)
    copies: dict[tuple[float, int], set[int]] = {}

    def trace(event: str, now: float, pkt: Packet, link: object, reason: str) -> None:
        # Every DATA datagram a sends, by (instant, size) -> its EVs.
        if event == "sent" and pkt.src == "a" and not pkt.control and pkt.dscp == _DSCP_RETX:
            copies.setdefault((now, pkt.size), set()).add(pkt.ev)

    sim = Simulator(fab, trace=trace)
    a, b = connect_pair(sim, "a", "b", config=config)
    b.keep_data = False
    _establish(sim, a, b, limit=0.5)
    t0, end = sim.now, sim.now + 0.6
    payload = bytes(64 << 10)

    def submit() -> None:
        if sim.now < end and a.failed is None:
            a.conn.send_message(payload)
            sim.wake(a)

    def on_event(peer: Peer, ev: Event, now: float) -> None:
        if isinstance(ev, MessageAcked):
            submit()

    def fault() -> None:
        fab.set_plane_down(0, True)
        fab.link("uplink", "a", 1).gray_loss = 0.3

    a.on_event = on_event
    for _ in range(16):
        submit()
    sim.at(t0 + 0.05, fault)
    sim.run(until=end, max_events=20_000_000)
    assert a.failed is None and a.conn.sender.rto_events == 0
    twins = a.conn.sender.twin_resends
    assert twins > 0, "no packet was resent as two copies"
    # Resends that left in pairs at one instant, on two EVs.
    assert sum(1 for evs in copies.values() if len(evs) >= 2) >= twins // 2
    times = [t for t, _, _ in b.delivered if t >= t0 + 0.05]
    gap = max(y - x for x, y in zip([t0 + 0.05, *times], times, strict=False))
    assert gap < 16e-3, gap
