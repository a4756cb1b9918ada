#!/usr/bin/env bash
# Builds and runs scripts/bench/avx512-vnni-floor.c (needs a C compiler; x86-64; prints that
# the CPU has no AVX512-VNNI where it has none). THREADS=2 runs that many copies at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"${CC:-cc}" -O2 -o "$out/floor" "$here/avx512-vnni-floor.c"
for _ in $(seq 1 "${THREADS:-1}"); do "$out/floor" & done
wait
