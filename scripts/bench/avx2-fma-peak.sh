#!/usr/bin/env bash
# Builds and runs scripts/bench/avx2-fma-peak.c (needs a C compiler; x86-64 with AVX2 and FMA).
# THREADS=2 runs that many copies at once (each prints its own rate).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"${CC:-cc}" -O2 -o "$out/peak" "$here/avx2-fma-peak.c"
for _ in $(seq 1 "${THREADS:-1}"); do "$out/peak" & done
wait
