"""Analysis, text report and PNG of ``braid demo`` (from the sampled stats)."""

from __future__ import annotations

import itertools
import re
import statistics
from pathlib import Path
from typing import Any

BIN = 0.25  # goodput timeline bin, seconds
#: after the last fault fires, this long still counts as "during faults" (recovery)
RECOVERY = 1.0
PHASES = ("slow_start", "before_faults", "during_faults", "after_faults")
#: the element stats files are rewritten every 0.5 s: skip this much at the
#: start of a plane-down window before calling its counters "while down".
STATS_LAG = 0.6


def _series(rows: list[dict[str, Any]], t0: float) -> list[tuple[float, int]]:
    return [(r["mono"] - t0, int(r["receiver"]["bytes_received"] or 0))
            for r in rows if "receiver" in r]


def _at(series: list[tuple[float, int]], t: float) -> float:
    """Cumulative bytes at time t, linearly interpolated."""
    if not series or t <= series[0][0]:
        return float(series[0][1]) if series else 0.0
    for (ta, ba), (tb, bb) in itertools.pairwise(series):
        if ta <= t <= tb:
            return ba + (bb - ba) * ((t - ta) / (tb - ta) if tb > ta else 1.0)
    return float(series[-1][1])


def _rate(series: list[tuple[float, int]], a: float, b: float) -> float | None:
    if b - a < 0.2:
        return None
    return (_at(series, b) - _at(series, a)) * 8 / (b - a) / 1e6


def _counter_at(rows: list[dict[str, Any]], t0: float, t: float, fn: Any) -> int:
    """Value of a counter in the last row at or before t (rows without it: 0)."""
    best = 0
    for r in rows:
        if r["mono"] - t0 > t:
            break
        v = fn(r)
        if v is not None:
            best = v
    return best


def _plane_port_sent(plane: int, receiver: str) -> Any:
    def f(r: dict[str, Any]) -> int | None:
        p = r.get("ports", {}).get(f"{receiver}:p{plane}/down")
        return None if p is None else int(p["sent"])
    return f


def _sender_plane_sent(plane: int) -> Any:
    def f(r: dict[str, Any]) -> int | None:
        p = r.get("sender_planes", {}).get(str(plane))
        return None if p is None else int(p["sent"])
    return f


