#!/usr/bin/env bash
# Eager against captured plans, interleaved A B A B: time to first token of a 128-token prompt
# and decode tokens/s at batch 1, 8 and 32, on SmolLM2 Q4_1 through the engine.
#   [OXLLM_BIN=prebuilt] scripts/bench-plans.sh [threads] [pairs] [out.jsonl]
# Prints the median of each measurement per mode and the captured/eager ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
PAIRS=${2:-5}
OUT=${3:-target/bench-plans.jsonl}
MODEL=$(scripts/fetch-model.sh)
if [ -z "${OXLLM_BIN:-}" ]; then
  cargo build --release --quiet --bin oxllm
  OXLLM_BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
fi
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
for r in $(seq "$PAIRS"); do
  for plan in eager captured; do
    "$OXLLM_BIN" bench generate --model "$MODEL" --plan "$plan" --prompt-lens 128 \
      --batch-sizes 1,8,32 --output-len "${OUTPUT_LEN:-128}" --decode-prompt-len 32 --repeats 1 \
      --threads "$THREADS" --seed "$r" --out "$OUT" >/dev/null 2>&1
    echo "pair $r: $plan done"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(phase, key, val, plan):
    xs = [r["tokens_per_s"] if phase == "decode" else r["seconds"]
          for r in rows if r["phase"] == phase and r[key] == val and r["plan"] == plan]
    return statistics.median(xs), len(xs)
print(f"{'measurement':<22} {'eager':>10} {'captured':>10} {'captured/eager':>15}")
e, n = med("prefill", "prompt_len", 128, "eager"); c, _ = med("prefill", "prompt_len", 128, "captured")
print(f"{'TTFT 128 tokens (ms)':<22} {e*1e3:>10.1f} {c*1e3:>10.1f} {e/c:>14.3f}x  (speed-up, n={n})")
for b in (1, 8, 32):
    e, n = med("decode", "batch_size", b, "eager"); c, _ = med("decode", "batch_size", b, "captured")
    print(f"{'decode b=' + str(b) + ' (tok/s)':<22} {e:>10.1f} {c:>10.1f} {c/e:>14.3f}x  (n={n})")
PY
