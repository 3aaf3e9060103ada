"""Helpers of ``braid demo`` (tools/cli/demo.py): orchestration and report."""

#: Transfer sizes of ``braid demo`` and ``braid demo --quick`` (here, not in
#: tools/cli/demo.py, so the orchestration does not import its own CLI).
DEFAULT_SIZE = "256MiB"
QUICK_SIZE = "64MiB"
