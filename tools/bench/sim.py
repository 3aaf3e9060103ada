"""``braid bench sim``: the core's scenarios (a)–(j), the worst cases (k)–(n),
the congestion scenarios and the claims' invisibility row, in the simulated
fabric.

The same runners the scenario tests assert on (testbed/sim/scenarios.py);
virtual time, so the figures are deterministic and independent of this
machine's load. Real seconds per scenario are reported for information.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from testbed.sim import scenarios as S
from testbed.sim import scenarios_alltoall as T
from testbed.sim import scenarios_cc as C
from testbed.sim import worst_case as W
from tools.bench.common import (
    DEFAULT_DOCS,
    environment,
    git_commit,
    markdown_table,
    progress,
    text_table,
    write_results,
)

HELP = ("scenarios a-n, the congestion scenarios and the invisibility row (all-to-all through "
        "a fault timeline) of the connection core in the simulated fabric")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", default="",
                        help="comma-separated scenario keys, e.g. a,c,k,jitter,taildrop,"
                             "invisibility (k-n: the worst cases, each with both "
                             "clients; invisibility: 2 and 4 planes, each with a plot)")
    parser.add_argument("--spray-run", type=int, default=None, metavar="K",
                        help="spray granularity of every connection (packets in a row per "
                        "EV; default 1, per-packet)")


def _scenarios(quick: bool) -> dict[str, tuple[str, Any]]:
    big = 16 << 20 if quick else 64 << 20
    return {
        "a": ("bulk, 4 planes x 16 EVs, no faults", lambda: S.run_transfer(size=big)),
        "b1": ("1% random loss on every path", lambda: S.run_transfer(size=16 << 20, loss=0.01)),
        "b5": ("5% random loss on every path", lambda: S.run_transfer(size=16 << 20, loss=0.05)),
        "c": ("8-to-1 incast, trimming last hop", S.scenario_incast),
        "d": ("plane 1 of 4 dies silently, returns", S.scenario_plane_down),
        "e": ("one spine path CE-marks everything", S.scenario_ecn_path),
        "f": ("gray failure: one path drops 30%", S.scenario_gray),
        "g": ("every plane dies", S.scenario_all_dead),
        "h": ("forged/tampered/replayed packets", S.scenario_hostile),
        "i": ("two colliding single paths vs spray", S.scenario_collision),
        "j": ("spine 0 of plane 0 reboots (data and SACKs)", S.scenario_spine_down),
        **_worst_case(),
        **_cc_scenarios(),
        "incast-busy": ("claims incast at 25 Mbit/s, 8 x 64 KiB bursts, 0-3 ms host jitter, "
                        "3 seeds", _incast_busy),
        **_invisibility(),
    }


def _invisibility() -> dict[str, tuple[str, Any]]:
    """The claims' invisibility row in virtual time (testbed/sim/scenarios_alltoall.py):
    fault-free, under the fault timeline, and on the fabric a dead plane leaves."""
    faults = ", ".join(what for *_, what in T.TIMELINE)
    return {
        "invisibility": (f"4-host all-to-all, 128 KiB per peer per step, claims fabric "
                         f"(2 x 100 Mbit/s); {faults}",
                         lambda: T.invisibility(seed=1)),
        "invisibility-4p": ("4-host all-to-all on 4 planes x 50 Mbit/s; the same timeline",
                            lambda: T.invisibility(seed=1, planes=4,
                                                   plane_rate=C.PLANE_RATE / 2)),
    }


def _invisibility_figures(r: dict[str, Any]) -> dict[str, Any]:
    ff, fl, floor = r["fault_free"], r["faulted"], r["floor"]
    return {
        "steps fault-free / faulted": f"{ff['steps']} / {fl['steps']}",
        "p50 ms fault-free / faulted": f"{ff['p50'] * 1e3:.1f} / {fl['p50'] * 1e3:.1f}",
        "p100 ms fault-free / faulted": f"{ff['p100'] * 1e3:.1f} / {fl['p100'] * 1e3:.1f}",
        "p100 ratio": r["ratio_p100"],
        "floor p100 ms (one plane fewer, fault-free)": floor["p100"] * 1e3,
        "faulted p100 / floor p100": r["over_floor"],
        "slowest faulted step starts at (s)": fl["slowest"][0],
        "p100 ms by fault": ", ".join(f"{kind} {v * 1e3:.0f}" for kind, v
                                      in fl["p100_per_fault"].items() if v is not None),
        "ideal step ms": ff["ideal"] * 1e3,
        "RTOs": ff["rtos"] + fl["rtos"],
        "failed or unfinished": len(ff["failed"]) + len(fl["failed"]) + ff["unfinished"]
        + fl["unfinished"],
        "resent packets >= 20 ms fault-free / faulted":
            f"{_slow(ff['recovered'])} / {_slow(fl['recovered'])}",
    }


def _plot(key: str, title: str, r: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The invisibility row's step plot: into ``--out``, and with
    ``--update-docs`` into docs/claims/ (returned as a markdown image link)."""
    from tools.bench.sim_plot import plot_invisibility

    name = f"sim-{key}.png"
    short = f"{key}, {r['faulted']['planes']} planes, virtual time"
    path = plot_invisibility(r, T.timeline_events(), short, Path(args.out) / name)
    progress(f"sim: plot {path}")
    if not args.update_docs:
        return []
    docs = Path(args.docs) if args.docs else DEFAULT_DOCS
    plot_invisibility(r, T.timeline_events(), short, docs.parent / "claims" / name)
    return [f"![{key}](claims/{name})"]


