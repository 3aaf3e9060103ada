"""The rows of the claims matrix; each runs every stack in one claims run.

A row function takes a ``Ctx`` and returns a JSON-able dict: ``per_stack``
figures, ``series`` (bins / step times kept for the plots) and a one-line
``headline``. Every run's transfers are recorded in ``ctx.transfers`` with
``ok`` (byte-exact, nothing failed) or the reason it failed.

Here the fault rows (invisibility, failover, loss, asymmetric, compound) and
the registry; the rows under load are in tools/claims/rows_load.py, the
tail-drop row in tools/claims/taildrop.py, what they all run on in
tools/claims/runs.py (whose names are re-exported here).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from typing import Any

from tools.claims import fabric as cf
from tools.claims import metrics as m
from tools.claims.rows_load import INCAST_CONTROLS, fairness, gaps, incast
from tools.claims.runs import (
    STACKS,
    Ctx,
    _bins,
    _fault_time,
    _fmt,
    _ms,
    _record,
    _rtos,
    _sender_state,
    _srtt_ms,
    _steps,
    _wait_routable,
    collective,
    eff,
    pair_plane,
    plane_cap_bps,
    plane_events,
    srtt_at,
    stream,
)
from tools.claims.taildrop import taildrop


# -- rows --------------------------------------------------------------------------------------
def invisibility(ctx: Ctx) -> dict[str, Any]:
    """All-to-all step times fault-free and under a fault timeline."""
    group = [0, 1, 2, 3] if ctx.fab.n_hosts >= 4 else list(range(ctx.fab.n_hosts))
    # Not scaled with the rate as stream messages are: the ring's per-phase
    # messages (S/4) would be 4 KiB at 2 x 12 Mbit/s and per-message costs
    # saturate the hosts (53% of 100 ms intervals in a run that tried it).
    size = ctx.q(64 << 10, 128 << 10)
    dur = ctx.q(2.5, 9.0)
    timeline = ctx.q(
        [(0.4, "plane 1 down"), (1.0, "plane 1 up"), (1.3, "spine s0 plane 0 reboot 300ms"),
         (1.8, "link h2:p1 flap 100ms for 0.4s")],
        [(1.0, "plane 1 down"), (2.5, "plane 1 up"), (3.5, "spine s0 plane 0 reboot 500ms"),
         (4.8, "link h1:p0 gray up 50%"), (5.8, "link h1:p0 heal"),
         (6.5, "link h2:p1 flap 200ms for 1s")])
    patterns = ctx.q(["alltoall"], ["alltoall", "ring"])
    per: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for stack in ctx.stacks:
        for pat in patterns:
            out: dict[str, Any] = {}
            for label, faults in (("fault_free", None), ("faulted", timeline)):
                ctx.say(f"  invisibility/{stack}/{pat}/{label}: {len(group)} hosts, "
                        f"{size >> 10} KiB per peer per step, {dur:g} s")
                res = collective(ctx, stack, pat, group, size, dur, faults,
                                 grace=ctx.q(4.0, 10.0))
                ok = _record(ctx, "invisibility", stack, f"{pat}/{label}", res)
                st = _steps(res)
                out[label] = {**m.summary(st), "complete": ok, "rtos": _rtos(stack, res)}
                series[f"{stack}/{pat}/{label}"] = st
            ff, fl = out["fault_free"], out["faulted"]
            ratio = None
            if ff["p100"] and fl["p100"] and fl["complete"]:
                ratio = fl["p100"] / ff["p100"]
            out["ratio_p100"] = ratio
            if stack == "braid" and pat == "alltoall" and not ctx.quick:
                out["floor"] = _floor(ctx, group, size, dur)
                series[f"{stack}/{pat}/floor"] = out["floor"].pop("steps")
                fp = out["floor"]["p100"]
                out["ratio_floor_p100"] = fl["p100"] / fp \
                    if fp and fl["p100"] and fl["complete"] and out["floor"]["complete"] else None
            per[f"{stack}/{pat}" if pat != "alltoall" else stack] = out
            ctx.say(f"  invisibility/{stack}/{pat}: p100 {_ms(ff['p100'])} -> "
                    f"{_ms(fl['p100'])} ms, ratio {_fmt(ratio)}")
    return {"group": group, "size": size, "duration": dur,
            "timeline": [f"at {t:g} {f}" for t, f in timeline], "per_stack": per,
            "series": series}


#: The floor run's first steps, while each connection finds the dead plane
#: (before go it carried no traffic to show it dead), are not its floor.
FLOOR_SKIP_STEPS = 3


def _floor(ctx: Ctx, group: list[int], size: int, dur: float) -> dict[str, Any]:
    """Braid's all-to-all with plane 1 down for the whole run (from just
    before go): what a plane fewer costs by itself, the reference for the
    faulted run's p100 on a fabric where losing a plane halves (on 2 planes)
    every host's capacity. Its first ``FLOOR_SKIP_STEPS`` steps are left out."""
    ctx.say(f"  invisibility/braid/alltoall/floor: plane 1 down throughout, "
            f"{len(group)} hosts, {size >> 10} KiB per peer per step, {dur:g} s")
    res = collective(ctx, "braid", "alltoall", group, size, dur, [(-0.2, "plane 1 down")],
                     grace=ctx.q(4.0, 10.0))
    ok = _record(ctx, "invisibility", "braid", "alltoall/floor", res)
    st = _steps(res)[FLOOR_SKIP_STEPS:]
    return {**m.summary(st), "complete": ok, "rtos": _rtos("braid", res),
            "skipped_steps": FLOOR_SKIP_STEPS, "steps": st}


