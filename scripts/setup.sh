#!/usr/bin/env bash
# Installs everything Braid needs on a Debian/Ubuntu machine, idempotently:
# system packages (only those missing), a virtual environment in .venv, and
# the package with its test/lint/bench extras. Quick when already done.
#   sudo bash scripts/setup.sh          # install
#   sudo bash scripts/setup.sh --demo   # install, then run `braid demo`
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"

say() { printf '[setup] %s\n' "$*" >&2; }

# -- system packages ---------------------------------------------------------
# command -> Debian package
declare -A NEED=(
  [ip]=iproute2 [tc]=iproute2 [tcpdump]=tcpdump [tshark]=tshark [ethtool]=ethtool
  [iptables]=iptables [ps]=procps [modprobe]=kmod [mount]=mount [ping]=iputils-ping
)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
if ! command -v python3 >/dev/null 2>&1; then missing+=(python3); fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then missing+=(python3-venv); fi
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    say "missing system packages: ${missing[*]} (run as root to install them)"; exit 1
  fi
  mapfile -t uniq < <(printf '%s\n' "${missing[@]}" | sort -u)
  say "installing system packages: ${uniq[*]}"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${uniq[@]}" >/dev/null
fi

# The compiled wire fast path (wire/_fastwire*.c, optional: without it Braid
# runs on the pure-Python codec) needs a C compiler, the headers of the Python
# that builds it (pyenv's and python.org's ship their own; Debian's come with
# python3-dev) and OpenSSL's (libssl-dev).
py_for_headers="$VENV/bin/python"
[ -x "$py_for_headers" ] || py_for_headers=python3
build=()
command -v gcc >/dev/null 2>&1 || build+=(gcc)
inc=$("$py_for_headers" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -n "$inc" ] && [ -f "$inc/Python.h" ] || build+=(python3-dev)
[ -f /usr/include/openssl/evp.h ] || build+=(libssl-dev)
if ((${#build[@]})); then
  if [ "$(id -u)" -eq 0 ]; then
    say "installing build packages for the wire fast path: ${build[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends "${build[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${build[@]}" >/dev/null; }; } \
      || say "note: could not install ${build[*]}: the pure-Python codec will be used"
  else
    say "note: missing ${build[*]} (run as root to install): the pure-Python codec will be used"
  fi
fi

# The testbed's eBPF switch port is loaded by tc (iproute2 built with libbpf, as
# Debian 12's is); clang/libbpf-dev are needed only to rebuild testbed/bpf/port.o.
if command -v tc >/dev/null 2>&1 && ! tc -V 2>/dev/null | grep -q libbpf; then
  say "note: this tc is built without libbpf: the testbed will use the userspace link element"
fi

# -- Python ------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
stamp="$VENV/.braid-installed"
# Re-install when the build inputs change: the package metadata and the C
# fast path (``pip install -e`` compiles it in place).
want=$(cat pyproject.toml setup.py wire/_fastwire*.c wire/_fastwire.h | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$VENV/bin/python" -c 'import wire, transport, tools' 2>/dev/null; then
  say "installing Braid and its dependencies into $VENV"
  log="$VENV/pip-install.log"
  { "$VENV/bin/python" -m pip install -q --upgrade pip \
      && "$VENV/bin/python" -m pip install -q -e ".[test,lint,bench]"; } >"$log" 2>&1 \
    || { tail -20 "$log" >&2; say "pip install failed (full log: $log)"; exit 1; }
  "$VENV/bin/python" -c 'import wire, transport, congestion, testbed, tools, uvloop, scapy, pyroute2' \
    || { say "Python install failed"; exit 1; }
  echo "$want" > "$stamp"
fi
say "ready: $("$VENV/bin/braid" --version), wire codec: $("$VENV/bin/python" -c 'import wire.codec as c; print(c.IMPLEMENTATION)')"

if [ "${1:-}" = "--demo" ]; then
  shift
  if [ "$(id -u)" -ne 0 ]; then say "the demo builds network namespaces: run it as root"; exit 1; fi
  exec "$VENV/bin/braid" demo "$@"
fi
