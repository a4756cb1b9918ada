//! Engine invariants on a hybrid model (tiny Qwen3-Next: Gated DeltaNet + gated attention +
//! MoE): greedy ids equal the transformers oracle and do not depend on the batch, on chunked
//! prefill (state carried across chunks) or on preemption (state recomputed in a fresh slot).

use std::path::PathBuf;

use oxllm_engine::{Engine, EngineConfig, GenerationRequest, KvCacheSize};
use oxllm_models::load_model;
use oxllm_sample::SamplingParams;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/qwen3-next-f32")
}

fn run(config: EngineConfig, prompts: &[Vec<u32>], max_tokens: usize) -> Vec<Vec<u32>> {
    let (_, model) = load_model(&fixture()).unwrap();
    let engine = Engine::start(model, None, config).unwrap();
    let h = engine.handle();
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            h.submit(GenerationRequest {
                prompt_ids: p.clone(),
                params: SamplingParams {
                    max_tokens,
                    ignore_eos: true,
                    ..SamplingParams::greedy()
                },
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

#[test]
fn qwen3_next_greedy_is_batch_chunk_and_preemption_invariant() {
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("oracle.json")).unwrap())
            .unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let mut prompts = vec![
        ids(&oracle["prompt_ids"]),
        ids(&oracle["short_prompt"]["prompt_ids"]),
    ];
    for k in 2..16u32 {
        prompts.push(
            (0..(k * 7 % 41 + 1))
                .map(|i| (i * 31 + k * 17) % 500 + 3)
                .collect(),
        );
    }
    let base = EngineConfig {
        threads: 2,
        ..EngineConfig::default()
    };
    // Each prompt alone, whole prompt in one step.
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| run(base.clone(), std::slice::from_ref(p), 32).remove(0))
        .collect();
    assert_eq!(
        alone[0],
        ids(&oracle["greedy_ids"]),
        "80-token prompt vs oracle"
    );
    assert_eq!(alone[1], ids(&oracle["short_prompt"]["greedy_ids"]));
    // All 16 at once, prefill chunked by a 7-token budget.
    let chunked = run(
        EngineConfig {
            max_num_batched_tokens: 7,
            ..base.clone()
        },
        &prompts,
        32,
    );
    assert_eq!(chunked, alone, "batched + chunked");
    // A cache too small for all of them: requests are preempted and recomputed.
    let tight = run(
        EngineConfig {
            kv_cache: KvCacheSize::Blocks(20),
            max_num_batched_tokens: 64,
            ..base
        },
        &prompts,
        32,
    );
    assert_eq!(tight, alone, "under preemption");
}

/// An f16 K/V cache on a hybrid (its gated-attention layers): the f32 checkpoint resolves to
/// f32 by default; asked for f16, the greedy ids still follow the oracle for the first tokens,
/// and batching the prompts with a chunked prefill changes no bit.
#[test]
fn qwen3_next_with_an_f16_cache_keeps_the_oracle_start_and_its_invariance() {
    use oxllm_engine::{KvCacheDtype, KvDtype};
    let (_, model) = load_model(&fixture()).unwrap();
    let auto = Engine::start(model, None, EngineConfig::default()).unwrap();
    assert_eq!(auto.handle().info().kv_dtype, KvDtype::F32);
    drop(auto);
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("oracle.json")).unwrap())
            .unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let prompts = vec![
        ids(&oracle["prompt_ids"]),
        ids(&oracle["short_prompt"]["prompt_ids"]),
    ];
    let half = EngineConfig {
        threads: 2,
        kv_cache_dtype: KvCacheDtype::F16,
        ..EngineConfig::default()
    };
    let alone = run(half.clone(), &prompts[..1], 32).remove(0);
    let want = ids(&oracle["greedy_ids"]);
    assert_eq!(
        alone[..8],
        want[..8],
        "f16 cache: {alone:?} vs oracle {want:?}"
    );
    let batched = run(
        EngineConfig {
            max_num_batched_tokens: 7,
            ..half
        },
        &prompts,
        32,
    );
    assert_eq!(batched[0], alone, "batched + chunked with an f16 cache");
}
