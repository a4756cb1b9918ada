//! Where one replay of a captured decode plan spends its time: the dense forward plus sampling
//! of a decode bucket, captured on the CPU backend and replayed with every op timed.

use std::path::Path;
use std::time::Duration;

use oxllm_models::graph::{record_dense_forward, KvBuffers, StepBuffers};
use oxllm_models::load_model;
use oxllm_runtime::{Backend, BufKind, CpuBackend, OpDesc, OpProfile};
use oxllm_sample::sample_rows::SampleRows;

use crate::error::BenchError;

/// Per-op time of one replay, averaged over `replays`, for `batch` sequences decoding at
/// context `context` on `threads` threads.
pub fn profile_decode_replay(
    model_path: &Path,
    batch: usize,
    context: usize,
    threads: usize,
    replays: usize,
    kv_f16: bool,
) -> Result<(OpProfile, Duration), BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::Engine(e.to_string());
    let (_, model) = load_model(model_path).map_err(|e| err(&e))?;
    let model = model
        .dense_shared()
        .ok_or_else(|| BenchError::Config("plans profile a dense model".into()))?
        .clone();
    let block_size = 16;
    let blocks_per_seq = (context + 1).div_ceil(block_size);
    let num_blocks = 1 + batch * blocks_per_seq;
    let mut b = CpuBackend::new(threads);
    b.load_weights(model.clone()).map_err(|e| err(&e))?;
    let c = &model.config;
    let kv_kind = if kv_f16 { BufKind::F16 } else { BufKind::F32 };
    let kv = KvBuffers::alloc_of(
        &mut b,
        kv_kind,
        model.layers.len(),
        num_blocks,
        block_size,
        c.kv_width(),
    )
    .map_err(|e| err(&e))?;
    let inputs = StepBuffers::alloc(&mut b, batch, batch, blocks_per_seq).map_err(|e| err(&e))?;
    let rows = b
        .alloc_host(Box::new(SampleRows::new(batch).map_err(|e| err(&e))?))
        .map_err(|e| err(&e))?;
    let ids = b
        .alloc_persistent(BufKind::U32, batch)
        .map_err(|e| err(&e))?;
    let view = inputs
        .view(batch, batch, batch)
        .ok_or_else(|| BenchError::Config("batch too large".into()))?;
    let record = |b: &mut CpuBackend| -> Result<(), BenchError> {
        let logits = record_dense_forward(b, &model, &view, &kv).map_err(|e| err(&e))?;
        b.launch(OpDesc::Sample {
            logits,
            rows,
            token_ids: ids,
            mask: None,
            vocab: c.vocab_size,
        })
        .map_err(|e| err(&e))?;
        Ok(())
    };
    b.warm_step().map_err(|e| err(&e))?;
    record(&mut b)?;
    b.end_step().map_err(|e| err(&e))?;
    b.begin_capture().map_err(|e| err(&e))?;
    record(&mut b)?;
    let plan = b.end_capture().map_err(|e| err(&e))?;
    {
        // Sequence s decodes position `context` over its own blocks 1 + s * blocks_per_seq ...
        const OP: &str = "profile_inputs";
        let mem = b.host_access(OP, true).map_err(|e| err(&e))?;
        let e = |x: oxllm_runtime::RuntimeError| err(&x);
        for (s, t) in mem
            .u32_mut(OP, view.token_ids)
            .map_err(e)?
            .iter_mut()
            .enumerate()
        {
            *t = 100 + s as u32;
        }
        mem.u32_mut(OP, view.positions)
            .map_err(e)?
            .fill(context as u32);
        for (s, slot) in mem
            .i32_mut(OP, view.slot_mapping)
            .map_err(e)?
            .iter_mut()
            .enumerate()
        {
            let block = 1 + s * blocks_per_seq + context / block_size;
            *slot = (block * block_size + context % block_size) as i32;
        }
        for (i, q) in mem
            .u32_mut(OP, view.query_start_loc)
            .map_err(e)?
            .iter_mut()
            .enumerate()
        {
            *q = i as u32;
        }
        mem.u32_mut(OP, view.seq_lens)
            .map_err(e)?
            .fill(context as u32 + 1);
        for (i, t) in mem
            .u32_mut(OP, view.block_tables)
            .map_err(e)?
            .iter_mut()
            .enumerate()
        {
            *t = (1 + i) as u32;
        }
        for (i, l) in mem
            .u32_mut(OP, view.logits_indices)
            .map_err(e)?
            .iter_mut()
            .enumerate()
        {
            *l = i as u32;
        }
        // Real values in the cache: untouched zeroed memory maps one shared zero page, which
        // would make reading an f32 cache look free.
        for &(k, v) in &kv.layers {
            for buf in [k, v] {
                match buf.kind() {
                    BufKind::F16 => mem
                        .f16_mut(OP, buf)
                        .map_err(e)?
                        .fill(half::f16::from_f32(0.01)),
                    _ => mem.f32_mut(OP, buf).map_err(e)?.fill(0.01),
                }
            }
        }
        let mut r = mem.host_mut::<SampleRows>(OP, rows).map_err(e)?;
        for row in r.rows.iter_mut() {
            row.active = true;
        }
    }
    b.replay(&plan).map_err(|e| err(&e))?;
    let mut total = OpProfile::default();
    let start = std::time::Instant::now();
    for _ in 0..replays.max(1) {
        let p = b.replay_profiled(&plan).map_err(|e| err(&e))?;
        for (name, count, d) in p.ops {
            match total.ops.iter_mut().find(|(n, _, _)| *n == name) {
                Some((_, c, t)) => {
                    *c += count;
                    *t += d;
                }
                None => total.ops.push((name, count, d)),
            }
        }
    }
    let wall = start.elapsed() / replays.max(1) as u32;
    let n = replays.max(1) as u32;
    for (_, c, d) in total.ops.iter_mut() {
        *c /= n as usize;
        *d /= n;
    }
    Ok((total, wall))
}
