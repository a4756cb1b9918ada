//! The f32 vector widths the tiles compute in (256-bit at AVX2, 512-bit with AVX-512) and the
//! loops written once for both: the scores of a transposed key vector and the value rows'
//! multiply-add. Every lane runs the same operations at either width, so the width changes no
//! bit: a 512-bit prefill row keeps the bits of its 256-bit decode row.
//!
//! The loops are `#[inline(always)]` without target features of their own: each instance
//! compiles inside a caller that enables its width's features (`keys_t`, `zmm`, the tiles).
//! Safety contract of every `unsafe fn` here: the CPU has the features of `V`'s width, and
//! the pointers address what each function's doc says.

use std::arch::x86_64::*;

/// An f32 vector register.
pub(super) trait Lanes: Copy {
    /// f32 lanes per vector.
    const N: usize;
    unsafe fn zero() -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(p: *mut f32, v: Self);
    unsafe fn splat(x: f32) -> Self;
    /// `a * b + c`, rounded once.
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// Stores the first `n` lanes of `v` at `p` (all of them where `n >= N`), writing nothing
    /// past them.
    unsafe fn store_first(p: *mut f32, n: usize, v: Self);
}

impl Lanes for __m256 {
    const N: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX, by the module's contract.
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's `p` addresses 8 floats.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: the caller's `p` addresses 8 floats.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: AVX, by the module's contract.
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: FMA, by the module's contract.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: AVX, by the module's contract.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: AVX, by the module's contract.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn store_first(p: *mut f32, n: usize, v: Self) {
        // SAFETY: AVX; the caller's `p` addresses `n.min(8)` floats.
        unsafe {
            if n >= 8 {
                _mm256_storeu_ps(p, v);
            } else {
                let mut r = [0f32; 8];
                _mm256_storeu_ps(r.as_mut_ptr(), v);
                for (u, &x) in r.iter().enumerate().take(n) {
                    *p.add(u) = x;
                }
            }
        }
    }
}

impl Lanes for __m512 {
    const N: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX-512F, by the module's contract.
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: AVX-512F; the caller's `p` addresses 16 floats.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: AVX-512F; the caller's `p` addresses 16 floats.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        // SAFETY: AVX-512F, by the module's contract.
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: AVX-512F, by the module's contract.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F, by the module's contract.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F, by the module's contract.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn store_first(p: *mut f32, n: usize, v: Self) {
        // SAFETY: AVX-512F; the caller's `p` addresses `n.min(16)` floats, and masked-off
        // lanes are neither written nor touched.
        unsafe {
            let mask = ((1u32 << n.min(16)) - 1) as __mmask16;
            _mm512_mask_storeu_ps(p, mask, v)
        }
    }
}

/// Scores of queries `qs` (`hd` floats each) against keys `p0..pe(j)` (query `j`'s own end, at
/// most the block's end) of a block laid out `V::N` keys to a vector at `kt` (`Tile::keys_t`):
/// queries in groups of up to `Q` (at most 4) over the key vectors all of them need, then each
/// alone over the rest, by [`dot_t`]; every score has `dot4`'s bits, times `scale`, stored for
/// the query's own keys only (the floats past its end may be another row's). `(row0, stride)`:
/// the first query's score row and the stride.
///
/// # Safety
/// See the module's contract; each row holds its query's keys up to its end.
#[inline(always)]
pub(super) unsafe fn scores_rows_t<V: Lanes, const Q: usize>(
    qs: &[*const f32],
    pe: impl Fn(usize) -> usize,
    kt: *const f32,
    (hd, scale): (usize, f32),
    p0: usize,
    (row0, stride): (*mut f32, usize),
) {
    unsafe {
        // SAFETY: the module's contract.
        let vectors = |j: usize| pe(j).saturating_sub(p0).div_ceil(V::N);
        let scale = V::splat(scale);
        // Queries `j..j + $n` against vector `v`.
        macro_rules! group {
            ($n:literal, $j:expr, $v:expr) => {{
                let (j, v) = ($j, $v);
                let kv = kt.add(v * hd * V::N);
                let s = dot_t::<V, $n>(std::array::from_fn(|i| qs[j + i]), kv, hd);
                for (i, &s) in s.iter().enumerate() {
                    let at = p0 + v * V::N;
                    let row = row0.add((j + i) * stride + at);
                    V::store_first(row, pe(j + i) - at, V::mul(s, scale));
                }
            }};
        }
        let mut j = 0;
        while j < qs.len() {
            let n = (qs.len() - j).min(Q);
            let shared = (j..j + n).map(vectors).min().unwrap_or(0);
            for v in 0..shared {
                match n {
                    4 => group!(4, j, v),
                    3 => group!(3, j, v),
                    2 => group!(2, j, v),
                    _ => group!(1, j, v),
                }
            }
            for i in j..j + n {
                // Each query alone over the vectors past the shared ones.
                for v in shared..vectors(i) {
                    group!(1, i, v);
                }
            }
            j += n;
        }
    }
}

