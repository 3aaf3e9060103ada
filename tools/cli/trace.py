"""``braid trace``: capture, decode, stats and plot Braid traffic.

Subcommands: ``capture`` (tcpdump or a pure-Python AF_PACKET writer, in any
namespace), ``decode`` (one line or JSON object per packet), ``stats`` (per
connection, plane and EV), ``plot`` (PNG from a pcap or a qlog file).
See docs/trace.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tools.common.errors import UserError
from tools.trace.pcapio import PcapError


def register(subparsers: Any) -> None:
    trace = subparsers.add_parser(
        "trace", help="capture, decode, summarise and plot Braid traffic",
        description="Capture, decode, summarise and plot Braid traffic (see docs/trace.md).",
    )
    sub = trace.add_subparsers(dest="trace_command", metavar="ACTION")
    trace.set_defaults(func=lambda _a: (trace.print_help(), 0)[1])

    cap = sub.add_parser("capture", help="capture Braid packets to pcap (tcpdump or AF_PACKET)")
    cap.add_argument("--host", help="testbed host (namespace resolved from the running testbed)")
    cap.add_argument("--plane", type=int, help="plane of --host to capture (interface p<N>)")
    cap.add_argument("--testbed", help="testbed name (default: the only one running)")
    cap.add_argument("--all", action="store_true",
                     help="every host interface of the running testbed, one pcap each")
    cap.add_argument("--netns", help="network namespace to capture in")
    cap.add_argument("--iface", help="interface (default: all interfaces)")
    cap.add_argument("-o", "--output", required=True,
                     help="pcap file (with --all: a directory, or a prefix)")
    cap.add_argument("--duration", type=float, help="stop after S seconds")
    cap.add_argument("--count", type=int, help="stop after N packets")
    cap.add_argument("--port", type=int, default=None, help="UDP port (default 4747)")
    cap.add_argument("--backend", choices=("auto", "tcpdump", "afpacket"), default="auto",
                     help="capture program (auto: tcpdump when installed)")
    cap.set_defaults(func=_capture)

    dec = sub.add_parser("decode", help="one line per Braid packet")
    dec.add_argument("file", type=Path)
    _key_args(dec)
    dec.add_argument("--json", action="store_true", help="one JSON object per line")
    dec.add_argument("--limit", type=int, help="stop after N packets")
    dec.set_defaults(func=_decode)

    st = sub.add_parser("stats", help="per connection / plane / EV statistics")
    st.add_argument("file", type=Path)
    st.add_argument("--json", action="store_true")
    _key_args(st)
    st.add_argument("--max-evs", type=int, default=40, help="EV rows in the text table")
    st.set_defaults(func=_stats)

    pl = sub.add_parser("plot", help="PSN vs time, per-plane throughput, events (pcap or qlog)")
    pl.add_argument("file", type=Path)
    pl.add_argument("-o", "--output", type=Path, required=True, help="PNG file")
    pl.add_argument("--title", help="figure title (default: the file name)")
    pl.set_defaults(func=_plot)


def _key_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", type=Path, help="cluster key file: verify tags, open payloads "
                   "(needs the connection's handshake in the capture)")
    p.add_argument("--keylog", type=Path, metavar="FILE",
                   help="key log of 'braid daemon --keylog': verify and open packets of any "
                   "plane, without the handshake in the capture")
    p.add_argument("--testbed", nargs="?", const="", metavar="NAME",
                   help="use the key and key log of a running testbed's daemons (braid "
                   "testbed daemons up); NAME defaults to the only testbed up")


def _testbed_keys(name: str) -> tuple[Path, Path | None]:
    from testbed.cli import _default_name
    from testbed.daemons import KEY_FILE, KEYLOG_FILE
    from testbed.state import DEFAULT_RUN_ROOT

    run_dir = DEFAULT_RUN_ROOT / _default_name(name or None)
    key, log = run_dir / KEY_FILE, run_dir / KEYLOG_FILE
    if not key.exists():
        raise UserError(f"testbed {run_dir.name!r} has no key ({key}): is it up?")
    return key, (log if log.exists() else None)


def _verifier(args: argparse.Namespace) -> Any:
    if args.testbed is not None:
        key, log = _testbed_keys(args.testbed)
        args.key = args.key or key
        args.keylog = args.keylog or log
    if args.key is None and args.keylog is None:
        return None
    from tools.trace.keyring import KeyRing
    from wire.keylog import KeyLogError
    from wire.keys import KeyFileError

    try:
        return KeyRing.from_files(args.key, args.keylog)
    except (KeyFileError, KeyLogError) as exc:
        raise UserError(str(exc)) from None


def _need_file(path: Path) -> None:
    if not path.is_file():
        raise UserError(f"{path}: no such file")


def _decode(args: argparse.Namespace) -> int:
    from tools.trace.decode import Verifier, format_line, read_packets, to_json

    _need_file(args.file)
    verifier: Verifier | None = _verifier(args)
    out = sys.stdout
    t0: float | None = None
    try:
        for n, pkt in enumerate(read_packets(args.file, verifier=verifier), 1):
            if t0 is None:
                t0 = pkt.time
            out.write((json.dumps(to_json(pkt)) if args.json else format_line(pkt, t0)) + "\n")
            if args.limit is not None and n >= args.limit:
                break
    except PcapError as exc:
        raise UserError(str(exc)) from None
    except BrokenPipeError:
        sys.stderr.close()  # `braid trace decode x.pcap | head` is fine
    return 0


def _stats(args: argparse.Namespace) -> int:
    from tools.trace.decode import read_packets
    from tools.trace.report import format_text
    from tools.trace.stats import TraceStats

    _need_file(args.file)
    try:
        stats = TraceStats().add_all(read_packets(args.file, verifier=_verifier(args)))
    except PcapError as exc:
        raise UserError(str(exc)) from None
    data = stats.to_json()
    print(json.dumps(data, indent=1) if args.json else format_text(data, max_evs=args.max_evs))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from tools.trace.plot import plot_file
    from tools.trace.qlog import QlogError

    _need_file(args.file)
    try:
        n = plot_file(args.file, args.output, title=args.title)
    except (PcapError, QlogError) as exc:
        raise UserError(str(exc)) from None
    print(f"{args.output}: {n} events plotted")
    return 0


def _capture(args: argparse.Namespace) -> int:
    from tools.trace.capture import run_capture_command

    return run_capture_command(args)
