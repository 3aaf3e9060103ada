"""The rows of the claims matrix; each runs every stack in one claims run.

A row function takes a ``Ctx`` and returns a JSON-able dict: ``per_stack``
figures, ``series`` (bins / step times kept for the plots) and a one-line
``headline``. Every run's transfers are recorded in ``ctx.transfers`` with
``ok`` (byte-exact, nothing failed) or the reason it failed.

Capacities are payload rates: a plane carries ``RATE_MBIT`` of frames, so a
stack's payload capacity is that times its payload share of a full-size
frame (``eff``; at the default 1500-byte MTU Braid carries 1388 of 1514
bytes on IPv4, TCP 1448 of 1514).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.claims import cpu as claims_cpu
from tools.claims import fabric as cf
from tools.claims import metrics as m
from tools.claims.fabric import ClaimsFabric
from tools.claims.fidelity import judge
from tools.claims.fidelity import line as fidelity_line
from transport.sender import RECOVERY_KEYS

#: TCP's header bytes in a full segment: IPv4 20, TCP 20, timestamps 12.
TCP_OVERHEAD = 52
ETH_HEADER = 14
STACKS = ("braid", "tcp", "mptcp")
MSG = 65536  # stream message size (64 KiB, the claims' message)
#: Messages a stream keeps queued (1 MiB: several bandwidth-delay products of
#: a plane here), and how long after its stop time they may take to be acked
#: before the run counts as failed.
INFLIGHT = 16
GRACE = 8.0


@dataclass
class Ctx:
    fab: ClaimsFabric
    quick: bool
    stacks: list[str]
    say: Callable[[str], None]
    transfers: list[dict[str, Any]] = field(default_factory=list)
    #: Braid runs use in-process endpoints in the workers (``braid.open``), no daemons.
    inproc: bool = False

    def q(self, quick: Any, full: Any) -> Any:
        return quick if self.quick else full


def eff(stack: str, mtu: int | None = None) -> float:
    """A stack's payload share of a full-size frame at ``mtu`` (the fabric's):
    Braid's daemons size DATA to the path MTU (``payload_for_mtu``), TCP's
    MSS is the MTU less its headers; both frames carry 14 Ethernet bytes."""
    from transport.udp import payload_for_mtu

    mtu = cf.MTU if mtu is None else mtu
    payload = (payload_for_mtu(mtu, v6=False) if stack.startswith("braid")
               else mtu - TCP_OVERHEAD)
    return payload / (mtu + ETH_HEADER)


def plane_cap_bps(stack: str, planes: float = 1.0) -> float:
    return planes * cf.RATE_MBIT * 1e6 * eff(stack)


def pair_plane(a: int, b: int) -> int:
    """TCP pairs striped over planes, as a collective library does with NICs."""
    return (a + b) % cf.PLANES


def _record(ctx: Ctx, row: str, stack: str, label: str, res: dict[int, dict[str, Any]]
            ) -> bool:
    errs = [e for r in res.values() for e in r.get("errors", [])]
    bad = sum(int(r.get("bad", 0)) for r in res.values())
    ok = not errs and bad == 0
    blocked = [f"h{h}->h{d}" for h, r in res.items() for d in r.get("blocked", [])]
    warm = [w for r in res.values() for w in r.get("warmup_failures", [])]
    ctx.transfers.append({"row": row, "stack": stack, "run": label, "ok": ok,
                          "blocked_flows": blocked, "warmup_failures": warm,
                          "bytes": sum(int(r.get("ok_bytes", 0)) for r in res.values()),
                          "bad_messages": bad, "reason": "; ".join(errs[:3]) or None,
                          "fired": next((r.get("fired") for r in res.values()), []),
                          # The machine's CPU over the run (tools/claims/cpu.py).
                          "cpu": ctx.fab.last_cpu,
                          # --queue-wait: each Braid daemon's socket-queue waits.
                          "queue_wait": ctx.fab.last_queue_wait,
                          # Whether the emulator kept up (tools/claims/fidelity.py).
                          "fidelity": judge(ctx.fab.last_cpu, ctx.fab.last_gaps,
                                            ctx.fab.last_queue_wait),
                          "gaps": ctx.fab.last_gaps,
                          "hosts": {str(h): {"steps": len(r.get("done", [])),
                                             "errors": r.get("errors", [])[:3],
                                             "conns": r.get("conns"), "kernel": r.get("kernel"),
                                             "stale": r.get("stale"), "cut": r.get("cut"),
                                             "stdout_lost": r.get("stdout_lost"),
                                             "leftover": r.get("leftover")}
                                    for h, r in res.items()}})
    if not ok:
        ctx.say(f"  {row}/{stack}/{label}: FAILED: {'; '.join(errs[:2])} (bad {bad})")
    if ctx.transfers[-1]["fidelity"]["faithful"] is False:
        ctx.say(f"  {row}/{stack}/{label}: {fidelity_line(ctx.transfers[-1]['fidelity'])}")
    return ok


def _stack_name(stack: str, inproc: bool = False) -> str:
    """The workers' stack: ``braid-inproc`` runs the endpoint in the worker itself."""
    if stack.startswith("braid"):
        return "braid-inproc" if inproc else "braid"
    return stack


