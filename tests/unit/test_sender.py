"""Loss inference of the sender, driven directly (no network)."""

from __future__ import annotations

from dataclasses import dataclass

from transport.sender import Sender, SentPacket
from wire.packets import Sack

RTT = 100e-6


@dataclass(frozen=True)
class _Ev:
    plane: int
    value: int


def make() -> Sender:
    return Sender(payload_size=1000, initial_rtt=RTT, min_rto=1e-3, max_rto=1.0,
                  reorder_fraction=0.25, ack_delay=10e-6, psn_window=1 << 16)


def send(s: Sender, ev: _Ev, now: float) -> SentPacket:
    item = s.next_packet()
    assert item is not None
    p, _ = item
    ts = int(now * 1e6)
    s.on_sent(p, ev=ev, ev_key=(ev.plane << 16) | ev.value, now=now, timestamp=ts)
    return p


def sack(cum: int, psns: list[int], ack_psn: int, echo_ts: int, ev: _Ev) -> Sack:
    base = min(psns) if psns else cum
    bm = 0
    for q in psns:
        bm |= 1 << (q - base)
    return Sack(cum, base, bm, ack_psn, ev.value, echo_ts, 0, 0, ev.plane)


def test_later_packet_on_same_ev_acked_means_loss() -> None:
    s = make()
    s.enqueue(b"x" * 3000)
    e, f = _Ev(0, 1), _Ev(1, 2)
    p0 = send(s, e, 0.0)
    send(s, f, 1e-6)
    p2 = send(s, e, 2e-6)
    res = s.on_sack(sack(0, [p2.psn], p2.psn, p2.timestamp, e), now=50e-6, now_us=50)
    assert [p.psn for p in res.lost] == [p0.psn]
    assert s.lost_by_ev_order == 1


def test_ack_of_an_old_copy_does_not_declare_later_packets_lost() -> None:
    # Karn for send order: p0 is retransmitted on EV f; then the *original*
    # copy (sent on e) arrives. That ack must not be taken as "f delivered a
    # packet sent after p1", which would declare p1 (on f) lost.
    s = make()
    s.enqueue(b"x" * 2000)
    e, f = _Ev(0, 1), _Ev(1, 2)
    p0 = send(s, e, 0.0)
    p1 = send(s, f, 1e-6)
    s.on_rto(5e-3)  # both declared lost
    assert s.next_packet() is not None  # p0 comes back for a resend ...
    s.on_sent(p0, ev=f, ev_key=(1 << 16) | 2, now=5e-3, timestamp=5000)
    old_ts = 0  # ... but the original copy's SACK arrives
    res = s.on_sack(sack(0, [p0.psn], p0.psn, old_ts, e), now=5.01e-3, now_us=5010)
    assert res.newly_acked and not res.newly_acked[0].ack_exact
    assert p1 not in res.lost
    assert s.spurious_losses == 1  # (the window widens once an RTT sample exists)


def test_late_ack_of_a_packet_declared_lost_cancels_its_resend() -> None:
    s = make()
    s.enqueue(b"x" * 1000)
    e = _Ev(0, 1)
    p0 = send(s, e, 0.0)
    expired = s.on_rto(5e-3)
    assert expired == [p0] and s.retx_queue
    res = s.on_sack(sack(1, [], p0.psn, p0.timestamp, e), now=5.1e-3, now_us=5100)
    assert [p.psn for p in res.newly_acked] == [p0.psn]
    assert not s.retx_queue and not s.has_pending
    assert s.spurious_losses == 1
    assert res.messages_acked == [(1, 1000)]


def test_rto_sweeps_everything_in_flight() -> None:
    # After an outage the window is one packet: stale packets still counted
    # in flight would block the retransmission that could prove the path back.
    s = make()
    s.enqueue(b"x" * 3000)
    e = _Ev(0, 1)
    old = send(s, e, 0.0)
    young = [send(s, e, 4.5e-3), send(s, e, 4.6e-3)]
    expired = s.on_rto(5e-3)
    assert expired == [old] and s.bytes_in_flight == 2000
    assert s.consecutive_rtos == 1 and s.rto_backoff == 1 and s.rto_events == 1
    assert s.sweep_inflight() == young
    assert s.bytes_in_flight == 0 and len(s.retx_queue) == 3


def test_cancel_withdraws_only_messages_not_started() -> None:
    from transport.sender import Sender

    s = Sender(payload_size=100, initial_rtt=1e-3, min_rto=1e-3, max_rto=1.0,
               reorder_fraction=0.25, ack_delay=1e-4, psn_window=1 << 16)
    first, second, third = s.enqueue(bytes(250)), s.enqueue(bytes(10)), s.enqueue(bytes(10))
    got = s.next_packet()
    assert got is not None and got[0].msg_id == first
    assert not s.cancel(first)  # started: it is finished, never left half-sent
    assert s.cancel(third) and not s.cancel(third)
    ids = []
    while (nxt := s.next_packet()) is not None:
        ids.append(nxt[0].msg_id)
    assert ids == [first, first, second]


def test_tail_loss_probe_sends_a_lone_packet_twice() -> None:
    # One packet in flight: a single probe copy lost on a gray path would
    # leave the tail to the next probe; two copies, counted in flight once.
    s = make()
    s.enqueue(b"x" * 1000)
    e = _Ev(0, 1)
    p = send(s, e, 0.0)
    tlp = s.tlp_deadline()
    assert tlp is not None
    assert s.on_tlp(tlp) == [p] and list(s.retx_queue) == [p, p]
    first, second = send(s, _Ev(0, 2), tlp), send(s, _Ev(0, 3), tlp)
    assert first is second is p and not s.retx_queue
    assert s.bytes_in_flight == 1000 and p.transmissions == 3
    res = s.on_sack(sack(1, [], 0, p.timestamp, e), now=tlp + RTT, now_us=int(tlp * 1e6) + 100)
    assert res.newly_acked == [p] and s.bytes_in_flight == 0