def analyse(*, rows: list[dict[str, Any]], t0: float, size: int, fired: list[dict[str, Any]],
            events: list[dict[str, Any]], send: dict[str, Any] | None,
            recv: dict[str, Any] | None, duration: float, planes: list[int], sender: str,
            receiver: str) -> dict[str, Any]:
    rows = [r for r in rows if "mono" in r]
    series = _series(rows, t0)
    # transfer span as the receiver saw it: first byte .. last byte
    first = next((t for t, b in series if b > 0), 0.0)
    final = series[-1][1] if series else 0
    done = next((t for t, b in series if b >= final), duration)
    end = min(done, duration) if series else duration
    # goodput timeline
    timeline = []
    k = 0
    while series and k * BIN < end and k < 10_000:
        a, b = k * BIN, min((k + 1) * BIN, end)
        if b - a > 1e-3:
            timeline.append({"t": round(a, 3),
                             "mbps": round((_at(series, b) - _at(series, a)) * 8 / (b - a)
                                           / 1e6, 2)})
        k += 1
    overall = _rate(series, first, end) or 0.0
    # Slow start ends at the first bin that reaches half the overall goodput:
    # stalls and gaps before it are the window opening, not a fault's doing.
    startup_end = next((x["t"] + BIN for x in timeline if x["t"] >= first
                        and x["mbps"] >= 0.5 * overall), first)
    fault_times = [f["t"] for f in fired]
    f_first = min(fault_times) if fault_times else None
    f_last = max(fault_times) if fault_times else None

    def phase_of(t: float) -> str:
        if t < startup_end:
            return "slow_start"
        if f_first is None or t < f_first:
            return "before_faults"
        if f_last is not None and t <= f_last + RECOVERY:
            return "during_faults"
        return "after_faults"

    # delivery gaps (sample resolution), the longest per phase by where it starts
    gaps: dict[str, tuple[float, float | None]] = {ph: (0.0, None) for ph in PHASES}
    last_t, last_b = first, -1
    for t, b in series:
        if b <= 0 or t > end + 1e-9:
            continue
        if last_b >= 0 and b > last_b:
            ph = phase_of(last_t)
            if t - last_t > gaps[ph][0]:
                gaps[ph] = (t - last_t, last_t)
            last_t, last_b = t, b
        elif last_b < 0:
            last_t, last_b = t, b
    # stalls: consecutive goodput bins under 10% of the overall goodput (catches
    # a crawl that never quite stops, which the delivery gap misses)
    stalls: dict[str, tuple[float, float | None]] = {ph: (0.0, None) for ph in PHASES}
    run_start = None
    for x in [*timeline, {"t": end, "mbps": float("inf")}]:
        if x["t"] < first:
            continue
        if x["mbps"] < 0.1 * overall:
            run_start = x["t"] if run_start is None else run_start
        elif run_start is not None:
            ph = phase_of(run_start)
            if x["t"] - run_start > stalls[ph][0]:
                stalls[ph] = (x["t"] - run_start, run_start)
            run_start = None
    # the headline numbers leave slow start out (reported apart)
    gap, gap_at = max((gaps[ph] for ph in PHASES[1:]), key=lambda g: g[0])
    stall, stall_at = max((stalls[ph] for ph in PHASES[1:]), key=lambda g: g[0])
    before_from = max(startup_end, first)
    phases = {
        "before_fault": _rate(series, before_from, f_first if f_first is not None else end)
        if (f_first if f_first is not None else end) - before_from >= 0.5 else None,
        "during_faults": _rate(series, f_first, min(f_last + RECOVERY, end))
        if f_first is not None and f_last is not None else None,
        "after_faults": _rate(series, f_last + RECOVERY, end) if f_last is not None else None,
        "overall": _rate(series, first, end),
    }
    phases = {k: (round(v, 1) if v is not None else None) for k, v in phases.items()}
    # planes that were killed: traffic while down
    down_windows = []
    for f in fired:
        m = re.match(r"plane (\d+) down", f["event"])
        if not m:
            continue
        p = int(m.group(1))
        up = next((g["t"] for g in fired if g["t"] > f["t"]
                   and re.match(rf"plane {p} (up|heal)", g["event"])), None)
        a, b = f["t"] + STATS_LAG, min(up if up is not None else end, end)
        row: dict[str, Any] = {"plane": p, "down_at": f["t"], "up_at": up,
                               "measured_from": round(a, 3), "measured_to": round(b, 3)}
        if b > a:
            el = {q: _counter_at(rows, t0, b, _plane_port_sent(q, receiver))
                  - _counter_at(rows, t0, a, _plane_port_sent(q, receiver)) for q in planes}
            sp = {q: _counter_at(rows, t0, b, _sender_plane_sent(q))
                  - _counter_at(rows, t0, a, _sender_plane_sent(q)) for q in planes}
            tot_el = sum(el.values()) or 1
            row.update({
                "element_packets_to_receiver": {str(q): v for q, v in el.items()},
                "sender_packets": {str(q): v for q, v in sp.items()},
                "killed_plane_share": round(el[p] / tot_el, 4),
            })
        down_windows.append(row)
    # per-plane share over the transfer, two views
    el_total = {q: _counter_at(rows, t0, 1e9, _plane_port_sent(q, receiver))
                - _counter_at(rows, t0, -1e9, _plane_port_sent(q, receiver)) for q in planes}
    tot = sum(el_total.values()) or 1
    fabric = {"sent": 0, "trimmed": 0, "marked": 0, "dropped": 0, "blackholed": 0,
              "rx_overflow": 0}
    if rows and "ports" in rows[-1] and "ports" in rows[0]:
        for name, st in rows[-1]["ports"].items():
            st0 = rows[0]["ports"].get(name, {})
            for key in fabric:
                fabric[key] += st.get(key, 0) - st0.get(key, 0)
    # full 250 ms bins after the last fault: the worst one against their median
    after = [x["mbps"] for x in timeline if f_last is not None and x["t"] >= f_last
             and x["t"] + BIN <= end][1:]
    after_median = statistics.median(after) if after else None
    last: dict[str, Any] = next((r for r in reversed(rows) if "receiver" in r), {})
    # When the transfer failed, 'braid send' printed no summary: take what the
    # sampled daemon stats know (the sender's counters, the receiver's bytes).
    snd = send or {}
    ls: dict[str, Any] = next((r["sender"] for r in reversed(rows) if r.get("sender")), {})
    received = (recv or {}).get("bytes")
    if received is None:
        received = int(final)
    return {
        "sender": sender, "receiver": receiver,
        "transfer": {
            "bytes": size, "received_bytes": received,
            "received_from": "braid recv" if recv else "receiver daemon stats",
            "verified": bool(recv and recv.get("verified") and recv.get("bytes") == size),
            "send_seconds": snd.get("seconds", round(end, 3)), "goodput_Mbps": (
                round(snd["goodput_Gbps"] * 1000, 1) if snd.get("goodput_Gbps")
                else phases["overall"] or 0.0),
            "first_byte_at": round(first, 3), "last_byte_at": round(end, 3),
        },
        "counters": {
            "packets": snd.get("packets", ls.get("packets_sent") or 0),
            "retransmissions": snd.get("retransmissions", ls.get("retransmissions") or 0),
            "nacks": snd.get("nacks", ls.get("nacks_received") or 0),
            "trims_seen_by_sender": snd.get("trims", (ls.get("trims_fabric") or 0)
                                            + (ls.get("trims_last_hop") or 0)),
            "rtos": snd.get("rtos", ls.get("rtos") or 0),
            "trims_received": (last.get("receiver", {}).get("trimmed_received_fabric", 0) or 0)
            + (last.get("receiver", {}).get("trimmed_received_last_hop", 0) or 0),
            "duplicates_received": last.get("receiver", {}).get("duplicates_received") or 0,
            "fabric": fabric,
        },
        "plane_share_sender": snd.get("plane_share") or _sender_share(rows, planes),
        "plane_share_fabric": {str(q): round(v / tot, 4) for q, v in el_total.items()},
        "goodput_Mbps": phases,
        "after_faults_bins": {
            "min_Mbps": round(min(after), 1) if after else None,
            "median_Mbps": round(after_median, 1) if after_median is not None else None,
            "below_half_median": sum(1 for x in after if after_median and x < after_median / 2),
            "bins": len(after)},
        "longest_delivery_gap_s": round(gap, 3),
        "longest_gap_starts_at": round(gap_at, 3) if gap_at is not None else None,
        "gap_resolution_s": 0.125,
        "longest_stall_s": round(stall, 3),
        "longest_stall_starts_at": round(stall_at, 3) if stall_at is not None else None,
        # by phase: slow start (until the first 250 ms bin at half the overall
        # goodput), before the first fault, during faults (+1 s), after them
        "slow_start_ends_at": round(startup_end, 3),
        "gaps_by_phase": {ph: {"seconds": round(g, 3),
                               "starts_at": None if at is None else round(at, 3)}
                          for ph, (g, at) in gaps.items()},
        "stalls_by_phase": {ph: {"seconds": round(st, 3),
                                 "starts_at": None if at is None else round(at, 3)}
                            for ph, (st, at) in stalls.items()},
        "timeline_planned": events, "faults_fired": fired,
        "plane_down_windows": down_windows,
        "goodput_timeline": timeline,
        "duration_s": round(duration, 3),
    }


