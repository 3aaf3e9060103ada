"""The claims matrix's ``taildrop`` row: plain tail-drop links, side by side.

Two hosts, two planes, each host link a plain ``tc tbf`` tail-drop queue (no
link element: no trimming, no ECN; examples/two-hosts-taildrop.toml) at the
claims run's per-plane rate, on a testbed of its own brought up for the row
(the claims fabric's leaf-spine has switch ports on every link). One stream
h0 -> h1 per stack, fault-free and with h0's plane-0 link silently dropping
everything from a set time on (``link h0:p0 down``: the switch's end goes
down, h0's interface loses carrier and its kernel keeps routing onto it, so
every frame sent there is dropped without an error; no ICMP either).

The bins here are the bytes each of h1's links received (``linkbins``: the
kernel's counters every 2 ms, frames with headers and resends), judged
against the links' frame rate; resends per packet sent come from Braid's
daemon stats, and from the kernel's counters in h0's namespace for TCP and
MPTCP (``RetransSegs`` + ``MPTCPRetrans`` over ``OutSegs`` + ``RetransSegs``,
deltas over the run).
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from tools.claims import fabric as cf
from tools.claims import metrics as m
from tools.claims.fabric import ClaimsFabric
from tools.claims.linkbins import SamplerProcess, first_after, link_bins
from tools.claims.qdiscbins import FRAME_BYTES, excused, ideal, lateness, resolution
from tools.claims.runs import (
    Ctx,
    _braid_stat,
    _fault_time,
    _record,
    _rtos,
    _sender_state,
    plane_events,
    stream,
)

ROW = "taildrop"
#: The silent fault: the switch's end of h0's plane-0 link goes down.
FAULT = "link h0:p0 down"
#: h1's links (p1 survives the fault) and how often their counters are read.
LINKS = ("p0", "p1")
SAMPLE_S = 0.002
#: Bins skipped before a stack counts as at speed at the earliest (connection
#: start); the "at speed" bin is the first from here at >= RATE_SHARE.
FIRST_BIN = 5
#: The targets (docs/claims.md): resends per packet sent, the share of 10 ms
#: bins at >= RATE_SHARE of the links' rate once at speed, traffic on the
#: surviving link within MOVED_MAX_MS of the fault, and the survivor holding
#: RATE_SHARE of its rate HOLD_FACTOR times sooner than MPTCP.
RESEND_MAX = 0.01
BIN_SHARE_MIN = 0.99
RATE_SHARE = 0.9
MOVED_MAX_MS = 20.0
HOLD_FACTOR = 10.0


def topology(rate_mbit: int, mtu: int) -> dict[str, Any]:
    """The row's testbed: 2 hosts x 2 planes through one switch per plane,
    every link a tbf at ``rate_mbit`` with ~10 ms of buffer (128 KB at 100
    Mbit/s), as examples/two-hosts-taildrop.toml."""
    buffer_kb = max(16, round(rate_mbit * 128 / 100))
    return {"hosts": 2, "planes": 2,
            "description": f"braid bench claims, taildrop row: 2 hosts x 2 planes, "
                           f"{rate_mbit} Mbit/s tail-drop links (tbf)",
            "fabric": {"kind": "switch"},
            "link": {"taildrop": True, "rate": f"{rate_mbit}mbit", "buffer": f"{buffer_kb}KB",
                     "mtu": mtu}}


def _drops(fab: ClaimsFabric) -> dict[str, int]:
    try:
        return {k: v["drops"] for k, v in fab.tb.qdisc_stats().items()}
    except Exception:  # counters are a diagnosis, never a reason to fail the row
        return {}


def _host_drops(fab: ClaimsFabric) -> dict[str, int]:
    """Where else a datagram can be lost on its way: each host's UDP
    counters (``/proc/net/snmp`` in its namespace: ``InErrors``,
    ``RcvbufErrors``, ``SndbufErrors``) and the machine's backlog drops
    (``/proc/net/softnet_stat``, every CPU)."""
    out: dict[str, int] = {}
    try:
        for h in ("h0", "h1"):
            r = fab.tb.exec(h, ["cat", "/proc/net/snmp"], capture_output=True, text=True)
            rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("Udp:")]
            if len(rows) >= 2:
                names, vals = rows[0][1:], rows[1][1:]
                for k in ("InErrors", "RcvbufErrors", "SndbufErrors"):
                    if k in names:
                        out[f"{h}:{k}"] = int(vals[names.index(k)])
        with open("/proc/net/softnet_stat") as f:
            out["softnet_dropped"] = sum(int(ln.split()[1], 16) for ln in f if ln.strip())
    except (OSError, ValueError, IndexError):  # a diagnosis, never a reason to fail the row
        pass
    return out


def _wait_carrier(fab: ClaimsFabric, host: str, ifname: str, timeout: float = 5.0) -> bool:
    """After the fault healed: until ``host``'s ``ifname`` has carrier again
    (the kernel applies carrier changes up to ~1 s late), so the next run does
    not start on a link still dropping everything (bounded)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = fab.tb.exec(host, ["ip", "-o", "link", "show", "dev", ifname],
                        capture_output=True, text=True)
        if r.returncode == 0 and "LOWER_UP" in r.stdout and "NO-CARRIER" not in r.stdout:
            return True
        time.sleep(0.05)
    return False


