"""Is a testbed run a measurement of the transport, or of the emulator?

A namespace testbed is faithful only while the machine keeps up: when the
hosts saturate the CPUs, links stop sending at their rate and a figure taken
then measures the emulator (Mininet-HiFi, Handigol et al., CoNEXT 2012,
monitors exactly this). For each run this module combines

- the machine's CPU (tools/claims/cpu.py): the share of 100 ms intervals in
  which every CPU was busy (>= 95%),
- the eBPF ports' lateness (testbed/bpf/port.c ``tc/gap``,
  ``testbed.ebpf.late_summary``): as each frame reaches the far end of its
  link, how far the real link is behind the ideal one (the port's virtual
  queue): bytes accepted minus bytes departed, beyond the virtual backlog, at
  the port rate, in ideal times of a 1,514-byte frame,
  or, for a plain tbf link, the same sampled at the sending host
  (``tools.claims.qdiscbins``: a lower bound, ~16 frames of resolution at
  100 Mbit/s),
- the ports' departure gaps on busy links (``gap_summary``, reported only),
- the Braid daemons' socket-queue waits when they were recorded (reported
  beside the verdict, not judged: they are the hosts' share of an RTT, not
  the emulator's),

into ``{"faithful": bool | None, "reasons": [...], ...}``. A run is **not
faithful** when its hosts were saturated in more than ``SATURATED_SHARE_MAX``
of its 100 ms intervals, when the hypervisor took more than
``STEAL_SHARE_MAX`` of the CPUs' time (steal), or when a link's p99 lateness
exceeds ``LATE_P99_MAX`` ideal frame times. No met / not-met verdict is taken from a
run that is not faithful. ``faithful`` is None when nothing was measured.

Why lateness and not gaps: Mininet-HiFi checks that a busy link's dequeue
gaps stay close to the ideal transmission time, which holds for a shaper
that never runs ahead. HTB does: it may send its burst (``HTB_BURST_S``,
2 ms, so that a late timer does not lower the average rate) back to back
and then wait, so a faithful link shows busy gaps of up to ~17 frame times
after a burst of early frames; judged by gaps, the full claims matrix
marked nearly every run of every stack not faithful, kernel TCP's too, on a
machine 30-40% busy. Lateness separates the two: frames sent early read 0,
a shaper that falls behind reads the time it lost (a shaper slowed to half
the port rate read p50 49 ms, a blast at 1.5x the rate 0;
tests/netns/test_port_gaps.py). One frame time of lateness at p99 is the
slack Mininet-HiFi allows a departure. 5% of 100 ms intervals saturated
lets a run brush the ceiling now and then (a few intervals of a 10 s run);
beyond that the hosts' queues, not the links, set the timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: A run is not faithful with its hosts saturated in more than this share of
#: its 100 ms intervals.
SATURATED_SHARE_MAX = 0.05
#: ... or with the hypervisor taking more than this share of the CPUs' time
#: over the run (steal): it pauses a whole vCPU, every host, switch and link
#: on it, for milliseconds at a time, and the hosts then wait for a core
#: (the tail-drop row's fault-free bins: 98.4-99.5% at steal <= 0.8%,
#: 94.8-97.1% at 1.8-5.3%, 53-78% at 17-28%, with the machine 45-65% busy
#: and no interval saturated; decision 0048).
STEAL_SHARE_MAX = 0.02
#: ... or with a link's p99 lateness (how far the real link was behind the
#: ideal one, the port's virtual queue, as frames left) above this many ideal
#: times of a 1,514-byte frame at the port rate.
LATE_P99_MAX = 1.0
#: A link's lateness is judged from this many frames up (fewer say nothing).
MIN_LATE_FRAMES = 100
#: Busy-link departure gaps are reported, not judged (HTB's designed burst
#: makes gaps of up to HTB_BURST_S on a faithful link; see the module doc);
#: a link's p99 gap is reported from this many busy gaps up.
MIN_BUSY_GAPS = 100


def gap_window(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Per port with busy gaps between two ``Testbed.port_gaps()`` readings:
    count, p50, p99 and max of gap / ideal (``testbed.ebpf.gap_summary``)."""
    from testbed.ebpf import gap_delta, gap_summary, late_summary

    out: dict[str, Any] = {}
    for port, a in after.items():
        b = before.get(port)
        d = gap_delta(b, a) if b else a
        s = gap_summary(d["hist"], d["max_units"])
        rate = int(a.get("rate_bps") or 0)
        late = (late_summary(d["late_hist"], d.get("late_max_ns"), rate)
                if d.get("late_hist") and rate else None)
        if s["gaps"] or (late and late["frames"]):
            out[port] = {**s, "rate_mbit": round(rate / 1e6, 3)}
            if late is not None:
                out[port]["late"] = late
    return out


