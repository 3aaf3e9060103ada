"""How long resent packets took, first send to ack.

The lossy compound row's stall is the slowest packet's rounds of loss and
resend (docs/decisions/0002-twin-resends.md); the sender keeps a histogram of
that time for every packet it had to resend, and the slowest, so the tail
shows in `braid stats` and in the claims JSON without a qlog.
"""

from __future__ import annotations

import pytest
from sender_kit import Ev as _Ev
from sender_kit import new_sender as _sender
from sender_kit import sack as _sack

from tools.claims.worker import COUNTERS
from transport.sender import RECOVERY_BOUNDS_MS, RECOVERY_KEYS, Sender, SentPacket


def _send(s: Sender, n: int) -> list[SentPacket]:
    s.enqueue(b"x" * (n * 1000))
    out = []
    for i in range(n):
        item = s.next_packet()
        assert item is not None
        s.on_sent(item[0], ev=_Ev(0, i + 1), ev_key=i + 1, now=i * 1e-6, timestamp=i)
        out.append(item[0])
    return out


def test_a_resent_packet_is_timed_from_its_first_send_to_its_ack() -> None:
    s = _sender()
    p0, _p1, _p2 = _send(s, 3)
    s.on_sack(_sack(0, 1, 1, _Ev(0, 2)), now=0.3e-3, now_us=300)
    s.on_sack(_sack(0, 2, 2, _Ev(0, 3)), now=0.3e-3, now_us=300)
    assert s.detect_losses(5e-3) == [p0]
    assert s.next_packet() is not None
    s.on_sent(p0, ev=_Ev(0, 9), ev_key=9, now=5e-3, timestamp=5000)
    assert p0.first_sent == 0.0 and p0.sent_time == 5e-3
    s.on_sack(_sack(3, 0, 5000, _Ev(0, 9)), now=12e-3, now_us=12_000)
    # 12 ms: the [10, 20) ms bucket; first transmissions are not counted.
    assert RECOVERY_BOUNDS_MS[2:4] == (10, 20)
    assert s.recovered == [0, 0, 0, 1, 0, 0]
    assert s.slowest_recovery == pytest.approx(12e-3)
    assert s.slowest_recovery_sends == 2


def test_a_late_copy_of_a_resent_packet_counts_once_and_the_slowest_stays() -> None:
    s = _sender()
    p0, _p1 = _send(s, 2)
    s.on_sack(_sack(0, 1, 1, _Ev(0, 2)), now=0.3e-3, now_us=300)
    assert s.detect_losses(5e-3) == [p0]
    assert s.next_packet() is not None
    s.on_sent(p0, ev=_Ev(0, 9), ev_key=9, now=5e-3, timestamp=5000)
    # Declared lost again (PSN 2, new and sent later, is answered), then its
    # first copy arrives after all: late, and recovered once.
    s.enqueue(b"y" * 1000)
    item = s.next_packet()
    assert item is not None
    p2 = item[0]
    s.on_sent(p2, ev=_Ev(0, 3), ev_key=3, now=5.001e-3, timestamp=5001)
    s.on_sack(_sack(0, 2, 5001, _Ev(0, 3)), now=5.3e-3, now_us=5300)
    assert s.detect_losses(60e-3) == [p0]
    res = s.on_sack(_sack(1, 0, 0, _Ev(0, 1)), now=61e-3, now_us=61_000)
    assert p0 in res.newly_acked
    assert s.recovered == [0, 0, 0, 0, 0, 1]  # 61 ms: slower than the last bound
    assert s.slowest_recovery == pytest.approx(61e-3) and s.slowest_recovery_sends == 2


def test_the_histogram_s_names_are_the_same_everywhere() -> None:
    # The claims worker lists the counters it differences over a run itself
    # (it imports nothing of the stack).
    assert set(RECOVERY_KEYS) <= set(COUNTERS)
    assert RECOVERY_KEYS[0] == "recovered_lt_2ms" and RECOVERY_KEYS[-1] == "recovered_ge_50ms"
    assert len(RECOVERY_KEYS) == len(_sender().recovered)