def resends(stack: str, res: dict[int, dict[str, Any]], sender: int = 0) -> dict[str, Any]:
    """Packets the sender sent and how many of them were resends."""
    if stack.startswith("braid"):
        sent = int(_braid_stat(res, "packets_sent", [sender]))
        again = int(_braid_stat(res, "retransmissions", [sender]))
    else:
        # OutSegs leaves out segments that carry only retransmitted bytes
        # (RFC 1213's tcpOutSegs); MPTCP's reinjections on another subflow
        # are new segments there, in OutSegs, and resends all the same.
        k = res.get(sender, {}).get("kernel") or {}
        sent = int(k.get("OutSegs", 0)) + int(k.get("RetransSegs", 0))
        again = int(k.get("RetransSegs", 0)) + int(k.get("MPTCPRetrans", 0))
    return {"packets_sent": sent, "resends": again,
            "resend_share": again / sent if sent else None}


def bin_figures(total: list[int], target: float, end: int,
                excused: Collection[int] = ()) -> dict[str, Any]:
    """From the first bin at >= ``target`` bytes (at or after ``FIRST_BIN``,
    "at speed") to ``end``: the share of bins at >= ``target`` (of the bins
    not ``excused``: short ones the emulator lost, ``qdiscbins.excused``),
    the worst and the median bin (Mbit/s, every bin) and the longest run of
    empty bins (ms); without reaching speed, the same from ``FIRST_BIN``."""
    at = next((i for i in range(FIRST_BIN, end) if total[i] >= target), None)
    lo = FIRST_BIN if at is None else at
    span = total[lo:end]
    judged = [b for i, b in enumerate(span, lo) if i not in excused]
    longest, _ = m.gaps(total, lo, end)
    return {"at_speed_ms": None if at is None else at * m.BIN_S * 1000,
            "bins": len(span),
            "emulator_short_bins": len(span) - len(judged),
            "bins_at_rate_share": 0.0 if at is None or not judged
            else sum(1 for b in judged if b >= target) / len(judged),
            "worst_bin_mbps": min(span) * 8 / m.BIN_S / 1e6 if span else None,
            "median_bin_mbps": statistics.median(span) * 8 / m.BIN_S / 1e6 if span else None,
            "longest_gap_ms": longest * m.BIN_S * 1000}


def hold_ms(survivor: list[int], t_fault: float, end: int, target: float,
            excused: Collection[int] = ()) -> float | None:
    """Time from the fault (s after go) until every later 10 ms bin to ``end``
    holds >= ``target`` bytes (or is ``excused``: the emulator lost it); None
    if the last bin still does not."""
    i0 = int(t_fault / m.BIN_S) + 1  # the first bin wholly after the fault
    bad = [i for i in range(i0, end) if survivor[i] < target and i not in excused]
    if not bad:
        return max(0.0, (i0 * m.BIN_S - t_fault) * 1000)
    if bad[-1] >= end - 1:
        return None
    return ((bad[-1] + 1) * m.BIN_S - t_fault) * 1000


