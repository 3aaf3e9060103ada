"""Plain tail-drop links on a busy host, in virtual time
(testbed/sim/scenarios_taildrop.py; docs/congestion.md, "Plain tail-drop links").

The links are tbf-like (no trim, no ECN), 100 Mbit/s, 128 KB of queue; the
host's sends and its peer's ACKs wait 0-3 ms for an event loop. The
connection is configured as the testbed's daemons are (plane rate told).
"""

from __future__ import annotations

import pytest

from testbed.sim import scenarios_taildrop as T


def _check_holds_rate(r: dict[str, object]) -> None:
    assert not r["failed"], r
    # Resends: at most 1% of the packets sent.
    assert r["resend_fraction"] <= 0.01, r
    # Once at speed, at least 90% of the 10 ms bins carry >= 90% of the links' rate.
    assert r["bins_at_speed"] >= 0.90, r
    # No repeated deep cuts (the window below half its median at speed).
    assert r["deep_cuts"] <= 1, r


@pytest.mark.parametrize("planes", [1, 2])
def test_taildrop_link_with_host_jitter_holds_its_rate(planes: int) -> None:
    # With the host delay floor (NSCC deviation 11, ``host_floor``).
    r = T.scenario_taildrop_jitter(planes=planes, jitter=3e-3)
    _check_holds_rate(r)
    assert r["first_at_speed"] <= 0.5, r


def test_without_the_host_delay_floor_the_window_cap_idles_the_link() -> None:
    # The daemon's default (``host_floor`` off: it costs the shared-queue
    # scenarios, docs/congestion.md): the window stays capped at BDP +
    # target (50 KB) while every round trip carries up to 6 ms of host
    # delay, and the link is at speed in 0.4% of its 10 ms bins. This is
    # the open part of the finding; the test says so until it is fixed.
    r = T.scenario_taildrop_jitter(planes=1, jitter=3e-3, host_floor=False)
    assert not r["failed"] and r["resend_fraction"] <= 0.01, r
    assert r["bins_at_speed"] < 0.90, r


def test_taildrop_link_without_host_jitter_holds_its_rate() -> None:
    r = T.scenario_taildrop_jitter(planes=1, jitter=0.0)
    _check_holds_rate(r)
    assert r["tail_drops"] == 0, r


def test_overstated_plane_rate_drops_only_its_first_window() -> None:
    # A daemon left at its default plane rate (1.25e9 B/s) on 100 Mbit/s
    # links: its first window (1.25 MB) overflows the 128 KB tbf queue once.
    # Before the measured growth rate (NSCC deviation 10) the proportional
    # increase, headroom x the told line rate, refilled the queue past
    # overflow after every cut: drops all along (1,029 in 3 s, 87 deep cuts).
    r = T.scenario_taildrop_jitter(planes=1, jitter=0.0, plane_rate=1.25e9)
    assert not r["failed"], r
    assert r["tail_drops"] == r["drops_first_100ms"], r
    assert r["bins_at_speed"] >= 0.90 and r["deep_cuts"] <= 1, r


def test_equal_planes_with_unequal_host_delay_share_the_bytes() -> None:
    # Plane 0's socket serviced within 0.5 ms, plane 1's within 3 ms.
    r = T.scenario_taildrop_planes(jitter=(0.5e-3, 3e-3))
    assert not r["failed"], r
    assert min(r["plane_shares"]) >= 0.35, r
    assert r["resend_fraction"] <= 0.01, r
