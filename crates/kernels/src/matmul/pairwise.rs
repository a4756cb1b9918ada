//! The plain product plan: one dot per (activation row, weight row) pair over tiles of weight
//! rows, for every format (and the f32-activation head's multi-row dots). Batch invariant
//! because each output is one call of the same dot function (or a multi-row dot with its
//! bits).

use super::{decode_tile_rows, QMatrix, QuantizedActs, TILE_ROWS};
use crate::pool::{SharedMut, ThreadPool};
use crate::quant::{self, QuantError, VecDotFn};

pub(super) struct PairwisePlan<'a> {
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    dot: VecDotFn,
    /// Several activation rows per weight row at once (same bits as `dot`).
    rows_dot: Option<crate::weight_dot::DotRowsFn>,
    /// Two weight rows against every activation row at once (same bits as `dot`).
    rows_dot2: Option<crate::weight_dot::DotRows2Fn>,
    tile_rows: usize,
    pub(super) tiles: usize,
}

pub(super) fn pairwise_plan<'a>(
    pool: &ThreadPool,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
) -> Result<PairwisePlan<'a>, QuantError> {
    let dot: VecDotFn = if w.f32_activations {
        crate::weight_dot::vec_dot_f32_acts(w.dtype)?
    } else {
        quant::vec_dot(w.dtype)?
    };
    let tile_rows = if acts.rows <= 8 {
        decode_tile_rows(w.rows, pool.n_threads())
    } else {
        TILE_ROWS
    };
    let tiles = if acts.rows == 0 {
        0
    } else {
        w.rows.div_ceil(tile_rows)
    };
    let rows_dot = if w.f32_activations && acts.rows > 1 {
        crate::weight_dot::dot_rows_f32_acts(w.dtype)
    } else {
        None
    };
    let rows_dot2 = if w.f32_activations {
        crate::weight_dot::dot_rows2_f32_acts(w.dtype)
    } else {
        None
    };
    Ok(PairwisePlan {
        w,
        acts,
        dot,
        rows_dot,
        rows_dot2,
        tile_rows,
        tiles,
    })
}

impl PairwisePlan<'_> {
    /// Computes tile `t` (weight rows `t * tile_rows..`) for every activation row.
    pub(super) fn run_tile(&self, t: usize, out: &SharedMut<f32>) {
        let PairwisePlan {
            w,
            acts,
            dot,
            rows_dot,
            rows_dot2,
            tile_rows,
            ..
        } = self;
        let n_out = w.rows;
        let j0 = t * tile_rows;
        let j1 = (j0 + tile_rows).min(n_out);
        if let Some(rows_dot2) = rows_dot2 {
            const G: usize = 8;
            for i0 in (0..acts.rows).step_by(G) {
                let g = (acts.rows - i0).min(G);
                let rows: [&[u8]; G] = std::array::from_fn(|i| acts.row(i0 + i.min(g - 1)));
                let (mut c0, mut c1) = ([0f32; G], [0f32; G]);
                let mut j = j0;
                while j < j1 {
                    // An odd last row pairs with itself (computed twice, written once).
                    let j_next = (j + 1).min(j1 - 1);
                    let (a, b) = (w.row(j), w.row(j_next));
                    let (a, b) = (&*a, &*b);
                    rows_dot2(w.cols, a, b, &rows[..g], &mut c0[..g], &mut c1[..g]);
                    for i in 0..g {
                        // SAFETY: columns j..=j_next of each output row belong to this
                        // tile.
                        let dst = unsafe { out.slice((i0 + i) * n_out + j, j_next + 1 - j) };
                        dst[0] = c0[i];
                        if j_next > j {
                            dst[1] = c1[i];
                        }
                    }
                    j += 2;
                }
            }
            return;
        }
        if let Some(rows_dot) = rows_dot {
            // Groups of activation rows on the stack; each row gets the single-row
            // kernel's bits whatever group it is in. A group of 8 f32 rows (18 KB at
            // 576 columns) stays in L1 while the tile's weight rows pass over it.
            const G: usize = 8;
            for i0 in (0..acts.rows).step_by(G) {
                let g = (acts.rows - i0).min(G);
                let rows: [&[u8]; G] = std::array::from_fn(|i| acts.row(i0 + i.min(g - 1)));
                let mut col = [0f32; G];
                for j in j0..j1 {
                    rows_dot(w.cols, &w.row(j), &rows[..g], &mut col[..g]);
                    for (i, v) in col[..g].iter().enumerate() {
                        // SAFETY: column j of each output row belongs to this tile.
                        unsafe { out.slice((i0 + i) * n_out + j, 1)[0] = *v };
                    }
                }
            }
            return;
        }
        for i in 0..acts.rows {
            let a = acts.row(i);
            // SAFETY: tiles are disjoint column ranges of each output row.
            let dst = unsafe { out.slice(i * n_out + j0, j1 - j0) };
            for (d, j) in dst.iter_mut().zip(j0..j1) {
                *d = dot(w.cols, &w.row(j), a);
            }
        }
    }
}
