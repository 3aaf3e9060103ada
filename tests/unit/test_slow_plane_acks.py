"""Planes of unequal latency: what the receiver reports, how the
sender finds out that a loss was only lateness, and what NSCC does then.

On a fabric whose second plane has 4x the first one's RTT, a SACK coalesced
behind a slow-plane arrival reported only the 64 PSNs below that arrival,
so the fast plane's newer packets went unreported for a whole slow round
trip and were declared lost; their resends were all duplicates, and those
"losses" turned NSCC's delay-as-the-mark on."""

from __future__ import annotations

from dataclasses import dataclass

from test_congestion import judged, lose

from congestion import AckSample, Nscc
from transport.psn import wire
from transport.receiver import Receiver
from transport.sender import Sender
from wire.packets import Data, Sack


def _receiver() -> Receiver:
    # SACKs held (long ACK delay, no count): arrivals coalesce into one.
    return Receiver(ack_every=1000, ack_delay=1.0, psn_window=1 << 16,
                    max_message_size=1 << 20, slice_size=10)


def _arrive(r: Receiver, psn: int, plane: int) -> None:
    body = Data(wire(psn), 1, plane, 10, 1, psn * 10, 2000, psn)
    r.on_data(body, b"x" * 10, ce=False, now=0.0, ack_req=False)


def _covered(sacks: list[Sack]) -> set[int]:
    out: set[int] = set(range(max(s.cum_psn for s in sacks)))
    for s in sacks:
        bm, k = s.bitmap, 0
        while bm:
            if bm & 1:
                out.add(s.bitmap_base + k)
            bm >>= 1
            k += 1
    return out


def test_a_sack_behind_a_slow_plane_arrival_also_reports_the_fast_planes_packets() -> None:
    r = _receiver()
    fast = list(range(101, 131, 2))  # plane 0 ran far ahead ...
    for psn in fast:
        _arrive(r, psn, plane=0)
    _arrive(r, 0, plane=1)  # ... and the slow plane's packet triggers the SACK
    due = r.make_sacks(0.0, 1e-3)
    sacks = [d.sack for d in due]
    assert due[-1].sack.ack_psn == 0 and due[-1].plane == 1  # the echo as before
    assert set(fast) <= _covered(sacks), "fast-plane arrivals left unreported"
    # The part above the trigger's bitmap goes back by the plane it came by.
    upper = [d for d in due if d.sack.bitmap_base > 63]
    assert upper and all(d.plane == 0 for d in upper)
    # Nothing new since: the next SACK reports only what arrives next.
    _arrive(r, 1, plane=1)
    assert len(r.make_sacks(0.0, 1e-3)) == 1


@dataclass(frozen=True)
class _Ev:
    plane: int
    value: int


def _sender() -> Sender:
    return Sender(payload_size=1000, initial_rtt=100e-6, min_rto=1e-3, max_rto=1.0,
                  reorder_fraction=0.25, ack_delay=10e-6, psn_window=1 << 16)


def _sack(cum: int, ack_psn: int, echo_ts: int, ev: _Ev) -> Sack:
    return Sack(cum, cum, 0, ack_psn, ev.value, echo_ts, 0, 0, ev.plane)


def test_an_older_copy_arriving_after_its_acknowledged_resend_was_a_spurious_loss() -> None:
    s = _sender()
    s.enqueue(b"x" * 1000)
    slow, fast = _Ev(1, 7), _Ev(0, 3)
    item = s.next_packet()
    assert item is not None
    p, _ = item
    s.on_sent(p, ev=slow, ev_key=(1 << 16) | 7, now=1e-3, timestamp=1000)
    assert s.on_rto(6e-3) == [p]  # declared lost on the slow plane ...
    assert s.next_packet() is not None
    s.on_sent(p, ev=fast, ev_key=3, now=6e-3, timestamp=6000)  # ... resent on the fast one
    res = s.on_sack(_sack(1, p.psn, 6000, fast), now=6.2e-3, now_us=6200)
    assert res.newly_acked == [p] and s.spurious_losses == 0 and not res.late
    # A repeat naming the resend proves nothing (the older copy may be lost).
    res = s.on_sack(_sack(1, p.psn, 6000, fast), now=6.3e-3, now_us=6300)
    assert s.spurious_losses == 0 and not res.late
    # The receiver's SACK for the duplicate names the older copy: it came.
    res = s.on_sack(_sack(1, p.psn, 1000, slow), now=14e-3, now_us=14000)
    assert res.late == [p] and s.spurious_losses == 1
    # Counted once, however often that SACK is repeated.
    res = s.on_sack(_sack(1, p.psn, 1000, slow), now=15e-3, now_us=15000)
    assert not res.late and s.spurious_losses == 1


MTU = 1500
BASE = 100e-6


def _nscc_with_queue() -> Nscc:
    c = judged(Nscc(mtu=MTU, base_rtt=BASE, line_rate=1.25e9, initial_window=10_000,
                    probe_gain=0.0))
    # The base RTT, then a standing queue of 0.8 ms (application-limited).
    for i, rtt in enumerate([BASE] + [BASE + 0.8e-3] * 40):
        c.on_ack(AckSample(now=1e-3 + i * 1e-6 if i else 0.0, acked_bytes=MTU, rtt=rtt,
                           ecn=False, ev=7, plane=0, in_flight=0))
    return c


def test_delay_stops_being_the_mark_when_its_losses_were_only_late() -> None:
    c = _nscc_with_queue()
    lose(c, 0.005, 2 * MTU)
    assert c.stats()["delay_is_mark"] == 1.0
    c.on_spurious_loss(now=0.006, lost_bytes=MTU)
    assert c.stats()["delay_is_mark"] == 1.0  # one of the two was a real loss, so far
    c.on_spurious_loss(now=0.007, lost_bytes=MTU)
    assert c.stats()["delay_is_mark"] == 0.0
    assert c.stats()["mark_revoked"] == 1 and c.stats()["spurious_bytes"] == 2 * MTU


def test_a_spurious_loss_does_not_revoke_delay_as_the_mark_turned_on_by_a_real_one() -> None:
    c = _nscc_with_queue()
    c.on_spurious_loss(now=0.004, lost_bytes=MTU)  # before: nothing to take back
    lose(c, 0.005, MTU)
    assert c.stats()["delay_is_mark"] == 1.0
