"""The ``braid`` command: one entry point, subcommands registered by module.

Each subcommand module exposes ``register(subparsers)`` which adds its parser
and sets ``func`` (a callable taking the parsed namespace and returning an
exit code). A user error raises ``tools.common.errors.UserError`` (the testbed's own
``testbed.errors.TestbedError``): one clear line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from testbed.errors import TestbedError
from tools.common.errors import UserError

__version__ = "0.1.0"

#: Modules that contribute subcommands, in the order ``--help`` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "tools.cli.keygen",
    "tools.cli.bench",
    "tools.cli.demo",
    "testbed.cli",
    "tools.cli.daemon",
    "tools.cli.transfer",
    "tools.cli.perf",
    "tools.cli.trace",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="braid",
        description=(
            "Braid: a packet-spraying, trim-aware, reliable multipath transport over UDP, "
            "a multi-plane namespace testbed, and trace tools."
        ),
    )
    parser.add_argument("--version", action="version", version=f"braid {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # A subcommand module that does not exist yet is simply absent;
            # a missing dependency inside an existing one is a real error.
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except (UserError, TestbedError) as exc:
        print(f"braid: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("braid: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `braid ... | head`: the reader left; not an error worth a traceback.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
