"""``braid bench``: micro- and macro-benchmarks, one sub-subcommand each.

Benchmarks are registered from a table so other components can add theirs
(``sim``, ``goodput``, ...) without touching this file's logic: each module
in ``BENCHES`` exposes ``add_arguments(parser)`` and ``run(args) -> int``.
A module that does not exist yet is skipped, as ``tools/cli/__init__.py`` does for
subcommands.
"""

from __future__ import annotations

import argparse
import importlib

#: bench name -> module; each module has ``HELP`` (optional), ``DOCS`` (optional: the
#: markdown file ``--update-docs`` edits, relative to the repo, when it is not
#: docs/benchmarks.md), ``add_arguments`` and ``run``. The module's docstring is
#: the bench's ``--help`` description.
BENCHES: dict[str, str] = {
    "wire": "tools.bench.wire",
    "sim": "tools.bench.sim",
    "goodput": "tools.bench.goodput",
    "trace": "tools.bench.trace",
    "element": "tools.bench.element",
    "claims": "tools.claims.bench",
    "endpoint": "tools.bench.endpoint",
    "paced": "tools.bench.paced",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run benchmarks (wire codec, ...)",
        description="Run a benchmark, print a table, write results/<name>.json and, with "
        "--update-docs, the matching section of docs/benchmarks.md.",
    )
    sub = p.add_subparsers(dest="bench", metavar="BENCH")
    for name, module_name in BENCHES.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        bp = sub.add_parser(name, help=getattr(module, "HELP", None),
                            description=_description(module.__doc__),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_common(bp, getattr(module, "DOCS", "docs/benchmarks.md"))
        module.add_arguments(bp)
        bp.set_defaults(func=module.run)
    def _help(_args: argparse.Namespace) -> int:
        p.print_help()
        return 0

    p.set_defaults(func=_help)


def _description(doc: str | None) -> str | None:
    """A module docstring as ``--help`` text: reST literals as plain quotes."""
    if not doc:
        return None
    return doc.strip().replace("``", "")


def _add_common(parser: argparse.ArgumentParser, docs: str) -> None:
    parser.add_argument(
        "--out", default="results", metavar="DIR",
        help="directory for the JSON results (default: results)",
    )
    parser.add_argument(
        "--update-docs", action="store_true",
        help=f"replace this benchmark's section in {docs}",
    )
    parser.add_argument(
        "--docs", default=None, metavar="FILE",
        help=f"the markdown file --update-docs edits (default: {docs} of the repo)",
    )
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test)")
