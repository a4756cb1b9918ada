#!/usr/bin/env bash
# The AVX2 sitting of issue 21, one script so that it runs the same way every time: on this
# machine, beside llama.cpp built for AVX2+FMA+F16C only, with oxllm capped at its AVX2 kernels
# (`OXLLM_ISA=avx2`, which changes nothing on a CPU without AVX-512):
#   1. DRAM read bandwidth, 2 threads (a streaming sum over 1 GiB, best of 5 passes);
#   2. bytes of weights read per decoded token (the GGUF's tensors);
#   3. prefill of a 512-token prompt and decode at batch 1 (scripts/bench-generate-vs-llamacpp.sh,
#      interleaved A B A B);
#   4. offline batch decode at 1 / 4 / 16 / 32 requests (scripts/bench-batch-scaling.sh,
#      interleaved);
#   5. for reference, oxllm on the CPU's own best kernels (AVX-512 where it has them), 1 round.
# Usage: LLAMA_BIN=<llama.cpp build>/bin scripts/bench-avx2.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
: "${LLAMA_BIN:?set LLAMA_BIN to the directory holding llama-bench and llama-batched-bench}"
OUT=target/bench-avx2
mkdir -p "$OUT"
MODEL=$(scripts/fetch-model.sh)
if [ -z "${OXLLM_BIN:-}" ]; then
  cargo build --release --quiet --bin oxllm
  OXLLM_BIN="${CARGO_TARGET_DIR:-target}/release/oxllm"
fi
export OXLLM_BIN
echo "commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
lscpu | grep -E '^(Model name|Flags)'

cat >"$OUT/bw.c" <<'C'
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N (1ul << 30)
static unsigned char *buf;
static void *sum(void *arg) {
  size_t t = (size_t)arg, half = N / 2;
  __m256i acc = _mm256_setzero_si256();
  for (size_t i = t * half; i < (t + 1) * half; i += 128) {
    const __m256i *p = (const __m256i *)(buf + i);
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_load_si256(p), _mm256_setzero_si256()));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_load_si256(p + 1), _mm256_setzero_si256()));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_load_si256(p + 2), _mm256_setzero_si256()));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_load_si256(p + 3), _mm256_setzero_si256()));
  }
  return (void *)(size_t)_mm256_extract_epi64(acc, 0);
}
int main(void) {
  buf = aligned_alloc(4096, N);
  memset(buf, 1, N);
  double best = 0;
  for (int r = 0; r < 5; r++) {
    struct timespec a, b;
    pthread_t th[2];
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t t = 0; t < 2; t++) pthread_create(&th[t], 0, sum, (void *)t);
    for (int t = 0; t < 2; t++) pthread_join(th[t], 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, gbs = N / s / 1e9;
    if (gbs > best) best = gbs;
  }
  printf("DRAM read bandwidth, 2 threads, best of 5 passes over 1 GiB: %.1f GB/s\n", best);
  return 0;
}
C
gcc -O2 -mavx2 -pthread "$OUT/bw.c" -o "$OUT/bw"
"$OUT/bw"

python3 - "$MODEL" <<'PY'
import struct, sys
f = open(sys.argv[1], 'rb')
u32 = lambda: struct.unpack('<I', f.read(4))[0]
u64 = lambda: struct.unpack('<Q', f.read(8))[0]
def s(): return f.read(u64())
def val(t):
    if t == 8: return s()
    if t == 9:
        at, n = u32(), u64()
        return [val(at) for _ in range(n)]
    return f.read({0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t])
f.read(4); u32(); nt, nkv = u64(), u64()
for _ in range(nkv):
    s(); val(u32())
# bytes per element of the GGUF types in this model: F32, Q4_1, Q8_0
size = {0: 4.0, 3: 20 / 32, 8: 34 / 32}
total = head = 0
for _ in range(nt):
    name = s().decode()
    dims = [u64() for _ in range(u32())]
    ty = u32(); u64()
    n = 1
    for d in dims: n *= d
    b = n * size[ty]
    total += b
    if name == 'token_embd.weight': head = b
# The embedding table doubles as the output head (tied); decode reads it whole once per step
# (the head) and one row per token (the lookup), so every tensor counts once.
print(f"weights read per decoded token: {total / 1e6:.1f} MB (output head {head / 1e6:.1f} MB)")
PY

export OXLLM_ISA=avx2
echo "== prefill 512 and decode batch 1, oxllm OXLLM_ISA=avx2 vs llama-bench (AVX2 build), $ROUNDS rounds"
LLAMA_BENCH="$LLAMA_BIN/llama-bench" scripts/bench-generate-vs-llamacpp.sh 2 "$ROUNDS"
echo "== batch decode scaling, oxllm OXLLM_ISA=avx2 vs llama-batched-bench (AVX2 build), 2 rounds"
LLAMA_BATCHED_BENCH="$LLAMA_BIN/llama-batched-bench" scripts/bench-batch-scaling.sh 2 2 "$OUT/batch"
echo "== what moved it (OXLLM_ISA=avx2, oxllm bench generate, decode tok/s at batch 1 and 16, 2 rounds interleaved):"
echo "   panels+huge pages (default) / row tiles (--weight-layout rows) / heap pages (OXLLM_HUGE_PAGES=0)"
for r in 1 2; do
  # Each config: an environment assignment and a weight layout (the CPU backend's option).
  for cfg in "X=1 panels" "X=1 rows" "OXLLM_HUGE_PAGES=0 panels"; do
    set -- $cfg
    env "$1" "$OXLLM_BIN" bench generate --model "$MODEL" --weight-layout "$2" \
      --prompt-lens 128 --batch-sizes 1,16 \
      --output-len 128 --decode-prompt-len 128 --repeats 1 --threads 2 --seed "$r" \
      --out "$OUT/ab.jsonl" >/dev/null 2>&1
    python3 - "$OUT/ab.jsonl" "$cfg" "$r" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
d = {x["batch_size"]: x["tokens_per_s"] for x in rows if x["phase"] == "decode"}
print(f"round {sys.argv[3]} {sys.argv[2]:<22} batch 1 {d[1]:7.1f}  batch 16 {d[16]:7.1f}  ratio {d[16] / d[1]:.2f}")
PY
  done
done
unset OXLLM_ISA
echo "== oxllm on this CPU's best kernels (no cap), 1 round each"
LLAMA_BENCH="$LLAMA_BIN/llama-bench" scripts/bench-generate-vs-llamacpp.sh 2 1
echo "done $(date -u '+%H:%M UTC')"
