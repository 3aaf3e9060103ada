"""Where a Braid data packet's CPU goes: a budget from cProfile statistics.

``braid bench goodput --profile`` profiles both ends of a Braid transfer
(sender and receiver processes) and hands the two ``pstats`` files here.
Each row is the cumulative time of the functions that do one job, per data
packet. cProfile slows Python-level calls more than C calls, so the
profiled microseconds overstate the Python rows; the table therefore also
gives each row's share of its side and scales that share to the CPU time
per packet of the *unprofiled* run measured alongside.
"""

from __future__ import annotations

import pstats
from collections.abc import Callable
from pathlib import Path

Key = tuple[str, int, str]
Entry = tuple[int, int, float, float, dict[Key, object]]

#: How cProfile names a method of the compiled codec's types.
_C = "<method '%s' of 'wire._fastwire.%sCore' objects>"
_PLACE = "<built-in method wire._fastwire.place_slices>"

#: (side, row, what it contains, functions whose cumulative time is summed,
#: as "file.py:function" or "~:<method name>" for C methods).
ROWS: list[tuple[str, str, str, list[str]]] = [
    ("sender", "segmentation", "next segments (a run's, no payload copy)",
     ["send_queue.py:next_packet", "send_queue.py:next_new", "send_queue.py:take"]),
    ("sender", "EV choice", "path policy pick (spray rotation)",
     ["path_health.py:pick", "path_health.py:pick_run"]),
    ("sender", "window + pacing", "congestion can_send / next_send_time / on_sent",
     ["nscc.py:can_send", "nscc.py:next_send_time", "nscc.py:on_sent",
      "nscc.py:send_quota", "nscc.py:on_sent_run"]),
    ("sender", "seal", "header pack, GMAC, AES-GCM (a run per call)",
     ["codec.py:seal_data", "codec.py:seal_data_run", f"~:{_C % ('seal_data', 'Sealer')}",
      f"~:{_C % ('seal_data_run', 'Sealer')}"]),
    ("sender", "in-flight table", "on_sent / on_sent_run",
     ["inflight.py:on_sent", "inflight.py:on_sent_run"]),
    ("sender", "system calls (send)", "sendto / sendmsg (GSO)",
     ["~:<method 'sendto' of '_socket.socket' objects>",
      "~:<method 'sendmsg' of '_socket.socket' objects>"]),
    ("sender", "SACK processing", "acks, loss inference, EV credit, congestion update",
     ["conn_dispatch.py:_on_sack"]),
    ("sender", "SACK receive + open", "recvmmsg, route, peek, open",
     ["aio.py:_drain", "-conn_dispatch.py:_on_sack"]),
    ("receiver", "system calls (receive)", "recvmmsg (drain) / recvmsg_into",
     ["~:<method 'recvmsg_into' of '_socket.socket' objects>",
      "~:<built-in method wire._fastwire.drain>"]),
    # The DATA fast path (Endpoint.receive_datagrams -> Connection.receive_data_batch
    # -> wire._fastwire.place_slices, or per datagram Opener.open_data_untrusted and
    # Receiver.on_slice) and the one-datagram path (receive_datagram ->
    # open_untrusted, _on_data) all count.
    ("receiver", "drain + route", "per-read loop, peer lookup, runs of DATA, endpoint dispatch",
     ["aio.py:_drain", "-~:<method 'recvmsg_into' of '_socket.socket' objects>",
      "-~:<built-in method wire._fastwire.drain>",
      "-conn_dispatch.py:receive_datagram", "-conn_dispatch.py:receive_data_batch"]),
    ("receiver", "open + place in C", "place_slices: AES-GCM open, replay, the common slice",
     [f"~:{_PLACE}"]),
    ("receiver", "open", "the other datagrams: header/body unpack, decrypt, replay",
     ["codec.py:open_untrusted", "codec.py:open_data_untrusted",
      f"~:{_C % ('open_data_untrusted', 'Opener')}"]),
    ("receiver", "reassembly + PSN", "Receiver.on_slice (other slices), delivery, glue",
     ["conn_dispatch.py:_on_data", "conn_dispatch.py:receive_data_batch", f"-~:{_PLACE}",
      "-codec.py:open_data_untrusted", f"-~:{_C % ('open_data_untrusted', 'Opener')}"]),
    ("receiver", "SACK generation", "bitmaps, SACK sealing",
     ["conn_core.py:_send_sack"]),
    ("receiver", "SACK send", "sendmsg of SACKs",
     ["aio_send.py:_send"]),
]


def _index(stats: dict[Key, Entry]) -> Callable[[str], float]:
    by_name: dict[str, float] = {}
    for (path, _line, func), entry in stats.items():
        name = f"{Path(path).name}:{func}"
        by_name[name] = by_name.get(name, 0.0) + entry[3]

    def cum(spec: str) -> float:
        sign = -1.0 if spec.startswith("-") else 1.0
        return sign * by_name.get(spec.lstrip("-"), 0.0)

    return cum


def _total(stats: dict[Key, Entry]) -> float:
    return sum(e[2] for e in stats.values())


def budget(tx_pstats: str | Path, rx_pstats: str | Path, packets: int,
           real_us: dict[str, float] | None = None) -> list[dict[str, object]]:
    """Rows of {side, row, what, profiled_us, share, real_us} per data packet.

    ``real_us`` maps side -> CPU µs per data packet of an unprofiled run
    (None: leave the scaled column out). A final row per side holds
    what the named rows do not cover (event loop, timers, glue).
    """
    sides = {"sender": pstats.Stats(str(tx_pstats)).stats,  # type: ignore[attr-defined]
             "receiver": pstats.Stats(str(rx_pstats)).stats}  # type: ignore[attr-defined]
    out: list[dict[str, object]] = []
    for side, stats in sides.items():
        cum = _index(stats)
        total = _total(stats)
        named = 0.0
        rows = [(r, w, fs) for s, r, w, fs in ROWS if s == side]
        rows.append(("rest", "event loop, timers, service pass, glue", []))
        for row, what, funcs in rows:
            secs = sum(cum(f) for f in funcs) if funcs else total - named
            named += secs
            share = secs / total if total else 0.0
            real = real_us.get(side) if real_us else None
            out.append({"side": side, "row": row, "what": what,
                        "profiled_us": secs / packets * 1e6, "share": share,
                        "real_us": None if real is None else share * real})
        out.append({"side": side, "row": "total", "what": "",
                    "profiled_us": total / packets * 1e6, "share": 1.0,
                    "real_us": real_us.get(side) if real_us else None})
    return out


def markdown(rows: list[dict[str, object]]) -> str:
    lines = ["| side | where | what | µs/packet profiled | share | ≈µs/packet unprofiled |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        real = r["real_us"]
        lines.append(f"| {r['side']} | {r['row']} | {r['what']} | "
                     f"{float(r['profiled_us']):.2f} | "  # type: ignore[arg-type]
                     f"{100 * float(r['share']):.0f}% | "  # type: ignore[arg-type]
                     f"{'' if real is None else f'{float(real):.2f}'} |")  # type: ignore[arg-type]
    return "\n".join(lines)
