// The AVX2 int8 operation floor of one core: the inner step of the k-quant and legacy panel
// kernels (broadcast one activation dword from L1, vpmaddubsw against a register of 8 weight
// rows' quants, vpaddw into that row's i16 sum) for 8 activation rows, nothing else. Its rate
// bounds every AVX2 int8 GEMM here: the kernels add quant decoding and i32 flushes on top.
// Build (-mavx2) and run: scripts/bench/avx2-int8-floor.sh (prints GMAC/s of one thread, best of 5).
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"), noinline)) static __m256i run(const uint8_t *w, const int32_t *a,
                                                               long iters) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
            s7 = s0;
    for (long i = 0; i < iters; i++) {
        const uint8_t *wp = w + 32 * (i & 63);
        const int32_t *ap = a + 8 * (i & 63);
        __m256i x = _mm256_loadu_si256((const __m256i *)wp);
#define ROW(k, s) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(x, _mm256_set1_epi32(ap[k])));
        ROW(0, s0) ROW(1, s1) ROW(2, s2) ROW(3, s3) ROW(4, s4) ROW(5, s5) ROW(6, s6) ROW(7, s7)
        // Keeps the loads inside the loop (no hoisting across iterations).
        __asm__ volatile("" ::: "memory");
    }
    __m256i l = _mm256_add_epi16(_mm256_add_epi16(s0, s1), _mm256_add_epi16(s2, s3));
    __m256i r = _mm256_add_epi16(_mm256_add_epi16(s4, s5), _mm256_add_epi16(s6, s7));
    return _mm256_add_epi16(l, r);
}

int main(void) {
    static uint8_t w[32 * 64];
    static int32_t a[8 * 64];
    for (int i = 0; i < 32 * 64; i++) w[i] = i & 15;
    for (int i = 0; i < 8 * 64; i++) a[i] = i * 7;
    const long iters = 200000000;
    double best = 1e9;
    __m256i sink = _mm256_setzero_si256();
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        sink = _mm256_add_epi16(sink, run(w, a, iters));
        t = now() - t;
        if (t < best) best = t;
    }
    // 8 vpmaddubsw of 32 multiply-adds per iteration.
    printf("avx2 int8 floor: %.1f GMAC/s one thread (checksum %d)\n",
           iters * 8.0 * 32 / best / 1e9, _mm256_extract_epi16(sink, 0));
    return 0;
}