def hold_sliding_ms(samples: Sequence[Sequence[float]], iface: int, t_fault: float,
                    t_end: float, rate: float, excused: Callable[[float, float], bool]
                    = lambda a, b: False, frame: int = FRAME_BYTES) -> float | None:
    """Time from the fault (``t_fault``, on the samples' clock) until every
    10 ms window starting at a sample from then on, to ``t_end``, carries
    >= ``RATE_SHARE`` of ``rate`` (bytes/s) on interface ``iface`` (or is
    ``excused(start, end)``: the emulator lost it); None if the last window
    still does not.

    Windows slide with the samples (every ~2 ms) instead of standing on the
    10 ms bins: with bins, a stack that never dipped read as holding from the
    first whole bin after the fault, 0-10 ms by where the fault fell in its
    bin, and two such stacks compared by that phase alone. The counters
    count whole frames, so a window's edges may cut one: a window is short
    only if one more ``frame`` would not bring it to the share (at 12 Mbit/s
    a frame is a tenth of a window)."""
    starts: list[int] = []
    j = 0
    bad = -1
    for i, s in enumerate(samples):
        if s[0] < t_fault:
            continue
        if s[0] + m.BIN_S > t_end:
            break
        j = max(j, i + 1)
        while j < len(samples) and samples[j][0] < s[0] + m.BIN_S:
            j += 1
        if j >= len(samples):
            break
        e = samples[j]
        starts.append(i)
        if e[iface + 1] - s[iface + 1] + frame < RATE_SHARE * rate * (e[0] - s[0]) \
                and not excused(s[0], e[0]):
            bad = len(starts) - 1
    if not starts or bad == len(starts) - 1:
        return None
    first = samples[starts[bad + 1]][0]
    return max(0.0, (first - t_fault) * 1000)


def sample_interval_ms(samples: Sequence[Sequence[float]]) -> float | None:
    """The samples' median spacing (ms): what a sliding hold resolves."""
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(samples)]
    return round(statistics.median(gaps) * 1000, 2) if gaps else None


def delivery_stall(arrivals: list[float], t_fault: float, dur: float) -> dict[str, Any]:
    """What the application saw: the longest pause between message arrivals
    from the fault on, less the usual spacing after it (as the compound
    row). Bytes on the surviving link are not all progress: a stack can keep
    it busy while the data lost on the dead link holds up delivery."""
    arr = sorted(arrivals)
    lp = m.longest_pause(arr, t_fault, dur)
    later = [b - a for a, b in itertools.pairwise(x for x in arr if t_fault <= x <= dur)]
    spacing = statistics.median(later) if later else None
    return {"longest_pause_ms": None if lp is None else round(lp[0] * 1000, 2),
            "stall_ms": None if lp is None or spacing is None
            else round(max(0.0, lp[0] - spacing) * 1000, 2)}


def short_at_ms(total: list[int], target: float, end: int,
                excused: Collection[int] = ()) -> list[float]:
    """When (ms after go) each 10 ms bin at speed fell below ``target``
    (``bin_figures``' span, less the ``excused``; at most 50 of them)."""
    at = next((i for i in range(FIRST_BIN, end) if total[i] >= target), None)
    if at is None:
        return []
    return [i * m.BIN_S * 1000 for i in range(at, end)
            if total[i] < target and i not in excused][:50]


def short_bins(survivor: list[int], t_fault: float, end: int, target: float,
               excused: Collection[int] = ()) -> int:
    """10 ms bins wholly after the fault (to ``end``) below ``target``, less
    the ``excused``: beside the hold, whether one late dip or the whole way
    set it."""
    i0 = int(t_fault / m.BIN_S) + 1
    return sum(1 for i in range(i0, end) if survivor[i] < target and i not in excused)