def failover(ctx: Ctx) -> dict[str, Any]:
    """One flow over 2 planes; plane 0 silently blackholed mid-transfer
    (``faulted``), and h0's plane-0 link unplugged (``link_down``: carrier
    loss the host sees, its sends there then fail with ENETUNREACH)."""
    dur, t_fault = ctx.q((1.6, 0.6), (3.0, 1.0))
    first = 20  # bins: skip the first 200 ms (connection start, slow start)
    end = int(dur / m.BIN_S)
    per: dict[str, Any] = {}
    series: dict[str, Any] = {}
    runs = (("fault_free", None, ""), ("faulted", [(t_fault, "plane 0 down")], "plane 0 down"),
            ("link_down", [(t_fault, "link h0:p0 unplug")], "unplug"))
    for stack in ctx.stacks:
        out: dict[str, Any] = {}
        ff_cap = None
        for label, faults, words in runs:
            ctx.say(f"  failover/{stack}/{label}: h0 -> h3, {dur:g} s"
                    + (f", {faults[0][1]} at {t_fault:g} s" if faults else ""))
            res = stream(ctx, stack, [(0, 3, 0.0, dur, 0)], dur, faults)
            if label == "link_down":
                _wait_routable(ctx, 0, 3, 0)
            ok = _record(ctx, "failover", stack, label, res)
            bins = _bins(res, 3)
            w = m.windows(bins[first:end])
            median_w = statistics.median(w) if w else 0.0
            med_bps = median_w * 8 / (m.BIN_S * m.WINDOW_BINS)
            if faults is None:
                ff_cap = med_bps
                cap = med_bps
            else:
                surviving = plane_cap_bps(stack, cf.PLANES - 1 if stack != "tcp" else 1)
                cap = min(ff_cap or surviving, surviving)
            fo = m.failover(bins, int(t_fault / m.BIN_S), end, cap, first_bin=first)
            out[label] = {**fo, "capacity_mbps": cap / 1e6, "complete": ok,
                          "rtos": _rtos(stack, res)}
            if faults and stack == "braid":
                out[label]["planes"] = plane_events(res, _fault_time(res, words, t_fault))
            series[f"{stack}/{label}"] = bins[:end]
        per[stack] = out
        ctx.say(f"  failover/{stack}: settle {_fmt(out['faulted']['settle_ms'])} ms, longest gap "
                f"{out['faulted']['longest_gap_ms']:.0f} ms (fault-free "
                f"{out['fault_free']['longest_gap_ms']:.0f} ms, "
                f"{out['fault_free']['empty_bins']} empty bins); link down: settle "
                f"{_fmt(out['link_down']['settle_ms'])} ms, longest gap "
                f"{out['link_down']['longest_gap_ms']:.0f} ms")
    return {"duration": dur, "fault_at": t_fault, "fault": "plane 0 down (element blackhole)",
            "link_down": "link h0:p0 unplug (h0 loses carrier on plane 0; it ignores routes "
                         "over a link without carrier)",
            "per_stack": per, "series": series}


