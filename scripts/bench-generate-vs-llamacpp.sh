#!/usr/bin/env bash
# Single-stream speed beside llama.cpp, interleaved A B A B: prefill of a 512-token prompt and
# decode of 128 tokens at batch 1, on the same GGUF with the same thread count.
#   LLAMA_BENCH=/path/to/llama-bench [OXLLM_BIN=prebuilt] scripts/bench-generate-vs-llamacpp.sh [threads] [rounds]
# Prints one line per run and the medians. Build llama.cpp outside this repository (see
# docs/BENCHMARKS.md for how the peer was built on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
ROUNDS=${2:-3}
MODEL=$(scripts/fetch-model.sh)
: "${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary}"
if [ -z "${OXLLM_BIN:-}" ]; then
  cargo build --release --quiet --bin oxllm
  OXLLM_BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
fi
IDS=$(python3 -c "import random; random.seed(0); print(','.join(str(random.randint(100, 40000)) for _ in range(512)))")
ox_pp=(); ox_tg=(); ll_pp=(); ll_tg=()
for r in $(seq "$ROUNDS"); do
  line=$("$OXLLM_BIN" generate --model "$MODEL" --prompt-ids "$IDS" --max-tokens 129 \
    --ignore-eos --timings --threads "$THREADS" --json 2>&1 >/dev/null | grep "^prefill:")
  pp=$(sed -E 's/.*prefill: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tok\/s\).*/\1/' <<<"$line")
  tg=$(sed -E 's/.*decode: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tok\/s\).*/\1/' <<<"$line")
  ox_pp+=("$pp"); ox_tg+=("$tg")
  echo "round $r oxllm     pp512 $pp tg128 $tg"
  out=$("$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 -o csv 2>/dev/null)
  lpp=$(awk -F, 'NR>1 && $0 ~ /"512","0"/ {gsub(/"/,"",$0); print}' <<<"$out" | awk -F, '{print $(NF-1)}')
  ltg=$(awk -F, 'NR>1 && $0 ~ /"0","128"/ {gsub(/"/,"",$0); print}' <<<"$out" | awk -F, '{print $(NF-1)}')
  ll_pp+=("$lpp"); ll_tg+=("$ltg")
  echo "round $r llama.cpp pp512 $lpp tg128 $ltg"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mo=$(median "${ox_pp[@]}"); mt=$(median "${ox_tg[@]}"); lo=$(median "${ll_pp[@]}"); lt=$(median "${ll_tg[@]}")
echo "median oxllm pp512 $mo tg128 $mt | llama.cpp pp512 $lo tg128 $lt | ratio pp $(awk "BEGIN{printf \"%.2f\", $mo/$lo}") tg $(awk "BEGIN{printf \"%.2f\", $mt/$lt}")"
