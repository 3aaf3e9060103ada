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
# The unit tests are CPU-bound and independent (virtual time, loopback
# sockets, their own temporary directories): two workers (pytest-xdist), one
# per core, take them in about half the time. The netns tests share the
# machine's namespaces, tc and CPU record: one at a time, after them.
# Arguments: one pytest run with exactly those arguments.
if [ $# -gt 0 ]; then
  $PY/pytest -q -p no:cacheprovider --durations=15 "$@" || status=$?
else
  $PY/pytest -q -p no:cacheprovider --durations=10 -n 2 tests/unit || status=$?
  $PY/pytest -q -p no:cacheprovider --durations=15 tests/netns || status=$?
fi
# The wire codec has a compiled fast path and a pure-Python reference: the
# first pass ran on whichever is in use; run the wire and transport tests that
# exercise the codec again on the reference (BRAID_PURE=1), unless that pass
# already was the reference (extension not built, or BRAID_PURE set).
if [ "$($PY/python -c 'import wire.codec as c; print(c.IMPLEMENTATION)')" = c ] && [ $# -eq 0 ]; then
  echo "== pytest, pure-Python wire codec (BRAID_PURE=1)"
  BRAID_PURE=1 $PY/pytest -q -p no:cacheprovider -n 2 \
    tests/unit/test_wire_golden.py tests/unit/test_wire_fastpath.py tests/unit/test_wire_props.py \
    tests/unit/test_jumbo_payload.py tests/unit/test_rx_fastpath.py tests/unit/test_endpoint.py \
    tests/unit/test_scenarios.py || status=$?
fi
if [ "$status" -ne 0 ]; then echo "== FAILED (exit $status)"; fi
exit "$status"
