"""Text tables of ``TraceStats.to_json()`` (the JSON is the source of truth)."""

from __future__ import annotations

from typing import Any


def _nacks(n: dict[str, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in n.items()) or "-"


def _row(name: str, c: dict[str, Any]) -> str:
    t = c["trims"]
    return (f"{name:<14} {c['packets']:>8} {c['bytes']:>11} {c['data']:>8} {c['retx']:>6} "
            f"{t['fabric']:>6} {t['last_hop']:>6} {t['unmarked']:>5} {c['sacks']:>7} "
            f"{c['ce']:>5}  {_nacks(c['nacks'])}")


_HEAD = (f"{'':<14} {'packets':>8} {'bytes':>11} {'data':>8} {'retx':>6} {'trimF':>6} "
         f"{'trimLH':>6} {'trim?':>5} {'sacks':>7} {'CE':>5}  nacks")


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def format_text(s: dict[str, Any], *, max_evs: int = 40) -> str:
    lines = [f"duration {s['duration_s']:.6f} s, {s['total']['packets']} Braid packets"
             + (f", malformed {s['malformed']}" if s["malformed"] else ""), ""]
    if s.get("auth"):
        lines[-1:-1] = ["verified: " + " ".join(f"{k}={v}" for k, v in s["auth"].items())]
    lines += ["per connection (dcid)", _HEAD]
    for dcid, c in s["connections"].items():
        lines.append(_row(dcid, c))
    lines += ["", f"{'connection':<14} {'peer':>10} {'types'}"]
    for dcid, c in s["connections"].items():
        peer = "-" if c["peer_dcid"] is None else f"{c['peer_dcid']:#x}"
        types = " ".join(f"{k}={v}" for k, v in c["types"].items())
        lines.append(f"{dcid:<14} {peer:>10} {types}")
    lines += ["", f"{'connection':<14} {'rtt n':>6} {'min':>9} {'p50':>9} {'p90':>9} "
              f"{'p99':>9} {'max':>9} (µs)   longest DATA gap"]
    for dcid, c in s["connections"].items():
        r = c["rtt_us"] or {}
        gap = c["longest_data_gap_s"]
        gap_s = "-" if gap is None else (
            f"{gap * 1e3:.3f} ms at +{c['longest_data_gap_at_s']:.6f} s")
        lines.append(f"{dcid:<14} {r.get('samples', 0):>6} {_us(r.get('min')):>9} "
                     f"{_us(r.get('p50')):>9} {_us(r.get('p90')):>9} {_us(r.get('p99')):>9} "
                     f"{_us(r.get('max')):>9}        {gap_s}")
    lines += ["", "per plane", _HEAD]
    for plane, c in s["planes"].items():
        lines.append(_row(f"plane {plane}", c))
    evs = s["evs"]
    lines += ["", f"per EV (plane/ev; SACK and NACK counted on the EV they echo)"
              f"{'' if len(evs) <= max_evs else f', first {max_evs} of {len(evs)}'}", _HEAD]
    for c in evs[:max_evs]:
        lines.append(_row(f"{c['plane']}/{c['ev']}", c))
    return "\n".join(lines)