# -- run builders ------------------------------------------------------------------------------
Flow = tuple[int, int, float, float, int | None]


def stream(ctx: Ctx, stack: str, flows: Sequence[Flow],
           duration: float, faults: list[tuple[float, str]] | None = None
           ) -> dict[int, dict[str, Any]]:
    """Flows (src, dst, start, stop, plane or None) of 64 KiB messages."""
    return ctx.fab.run(_stack_name(stack, ctx.inproc), _stream_specs(ctx, flows, duration), faults,
                       timeout=duration + 60)


def _stream_specs(ctx: Ctx, flows: Sequence[Flow], duration: float
                  ) -> dict[int, dict[str, Any]]:
    """The workers' specs of ``stream``'s flows."""
    specs: dict[int, dict[str, Any]] = {}
    for src, dst, start, stop, plane in flows:
        for h in (src, dst):
            specs.setdefault(h, {"pattern": "stream", "duration": duration, "out": [],
                                 "connect": [], "accept": [], "msg": MSG,
                                 "grace": ctx.q(3.0, GRACE), "inflight": INFLIGHT})
        specs[src]["out"].append({"to": dst, "start": start, "stop": stop})
        specs[src]["connect"].append([dst, pair_plane(src, dst) if plane is None else plane])
        specs[dst]["accept"].append(src)
    return specs


def collective(ctx: Ctx, stack: str, pattern: str, group: list[int], size: int,
               stop_after: float, faults: list[tuple[float, str]] | None = None,
               grace: float = 10.0) -> dict[int, dict[str, Any]]:
    specs: dict[int, dict[str, Any]] = {}
    for h in group:
        if pattern == "incast":
            root = group[0]
            peers = [j for j in group if j != h] if h == root else [root]
        else:
            peers = [j for j in group if j != h]
        specs[h] = {"pattern": pattern, "group": group, "size": size, "stop_after": stop_after,
                    "grace": grace,
                    "connect": [[j, pair_plane(h, j)] for j in peers if j > h],
                    "accept": [j for j in peers if j < h]}
        if stack.startswith("braid"):
            specs[h]["connect"] = [[j, 0] for j in peers]
    return ctx.fab.run(_stack_name(stack, ctx.inproc), specs, faults,
                       timeout=stop_after + grace + 60)


def _steps(res: dict[int, dict[str, Any]], hosts: list[int] | None = None) -> list[float]:
    done = {h: r.get("done", []) for h, r in res.items() if hosts is None or h in hosts}
    go = next((r["go"] for r in res.values() if r.get("go")), 0.0)
    return m.step_times(done, go)


def _bins(res: dict[int, dict[str, Any]], dst: int, src: int | None = None) -> list[int]:
    b = res.get(dst, {}).get("bins", {})
    if src is not None:
        return list(b.get(str(src), []))
    return m.add_bins(list(b.values()))


def _braid_stat(res: dict[int, dict[str, Any]], key: str, hosts: list[int] | None = None
                ) -> float:
    tot = 0.0
    for h, r in res.items():
        if hosts is None or h in hosts:
            for c in r.get("conns", []):
                v = c.get(key)
                if isinstance(v, int | float):
                    tot += v
    return tot