def _slow(recovered: dict[str, int]) -> int:
    return sum(v for k, v in recovered.items()
               if k in ("recovered_lt_50ms", "recovered_ge_50ms"))


def _worst_case() -> dict[str, tuple[str, Any]]:
    """The worst cases k-n, each with both clients (one message in flight,
    pipelined)."""
    out: dict[str, tuple[str, Any]] = {}
    for c in W.CLIENTS:
        for d in W.DIRECTIONS:
            out[f"k-{c}-{d}"] = (
                f"compound fault ({d} gray on plane 0, planes 1-3 die), {c} client",
                lambda c=c, d=d: W.scenario_compound(client=c, direction=d))
    for c in W.CLIENTS:
        out[f"l-{c}"] = (f"last live plane with 30% ACK loss, {c} client",
                         lambda c=c: W.scenario_last_plane(client=c))
    for c in W.CLIENTS:
        out[f"m-{c}"] = (f"application-limited, 2% loss, plane 3 dies, {c} client",
                         lambda c=c: W.scenario_app_limited(client=c))
    for c in W.CLIENTS:
        out[f"n-{c}"] = (f"PSN wrap mid-transfer, 1% loss, {c} client",
                         lambda c=c: W.scenario_psn_wrap(client=c))
    return out


def _cc_scenarios() -> dict[str, tuple[str, Any]]:
    """The congestion scenarios (testbed/sim/scenarios_cc.py), each with a
    one-message-at-a-time and a pipelined (or paced) client."""

    def both(fn: Any, clients: tuple[str, ...], **kw: Any) -> Any:
        return lambda: {c: fn(client=c, **kw) for c in clients}

    sp = ("serial", "pipelined")
    return {
        "jitter": ("0-3 ms per-packet jitter, no loss (daemon config)",
                   both(C.scenario_jitter, sp)),
        "taildrop": ("2 x 100 Mbit/s tail-drop planes (no ECN, no trim)",
                     both(C.scenario_taildrop, sp)),
        "taildrop-old": ("same, plane rate 1.25e9 B/s (the daemon default)",
                         both(C.scenario_taildrop, sp, plane_rate=1.25e9)),
        "incast4": ("4-to-1, 64 KB tail-drop buffers, 0.5 s; loss as mark on",
                    both(C.scenario_taildrop, sp, senders=4, buffer=64 << 10, duration=0.5)),
        # Pipelined only: the row sets incast4's pipelined client against the
        # same run without the deviation.
        "incast4-no-loss-mark": ("same, without loss-as-mark (deviation 1 off), pipelined",
                                 both(C.scenario_taildrop, ("pipelined",), senders=4,
                                      buffer=64 << 10, duration=0.5, loss_as_mark=False)),
        "applimited": ("app-limited sender, 1% random loss, 16 KiB messages",
                       both(C.scenario_app_limited, ("serial", "paced"))),
        # The claims compound row on a busy host.
        "compound-busy": ("claims fabric, 3 ms host jitter; at 0.5 s plane 0 dies, plane 1 "
                          "loses 30% of the data", both(C.scenario_busy_compound, ("pipelined",))),
        "compound-busy-no-loss-mark": ("same, without loss-as-mark (deviation 1 off)",
                                       both(C.scenario_busy_compound, ("pipelined",),
                                            loss_as_mark=False)),
    }


