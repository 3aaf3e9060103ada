"""SACKs per batch of reads: a held SACK waits across reads for more packets,
up to the batch delay, and goes out at once for what must not wait."""

from __future__ import annotations

import random

from transport.config import profile
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.events import MessageAcked
from transport.receiver import Receiver
from wire.codec import peek_untrusted
from wire.constants import ACK_DELAY_HZ, PacketType

B = 500e-6


def _receiver() -> Receiver:
    r = Receiver(ack_every=32, ack_delay=20e-6, psn_window=1 << 16,
                 max_message_size=1 << 20, slice_size=1000)
    r.set_batch_delay(B)
    return r


def _slice(r: Receiver, psn: int, now: float, *, last: bool = False, mlen: int = 64000) -> bool:
    return r.on_slice(psn, 7, 100 + psn, 0, 1, psn * 1000, mlen, b"x" * 1000, False, now,
                      False, last)


def test_in_order_packets_wait_for_the_batch_delay_and_echo_the_first() -> None:
    r = _receiver()
    t = 1.0
    r.flush_due(t - 100e-6)  # the read before: reads come every 100 us
    for i in range(4):
        assert not _slice(r, i, t + i * 100e-6)
        assert not r.flush_due(t + i * 100e-6)  # the next read is still within the delay
    # The read that the next one would take past the delay sends it.
    assert not _slice(r, 4, t + 400e-6)
    assert r.flush_due(t + 400e-6)
    (due,) = r.make_sacks(t + 400e-6, rtt_hint=1e-3, batch=True)
    # It echoes the first packet held, and says it was held 400 us.
    assert due.sack.ack_psn == 0 and due.sack.echo_ts == 100
    assert abs(due.sack.ack_delay - 400e-6 * ACK_DELAY_HZ) <= 1  # (truncated to 8 us units)
    assert due.sack.cum_psn == 5
    assert not r.ack_pending() and not r.flush_due(t + 500e-6)


def test_a_timer_sends_it_when_no_read_comes() -> None:
    r = _receiver()
    _slice(r, 0, 2.0)
    assert r.timer() == 2.0 + B


def test_a_hole_waits_for_the_batch_delay_like_any_packet() -> None:
    """Spraying over planes of unequal delay opens holes all the time (the
    other plane's packets are still on their way): a hole alone does not send
    the SACK, or a paced two-plane stream sends one per read; the batch delay
    bounds how late the sender hears of a real loss. Counted by cause."""
    r = _receiver()
    r.flush_due(0.9999)
    _slice(r, 1, 1.0)  # PSN 0 missing: a hole
    assert not r.flush_due(1.0)
    assert not r.flush_due(1.0 + 200e-6)
    assert r.flush_due(1.0 + 400e-6)  # the next read would pass the batch delay
    assert r.sack_causes["hole"] == 1 and r.sack_causes["batch_due"] == 0
    (due,) = r.make_sacks(1.0 + 400e-6, rtt_hint=1e-3, batch=True)
    assert due.sack.ack_psn == 1  # with a hole, the last packet is echoed
    assert due.sack.cum_psn == 0 and due.sack.bitmap == 0b10  # PSN 1 above the hole


def test_what_must_not_wait_goes_out_at_the_end_of_the_read() -> None:
    r2 = _receiver()
    r2.flush_due(0.9999)
    _slice(r2, 0, 1.0, last=True)  # a message's last packet
    assert r2.flush_due(1.0)
    assert r2.sack_causes["last_or_credit"] == 1


def test_without_batching_the_ack_delay_timer_is_unchanged() -> None:
    r = Receiver(ack_every=32, ack_delay=20e-6, psn_window=1 << 16,
                 max_message_size=1 << 20, slice_size=1000)
    _slice(r, 0, 1.0)
    assert r.timer() == 1.0 + 20e-6


def test_paced_endpoints_send_a_sack_per_batch_not_per_read() -> None:
    """Two endpoints, host profile, 2 planes at a paced 100 Mbit/s each, one
    read per 100 us: the message is acknowledged, with no probe and no
    retransmission, and with far fewer SACKs than one per read."""
    cfg = profile("host", planes=2, plane_rate=12.5e6, seed=1)
    secret = bytes(range(32))
    a = Endpoint(config=cfg, secret=secret, rng=random.Random(1))
    b = Endpoint(config=cfg, secret=secret, rng=random.Random(2))
    count: dict[str, int] = {}
    rx = {p: RxInfo(p) for p in range(2)}
    now = 0.0
    conn = a.connect("b", now)
    conn.send_message(bytes(2 << 20))
    acked = False
    reads = 0
    for _ in range(20000):
        now += 100e-6
        for src, dst, name in ((a, b, "a"), (b, a, "b")):
            t = src.next_timer()
            if t is not None and t <= now:
                src.handle_timer(now)
            out = src.datagrams_to_send(now)
            for _p, data, path in out:
                kind = peek_untrusted(data).ptype.name
                count[kind] = count.get(kind, 0) + 1
                dst.receive_datagrams((data,), rx[path.plane], now, name)
            dst.flush_acks(now)
            reads += 1
        while (item := a.next_event()) is not None:
            acked = acked or isinstance(item[1], MessageAcked)
        while b.next_event() is not None:
            pass
        if acked:
            break
    assert acked
    data = count["DATA"]
    assert data == (2 << 20) // cfg.payload_size + 1 + 0  # each slice once: no resend
    assert count.get("PROBE", 0) < data / 100  # not a probe round per batch
    assert count[PacketType.SACK.name] < data / 4, count
