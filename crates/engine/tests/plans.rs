//! Captured plans against eager steps, bit for bit: greedy ids of batches of 1..12 requests
//! whose prompts cross several prefill buckets, with prefix hits and chunked prefill, on
//! SmolLM2 Q4_1, the tiny f32 Llama and the tiny f32 hybrids (Qwen3.5, Qwen3-Next, Qwen3-MoE:
//! recurrent state restored from checkpoints on prefix hits, carried across prefill chunks,
//! masked in padded buckets); and the reference backend (scalar, no capture) agrees with the
//! CPU backend while running every step eager.

use std::path::{Path, PathBuf};

use oxllm_engine::{
    BackendKind, Engine, EngineConfig, EngineStats, GenerationRequest, KvCacheSize, PlanMode,
};
use oxllm_models::load_model;
use oxllm_sample::SamplingParams;

fn smollm2() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/oxllm"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/llama-f32")
}

/// Prompt lengths on both sides of the 16..256 prefill buckets.
const LENGTHS: [usize; 12] = [3, 9, 15, 17, 31, 33, 47, 64, 65, 100, 129, 200];

fn prompts(vocab: usize) -> Vec<Vec<u32>> {
    let mut state = 12345u64;
    LENGTHS
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (3 + (state >> 33) as usize % (vocab - 3).min(30000)) as u32
                })
                .collect()
        })
        .collect()
}

fn start(path: &Path, config: EngineConfig) -> Engine {
    let (_, model) = load_model(path).unwrap();
    Engine::start(model, None, config).unwrap()
}

fn run_all(engine: &Engine, prompts: &[Vec<u32>], max_tokens: usize) -> Vec<Vec<u32>> {
    let h = engine.handle();
    let params = SamplingParams {
        max_tokens,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            h.submit(GenerationRequest {
                prompt_ids: p.clone(),
                params: params.clone(),
                choice: 0,
                constraint: None,
            })
            .unwrap()
        })
        .collect();
    streams
        .into_iter()
        .map(|s| s.collect_blocking().unwrap().0)
        .collect()
}

/// Batches of the first 1..=12 prompts, then all 12 again (prefix hits), then a chunked run.
fn matrix(
    path: &Path,
    base: &EngineConfig,
    max_tokens: usize,
) -> (Vec<Vec<Vec<u32>>>, EngineStats) {
    let engine = start(path, base.clone());
    let plans = engine.handle().info().plans.clone();
    assert!(plans.failed.is_empty(), "every bucket captures: {plans:?}");
    let vocab = engine.handle().info().vocab_size;
    let ps = prompts(vocab);
    let mut out: Vec<_> = (1..=ps.len())
        .map(|b| run_all(&engine, &ps[..b], max_tokens))
        .collect();
    let hits_before = engine.handle().stats().prefix_hit_tokens;
    out.push(run_all(&engine, &ps, max_tokens));
    assert!(
        engine.handle().stats().prefix_hit_tokens > hits_before,
        "the rerun hit the prefix cache"
    );
    let stats = engine.handle().stats();
    drop(engine);
    let chunked = start(
        path,
        EngineConfig {
            max_num_batched_tokens: 32,
            enable_prefix_caching: false,
            ..base.clone()
        },
    );
    out.push(run_all(&chunked, &ps[8..], max_tokens));
    (out, stats)
}

fn check_eager_equals_captured(path: &Path, max_tokens: usize) {
    let base = EngineConfig {
        threads: 2,
        max_num_seqs: 16,
        kv_cache: KvCacheSize::Blocks(512),
        ..EngineConfig::default()
    };
    let (eager, eager_stats) = matrix(
        path,
        &EngineConfig {
            plan: PlanMode::Eager,
            ..base.clone()
        },
        max_tokens,
    );
    let (captured, captured_stats) = matrix(
        path,
        &EngineConfig {
            plan: PlanMode::Captured,
            ..base
        },
        max_tokens,
    );
    assert_eq!(eager_stats.plan_steps, 0, "eager never replays");
    assert!(captured_stats.plan_steps > 0, "captured replays plans");
    assert!(
        captured_stats.plan_steps > captured_stats.eager_steps,
        "most steps replay: {captured_stats:?}"
    );
    for (b, (e, c)) in eager.iter().zip(&captured).enumerate() {
        assert_eq!(e, c, "run {b}: captured ids differ from eager");
    }
    // Batch invariance across runs: each prompt's ids are the same in every batch it was in,
    // with prefix hits, and chunked.
    let last = &captured[11];
    for (b, run) in captured.iter().enumerate().take(13) {
        for (i, ids) in run.iter().enumerate() {
            assert_eq!(ids, &last[i], "prompt {i} in run {b}");
        }
    }
    assert_eq!(captured[13], last[8..].to_vec(), "chunked prefill");
}

#[test]
fn tiny_f32_eager_and_captured_agree_bit_for_bit() {
    check_eager_equals_captured(&tiny_llama(), 8);
}

fn tiny(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(dir)
}

#[test]
fn tiny_qwen3_5_eager_and_captured_agree_bit_for_bit() {
    check_eager_equals_captured(&tiny("qwen3.5-f32"), 8);
}

#[test]
fn tiny_qwen3_next_eager_and_captured_agree_bit_for_bit() {
    check_eager_equals_captured(&tiny("qwen3-next-f32"), 8);
}

#[test]
fn tiny_qwen3_moe_eager_and_captured_agree_bit_for_bit() {
    check_eager_equals_captured(&tiny("qwen3-moe-f32"), 8);
}

#[test]
fn smollm2_eager_and_captured_agree_bit_for_bit() {
    check_eager_equals_captured(&smollm2(), 5);
}

fn reference_backend_matches_cpu(path: PathBuf) {
    let config = |backend| EngineConfig {
        threads: 2,
        max_num_seqs: 4,
        kv_cache: KvCacheSize::Blocks(128),
        backend,
        ..EngineConfig::default()
    };
    let cpu = start(&path, config(BackendKind::Cpu));
    let reference = start(&path, config(BackendKind::Reference));
    let report = reference.handle().info().plans.clone();
    assert!(report.decode_buckets.is_empty() && report.prefill_buckets.is_empty());
    assert!(
        report
            .failed
            .iter()
            .any(|m| m.contains("does not support capture")),
        "{report:?}"
    );
    let ps = prompts(cpu.handle().info().vocab_size);
    let a = run_all(&cpu, &ps[..4], 12);
    let b = run_all(&reference, &ps[..4], 12);
    assert_eq!(
        a, b,
        "scalar reference and fast kernels pick the same greedy tokens"
    );
    let stats = reference.handle().stats();
    assert_eq!(stats.plan_steps, 0);
    assert!(stats.eager_steps > 0);
}

#[test]
fn the_reference_backend_runs_eager_and_matches_the_cpu_kernels() {
    reference_backend_matches_cpu(tiny_llama());
}

#[test]
fn the_reference_backend_runs_hybrids_eager_and_matches_the_cpu_kernels() {
    reference_backend_matches_cpu(tiny("qwen3-next-f32"));
    reference_backend_matches_cpu(tiny("qwen3-moe-f32"));
}
