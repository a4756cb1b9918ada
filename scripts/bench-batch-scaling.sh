#!/usr/bin/env bash
# Offline batch decode scaling beside llama.cpp (issue 3), interleaved A B A B: generated
# tokens/s of 1, 4, 16 and 32 concurrent requests (128-token prompts, 128 generated) on
# SmolLM2 Q4_1 with the same thread count.
#   LLAMA_BATCHED_BENCH=/path/to/llama-batched-bench [OXLLM_BIN=prebuilt] \
#     scripts/bench-batch-scaling.sh [threads] [rounds] [out-dir]
# oxllm: `oxllm bench generate` decode rows (first token of the last request -> last token);
# llama.cpp: `llama-batched-bench` S_TG. Prints each round and the medians with the ratios
# batch N / batch 1. Build llama.cpp outside this repository (docs/BENCHMARKS.md says how).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
ROUNDS=${2:-2}
OUT=${3:-target/bench-batch-scaling}
MODEL=$(scripts/fetch-model.sh)
: "${LLAMA_BATCHED_BENCH:?set LLAMA_BATCHED_BENCH to the llama-batched-bench binary}"
if [ -z "${OXLLM_BIN:-}" ]; then
  cargo build --release --quiet --bin oxllm
  OXLLM_BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
fi
mkdir -p "$OUT"
rm -f "$OUT"/oxllm-*.jsonl "$OUT"/llama-*.jsonl
for r in $(seq "$ROUNDS"); do
  "$OXLLM_BIN" bench generate --model "$MODEL" --prompt-lens 128 --batch-sizes 1,4,16,32 \
    --output-len 128 --decode-prompt-len 128 --repeats 1 --threads "$THREADS" --seed "$r" \
    --out "$OUT/oxllm-$r.jsonl" >/dev/null 2>&1
  echo "round $r: oxllm done"
  "$LLAMA_BATCHED_BENCH" -m "$MODEL" -t "$THREADS" -c 9000 -b 2048 -ub 512 -npp 128 -ntg 128 \
    -npl 1,4,16,32 --output-format jsonl 2>/dev/null | grep '^{' >"$OUT/llama-$r.jsonl"
  echo "round $r: llama.cpp done"
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ox, ll = {}, {}
for r in range(1, rounds + 1):
    for l in open(f"{out}/oxllm-{r}.jsonl"):
        x = json.loads(l)
        if x.get("phase") == "decode":
            ox.setdefault(x["batch_size"], []).append(x["tokens_per_s"])
    for l in open(f"{out}/llama-{r}.jsonl"):
        x = json.loads(l)
        ll.setdefault(x["pl"], []).append(x["speed_tg"])
print("round values: oxllm", ox, "llama.cpp", ll)
mo = {b: statistics.median(v) for b, v in ox.items()}
ml = {b: statistics.median(v) for b, v in ll.items()}
print(f"{'requests':>8} {'oxllm tok/s':>12} {'llama.cpp tok/s':>16} {'ox/llama':>9} {'ox vs b1':>9} {'llama vs b1':>12}")
for b in sorted(mo):
    print(f"{b:>8} {mo[b]:>12.1f} {ml.get(b, float('nan')):>16.1f} {mo[b]/ml.get(b, float('nan')):>9.2f} "
          f"{mo[b]/mo[1]:>9.2f} {ml.get(b, float('nan'))/ml.get(1, float('nan')):>12.2f}")
PY