def loss(ctx: Ctx) -> dict[str, Any]:
    """Random loss on every path of the sender: goodput / capacity."""
    dur = ctx.q(1.2, 3.0)
    rates = ctx.q([0.01], [0.0, 0.001, 0.01, 0.05])
    first, end = 30, int(dur / m.BIN_S)
    per: dict[str, Any] = {}
    for stack in ctx.stacks:
        out: dict[str, Any] = {}
        for r in rates:
            faults = [(0.0, f"link h0:p{p} loss {r * 100:g}% up") for p in range(cf.PLANES)] \
                if r else None
            ctx.say(f"  loss/{stack}: {r * 100:g}% on every path, {dur:g} s")
            res = stream(ctx, stack, [(0, 3, 0.0, dur, None)], dur, faults)
            ok = _record(ctx, "loss", stack, f"{r * 100:g}%", res)
            bins = _bins(res, 3)
            gp = sum(bins[first:end]) * 8 / ((end - first) * m.BIN_S)
            cap = plane_cap_bps(stack, cf.PLANES if stack != "tcp" else 1)
            out[f"{r * 100:g}%"] = {"goodput_mbps": gp / 1e6, "capacity_mbps": cap / 1e6,
                                    "ratio": gp / cap, "complete": ok,
                                    "rtos": _rtos(stack, res)}
            if stack == "braid":
                out[f"{r * 100:g}%"]["sender"] = _sender_state(res)
        per[stack] = out
        ctx.say("  loss/" + stack + ": " + ", ".join(
            f"{k} {v['ratio']:.2f}" for k, v in out.items()))
    return {"duration": dur, "where": "h0's host links on every plane, data direction",
            "per_stack": per}


def asymmetric(ctx: Ctx) -> dict[str, Any]:
    """Plane 1 at half rate; plane 1 with extra latency: goodput / sum of capacities."""
    dur = ctx.q(1.2, 3.0)
    first, end = 30, int(dur / m.BIN_S)
    cases = {
        "half_rate": ([(0.0, f"plane 1 rate {cf.RATE_MBIT // 2}mbit")], cf.PLANES - 0.5),
        "latency": ([(0.0, "link h0:p1 delay 2ms"), (0.0, "link h3:p1 delay 2ms")],
                    float(cf.PLANES)),
    }
    if ctx.quick or ctx.fab.element != "userspace":
        # CI: one case is enough to show the row works; the eBPF ports have no
        # propagation delay (run with --element userspace for this case).
        del cases["latency"]
    per: dict[str, Any] = {}
    for stack in ctx.stacks:
        out: dict[str, Any] = {}
        for case, (faults, planes_cap) in cases.items():
            ctx.say(f"  asymmetric/{stack}/{case}: {dur:g} s")
            res = stream(ctx, stack, [(0, 3, 0.0, dur, 1)], dur, faults)
            ok = _record(ctx, "asymmetric", stack, case, res)
            bins = _bins(res, 3)
            gp = sum(bins[first:end]) * 8 / ((end - first) * m.BIN_S)
            cap = plane_cap_bps(stack, planes_cap)
            out[case] = {"goodput_mbps": gp / 1e6, "capacity_mbps": cap / 1e6,
                         "ratio": gp / cap, "complete": ok, "srtt_ms": _srtt_ms(res)}
            if stack == "braid":
                out[case]["sender"] = _sender_state(res)
        per[stack] = out
        ctx.say("  asymmetric/" + stack + ": " + ", ".join(
            f"{k} {v['ratio']:.2f}" for k, v in out.items()))
    return {"duration": dur, "cases": {
        "half_rate": f"every plane-1 link at half rate; capacity = {cf.PLANES - 0.5:g} planes",
        "latency": "h0's and h3's plane-1 links +2 ms each way (RTT +8 ms on plane 1)"},
        "note": "tcp's single connection rides plane 1 (the degraded one)", "per_stack": per}


