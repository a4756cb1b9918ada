//! The CUDA backend's host side in the engine, on its host emulator (no GPU here): the same
//! greedy ids as the CPU backend for batches crossing prefill buckets, captured plans (graphs)
//! equal to eager steps, a request's ids alone equal to its ids inside a batch of 12, seeded
//! sampling (a host op after the graph) equal to the CPU's draws, and hybrids refused clearly.

use std::path::{Path, PathBuf};

use oxllm_engine::{
    BackendKind, Engine, EngineConfig, EngineError, GenerationRequest, KvCacheSize, PlanMode,
};
use oxllm_models::load_model;
use oxllm_sample::SamplingParams;

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name)
}

fn prompts(vocab: usize, lengths: &[usize]) -> Vec<Vec<u32>> {
    let mut state = 777u64;
    lengths
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (3 + (state >> 33) as usize % (vocab - 3)) as u32
                })
                .collect()
        })
        .collect()
}

fn start(path: &Path, backend: BackendKind, plan: PlanMode) -> Result<Engine, EngineError> {
    let (_, model) = load_model(path).unwrap();
    let config = EngineConfig {
        threads: 2,
        max_num_seqs: 12,
        max_num_batched_tokens: 256,
        kv_cache: KvCacheSize::Blocks(96),
        backend,
        plan,
        ..EngineConfig::default()
    };
    Engine::start(model, None, config)
}

fn run_all(engine: &Engine, prompts: &[Vec<u32>], params: &SamplingParams) -> Vec<Vec<u32>> {
    let h = engine.handle();
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

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        ignore_eos: true,
        ..SamplingParams::greedy()
    }
}

#[test]
fn emulated_cuda_matches_cpu_eager_and_captured_alone_and_batched() {
    for arch in ["qwen3-f32", "qwen2-bf16"] {
        let path = tiny(arch);
        let cpu = start(&path, BackendKind::Cpu, PlanMode::Captured).unwrap();
        let ps = prompts(
            cpu.handle().info().vocab_size,
            &[3, 15, 17, 33, 64, 100, 5, 9, 40, 70, 2, 20],
        );
        let want = run_all(&cpu, &ps, &greedy(10));
        drop(cpu);

        let captured = start(&path, BackendKind::CudaEmulator, PlanMode::Captured).unwrap();
        let plans = captured.handle().info().plans.clone();
        assert!(!plans.decode_buckets.is_empty(), "{arch}: {plans:?}");
        let batch = run_all(&captured, &ps, &greedy(10));
        assert_eq!(batch, want, "{arch}: emulated CUDA (captured) vs CPU");
        let stats = captured.handle().stats();
        assert!(stats.plan_steps > 0, "{arch}: no step replayed a graph");
        let alone: Vec<Vec<u32>> = ps[..3]
            .iter()
            .map(|p| run_all(&captured, std::slice::from_ref(p), &greedy(10)).remove(0))
            .collect();
        assert_eq!(alone[..], batch[..3], "{arch}: alone vs in a batch of 12");
        drop(captured);

        let eager = start(&path, BackendKind::CudaEmulator, PlanMode::Eager).unwrap();
        assert_eq!(run_all(&eager, &ps, &greedy(10)), want, "{arch}: eager");
    }
}

#[test]
fn emulated_cuda_draws_the_cpu_seeded_samples() {
    let path = tiny("llama-f32");
    let params = SamplingParams {
        max_tokens: 12,
        ignore_eos: true,
        temperature: 0.9,
        top_p: 0.95,
        seed: Some(42),
        ..SamplingParams::greedy()
    };
    let cpu = start(&path, BackendKind::Cpu, PlanMode::Captured).unwrap();
    let ps = prompts(cpu.handle().info().vocab_size, &[4, 30, 11]);
    let want = run_all(&cpu, &ps, &params);
    drop(cpu);
    let gpu = start(&path, BackendKind::CudaEmulator, PlanMode::Captured).unwrap();
    assert_eq!(run_all(&gpu, &ps, &params), want);
}

#[test]
fn hybrid_models_are_refused_on_the_cuda_backend() {
    match start(
        &tiny("qwen3-next-f32"),
        BackendKind::CudaEmulator,
        PlanMode::Captured,
    ) {
        Err(EngineError::Config(msg)) => assert!(msg.contains("hybrid"), "{msg}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a hybrid model started on the CUDA backend"),
    }
}
