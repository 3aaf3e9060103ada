"""A long fuzz job against the wire decoders and a live ``Endpoint`` (not in CI).

    python -m tools.robustness.fuzz --inputs 1000000 [--seed 1] [--impl c|python] \
        [--out results/fuzz.json]

An off-path attacker's view: a corpus of real datagrams (INIT, ACCEPT, DATA,
SACK, NACK, PROBE, CLOSE, trimmed DATA) captured from a sans-I/O endpoint
pair, then mutated (bit flips, byte writes, truncation, extension, splices,
header fields retargeted at the live connection id, exact replays, random
bytes). Each input goes through the decoders (``peek_untrusted``,
``HandshakeCodec.open_untrusted``, the live connection's opener via the
endpoint) and into the victim ``Endpoint``; the victim's connection keeps
carrying real messages between the inputs, checked byte-exact.

``--impl`` picks the wire codec for the whole run (endpoint included): ``c``
(the compiled ``wire._fastwire``) or ``python`` (the reference; the job
re-executes itself with ``BRAID_PURE=1``). On the C codec every input also
goes to a C opener and a Python opener with the live connection's keys
(``open_data_untrusted``, and ``open_data_many`` on batches of 16 inputs
cut at a random segment size): they must take the same decision.

Pass criteria: no exception from ``receive_datagram`` at all, only
``WireError`` from the decoders, every real message delivered intact, the
two codecs agreeing, and no state growth (connections, INIT nonces,
reassembly buffers, in-flight table, drop-counter keys), reported with the
process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from transport.config import ConnectionConfig
from transport.datagram import RxInfo
from transport.endpoint import Endpoint
from transport.events import MessageDelivered
from wire import HandshakeCodec, WireError, codec, peek_untrusted
from wire.constants import HEADER_TAG_LEN, PacketType, trim_point

SECRET = bytes(range(32))
CFG = ConnectionConfig(planes=2, evs_per_plane=8, plane_rate=1.25e9, initial_rtt=100e-6,
                       min_rto=1e-3, handshake_timeout=0.05, idle_fail_timeout=1e9,
                       max_rto_retries=1 << 30)
STEP = 10e-6


class Pair:
    """Two endpoints, datagrams moved in virtual time; b is the fuzz victim."""

    def __init__(self, seed: int) -> None:
        self.a = Endpoint(config=CFG, secret=SECRET, rng=random.Random(seed))
        self.b = Endpoint(config=CFG, secret=SECRET, rng=random.Random(seed + 1))
        self.now = 0.0
        self.corpus: list[bytes] = []
        self.delivered: list[bytes] = []

    def step(self, capture: bool = False) -> None:
        self.now += STEP
        for src, dst, name in ((self.a, self.b, "a"), (self.b, self.a, "b")):
            for _peer, data, path in src.datagrams_to_send(self.now):
                if capture:
                    self.corpus.append(data)
                dst.receive_datagram(data, RxInfo(path.plane), self.now, name)
            t = src.next_timer()
            if t is not None and t <= self.now:
                src.handle_timer(self.now)
        while (item := self.b.next_event()) is not None:
            if isinstance(item[1], MessageDelivered):
                self.delivered.append(item[1].data)
        while self.a.next_event() is not None:
            pass
        self.a.reap()
        self.b.reap()

    def run_until(self, cond: Any, steps: int = 100_000, capture: bool = False) -> None:
        for _ in range(steps):
            self.step(capture)
            if cond():
                return
        raise RuntimeError("the legitimate pair stalled")


def mutate(rng: random.Random, corpus: list[bytes], live_cid: int) -> tuple[str, bytes]:
    src = bytearray(rng.choice(corpus))
    kind = rng.randrange(10)
    if kind == 0:
        return "replay", bytes(src)
    if kind == 1:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(src) * 8)
            src[i >> 3] ^= 1 << (i & 7)
        return "bitflip", bytes(src)
    if kind == 2:
        for _ in range(rng.randint(1, 4)):
            src[rng.randrange(len(src))] = rng.choice((0, 0xFF, rng.randrange(256)))
        return "bytes", bytes(src)
    if kind == 3:
        return "truncate", bytes(src[: rng.randrange(len(src) + 1)])
    if kind == 4:
        return "extend", bytes(src) + rng.randbytes(rng.randint(1, 64))
    if kind == 5:
        other = rng.choice(corpus)
        cut = rng.randrange(min(len(src), len(other)) + 1)
        return "splice", bytes(src[:cut]) + other[cut:]
    if kind == 6:  # aim a mutated header at the live connection
        if len(src) >= 8:
            src[4:8] = live_cid.to_bytes(4, "big")
            src[rng.randrange(8, len(src))] ^= 1 << rng.randrange(8)
        return "retarget", bytes(src)
    if kind == 7:  # header fields: type, flags, length words
        if len(src) >= 4:
            i = rng.randrange(1, 4)
            src[i] = rng.randrange(256)
        return "fields", bytes(src)
    if kind == 8:  # a trim at a wrong point
        tp = trim_point(src)
        cut = rng.randrange(len(src) + 1) if tp is None else max(0, tp + rng.randint(-8, 8))
        return "trim", bytes(src[:cut])
    return "random", rng.randbytes(rng.randint(0, 200))


def _state(p: Pair) -> dict[str, int]:
    conns = list(p.b.connections.values())
    return {
        "connections": len(conns),
        "init_nonces": len(p.b._init_nonce),
        "reassembly": sum(c.receiver.messages_in_progress for c in conns),
        "inflight": sum(len(c.sender.inflight) for c in conns),
        "drop_kinds": len(p.b.drops) + sum(len(c.dropped) for c in conns),
    }


def _decision(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args))
    except WireError as exc:
        return ("wire", exc.reason)


class Twins:
    """A C and a Python opener with the same keys: every input to both."""

    def __init__(self, keys: Any) -> None:
        c = codec.c_classes()
        assert c is not None
        self.c = c[1](keys)
        self.py = codec.PyOpener(keys)
        self.pending: list[bytes] = []
        self.checked = 0

    def feed(self, rng: random.Random, data: bytes, failures: list[str]) -> None:
        self.checked += 1
        try:
            got = _decision(self.c.open_data_untrusted, data)
        except Exception:  # only WireError may escape
            failures.append(f"C opener: {data.hex()}\n{traceback.format_exc()}")
            return
        want = _decision(self.py.open_data_untrusted, data)
        if got != want or self.c.replay.highest != self.py.replay.highest:
            failures.append(f"C {got!r} != Python {want!r}: {data.hex()}")
        self.pending.append(data)
        if len(self.pending) < 16:
            return
        # A GRO batch of unrelated inputs, cut at a random segment size.
        blob = b"".join(self.pending)
        self.pending.clear()
        seg = rng.randint(1, 200)
        try:
            many = self.c.open_data_many(blob, seg)
        except Exception:
            failures.append(f"C open_data_many({seg}): {blob.hex()}\n{traceback.format_exc()}")
            return
        one = [_decision(self.py.open_data_untrusted, blob[i:i + seg])
               for i in range(0, len(blob), seg)]
        conv = [("wire", r.reason) if isinstance(r, WireError) else ("ok", r) for r in many]
        if conv != one:
            failures.append(f"C open_data_many({seg}) differs: {blob.hex()}")


def run(inputs: int, seed: int, progress: bool = False) -> dict[str, Any]:
    rng = random.Random(seed)
    p = Pair(seed)
    conn = p.a.connect("b", p.now)
    for i in range(8):  # a real exchange, captured: the corpus
        conn.send_message(rng.randbytes(1 + 2000 * i))
    p.run_until(lambda: len(p.delivered) == 8, capture=True)
    close_probe = Pair(seed + 7)  # a CLOSE and an INIT/ACCEPT of another pair too
    c2 = close_probe.a.connect("b", 0.0)
    c2.send_message(b"x" * 3000)
    close_probe.run_until(lambda: bool(close_probe.delivered), capture=True)
    c2.close(close_probe.now)
    close_probe.run_until(lambda: not close_probe.a.connections, capture=True)
    corpus = p.corpus + close_probe.corpus
    trimmed = [d[: tp + HEADER_TAG_LEN] for d in corpus
               if (tp := trim_point(d)) is not None and tp + HEADER_TAG_LEN < len(d)]
    corpus += trimmed
    (victim,) = p.b.connections.values()
    live_cid = victim.local_cid
    twins = Twins(victim._opener_keys) if codec.IMPLEMENTATION == "c" else None
    hs = HandshakeCodec(SECRET)
    start_state = _state(p)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kinds: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    failures: list[str] = []
    sent_real: list[bytes] = []
    t0 = time.monotonic()
    for n in range(inputs):
        kind, data = mutate(rng, corpus, live_cid)
        kinds[kind] += 1
        try:
            h = peek_untrusted(data)
            if h.ptype in (PacketType.INIT, PacketType.ACCEPT):
                hs.open_untrusted(data, h)
        except WireError as exc:
            errors[exc.reason] += 1
        except Exception:  # a decoder may raise only WireError
            failures.append(f"decoder, {kind}: {data.hex()}\n{traceback.format_exc()}")
        if twins is not None:
            twins.feed(rng, data, failures)
        try:
            if n % 2:
                # The I/O adapter's path for a (spoofed) configured source.
                p.b.receive_datagrams((memoryview(data),), RxInfo(rng.randrange(2)), p.now,
                                      "b-attacker")
            else:
                p.b.receive_datagram(data, RxInfo(rng.randrange(2)), p.now, "b-attacker")
        except Exception:  # the endpoint may raise nothing at all
            failures.append(f"endpoint, {kind}: {data.hex()}\n{traceback.format_exc()}")
        if n % 64 == 0:
            p.step()
        if n % 5000 == 0:
            msg = rng.randbytes(rng.randint(1, 20000))
            sent_real.append(msg)
            conn.send_message(msg)
        if progress and n % 100_000 == 0 and n:
            print(f"{n} inputs, {time.monotonic() - t0:.0f} s, failures {len(failures)}",
                  file=sys.stderr, flush=True)
        if len(failures) >= 20:
            break
    want = 8 + len(sent_real)
    p.run_until(lambda: len(p.delivered) >= want)
    elapsed = time.monotonic() - t0
    intact = p.delivered[8:] == sent_real
    end_state = _state(p)
    return {
        "inputs": n + 1, "seed": seed, "seconds": round(elapsed, 1),
        "codec": codec.IMPLEMENTATION,
        "c_vs_python_checked": 0 if twins is None else twins.checked,
        "inputs_per_second": round((n + 1) / elapsed),
        "exceptions": len(failures), "first_failures": failures[:3],
        "mutations": dict(sorted(kinds.items())),
        "decoder_wire_errors": dict(errors.most_common()),
        "endpoint_drops": dict(sorted(p.b.drops.items())),
        "connection_drops": dict(sorted(victim.dropped.items())),
        "real_messages": len(sent_real), "real_messages_intact": intact,
        "victim_state": victim.state.value,
        "state_before": start_state, "state_after": end_state,
        "peak_rss_kib_before": rss0,
        "peak_rss_kib_after": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--impl", choices=("c", "python"), default=None,
                    help="wire codec for the whole run (default: the one in use)")
    a = ap.parse_args(argv)
    if a.impl == "python" and codec.IMPLEMENTATION != "python":
        # The codec is chosen at import: start again on the reference.
        os.environ["BRAID_PURE"] = "1"
        args = sys.argv[1:] if argv is None else argv
        os.execv(sys.executable, [sys.executable, "-m", "tools.robustness.fuzz", *args])
    if a.impl == "c" and codec.IMPLEMENTATION != "c":
        print("the C codec is not in use (not built, or BRAID_PURE is set)", file=sys.stderr)
        return 2
    res = run(a.inputs, a.seed, a.progress)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    ok = res["exceptions"] == 0 and res["real_messages_intact"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
