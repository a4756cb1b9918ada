#!/usr/bin/env bash
# Evaluates a model served by `oxllm serve` with lm-evaluation-harness (PyPI `lm_eval`, pinned,
# in its own virtual environment under the oxllm cache; no torch, no model hub), through its
# `local-completions` model on /v1/completions, tokenizing through the server itself
# (`tokenizer_backend=remote`: /tokenizer_info, /tokenize, /detokenize), so lm_eval splits
# context and continuation with exactly the server's tokens and sends token ids.
#
#   scripts/lm-eval.sh                      # starts `oxllm serve` on the default model, runs the
#                                           # local tasks of tests/lm_eval/tasks, stops it
#   URL=http://127.0.0.1:8000 MODEL=smollm2 scripts/lm-eval.sh   # a server already running
#
# Environment: URL (a running server; else one is started on MODEL_PATH, default: the default
# model), MODEL (the served model name, default smollm2), TASKS (default oxllm_mc,oxllm_gen;
# any lm_eval task name works where its dataset is reachable), OUT (results folder, default
# target/lm-eval), LIMIT (documents per task).
# Extra arguments go to lm_eval. Prints lm_eval's table; per-sample logs land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
LM_EVAL_VERSION=0.4.13
CACHE="${OXLLM_CACHE:-$HOME/.cache/oxllm}"
VENV="$CACHE/venv-lm-eval"
MODEL=${MODEL:-smollm2}
TASKS=${TASKS:-oxllm_mc,oxllm_gen}
OUT=${OUT:-${CARGO_TARGET_DIR:-target}/lm-eval}

# Every package is pinned (scripts/lm-eval-requirements.txt), not only lm_eval: a new release of
# one of its dependencies (datasets, numpy, ...) cannot change a fresh machine's run. The venv
# is rebuilt when that list changes (its hash is kept inside the venv).
REQS=scripts/lm-eval-requirements.txt
want=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ "$(cat "$VENV/.requirements-sha256" 2>/dev/null)" != "$want" ] \
  || ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('lm_eval') != '$LM_EVAL_VERSION')" 2>/dev/null; then
  echo "lm-eval.sh: installing lm_eval[api]==$LM_EVAL_VERSION (pinned set) into $VENV" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQS"
  echo "$want" > "$VENV/.requirements-sha256"
fi

pid=
log=$(mktemp)
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT
if [ -z "${URL:-}" ]; then
  MODEL_PATH=${MODEL_PATH:-$(scripts/fetch-model.sh)}
  if [ -z "${OXLLM_BIN:-}" ]; then
    cargo build --release --quiet --bin oxllm
    OXLLM_BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
  fi
  "$OXLLM_BIN" serve --model "$MODEL_PATH" --port 0 --served-model-name "$MODEL" 2>"$log" &
  pid=$!
  for _ in $(seq 1 240); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -1)
    [ -n "$URL" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "lm-eval.sh: the server exited" >&2; exit 1; }
    sleep 0.5
  done
  [ -n "$URL" ] || { cat "$log" >&2; echo "lm-eval.sh: the server did not start" >&2; exit 1; }
fi

args="model=$MODEL,base_url=${URL%/}/v1/completions,tokenizer_backend=remote,tokenized_requests=True,num_concurrent=1,max_retries=1"
mkdir -p "$OUT"
# Local task files only: nothing is fetched from a hub.
HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 "$VENV/bin/lm_eval" --model local-completions \
  --model_args "$args" --tasks "$TASKS" --include_path tests/lm_eval/tasks \
  --log_samples --output_path "$OUT" ${LIMIT:+--limit "$LIMIT"} "$@"