def _rtos(stack: str, res: dict[int, dict[str, Any]], hosts: list[int] | None = None) -> int:
    if stack.startswith("braid"):
        return int(_braid_stat(res, "rtos", hosts))
    return sum(int(r.get("kernel", {}).get("TCPTimeouts", 0)) for h, r in res.items()
               if hosts is None or h in hosts)


def _min_rtt_ms(res: dict[int, dict[str, Any]]) -> float | None:
    vals = [c["min_rtt"] for r in res.values() for c in r.get("conns", [])
            if isinstance(c.get("min_rtt"), int | float) and c.get("packets_sent")]
    return min(vals) * 1000 if vals else None


class _Ping:
    """Kernel ICMP RTT across the same path while a run goes on: what the
    network (elements, queues) adds, without the Python endpoints' scheduling."""

    def __init__(self, ctx: Ctx, host: str, dst: str, dur: float) -> None:
        import shutil
        import subprocess

        self.proc: Any = None
        if shutil.which("ping") is None:
            return
        n = max(5, int((dur + 0.5) / 0.02))
        self.proc = ctx.fab.tb.popen(host, ["ping", "-n", "-q", "-i", "0.02", "-c", str(n),
                                            "-w", str(int(dur + 30)), dst],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)

    def result(self) -> dict[str, float] | None:
        import re
        import subprocess

        if self.proc is None:
            return None
        try:
            out, _ = self.proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out or "")
        if not m:
            return None
        return {"min": float(m.group(1)), "avg": float(m.group(2)), "max": float(m.group(3))}


