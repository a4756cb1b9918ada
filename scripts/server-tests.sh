#!/usr/bin/env bash
# Drives `oxllm serve` with the official `openai` Python client: builds the release binary,
# installs openai, jsonschema, pyzmq and msgpack (pinned) into its own virtual environment under
# ~/.cache/oxllm, starts the
# server on a free loopback port with the default model, runs every tests/server/test_*.py
# against it (each gets BASE_URL MODEL OXLLM_BINARY MODEL_PATH; a file that needs other server
# flags starts its own server with the binary), then stops the server with SIGTERM and checks
# that it exits 0. Exits nonzero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
OPENAI_VERSION=3.57.0
JSONSCHEMA_VERSION=4.25.1
PYZMQ_VERSION=27.1.0
MSGPACK_VERSION=1.1.2
CACHE="${OXLLM_CACHE:-$HOME/.cache/oxllm}"
VENV="$CACHE/venv-openai"
MODEL=$(scripts/fetch-model.sh)
cargo build --release --bin oxllm
BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
if ! "$VENV/bin/python" -c "import openai, sys, importlib.metadata as m; sys.exit(openai.__version__ != '$OPENAI_VERSION' or m.version('jsonschema') != '$JSONSCHEMA_VERSION' or m.version('pyzmq') != '$PYZMQ_VERSION' or m.version('msgpack') != '$MSGPACK_VERSION')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION" \
    "pyzmq==$PYZMQ_VERSION" "msgpack==$MSGPACK_VERSION"
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp)
"$BIN" serve --model "$MODEL" --port "$PORT" --served-model-name smollm2 --max-num-seqs 16 \
  --kv-cache-memory $((256 << 20)) 2>"$LOG" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 120); do
  if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null; then break; fi
  if ! kill -0 "$PID" 2>/dev/null; then cat "$LOG" >&2; echo "server exited early" >&2; exit 1; fi
  sleep 0.5
done
status=0
for t in tests/server/test_*.py; do
  echo "== $t" >&2
  "$VENV/bin/python" "$t" "http://127.0.0.1:$PORT/v1" smollm2 "$BIN" "$MODEL" || status=$?
done
kill -TERM "$PID"
rc=0
wait "$PID" || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$LOG" >&2
  echo "oxllm serve exited $rc after SIGTERM (want 0)" >&2
  status=1
fi
exit "$status"
