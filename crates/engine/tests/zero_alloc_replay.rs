//! A captured decode plan (forward + sampling) replays without a single heap allocation, on
//! any thread, counted by a global allocator around the replay: SmolLM2 (dense) and the tiny
//! hybrids (Gated DeltaNet, gated attention, MoE).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use oxllm_models::graph::{
    record_dense_forward, record_hybrid_forward, KvBuffers, StateBuffers, StepBuffers,
};
use oxllm_models::load_model;
use oxllm_runtime::{Backend, BufKind, CpuBackend, OpDesc};
use oxllm_sample::sample_rows::SampleRows;
use oxllm_sample::{Sampler, SamplingParams};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Print a backtrace per counted allocation; read from the environment before counting.
static TRACE: AtomicBool = AtomicBool::new(false);

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            if TRACE.load(Ordering::Relaxed) {
                // Debugging aid only (OXLLM_TRACE_ALLOCS=1): printing allocates, so counting
                // pauses meanwhile.
                COUNTING.store(false, Ordering::SeqCst);
                eprintln!(
                    "ALLOC {} {}",
                    layout.size(),
                    std::backtrace::Backtrace::force_capture()
                );
                COUNTING.store(true, Ordering::SeqCst);
            }
        }
        // SAFETY: the caller's arguments satisfy `GlobalAlloc`'s contract, passed on as given.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's arguments satisfy `GlobalAlloc`'s contract, passed on as given.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's arguments satisfy `GlobalAlloc`'s contract, passed on as given.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn smollm2() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/oxllm"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn write_u32(b: &mut dyn Backend, buf: oxllm_runtime::BufRef, data: &[u32]) {
    let mem = b.host_access("test", true).unwrap();
    mem.u32_mut("test", buf).unwrap().copy_from_slice(data);
}