/// The unscaled scores of `N` queries (`hd` floats each) against the `V::N` keys of one
/// transposed vector at `kt` (value `d` of key `lane` at `kt[d * V::N + lane]`): the chains of
/// lanes 0-3 (lane `l`'s over `d = 8c + l`, c ascending, from zero), then of lanes 4-7, and
/// `dot4`'s tree over them: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). Each key's score has the
/// bits `dot4` gives it.
///
/// # Safety
/// See the module's contract.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (query, lane) indices name the accumulator registers
pub(super) unsafe fn dot_t<V: Lanes, const N: usize>(
    q: [*const f32; N],
    kt: *const f32,
    hd: usize,
) -> [V; N] {
    unsafe {
        // SAFETY: the module's contract.
        let mut halves = [[V::zero(); N]; 2];
        for (half, sums) in halves.iter_mut().enumerate() {
            let mut acc = [[V::zero(); 4]; N];
            let mut c = 0;
            while c < hd {
                for l in 0..4 {
                    let d = c + 4 * half + l;
                    let k = V::load(kt.add(d * V::N));
                    for i in 0..N {
                        acc[i][l] = V::fmadd(V::splat(*q[i].add(d)), k, acc[i][l]);
                    }
                }
                c += 8;
            }
            for i in 0..N {
                sums[i] = V::add(V::add(acc[i][0], acc[i][1]), V::add(acc[i][2], acc[i][3]));
            }
        }
        std::array::from_fn(|i| V::add(halves[0][i], halves[1][i]))
    }
}

/// `o_i[0..V::N * NC] += w_i[p] * row(p)[0..V::N * NC]` for p in `p0..pe` ascending, for `N`
/// outputs with their own weights over the same rows (each row load serves them all): every
/// lane runs `axpy`'s fma chain, from the output's value.
///
/// # Safety
/// See the module's contract; each `o_i` holds `V::N * NC` floats, each `w_i` `pe` floats,
/// each `row(p)` `V::N * NC` floats.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (output, chunk) indices name the accumulator registers
pub(super) unsafe fn axpy_v<V: Lanes, const N: usize, const NC: usize>(
    o: [*mut f32; N],
    w: [*const f32; N],
    p0: usize,
    pe: usize,
    row: impl Fn(usize) -> *const f32,
) {
    unsafe {
        // SAFETY: the module's contract.
        let mut acc: [[V; NC]; N] =
            std::array::from_fn(|i| std::array::from_fn(|c| V::load(o[i].add(V::N * c))));
        for p in p0..pe {
            let wv: [V; N] = std::array::from_fn(|i| V::splat(*w[i].add(p)));
            let vr = row(p);
            for c in 0..NC {
                let v = V::load(vr.add(V::N * c));
                for i in 0..N {
                    acc[i][c] = V::fmadd(wv[i], v, acc[i][c]);
                }
            }
        }
        for i in 0..N {
            for c in 0..NC {
                V::store(o[i].add(V::N * c), acc[i][c]);
            }
        }
    }
}
