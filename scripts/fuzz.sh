#!/usr/bin/env bash
# Fuzzes the server's request parsing and chat-template rendering for a bounded time per
# target (CI: scripts/fuzz.sh 60). With cargo-fuzz installed (`cargo install cargo-fuzz`), runs
# each target from fuzz/corpus/<dir>, adding what it finds there; without it, replays the
# committed corpus as a normal test. Either way, the corpus replay test runs at the end.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)]. Exits nonzero on any crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-60}"
TARGETS="request_completions:completions request_chat:chat request_tokenize:tokenize chat_template:chat_template"
if cargo fuzz --version >/dev/null 2>&1; then
  for pair in $TARGETS; do
    target="${pair%%:*}"
    dir="${pair##*:}"
    echo "== fuzz $target for ${SECS}s" >&2
    # cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
    (cd fuzz && RUSTC_BOOTSTRAP=1 nice -n 10 cargo fuzz run -a "$target" "corpus/$dir" -- \
      -max_total_time="$SECS" -timeout=10 -max_len=4096)
  done
else
  echo "cargo-fuzz not installed: replaying the committed corpus only" >&2
fi
cargo test --release --quiet -p oxllm-server --test fuzz_corpus
