"""``braid keygen``: create a cluster key file.

Every host of a cluster shares one 32-byte secret (see wire/SPEC.md,
"Security"). The file is created with mode 0600 and never overwritten
unless asked; ``-o -`` prints the key to stdout instead (for piping into a
secrets manager).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tools.common.errors import UserError
from wire.keys import format_key_file, new_cluster_key, write_key_file

DEFAULT_PATH = "braid.key"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "keygen",
        help="create a cluster key file (mode 0600)",
        description="Create a new random cluster secret for Braid's header tags and "
        "payload encryption. Copy the same file to every host of the cluster.",
    )
    p.add_argument(
        "-o", "--output", default=DEFAULT_PATH, metavar="FILE",
        help=f"where to write the key (default: {DEFAULT_PATH}; '-' for stdout)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    secret = new_cluster_key()
    if args.output == "-":
        sys.stdout.write(format_key_file(secret))
        return 0
    path = Path(args.output)
    if path.is_dir():
        raise UserError(f"{path} is a directory; give a file name with -o")
    if args.force:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise UserError(f"cannot replace {path}: {exc.strerror}") from None
    try:
        write_key_file(path, secret)
    except FileExistsError:
        raise UserError(f"{path} already exists; use --force to overwrite it") from None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    # umask may only narrow 0600; state it plainly in case a filesystem ignores modes.
    mode = os.stat(path).st_mode & 0o777
    print(f"wrote cluster key to {path} (mode {mode:04o}); copy it to every host", file=sys.stderr)
    return 0
