"""The run-at-a-time sender: each batched call must leave exactly the
state its per-packet counterpart leaves (the simulator's figures rest on it)."""

from __future__ import annotations

import math
import random

import pytest

from congestion import FixedWindow, Nscc, Pacer
from transport.path_health import PathHealth
from transport.paths import EvSet, PathPolicy, RepsPolicy, SprayPolicy
from transport.sender import SentPacket

MTU = 1500


def _per_packet(p: Pacer, now: float, sizes: list[int], size: int) -> int:
    """How many of ``sizes`` the per-packet calls let leave at ``now``."""
    sent = 0
    for n in sizes:
        if p.next_send_time(now=now, size=size) > now:
            break
        p.on_sent(now=now, size=n)
        sent += 1
    return sent


def _quota(p: Pacer, now: float, sizes: list[int], size: int) -> int:
    tokens, need = p.quota(now=now, size=size)
    out = []
    for n in sizes:
        if tokens < need and now + (need - tokens) / p.rate > now:
            break
        out.append(n)
        tokens -= n
    p.on_sent_run(now=now, sizes=out)
    return len(out)


@pytest.mark.parametrize("rate", [1.25e6, 1.25e9, 3.3e9, math.inf])
def test_pacer_quota_decides_as_the_per_packet_calls(rate: float) -> None:
    rng = random.Random(int(rate) if rate != math.inf else 7)
    a, b = Pacer(rate=rate, burst=8 * MTU), Pacer(rate=rate, burst=8 * MTU)
    now = 1.0
    sent = 0
    for _ in range(2000):
        now += rng.choice([0.0, 1e-9, 3e-7, 1.2e-6, 1e-5, 1e-3])
        sizes = [rng.choice([MTU, MTU, MTU, 700, 64]) for _ in range(rng.randint(0, 40))]
        k = _per_packet(a, now, sizes, MTU)
        assert _quota(b, now, sizes, MTU) == k
        assert (a._tokens, a._last) == (b._tokens, b._last)  # bit for bit
        sent += k
    assert sent > 0


def test_controllers_report_their_window_and_pacer() -> None:
    for cc in (Nscc(), FixedWindow(window=10 * MTU, pacing_rate=1e9)):
        window, tokens, need, rate = cc.send_quota(now=0.0, size=MTU)
        assert window == cc.cwnd and tokens >= need > 0 and rate > 0
        cc.on_sent_run(now=0.0, sizes=[MTU] * 3)
        assert cc.send_quota(now=0.0, size=MTU)[1] == tokens - 3 * MTU


@pytest.mark.parametrize(("spray_run", "planes"), [(1, 2), (3, 1), (8, 1)])
@pytest.mark.parametrize("policy", [SprayPolicy, RepsPolicy])
def test_next_run_hands_out_what_next_ev_would(spray_run: int, planes: int,
                                               policy: type[PathPolicy]) -> None:
    # With several planes and runs, a run also stops at its plane's part of
    # what may leave (next test): next_ev, which is not told, differs there.
    one = policy(ev_set=EvSet(planes=planes, evs_per_plane=4, seed=3), spray_run=spray_run)
    runs = policy(ev_set=EvSet(planes=planes, evs_per_plane=4, seed=3), spray_run=spray_run)
    rng = random.Random(spray_run)
    for step in range(300):
        want = rng.randint(1, 12)
        stop = rng.randint(1, want)  # the window or the pacer ends the burst early
        got = []
        while len(got) < stop:
            ev, k = runs.next_run(float(step), want - len(got))
            assert ev is not None and 1 <= k <= want - len(got)
            used = min(k, stop - len(got))
            if used < k:
                runs.unsend_run(ev, k - used)
            got += [ev.index] * used
        expect = [e.index for e in (one.next_ev(float(step)) for _ in range(stop))
                  if e is not None]
        assert got == expect
    assert [e.sent for e in one.evs] == [e.sent for e in runs.evs]


@pytest.mark.parametrize("policy", [SprayPolicy, RepsPolicy])
def test_a_window_released_at_once_goes_over_every_plane(policy: type[PathPolicy]) -> None:
    # Runs of 8 whatever left at once would put a 12-packet window as 8
    # on one plane and 4 on the other; in the 8-to-1 incast at 25 Mbit/s one
    # plane's last hop trimmed while the other's idled.
    paths = policy(ev_set=EvSet(planes=2, evs_per_plane=4, seed=3), spray_run=8)
    for step, room in enumerate([12, 2, 1, 16, 7, 40]):
        per_plane = [0, 0]
        left = room
        while left:
            ev, k = paths.next_run(float(step), left)
            assert ev is not None
            assert k <= min(8, -(-room // 2))  # never above its plane's part
            per_plane[ev.plane] += k
            left -= k
        if policy is SprayPolicy:  # REPS picks by recycled entropy, not by plane
            assert abs(per_plane[0] - per_plane[1]) <= 1 or room > 16, (room, per_plane)
    # One plane left: it takes whole runs again.
    one = policy(ev_set=EvSet(planes=1, evs_per_plane=4, seed=3), spray_run=8)
    assert one.next_run(0.0, 12)[1] == 8


def _acked(health: PathHealth, n: int, now: float) -> list[SentPacket]:
    evs = health.paths.evs
    out = []
    for i in range(n):
        p = SentPacket(i, 1, i * MTU, MTU, n * MTU, i == n - 1)
        p.ev = evs[(i // 3) % len(evs)]  # runs of three on one EV
        p.sent_time = now - 1e-3 + i * 1e-6
        out.append(p)
    return out


def test_unmarked_acks_credited_per_run_leave_per_packet_state() -> None:
    def health() -> PathHealth:
        return PathHealth(SprayPolicy(ev_set=EvSet(planes=2, evs_per_plane=4, seed=1)),
                          planes=2, now=0.0)

    runs, per = health(), health()
    acked_r, acked_p = _acked(runs, 20, 1.0), _acked(per, 20, 1.0)
    for h, acked in ((runs, acked_r), (per, acked_p)):
        h._score[acked[0].ev.value] = 5
    runs.on_acked(acked_r, 1.0, ecn_ev=None, sampled=acked_r[4], rtt=2e-4)
    # The per-packet path: what an ECN echo for a value no EV has takes.
    per.on_acked(acked_p, 1.0, ecn_ev=-1, sampled=acked_p[4], rtt=2e-4)
    assert runs._score == per._score and runs._score[acked_r[0].ev.value] == 2
    assert runs.plane_heard == per.plane_heard
    for a, b in zip(runs.paths.evs, per.paths.evs, strict=True):
        # (An EV's RTT is the sender's path model's, fed where the sample is taken.)
        assert (a.acked, a.last_acked, a.state, a.skip_strikes) == (
            b.acked, b.last_acked, b.state, b.skip_strikes)
    sa, sb = runs.paths.ev_set.snapshot(), per.paths.ev_set.snapshot()
    assert sa == sb
