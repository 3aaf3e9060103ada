#!/usr/bin/env bash
# Rebuild testbed/bpf/port.o from port.c and record what it was built from in
# port.o.manifest (sha256 of the source and the object, clang and libbpf
# versions). Only this needs clang and libbpf-dev (Debian: apt-get install
# clang libbpf-dev); loading the shipped object needs just tc (iproute2).
#   bash testbed/bpf/build.sh            # rebuild port.o and its manifest
#   bash testbed/bpf/build.sh --check    # rebuild in a temp dir, compare byte for byte
# The build is reproducible: no paths or compiler ident end up in the object.
set -euo pipefail
cd "$(dirname "$0")"
CLANG=${CLANG:-clang}
command -v "$CLANG" >/dev/null || { echo "build.sh: $CLANG not found (apt-get install clang libbpf-dev)" >&2; exit 3; }
[ -f /usr/include/bpf/bpf_helpers.h ] || { echo "build.sh: libbpf headers not found (apt-get install libbpf-dev)" >&2; exit 3; }
multiarch=$(gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")
build() {  # build SRC_DIR OUT
  (cd "$1" && "$CLANG" -O2 -g -Wall -Werror -target bpf -I"/usr/include/$multiarch" \
      -fdebug-prefix-map="$1"=. -fno-ident -c port.c -o "$2")
}
clang_version=$("$CLANG" --version | head -1)
libbpf_version=$(dpkg-query -W -f='${Version}' libbpf-dev 2>/dev/null || echo unknown)
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cp port.c "$tmp/"
  build "$tmp" "$tmp/port.o"
  if cmp -s "$tmp/port.o" port.o; then echo "port.o matches port.c ($clang_version)"; exit 0; fi
  echo "port.o differs from a fresh build of port.c with $clang_version" >&2
  echo "(built with: $(grep '^clang ' port.o.manifest | cut -d' ' -f2-)); run testbed/bpf/build.sh" >&2
  exit 1
fi
build "$(pwd)" "$(pwd)/port.o"
{
  echo "source_sha256 $(sha256sum port.c | cut -d' ' -f1)"
  echo "object_sha256 $(sha256sum port.o | cut -d' ' -f1)"
  echo "clang $clang_version"
  echo "libbpf-dev $libbpf_version"
} > port.o.manifest
cat port.o.manifest