#: The compound row's CE variant: this fraction of h0's data on the surviving
#: plane gets CE at random (the eBPF port's ``mark`` fault).
CE_MARK = 0.2


def _compound_run(ctx: Ctx, stack: str, label: str, faults: list[tuple[float, str]],
                  dur: float, t_fault: float) -> tuple[dict[str, Any], list[int]]:
    end = int(dur / m.BIN_S)
    res = stream(ctx, stack, [(0, 3, 0.0, dur, 1)], dur, faults)
    ok = _record(ctx, "compound", stack, label, res)
    bins = _bins(res, 3)
    fb = int(t_fault / m.BIN_S)
    longest, empty = m.gaps(bins, fb, end)
    after = sum(bins[fb:end]) * 8 / (max(1, end - fb) * m.BIN_S)
    # The stall at millisecond resolution: the longest pause between message
    # arrivals from the fault on, less the stream's usual spacing after it
    # (a message every ~6 ms at the survivor's rate: stream_msg).
    tf = _fault_time(res, "plane 0 down", t_fault)[0]
    arr = sorted(res.get(3, {}).get("arrivals", {}).get("0", []))
    lp = m.longest_pause(arr, tf, dur)
    later = [b - a for a, b in itertools.pairwise(x for x in arr if tf <= x <= dur)]
    spacing = statistics.median(later) if later else None
    stall = None if lp is None or spacing is None else max(0.0, lp[0] - spacing)
    out: dict[str, Any] = {
        "longest_gap_after_fault_ms": longest * 10, "empty_bins_after": empty,
        "longest_pause_ms": None if lp is None else round(lp[0] * 1000, 2),
        "pause_began_after_fault_ms": None if lp is None else round((lp[1] - tf) * 1000, 2),
        "arrival_spacing_ms": None if spacing is None else round(spacing * 1000, 2),
        "stall_ms": None if stall is None else round(stall * 1000, 2),
        "goodput_after_mbps": after / 1e6, "complete": ok, "rtos": _rtos(stack, res),
        "srtt_ms": _srtt_ms(res),
        "parked_planes": sorted({p for r in res.values() for c in r.get("conns", [])
                                 for p in (c.get("parked_planes") or [])})
        if stack == "braid" else None}
    if stack == "braid":
        pe = plane_events(res, _fault_time(res, "plane 0 down", t_fault))
        # The limit is in the srtt when the stall began (as the park's is in
        # the one when the plane went silent), not the run's last one.
        at = srtt_at(res, lp[1]) if lp is not None else None
        srtt = at if at is not None else out["srtt_ms"]
        limit = 10 * srtt + (pe["probe_interval_ms"] or 0.0) if srtt else None
        out.update({"planes": pe, "stall_limit_ms": limit, "stall_srtt_ms": srtt,
                    "sender": _sender_state(res)})
        ctx.say(f"  compound/braid/{label}: plane 0 parked {_fmt(pe['parked_after_ms'])} ms "
                f"after the fault ({_fmt(pe['parked_after_srtt'])} srtt of the moment it went "
                f"silent, {_fmt(pe['parked_after_srtt_at_park'])} of the park's; "
                f"{pe['parked_cause']}); stall limit 10 srtt + probe interval = "
                f"{_fmt(limit)} ms")
        rec = (out["sender"] or {}).get("recovered") or []
        if rec and all(isinstance(n, int) for n in rec):
            ctx.say(f"  compound/braid/{label}: resent packets acked < 2 / 5 / 10 / 20 / 50 "
                    f"ms after their first send, and slower: {' / '.join(map(str, rec))}")
    ctx.say(f"  compound/{stack}/{label}: longest gap {longest * 10} ms (10 ms bins), stall "
            f"{_fmt(out['stall_ms'])} ms (longest pause {_fmt(out['longest_pause_ms'])} ms "
            f"less the usual spacing {_fmt(out['arrival_spacing_ms'])} ms), after-fault "
            f"goodput {after / 1e6:.1f} Mbit/s")
    return out, bins[:end]