/// `seqs` sequences decode at positions `first_pos + s` over a cache of `kind` values.
fn dense_decode_replay_allocates_nothing(seqs: usize, first_pos: u32, kind: BufKind) {
    let (_, model) = load_model(&smollm2()).unwrap();
    let model = model.dense_shared().unwrap().clone();
    let (block_size, num_blocks, stride) = (16usize, 192usize, 40usize);
    let mut b = CpuBackend::new(2);
    b.load_weights(model.clone()).unwrap();
    let kv = KvBuffers::alloc_of(
        &mut b,
        kind,
        model.layers.len(),
        num_blocks,
        block_size,
        model.config.kv_width(),
    )
    .unwrap();
    let inputs = StepBuffers::alloc(&mut b, 64, seqs, stride).unwrap();
    let rows = b
        .alloc_host(Box::new(SampleRows::new(seqs).unwrap()))
        .unwrap();
    let ids = b.alloc_persistent(BufKind::U32, seqs).unwrap();
    let view = inputs.view(seqs, seqs, seqs).unwrap();
    let record = |b: &mut CpuBackend| {
        let logits = record_dense_forward(b, &model, &view, &kv).unwrap();
        b.launch(OpDesc::Sample {
            logits,
            rows,
            token_ids: ids,
            mask: None,
            vocab: model.config.vocab_size,
        })
        .unwrap();
    };
    b.warm_step().unwrap();
    record(&mut b);
    b.end_step().unwrap();
    b.begin_capture().unwrap();
    record(&mut b);
    let plan = b.end_capture().unwrap();

    // Sequence s decodes its token at position first_pos + s; its blocks are
    // 1 + s * stride.. (block 0 is the null block).
    let tokens: Vec<u32> = (0..seqs as u32).map(|s| 100 + 37 * s).collect();
    let positions: Vec<u32> = (0..seqs as u32).map(|s| first_pos + s).collect();
    let mut tables = vec![0u32; seqs * stride];
    for (s, t) in tables.chunks_mut(stride).enumerate() {
        for (i, b) in t.iter_mut().enumerate() {
            *b = (1 + s * stride + i) as u32;
        }
    }
    let slots: Vec<i32> = (0..seqs)
        .map(|s| {
            let p = positions[s] as usize;
            (tables[s * stride + p / block_size] as usize * block_size + p % block_size) as i32
        })
        .collect();
    let qsl: Vec<u32> = (0..=seqs as u32).collect();
    let lens: Vec<u32> = positions.iter().map(|p| p + 1).collect();
    write_u32(&mut b, view.token_ids, &tokens);
    write_u32(&mut b, view.positions, &positions);
    {
        let mem = b.host_access("test", true).unwrap();
        mem.i32_mut("test", view.slot_mapping)
            .unwrap()
            .copy_from_slice(&slots);
    }
    write_u32(&mut b, view.query_start_loc, &qsl);
    write_u32(&mut b, view.seq_lens, &lens);
    write_u32(&mut b, view.block_tables, &tables);
    write_u32(
        &mut b,
        view.logits_indices,
        &(0..seqs as u32).collect::<Vec<_>>(),
    );
    {
        let mem = b.host_access("test", true).unwrap();
        let mut r = mem.host_mut::<SampleRows>("test", rows).unwrap();
        let seeded = SamplingParams {
            temperature: 0.8,
            top_k: Some(40),
            top_p: 0.9,
            seed: Some(7),
            ..SamplingParams::greedy()
        };
        for (i, row) in r.rows.iter_mut().enumerate() {
            row.active = true;
            let params = if i % 2 == 0 {
                SamplingParams::greedy()
            } else {
                seeded.clone()
            };
            row.sampler = Sampler::new(&params, 1).unwrap();
        }
    }
    // Two replays outside the count let per-thread scratch (kernel buffers, the sampler's
    // candidate list) reach their sizes; every later replay must allocate nothing.
    b.replay(&plan).unwrap();
    b.replay(&plan).unwrap();
    TRACE.store(
        std::env::var_os("OXLLM_TRACE_ALLOCS").is_some(),
        Ordering::SeqCst,
    );
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        b.replay(&plan).unwrap();
    }
    COUNTING.store(false, Ordering::SeqCst);
    let allocs = ALLOCS.load(Ordering::SeqCst);
    let mem = b.host_access("test", false).unwrap();
    let sampled = mem.u32("test", ids).unwrap().to_vec();
    assert!(sampled
        .iter()
        .all(|&t| (t as usize) < model.config.vocab_size));
    assert_eq!(
        allocs, 0,
        "{seqs} rows at {first_pos}, {kind:?} cache: replay allocated {allocs} times"
    );
}

fn tiny(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(dir)
}

