#!/usr/bin/env bash
# Soak test: starts one `oxllm serve` (small queue, so overload bursts reach 503) and runs
# scripts/soak.py against it for a bounded time: streamed and whole requests, random
# disconnects, malformed requests and overload bursts; then asserts no 5xx but 503, running
# and waiting counts and KV blocks back to zero, RSS bounded, and greedy outputs equal to a
# quiet run's. Usage: scripts/soak.sh [SECONDS (default 120)]. Exits nonzero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-120}"
MODEL=$(scripts/fetch-model.sh)
cargo build --release --quiet --bin oxllm
BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp)
"$BIN" serve --model "$MODEL" --port "$PORT" --served-model-name smollm2 --max-num-seqs 8 \
  --max-waiting 16 --kv-cache-memory $((128 << 20)) 2>"$LOG" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 240); do
  if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null; then break; fi
  if ! kill -0 "$PID" 2>/dev/null; then cat "$LOG" >&2; echo "server exited early" >&2; exit 1; fi
  sleep 0.5
done
status=0
python3 scripts/soak.py "http://127.0.0.1:$PORT" smollm2 "$PID" "$DURATION" || status=$?
if ! kill -0 "$PID" 2>/dev/null; then
  cat "$LOG" >&2
  echo "the server died during the soak" >&2
  status=1
fi
exit "$status"