def _run(ctx: Ctx, stack: str, label: str, dur: float, t_fault: float,
         faults: list[tuple[float, str]] | None) -> tuple[dict[str, Any], list[list[int]]]:
    fab = ctx.fab
    d0, h0 = _drops(fab), _host_drops(fab)
    # h1's links (what arrived) and h0's tbfs (what the links were given)
    sampler = SamplerProcess(fab.tb, "h1", "tools.claims.linkbins", LINKS, SAMPLE_S)
    shaper = SamplerProcess(fab.tb, "h0", "tools.claims.qdiscbins", LINKS, SAMPLE_S)
    sampler.wait_ready()
    shaper.wait_ready()
    try:
        res = stream(ctx, stack, [(0, 1, 0.0, dur, 0)], dur, faults)
    finally:
        samples = sampler.stop()
        shaped = shaper.stop()
    d1, h1 = _drops(fab), _host_drops(fab)
    if faults:
        _wait_carrier(fab, "h0", "p0")
    go = next((float(r["go"]) for r in res.values() if r.get("go")), 0.0)
    end = int(dur / m.BIN_S)
    fault = _fault_time(res, FAULT, t_fault) if faults else None
    t_cut = go + (fault[1] if fault else dur)
    rates = [cf.RATE_MBIT * 1e6 / 8] * len(LINKS)
    if shaped and go:
        # The emulator's fidelity on these links: how far each tbf fell
        # behind an ideal link fed the same bytes (the dead link p0 only
        # until the fault: from then on it sends nothing by design).
        lat = [lateness(shaped, rates, go, t_cut)[0], lateness(shaped, rates, go, go + dur)[1]]
        fab.last_gaps = {f"h0:{name}/up": {"gaps": 0, "late": lat[k], "rate_mbit": cf.RATE_MBIT,
                                           "resolution_frames": resolution(rates[k], shaped)}
                         for k, name in enumerate(LINKS) if lat[k]["frames"]}
    ok = _record(ctx, ROW, stack, label, res)
    per_link = link_bins(samples, go, end) if samples and go else [[0] * end for _ in LINKS]
    total = m.add_bins(per_link)
    links = 1 if stack == "tcp" else len(LINKS)
    link_bin = cf.RATE_MBIT * 1e6 / 8 * m.BIN_S  # frame bytes one link carries in a bin
    # Bins a link fell short in though an ideal link fed the same bytes
    # would not have: the emulator's, not the stack's (qdiscbins.excused).
    ideal_bins = link_bins(ideal(shaped, rates)[0], go, end) if shaped and go else None
    # (After the fault the dead link's ideal would drain what its tbf holds.)
    lost = set() if ideal_bins is None else {
        i for i in excused(total, m.add_bins(ideal_bins), RATE_SHARE * links * link_bin)
        if (i + 1) * m.BIN_S <= t_cut - go}
    lost1 = set() if ideal_bins is None else excused(per_link[1], ideal_bins[1],
                                                     RATE_SHARE * link_bin)
    out: dict[str, Any] = {
        **bin_figures(total, RATE_SHARE * links * link_bin, end, lost), **resends(stack, res),
        "links_used": links, "tail_drops": sum(max(0, v - d0.get(k, 0)) for k, v in d1.items()),
        "host_drops": {k: v - h0.get(k, 0) for k, v in h1.items()},
        "samples": len(samples), "rtos": _rtos(stack, res, [0]), "complete": ok,
        "goodput_mbps": sum(_bins0(res)[FIRST_BIN:end]) * 8
        / (max(1, end - FIRST_BIN) * m.BIN_S) / 1e6,
        # Diagnosis, not judged: when the bins fell short (ms after go) and,
        # for Braid, what its controller did over the run.
        "short_at_ms": short_at_ms(total, RATE_SHARE * links * link_bin, end, lost),
        "emulator_short_at_ms": sorted(i * m.BIN_S * 1000 for i in lost)[:50]}
    if stack.startswith("braid"):
        out["sender"] = _sender_state(res)
    if fault:
        tf = fault[1]
        frame = cf.MTU + 14
        moved = first_after(samples, 1, go + tf, frame) if samples and go else None
        out.update({"fault_at_s": round(tf, 4),
                    "moved_ms": None if moved is None else round((moved - go - tf) * 1000, 1),
                    "hold_ms": None if not samples or not go else hold_sliding_ms(
                        samples, 1, go + tf, go + dur, rates[1],
                        lambda a, b: any(i in lost1 for i in range(
                            int((a - go) / m.BIN_S), int((b - go) / m.BIN_S) + 1)), frame),
                    "hold_resolution_ms": sample_interval_ms(samples),
                    "hold_bins_ms": hold_ms(per_link[1], tf, end, RATE_SHARE * link_bin, lost1),
                    "short_bins_after": short_bins(per_link[1], tf, end, RATE_SHARE * link_bin,
                                                   lost1),
                    "emulator_short_bins_after": None if ideal_bins is None
                    else sum(1 for i in lost1 if i > tf / m.BIN_S),
                    **delivery_stall(res.get(1, {}).get("arrivals", {}).get("0", []), tf,
                                     dur)})
        if stack.startswith("braid"):
            pe = plane_events(res, fault)
            out["parked_after_ms"] = pe["parked_after_ms"]
            out["parked_cause"] = pe["parked_cause"]
    return out, per_link


def _bins0(res: dict[int, dict[str, Any]]) -> list[int]:
    """h1's application bins of the stream from h0 (whole messages)."""
    return list(res.get(1, {}).get("bins", {}).get("0", []))


