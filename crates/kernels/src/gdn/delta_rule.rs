//! The gated delta rule for one value head, in its two equivalent forms.
//!
//! State `S` is `k_dim x v_dim` (row `k`, column `v`). Per token, with `q` and `k` already
//! L2-normalised (and `q` scaled by `1/sqrt(k_dim)`):
//! `S <- exp(g) S`, `S <- S + k (beta (v - S^T k))^T`, `o = S^T q`.
//! [`recurrent`] applies that token by token (decode, and any prefill when bit-exact
//! invariance to how a prompt is split matters); [`chunked`] processes `chunk` tokens at a time
//! through the UT transform (a unit lower-triangular solve) and gives the same result up to
//! float rounding.

/// Token by token. `q`, `k`: `[n, k_dim]`; `v`: `[n, v_dim]`; `g` (log decay) and `beta`: `[n]`;
/// `state`: `[k_dim, v_dim]`, updated; `out`: `[n, v_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn recurrent(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    k_dim: usize,
    v_dim: usize,
    state: &mut [f32],
    out: &mut [f32],
) {
    let mut delta = vec![0f32; v_dim];
    recurrent_with(q, k, v, g, beta, k_dim, v_dim, state, out, &mut delta);
}

/// [`recurrent`] with the caller's `delta` scratch (`v_dim` values), so a captured plan's
/// replay allocates nothing; same arithmetic, same bits.
#[allow(clippy::too_many_arguments)]
pub fn recurrent_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    k_dim: usize,
    v_dim: usize,
    state: &mut [f32],
    out: &mut [f32],
    delta: &mut [f32],
) {
    let delta = &mut delta[..v_dim];
    for t in 0..g.len() {
        let (qt, kt) = (&q[t * k_dim..][..k_dim], &k[t * k_dim..][..k_dim]);
        let vt = &v[t * v_dim..][..v_dim];
        let decay = g[t].exp();
        state.iter_mut().for_each(|s| *s *= decay);
        delta.fill(0.0);
        for (row, &kk) in state.chunks_exact(v_dim).zip(kt) {
            for (d, &s) in delta.iter_mut().zip(row) {
                *d += s * kk;
            }
        }
        for (d, &x) in delta.iter_mut().zip(vt) {
            *d = (x - *d) * beta[t];
        }
        let o = &mut out[t * v_dim..][..v_dim];
        o.fill(0.0);
        for (row, (&kk, &qq)) in state.chunks_exact_mut(v_dim).zip(kt.iter().zip(qt)) {
            for ((s, &d), o) in row.iter_mut().zip(delta.iter()).zip(o.iter_mut()) {
                *s += kk * d;
                *o += *s * qq;
            }
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Same contract as [`recurrent`], `chunk` tokens at a time.
#[allow(clippy::too_many_arguments)]
pub fn chunked(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    k_dim: usize,
    v_dim: usize,
    state: &mut [f32],
    out: &mut [f32],
    chunk: usize,
) {
    let n = g.len();
    let chunk = chunk.max(1);
    let mut start = 0;
    while start < n {
        let len = chunk.min(n - start);
        let r = start..start + len;
        chunk_step(
            &q[r.start * k_dim..r.end * k_dim],
            &k[r.start * k_dim..r.end * k_dim],
            &v[r.start * v_dim..r.end * v_dim],
            &g[r.clone()],
            &beta[r.clone()],
            k_dim,
            v_dim,
            state,
            &mut out[r.start * v_dim..r.end * v_dim],
        );
        start += len;
    }
}

#[allow(clippy::too_many_arguments)]
fn chunk_step(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    kd: usize,
    vd: usize,
    state: &mut [f32],
    out: &mut [f32],
) {
    let l = g.len();
    let mut cum = vec![0f32; l];
    let mut acc = 0f32;
    for (c, &x) in cum.iter_mut().zip(g) {
        acc += x;
        *c = acc;
    }
    let kk = |i: usize| &k[i * kd..][..kd];
    let qq = |i: usize| &q[i * kd..][..kd];
    // Strictly lower part of the UT system: m[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j).
    let mut m = vec![0f32; l * l];
    for i in 0..l {
        for j in 0..i {
            m[i * l + j] = beta[i] * dot(kk(i), kk(j)) * (cum[i] - cum[j]).exp();
        }
    }
    // Forward substitution: (I + m) u = beta v, (I + m) w = beta exp(cum) k.
    let mut u = vec![0f32; l * vd];
    let mut w = vec![0f32; l * kd];
    for i in 0..l {
        for x in 0..vd {
            u[i * vd + x] = beta[i] * v[i * vd + x];
        }
        let e = beta[i] * cum[i].exp();
        for x in 0..kd {
            w[i * kd + x] = e * k[i * kd + x];
        }
        for j in 0..i {
            let c = m[i * l + j];
            for x in 0..vd {
                u[i * vd + x] -= c * u[j * vd + x];
            }
            for x in 0..kd {
                w[i * kd + x] -= c * w[j * kd + x];
            }
        }
    }
    // v_new = u - w S
    let mut v_new = u;
    for i in 0..l {
        for (row, &wx) in state.chunks_exact(vd).zip(&w[i * kd..][..kd]) {
            for (o, &s) in v_new[i * vd..][..vd].iter_mut().zip(row) {
                *o -= wx * s;
            }
        }
    }
    // out_i = exp(cum_i) q_i S + sum_{j <= i} (q_i . k_j) exp(cum_i - cum_j) v_new_j
    for i in 0..l {
        let o = &mut out[i * vd..][..vd];
        o.fill(0.0);
        let e = cum[i].exp();
        for (row, &qx) in state.chunks_exact(vd).zip(qq(i)) {
            for (o, &s) in o.iter_mut().zip(row) {
                *o += e * qx * s;
            }
        }
        for j in 0..=i {
            let c = dot(qq(i), kk(j)) * (cum[i] - cum[j]).exp();
            for (o, &x) in o.iter_mut().zip(&v_new[j * vd..][..vd]) {
                *o += c * x;
            }
        }
    }
    // S' = exp(cum_last) S + sum_j exp(cum_last - cum_j) k_j v_new_j^T
    let last = cum[l - 1];
    let e = last.exp();
    state.iter_mut().for_each(|s| *s *= e);
    for j in 0..l {
        let d = (last - cum[j]).exp();
        for (row, &kx) in state.chunks_exact_mut(vd).zip(kk(j)) {
            for (s, &x) in row.iter_mut().zip(&v_new[j * vd..][..vd]) {
                *s += d * kx * x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn unit_rows(x: &mut [f32], d: usize) {
        for r in x.chunks_exact_mut(d) {
            let n = r.iter().map(|a| a * a).sum::<f32>().sqrt();
            r.iter_mut().for_each(|a| *a /= n);
        }
    }

    #[test]
    fn chunked_equals_recurrent_across_chunk_boundaries_and_initial_state() {
        let (n, kd, vd) = (150, 8, 6);
        let mut s = 42u64;
        let mut q: Vec<f32> = (0..n * kd).map(|_| lcg(&mut s)).collect();
        let mut k: Vec<f32> = (0..n * kd).map(|_| lcg(&mut s)).collect();
        unit_rows(&mut q, kd);
        unit_rows(&mut k, kd);
        let v: Vec<f32> = (0..n * vd).map(|_| lcg(&mut s)).collect();
        let g: Vec<f32> = (0..n).map(|_| -0.5 * (lcg(&mut s) + 1.0)).collect();
        let beta: Vec<f32> = (0..n).map(|_| 0.5 * (lcg(&mut s) + 1.0)).collect();
        let init: Vec<f32> = (0..kd * vd).map(|_| lcg(&mut s)).collect();
        let (mut s1, mut o1) = (init.clone(), vec![0f32; n * vd]);
        recurrent(&q, &k, &v, &g, &beta, kd, vd, &mut s1, &mut o1);
        for c in [1, 7, 64, 200] {
            let (mut s2, mut o2) = (init.clone(), vec![0f32; n * vd]);
            chunked(&q, &k, &v, &g, &beta, kd, vd, &mut s2, &mut o2, c);
            let e = o1.iter().zip(&o2).chain(s1.iter().zip(&s2));
            let max = e.map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(max < 1e-5, "chunk {c}: max diff {max}");
        }
    }
}
