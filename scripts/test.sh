#!/usr/bin/env bash
# Runs the whole test suite. Fetches the default model first (tests that use it read it from
# ~/.cache/oxllm); the oracle fixtures are committed, so no Python ML stack is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh >/dev/null
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check
else
  echo "rustfmt not installed: skipping the format check" >&2
fi
cargo test --workspace --release "$@"
# oxllm-server: the official openai Python client against `oxllm serve` (own venv, pinned).
scripts/server-tests.sh
