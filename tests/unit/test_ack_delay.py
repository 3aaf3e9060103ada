"""ACK coalescing: the SACK's ACK Delay field (wire/SPEC.md 3.2, "ACK delay"),
what the sender makes of it, and the window-filling ACK request."""

from __future__ import annotations

import os
import random
from dataclasses import replace

from test_endpoint import CFG, SECRET, Wire
from test_sender import _Ev, send

from transport.config import ConnectionConfig
from transport.connection import PEER_ACK_DELAY, Connection
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.receiver import Receiver
from transport.sender import Sender
from wire.codec import peek_untrusted
from wire.constants import ACK_DELAY_MAX, Flag, PacketType
from wire.packets import (
    Data,
    Sack,
    ack_delay_code,
    ack_delay_seconds,
    pack_body,
    unpack_body,
)


def test_ack_delay_field_round_trips() -> None:
    sack = Sack(1, 2, 3, 4, 5, 6, 7, 8, 1, 200)
    assert unpack_body(PacketType.SACK, pack_body(sack), 0) == sack
    # A peer that does not report it sends 0, the field's old reserved value.
    old = Sack(1, 2, 3, 4, 5, 6, 7, 8, 1)
    assert unpack_body(PacketType.SACK, pack_body(old), 0).ack_delay == 0


def test_ack_delay_code_is_exact_in_8_us_units_then_within_a_sixteenth() -> None:
    # Every code decodes to a hold that encodes back to it, in order.
    holds = [ack_delay_seconds(c) for c in range(ACK_DELAY_MAX + 1)]
    assert holds == sorted(holds) and len(set(holds)) == len(holds)
    assert [ack_delay_code(h) for h in holds] == list(range(ACK_DELAY_MAX + 1))
    # Below 1.024 ms: whole 8 us units, rounded down (the old field's meaning).
    assert ack_delay_code(400e-6) == 50 and ack_delay_code(407e-6) == 50
    assert ack_delay_code(0.0) == 0 and ack_delay_code(-1.0) == 0
    # Above: never more than the hold, never 1/16 less (a busy host's waits
    # run to milliseconds: 2-4 ms at the 99th percentile on the testbed).
    for k in range(1, 4000):
        hold = k * 63.7e-6
        got = ack_delay_seconds(ack_delay_code(hold))
        if hold < ack_delay_seconds(ACK_DELAY_MAX):
            assert hold * (1 - 1 / 16) - 8e-6 <= got <= hold + 1e-12, (hold, got)
    assert abs(ack_delay_seconds(ACK_DELAY_MAX) - 0.25395) < 1e-4
    assert ack_delay_code(10.0) == ACK_DELAY_MAX  # saturates, never wraps


def _receiver(delay: float) -> Receiver:
    return Receiver(ack_every=32, ack_delay=delay, psn_window=1 << 16,
                    max_message_size=1 << 20, slice_size=1000)


def test_receiver_reports_how_long_it_held_the_echoed_packet() -> None:
    r = _receiver(500e-6)
    t0 = 10.0
    for i in range(3):
        urgent = r.on_data(Data(i, 7, 0, 1000, 1, i * 1000, 8000, 100 + i), b"x" * 1000,
                           ce=False, now=t0 + i * 50e-6, ack_req=False)
        assert not urgent  # coalesced: neither ack_every nor a request
    assert r.timer() == t0 + 500e-6  # the delay runs from the first held packet
    (due,) = r.make_sacks(t0 + 500e-6, rtt_hint=1e-3)
    # The echoed packet (the last, at t0 + 100 us) waited 400 us = 50 units.
    assert due.sack.ack_psn == 2 and due.sack.echo_ts == 102
    assert due.sack.ack_delay == 50
    # Held 10 ms (a busy host): within a sixteenth, below the hold.
    r.on_data(Data(3, 7, 0, 1000, 1, 3000, 8000, 103), b"x" * 1000, ce=False, now=t0 + 1,
              ack_req=False)
    (due,) = r.make_sacks(t0 + 1 + 0.01, rtt_hint=1e-3)
    assert 0.01 * 15 / 16 <= ack_delay_seconds(due.sack.ack_delay) <= 0.01
    # Held longer than the field reaches: it saturates, it does not wrap.
    r.on_data(Data(4, 7, 0, 1000, 1, 4000, 8000, 104), b"x" * 1000, ce=False, now=t0 + 2,
              ack_req=False)
    (due,) = r.make_sacks(t0 + 3, rtt_hint=1e-3)
    assert due.sack.ack_delay == ACK_DELAY_MAX


