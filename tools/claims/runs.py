"""What every row of the claims matrix runs on: the context, the run
builders (a stream, a collective), the record of each run and the figures
the rows read from the workers' results.

Capacities are payload rates: a plane carries ``RATE_MBIT`` of frames, so a
stack's payload capacity is that times its payload share of a full-size
frame (``eff``; at the default 1500-byte MTU Braid carries 1388 of 1514
bytes on IPv4, TCP 1448 of 1514).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
MSG = 65536  # stream message size (64 KiB, the claims' message) on 2 x 100 Mbit/s


def msg_scale() -> float:
    """The fabric's capacity against the default 2 x 100 Mbit/s: what a
    message size is scaled by so that a message takes the same time on any
    ``--planes`` / ``--rate`` (no more than 1: a faster fabric keeps them)."""
    return min(1.0, cf.PLANES * cf.RATE_MBIT / 200)


def stream_msg() -> int:
    """A stream's message size on this fabric: ``MSG`` scaled by
    ``msg_scale`` (1 KiB steps, at least 4 KiB). At 2 x 12 Mbit/s a 64 KiB
    message would take 22 ms over both planes and 44 ms over one, so every
    gap measured in 10 ms bins would be a message's own length; 8 KiB
    takes what 64 KiB takes on the default fabric."""
    return max(4096, round(MSG * msg_scale() / 1024) * 1024)


#: Messages a stream keeps queued (1 MiB on the default fabric: several
#: bandwidth-delay products of a plane here), and how long after its stop
#: time they may take to be acked before the run counts as failed.
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
    """Flows (src, dst, start, stop, plane or None) of ``stream_msg()``
    messages (64 KiB on the default fabric)."""
    return ctx.fab.run(_stack_name(stack, ctx.inproc), _stream_specs(ctx, flows, duration), faults,
                       timeout=duration + 60)


def _stream_specs(ctx: Ctx, flows: Sequence[Flow], duration: float
                  ) -> dict[int, dict[str, Any]]:
    """The workers' specs of ``stream``'s flows."""
    specs: dict[int, dict[str, Any]] = {}
    for src, dst, start, stop, plane in flows:
        for h in (src, dst):
            specs.setdefault(h, {"pattern": "stream", "duration": duration, "out": [],
                                 "connect": [], "accept": [], "msg": stream_msg(),
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
            # Losses declared and then acknowledged after all (the first
            # copy was only late): resends the time or EV rule caused.
            "spurious_losses": c.get("spurious_losses"),
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


def srtt_at(res: dict[int, dict[str, Any]], t: float, sender: int = 0) -> float | None:
    """The sending host's smoothed RTT (ms) at ``t`` s after go: the newest
    entry of its busiest connection's ``srtt_log`` (one per 10 ms of SACKs)
    at or before ``t``, else its first; None without a log (a daemon from
    before it). What a fault's yardstick reads: at the end of a run the
    queue has emptied and the srtt with it (the compound row's survivor
    read 0.8 ms there and 4-6 ms while it carried the stream)."""
    go = next((r["go"] for r in res.values() if r.get("go")), 0.0)
    conns = [c for c in res.get(sender, {}).get("conns", [])
             if c.get("packets_sent") and c.get("srtt_log")]
    if not conns:
        return None
    log = max(conns, key=lambda c: c.get("packets_sent") or 0)["srtt_log"]
    before = [e for e in log if e[0] - go <= t]
    return float((before[-1] if before else log[0])[1]) * 1000


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
    tb = ctx.fab.tb
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = tb.exec(f"h{host}", ["ip", "route", "get", tb.address(f"h{dst}", plane), "from",
                                 tb.address(f"h{host}", plane)], capture_output=True, text=True)
        if r.returncode == 0:
            return
        time.sleep(0.1)



def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"