def _sender_share(rows: list[dict[str, Any]], planes: list[int]) -> dict[str, float]:
    last: dict[str, Any] = next((r["sender_planes"] for r in reversed(rows)
                                 if r.get("sender_planes")), {})
    sent = {str(q): int((last.get(str(q)) or {}).get("sent") or 0) for q in planes}
    tot = sum(sent.values())
    return {q: round(v / tot, 4) for q, v in sent.items()} if tot else {}


def _num(v: Any, fmt: str = "", missing: str = "-") -> str:
    """A figure for the text report: never 'None'."""
    return missing if v is None else format(v, fmt)


def _phase_text(by_phase: dict[str, dict[str, Any]], scale: float, unit: str) -> str:
    names = {"slow_start": "slow start", "before_faults": "before faults",
             "during_faults": "during faults", "after_faults": "after faults"}
    parts = []
    for ph in ("during_faults", "after_faults", "before_faults", "slow_start"):
        x = by_phase.get(ph) or {}
        if x.get("seconds"):
            parts.append(f"{names[ph]} {x['seconds'] * scale:.0f} {unit} "
                         f"(t={x['starts_at']:.2f}s)")
        else:
            parts.append(f"{names[ph]} none")
    return "; ".join(parts)


def print_report(rep: dict[str, Any]) -> None:
    tr, c, g = rep["transfer"], rep["counters"], rep["goodput_Mbps"]
    ok = "OK, byte-exact (BLAKE2b per chunk)" if tr["verified"] else "NOT VERIFIED"
    print("\n=== braid demo report ===")
    if rep.get("failure"):
        print(f"FAILED: {rep['failure']}")
        got = tr.get("received_bytes") or 0
        print(f"transfer {rep['sender']} -> {rep['receiver']}: {got / 2**20:.1f} of "
              f"{tr['bytes'] / 2**20:.0f} MiB delivered in {_num(tr['send_seconds'], '.1f')} s "
              f"(per {tr.get('received_from', 'the receiver')}), "
              f"{_num(tr['goodput_Mbps'], '.1f')} Mbit/s while it ran  [{ok}]")
    else:
        print(f"transfer {rep['sender']} -> {rep['receiver']}: {tr['bytes'] / 2**20:.0f} MiB "
              f"in {_num(tr['send_seconds'])} s, {_num(tr['goodput_Mbps'])} Mbit/s  [{ok}]")
    if rep.get("fidelity"):
        from tools.claims.fidelity import line

        print(line(rep["fidelity"]))
    print("faults fired: " + ("; ".join(f"{f['t']:.2f}s {f['event']}"
                                        for f in rep["faults_fired"]) or "none"))
    print("goodput (Mbit/s): slow start until {:.2f}s | before faults {} | during faults {} | "
          "after faults {} | overall {}".format(rep.get("slow_start_ends_at", 0.0), *(
              _num(g[k]) for k in ("before_fault", "during_faults", "after_faults",
                                   "overall"))))
    print(f"packets {c['packets']}  retransmissions {c['retransmissions']}  NACKs {c['nacks']}"
          f"  trims received {c['trims_received']}  RTOs {c['rtos']}  "
          f"fabric: trimmed {c['fabric']['trimmed']} CE-marked {c['fabric']['marked']} "
          f"dropped {c['fabric']['dropped']} blackholed {c['fabric']['blackholed']}")
    ps = rep.get("plane_share_sender") or {}
    print("per-plane share (sender packets): " + " ".join(
        f"p{p}={v * 100:.1f}%" for p, v in sorted(ps.items())))
    print("per-plane share (fabric, into receiver): " + " ".join(
        f"p{p}={v * 100:.1f}%" for p, v in sorted(rep["plane_share_fabric"].items())))
    for w in rep["plane_down_windows"]:
        if "element_packets_to_receiver" in w:
            print(f"plane {w['plane']} down {w['measured_from']:.2f}-{w['measured_to']:.2f}s: "
                  f"it carried {w['element_packets_to_receiver'][str(w['plane'])]} packets "
                  f"({w['killed_plane_share'] * 100:.1f}%), others "
                  + " ".join(f"p{q}={v}" for q, v in w["element_packets_to_receiver"].items()
                             if q != str(w["plane"])))
    ab = rep.get("after_faults_bins") or {}
    if ab.get("bins"):
        print(f"after the faults, per 250 ms: min {ab['min_Mbps']} Mbit/s, median "
              f"{ab['median_Mbps']}, {ab['below_half_median']} of {ab['bins']} bins below "
              "half the median")
    print(f"longest delivery gap (resolution {rep['gap_resolution_s'] * 1000:.0f} ms): "
          + _phase_text(rep.get("gaps_by_phase") or {}, 1000, "ms"))
    print("longest stall (goodput < 10% of overall): "
          + _phase_text(rep.get("stalls_by_phase") or {}, 1000, "ms"))
    tl = rep["goodput_timeline"]
    if not tl:
        print("goodput timeline: no samples" + (f" (sampler: {rep['sampler_error']})"
                                                if rep.get("sampler_error") else ""))
        return
    print("goodput timeline (Mbit/s per 250 ms):")
    for i in range(0, len(tl), 8):
        print("  " + "  ".join(f"{x['t']:5.2f}s {x['mbps']:5.1f}" for x in tl[i:i + 8]))


