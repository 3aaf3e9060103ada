"""A bare ``Sender`` and the SACKs it reads, for tests that drive the loss
rules by hand (shared by the twin-resend and recovery-histogram tests)."""

from __future__ import annotations

from dataclasses import dataclass

from transport.sender import Sender
from wire.packets import Sack


@dataclass(frozen=True)
class Ev:
    """Just what the sender reads of an EV."""

    plane: int
    value: int


def new_sender(initial_rtt: float = 100e-6) -> Sender:
    return Sender(payload_size=1000, initial_rtt=initial_rtt, min_rto=1.0, max_rto=2.0,
                  reorder_fraction=0.25, ack_delay=10e-6, psn_window=1 << 16)


def sack(cum: int, ack_psn: int, echo_ts: int, ev: Ev) -> Sack:
    """A SACK with cumulative PSN ``cum`` triggered by ``ack_psn`` on ``ev``."""
    return Sack(cum, cum, 0, ack_psn, ev.value, echo_ts, 0, 0, ev.plane)