def compound(ctx: Ctx) -> dict[str, Any]:
    """Plane 0 dies while plane 1 (the survivor) loses 30% of the data one way;
    on eBPF ports also a variant where the survivor CE-marks ``CE_MARK`` of it
    instead (``per_stack[stack]["ce"]``)."""
    dur, t_fault = ctx.q((1.6, 0.5), (3.0, 1.0))
    faults = [(t_fault, "plane 0 down"), (t_fault, "link h0:p1 gray up 30%")]
    ce_faults = [(t_fault, "plane 0 down"), (t_fault, f"link h0:p1 mark {CE_MARK * 100:g}% up")]
    with_ce = ctx.fab.tb.element_kind("h0:p1") == "ebpf"
    per: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for stack in ctx.stacks:
        ctx.say(f"  compound/{stack}: plane 0 down + 30% loss h0->p1 at {t_fault:g} s")
        per[stack], series[stack] = _compound_run(ctx, stack, "compound", faults, dur, t_fault)
        if with_ce:
            ctx.say(f"  compound/{stack}/ce: plane 0 down + {CE_MARK * 100:g}% CE marks "
                    f"h0->p1 at {t_fault:g} s")
            per[stack]["ce"], series[f"{stack}/ce"] = _compound_run(
                ctx, stack, "ce", ce_faults, dur, t_fault)
    return {"duration": dur, "fault_at": t_fault, "faults": [f for _, f in faults],
            "ce_faults": [f for _, f in ce_faults] if with_ce else None,
            "note": "tcp's connection rides plane 1 (the survivor)"
            + ("" if with_ce else "; no CE variant: only the eBPF ports mark at random"),
            "per_stack": per, "series": series}


#: Rows of the matrix, in the default order. ``gaps`` is a diagnosis, not a
#: claim: run it on its own with ``--rows gaps --daemon-qlog``.
ROWS: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "invisibility": invisibility,
    "failover": failover,
    "loss": loss,
    "asymmetric": asymmetric,
    "compound": compound,
    "incast": incast,
    "fairness": fairness,
    "taildrop": taildrop,
    "gaps": gaps,
}
DEFAULT_ROWS = [r for r in ROWS if r != "gaps"]
#: Rows that bring up a testbed of their own and never use the claims fabric.
OWN_FABRIC = ("taildrop",)
#: Rows left out of ``--quick`` unless named with --rows: the taildrop row's
#: six runs and its own testbed add ~20 s to a 2-4 minute CI run.
NOT_QUICK = ("taildrop",)


def default_rows(quick: bool) -> list[str]:
    """The rows a run without --rows measures."""
    return [r for r in DEFAULT_ROWS if not (quick and r in NOT_QUICK)]

#: Names of tools/claims/runs.py and the other row modules that the report,
#: the bench and the tests import from here.
__all__ = ["CE_MARK", "DEFAULT_ROWS", "INCAST_CONTROLS", "NOT_QUICK", "OWN_FABRIC", "ROWS",
           "STACKS", "Ctx", "collective", "default_rows", "eff", "pair_plane", "plane_cap_bps",
           "plane_events", "stream"]