def _sender_state(res: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The busiest Braid sender's window, NSCC's decisions during the run and
    its plane shares at the end (what limits a stream: the window cap, its
    cuts, or the shares)."""
    conns = [c for r in res.values() for c in r.get("conns", []) if c.get("packets_sent")]
    if not conns:
        return None
    c = max(conns, key=lambda c: c.get("packets_sent") or 0)
    shares = c.get("plane_shares") or {}
    return {"cwnd": c.get("cwnd"), "max_window": c.get("max_window"),
            "mds": c.get("cc_md"), "quick_adapts": c.get("cc_quick_adapt"),
            "retransmissions": c.get("retransmissions"),
            "delay_is_mark": c.get("cc_delay_is_mark"),
            "srtt_ms": (c.get("srtt") or 0) * 1000, "min_rtt_ms": (c.get("min_rtt") or 0) * 1000,
            "rttvar_ms": (c.get("rttvar") or 0) * 1000,
            "reorder_extra_ms": (c.get("reorder_extra") or 0) * 1000,
            "twin_resends": c.get("twin_resends"), "lost_by_time": c.get("lost_by_time"),
            # Resent packets by first send to ack, over the run (counts per
            # bucket: < 2, 5, 10, 20, 50 ms, and slower).
            "recovered": [c.get(k) for k in RECOVERY_KEYS],
            "lost_by_ev_order": c.get("lost_by_ev_order"),
            "plane_weight": shares.get("weight"),
            "plane_qdelay_ms": [q * 1000 for q in shares.get("qdelay") or []],
            "plane_loss": shares.get("loss"),
            # Each plane's own smoothed RTT (what times its silence) and the
            # packets it carried in this run.
            "plane_srtt_ms": [None if x is None else x * 1000
                              for x in c.get("plane_srtt") or []],
            "plane_sent": c.get("plane_sent")}


def _srtt_ms(res: dict[int, dict[str, Any]]) -> float | None:
    vals = [c["srtt"] for r in res.values() for c in r.get("conns", [])
            if isinstance(c.get("srtt"), int | float) and c["srtt"] > 0
            and c.get("packets_sent")]  # a receiver's srtt is only the initial guess
    return statistics.median(vals) * 1000 if vals else None


def _fault_time(res: dict[int, dict[str, Any]], words: str, default: float
                ) -> tuple[float, float]:
    """When the fault whose label contains ``words`` was in place (s after go):
    (its step's start, its end). The eBPF ports' map updates and the unplug's
    link change are the last things a step does, so the end is when the
    plane went silent, within the step's own bookkeeping (< 1 ms)."""
    fired: list[dict[str, Any]] = next((list(r["fired"]) for r in res.values()
                                        if r.get("fired")), [])
    f = next((f for f in fired if words in f.get("fault", "") and "error" not in f), None)
    if f is None:
        return default, default
    return float(f.get("t0", f["t"])), float(f["t"])


def plane_events(res: dict[int, dict[str, Any]], fault: tuple[float, float], plane: int = 0,
                 sender: int = 0) -> dict[str, Any]:
    """When Braid parked (and unparked) planes during a run, relative to the
    fault (from each connection's ``plane_log`` in the daemon's stats), and
    the sending host's first park of ``plane`` after the fault: in ms, in
    the connection's smoothed RTTs of the moment the plane went silent (when
    it was last heard from: the target's "within 5 srtt of going silent"),
    and in those at the park (the srtt moves during the silence: a fault
    that also hurts the survivor drains its queue). ``fault`` is (start,
    end) of the fault's step; times count from its end, a park during the
    step counts as 0 ms."""
    t_start, t_fault = fault
    go = next((r["go"] for r in res.values() if r.get("go")), 0.0)
    events = []
    for h, r in sorted(res.items()):
        for c in r.get("conns", []):
            for e in c.get("plane_log") or []:
                t, p, what, srtt, cause = e[:5]
                # A daemon from before the sixth field: the srtt at the park.
                silent = e[5] if len(e) > 5 else srtt
                events.append({"host": f"h{h}", "peer": c.get("peer"), "plane": p,
                               "what": what, "cause": cause,
                               "after_fault_ms": round((t - go - t_fault) * 1000, 2),
                               "srtt_ms": round(srtt * 1000, 3),
                               "srtt_silent_ms": round(silent * 1000, 3)})
    events.sort(key=lambda e: e["after_fault_ms"])
    step_ms = (t_fault - t_start) * 1000
    first = next((e for e in events if e["host"] == f"h{sender}" and e["plane"] == plane
                  and e["what"] == "parked" and e["after_fault_ms"] >= -step_ms), None)
    after = max(0.0, first["after_fault_ms"]) if first else None
    probe = [c.get("probe_interval") for c in res.get(sender, {}).get("conns", [])
             if isinstance(c.get("probe_interval"), int | float)]
    return {"events": events[:32], "fault_step_ms": round(step_ms, 2),
            "parked_after_ms": after,
            "parked_after_srtt": after / first["srtt_silent_ms"]
            if first and after is not None and first["srtt_silent_ms"] else None,
            "parked_after_srtt_at_park": after / first["srtt_ms"]
            if first and after is not None and first["srtt_ms"] else None,
            "srtt_silent_ms": first["srtt_silent_ms"] if first else None,
            "parked_cause": first["cause"] if first else None,
            "probe_interval_ms": max(probe) * 1000 if probe else None,
            "unreachable_sends": sum(int(c.get("unreachable_sends") or 0)
                                     for c in res.get(sender, {}).get("conns", []))}


def _wait_routable(ctx: Ctx, host: int, dst: int, plane: int, timeout: float = 10.0) -> None:
    """After a carrier fault healed: until ``host`` routes to ``dst`` on
    ``plane`` again (the kernel applies carrier changes up to ~1 s late), so
    the next run does not start with the link still down (bounded)."""
    import time

    tb = ctx.fab.tb
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = tb.exec(f"h{host}", ["ip", "route", "get", tb.address(f"h{dst}", plane), "from",
                                 tb.address(f"h{host}", plane)], capture_output=True, text=True)
        if r.returncode == 0:
            return
        time.sleep(0.1)


# -- rows --------------------------------------------------------------------------------------
def invisibility(ctx: Ctx) -> dict[str, Any]:
    """All-to-all step times fault-free and under a fault timeline."""
    group = [0, 1, 2, 3] if ctx.fab.n_hosts >= 4 else list(range(ctx.fab.n_hosts))
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
    # (a 64 KiB message every ~6 ms at the survivor's rate).
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
        srtt = out["srtt_ms"]
        limit = 10 * srtt + (pe["probe_interval_ms"] or 0.0) if srtt else None
        out.update({"planes": pe, "stall_limit_ms": limit, "sender": _sender_state(res)})
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
                           MSG + HEADER.size, first * m.BIN_S, dur)
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


def taildrop(ctx: Ctx) -> dict[str, Any]:
    """Plain tail-drop links, on a two-host testbed of the row's own
    (tools/claims/taildrop.py)."""
    from tools.claims.taildrop import taildrop as row

    return row(ctx)


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


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"
