"""The congestion-control scenarios in the simulated fabric (virtual time).

Each scenario runs the daemon's connection config on a software-host fabric
with a one-message-at-a-time (``serial``) and a pipelined client; the
figures are defined in testbed/sim/scenarios_cc.py and reported by
``braid bench sim`` (docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

import pytest

from testbed import topology
from testbed.sim import scenarios_cc as C


@pytest.mark.parametrize("client", ["serial", "pipelined"])
def test_jitter_3ms_no_loss_is_not_congestion(client: C.Client) -> None:
    # Delay noise is not congestion: no empty 10 ms bin, the pipe kept full.
    r = C.scenario_jitter(client=client)
    assert not r["failed"]
    assert r["empty_bins"] == 0, r
    assert r["quick_adapt"] == 0 and r["md"] == 0, r
    if client == "pipelined":
        assert r["goodput_over_capacity"] >= 0.8, r


@pytest.mark.parametrize("client", ["serial", "pipelined"])
def test_taildrop_bottleneck_keeps_queue_near_target(client: C.Client) -> None:
    # Before (daemon plane rate 1.25e9 B/s), pipelined: 3.6% of packets
    # dropped and a smoothed RTT of 8.8 ms against a 3.2 ms limit.
    r = C.scenario_taildrop(client=client)
    assert not r["failed"]
    assert r["drop_fraction"] <= 0.01, r
    assert r["srtt_mean"] <= r["srtt_limit"], r
    assert r["goodput_over_capacity"] >= (0.95 if client == "pipelined" else 0.5), r


@pytest.mark.parametrize("client", ["serial", "paced"])
def test_application_limited_sender_never_quick_adapts(client: C.Client) -> None:
    # Before (serial): 13 QuickAdapt cuts after tail-loss timeouts, down to
    # one packet. The tail-loss probe now repairs random loss without an RTO,
    # so the serial client also sees three 0.1 s fabric-wide outages: RTOs
    # that ask QuickAdapt while the window is not binding (without the
    # app-limited guard: 3 cuts, cwnd 4,187 B).
    r = C.scenario_app_limited(client=client)
    assert not r["failed"]
    assert r["quick_adapt"] == 0, r
    assert r["cwnd_min"] >= 16 * 1368, r  # never near one packet
    if client == "serial":
        assert r["rtos"] > 0 and r["quick_adapt_app_limited"] > 0  # it was asked
    else:
        assert r["goodput_over_capacity"] >= 0.39, r  # everything offered got through


def test_plane_rate_comes_from_the_topology_bottleneck() -> None:
    topo = topology.load(C.TAILDROP_TOPOLOGY)
    # 1 Gbit/s host uplinks, 100 Mbit/s everywhere else: the slower wins.
    assert topology.plane_bottleneck_rate(topo, 0) == 12.5e6
    assert topology.connection_plane_rate(topo) == 12.5e6
    leafspine = topology.load({
        "hosts": 2, "planes": 2, "fabric": {"kind": "leafspine", "leaves": 2, "spines": 2},
        "link": {"rate": "1gbit", "fabric": {"rate": "100mbit"},
                 "h0:p1": {"rate": "50mbit"}},
    })
    # Plane 0: a leaf's two 100 Mbit/s spine links carry a sprayed flow together.
    assert topology.plane_bottleneck_rate(leafspine, 0) == 25e6
    assert topology.plane_bottleneck_rate(leafspine, 1) == 50e6 / 8
    assert topology.connection_plane_rate(leafspine) == (25e6 + 50e6 / 8) / 2
    unshaped = topology.load({"hosts": 2, "planes": 1})
    assert topology.plane_bottleneck_rate(unshaped, 0) is None
    assert topology.connection_plane_rate(unshaped) is None


def test_demo_daemon_config_carries_the_topology_plane_rate(tmp_path: Path) -> None:
    from tools.demo.run import TOPOLOGY, connection_toml
    from transport.daemon import parse_config

    text = connection_toml(topology.load(TOPOLOGY))
    data = tomllib.loads(
        'name = "h0"\ninsecure = true\nsocket = "h0.sock"\nplanes = ["10.0.0.2"]\n' + text)
    cfg = parse_config(data, "h0.toml", tmp_path)
    assert cfg.connection.plane_rate == 12.5e6  # 100 Mbit/s planes, not the 1.25e9 default


def test_loss_as_mark_deviation_on_a_non_marking_incast() -> None:
    # Braid's deviation from UEC (docs/congestion.md): four pipelined senders
    # into one receiver over 64 KB tail-drop buffers. With delay as the mark
    # after a congestive loss: 1.1% drops; without it: 38%. (Each plane's
    # first DATA asks for an immediate ACK so its base RTT is not read behind
    # the initial windows. The 1% drop target is the single-sender tail-drop
    # bottleneck, `taildrop` above, at 0%.)
    kw: dict[str, Any] = {"client": "pipelined", "senders": 4, "buffer": 64 << 10,
                          "duration": 0.5}
    on = C.scenario_taildrop(**kw)
    off = C.scenario_taildrop(loss_as_mark=False, **kw)
    assert not on["failed"] and not off["failed"]
    assert on["drop_fraction"] <= 0.015, on
    assert off["drop_fraction"] > 10 * on["drop_fraction"], (on, off)
    assert on["srtt_mean"] / on["srtt_limit"] < off["srtt_mean"] / off["srtt_limit"]


@pytest.mark.parametrize(("jitter", "p100_limit"), [(0.0, 1.05), (3e-3, 1.25)])
def test_incast_bursts_of_the_claims_row(jitter: float, p100_limit: float) -> None:
    # The claims bench's incast row in virtual time: 8 x 256 KiB
    # synchronised bursts into one host over two trimming 100 Mbit/s planes,
    # daemon connection config. ``jitter`` is a busy host's event loop (every
    # host's sends late by 0-3 ms): the real row's 1.2 x ideal. A spray run
    # ends with its burst (transport/paths/policy.py): a run of 8 carried over
    # several ACKs would pin a small window to one plane, one last hop idling
    # while the other trims.
    r = C.scenario_incast_bursts(bursts=6, jitter=jitter)
    assert not r["failed"] and r["bursts"] == 6, r
    assert r["rtos"] == 0, r
    assert r["p100"] <= p100_limit, r



@functools.cache
def _quarter_rate_incast() -> dict[str, Any]:
    """The claims incast at --rate 25 on busy hosts (0-3 ms), 12 bursts:
    one deterministic run, asserted on by the two tests below."""
    return C.scenario_incast_bursts(bursts=12, jitter=3e-3, plane_rate=3.125e6, size=64 << 10)


def test_incast_bursts_at_a_quarter_rate_keep_quick_adapt_for_collapses() -> None:
    # The claims incast at --rate 25: the last hop's 32 KB trim
    # threshold is a 10.5 ms queue at 25 Mbit/s, above QuickAdapt's 8 ms
    # (4 x the 2 ms target). On delay alone QuickAdapt cut whichever flow's
    # few ACKs came in late to one packet, and it finished last: 34
    # QuickAdapts in 12 bursts on busy hosts (testbed: 46-94 in 42). With
    # deviation 7 (no QuickAdapt on delay within 32 RTTs of a last-hop trim)
    # 6; the trims size the cuts.
    r = _quarter_rate_incast()
    assert not r["failed"] and r["bursts"] == 12 and r["rtos"] == 0, r
    assert r["quick_adapts"] <= 12, r
    assert r["p100"] <= 1.25, r


def test_incast_bursts_a_late_copy_does_not_starve_its_sender() -> None:
    # The same incast. The fabric drops nothing (the
    # last hops trim), so every loss the senders declare by time is a copy
    # only late behind the busy hosts' 0-3 ms: 29 in 12 bursts, all of them
    # acknowledged after all. Seven of them had QuickAdapt cut a sender (six
    # to 1.5-2 packets), and that sender, growing back by one packet per 12 ms
    # RTT, finished its 64 KiB last (p50 1.105). NSCC deviation 9 gives the
    # window back when every loss behind the cut proves spurious: p50 1.080.
    r = _quarter_rate_incast()
    assert not r["failed"] and r["bursts"] == 12 and r["rtos"] == 0, r
    assert r["drops"] == 0 and r["spurious_losses"] > 0, r
    assert r["quick_adapts"] > 0 and r["qa_undone"] == r["quick_adapts"], r
    assert r["p50"] <= 1.09, r

def test_victim_stream_beside_the_incast_bursts_on_busy_hosts() -> None:
    # The claims incast's victim in virtual time: a pipelined
    # stream from host v into the incast's receiver (same spine ports, same
    # last hop) while 8 senders burst into it; every host's sends 0-3 ms late.
    # Alone, the stream keeps its window (a loss on the busy host is not taken
    # for a tail drop by deviation 1): 0.77 of capacity.
    # Beside the incast it shares the last hop with 8 others: 0.27 of its
    # alone goodput, above a fair share (0.12); 0.8 is not a fair target for
    # a stream sharing the bottleneck (the claims row's victim goes to
    # another host on the leaf).
    r = C.scenario_incast_bursts(bursts=6, jitter=3e-3, victim=True)
    assert not r["failed"] and r["bursts"] == 6 and r["rtos"] == 0, r
    assert r["victim_alone"] >= 0.6 * r["victim_capacity"], r
    assert r["victim_ratio"] >= r["victim_fair"], r


@pytest.mark.parametrize("seed", [21, 24])
def test_busy_host_with_random_loss_keeps_its_stream(seed: int) -> None:
    # The claims incast's victim stream, in virtual time: a pipelined stream
    # on an idle fabric, its host's sends 0-8 ms late (a loaded event loop,
    # the victim's srtt was 8.8 ms during the incast), 0.1% random loss on the
    # planes (not congestion). A loss with that "queueing" behind it must
    # not make delay above target the mark, or every RTT cuts the window
    # (0.04 of capacity against 0.78 without the loss). A loss counts only
    # with more delay than the path carried without loss: no MD, 0.54
    # (seed 24: 0.72; the rest of the gap to 0.78 is the window cap, BDP
    # from the smallest RTT the jitter let through: 1.8 ms here, 3.8 ms in
    # the lossless run).
    fab = C.testbed_fabric(jitter=8e-3, loss=0.001, seed=seed)
    cfg = C.host_config(fab, plane_rate=C.PLANE_RATE, seed=seed)
    r = C.run_client(fab, cfg, client="pipelined", duration=2.0)
    assert not r["failed"], r
    assert r["goodput_over_capacity"] >= 0.5, r
    assert r["md"] == 0, r


def test_busy_compound_heavy_random_loss_stands_delay_as_the_mark_down() -> None:
    # The claims compound row on a busy host (0-3 ms host jitter; plane 0
    # dies and plane 1's last hop loses 30% of the data). The stream has
    # seen no mark or trim before the fault; a random loss in the queue its
    # window builds on the survivor turns delay-as-the-mark on, and the
    # host's delay cuts the window every RTT. The losses go on through those
    # cuts, so the loss classifier finds the path losing at random: delay
    # stands down, its cuts come back, and the losses are not heard as
    # congestion. Before, QuickAdapt then ratcheted the window to one packet
    # (longest pause between messages 166 ms on this seed, against 33 ms with
    # the deviation off); now it holds the deviation-off figure within a
    # few ms. The transfer never fails and never times out either way.
    # A QuickAdapt or two may still come, on or off: the dead plane's packets
    # hold the window until the time rule finds them (decision 0032); which
    # seeds see one moves with any change to the spray (seeds 1-8 at
    # 2026-12-07: on 0-1 QuickAdapts, longest pause 26-53 ms against off's
    # 31-45, the same at the median, 1.4x at worst; 7.6x before on seed 8).
    on = C.scenario_busy_compound()
    off = C.scenario_busy_compound(loss_as_mark=False)
    for r in (on, off):
        assert not r["failed"] and r["rtos"] == 0, r
        assert r["quick_adapt"] <= 2, r
    assert on["mark_revoked_random"] >= 1 and on["random_bytes"] > 0, on
    assert on["max_gap"] <= 1.25 * off["max_gap"], (on, off)
    # Off: no multiplicative cut beyond a few (loss is not a mark there).
    assert off["md"] <= 4 and off["max_window"] > 32 << 10, off
