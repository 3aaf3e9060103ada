"""An RTT sample from a SACK whose echo names an older copy.

A flow that joined behind a standing queue (fairness at 25 Mbit/s, eight
flows) kept an srtt of 3 ms against a 10 ms queue: its tail-loss probe fired
after two of those, resent its newest packets, and the SACKs of the originals
then named an older copy than the latest, so they gave no RTT sample; only
the packets that beat the probe timer did. Half of what it sent were probe
resends (1,697 of 2,753 packets, 0 losses by time). The echoed timestamp is
that copy's own send time, so the sample is unambiguous: it now times the
tail-loss probe (``Sender.every_rtt``), and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from transport.sender import Sender
from wire.packets import Sack


@dataclass(frozen=True)
class _Ev:
    plane: int
    value: int


def _sender() -> Sender:
    return Sender(payload_size=1000, initial_rtt=1e-3, min_rto=1.0, max_rto=2.0,
                  reorder_fraction=0.25, ack_delay=10e-6, psn_window=1 << 16)


def _sack(ack_psn: int, echo_ts: int, ev: _Ev, cum: int = 0) -> Sack:
    return Sack(cum, cum, 0, ack_psn, ev.value, echo_ts, 0, 0, ev.plane)


def _probed_once() -> tuple[Sender, _Ev]:
    """One packet sent at 0.1 ms on EV ``a`` (timestamp 100), resent by a
    tail-loss probe at 3 ms on another plane: its original's SACK names an
    older copy."""
    s = _sender()
    s.enqueue(b"x" * 1000)
    item = s.next_packet()
    assert item is not None
    p0 = item[0]
    a, b = _Ev(0, 1), _Ev(1, 2)
    s.on_sent(p0, ev=a, ev_key=1, now=100e-6, timestamp=100)
    assert s.on_tlp(3e-3) == [p0] and s.next_packet() is not None
    s.on_sent(p0, ev=b, ev_key=(1 << 16) | 2, now=3e-3, timestamp=3000)
    return s, a


def test_a_sack_naming_the_probed_packets_original_times_the_queue() -> None:
    s = _sender()
    s.enqueue(b"x" * 2000)
    p0, p1 = (item[0] for item in (s.next_packet(), s.next_packet()) if item is not None)
    a, b, c = _Ev(0, 1), _Ev(1, 2), _Ev(0, 3)
    s.on_sent(p0, ev=a, ev_key=1, now=100e-6, timestamp=100)
    s.on_sent(p1, ev=c, ev_key=3, now=101e-6, timestamp=101)
    # a first, fast sample: srtt 1 ms
    res = s.on_sack(_sack(1, 101, c), now=1.101e-3, now_us=1101)
    assert res.rtt is not None and abs(s.rtt.srtt - 1e-3) < 1e-9
    # nothing more comes back: the probe resends PSN 0 on another plane
    assert s.on_tlp(3e-3) == [p0]
    assert s.next_packet() is not None
    s.on_sent(p0, ev=b, ev_key=(1 << 16) | 2, now=3e-3, timestamp=3000)
    # the original arrives after all, 10 ms after it left: its SACK's echo
    # names the older copy
    res = s.on_sack(_sack(0, 100, a, cum=2), now=10.1e-3, now_us=10_100)
    assert res.newly_acked == [p0]
    # the probe timer's RTT moved towards the queue's 10 ms: the next probe
    # waits for it (1 ms + 1/8 of the 9 ms difference: 2.125 ms, twice that)
    assert abs(s.every_rtt.srtt - (1e-3 + (10e-3 - 1e-3) / 8)) < 1e-9
    s.enqueue(b"y" * 1000)
    item = s.next_packet()
    assert item is not None
    s.on_sent(item[0], ev=a, ev_key=1, now=10.2e-3, timestamp=10_200)
    deadline = s.tlp_deadline()
    assert deadline is not None and deadline > 10.2e-3 + 2 * 2.1e-3
    # nothing else moved: the time rule's srtt, the planes, the EVs and the
    # congestion controller only take samples whose copy is the latest (these
    # are the late packets: there they lengthened the compound row's stall
    # and cost fairness under host jitter in virtual time)
    assert abs(s.rtt.srtt - 1e-3) < 1e-9
    assert res.plane_rtt is None and res.sampled is None and res.rtt is None
    assert s.spurious_losses == 0  # a probe is not a loss declaration


def test_a_repeat_of_an_echo_is_sampled_once() -> None:
    s, a = _probed_once()
    s.on_sack(_sack(0, 100, a, cum=1), now=8.1e-3, now_us=8100)
    before = s.every_rtt.srtt
    assert before > 1e-3  # 8 ms sampled
    # the same echo again (a repeated SACK): nothing newly acknowledged, no sample
    res = s.on_sack(_sack(0, 100, a, cum=1), now=9e-3, now_us=9000)
    assert res.rtt is None and res.plane_rtt is None and s.every_rtt.srtt == before


def test_a_very_late_copy_holds_the_probe_for_at_most_half_an_rto() -> None:
    s, a = _probed_once()  # min_rto 1 s
    # the original's SACK comes 50 s late (a peer's odd echo would do the same)
    s.on_sack(_sack(0, 100, a, cum=1), now=50.0001, now_us=50_000_100)
    assert s.every_rtt.srtt > 40.0
    s.enqueue(b"y" * 1000)
    item = s.next_packet()
    assert item is not None
    s.on_sent(item[0], ev=a, ev_key=1, now=50.001, timestamp=100)
    deadline = s.tlp_deadline()
    # two srtts of at most half the 1 s RTO: within a second, not 100 s
    assert deadline is not None and deadline <= 50.001 + 1.0 + s.ack_delay + 1e-9


def test_a_late_original_of_a_time_rule_resend_leaves_the_probe_alone() -> None:
    s = _sender()
    s.enqueue(b"x" * 2000)
    p0, p1 = (item[0] for item in (s.next_packet(), s.next_packet()) if item is not None)
    a, b, c = _Ev(0, 1), _Ev(1, 2), _Ev(0, 3)
    s.on_sent(p0, ev=a, ev_key=1, now=100e-6, timestamp=100)
    s.on_sent(p1, ev=c, ev_key=3, now=101e-6, timestamp=101)
    s.on_sack(_sack(1, 101, c), now=1.101e-3, now_us=1101)
    before = s.every_rtt.srtt
    assert s.detect_losses(5e-3) == [p0]  # the time rule, not a probe
    assert s.next_packet() is not None
    s.on_sent(p0, ev=b, ev_key=(1 << 16) | 2, now=5e-3, timestamp=5000)
    s.on_sack(_sack(0, 100, a, cum=2), now=10.1e-3, now_us=10_100)  # the original, late
    assert s.every_rtt.srtt == before and s.spurious_losses == 1
