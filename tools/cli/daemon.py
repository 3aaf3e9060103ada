"""``braid daemon``: run the per-host Braid daemon (see docs/daemon.md)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from tools.common.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "daemon",
        help="run the per-host daemon (peers, planes, local control socket)",
        description="Run Braid on this host: one UDP socket set per plane, authenticated "
        "connections to the configured peers, and a Unix control socket (mode 0600) for "
        "'braid send/recv/stats' and the Python API. SIGTERM drains gracefully.",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="daemon TOML config")
    p.add_argument("--qlog", metavar="FILE",
                   help="write a qlog-style JSON-lines event log (sends, ACKs, NACKs, trims, "
                   "retransmissions, EV states, cwnd)")
    p.add_argument("--keylog", metavar="FILE",
                   help="append every connection's traffic keys to FILE (mode 0600), like "
                   "SSLKEYLOGFILE: 'braid trace decode --keylog FILE' then opens captures of "
                   "any plane without their handshake (also: keylog = \"FILE\" in the config)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run)


def _qlog_factory(path: str, title: str) -> Any:
    """One small function so the writer can be swapped."""
    def make() -> Any:
        try:
            from tools.trace.qlog import QlogWriter
        except ImportError:  # pragma: no cover - the trace tools are part of the repo
            return _JsonLines(path, time.monotonic())
        return QlogWriter(path, title=title, time_origin=time.monotonic())
    return make


class _JsonLines:
    """Fallback writer: {"time", "name", "data"} per line."""

    def __init__(self, path: str, origin: float) -> None:
        self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._origin = origin

    def event(self, time: float, name: str, **data: Any) -> None:
        import json

        self._f.write(json.dumps({"time": round(time - self._origin, 9), "name": name,
                                  "data": data}) + "\n")

    def close(self) -> None:
        self._f.close()


def run(args: argparse.Namespace) -> int:
    from transport.daemon import (
        ConfigError,
        DaemonError,
        Log,
        load_config,
        load_secret,
        run_daemon,
    )

    try:
        cfg = load_config(args.config)
        secret = load_secret(cfg)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if args.keylog:
        from pathlib import Path

        cfg.keylog = Path(args.keylog)
    if args.qlog:
        try:
            open(args.qlog, "a").close()
        except OSError as exc:
            raise UserError(f"cannot write qlog {args.qlog}: {exc.strerror}") from None
    factory = _qlog_factory(args.qlog, f"braid daemon {cfg.name}") if args.qlog else None
    try:
        return run_daemon(cfg, secret=secret, log=Log(args.log_level), qlog_factory=factory)
    except DaemonError as exc:
        raise UserError(str(exc)) from None
