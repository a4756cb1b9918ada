//! One kernel launch (or a few) per op description, with the shapes checked against the
//! buffers so no kernel indexes past an allocation.

use oxllm_runtime::{BufKind, BufRef, Memory, OpDesc, RuntimeError};

use crate::device::{DevWeight, Device};
use crate::gpu::{Arg, Gpu};

const THREADS: u32 = 256;

fn blocks(n: usize) -> u32 {
    n.div_ceil(THREADS as usize) as u32
}

fn check(op: &'static str, ok: bool, what: &str) -> Result<(), RuntimeError> {
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::op(op, what))
    }
}

/// Whether `b` is written or read by the host rather than the device (see `device.rs`).
pub(crate) fn host_owned(b: BufRef) -> bool {
    matches!(b.kind(), BufKind::U32 | BufKind::I32)
}

/// Launches the kernels of one op.
pub(crate) fn launch<G: Gpu>(
    dev: &mut Device<G>,
    op: &'static str,
    desc: &OpDesc,
    mem: &Memory,
) -> Result<(), RuntimeError> {
    use Arg::{Ptr, F32, I32, I64};
    match desc {
        OpDesc::Embed {
            tokens,
            out,
            hidden,
        } => {
            let rows = tokens.len;
            check(op, out.len >= rows * hidden, "embedding output too short")?;
            let (name, ptr, vocab) = match dev.weight(op, oxllm_runtime::WeightId::Embeddings)? {
                DevWeight::Matrix {
                    ptr,
                    rows,
                    cols,
                    bf16,
                } if cols == *hidden => (if bf16 { "embed_bf16" } else { "embed_f32" }, ptr, rows),
                _ => return Err(RuntimeError::op(op, "embedding table of another width")),
            };
            let args = [
                Ptr(dev.ptr(op, mem, *tokens)?),
                Ptr(ptr),
                Ptr(dev.ptr(op, mem, *out)?),
                I32(*hidden as i32),
                I32(vocab as i32),
            ];
            dev.launch(op, name, (rows as u32, 1), THREADS, &args)
        }
        OpDesc::RmsNorm {
            weight,
            x,
            out,
            cols,
            eps,
        } => {
            let rows = x.len / cols.max(&1);
            check(op, out.len >= rows * cols, "norm output too short")?;
            let args = [
                Ptr(dev.ptr(op, mem, *x)?),
                Ptr(0),
                I32(rows as i32),
                Ptr(dev.vector(op, *weight, *cols)?),
                Ptr(dev.ptr(op, mem, *out)?),
                I32(*cols as i32),
                F32(*eps),
            ];
            dev.launch(op, "rms_norm", (rows as u32, 1), THREADS, &args)
        }
        OpDesc::GatherNorm {
            x,
            indices,
            weight,
            out,
            cols,
            eps,
        } => {
            let rows = indices.len.min(out.len / cols.max(&1));
            let args = [
                Ptr(dev.ptr(op, mem, *x)?),
                Ptr(dev.ptr(op, mem, *indices)?),
                I32((x.len / cols.max(&1)) as i32),
                Ptr(dev.vector(op, *weight, *cols)?),
                Ptr(dev.ptr(op, mem, *out)?),
                I32(*cols as i32),
                F32(*eps),
            ];
            dev.launch(op, "rms_norm", (rows as u32, 1), THREADS, &args)
        }
        // The device reads the f32 rows directly (see `OpDesc::Matmul`'s jobs).
        OpDesc::Quantize { .. } => Ok(()),
        OpDesc::Matmul { rows, cols, jobs } => {
            for job in jobs {
                let (ptr, n, k, bf16) = match dev.weight(op, job.weight)? {
                    DevWeight::Matrix {
                        ptr,
                        rows,
                        cols,
                        bf16,
                    } => (ptr, rows, cols, bf16),
                    _ => return Err(RuntimeError::op(op, "a vector where a matrix belongs")),
                };
                check(op, k == *cols, "matrix width differs from the input's")?;
                check(op, job.input.len >= rows * k, "matmul input too short")?;
                check(op, job.out.len >= rows * n, "matmul output too short")?;
                let bias = match job.bias {
                    Some(id) => dev.vector(op, id, n)?,
                    None => 0,
                };
                let args = [
                    Ptr(dev.ptr(op, mem, job.input)?),
                    Ptr(ptr),
                    Ptr(bias),
                    Ptr(dev.ptr(op, mem, job.out)?),
                    I32(*rows as i32),
                    I32(n as i32),
                    I32(k as i32),
                ];
                let name = if bf16 { "matmul_bf16" } else { "matmul_f32" };
                // One warp per output column.
                dev.launch(op, name, (blocks(n * 32), 1), THREADS, &args)?;
            }
            Ok(())
        }
        OpDesc::QkNormRope {
            q,
            k,
            positions,
            n_heads,
            n_kv_heads,
            norms,
            eps,
            rope,
        } => {
            let rows = positions.len;
            let hd = rope.head_dim();
            check(
                op,
                hd <= 512 && rope.rotary_dim() <= hd,
                "head_dim over 512",
            )?;
            check(
                op,
                q.len >= rows * n_heads * hd && k.len >= rows * n_kv_heads * hd,
                "fewer q/k rows than positions",
            )?;
            let (qn, kn) = match norms {
                Some((qn, kn)) => (dev.vector(op, *qn, hd)?, dev.vector(op, *kn, hd)?),
                None => (0, 0),
            };
            let inv_freq = dev.table(op, rope.inv_freq())?;
            let args = [
                Ptr(dev.ptr(op, mem, *q)?),
                Ptr(dev.ptr(op, mem, *k)?),
                Ptr(dev.ptr(op, mem, *positions)?),
                I32(*n_heads as i32),
                I32(*n_kv_heads as i32),
                I32(hd as i32),
                Ptr(qn),
                Ptr(kn),
                F32(*eps),
                Ptr(inv_freq),
                I32(rope.rotary_dim() as i32),
                I32(rope.is_split_half() as i32),
            ];
            let grid = (rows as u32, (n_heads + n_kv_heads) as u32);
            dev.launch(op, "qk_norm_rope", grid, 128, &args)
        }
        OpDesc::StoreKv {
            slot_mapping,
            k,
            v,
            k_cache,
            v_cache,
            kv_width,
        } => {
            let rows = slot_mapping.len;
            check(
                op,
                k.len >= rows * kv_width && v.len >= rows * kv_width,
                "short K/V rows",
            )?;
            let cap = (k_cache.len.min(v_cache.len) / kv_width.max(&1)) as i64;
            let name = match k_cache.kind() {
                BufKind::F16 => "store_kv_f16",
                _ => "store_kv_f32",
            };
            let args = [
                Ptr(dev.ptr(op, mem, *slot_mapping)?),
                Ptr(dev.ptr(op, mem, *k)?),
                Ptr(dev.ptr(op, mem, *v)?),
                Ptr(dev.ptr(op, mem, *k_cache)?),
                Ptr(dev.ptr(op, mem, *v_cache)?),
                I32(*kv_width as i32),
                I64(cap),
            ];
            dev.launch(op, name, (rows as u32, 1), THREADS, &args)
        }
        OpDesc::Attention {
            q,
            k_cache,
            v_cache,
            query_start_loc,
            seq_lens,
            block_tables,
            block_table_stride,
            block_size,
            shape,
            out,
        } => {
            let width = shape.n_heads * shape.head_dim;
            let rows = out.len / width.max(1);
            check(op, q.len >= rows * width, "short q")?;
            check(
                op,
                shape.n_kv_heads > 0 && shape.n_heads % shape.n_kv_heads == 0,
                "heads not a multiple of K/V heads",
            )?;
            let f16 = k_cache.kind() == BufKind::F16;
            let name = match (shape.head_dim, f16) {
                (16, false) => "attention_d16_f32",
                (32, false) => "attention_d32_f32",
                (64, false) => "attention_d64_f32",
                (96, false) => "attention_d96_f32",
                (128, false) => "attention_d128_f32",
                (256, false) => "attention_d256_f32",
                (16, true) => "attention_d16_f16",
                (32, true) => "attention_d32_f16",
                (64, true) => "attention_d64_f16",
                (96, true) => "attention_d96_f16",
                (128, true) => "attention_d128_f16",
                (256, true) => "attention_d256_f16",
                (d, _) => {
                    return Err(RuntimeError::op(
                        op,
                        format!(
                            "head_dim {d} has no CUDA attention kernel (16, 32, 64, 96, 128, 256)"
                        ),
                    ))
                }
            };
            let args = [
                Ptr(dev.ptr(op, mem, *q)?),
                Ptr(dev.ptr(op, mem, *k_cache)?),
                Ptr(dev.ptr(op, mem, *v_cache)?),
                Ptr(dev.ptr(op, mem, *query_start_loc)?),
                Ptr(dev.ptr(op, mem, *seq_lens)?),
                Ptr(dev.ptr(op, mem, *block_tables)?),
                I32(seq_lens.len as i32),
                I32(*block_table_stride as i32),
                I32(*block_size as i32),
                I32(shape.n_heads as i32),
                I32(shape.n_kv_heads as i32),
                F32(shape.scale),
                Ptr(dev.ptr(op, mem, *out)?),
            ];
            dev.launch(op, name, (rows as u32, shape.n_heads as u32), 128, &args)
        }
        OpDesc::Add { acc, x } => {
            let n = acc.len.min(x.len);
            let args = [
                Ptr(dev.ptr(op, mem, *acc)?),
                Ptr(dev.ptr(op, mem, *x)?),
                I64(n as i64),
            ];
            dev.launch(op, "add_in_place", (blocks(n), 1), THREADS, &args)
        }
        OpDesc::SiluMul { gate, up } => {
            check(op, gate.len == up.len, "gate and up differ in length")?;
            let n = gate.len;
            let args = [
                Ptr(dev.ptr(op, mem, *gate)?),
                Ptr(dev.ptr(op, mem, *up)?),
                I64(n as i64),
            ];
            dev.launch(op, "silu_mul", (blocks(n), 1), THREADS, &args)
        }
        // Refused (or, for sampling, run on the host) before launch (`backend::placement`).
        OpDesc::RestoreStates { .. }
        | OpDesc::GatedDeltaNet(_)
        | OpDesc::SplitQueryGate { .. }
        | OpDesc::SigmoidMul { .. }
        | OpDesc::Moe(_)
        | OpDesc::Sample { .. } => Err(RuntimeError::Unsupported {
            backend: "cuda",
            op: desc.name(),
        }),
    }
}
