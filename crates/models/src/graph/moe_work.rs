//! The work buffers of the mixture-of-experts op (`OpDesc::Moe`): their sizes for a step of `n`
//! rows, from the layer's matrices (the widest expert, the activation formats they take).

use oxllm_kernels::matmul::QMatrix;

use crate::hybrid::{DenseMlp, MoeMlp};

/// Lengths (F32 elements; bytes for the quantized ones) of `routes`, `rows`, `ffn`,
/// `shared_gate`, `qx`, `qh` for a step of `n` rows of `moe`.
pub(crate) fn moe_work_lens(moe: &MoeMlp, hidden: usize, n: usize) -> Result<[usize; 6], String> {
    let mut mlps: Vec<&DenseMlp> = moe.experts.iter().collect();
    let mut in_mats: Vec<&QMatrix> = vec![&moe.router];
    if let Some((shared, gate)) = &moe.shared {
        mlps.push(shared);
        in_mats.push(gate);
    }
    in_mats.extend(mlps.iter().flat_map(|d| [&d.gate, &d.up]));
    let row_bytes = |w: &QMatrix| {
        w.activation_dtype()
            .row_bytes(w.cols())
            .map_err(|e| format!("activation rows of {}: {e}", w.cols()))
    };
    let mut qx = 0;
    for w in &in_mats {
        qx = qx.max(row_bytes(w)?);
    }
    let mut qh = 0;
    for d in &mlps {
        qh = qh.max(row_bytes(&d.down)?);
    }
    let ffn = mlps.iter().map(|d| d.gate.rows()).max().unwrap_or(0);
    let k = moe.top_k.min(moe.experts.len());
    Ok([
        moe.experts.len() + 2 * n * k,
        n * hidden,
        n * ffn,
        n,
        n * qx,
        n * qh,
    ])
}