/// A hybrid decode plan (Gated DeltaNet with its states, gated attention, MoE with routing
/// inside the op, sampling) replays without allocating, with restores and a checkpoint in
/// the step inputs so those paths run too.
fn hybrid_decode_replay_allocates_nothing(dir: &str) {
    let (_, model) = load_model(&tiny(dir)).unwrap();
    let model = model.hybrid_shared().unwrap().clone();
    let c = &model.config.base;
    let (seqs, block_size, num_blocks, stride, slots) = (4usize, 16usize, 64usize, 8usize, 8);
    let mut b = CpuBackend::new(2);
    b.load_weights(model.clone()).unwrap();
    let kv = KvBuffers::alloc(&mut b, c.kv_layers, num_blocks, block_size, c.kv_width()).unwrap();
    let states = StateBuffers::alloc(&mut b, &model, slots, seqs, 64).unwrap();
    let inputs = StepBuffers::alloc(&mut b, 64, seqs, stride).unwrap();
    let rows = b
        .alloc_host(Box::new(SampleRows::new(seqs).unwrap()))
        .unwrap();
    let ids = b.alloc_persistent(BufKind::U32, seqs).unwrap();
    let view = inputs.view(seqs, seqs, seqs).unwrap();
    let vocab = c.vocab_size;
    let record = |b: &mut CpuBackend| {
        let logits = record_hybrid_forward(b, &model, &view, &kv, &states).unwrap();
        b.launch(OpDesc::Sample {
            logits,
            rows,
            token_ids: ids,
            mask: None,
            vocab,
        })
        .unwrap();
    };
    b.warm_step().unwrap();
    record(&mut b);
    b.end_step().unwrap();
    b.begin_capture().unwrap();
    record(&mut b);
    let plan = b.end_capture().unwrap();

    let tokens: Vec<u32> = (0..seqs as u32).map(|s| 10 + 37 * s).collect();
    let positions: Vec<u32> = (0..seqs as u32).map(|s| 3 + s).collect();
    let slot_map: Vec<i32> = (0..seqs as i32)
        .map(|s| (s + 1) * block_size as i32 + 3 + s)
        .collect();
    let qsl: Vec<u32> = (0..=seqs as u32).collect();
    let lens: Vec<u32> = positions.iter().map(|p| p + 1).collect();
    let mut tables = vec![0u32; seqs * stride];
    for s in 0..seqs {
        tables[s * stride] = s as u32 + 1;
    }
    write_u32(&mut b, view.token_ids, &tokens);
    write_u32(&mut b, view.positions, &positions);
    {
        let mem = b.host_access("test", true).unwrap();
        mem.i32_mut("test", view.slot_mapping)
            .unwrap()
            .copy_from_slice(&slot_map);
    }
    write_u32(&mut b, view.query_start_loc, &qsl);
    write_u32(&mut b, view.seq_lens, &lens);
    write_u32(&mut b, view.block_tables, &tables);
    write_u32(
        &mut b,
        view.logits_indices,
        &(0..seqs as u32).collect::<Vec<_>>(),
    );
    // Sequence 1 restores from slot 6; sequence 2's state is checkpointed into slot 7.
    states
        .write_inputs(&mut b, &[0, 1, 2, 3], &[-1, 6, -1, -1], &[2], &[7])
        .unwrap();
    {
        let mem = b.host_access("test", true).unwrap();
        let mut r = mem.host_mut::<SampleRows>("test", rows).unwrap();
        for row in r.rows.iter_mut() {
            row.active = true;
            row.sampler = Sampler::new(&SamplingParams::greedy(), 1).unwrap();
        }
    }
    // No warm-up replays: the warm step had every pool thread run every op, so the first
    // replay already finds its scratch.
    TRACE.store(
        std::env::var_os("OXLLM_TRACE_ALLOCS").is_some(),
        Ordering::SeqCst,
    );
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        b.replay(&plan).unwrap();
    }
    COUNTING.store(false, Ordering::SeqCst);
    let allocs = ALLOCS.load(Ordering::SeqCst);
    let mem = b.host_access("test", false).unwrap();
    let sampled = mem.u32("test", ids).unwrap().to_vec();
    assert!(sampled.iter().all(|&t| (t as usize) < vocab));
    assert_eq!(allocs, 0, "{dir}: replay allocated {allocs} times");
}

/// The only test of this binary: the allocation counter is global to the process, so nothing
/// else may run beside it (not even the test harness printing another test's result).
#[test]
fn replaying_captured_decode_plans_allocates_nothing() {
    dense_decode_replay_allocates_nothing(4, 3, BufKind::F32);
    // One row over 3 KV heads, 2 threads, 601 keys, half-float and f32 caches: the split
    // decode attention (`kernels::attention`), whose shared buffers the warm step sizes.
    dense_decode_replay_allocates_nothing(1, 600, BufKind::F16);
    dense_decode_replay_allocates_nothing(1, 600, BufKind::F32);
    for dir in ["qwen3-next-f32", "qwen3.5-f32", "qwen3-moe-f32"] {
        hybrid_decode_replay_allocates_nothing(dir);
    }
}
