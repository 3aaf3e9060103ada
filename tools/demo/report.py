"""Analysis, text report and PNG of ``braid demo`` (from the sampled stats)."""

from __future__ import annotations

import itertools
import re
import statistics
from pathlib import Path
from typing import Any

BIN = 0.25  # goodput timeline bin, seconds
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
    while k * BIN < end and k < 10_000:
        a, b = k * BIN, min((k + 1) * BIN, end)
        if b - a > 1e-3:
            timeline.append({"t": round(a, 3),
                             "mbps": round((_at(series, b) - _at(series, a)) * 8 / (b - a)
                                           / 1e6, 2)})
        k += 1
    # longest delivery gap (sample resolution)
    gap, gap_at = 0.0, None
    last_t, last_b = 0.0, -1
    for t, b in series:
        if b <= 0 or t > end + 1e-9:
            continue
        if last_b >= 0 and b > last_b:
            if t - last_t > gap:
                gap, gap_at = t - last_t, last_t
            last_t, last_b = t, b
        elif last_b < 0:
            last_t, last_b = t, b
    # longest stall: consecutive goodput bins under 10% of the overall goodput
    # (catches a crawl that never quite stops, which the delivery gap misses)
    overall = _rate(series, first, end) or 0.0
    stall, stall_at, run_start = 0.0, None, None
    for x in [*timeline[1:], {"t": end, "mbps": float("inf")}]:
        if x["mbps"] < 0.1 * overall:
            run_start = x["t"] if run_start is None else run_start
        elif run_start is not None:
            if x["t"] - run_start > stall:
                stall, stall_at = x["t"] - run_start, run_start
            run_start = None
    # fault windows
    fault_times = [f["t"] for f in fired]
    f_first = min(fault_times) if fault_times else None
    f_last = max(fault_times) if fault_times else None
    phases = {
        "before_fault": _rate(series, first, f_first if f_first is not None else end),
        "during_faults": _rate(series, f_first, min(f_last, end))
        if f_first is not None and f_last is not None else None,
        "after_faults": _rate(series, f_last, end) if f_last is not None else None,
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
    snd = send or {}
    return {
        "sender": sender, "receiver": receiver,
        "transfer": {
            "bytes": size, "received_bytes": (recv or {}).get("bytes"),
            "verified": bool(recv and recv.get("verified") and recv.get("bytes") == size),
            "send_seconds": snd.get("seconds"), "goodput_Mbps": (
                round(snd["goodput_Gbps"] * 1000, 1) if snd.get("goodput_Gbps") else None),
            "first_byte_at": round(first, 3), "last_byte_at": round(end, 3),
        },
        "counters": {
            "packets": snd.get("packets"), "retransmissions": snd.get("retransmissions"),
            "nacks": snd.get("nacks"), "trims_seen_by_sender": snd.get("trims"),
            "rtos": snd.get("rtos"),
            "trims_received": (last.get("receiver", {}).get("trimmed_received_fabric", 0) or 0)
            + (last.get("receiver", {}).get("trimmed_received_last_hop", 0) or 0),
            "duplicates_received": last.get("receiver", {}).get("duplicates_received"),
            "fabric": fabric,
        },
        "plane_share_sender": snd.get("plane_share"),
        "plane_share_fabric": {str(q): round(v / tot, 4) for q, v in el_total.items()},
        "goodput_Mbps": phases,
        "after_faults_bins": {
            "min_Mbps": min(after) if after else None, "median_Mbps": after_median,
            "below_half_median": sum(1 for x in after if after_median and x < after_median / 2),
            "bins": len(after)},
        "longest_delivery_gap_s": round(gap, 3),
        "longest_gap_starts_at": round(gap_at, 3) if gap_at is not None else None,
        "gap_resolution_s": 0.125,
        "longest_stall_s": round(stall, 3),
        "longest_stall_starts_at": round(stall_at, 3) if stall_at is not None else None,
        "timeline_planned": events, "faults_fired": fired,
        "plane_down_windows": down_windows,
        "goodput_timeline": timeline,
        "duration_s": round(duration, 3),
    }


def print_report(rep: dict[str, Any]) -> None:
    tr, c, g = rep["transfer"], rep["counters"], rep["goodput_Mbps"]
    ok = "OK, byte-exact (BLAKE2b per chunk)" if tr["verified"] else "NOT VERIFIED"
    print("\n=== braid demo report ===")
    print(f"transfer {rep['sender']} -> {rep['receiver']}: {tr['bytes'] / 2**20:.0f} MiB in "
          f"{tr['send_seconds']} s, {tr['goodput_Mbps']} Mbit/s  [{ok}]")
    print("faults fired: " + ("; ".join(f"{f['t']:.2f}s {f['event']}"
                                        for f in rep["faults_fired"]) or "none"))
    print("goodput (Mbit/s): before fault {} | during faults {} | after faults {} | "
          "overall {}".format(*(g[k] if g[k] is not None else "-" for k in (
              "before_fault", "during_faults", "after_faults", "overall"))))
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
    print(f"longest delivery gap: {rep['longest_delivery_gap_s'] * 1000:.0f} ms"
          + (f" (from t={rep['longest_gap_starts_at']:.2f}s)"
             if rep["longest_gap_starts_at"] is not None else "")
          + f" (resolution {rep['gap_resolution_s'] * 1000:.0f} ms)")
    if rep["longest_stall_s"]:
        print(f"longest stall (goodput < 10% of overall): {rep['longest_stall_s']:.2f} s "
              f"from t={rep['longest_stall_starts_at']:.2f}s")
    tl = rep["goodput_timeline"]
    print("goodput timeline (Mbit/s per 250 ms):")
    for i in range(0, len(tl), 8):
        print("  " + "  ".join(f"{x['t']:5.2f}s {x['mbps']:5.1f}" for x in tl[i:i + 8]))


def write_plot(rep: dict[str, Any], rows: list[dict[str, Any]], t0: float, path: Path
               ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    tl = rep["goodput_timeline"]
    ax1.step([x["t"] for x in tl] + ([tl[-1]["t"] + BIN] if tl else []),
             [x["mbps"] for x in tl] + ([tl[-1]["mbps"]] if tl else []), where="post",
             color="black", label="goodput (250 ms bins)")
    ax1.set_ylabel("goodput (Mbit/s)")
    ax1.set_title(f"braid demo: {rep['transfer']['bytes'] / 2**20:.0f} MiB "
                  f"{rep['sender']} -> {rep['receiver']}, 4 planes leaf-spine")
    prev = None
    rates: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if "sender_planes" not in r:
            continue
        if prev is not None:
            dt = r["mono"] - prev["mono"]
            for p, v in r["sender_planes"].items():
                pv = prev["sender_planes"].get(p, {}).get("sent", 0)
                rates.setdefault(p, []).append((r["mono"] - t0, (v["sent"] - pv) / dt))
        prev = r
    for p, pts in sorted(rates.items()):
        ax2.plot([a for a, _ in pts], [b for _, b in pts], label=f"plane {p}")
    ax2.set_ylabel("sender packets/s per plane")
    ax2.set_xlabel("seconds since transfer start")
    ymax = max((x["mbps"] for x in tl), default=1.0)
    for f in rep["faults_fired"]:
        for ax in (ax1, ax2):
            ax.axvline(f["t"], color="red", alpha=0.4, linestyle="--", linewidth=0.8)
    # one numbered tag per planned event (a flap fires many steps), legend below
    planned = rep["timeline_planned"]
    for i, e in enumerate(planned, 1):
        ax1.text(e["at"], ymax * (1.04 + 0.09 * ((i - 1) % 3)), str(i), fontsize=8,
                 color="red", ha="center", va="bottom", fontweight="bold")
    if planned:
        fig.text(0.01, 0.005, "faults: " + "   ".join(
            f"{i}: {e['at']:g}s {e['fault']}" for i, e in enumerate(planned, 1)),
            fontsize=7, color="red", wrap=True, va="bottom")
    ax1.set_ylim(0, ymax * 1.35 + 1)
    ax1.legend(loc="lower left")
    ax2.legend(loc="upper right", fontsize=8)
    ax2.set_xlim(left=0)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
