#!/usr/bin/env bash
# Builds and runs scripts/bench/avx2-int8-floor.c (needs a C compiler; x86-64 with AVX2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"${CC:-cc}" -O2 -mavx2 -o "$out/floor" "$here/avx2-int8-floor.c"
"$out/floor"
