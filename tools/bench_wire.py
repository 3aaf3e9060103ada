"""``braid bench wire``: cost of sealing and opening a DATA packet.

For a DATA packet with a 1400-byte payload it measures, in the same run:
- full send: ``Sealer.seal_data`` (header pack + AES-GMAC header tag +
  AES-GCM payload);
- full receive: ``Opener.open_untrusted`` (parse, checks, replay window,
  AES-GCM open, objects);
- bare send: one ``struct`` pack of the same header + one ``AESGCM.encrypt``
  of the payload; bare receive: one ``struct`` unpack + one ``AESGCM.decrypt``:
  the floor any Python codec with this cryptography pays;
- opening a trimmed header (AES-GMAC check only).
Ratios full/bare show what the codec adds; the target is at most 2x.
"""

from __future__ import annotations

import argparse
import os
import struct
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tools.bench_common import (
    environment,
    markdown_table,
    progress,
    text_table,
    time_callable,
    write_results,
)
from wire import Opener, ReplayWindow, Sealer, derive_connection_keys, trim_point
from wire.packets import COMMON, DATA_BODY

HELP = "seal/open rate of DATA packets vs bare struct + AES-GCM"
NAME = "wire"
TARGET_RATIO = 2.0

_HEADER = struct.Struct(COMMON.format + DATA_BODY.format.lstrip("!"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--payload", type=int, default=1400, metavar="BYTES",
        help="DATA payload size (default: 1400)",
    )
    parser.add_argument(
        "--batches", type=int, default=None,
        help="timed batches per measurement; the median is reported (default: 7, quick: 3)",
    )


def _keys() -> Any:
    return derive_connection_keys(
        bytes(range(32)), initiator_nonce=bytes(16), responder_nonce=bytes([1]) * 16,
        initiator_cid=1, responder_cid=2,
    )


def measure(payload_len: int, *, pool: int, batches: int, min_batch_s: float) -> dict[str, Any]:
    """Per-operation timings; every callable processes a pool of ``pool`` packets."""
    keys = _keys()
    send, _ = keys.for_initiator()
    _, recv = keys.for_responder()
    payload = os.urandom(payload_len)
    sealer = Sealer(send, dcid=2)

    def seal_one() -> bytes:
        return sealer.seal_data(
            psn=1000, ev=42, plane=1, msg_id=7, msg_offset=0, msg_len=payload_len,
            timestamp=123456, payload=payload,
        )

    def full_send() -> None:
        # The call itself, like bare_send's loop: no helper frame in between.
        seal = sealer.seal_data
        for _ in range(pool):
            seal(
                psn=1000, ev=42, plane=1, msg_id=7, msg_offset=0, msg_len=payload_len,
                timestamp=123456, payload=payload,
            )

    packets = [seal_one() for _ in range(pool)]
    cut = trim_point(packets[0])
    assert cut is not None
    trimmed = [p[:cut] for p in packets]
    opener = Opener(recv, replay_window=pool)

    def fresh_window() -> None:
        # Every pass reuses the same counters; a new window accepts them again.
        opener.replay = ReplayWindow(pool)

    def full_receive() -> None:
        fresh_window()
        open_ = opener.open_untrusted
        for p in packets:
            open_(p)

    def trimmed_receive() -> None:
        fresh_window()
        open_ = opener.open_untrusted
        for p in trimmed:
            open_(p)

    aead = AESGCM(send.payload)
    nonce = bytes(12)
    hdr_values = (1, 3, 0, 13, 2, 0, 0, 1, 1000, 42, 1, 0, payload_len, 7, 0, payload_len, 1)
    aad = _HEADER.pack(*hdr_values)
    ct = aead.encrypt(nonce, payload, aad)

    def bare_send() -> None:
        pack, enc = _HEADER.pack, aead.encrypt
        for _ in range(pool):
            enc(nonce, payload, pack(*hdr_values))

    def bare_receive() -> None:
        unpack, dec = _HEADER.unpack_from, aead.decrypt
        for p in packets:
            unpack(p, 0)
            dec(nonce, ct, aad)

    # Sanity: every pool really decodes (no replay or tag failure hides in the timing).
    full_receive()
    trimmed_receive()

    results: dict[str, Any] = {}
    for label, fn in (
        ("send_full", full_send), ("send_bare", bare_send),
        ("receive_full", full_receive), ("receive_bare", bare_receive),
        ("trimmed_open", trimmed_receive),
    ):
        progress(f"timing {label} ({batches} batches)")
        t = time_callable(fn, batches=batches, min_batch_s=min_batch_s)
        d = t.as_dict()
        for k in ("ns_per_op", "best_ns", "worst_ns"):
            d[k] /= pool
        d["ops_per_s"] *= pool
        results[label] = d
    return results


def summarise(t: dict[str, Any], payload_len: int) -> dict[str, Any]:
    def ns(k: str) -> float:
        return float(t[k]["ns_per_op"])

    out: dict[str, Any] = {"payload_bytes": payload_len, "target_ratio": TARGET_RATIO}
    for what, full, bare in (
        ("send", ns("send_full"), ns("send_bare")),
        ("receive", ns("receive_full"), ns("receive_bare")),
        ("round_trip", ns("send_full") + ns("receive_full"),
         ns("send_bare") + ns("receive_bare")),
    ):
        out[what] = {
            "full_ops_per_s": 1e9 / full, "bare_ops_per_s": 1e9 / bare,
            "full_ns": full, "bare_ns": bare, "ratio": full / bare,
        }
    out["trimmed_open"] = {"ops_per_s": 1e9 / ns("trimmed_open"), "ns": ns("trimmed_open")}
    out["timings"] = t
    return out


def _rows(s: dict[str, Any]) -> list[list[str]]:
    rows = []
    for what in ("send", "receive", "round_trip"):
        r = s[what]
        rows.append([
            what.replace("_", " "), f"{r['full_ops_per_s']:,.0f}", f"{r['bare_ops_per_s']:,.0f}",
            f"{r['full_ns'] / 1000:.2f}", f"{r['bare_ns'] / 1000:.2f}", f"{r['ratio']:.2f}x",
        ])
    tr = s["trimmed_open"]
    rows.append(["trimmed header open", f"{tr['ops_per_s']:,.0f}", "", f"{tr['ns'] / 1000:.2f}",
                 "", ""])
    return rows


HEADER = ["operation", "full ops/s", "bare ops/s", "full µs", "bare µs", "full/bare"]


def markdown(s: dict[str, Any], env: dict[str, Any]) -> str:
    verdict = "within" if s["round_trip"]["ratio"] <= TARGET_RATIO else "ABOVE"
    return (
        f"`braid bench wire`: DATA packet, {s['payload_bytes']}-byte payload, one core. "
        f"\"bare\" = one `struct` pack/unpack of the same header + one `AESGCM` "
        f"encrypt/decrypt of the payload. Round-trip ratio {s['round_trip']['ratio']:.2f}x, "
        f"{verdict} the {TARGET_RATIO:.0f}x target.\n\n"
        + markdown_table(HEADER, _rows(s))
        + f"\n\nMeasured {env['time']} on {env['machine']}, {env['cpus']} CPUs, "
        f"{env['system']}, Python {env['python']}, cryptography {env['cryptography']}; "
        "median of batches (see `results/wire.json` for spread)."
    )


def run(args: argparse.Namespace) -> int:
    quick = bool(getattr(args, "quick", False))
    batches = args.batches or (3 if quick else 7)
    env = environment()
    timings = measure(
        args.payload, pool=256 if quick else 2048, batches=batches,
        min_batch_s=0.01 if quick else 0.25,
    )
    s = summarise(timings, args.payload)
    data = {"bench": NAME, "quick": quick, "environment": env, **s}
    print(text_table(HEADER, _rows(s)))
    path = write_results(
        NAME, data, markdown(s, env), args.out,
        update_docs=bool(getattr(args, "update_docs", False)), docs=getattr(args, "docs", None),
    )
    progress(f"wrote {path}")
    return 0
