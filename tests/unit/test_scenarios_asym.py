"""Asymmetric planes, in virtual time: one plane at half rate, or
with 4x the other's RTT; goodput must reach 0.9 of the sum of the planes'
capacities (MPTCP's per-subflow windows reach it on the real testbed). An
even spray over planes gets 0.67 and 0.45 here."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

import pytest

from testbed.sim.scenarios_asym import scenario_asymmetric, scenario_gray_heal
from transport.paths.plane_share import PlaneShares


@pytest.mark.parametrize(("case", "jitter"), [("half_rate", 0.0), ("latency", 0.0),
                                               ("half_rate", 2e-3), ("latency", 2e-3)])
def test_unequal_planes_are_filled(case: str, jitter: float) -> None:
    # jitter: a busy sending host delays each packet by up to 2 ms, so the
    # planes' delays are noisy, as on the real testbed. The latency case with
    # jitter was 0.67 before NSCC's deviation 1 stopped counting losses that
    # come within the delay the path carries anyway.
    r = scenario_asymmetric(case=case, jitter=jitter)
    assert not r["failed"]
    if case == "latency":
        assert r["plane_rtt"][1] >= 3.9 * r["plane_rtt"][0]
    assert r["rtos"] == 0
    if case == "half_rate" and jitter:
        # Jitter makes one seed's figure a draw: over seeds 31 and 1-5 the
        # half-rate plane reads 0.85-0.96 (mean 0.89-0.91), so the median of
        # three seeds is asserted, not one seed's.
        runs = [r] + [scenario_asymmetric(case=case, jitter=jitter, seed=s) for s in (1, 2)]
        assert all(x["rtos"] == 0 and not x["failed"] for x in runs)
        figures = sorted(x["goodput_over_capacity"] for x in runs)
        assert figures[1] >= 0.9 and figures[0] >= 0.84, figures
    else:
        assert r["goodput_over_capacity"] >= 0.9, r


def test_shares_follow_queueing_delay_and_reset() -> None:
    s = PlaneShares(2)
    t = 0.0
    # Plane 1 keeps a growing queue, plane 0 none: plane 1's share falls
    # (by a rate per unit of time: over 100 ms, two horizons).
    for k in range(1000):
        t += 1e-4
        s.on_rtt(0, 1e-3, t)
        s.on_rtt(1, 1e-3 + min(k, 100) * 1e-4, t)
    assert s.weight[0] == 1.0 and s.weight[1] < 0.5 and not s.even
    picks = [s.choose([True, True]) for _ in range(1000)]
    assert picks.count(1) < picks.count(0) / 2
    # A parked plane is never chosen; back, it starts from an even share.
    assert all(s.choose([True, False]) == 0 for _ in range(10))
    s.reset(1)
    assert s.even and s.weight == [1.0, 1.0]


def test_a_park_restarts_every_planes_baseline() -> None:
    # Two equal planes on a host that turns busy: every round trip gains
    # 3-4 ms of host delay, alike on both planes. Plane 0 learned its minimum
    # while the host was idle (0.1 ms, a veth); plane 1 was parked by a host stall and
    # came back learning its minimum under load. Were only plane 1's minimum
    # restarted, plane 0 would read the host's delay as its own queue and
    # lose its share to an equal plane.
    s = PlaneShares(2)
    t = 0.0
    for _ in range(200):  # idle host: 0.1 ms on both planes
        t += 1e-4
        s.on_rtt(0, 1e-4, t)
        s.on_rtt(1, 1e-4, t)
    s.reset(1)  # parked (a stall), then back
    s.reset(1)
    for k in range(3000):  # 300 ms of a busy host: 3.1-4.1 ms, alike on both
        t += 1e-4
        s.on_rtt(0, 3.1e-3 + (k * 7919 % 100) * 1e-5, t)
        s.on_rtt(1, 3.1e-3 + (k * 104729 % 100) * 1e-5, t)
    assert min(s.weight) >= 0.8, s.snapshot()
    picks = [s.choose([True, True]) for _ in range(1000)]
    assert min(picks.count(0), picks.count(1)) >= 400


def _standing_queue(trims: bool) -> PlaneShares:
    # A newcomer behind a last hop whose plane-1 queue stands at its trim
    # threshold (19 ms) for the connection's whole life while plane 0's
    # swings from empty to the same 19 ms: plane 1 is the fuller one. Every
    # echo of plane 1 carries its queue; its trimmed headers (base RTT 1 ms,
    # ``on_base``) show the plane without it.
    s = PlaneShares(2)
    t = 0.0
    for k in range(3000):
        t += 1e-4
        s.on_rtt(0, 1e-3 + (k % 200) * 0.95e-4, t)
        s.on_rtt(1, 20e-3, t)
        if trims and k % 50 == 0:
            s.on_base(1, 1e-3)
    return s


def test_a_queue_that_never_drained_is_not_read_as_an_idle_plane() -> None:
    # Without the trims' base the standing queue is plane 1's minimum: it
    # reads as idle, and plane 0, the emptier one, loses its share to it
    # (the claims' fairness row at 12 Mbit/s: newcomers at 0.06-0.66 of their
    # share on the emptier plane, the last flow at a quarter of the first's
    # bytes).
    blind = _standing_queue(trims=False)
    assert blind.weight[0] < 0.5 and blind.weight[1] == 1.0, blind.snapshot()
    seen = _standing_queue(trims=True)
    assert seen.weight[0] == 1.0 and seen.qdelay[1] > 15e-3, seen.snapshot()
    # Only a lower round trip is a base; the plane's figures are not touched
    # otherwise (a hostile or confused echo of a plane it lacks is ignored).
    before = seen.snapshot()
    seen.on_base(1, 30e-3)
    seen.on_base(5, 1e-6)
    seen.on_base(0, -1.0)
    assert seen.snapshot() == before


def test_equal_queues_stay_even() -> None:
    s = PlaneShares(2)
    t = 0.0
    for k in range(400):
        t += 1e-4
        # Both planes queue (an incast into this receiver), unequally by turns.
        s.on_rtt(0, 1e-3 + (5e-3 if (k // 50) % 2 else 1e-3), t)
        s.on_rtt(1, 1e-3 + (1e-3 if (k // 50) % 2 else 5e-3), t)
    assert s.even


def test_a_lossy_plane_loses_its_share_and_keeps_it_across_a_park() -> None:
    # A gray host uplink loses on every EV of its plane alike; what it drops
    # never queues, so by queueing delay alone it looks like the idlest plane
    # (on the real 4-plane testbed it drew the largest share: a 170 ms step).
    def run(loss0: float, loss1: float) -> PlaneShares:
        s = PlaneShares(2)
        t = 0.0
        for _ in range(2000):  # 200 ms: the loss fraction is averaged over 50 ms
            t += 1e-4
            for plane, loss in ((0, loss0), (1, loss1)):
                s.on_rtt(plane, 1e-3, t)  # the same delay on both planes
                s.on_outcome(plane, lost=round(20 * loss), acked=20 - round(20 * loss))
        return s

    gray = run(0.5, 0.0)
    assert gray.weight[1] == 1.0 and gray.weight[0] <= 0.1 and not gray.even
    picks = [gray.choose([True, True]) for _ in range(1000)]
    assert picks.count(0) < 100
    gray.reset(0)  # parked and back: still the plane that lost half
    assert gray.weight[0] <= 0.1 and not gray.even
    assert run(0.03, 0.0).even  # a little loss is noise
    assert run(0.3, 0.3).even  # equal loss everywhere moves nothing


def _equal_delays(s: PlaneShares, t: float, steps: int,
                  each: Callable[[int], bool | None]) -> tuple[float, int | None]:
    """``steps`` steps of 0.1 ms, the same RTT on both planes, then ``each(k)``;
    stops at the first step where it returns True (returned with the time)."""
    for k in range(steps):
        t += 1e-4
        for plane in (0, 1):
            s.on_rtt(plane, 1e-3, t)
        if each(k):
            return t, k
    return t, None


def test_a_capped_plane_that_heals_gets_its_share_back() -> None:
    # Capped at the floor, a plane carries a packet now and then; its loss
    # fraction must still be sampled (outcomes add up across update
    # intervals), else the cap outlives the fault.
    s = PlaneShares(2)

    def lossy(_k: int) -> None:
        s.on_outcome(0, lost=10, acked=10)
        s.on_outcome(1, acked=20)

    def healed(k: int) -> bool:  # the healed plane gets 1 packet per ms
        if k % 10 == 0:
            s.on_outcome(0, acked=1)
        s.on_outcome(1, acked=20)
        return s.weight[0] == 1.0

    t, _ = _equal_delays(s, 0.0, 2000, lossy)
    assert s.weight[0] <= 0.1
    _, healed_at = _equal_delays(s, t, 20000, healed)  # within 2 s
    assert healed_at is not None and s.even


def test_a_capped_plane_back_from_a_park_heals_before_it_is_timed_again() -> None:
    # A spine reboot: half of plane 0's paths lose, the plane is capped and
    # parked for silence, then comes back at its cap (the floor). At that
    # share few SACK echoes time it, so it stays short of LIVE round trips;
    # its acknowledgements must still lift the cap once the loss is over.
    s = PlaneShares(2)

    def lossy(_k: int) -> None:
        s.on_outcome(0, lost=10, acked=10)
        s.on_outcome(1, acked=20)

    t, _ = _equal_delays(s, 0.0, 2000, lossy)
    assert s.weight[0] <= 0.1
    s.reset(0)  # parked, then back: still capped, and not timed any more
    assert s.weight[0] <= 0.1 and s.samples[0] == 0
    healed_at = None
    for k in range(2000):  # 200 ms: plane 1 timed, plane 0 only acknowledged
        t += 1e-4
        s.on_rtt(1, 1e-3, t)
        s.on_outcome(0, acked=1)
        s.on_outcome(1, acked=20)
        if s.weight[0] == 1.0:
            healed_at = k
            break
    assert s.samples[0] == 0
    assert healed_at is not None and healed_at * 1e-4 <= 0.05, healed_at
    # losses of a plane not timed yet still do not count
    s.on_outcome(0, lost=20)
    assert s.lost[0] == 0


def test_a_loss_acknowledged_after_all_is_taken_back() -> None:
    # A copy declared lost and then acknowledged (reordered behind a more
    # queued plane, or trimmed: congestion, not a lossy plane) does not count.
    s = PlaneShares(2)

    def late(_k: int) -> None:
        s.on_outcome(0, lost=6, acked=14)
        for _ in range(6):
            s.on_late(0)
        s.on_outcome(1, acked=20)

    _equal_delays(s, 0.0, 2000, late)
    assert s.even and s.lf[0] == 0.0


def test_outcomes_before_a_plane_is_timed_do_not_count() -> None:
    # Before its first round trips the sender's loss detection does not know
    # a slow plane's RTT: what it declares lost there is only slow.
    s = PlaneShares(2)
    s.on_outcome(1, lost=20)
    assert s.lost == [0, 0]


def test_a_gray_plane_is_capped_then_healed_in_virtual_time() -> None:
    r = scenario_gray_heal()
    assert r["ok"] and not r["failed"] and r["rtos"] == 0
    share = r["plane0_share"]
    assert 0.22 <= share["before"] <= 0.28, share  # 4 planes, even
    assert share["gray"] < 0.1, share  # it lost half of what it carried
    assert share["after"] >= 0.22, share  # and has its even share back (was 0.14)
    assert r["healed_after"] is not None and r["healed_after"] <= 0.3, r["healed_after"]


def _two_links(shares: PlaneShares, rates: tuple[float, float], window: int,
               seconds: float = 2.0, seed: int = 1) -> list[float]:
    """Two tail-drop links behind one window-limited sender that sprays per
    packet by ``shares``; round trips with up to 0.5 ms of host jitter. The
    pair's delivered share of its capacity per 10 ms bin, after 0.2 s."""
    rnd = random.Random(seed)
    size, base, dt = 1400, 0.18e-3, 1e-4
    free = [0.0, 0.0]
    acks: list[tuple[float, int, float]] = []
    inflight, t = 0, 0.0
    bins: dict[int, int] = {}
    while t < seconds:
        t += dt
        while acks and acks[0][0] <= t:
            at, p, sent = heapq.heappop(acks)
            inflight -= size
            shares.on_rtt(p, at - sent, at)
            shares.on_outcome(p, acked=1)
        while inflight + size <= window:
            p = shares.choose([True, True])
            assert p is not None
            free[p] = max(free[p], t) + size / rates[p]
            bins[int(free[p] / 0.01)] = bins.get(int(free[p] / 0.01), 0) + size
            heapq.heappush(acks, (free[p] + base + rnd.random() * 0.5e-3, p, t))
            inflight += size
    cap = sum(rates) * 0.01
    return [v / cap for k, v in sorted(bins.items()) if 0.2 <= k * 0.01 < seconds - 0.05]


def test_equal_links_knocked_off_even_do_not_swap_the_queue() -> None:
    # Two equal tail-drop links and a window of ~2 ms of queue: an uneven
    # split puts the whole queue on the plane sprayed more and the other link
    # idles. Shares moved only by their horizon's average (an integral that
    # lags by 50 ms) swapped the larger share every ~150 ms for good once
    # knocked off even (each link at 0.8-1.0 by turns, 0.88 of the pair at
    # worst, on the real tail-drop testbed too); the present delay's
    # proportional part settles them.
    s = PlaneShares(2)
    s.weight, s.dw, s.even = [1.0, 0.6], [1.0, 0.6], False
    bins = _two_links(s, (12.5e6, 12.5e6), 55_000)
    assert min(bins) >= 0.95, sorted(bins)[:5]
    # A half-rate plane still gets its share: the pair stays filled.
    half = _two_links(PlaneShares(2), (12.5e6, 6.25e6), 55_000)
    assert sum(half) / len(half) >= 0.95 and min(half) >= 0.85, sorted(half)[:5]