def _incast_busy() -> dict[str, Any]:
    """The claims incast at 25 Mbit/s per plane, 8 x 64 KiB bursts, every
    host's sends 0-3 ms late; seeds 24-26, 16 bursts each.
    The fabric drops nothing, so every loss declared is spurious."""
    runs = [C.scenario_incast_bursts(bursts=16, jitter=3e-3, plane_rate=3.125e6,
                                     size=64 << 10, seed=seed) for seed in (24, 25, 26)]
    ratios = sorted(x for r in runs for x in r["ratios"])
    return {
        "ok": all(not r["failed"] and r["bursts"] == 16 for r in runs),
        "bursts": len(ratios),
        "completion/ideal p50": ratios[len(ratios) // 2],
        "completion/ideal p100": ratios[-1],
        "p100 after each seed's first burst": max(max(r["ratios"][1:]) for r in runs),
        "RTOs": sum(r["rtos"] for r in runs),
        "spurious losses": sum(r["spurious_losses"] for r in runs),
        "QuickAdapts": sum(r["quick_adapts"] for r in runs),
        "QuickAdapts undone": sum(r["qa_undone"] for r in runs),
        "drops": sum(r["drops"] for r in runs),
    }


def _cc_figures(r: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for client, f in r.items():
        c = client[0]  # s / p
        out.update({
            f"{c}: goodput/capacity": f["goodput_over_capacity"],
            f"{c}: empty 10ms bins": f["empty_bins"],
            f"{c}: drops %": 100 * f["drop_fraction"],
            f"{c}: srtt/(2 min+target)": f["srtt_mean"] / f["srtt_limit"],
            f"{c}: QuickAdapts": f["quick_adapt"],
            f"{c}: min cwnd (B)": f["cwnd_min"],
            f"{c}: max gap between messages (ms)": 1e3 * f["max_gap"],
        })
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _figures(key: str, r: dict[str, Any]) -> dict[str, Any]:
    plain = {k: v for k, v in r.items() if isinstance(v, int | float | str | bool | type(None))}
    if key in ("a", "b1", "b5"):
        return {"ok": r["ok"], "goodput/capacity": r["goodput_over_capacity"],
                "goodput/raw wire rate": r["goodput_over_raw"], "RTOs": r["rtos"],
                "retransmissions": r["retransmissions"], "NACKs": r["nacks"],
                "EV share max dev": r["ev_share_dev"]}
    if key == "c":
        return {"ok": r["ok"], "completion/ideal": r["completion_over_ideal"], "RTOs": r["rtos"],
                "last-hop trims": r["trims_last_hop"], "NACKs": r["nacks"],
                "retransmissions": r["retransmissions"], "lost by time": r["lost_by_time"]}
    if key == "d":
        return {"ok": r["ok"], "max delivery gap (us)": r["max_gap"] * 1e6,
                "limit 3xRTT+probe (us)": r["gap_limit"] * 1e6,
                "parked after (us)": (r["parked_after"] or 0) * 1e6,
                "restored after up (us)": (r["restored_after"] or 0) * 1e6,
                "goodput/capacity": r["goodput_over_capacity"]}
    if key == "j":
        return {"ok": r["ok"], "goodput during/capacity": r["goodput_during_over_capacity"],
                "goodput/capacity": r["goodput_over_capacity"], "RTOs": r["rtos"],
                "retransmissions": r["retransmissions"], "spurious": r["spurious_losses"]}
    if key in _cc_scenarios():
        return _cc_figures(r)
    if key.startswith("invisibility"):
        return _invisibility_figures(r)
    if key.startswith("k-"):
        return {"ok": r["ok"],
                "dead planes parked after last answered send (srtt)":
                    r["worst_parked_after_rtts"],
                "... after the first send that followed it (srtt)":
                    r["worst_parked_after_first_unanswered_rtts"],
                "max gap (us)": r["max_gap"] * 1e6,
                "limit 10 srtt + probe (us)": r["gap_limit"] * 1e6,
                "RTOs": r["rtos"], "TLPs": r["tlps"], "srtt (us)": r["srtt"] * 1e6,
                "completion (ms)": r["seconds"] * 1e3}
    if key.startswith("l-"):
        return {"ok": r["ok"], "plane 0 parks": r["plane0_parks"],
                "max gap (us)": r["max_gap"] * 1e6,
                "limit 10 srtt + probe (us)": r["gap_limit"] * 1e6,
                "RTOs": r["rtos"], "TLPs": r["tlps"], "completion (ms)": r["seconds"] * 1e3}
    if key.startswith("m-"):
        return {"ok": r["ok"], "healthy plane parks": r["healthy_plane_parks"],
                "dead plane parked after first unanswered send (srtt)":
                    r["dead_parked_after_rtts"],
                "completion/app-limited ideal": r["completion_over_ideal"], "RTOs": r["rtos"],
                "TLPs": r["tlps"]}
    if key.startswith("n-"):
        return {"ok": r["ok"], "packets": r["packets"], "RTOs": r["rtos"],
                "retransmissions": r["retransmissions"], "completion (ms)": r["seconds"] * 1e3}
    if key in ("e", "f"):
        return plain
    return plain


def run(args: argparse.Namespace) -> int:
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if args.spray_run is not None:
        S.CONFIG_OVERRIDES["spray_run"] = args.spray_run
    rows: list[list[str]] = []
    plots: list[str] = []  # markdown image links (docs-relative)
    data: dict[str, Any] = {"environment": environment(), "commit": git_commit(),
                            "scenarios": {}}
    for key, (title, fn) in _scenarios(args.quick).items():
        if only and key not in only and key.rstrip("15") not in only \
                and key.split("-")[0] not in only:
            continue
        progress(f"sim: scenario {key}: {title} ...")
        t0 = time.perf_counter()
        r = fn()
        real = time.perf_counter() - t0
        figs = _figures(key, r)
        figs["real seconds"] = real
        data["scenarios"][key] = {"title": title, **figs}
        rows.append([key, title, "; ".join(f"{k} {_fmt(v)}" for k, v in figs.items())])
        if key.startswith("invisibility"):
            plots += _plot(key, title, r, args)
    header = ["", "scenario", "figures (virtual time)"]
    print(text_table(header, rows))
    md = (
        "Scenarios of the connection core in the simulated fabric (`braid bench sim`; "
        "virtual time, deterministic; capacity = wire rate x payload fraction, "
        "i.e. the best goodput the fabric allows after headers)"
        + (f"; every connection with spray_run={args.spray_run}" if args.spray_run else "")
        + ".\n\n"
        + markdown_table(header, rows)
        + "".join(f"\n\n{p}" for p in plots)
        + f"\n\nMeasured {data['environment']['time']} at commit {data['commit']} (virtual "
        "time: every figure but the real seconds is the same on any machine).\n"
    )
    path = write_results("sim", data, md, args.out, update_docs=args.update_docs, docs=args.docs)
    print(f"results: {path}")
    return 0