def _sender() -> Sender:
    return Sender(payload_size=1000, initial_rtt=1e-3, min_rto=1e-3, max_rto=1.0,
                  reorder_fraction=0.25, ack_delay=20e-6, psn_window=1 << 16)


def _held_sack(s: Sender, ev: _Ev, sent: float, now: float, held_units: int) -> float | None:
    p = send(s, ev, sent)
    res = s.on_sack(Sack(p.psn + 1, p.psn + 1, 0, p.psn, ev.value, p.timestamp, 0, 0, ev.plane,
                         held_units), now=now, now_us=int(now * 1e6))
    return res.rtt


def test_sender_takes_the_reported_hold_out_of_its_rtt_sample_and_learns_it() -> None:
    s = _sender()
    s.enqueue(b"x" * 16000)
    ev = _Ev(0, 1)
    # 300 us of network, 400 us held (50 units): the sample is the network's,
    # less the 20 us the sender allows for anyway (PEER_ACK_DELAY's floor).
    rtt = _held_sack(s, ev, 0.0, 700e-6, 50)
    assert rtt is not None and abs(rtt - (700e-6 - (400e-6 - 20e-6))) < 2e-6
    assert abs(s.ack_delay - 400e-6) < 1e-9  # the loss timers now wait for it
    # A SACK held for nothing leaves the learnt delay to decay slowly, not at once.
    t = 1e-3
    for _ in range(8):
        assert _held_sack(s, ev, t, t + 300e-6, 0) is not None
        t += 1e-3
    assert 250e-6 < s.ack_delay < 400e-6
    assert s.rtt.min_rtt >= 299e-6


def test_a_made_up_ack_delay_cannot_shrink_the_rtt_below_its_minimum() -> None:
    s = _sender()
    s.enqueue(b"x" * 4000)
    ev = _Ev(0, 1)
    assert _held_sack(s, ev, 0.0, 300e-6, 0) is not None  # min_rtt 300 us
    # A hostile peer claims it held a 500 us round trip for 2 ms.
    rtt = _held_sack(s, ev, 1e-3, 1.5e-3, ACK_DELAY_MAX)
    assert rtt is not None and rtt >= 300e-6 - 1e-9
    assert s.rtt.min_rtt >= 300e-6 - 1e-9
    assert s.ack_delay <= ack_delay_seconds(ACK_DELAY_MAX) + 1e-9  # bounded by the field


def _idle_pair(cfg: ConnectionConfig) -> tuple[Endpoint, Endpoint, Wire, Connection]:
    """Endpoints a and b on a virtual wire, a's connection to b established
    and nothing in flight."""
    a = Endpoint(config=cfg, secret=SECRET, rng=random.Random(1))
    b = Endpoint(config=cfg, secret=SECRET, rng=random.Random(2))
    w = Wire(a, b)
    conn = a.connect("b", 0.0)
    w.run(lambda: conn.is_established and bool(b.connections))
    w.run(lambda: not conn.sender.bytes_in_flight, steps=1000)
    return a, b, w, conn


