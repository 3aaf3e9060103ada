"""``braid bench wire``: cost of sealing and opening a DATA packet, both codecs.

For a DATA packet with a 1400-byte payload it measures, in the same run and
per packet (median and worst of several batches):
- the Python reference (``PySealer.seal_data``, ``PyOpener.open_data_untrusted``,
  the connection's receive fast path; ``open_untrusted``, which builds objects;
  a trimmed header);
- the C codec (``wire._fastwire``) called from Python once per packet, the
  same calls;
- the C codec per batch: ``seal_data_run`` (32 packets of one message on one
  EV into one GSO buffer) and ``open_data_many`` (a GRO batch of 32);
- the C codec's own loop (``_bench_fast``: seal + open in C, no Python per
  packet): the extension's floor;
- bare EVP in C (``_bench_bare_evp``): one AES-GCM seal of the payload with
  the header as AAD + one open, keyed contexts: the floor any codec of these
  bytes pays;
- bare ``cryptography`` from Python (one ``struct`` pack + ``AESGCM.encrypt``,
  one unpack + ``decrypt``): the floor of a pure-Python codec.
Ratios are against bare EVP; the target is a round trip (seal + open) at
most 1.5x bare EVP, reported for the extension's own loop, the per-packet
calls from Python and the batch calls. The format itself costs one extra
AES-GMAC per seal (the header tag) over bare EVP.

With the extension built it also measures the socket batch helpers on
loopback: reading a queue of datagrams with ``recvmsg_into`` per datagram
(as ``transport/aio.py`` does) against one ``_fastwire.drain`` (recvmmsg)
per 64, and sending a 32-packet run sealed one by one + one ``sendmsg`` with
GSO against ``seal_data_run`` + ``send_gso``.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tools.bench.common import (
    environment,
    git_commit,
    markdown_table,
    progress,
    text_table,
    time_callable,
    write_results,
)
from wire import derive_connection_keys, trim_point
from wire.codec import PyOpener, PyReplayWindow, PySealer, c_classes
from wire.packets import COMMON, DATA_BODY

HELP = "seal/open rate of DATA packets, Python and C codecs, vs bare AES-GCM"
NAME = "wire"
#: ``--batches`` only sets how many timed batches the median is taken over.
SAME_MEASUREMENT = ("batches",)
TARGET_RATIO = 1.5
RUN = 32

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


Timer = Callable[[str, Callable[[], object], int], None]
RoundTimer = Callable[[str, Callable[[], object], Callable[[], object], int], None]


def _codec(timer: Timer, impl: str, sealer_cls: Any, opener_cls: Any, window_cls: Any,
           payload: bytes, pool: int) -> None:
    """seal_data, open_data_untrusted, open_untrusted and a trimmed open, one per call."""
    keys = _keys()
    send, _ = keys.for_initiator()
    _, recv = keys.for_responder()
    plen = len(payload)
    sealer = sealer_cls(send, dcid=2)

    def send_one() -> None:
        seal = sealer.seal_data
        for _ in range(pool):
            seal(1000, 42, 1, 7, 0, plen, 123456, payload, 0)

    packets = [sealer.seal_data(1000, 42, 1, 7, 0, plen, 123456, payload) for _ in range(pool)]
    cut = trim_point(packets[0])
    assert cut is not None
    trimmed = [p[:cut] for p in packets]
    opener = opener_cls(recv, replay_window=pool)

    def opening(method: str, dgrams: list[bytes]) -> Callable[[], None]:
        def fn() -> None:
            opener.replay = window_cls(pool)  # the same counters again: a fresh window
            open_ = getattr(opener, method)
            for p in dgrams:
                open_(p)
        return fn

    for fn in (opening("open_data_untrusted", packets), opening("open_untrusted", trimmed)):
        fn()  # sanity: every packet opens (no replay or tag failure hides in the timing)
    timer(f"{impl}.send", send_one, pool)
    timer(f"{impl}.receive", opening("open_data_untrusted", packets), pool)
    timer(f"{impl}.receive_objects", opening("open_untrusted", packets), pool)
    timer(f"{impl}.trimmed_open", opening("open_untrusted", trimmed), pool)


def _c_batches(timer: Timer, payload: bytes, pool: int) -> None:
    """The C codec's batch calls and its own loop, and bare EVP."""
    from wire import _fastwire

    c = c_classes()
    assert c is not None
    sealer_cls, opener_cls, window_cls = c
    keys = _keys()
    send, _ = keys.for_initiator()
    _, recv = keys.for_responder()
    plen = len(payload)
    runs = max(1, pool // RUN)
    message = payload * RUN
    sealer = sealer_cls(send, dcid=2)

    def send_runs() -> None:
        seal_run = sealer.seal_data_run
        for _ in range(runs):
            seal_run(1000, 42, 1, 7, 0, len(message), 123456, message, plen)

    buffers = [sealer.seal_data_run(1000, 42, 1, 7, 0, len(message), 123456, message, plen)
               for _ in range(runs)]
    opener = opener_cls(recv, replay_window=runs * RUN)

    def receive_many() -> None:
        opener.replay = window_cls(runs * RUN)
        open_many = opener.open_data_many
        for buf, _n, size in buffers:
            open_many(buf, size)

    check = opener_cls(recv, replay_window=runs * RUN)
    for buf, n, size in buffers:  # sanity: every packet opens
        assert [type(r) for r in check.open_data_many(buf, size)] == [tuple] * n
    timer("c.send_run", send_runs, runs * RUN)
    timer("c.receive_many", receive_many, runs * RUN)

    def loop() -> None:
        s, o = sealer_cls(send, dcid=2), opener_cls(recv, replay_window=pool)
        _fastwire._bench_fast(s, o, pool, payload)

    timer("c.loop", loop, pool)
    timer("bare_evp", lambda: _fastwire._bench_bare_evp(pool, plen), pool)


def _bare_python(timer: Timer, payload: bytes, pool: int) -> None:
    send, _ = _keys().for_initiator()
    plen = len(payload)
    aead = AESGCM(send.payload)
    nonce = bytes(12)
    hdr_values = (1, 3, 0, 13, 2, 0, 0, 1, 1000, 42, 1, 0, plen, 7, 0, plen, 1)
    aad = _HEADER.pack(*hdr_values)
    ct = aead.encrypt(nonce, payload, aad)

    def bare_send() -> None:
        pack, enc = _HEADER.pack, aead.encrypt
        for _ in range(pool):
            enc(nonce, payload, pack(*hdr_values))

    def bare_receive() -> None:
        unpack, dec = _HEADER.unpack_from, aead.decrypt
        for _ in range(pool):
            unpack(aad, 0)
            dec(nonce, ct, aad)

    timer("bare_cryptography.send", bare_send, pool)
    timer("bare_cryptography.receive", bare_receive, pool)


def _udp_pair() -> tuple[socket.socket, socket.socket]:
    from transport.udp import SO_RCVBUFFORCE, SO_SNDBUFFORCE

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx.bind(("127.0.0.1", 0))
    for s, opt, force in ((rx, socket.SO_RCVBUF, SO_RCVBUFFORCE),
                          (tx, socket.SO_SNDBUF, SO_SNDBUFFORCE)):
        try:
            s.setsockopt(socket.SOL_SOCKET, force, 8 << 20)
        except OSError:  # not root: as large as the system allows
            s.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.setblocking(False)
    return rx, tx


def _io(timer: Timer, timer_rounds: RoundTimer, payload: bytes, queue: int) -> None:
    """Loopback: drain ``queue`` queued datagrams; send a 32-packet run."""
    from transport.udp import RX_ANC_SPACE
    from wire import _fastwire

    c = c_classes()
    assert c is not None
    rx, tx = _udp_pair()
    dest = rx.getsockname()
    dgram = bytes(len(payload) + 84)
    buf = bytearray(65536)
    bufs = [buf]
    big = bytearray(_fastwire.DRAIN_MAX * 2048)
    rxfd = rx.fileno()

    def fill() -> None:
        for _ in range(queue):
            tx.sendto(dgram, dest)
        select.select([rx], [], [], 1.0)

    def python_drain() -> None:
        got = 0
        recv = rx.recvmsg_into
        while True:
            try:
                _n, anc, _f, _addr = recv(bufs, RX_ANC_SPACE)
            except BlockingIOError:
                break
            for _level, _type, cdata in anc:  # what aio._drain reads of each datagram
                if cdata:
                    _tos = cdata[0]
            got += 1
        assert got == queue, got

    def c_drain() -> None:
        got = 0
        drain = _fastwire.drain
        while rows := drain(rxfd, big, 2048):
            got += len(rows)
        assert got == queue, got

    try:
        # Each drain reads a freshly filled queue; only the drain is timed.
        for label, fn in (("io.python_drain", python_drain), ("io.c_drain", c_drain)):
            timer_rounds(label, fill, fn, queue)

        sealer_cls = c[0]
        send, _ = _keys().for_initiator()
        plen = len(payload)
        message = payload * RUN
        py_sealer, c_sealer = PySealer(send, dcid=2), sealer_cls(send, dcid=2)
        seg = len(payload) + 84
        gso = [(17, 103, struct.pack("H", seg))]

        def python_send() -> None:
            seal = py_sealer.seal_data
            dgrams = [seal(1000 + i, 42, 1, 7, i * plen, len(message), 1, payload, 0)
                      for i in range(RUN)]
            tx.sendmsg(dgrams, gso, 0, dest)
            rx_flush()

        def c_send() -> None:
            buf_, _n, size = c_sealer.seal_data_run(1000, 42, 1, 7, 0, len(message), 1,
                                                   message, plen)
            _fastwire.send_gso(tx.fileno(), buf_, size, dest, None)
            rx_flush()

        def rx_flush() -> None:
            while True:
                try:
                    rx.recv(65536)
                except BlockingIOError:
                    break

        try:
            c_send()
            python_send()
        except OSError as exc:
            progress(f"no UDP GSO here ({exc}): send not measured")
            return
        timer("io.python_send_run", python_send, RUN)
        timer("io.c_send_run", c_send, RUN)
    finally:
        rx.close()
        tx.close()


def measure(payload_len: int, *, pool: int, batches: int, min_batch_s: float,
            io: bool = True) -> dict[str, Any]:
    """Per-packet timings (``ns_per_op`` is per packet)."""
    payload = os.urandom(payload_len)
    results: dict[str, Any] = {}

    def timer(label: str, fn: Callable[[], object], per: int) -> None:
        progress(f"timing {label} ({batches} batches)")
        t = time_callable(fn, batches=batches, min_batch_s=min_batch_s)
        d = t.as_dict()
        for k in ("ns_per_op", "best_ns", "worst_ns"):
            d[k] /= per
        d["ops_per_s"] *= per
        results[label] = d

    def timer_rounds(label: str, prepare: Callable[[], object], fn: Callable[[], object],
                     per: int) -> None:
        """Like ``timer``, with an untimed ``prepare()`` before every call."""
        progress(f"timing {label} ({batches} batches)")
        rounds = max(3, int(min_batch_s * 200))
        samples = []
        for _ in range(batches):
            total = 0
            for _ in range(rounds):
                prepare()
                t0 = time.perf_counter_ns()
                fn()
                total += time.perf_counter_ns() - t0
            samples.append(total / (rounds * per))
        results[label] = {"ns_per_op": statistics.median(samples), "best_ns": min(samples),
                          "worst_ns": max(samples), "ops_per_s": 1e9 / statistics.median(samples),
                          "batches": batches, "calls_per_batch": rounds}

    _codec(timer, "python", PySealer, PyOpener, PyReplayWindow, payload, pool)
    c = c_classes()
    if c is not None:
        _codec(timer, "c", *c, payload, pool)
        _c_batches(timer, payload, pool)
        if io:
            _io(timer, timer_rounds, payload, 64)
    else:
        progress("wire._fastwire is not built: the C codec is not measured")
    _bare_python(timer, payload, pool)
    return results


#: Table rows: label, send timing, receive timing (None: a round trip in one).
_ROWS: list[tuple[str, str, str | None]] = [
    ("Python reference, per call", "python.send", "python.receive"),
    ("C, per call from Python", "c.send", "c.receive"),
    (f"C, batch of {RUN} (seal_data_run, open_data_many)", "c.send_run", "c.receive_many"),
    ("C, loop in C (_bench_fast)", "c.loop", None),
    ("bare EVP in C (seal + open)", "bare_evp", None),
    ("bare cryptography from Python", "bare_cryptography.send", "bare_cryptography.receive"),
]


def summarise(t: dict[str, Any], payload_len: int) -> dict[str, Any]:
    out: dict[str, Any] = {"payload_bytes": payload_len, "target_ratio": TARGET_RATIO}
    bare = t.get("bare_evp")
    rows: dict[str, Any] = {}
    for label, send, recv in _ROWS:
        if send not in t or (recv is not None and recv not in t):
            continue
        rt = t[send]["ns_per_op"] + (t[recv]["ns_per_op"] if recv else 0.0)
        worst = t[send]["worst_ns"] + (t[recv]["worst_ns"] if recv else 0.0)
        rows[label] = {
            "send_ns": t[send]["ns_per_op"] if recv else None,
            "receive_ns": t[recv]["ns_per_op"] if recv else None,
            "round_trip_ns": rt, "round_trip_max_ns": worst,
            "ratio_to_bare_evp": rt / bare["ns_per_op"] if bare else None,
        }
    out["rows"] = rows
    for impl in ("python", "c"):
        if f"{impl}.receive_objects" in t:
            out[f"{impl}_open_untrusted_ns"] = t[f"{impl}.receive_objects"]["ns_per_op"]
            out[f"{impl}_trimmed_open_ns"] = t[f"{impl}.trimmed_open"]["ns_per_op"]
    if "c.send" in t:
        out["c_vs_python_round_trip"] = (
            rows["Python reference, per call"]["round_trip_ns"]
            / rows["C, per call from Python"]["round_trip_ns"])
    fast = rows.get(_ROWS[2][0])
    #: The batch calls: what a sender sealing a run and a receiver opening a GRO batch pay.
    out["fast_path_ratio"] = None if fast is None else fast["ratio_to_bare_evp"]
    if "io.c_drain" in t:
        out["io"] = {
            "python_drain_ns": t["io.python_drain"]["ns_per_op"],
            "c_drain_ns": t["io.c_drain"]["ns_per_op"],
        }
        out["io"]["drain_gain"] = out["io"]["python_drain_ns"] / max(out["io"]["c_drain_ns"],
                                                                     1e-9)
        if "io.c_send_run" in t:
            out["io"]["python_send_run_ns"] = t["io.python_send_run"]["ns_per_op"]
            out["io"]["c_send_run_ns"] = t["io.c_send_run"]["ns_per_op"]
            out["io"]["send_run_gain"] = (t["io.python_send_run"]["ns_per_op"]
                                          / t["io.c_send_run"]["ns_per_op"])
    out["timings"] = t
    return out


def _us(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1000:.2f}"


def _rows(s: dict[str, Any]) -> list[list[str]]:
    rows = []
    for label, r in s["rows"].items():
        ratio = r["ratio_to_bare_evp"]
        rows.append([label, _us(r["send_ns"]), _us(r["receive_ns"]), _us(r["round_trip_ns"]),
                     _us(r["round_trip_max_ns"]), "" if ratio is None else f"{ratio:.2f}x"])
    return rows


HEADER = ["per DATA packet", "seal µs", "open µs", "seal + open µs", "max µs", "× bare EVP"]


def markdown(s: dict[str, Any], env: dict[str, Any], commit: str) -> str:
    fast = s["fast_path_ratio"]
    if fast is None:
        verdict = "the C codec was not built, so only the Python reference is measured"
    else:
        loop = s["rows"][_ROWS[3][0]]["ratio_to_bare_evp"]
        percall = s["rows"][_ROWS[1][0]]["ratio_to_bare_evp"]

        def vs(r: float) -> str:
            return f"{r:.2f}x ({'within' if r <= TARGET_RATIO else 'ABOVE'} the target)"

        verdict = (f"seal + open against bare EVP, target {TARGET_RATIO}x: the extension's own "
                   f"loop {vs(loop)}, called from Python per packet {vs(percall)}, per batch "
                   f"{vs(fast)}; C per call is {s['c_vs_python_round_trip']:.1f}x faster than "
                   "the Python reference")
    extra = []
    for impl in ("python", "c"):
        if f"{impl}_open_untrusted_ns" in s:
            extra.append(f"{impl}: `open_untrusted` (objects) {_us(s[f'{impl}_open_untrusted_ns'])}"
                         f" µs, trimmed header {_us(s[f'{impl}_trimmed_open_ns'])} µs")
    io = s.get("io")
    if io:
        line = (f"loopback, 64 queued datagrams: `recvmsg_into` per datagram "
                f"{_us(io['python_drain_ns'])} µs vs `drain` (recvmmsg) "
                f"{_us(io['c_drain_ns'])} µs per datagram ({io['drain_gain']:.1f}x)")
        if "send_run_gain" in io:
            line += (f"; a {RUN}-packet run sealed one by one + one GSO `sendmsg` "
                     f"{_us(io['python_send_run_ns'])} µs vs `seal_data_run` + `send_gso` "
                     f"{_us(io['c_send_run_ns'])} µs per packet ({io['send_run_gain']:.1f}x)")
        extra.append(line)
    return (
        f"`braid bench wire`: DATA packet, {s['payload_bytes']}-byte payload, one core, "
        f"per packet; median of batches, max = the worst batch. Bare EVP = one AES-GCM "
        f"seal of the payload with the header as AAD + one open, in C with keyed "
        f"contexts. {verdict[0].upper()}{verdict[1:]}.\n\n"
        + markdown_table(HEADER, _rows(s))
        + "\n\n" + "".join(f"- {e}\n" for e in extra)
        + f"\nMeasured at commit {commit} on {env['time'][:10]} ({env['time']}), "
        f"{env['machine']}, {env['cpus']} CPUs, {env['system']}, Python {env['python']}, "
        f"cryptography {env['cryptography']} (see `results/wire.json` for every timing)."
    )


def run(args: argparse.Namespace) -> int:
    quick = bool(getattr(args, "quick", False))
    batches = args.batches or (3 if quick else 7)
    env = environment()
    commit = git_commit()
    timings = measure(
        args.payload, pool=256 if quick else 2048, batches=batches,
        min_batch_s=0.01 if quick else 0.25,
    )
    s = summarise(timings, args.payload)
    data = {"bench": NAME, "quick": quick, "environment": env, "commit": commit, **s}
    print(text_table(HEADER, _rows(s)))
    path = write_results(
        NAME, data, markdown(s, env, commit), args.out,
        update_docs=bool(getattr(args, "update_docs", False)), docs=getattr(args, "docs", None),
    )
    progress(f"wrote {path}")
    return 0