def taildrop(ctx: Ctx) -> dict[str, Any]:
    """Braid, kernel TCP and kernel MPTCP over two plain tail-drop links,
    fault-free and with one link silent from ``fault_at`` on."""
    dur, t_fault = ctx.q((1.6, 0.8), (4.0, 1.5))
    main = ctx.fab
    fab = ClaimsFabric(2, main.name[:10] + "td", main.work / "taildrop", main.daemon_args,
                       connection=main.connection, queue_wait=main.queue_wait,
                       topo=topology(cf.RATE_MBIT, cf.MTU))
    sub = dataclasses.replace(ctx, fab=fab)
    per: dict[str, Any] = {}
    series: dict[str, Any] = {}
    ctx.say(f"  taildrop: 2 hosts x 2 tail-drop links (tbf) at {cf.RATE_MBIT} Mbit/s, "
            f"h0 -> h1 for {dur:g} s; {FAULT} at {t_fault:g} s in the faulted runs")
    try:
        fab.up()
        if ctx.inproc:  # the workers bind the hosts' planes themselves
            for p in fab.daemons.values():
                p.terminate()
            for p in fab.daemons.values():
                p.wait(timeout=30)
        for stack in ctx.stacks:
            out: dict[str, Any] = {}
            for label, faults in (("fault_free", None), ("faulted", [(t_fault, FAULT)])):
                out[label], series[f"{stack}/{label}"] = _run(sub, stack, label, dur, t_fault,
                                                              faults)
            per[stack] = out
            ff, fl = out["fault_free"], out["faulted"]
            ctx.say(f"  taildrop/{stack}: fault-free {_pct(ff['resend_share'])} resent, "
                    f"{_pct(ff['bins_at_rate_share'])} of bins at >= 90%, worst / median bin "
                    f"{_num(ff['worst_bin_mbps'])} / {_num(ff['median_bin_mbps'])} Mbit/s; "
                    f"one link silent: moved {_num(fl.get('moved_ms'))} ms, held "
                    f"{_num(fl.get('hold_ms'))} ms, delivery stall "
                    f"{_num(fl.get('stall_ms'))} ms")
    finally:
        fab.down()
    return {"duration": dur, "fault_at": t_fault, "fault": FAULT, "rate_mbit": cf.RATE_MBIT,
            "topology": topology(cf.RATE_MBIT, cf.MTU),
            "note": "tcp's connection rides plane 0 (the link that goes silent)",
            "per_stack": per, "series": series}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _num(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "NOT met")


def targets(rows: dict[str, Any]) -> list[list[str]]:
    """The row's target lines (target, braid, reference, verdict)."""
    per = (rows.get(ROW) or {}).get("per_stack") or {}
    b = per.get("braid")
    if not b:
        return []

    def get(stack: str, case: str, key: str) -> Any:
        return ((per.get(stack) or {}).get(case) or {}).get(key)

    def ff(stack: str) -> str:
        return (f"{_pct(get(stack, 'fault_free', 'resend_share'))} resent, "
                f"{_pct(get(stack, 'fault_free', 'bins_at_rate_share'))} of bins")

    rs, bs = get("braid", "fault_free", "resend_share"), get("braid", "fault_free",
                                                              "bins_at_rate_share")
    out = [[f"taildrop links, fault-free: resends <= {RESEND_MAX * 100:g}% of packets, >= "
            f"{BIN_SHARE_MIN * 100:g}% of 10 ms bins at >= {RATE_SHARE * 100:g}% of the "
            "links' rate once at speed", ff("braid"),
            "; ".join(f"{s} {ff(s)}" for s in ("tcp", "mptcp") if s in per) or "-",
            _met(None if rs is None else rs <= RESEND_MAX and bs >= BIN_SHARE_MIN)]]
    mv = get("braid", "faulted", "moved_ms")
    out.append([f"taildrop links, one silent: traffic on the surviving link within "
                f"{MOVED_MAX_MS:g} ms", f"{_num(mv)} ms",
                "; ".join(f"{s} {_num(get(s, 'faulted', 'moved_ms'))} ms"
                          for s in ("tcp", "mptcp") if s in per) or "-",
                _met(None if not b.get("faulted") else mv is not None and mv <= MOVED_MAX_MS)])
    bh, mh = get("braid", "faulted", "hold_ms"), get("mptcp", "faulted", "hold_ms")
    res = get("mptcp", "faulted", "hold_resolution_ms")
    ok = None if "mptcp" not in per or not b.get("faulted") else (
        bh is not None and (mh is None or HOLD_FACTOR * bh <= mh))
    verdict = _met(ok)
    if ok is False and bh is not None and mh is not None and res is not None and mh <= res:
        # MPTCP's survivor never dipped either: no hold is 10x shorter than
        # the samples' spacing, so the bytes on the link cannot tell them
        # apart (what the application saw is the stall, beside it).
        verdict = (f"no verdict: mptcp held within one sample ({res:g} ms) too; delivery "
                   f"stall braid {_num(get('braid', 'faulted', 'stall_ms'))} ms, mptcp "
                   f"{_num(get('mptcp', 'faulted', 'stall_ms'))} ms")
    out.append([f"taildrop links, one silent: the survivor holds >= {RATE_SHARE * 100:g}% of "
                f"its rate >= {HOLD_FACTOR:g}x sooner than mptcp", f"{_num(bh)} ms",
                "; ".join(f"{s} {_num(get(s, 'faulted', 'hold_ms'))} ms"
                          for s in ("tcp", "mptcp") if s in per) or "-", verdict])
    return out