def test_the_packet_that_fills_the_window_asks_for_an_ack_once_the_peer_holds_sacks() -> None:
    # A receiver coalescing SACKs for up to its ACK delay must not hold the
    # ACK clock of a window-bound sender: once the peer's SACKs report holds
    # longer than the sender allows for, the last packet that fits asks.
    cfg = replace(CFG, planes=1, ack_every=64, ack_delay=1e-3)
    a, b, w, conn = _idle_pair(cfg)
    assert conn.sender.ack_delay == PEER_ACK_DELAY  # nothing held so far
    conn.send_message(os.urandom(1 << 20))
    now = w.now + 10e-6
    data = [d for _, d, _ in a.datagrams_to_send(now)
            if peek_untrusted(d).ptype == PacketType.DATA]
    for d in data[1:3]:  # neither a plane's first packet nor the window's last
        assert not peek_untrusted(d).flags & Flag.ACK_REQ
        b.receive_datagram(d, RxInfo(0), now, "a")
    assert not b.datagrams_to_send(now)  # held
    now += 1e-3
    b.handle_timer(now)
    sacks = [d for _, d, _ in b.datagrams_to_send(now)]
    assert [peek_untrusted(d).ptype for d in sacks] == [PacketType.SACK]
    a.receive_datagram(sacks[0], RxInfo(0), now + 50e-6, "b")
    assert conn.sender.ack_delay > 900e-6  # learnt: b holds SACKs ~1 ms
    window = conn.cc.cwnd
    flags: list[bool] = []
    for _ in range(1000):  # nothing more is delivered: only the window stops it
        now += 10e-6
        for d, _path in [(d, p) for _, d, p in a.datagrams_to_send(now + 50e-6)]:
            if peek_untrusted(d).ptype == PacketType.DATA:
                flags.append(bool(peek_untrusted(d).flags & Flag.ACK_REQ))
        if conn.sender.bytes_in_flight + cfg.payload_size > window:
            break
    assert conn.sender.bytes_in_flight + cfg.payload_size > window, "window never filled"
    assert flags and flags[-1], "the window-filling packet must ask for a SACK"
    assert not any(flags[:-1]), flags


def test_the_sender_times_a_sack_from_its_arrival_and_says_what_the_hosts_took() -> None:
    # The SACK reached this host 300 us before it was read (a busy event
    # loop; the kernel's receive stamp says so: RxInfo.lag). Its echo's
    # round trip is 200 us of fabric, 400 us held by the peer (50 units, its
    # socket wait included) and those 300 us: the sample is the fabric's
    # (less PEER_ACK_DELAY's 20 us allowance), and what was taken out is
    # reported for the window (AckSample.host_delay).
    s = _sender()
    s.enqueue(b"x" * 4000)
    ev = _Ev(0, 1)
    p = send(s, ev, 0.0)
    now, lag = 900e-6, 300e-6
    res = s.on_sack(Sack(p.psn + 1, p.psn + 1, 0, p.psn, ev.value, p.timestamp, 0, 0, ev.plane,
                         50), now=now, now_us=round((now - lag) * 1e6), lag=lag)
    assert res.rtt is not None and abs(res.rtt - (200e-6 + 20e-6)) < 2e-6
    assert abs(res.host_delay - (380e-6 + 300e-6)) < 2e-6
    # The loss timers allow for the SACK's whole stay in the hosts.
    assert abs(s.ack_delay - 700e-6) < 2e-6


def test_a_datagram_that_waited_in_the_host_is_held_from_its_arrival() -> None:
    # Through the endpoints' receive paths (the fast one for DATA): DATA that
    # waited 400 us in b's socket is acknowledged with 400 us of ACK Delay,
    # and a's controller learns the host delay its window must cover.
    cfg = replace(CFG, planes=1, ack_every=1)
    a, b, w, conn = _idle_pair(cfg)
    assert conn.cc.stats()["host_delay"] == 0.0
    conn.send_message(os.urandom(4000))
    now = w.now + 10e-6
    data = [d for _, d, _ in a.datagrams_to_send(now)
            if peek_untrusted(d).ptype == PacketType.DATA]
    now += 600e-6
    b.receive_datagrams([data[0]], RxInfo(0, lag=400e-6), now, "a")
    sacks = [d for _, d, _ in b.datagrams_to_send(now)
             if peek_untrusted(d).ptype == PacketType.SACK]
    assert sacks
    (bconn,) = b.connections.values()
    assert bconn.receiver.sack_causes["every"] >= 1
    for d in sacks:  # a reads them 100 us after they arrived
        a.receive_datagram(d, RxInfo(0, lag=100e-6), now + 200e-6, "b")
    # a's allowance covers b's 400 us hold and its own 100 us read wait ...
    assert conn.sender.ack_delay >= 500e-6 - 10e-6, conn.sender.ack_delay
    # ... and its window the host delay taken out of the sample (400 us
    # less the 20 us allowance, plus 100 us)
    host = conn.cc.stats()["host_delay"]
    assert 480e-6 - 10e-6 <= host <= 480e-6 + 10e-6, host
