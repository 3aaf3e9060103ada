#!/usr/bin/env bash
# Runs Braid's whole test suite: lint (ruff), types (mypy --strict on the
# core packages), unit tests, and — as root — the network-namespace tests.
# Installs what is missing first (scripts/setup.sh), so it works on a fresh
# machine on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin
# Run every stage even if an earlier one fails, so one report shows all.
status=0
echo "== ruff"
$PY/ruff check wire transport congestion testbed tools tests || status=1
echo "== mypy --strict (wire, transport, congestion, testbed, tools, braid)"
$PY/mypy || status=1
echo "== pytest"
if [ "$(id -u)" -ne 0 ]; then
  echo "(not root: the netns tests will be skipped)"
fi
$PY/pytest -q -p no:cacheprovider --durations=15 "$@" || status=$?
if [ "$status" -ne 0 ]; then echo "== FAILED (exit $status)"; fi
exit "$status"