def table(rows: dict[str, Any]) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, header, rows) of the row's figures per stack and case."""
    r = rows.get(ROW) or {}
    per = r.get("per_stack")
    if not per:
        return None
    lines = []
    for stack, cases in per.items():
        for case, v in cases.items():
            lines.append([stack, case.replace("_", "-"),
                          f"{_pct(v.get('resend_share'))} of {v.get('packets_sent')}",
                          str(v.get("tail_drops")), _num(v.get("at_speed_ms"), 0),
                          _pct(v.get("bins_at_rate_share")), _num(v.get("worst_bin_mbps")),
                          _num(v.get("median_bin_mbps")), _num(v.get("longest_gap_ms"), 0),
                          _num(v.get("moved_ms")), _num(v.get("hold_ms")),
                          str(v.get("short_bins_after", "-")),
                          _num(v.get("stall_ms")), str(v.get("rtos")),
                          "yes" if v.get("complete") else "NO"])
    return (f"taildrop: 2 hosts, 2 plain tail-drop links (tbf, no trim, no ECN) at "
            f"{r.get('rate_mbit')} Mbit/s, a stream h0 -> h1; faulted: {r.get('fault')} at "
            f"{r.get('fault_at')} s (bins: frames received per link, 10 ms; moved, hold and the "
            "longest pause between message arrivals less their usual spacing, from the "
            "fault)",
            ["stack", "case", "resends / packets sent", "tail drops", "at speed after ms",
             "bins >= 90% of rate", "worst bin Mbit/s", "median bin Mbit/s",
             "longest gap ms", "moved ms", "hold ms", "survivor bins < 90% after",
             "delivery stall ms", "RTOs",
             "byte-exact"], lines)


def plot(rows: dict[str, Any], plots_dir: Path, stem: str, label: Callable[[str], str]
         ) -> Path | None:
    """One PNG, a panel per stack: the frames each of h1's links received per
    10 ms through the faulted run, the fault and 90% of a link's rate marked.
    ``label`` names a series ('stack/faulted'), marking a run not faithful."""
    r = rows.get(ROW) or {}
    series = r.get("series") or {}
    stacks = [k.split("/")[0] for k in series if k.endswith("/faulted")]
    if not stacks:
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(stacks), figsize=(4.2 * len(stacks), 3.2), squeeze=False,
                             sharey=True)
    for ax, st in zip(axes[0], stacks, strict=True):
        for name, bins in zip(LINKS, series[f"{st}/faulted"], strict=False):
            ax.plot([i * m.BIN_S for i in range(len(bins))],
                    [b * 8 / m.BIN_S / 1e6 for b in bins], lw=0.7, label=f"h1:{name}")
        if r.get("fault_at") is not None:
            ax.axvline(float(r["fault_at"]), color="k", ls="--", lw=0.8)
        if r.get("rate_mbit"):
            ax.axhline(RATE_SHARE * float(r["rate_mbit"]), color="grey", ls=":", lw=0.8)
        ax.set_title(label(f"{st}/faulted"), fontsize=9)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("received per link (Mbit/s, 10 ms)")
    fig.suptitle(f"taildrop: {FAULT} (dashed); dotted: {RATE_SHARE * 100:g}% of a link",
                 fontsize=9)
    fig.tight_layout()
    p = plots_dir / f"{stem}-taildrop.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
