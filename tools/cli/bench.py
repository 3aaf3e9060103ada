"""``braid bench``: micro- and macro-benchmarks, one sub-subcommand each.

Benchmarks are registered from a table so other components can add theirs
(``sim``, ``goodput``, ...) without touching this file's logic: each module
in ``BENCHES`` exposes ``add_arguments(parser)`` and ``run(args) -> int``.
A module that does not exist yet is skipped, as ``tools/cli/__init__.py`` does for
subcommands.

``--update-docs`` is for the plain run only, the one the docs describe: a run
with ``--quick`` or with any of the bench's own options off its default is a
variant, whose numbers measure something else, and is refused before it
starts (a variant writes to ``--out`` only). A bench lists the options that
only repeat or add to what is measured in ``SAME_MEASUREMENT`` (e.g.
``goodput --profile``, a separate profiled run). The claims bench applies the
same rule itself (``tools/claims/naming.py``): it names each variant and
writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from types import ModuleType

from tools.common.errors import UserError

#: bench name -> module; each module has ``HELP`` (optional), ``DOCS`` (optional: the
#: markdown file ``--update-docs`` edits, relative to the repo, when it is not
#: docs/benchmarks.md), ``SAME_MEASUREMENT`` (optional: the ``dest`` of each of
#: its options that does not change what is measured), ``add_arguments`` and
#: ``run``. The module's docstring is the bench's ``--help`` description.
BENCHES: dict[str, str] = {
    "wire": "tools.bench.wire",
    "sim": "tools.bench.sim",
    "goodput": "tools.bench.goodput",
    "trace": "tools.bench.trace",
    "element": "tools.bench.element",
    "claims": "tools.claims.bench",
    "endpoint": "tools.bench.endpoint",
    "paced": "tools.bench.paced",
    "core-paced": "tools.bench.core_paced",
}

#: benches that decide for themselves what a variant does with ``--update-docs``.
OWN_VARIANT_RULE = frozenset({"claims"})


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
        before = len(bp._actions)
        module.add_arguments(bp)
        same = frozenset(getattr(module, "SAME_MEASUREMENT", ()))
        measured = [a for a in bp._actions[before:] if a.option_strings and a.dest not in same]
        bp.set_defaults(func=module.run if name in OWN_VARIANT_RULE
                        else _plain_for_docs(name, module, bp, measured))
    def _help(_args: argparse.Namespace) -> int:
        p.print_help()
        return 0

    p.set_defaults(func=_help)


def _plain_for_docs(name: str, module: ModuleType, parser: argparse.ArgumentParser,
                    measured: list[argparse.Action]) -> Callable[[argparse.Namespace], int]:
    """``module.run``, refusing ``--update-docs`` on a variant before it starts."""
    def run(args: argparse.Namespace) -> int:
        if args.update_docs:
            off = ["--quick"] if args.quick else []
            off += [a.option_strings[-1] for a in measured
                    if getattr(args, a.dest) != parser.get_default(a.dest)]
            if off:
                raise UserError(
                    f"braid bench {name}: --update-docs with {', '.join(off)}: that run is a "
                    f"variant, which measures something other than what the docs describe; "
                    f"variant runs write to {args.out}/ only (drop --update-docs, or run the "
                    f"plain bench)")
        return int(module.run(args) or 0)

    return run


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