def judge(cpu: Mapping[str, Any] | None, gaps: Mapping[str, Any] | None,
          queue_wait: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One run's fidelity from its CPU record (``cpu.run_share``), its ports'
    lateness and busy gaps (``gap_window``) and, when recorded, its daemons'
    queue waits. Lateness is judged; gaps are reported beside it."""
    reasons: list[str] = []
    sat = None if not cpu else cpu.get("saturated")
    if sat is not None and sat > SATURATED_SHARE_MAX:
        reasons.append(f"hosts saturated in {sat * 100:.0f}% of 100 ms intervals "
                       f"(limit {SATURATED_SHARE_MAX * 100:.0f}%)")
    steal = None if not cpu else cpu.get("steal")
    if steal is not None and steal > STEAL_SHARE_MAX:
        reasons.append(f"the hypervisor took {steal * 100:.1f}% of the CPUs (steal; "
                       f"limit {STEAL_SHARE_MAX * 100:.0f}%)")
    lates = {p: g["late"] for p, g in (gaps or {}).items()
             if g.get("late") and g["late"].get("frames", 0) >= MIN_LATE_FRAMES
             and g["late"].get("p99") is not None}
    worst_late = max(lates.items(), key=lambda kv: float(kv[1]["p99"]), default=None)
    late99 = None if worst_late is None else float(worst_late[1]["p99"])
    if worst_late is not None and late99 is not None and late99 > LATE_P99_MAX:
        reasons.append(f"link {worst_late[0]}: p99 lateness {late99:.2f} ideal frame times "
                       f"({float(worst_late[1]['p99_us']) / 1e3:.2f} ms) behind the ideal link "
                       f"(limit {LATE_P99_MAX:g})")
    judged = {p: g for p, g in (gaps or {}).items()
              if g.get("gaps", 0) >= MIN_BUSY_GAPS and g.get("p99") is not None}
    worst = max(judged.items(), key=lambda kv: float(kv[1]["p99"]), default=None)
    p99 = None if worst is None else float(worst[1]["p99"])
    measured = sat is not None or worst_late is not None or worst is not None
    out: dict[str, Any] = {
        "faithful": (not reasons) if measured else None, "reasons": reasons,
        "cpu_saturated_share": sat,
        "p99_late_ratio": late99,
        "max_late_ratio": max((float(g["max"]) for g in lates.values()
                               if g.get("max") is not None), default=None),
        "worst_late_link": None if worst_late is None else worst_late[0],
        "p99_gap_ratio": p99,
        "worst_link": None if worst is None else worst[0],
        "max_gap_ratio": max((float(g["max"]) for g in judged.values()), default=None),
        "busy_links": len(judged),
        "busy_gaps": sum(int(g.get("gaps", 0)) for g in (gaps or {}).values())}
    if cpu:
        # Who used the machine (shares of all CPUs): what a saturated run
        # should be read with.
        out["cpu"] = {k: cpu.get(k) for k in ("busy", "steal", "daemons", "workers")}
    if queue_wait:
        host, w = max(queue_wait.items(), key=lambda kv: float(kv[1].get("mean_us", 0)))
        out["queue_wait_worst"] = {"host": host, "mean_ms": round(float(w["mean_us"]) / 1e3, 3),
                                   "p99_ms": round(float(w["p99_us"]) / 1e3, 3)}
    return out


def combine(fids: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Several runs' fidelity as one: faithful only if every judged run was,
    the worst of each figure, the reasons of the runs that failed."""
    fs = [f for f in fids if f]
    judged = [f for f in fs if f.get("faithful") is not None]
    bad = [f for f in judged if not f["faithful"]]
    reasons: list[str] = []
    for f in bad:
        for r in f["reasons"]:
            if r not in reasons:
                reasons.append(r)

    def worst(key: str) -> float | None:
        xs = [float(f[key]) for f in fs if f.get(key) is not None]
        return max(xs) if xs else None

    return {"faithful": (not bad) if judged else None, "runs": len(fs),
            "not_faithful": len(bad), "reasons": reasons,
            "cpu_saturated_share": worst("cpu_saturated_share"),
            "p99_late_ratio": worst("p99_late_ratio"), "max_late_ratio": worst("max_late_ratio"),
            "p99_gap_ratio": worst("p99_gap_ratio"), "max_gap_ratio": worst("max_gap_ratio")}


def no_verdict(fid: Mapping[str, Any]) -> str:
    """The report's text in place of a verdict taken on an unfaithful run."""
    rs = list(fid.get("reasons") or [])
    more = f"; +{len(rs) - 1} more" if len(rs) > 1 else ""
    return f"no verdict: not faithful ({rs[0] if rs else 'see fidelity'}{more})"


def line(fid: Mapping[str, Any] | None) -> str:
    """One line for a summary: faithful or not, and the figures."""
    if not fid or fid.get("faithful") is None:
        return "fidelity: not measured"
    sat, p99 = fid.get("cpu_saturated_share"), fid.get("p99_gap_ratio")
    late = fid.get("p99_late_ratio")
    figs = ", ".join(x for x in (
        None if sat is None else f"hosts saturated in {sat * 100:.0f}% of 100 ms intervals",
        None if late is None else f"links' p99 lateness {late:.2f} ideal frame times",
        None if p99 is None else f"busy-link p99 departure gap {p99:.2f}x ideal") if x)
    if fid["faithful"]:
        return f"fidelity: faithful ({figs})"
    return f"fidelity: NOT faithful: {'; '.join(fid['reasons'])}{_who(fid.get('cpu'))}"


def _who(cpu: Mapping[str, Any] | None) -> str:
    """`` (machine 97% busy: daemons 71%, workers 9%)``: the CPU record's
    shares, for a run that was not faithful; empty if unknown."""
    if not cpu or cpu.get("busy") is None:
        return ""
    own = ", ".join(f"{k} {float(cpu[k]) * 100:.0f}%" for k in ("daemons", "workers")
                    if cpu.get(k) is not None)
    return f" (machine {float(cpu['busy']) * 100:.0f}% busy" + (f": {own})" if own else ")")


class Monitor:
    """One run window's fidelity on a testbed (``braid perf``, the demo):
    ``start()`` before the traffic, ``stop()`` after it returns ``judge()``
    plus the busy links' gaps (``gaps``)."""

    def __init__(self, tb: Any) -> None:
        self.tb = tb
        self._gaps0: dict[str, Any] = {}
        self._t0 = 0.0
        self._j0: Any = None
        self._sampler: Any = None
        self._shapers: Any = None

    def _gaps(self) -> dict[str, Any]:
        try:
            gaps: dict[str, Any] = self.tb.port_gaps()
        except Exception:  # a fidelity record must never fail a run
            return {}
        return gaps

    def start(self) -> Monitor:
        import time

        from tools.claims import cpu
        from tools.claims.qdiscbins import ShaperSampler

        self._gaps0 = self._gaps()
        try:  # plain tbf links: sampled (a lower bound of their lateness)
            self._shapers = ShaperSampler(self.tb) if hasattr(self.tb, "shaped_ports") else None
        except Exception:  # a fidelity record must never fail a run
            self._shapers = None
        self._j0 = cpu.machine()
        self._t0 = time.monotonic()
        self._sampler = cpu.Sampler().start()
        return self

    def stop(self) -> dict[str, Any]:
        import os
        import time

        from tools.claims import cpu

        samples = self._sampler.stop() if self._sampler else []
        share = cpu.run_share(self._j0, cpu.machine(), time.monotonic() - self._t0,
                              os.cpu_count() or 1, None, None, samples)
        gaps = gap_window(self._gaps0, self._gaps()) if self._gaps0 else None
        if self._shapers is not None:
            try:
                shaped = self._shapers.stop()
            except Exception:  # a fidelity record must never fail a run
                shaped = {}
            if shaped:
                gaps = {**(gaps or {}), **shaped}
        return {**judge(share, gaps), "gaps": gaps}


Probe = Callable[[int], Mapping[str, Any]]


def search_rate(probe: Probe, ladder: Iterable[int] = (100, 50, 25, 12),
                say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``--rate auto``: walk ``ladder`` (Mbit/s per plane, highest first) and
    stop at the first rate whose probe run (``probe(rate) -> judge()``) is
    faithful. Bounded: one probe per rung. If none is, the lowest rung is
    chosen and marked ``faithful: False``."""
    rungs = sorted({int(r) for r in ladder}, reverse=True)
    if not rungs or rungs[-1] <= 0:
        raise ValueError("the rate ladder needs positive rates")
    probes: list[dict[str, Any]] = []
    for rate in rungs:
        fid = dict(probe(rate))
        probes.append({"rate_mbit": rate, "faithful": fid.get("faithful"),
                       "reasons": list(fid.get("reasons") or []),
                       "cpu_saturated_share": fid.get("cpu_saturated_share"),
                       "p99_gap_ratio": fid.get("p99_gap_ratio"), "cpu": fid.get("cpu")})
        if say:
            say(f"rate auto: {rate} Mbit/s per plane: {line(fid)}")
        if fid.get("faithful") is not False:  # faithful, or nothing to judge it by
            return {"rate_mbit": rate, "faithful": fid.get("faithful"), "probes": probes}
    return {"rate_mbit": rungs[-1], "faithful": False, "probes": probes}
