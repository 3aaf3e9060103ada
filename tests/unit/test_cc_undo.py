"""NSCC deviation 9: a QuickAdapt cut that losses triggered comes back when
every one of those losses turns out spurious (the packet was only late)."""

from __future__ import annotations

from test_congestion import BASE, MTU, ack, block, lose, make

from congestion import Nscc


def _cut_by_loss(lost: int = MTU) -> Nscc:
    """A controller that QuickAdapt cut to 3000 B on a loss at t = 10 ms
    (as in test_quick_adapt_on_loss_cuts_to_delivered_once_per_period)."""
    c = make(target_delay=2e-3)
    ack(c, 0.0, BASE, acked=500)
    for i in range(3):
        ack(c, 0.0095 + i * 1e-4, BASE)
    block(c)
    lose(c, 0.01, lost)
    assert c.cwnd == 3000 and c.stats()["quick_adapt"] == 1
    return c


def test_a_cut_comes_back_when_its_loss_was_spurious() -> None:
    c = _cut_by_loss()
    before = 10_000 + 4 * MTU  # initial BDP window plus the four ACKs' growth, at most
    c.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    assert 3000 < c.cwnd <= before
    assert c.stats()["qa_undone"] == 1
    # The hold that follows a cut is over with it: the next ACK grows it.
    w = c.cwnd
    ack(c, 0.0106, BASE)
    assert c.cwnd > w


def test_the_cut_stays_while_any_loss_behind_it_is_unproven() -> None:
    c = _cut_by_loss(lost=2 * MTU)
    lose(c, 0.0102, MTU)  # another loss of the same episode
    c.on_spurious_loss(now=0.0104, lost_bytes=2 * MTU)
    assert c.cwnd == 3000 and c.stats()["qa_undone"] == 0
    c.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    assert c.cwnd > 3000 and c.stats()["qa_undone"] == 1


def test_no_undo_after_a_timeout_or_too_late() -> None:
    c = _cut_by_loss()
    c.on_timeout(now=0.0103)
    c.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    assert c.cwnd <= 3000 and c.stats()["qa_undone"] == 0
    c = _cut_by_loss()
    # Two RTTs (the measured srtt is the base, 1 ms) after the loss: a copy
    # that late says nothing about the window it cut.
    c.on_spurious_loss(now=0.0125, lost_bytes=MTU)
    assert c.cwnd == 3000 and c.stats()["qa_undone"] == 0


def test_real_congestion_meanwhile_applies_to_the_window_that_comes_back() -> None:
    plain = _cut_by_loss()
    plain.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    trimmed = _cut_by_loss()
    trimmed.on_nack(now=0.0102, trimmed_bytes=2 * MTU, last_hop=False)
    trimmed.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    assert trimmed.cwnd == plain.cwnd - 2 * MTU
    assert trimmed.stats()["qa_undone"] == 1


def test_a_loss_without_a_cut_has_nothing_to_undo() -> None:
    c = make(target_delay=2e-3)
    for i in range(4):  # above QuickAdapt's gate: no cut
        ack(c, 0.0095 + i * 1e-4, BASE)
    block(c)
    w = c.cwnd
    lose(c, 0.01, MTU)
    assert c.cwnd == w
    c.on_spurious_loss(now=0.0105, lost_bytes=MTU)
    assert c.cwnd == w and c.stats()["qa_undone"] == 0
