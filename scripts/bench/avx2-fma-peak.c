// The f32 FMA peak of one core at AVX2: 12 independent chains of 256-bit vfmadd231ps, registers
// only (no loads, no other operation). Attention's score and value passes are f32 fma work, so
// this rate times the threads bounds them: docs/BENCHMARKS.md, "Transposed key blocks".
// Build and run: scripts/bench/avx2-fma-peak.sh (prints G fma/s and G lane multiply-adds/s of
// one thread, best of 5).
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

// 12 fmas per iteration; the chains stay in ymm0-11, the multiplicands in ymm14-15.
__attribute__((noinline)) static void run(long iters) {
    __asm__ volatile(
        "vxorps %%ymm0,%%ymm0,%%ymm0\n vxorps %%ymm1,%%ymm1,%%ymm1\n"
        "vxorps %%ymm2,%%ymm2,%%ymm2\n vxorps %%ymm3,%%ymm3,%%ymm3\n"
        "vxorps %%ymm4,%%ymm4,%%ymm4\n vxorps %%ymm5,%%ymm5,%%ymm5\n"
        "vxorps %%ymm6,%%ymm6,%%ymm6\n vxorps %%ymm7,%%ymm7,%%ymm7\n"
        "vxorps %%ymm8,%%ymm8,%%ymm8\n vxorps %%ymm9,%%ymm9,%%ymm9\n"
        "vxorps %%ymm10,%%ymm10,%%ymm10\n vxorps %%ymm11,%%ymm11,%%ymm11\n"
        "vxorps %%ymm14,%%ymm14,%%ymm14\n vxorps %%ymm15,%%ymm15,%%ymm15\n"
        "1:\n"
        "vfmadd231ps %%ymm14,%%ymm15,%%ymm0\n vfmadd231ps %%ymm14,%%ymm15,%%ymm1\n"
        "vfmadd231ps %%ymm14,%%ymm15,%%ymm2\n vfmadd231ps %%ymm14,%%ymm15,%%ymm3\n"
        "vfmadd231ps %%ymm14,%%ymm15,%%ymm4\n vfmadd231ps %%ymm14,%%ymm15,%%ymm5\n"
        "vfmadd231ps %%ymm14,%%ymm15,%%ymm6\n vfmadd231ps %%ymm14,%%ymm15,%%ymm7\n"
        "vfmadd231ps %%ymm14,%%ymm15,%%ymm8\n vfmadd231ps %%ymm14,%%ymm15,%%ymm9\n"
        "vfmadd231ps %%ymm14,%%ymm15,%%ymm10\n vfmadd231ps %%ymm14,%%ymm15,%%ymm11\n"
        "dec %0\n jnz 1b\n vzeroupper\n"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm14", "xmm15", "cc");
}

int main(void) {
    const long iters = 100000000;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        run(iters);
        t = now() - t;
        if (t < best) best = t;
    }
    double fmas = 12.0 * iters / best;
    printf("avx2 fma peak: %.2f G fma/s = %.1f G f32 multiply-adds/s one thread\n", fmas / 1e9,
           8 * fmas / 1e9);
    return 0;
}
