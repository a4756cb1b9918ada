// The AVX512-VNNI int8 operation floor of one core: the inner step of the AVX512-VNNI panel
// kernels (broadcast one activation dword from L1, vpdpbusd against a register of 16 weight
// rows' quants into that row's i32 sums) for 8 activation rows, nothing else. Its rate bounds
// every AVX512-VNNI int8 GEMM here: the kernels add quant decoding and scaling on top.
// Build and run: scripts/bench/avx512-vnni-floor.sh (prints GMAC/s of one thread, best of 5).
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx512f,avx512vnni"), noinline)) static int run(const uint8_t *w,
                                                                       const int32_t *a,
                                                                       long iters) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
            s7 = s0;
    for (long i = 0; i < iters; i++) {
        const uint8_t *wp = w + 64 * (i & 63);
        const int32_t *ap = a + 8 * (i & 63);
        __m512i x = _mm512_loadu_si512((const void *)wp);
#define ROW(k, s) s = _mm512_dpbusd_epi32(s, x, _mm512_set1_epi32(ap[k]));
        ROW(0, s0) ROW(1, s1) ROW(2, s2) ROW(3, s3) ROW(4, s4) ROW(5, s5) ROW(6, s6) ROW(7, s7)
        // Keeps the loads inside the loop (no hoisting across iterations).
        __asm__ volatile("" ::: "memory");
    }
    __m512i l = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(s4, s5), _mm512_add_epi32(s6, s7));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(l, r));
}

int main(void) {
    if (!__builtin_cpu_supports("avx512vnni")) {
        printf("avx512-vnni floor: this CPU has no AVX512-VNNI\n");
        return 0;
    }
    static uint8_t w[64 * 64];
    static int32_t a[8 * 64];
    for (int i = 0; i < 64 * 64; i++) w[i] = i & 15;
    for (int i = 0; i < 8 * 64; i++) a[i] = i * 7;
    const long iters = 100000000;
    double best = 1e9;
    int sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        sink += run(w, a, iters);
        t = now() - t;
        if (t < best) best = t;
    }
    // 8 vpdpbusd of 64 multiply-adds per iteration.
    printf("avx512-vnni floor: %.1f GMAC/s one thread (checksum %d)\n",
           iters * 8.0 * 64 / best / 1e9, sink);
    return 0;
}