def write_plot(rep: dict[str, Any], rows: list[dict[str, Any]], t0: float, path: Path
               ) -> None:
    """Fault lanes on top, goodput, then one small panel per plane (same scale):
    nothing overplots, the legend is the panels' own labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tools.common.plotting import draw_fault_lanes, fault_lanes, fault_spans, plane_colour

    tl = rep["goodput_timeline"]
    end = max([rep.get("duration_s") or 0.0] + [x["t"] + BIN for x in tl])
    planned = rep["timeline_planned"]
    fired = rep["faults_fired"]
    # Planned times count from the timeline's start (the first delivered byte);
    # the plot's axis is seconds since the send: shift by when the first fault fired.
    shift = (min(f["t"] for f in fired) - min(e["at"] for e in planned)
             if planned and fired else 0.0)
    lanes = fault_lanes([(e["at"] + shift, e["fault"]) for e in planned], end)
    rates: dict[str, list[tuple[float, float]]] = {}
    prev = None
    for r in rows:
        if "sender_planes" not in r:
            continue
        if prev is not None and r["mono"] > prev["mono"]:
            dt = r["mono"] - prev["mono"]
            for p, v in r["sender_planes"].items():
                pv = prev["sender_planes"].get(p, {}).get("sent", 0)
                rates.setdefault(p, []).append((r["mono"] - t0, (v["sent"] - pv) / dt))
        prev = r
    planes = sorted(rates, key=int)
    heights = [0.35 * max(len(lanes), 1) + 0.3, 2.2] + [0.75] * len(planes)
    fig, axes = plt.subplots(len(heights), 1, figsize=(11, sum(heights) + 1.2), sharex=True,
                             gridspec_kw={"height_ratios": heights, "hspace": 0.12})
    lane_ax, gp_ax, plane_axes = axes[0], axes[1], list(axes[2:])
    tr = rep["transfer"]
    lane_ax.set_title(f"braid demo: {tr['bytes'] / 2**20:.0f} MiB {rep['sender']} -> "
                      f"{rep['receiver']}, {len(planes) or '?'} planes"
                      + ("" if rep.get("ok", True) else "  (FAILED)"), fontsize=11,
                      loc="center")
    if lanes:
        draw_fault_lanes(lane_ax, lanes, xmax=end)
        lane_ax.set_title("faults (one row per target)", fontsize=8, loc="left")
    else:
        lane_ax.set_axis_off()
    for a, b in fault_spans(lanes):
        for ax in (gp_ax, *plane_axes):
            ax.axvspan(a, b, color="red", alpha=0.06, linewidth=0)
    if tl:
        gp_ax.step([x["t"] for x in tl] + [tl[-1]["t"] + BIN],
                   [x["mbps"] for x in tl] + [tl[-1]["mbps"]], where="post", color="black",
                   linewidth=1.2)
    gp_ax.set_ylabel("goodput\nMbit/s\n(250 ms)", fontsize=8)
    gp_ax.set_ylim(bottom=0)
    ymax = max((v for pts in rates.values() for _, v in pts), default=1.0) * 1.1
    for ax, p in zip(plane_axes, planes, strict=True):
        pts = rates[p]
        ax.fill_between([a for a, _ in pts], [b for _, b in pts], step=None,
                        color=plane_colour(int(p)), alpha=0.35, linewidth=0)
        ax.plot([a for a, _ in pts], [b for _, b in pts], color=plane_colour(int(p)),
                linewidth=1)
        ax.set_ylim(0, ymax)
        ax.set_ylabel(f"plane {p}", fontsize=8, rotation=0, ha="right", va="center")
        ax.tick_params(axis="y", labelsize=7)
        for target, bars in lanes:  # the plane's own outages, hatched in its panel
            if target == f"plane {p}":
                for bar in bars:
                    ax.axvspan(bar.start, bar.end, facecolor="none", edgecolor="red",
                               hatch="///", alpha=0.5, linewidth=0)
    axes[-1].set_xlabel("seconds since transfer start")
    axes[-1].set_xlim(0, end)
    if plane_axes:
        top, bottom = plane_axes[0].get_position(), plane_axes[-1].get_position()
        fig.text(0.01, (top.y1 + bottom.y0) / 2, "packets/s sent per plane (same scale)",
                 rotation=90, va="center", ha="left", fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
