"""The claims matrix's rows under load: incast (with its victim and
controls), fairness (flows started one after another) and the gaps
diagnosis; each runs every stack in one claims run (tools/claims/runs.py)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from tools.claims import cpu as claims_cpu
from tools.claims import fabric as cf
from tools.claims import metrics as m
from tools.claims.runs import (
    Ctx,
    _bins,
    _braid_stat,
    _fmt,
    _min_rtt_ms,
    _Ping,
    _record,
    _rtos,
    _srtt_ms,
    _stack_name,
    _steps,
    _stream_specs,
    pair_plane,
    plane_cap_bps,
    stream,
    stream_msg,
)


def _ratio(x: float | None, ideal: float) -> float | None:
    return None if x is None else x / ideal


def _port_counts(ctx: Ctx) -> dict[str, dict[str, int]]:
    try:
        st = ctx.fab.tb.port_stats()
    except Exception:  # counters are a diagnosis, never a reason to fail the row
        return {}
    return {p: {k: int(v.get(k, 0) or 0) for k in ("trimmed", "dropped", "marked")}
            for p, v in st.items()}


def _port_delta(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]
                ) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for p, v in b.items():
        d = {k: n - a.get(p, {}).get(k, 0) for k, n in v.items()}
        if any(d.values()):
            out[p] = d
    return out


def _daemon_cpu(ctx: Ctx) -> dict[int, float]:
    """CPU seconds (user + system) each Braid daemon has used so far."""
    return claims_cpu.processes_seconds({h: p.pid for h, p in ctx.fab.daemons.items()})


def _to_ms(x: float | None) -> float | None:
    return None if x is None else x * 1000


def _incast_specs(stack: str, group: list[int], size: int, dur: float
                  ) -> dict[int, dict[str, Any]]:
    specs: dict[int, dict[str, Any]] = {}
    for h in group:
        peers = [j for j in group if j != h] if h == group[0] else [group[0]]
        specs[h] = {"pattern": "incast", "group": group, "size": size,
                    "stop_after": dur, "grace": 10.0,
                    "connect": ([[j, 0] for j in peers] if stack.startswith("braid")
                                else [[j, pair_plane(h, j)] for j in peers if j > h]),
                    "accept": [] if stack.startswith("braid")
                    else [j for j in peers if j < h]}
    return specs


def _victim_specs(ctx: Ctx, stack: str, victim: tuple[int, int], dur: float
                  ) -> dict[int, dict[str, Any]]:
    """The victim stream's two ends, on ``stack`` whatever the run's stack
    (a worker's spec may name its own)."""
    specs = _stream_specs(ctx, [(victim[0], victim[1], 0.0, dur, None)], dur)
    return {h: {**spec, "stack": _stack_name(stack, ctx.inproc)} for h, spec in specs.items()}


def _incast_run(ctx: Ctx, stack: str, label: str, senders: list[int], size: int, dur: float,
                victim: tuple[int, int], victim_stack: str | None,
                victim_alone: int | None) -> dict[str, Any]:
    """One incast run (``stack``'s senders -> h0), with the victim stream on
    ``victim_stack`` alongside (None: no victim). ``victim_alone``: the
    victim's bytes in the counted bins when it ran alone."""
    specs = _incast_specs(stack, [0, *senders], size, dur)
    if victim_stack is not None:
        specs.update(_victim_specs(ctx, victim_stack, victim, dur))
    if stack == "braid-taildrop":
        links = [lk.name for lk in ctx.fab.tb.topo.links]
        ctx.fab.set_links(links, "both", {"trim": None})
    try:
        ports0, cpu0, t0 = _port_counts(ctx), _daemon_cpu(ctx), time.monotonic()
        res = ctx.fab.run(_stack_name(stack, ctx.inproc), specs, None, timeout=dur + 70)
        ports = _port_delta(ports0, _port_counts(ctx))
        wall = time.monotonic() - t0
        cpu = {h: round((c - cpu0.get(h, 0.0)) / wall, 3)
               for h, c in _daemon_cpu(ctx).items()}
    finally:
        if stack == "braid-taildrop":
            ctx.fab.heal_all()
    ok = _record(ctx, "incast", stack, label, res)
    st = _steps(res, [0])
    ideal = len(senders) * size * 8 / plane_cap_bps(stack, cf.PLANES)
    first, end = 30, int(dur / m.BIN_S)
    v1 = sum(_bins(res, victim[1])[first:end]) if victim_stack is not None else None
    ph = m.burst_phases(res.get(0, {}).get("done", []),
                        {h: res[h].get("starts", []) for h in senders if h in res},
                        next((r["go"] for r in res.values() if r.get("go")), 0.0))
    braid = stack.startswith("braid")
    vbraid = victim_stack is not None and victim_stack.startswith("braid")
    return {"bursts": len(st), "completion_p50_over_ideal":
            (m.percentile(st, 50) or 0) / ideal if st else None,
            "completion_p100_over_ideal": (m.percentile(st, 100) or 0) / ideal
            if st else None, "ideal_ms": ideal * 1000,
            "rtos": _rtos(stack, res, senders),
            "victim_stack": victim_stack,
            "victim_ratio": v1 / victim_alone if v1 is not None and victim_alone else None,
            "complete": ok,
            # The step time split at the first sender's start (see
            # metrics.burst_phases): the data phase is what the
            # transport controls; the release is the application's
            # turnaround, the same for every stack.
            "data_p50_over_ideal": _ratio(m.percentile(ph["data"], 50), ideal),
            "data_p100_over_ideal": _ratio(m.percentile(ph["data"], 100), ideal),
            "release_p50_ms": _to_ms(m.percentile(ph["release"], 50)),
            "release_p100_ms": _to_ms(m.percentile(ph["release"], 100)),
            "start_spread_p100_ms": _to_ms(m.percentile(ph["spread"], 100)),
            "bursts_ms": [round(x * 1000, 2) for x in st],
            "data_ms": [round(x * 1000, 2) for x in ph["data"]],
            "release_ms": [round(x * 1000, 2) for x in ph["release"]],
            "senders": {k: _braid_stat(res, k, senders) for k in
                        ("packets_sent", "nacks_received", "retransmissions",
                         "lost_by_rto", "probes_sent", "spurious_losses", "cc_md",
                         "cc_quick_adapt", "cc_qa_trim_quiet", "cc_qa_undone",
                         "cc_delay_is_mark", "ev_late_ack", "ev_ecn_ack", "ev_loss")}
            if braid else None,
            "victim": {k: _braid_stat(res, k, [victim[0]]) for k in
                       ("packets_sent", "nacks_received", "retransmissions",
                        "lost_by_rto", "rtos", "spurious_losses", "cc_md",
                        "cc_quick_adapt", "cc_qa_undone", "cc_delay_is_mark", "cc_fair_inc",
                        "cc_proportional_inc", "ev_late_ack", "ev_ecn_ack", "ev_loss")}
            if vbraid else None,
            # Switch-port counters over the run (trims, drops, ECN marks)
            # by port, e.g. 'h0:p1/down' (the last hop into h0).
            "ports": ports,
            # Braid daemons' CPU (user + system seconds per wall second of
            # the run, set-up included): 1.0 is a whole core, the machine has 2.
            "daemon_cpu": {f"h{h}": c for h, c in cpu.items() if c >= 0.01}
            if braid or vbraid else None}


def _victim_alone(ctx: Ctx, stack: str, victim: tuple[int, int], dur: float) -> int:
    ctx.say(f"  incast/{stack}: victim alone, h{victim[0]} -> h{victim[1]}")
    alone = stream(ctx, stack, [(victim[0], victim[1], 0.0, dur, None)], dur)
    _record(ctx, "incast", stack, "victim_alone", alone)
    return sum(_bins(alone, victim[1])[30:int(dur / m.BIN_S)])


def _say_incast(ctx: Ctx, label: str, r: dict[str, Any]) -> None:
    ctx.say(f"  incast/{label}: completion p50/p100 over ideal "
            f"{_fmt(r['completion_p50_over_ideal'])}/"
            f"{_fmt(r['completion_p100_over_ideal'])} (data phase "
            f"{_fmt(r['data_p50_over_ideal'])}/"
            f"{_fmt(r['data_p100_over_ideal'])}, release p50/p100 "
            f"{_fmt(r['release_p50_ms'])}/{_fmt(r['release_p100_ms'])} ms), "
            f"RTOs {r['rtos']}, victim {_fmt(r['victim_ratio'])}")


#: The incast row's control runs (Braid's senders with trimming), keyed as
#: in the JSON's ``controls``: the victim's stack (None: no victim).
INCAST_CONTROLS = {"victim over tcp": "tcp", "no victim": None}


def incast(ctx: Ctx) -> dict[str, Any]:
    """N senders -> h0 in synchronised bursts, with a victim flow into h1
    (same leaf); Braid with trimming and with tail-drop.

    Two control runs of Braid's incast tell the host from the network (the
    Braid victim shares two cores with the senders' daemons): the victim over
    kernel TCP (what Braid's incast does to a neighbour's packets, at little
    CPU), and no victim at all (the incast without the victim's two busy
    daemons). The TCP victim is also a hot spine: pinned to one plane and
    hashed onto one spine, it fills leaf 1's uplink to that spine (about
    125% of it with the senders' share) with a standing queue a quarter of
    the cross-leaf senders' packets wait in (docs/decisions/0011-late-copies-skip-a-hot-ev.md)."""
    n = ctx.fab.n_hosts
    senders = list(range(2, n - 1))
    victim = (n - 1, 1)
    # A burst lasts the same ideal ~92 ms at any --planes / --rate (256 KiB per
    # sender on the default 2 x 100 Mbit/s), so a run at a lower rate has
    # as many bursts behind its p100 as the default one.
    scale = cf.PLANES * cf.RATE_MBIT / 200
    size = max(16 << 10, round(ctx.q(128 << 10, 256 << 10) * scale / 4096) * 4096)
    dur = ctx.q(1.5, 4.0)
    stacks = [s for st in ctx.stacks for s in ((st, "braid-taildrop") if st == "braid" else (st,))]
    per: dict[str, Any] = {}
    controls: dict[str, Any] = {}
    alone: dict[str, int] = {}
    recv_cap = plane_cap_bps("tcp", cf.PLANES)
    for stack in stacks:
        alone[stack] = _victim_alone(ctx, stack, victim, dur)
        ctx.say(f"  incast/{stack}: {len(senders)} -> 1, {size >> 10} KiB each per burst, "
                f"victim flow alongside")
        per[stack] = _incast_run(ctx, stack, "incast", senders, size, dur, victim, stack,
                                 alone[stack])
        _say_incast(ctx, stack, per[stack])
        if stack != "braid":
            continue
        for name, vstack in INCAST_CONTROLS.items():
            if vstack is not None and vstack not in alone:
                alone[vstack] = _victim_alone(ctx, vstack, victim, dur)
            ctx.say(f"  incast/braid, control: {name}")
            controls[f"braid, {name}"] = _incast_run(
                ctx, stack, f"control: {name}", senders, size, dur, victim, vstack,
                None if vstack is None else alone[vstack])
            _say_incast(ctx, f"braid, {name}", controls[f"braid, {name}"])
    return {"senders": len(senders), "size": size, "duration": dur,
            "receiver_capacity_mbps": recv_cap / 1e6, "per_stack": per,
            "controls": controls}


def fairness(ctx: Ctx) -> dict[str, Any]:
    """N flows into h0 starting one after another: Jain's index, newcomer time."""
    ns = [k for k in ctx.q([2], [2, 4, 8]) if k + 1 <= ctx.fab.n_hosts]
    stagger, hold = ctx.q((0.5, 0.8), (1.0, 1.5))
    per: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for stack in ctx.stacks:
        out: dict[str, Any] = {}
        for n in ns:
            dur = stagger * (n - 1) + hold
            flows = [(k, 0, stagger * (k - 1), dur, None) for k in range(1, n + 1)]
            ctx.say(f"  fairness/{stack}: {n} flows into h0, one every {stagger:g} s")
            res = stream(ctx, stack, flows, dur)
            ok = _record(ctx, "fairness", stack, f"n={n}", res)
            per_flow = [_bins(res, 0, k) for k in range(1, n + 1)]
            end = int(dur / m.BIN_S)
            conv = int((stagger * (n - 1) + 0.5) / m.BIN_S)
            jw = m.jain_windows(per_flow, conv, end)
            total = m.add_bins(per_flow)
            arrivals = [res.get(0, {}).get("arrivals", {}).get(str(k), [])
                        for k in range(1, n + 1)]
            newcomer, share = [], []
            for k in range(2, n + 1):
                sb = int(stagger * (k - 1) / m.BIN_S)
                nxt = int(stagger * k / m.BIN_S) if k < n else end
                agg = sum(total[sb:nxt]) / max(1, nxt - sb) * m.WINDOW_BINS
                t = m.time_to_share(per_flow[k - 1], sb, 0.8 * agg / k, nxt)
                newcomer.append(None if t is None else t * m.BIN_S * 1000)
                ts = m.time_to_share_arrivals(arrivals[k - 1], arrivals[:k],
                                              stagger * (k - 1), nxt * m.BIN_S)
                share.append(None if ts is None else round(ts * 1000, 1))
            srtt = _srtt_ms(res)
            worst, share_worst = (None if any(x is None for x in xs) or not xs else
                                  max(x for x in xs if x is not None)
                                  for xs in (newcomer, share))
            out[f"n={n}"] = {"jain_min": min(jw) if jw else None,
                             "jain_median": statistics.median(jw) if jw else None,
                             # the same span as one window: the long-run split,
                             # apart from how even each 100 ms is
                             "jain_span": m.jain([sum(f[conv:end]) for f in per_flow]),
                             "newcomer_80pct_ms": newcomer, "newcomer_worst_ms": worst,
                             "srtt_ms": srtt, "newcomer_worst_rtts":
                             worst / srtt if worst is not None and srtt else None,
                             # the same, timed by message arrivals (no 100 ms floor)
                             "newcomer_share_ms": share, "newcomer_share_worst_ms": share_worst,
                             "newcomer_share_worst_rtts": share_worst / srtt
                             if share_worst is not None and srtt else None,
                             "complete": ok}
            series[f"{stack}/n={n}"] = per_flow
        per[stack] = out
        ctx.say("  fairness/" + stack + ": " + ", ".join(
            f"{k} Jain min {_fmt(v['jain_min'])}" for k, v in out.items()))
    return {"stagger": stagger, "hold": hold, "per_stack": per, "series": series}


def gaps(ctx: Ctx) -> dict[str, Any]:
    """Fault-free Braid stream: what empties its 10 ms bins (needs --daemon-qlog
    for the causes; without it only the application-level gaps)."""
    from tools.claims import gaps as g
    from tools.claims.worker import HEADER

    dur = ctx.q(1.5, 4.0)
    first, end = 20, int(dur / m.BIN_S)
    out: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for flows, label in (([(0, 3, 0.0, dur, None)], "h0->h3"),):
        ctx.say(f"  gaps/braid: fault-free stream {label}, {dur:g} s, kernel ping alongside")
        pinger = _Ping(ctx, "h0", ctx.fab.tb.address("h3", 0), dur)
        res = stream(ctx, "braid", flows, dur)
        ping_ms = pinger.result()
        ok = _record(ctx, "gaps", "braid", label, res)
        bins = _bins(res, 3)
        longest, empty = m.gaps(bins, first, end)
        r: dict[str, Any] = {"empty_bins": empty, "longest_gap_ms": longest * 10,
                             "kernel_ping_ms": ping_ms, "srtt_ms": _srtt_ms(res),
                             "min_rtt_ms": _min_rtt_ms(res),
                             "bins": end - first, "complete": ok,
                             "goodput_mbps": sum(bins[first:end]) * 8 / ((end - first) * m.BIN_S)
                             / 1e6}
        qlog = ctx.fab.work / "h0.qlog"
        arrivals = res.get(3, {}).get("arrivals", {}).get("0", [])
        rqlog = ctx.fab.work / "h3.qlog"
        if qlog.exists() and qlog.stat().st_size > 0:
            a = g.classify(arrivals, res[3]["go"], g.load_qlog(qlog),
                           g.load_qlog(rqlog) if rqlog.exists() else None,
                           stream_msg() + HEADER.size, first * m.BIN_S, dur)
            r["analysis"] = a
            ctx.say(f"  gaps/braid: {empty} empty bins, {a['pauses']} pauses >= 20 ms: "
                    f"{a['causes']}; hand-off ms {a['handoff_ms']}, inbox wait ms "
                    f"{a['inbox_wait_ms']}")
        else:
            r["analysis"] = None
            ctx.say(f"  gaps/braid: {empty} empty bins (run with --daemon-qlog for causes)")
        ports = ctx.fab.tb.port_stats()
        r["ports"] = {k: {x: v.get(x) for x in ("max_depth", "dropped", "trimmed", "marked",
                                                  "rx_overflow")}
                      for k, v in ports.items()
                      if k.split("/")[0] in ("h0:p0", "h0:p1", "h3:p0", "h3:p1")}
        out[label] = r
        series[label] = bins[:end]
    return {"duration": dur, "per_stack": {"braid": out}, "series": series}
