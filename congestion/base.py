"""The interface between the connection core and a congestion controller.

The core is sans-I/O, so a controller never reads a clock: every call carries
``now`` (seconds, the caller's clock). Sizes are bytes, rates bytes/second.
Controllers are looked up by name (``congestion.get("nscc")``) so scenarios
and benchmarks can swap them without touching the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True, kw_only=True)
class AckSample:
    """One SACK's worth of feedback, as the core saw it.

    ``rtt`` is None when the SACK cannot be matched to one send time (e.g. it
    only acknowledges retransmitted data: Karn's rule). ``ev``/``plane`` name
    the path the acked packet took; multipath estimators need them because
    feedback from different paths is not one RTT process. ``in_flight`` is the
    bytes outstanding when the SACK arrived, before removing ``acked_bytes``.
    ``host_delay``: what of the round trip the hosts spent (the peer's hold
    of the SACK from the data's arrival, this host's wait to read it), taken
    out of ``rtt`` already (docs/congestion.md, "Host delay").
    """

    now: float
    acked_bytes: int
    rtt: float | None
    ecn: bool
    ev: int
    plane: int
    in_flight: int
    host_delay: float = 0.0


class PlaneRtt(Protocol):
    """The per-plane round-trip facts a controller reads, owned by the
    transport's path model (``transport.paths.rtt.PathModel``) and handed
    over by ``congestion.registry.for_connection(..., paths=)``.

    ``base_rtt``/``bases``: each plane's smallest SACK echo (its
    propagation). ``delay_base``: each plane's smallest delay sample, the
    ones the controller feeds with ``delay_sample`` (an ACK's RTT, a trimmed
    header's round trip): the zero of its queueing delay.
    """

    def base_rtt(self, plane: int) -> float | None: ...

    def bases(self) -> Mapping[int, float]: ...

    def delay_sample(self, plane: int, rtt: float) -> float:
        """Record a delay sample; returns the plane's ``delay_base`` after it."""
        ...

    def delay_base(self, plane: int) -> float | None: ...

    def delay_bases(self) -> Mapping[int, float]: ...


@runtime_checkable
class CongestionController(Protocol):
    """What the connection core calls. All methods are keyword-only."""

    @property
    def cwnd(self) -> int:
        """Congestion window, bytes."""
        ...

    @property
    def target_delay(self) -> float:
        """Queueing delay (seconds) the controller accepts as normal; the core
        counts a loss as congestive only with more queueing than this behind it."""
        ...

    def on_ack(self, sample: AckSample) -> None: ...

    def set_senders(self, n: int) -> None:
        """``n`` connections of this host (its endpoint) have data to send
        now, this one among them: they share the host's NICs."""
        ...

    def set_line_rate(self, rate: float) -> None:
        """The connection's line rate is now ``rate`` bytes/s: the planes
        that are up (a parked plane carries nothing). A controller whose
        window scales with the line rate rescales it."""
        ...

    def on_plane_rtt(self, *, plane: int, rtt: float) -> None:
        """A round trip through ``plane`` (a SACK's echo; also when the packet
        was acknowledged already, by a faster plane's SACK): a multipath
        controller learns each plane's own base RTT from it."""
        ...

    def on_nack(self, *, now: float, trimmed_bytes: int, last_hop: bool,
                rtt: float | None = None, plane: int | None = None) -> None:
        """A trim NACK: the switch told us exactly how much it could not carry.
        ``rtt``: the trimmed packet's send to its NACK, through ``plane``; the
        header skipped the trimming port's data queue (priority class)."""
        ...

    def on_loss(self, *, now: float, lost_bytes: int) -> None: ...

    def on_spurious_loss(self, *, now: float, lost_bytes: int) -> None:
        """Bytes reported by ``on_loss`` were acknowledged after all: their
        loss was reordering or a late copy, not congestion."""
        ...

    def on_timeout(self, *, now: float) -> None: ...

    def can_send(self, *, in_flight: int, size: int) -> bool: ...

    def next_send_time(self, *, now: float, size: int) -> float:
        """Earliest time (seconds, caller's clock) a packet of ``size`` may leave."""
        ...

    def on_sent(self, *, now: float, size: int) -> None: ...

    def send_quota(self, *, now: float, size: int) -> tuple[float, float, float, float]:
        """``can_send`` and ``next_send_time`` for a run of packets sent back
        to back at ``now``, as numbers ``(window, tokens, need, rate)`` the
        sender checks itself: a packet of at most ``size`` bytes may leave
        while the bytes in flight are 0 or leave ``size`` room under
        ``window``, and while ``tokens >= need`` (or the shortfall takes no
        time at ``now``'s resolution: ``now + (need - tokens) / rate <= now``);
        each packet takes its length from ``tokens``. Report what left with
        ``on_sent_run``, and call ``can_send`` when the window stopped the run
        (a controller may note that it was window-bound). Per packet this is
        the decision of those three calls, without the calls."""
        ...

    def on_sent_run(self, *, now: float, sizes: list[int]) -> None:
        """Packets of these sizes left at ``now``, in order (``on_sent`` each)."""
        ...

    def stats(self) -> dict[str, float]: ...

