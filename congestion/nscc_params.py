"""NSCC's parameters: the published algorithm's knobs plus one switch per
deviation of Braid's from it (docs/decisions/0020-nscc-deviations.md).

``NsccParams.uec_spec()`` is UEC NSCC as published (every switch off);
``NsccParams.braid()`` is what Braid runs (every deviation that is on today
on). ``congestion.get("nscc")`` builds the latter, ``get("nscc-uec")`` the
former; ``congestion_params`` keywords replace single fields of either.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

#: The deviation switches, in the order of the decision record: the numbered
#: ones of docs/congestion.md first, then the unnumbered ones.
DEVIATIONS: tuple[str, ...] = (
    "loss_as_mark",             # 1
    "probe_above_target",       # 2
    "maxwnd_covers_target",     # 3
    "mark_fraction_md",         # 4
    "shared_marks",             # 5
    "last_hop_trim_md",         # 6 (the cut)
    "trim_base",                # 6 (the base RTT)
    "trim_quiet_qa",            # 7
    "host_share",               # 8
    "spurious_undo",            # 9
    "measured_growth",          # 10
    "host_floor",               # 11
    "host_delay_window",        # 12
    "quick_adapt_floor",
    "filtered_qa_trigger",
    "measured_rtt_periods",
    "plane_mean_bdp",
    "app_limited_no_increase",
    "per_ack_increase",
    "trim_without_quick_adapt",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NsccParams:
    """How an ``Nscc`` behaves, apart from its link (MTU, base RTT guess, line
    rate, which the connection supplies). Times are seconds.

    Published knobs: ``target_delay`` is the queueing delay aimed for (None:
    base RTT / 2, following the learned base RTT); ``qa_delay`` the delay
    that triggers QuickAdapt (None: 4 × target); ``fi_delay`` "near zero"
    for fast increase (None: target / 10); ``max_bdp_factor`` × BDP is
    maxwnd; MD cuts by ``md_gain`` × (d − target) / d, at most to
    ``md_floor``; ``pi_gain`` × the queue headroom per RTT is the
    proportional increase, ``fi_gain`` MTUs per RTT the fair one;
    QuickAdapt fires only when a period delivered less than ``qa_gate`` ×
    maxwnd; ``delay_ewma`` filters the delay that sizes an MD. Pacing runs
    at ``pacing_gain`` × cwnd / RTT with bursts of ``burst_packets``.

    Each switch below turns one deviation on (its magnitudes follow it).
    """

    target_delay: float | None = None
    max_bdp_factor: float = 1.5
    initial_window: int | None = None
    md_gain: float = 0.8
    md_floor: float = 0.5
    pi_gain: float = 0.25
    fi_gain: float = 1.0
    fi_delay: float | None = None
    qa_delay: float | None = None
    qa_gate: float = 0.125
    delay_ewma: float = 0.125
    pacing_gain: float = 1.25
    burst_packets: int = 4
    #: What the hosts' own receive moderation adds to a round trip (both
    #: ends' poll interval), seconds: not queueing, so each delay sample is
    #: read less it, and the window covers it. Like the line rate, a fact of
    #: the host, not of the algorithm: 0 unless the I/O layer polls (the
    #: daemon and the in-process endpoint set 4 × ``rx_holdoff``;
    #: docs/congestion.md, "Plain tail-drop links").
    host_hold: float = 0.0

    #: 1. No ECN ever, but a loss with more queue behind it than the path
    #: carries without loss: delay above target is the mark. ``calm_rtts``
    #: RTTs of loss-free delay are what a loss is compared with.
    loss_as_mark: bool = True
    calm_rtts: int = 32
    #: 2. After ``quiet_rtts`` RTTs without a congestion signal the fair
    #: increase grows by at least ``probe_gain`` of the window per RTT (0: off).
    probe_above_target: bool = True
    probe_gain: float = 0.25
    quiet_rtts: float = 4.0
    #: 3. maxwnd = max(max_bdp_factor × BDP, BDP + line rate × target).
    maxwnd_covers_target: bool = True
    #: 4. MD scaled by the filtered marked fraction (DCTCP's alpha, gain
    #: ``mark_gain``; 0 keeps alpha at 1: every MD full size, as UEC).
    mark_fraction_md: bool = True
    mark_gain: float = 0.0
    #: 5. At least ``pervasive_marks`` of the last round's bytes marked: a
    #: marked ACK cuts by md_gain × fraction / 2 whatever its delay.
    shared_marks: bool = True
    pervasive_marks: float = 0.4
    #: 6. The first last-hop trim of an RTT cuts the window by ``trim_md``
    #: (0: off), in place of subtracting each last-hop trim's bytes ...
    last_hop_trim_md: bool = True
    trim_md: float = 0.25
    #: ... and a trim NACK's round trip lowers its plane's base RTT.
    trim_base: bool = True
    #: 7. No QuickAdapt on delay within ``trim_qa_rtts`` RTTs of a last-hop
    #: trim (0: off).
    trim_quiet_qa: bool = True
    trim_qa_rtts: float = 32.0
    #: 8. The host's sending connections share one maxwnd (``set_senders``).
    host_share: bool = True
    #: 9. A QuickAdapt cut whose losses all prove spurious is undone.
    spurious_undo: bool = True
    #: 10. While delay is the mark (deviation 1), the proportional increase
    #: converts headroom at the rate delivered over the last RTT when that is
    #: below the line rate (UEC: at the line rate). Off by default: it cuts
    #: a tail-drop link's resends when ``plane_rate`` overstates the link,
    #: but doubles the busy-host compound scenario's longest gap (99 ->
    #: 227 ms in virtual time; docs/congestion.md, "Plain tail-drop links").
    measured_growth: bool = False
    #: 11. On a fabric that never marked or trimmed, maxwnd also covers the
    #: host delay floor: the lowest per-RTT minimum delay of the last
    #: ``FLOOR_RTTS`` RTTs (off by default: docs/congestion.md).
    host_floor: bool = False
    #: 12. maxwnd also covers the host delay the I/O layer measured and took
    #: out of the RTT samples (``AckSample.host_delay``: the peer's hold of
    #: each SACK from the data's arrival, this host's wait to read it), its
    #: mean per RTT, smoothed, at most ``qa_delay``.
    host_delay_window: bool = True
    #: QuickAdapt never cuts below ``qa_floor`` × maxwnd (UEC: one MTU).
    quick_adapt_floor: bool = True
    qa_floor: float = 0.0625
    #: QuickAdapt's delay trigger reads the filtered delay (UEC: the packet's).
    filtered_qa_trigger: bool = True
    #: MDs at most once per measured RTT and QuickAdapt's period at least the
    #: smoothed RTT (UEC: once per base RTT; base RTT + target).
    measured_rtt_periods: bool = True
    #: BDP from the planes' mean base RTT when it is > 1.5 × the minimum.
    plane_mean_bdp: bool = True
    #: No increase while less than half the window is in flight.
    app_limited_no_increase: bool = True
    #: Increases applied on every ACK (UEC: gathered, applied every 8 MTU
    #: acked or once per base RTT).
    per_ack_increase: bool = True
    #: A trim only subtracts its bytes (UEC: it also triggers QuickAdapt).
    trim_without_quick_adapt: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.delay_ewma <= 1:
            raise ValueError("delay_ewma must be in (0, 1]")
        if self.target_delay is not None and self.target_delay <= 0:
            raise ValueError("target_delay must be positive")
        if not 0 <= self.qa_floor <= self.qa_gate <= 1:
            raise ValueError("need 0 <= qa_floor <= qa_gate <= 1 (fractions of maxwnd)")
        if self.calm_rtts < 1:
            raise ValueError("calm_rtts must be >= 1")
        if not 0 <= self.mark_gain <= 1:
            raise ValueError("mark_gain must be in [0, 1] (0: every MD is full size)")
        if not 0 < self.pervasive_marks <= 1:
            raise ValueError("pervasive_marks must be in (0, 1]")
        if not 0 <= self.trim_md < 1:
            raise ValueError("trim_md must be in [0, 1)")
        if not 0 <= self.host_hold <= 0.1:
            raise ValueError("host_hold must be in [0, 0.1] seconds")
        if self.trim_qa_rtts < 0:
            raise ValueError("trim_qa_rtts must be >= 0 (0: off)")

    @classmethod
    def braid(cls) -> NsccParams:
        """Braid's NSCC: every deviation that is on by default on (deviation 4
        is on with ``mark_gain`` 0, which sizes every MD as UEC does;
        deviations 10 and 11, ``measured_growth`` and ``host_floor``, are off)."""
        return cls()

    @classmethod
    def uec_spec(cls) -> NsccParams:
        """UEC NSCC as published: four quadrants from the packet's queueing
        delay × its ECN echo, increases gathered and applied every 8 MTU or
        base RTT, MD once per base RTT sized by the filtered delay,
        QuickAdapt on trims, losses, timeouts and a packet's delay above
        ``qa_delay`` (not when application-limited), a trim subtracts its
        bytes, maxwnd 1.5 × BDP, minimum one MTU, no decrease without ECN."""
        return cls(**dict.fromkeys(DEVIATIONS, False))

    def deviations(self) -> dict[str, bool]:
        """Each deviation switch and whether it is on."""
        return {name: bool(getattr(self, name)) for name in DEVIATIONS}


assert set(DEVIATIONS) <= {f.name for f in fields(NsccParams)}
