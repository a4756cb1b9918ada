//! Prefix caching and state slots of hybrid models through the engine, bit for bit on the tiny
//! f32 Qwen3.5 and Qwen3-Next checkpoints: a warm prefix hit (restoring a recurrent-state
//! checkpoint) gives the same greedy ids as a cold run, also for prompts sharing exactly one
//! checkpoint interval; hits show in the counters; outputs do not depend on batching, chunking,
//! preemption or a state pool smaller than `max_num_seqs`.

use std::path::PathBuf;

use oxllm_engine::{Engine, EngineConfig, GenerationRequest, KvCacheSize};
use oxllm_models::load_model;
use oxllm_sample::SamplingParams;

const MODELS: [&str; 2] = ["qwen3.5-f32", "qwen3-next-f32"];

fn start(dir: &str, config: EngineConfig) -> Engine {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(dir);
    let (_, model) = load_model(&path).unwrap();
    Engine::start(model, None, config).unwrap()
}

/// Block size 16, a checkpoint every 2 blocks (32 tokens).
fn base() -> EngineConfig {
    EngineConfig {
        threads: 2,
        state_checkpoint_interval: 2,
        ..EngineConfig::default()
    }
}

/// Runs the prompts concurrently; greedy ids of each.
fn run(engine: &Engine, prompts: &[Vec<u32>], max_tokens: usize) -> Vec<Vec<u32>> {
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

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + salt * 101 + i * i * salt) % 500 + 3)
        .collect()
}

fn cat(a: &[u32], b: &[u32]) -> Vec<u32> {
    [a, b].concat()
}

fn hits(engine: &Engine) -> u64 {
    engine.handle().stats().prefix_hit_tokens
}

#[test]
fn warm_hits_restore_checkpoints_and_match_cold() {
    for dir in MODELS {
        let shared = tokens(80, 1);
        // Shares exactly one interval (32 tokens) with `first`, then 64, then 80 (whole).
        let first = cat(&shared, &tokens(9, 2));
        let one = cat(&shared[..32], &tokens(21, 3));
        let two = cat(&shared[..70], &tokens(5, 4));
        let same = first.clone();
        let cold: Vec<Vec<u32>> = [&first, &one, &two, &same]
            .iter()
            .map(|p| run(&start(dir, base()), std::slice::from_ref(*p), 24).remove(0))
            .collect();
        let engine = start(dir, base());
        assert_eq!(run(&engine, std::slice::from_ref(&first), 24)[0], cold[0]);
        assert_eq!(hits(&engine), 0, "{dir}: nothing cached yet");
        // Each later prompt hits the longest checkpointed boundary its blocks allow.
        for (prompt, want_ids, want_hit) in [
            (&one, &cold[1], 32),
            (&two, &cold[2], 64),
            (&same, &cold[3], 64),
        ] {
            let before = hits(&engine);
            let warm = run(&engine, std::slice::from_ref(prompt), 24).remove(0);
            assert_eq!(&warm, want_ids, "{dir}: warm vs cold ids");
            assert_eq!(hits(&engine) - before, want_hit, "{dir}: hit tokens");
        }
        // The first request's output tokens were checkpointed too (80 + 9 + 24 > 96): its
        // prompt plus output hits up to the last boundary before its last token.
        let mut extended = first.clone();
        extended.extend_from_slice(&cold[0]);
        let before = hits(&engine);
        run(&engine, std::slice::from_ref(&extended), 4);
        assert_eq!(
            hits(&engine) - before,
            96,
            "{dir}: generated blocks are checkpointed"
        );
    }
}

/// Prompts of a few shared prefixes, so later ones hit what earlier ones checkpoint.
fn family() -> Vec<Vec<u32>> {
    let roots = [tokens(70, 5), tokens(40, 6), tokens(100, 7)];
    (0..12u32)
        .map(|k| {
            let root = &roots[k as usize % 3];
            let keep = [32, 40, 64, 70, 33, 96][k as usize % 6].min(root.len());
            cat(&root[..keep], &tokens(3 + (k as usize * 5) % 19, 10 + k))
        })
        .collect()
}

#[test]
fn batched_chunked_preempted_and_slot_bound_runs_match_alone_cold() {
    for dir in MODELS {
        let prompts = family();
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| run(&start(dir, base()), std::slice::from_ref(p), 16).remove(0))
            .collect();
        // All at once, whole prompts per step where the budget allows.
        let engine = start(dir, base());
        assert_eq!(run(&engine, &prompts, 16), alone, "{dir}: batched");
        // Again on the warm engine: every prompt hits.
        let before = hits(&engine);
        assert_eq!(run(&engine, &prompts, 16), alone, "{dir}: batched, warm");
        assert!(hits(&engine) - before >= 32 * prompts.len() as u64);
        // Chunked by a 7-token budget: checkpoints fall inside chunks and decode steps.
        let chunked = start(
            dir,
            EngineConfig {
                max_num_batched_tokens: 7,
                ..base()
            },
        );
        assert_eq!(run(&chunked, &prompts, 16), alone, "{dir}: chunked");
        assert!(hits(&chunked) > 0, "{dir}: chunked run hit nothing");
        // Too few blocks: requests are preempted, freeing their state slots, and recomputed
        // (from a checkpoint when one is cached).
        let tight = start(
            dir,
            EngineConfig {
                kv_cache: KvCacheSize::Blocks(24),
                max_num_batched_tokens: 64,
                ..base()
            },
        );
        assert_eq!(run(&tight, &prompts, 16), alone, "{dir}: preempted");
        assert!(
            tight.handle().stats().num_preemptions > 0,
            "{dir}: no preemption"
        );
        // Two state slots for max_num_seqs 64: at most two run at once; the engine says so.
        let bound = start(
            dir,
            EngineConfig {
                max_state_slots: Some(2),
                num_state_checkpoints: Some(3),
                ..base()
            },
        );
        let summary = bound.handle().info().state_summary().join("\n");
        assert!(
            summary.contains("at most 2 sequences run at once, below --max-num-seqs 64"),
            "{summary}"
        );
        assert_eq!(run(&bound, &prompts, 16), alone, "{dir}: 2 state slots");
        // Stats are published after the step that delivered the last tokens.
        let settled = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut s = bound.handle().stats();
        while s.num_running > 0 && std::time::Instant::now() < settled {
            std::thread::sleep(std::time::Duration::from_millis(5));
            s = bound.handle().stats();
        }
        assert_eq!((s.num_state_slots_total, s.num_state_slots_free), (2, 2));
        assert!((1..=3).contains(&s.num_state_checkpoints), "{s:?}");
    }
}

#[test]
fn prefix_caching_off_never_hits_hybrids_and_dense_reports_no_states() {
    let engine = start(
        "qwen3.5-f32",
        EngineConfig {
            enable_prefix_caching: false,
            ..base()
        },
    );
    let p = tokens(70, 1);
    let a = run(&engine, &[p.clone(), p.clone()], 8);
    let b = run(&engine, std::slice::from_ref(&p), 8);
    assert_eq!(a[0], b[0]);
    assert_eq!(hits(&engine), 0);
    let info = engine.handle().info().clone();
    assert_eq!(info.states.map(|s| s.num_checkpoints), Some(0));
    let dense = start("llama-f32", base());
    assert!(dense.handle().info().states.is_none());
    assert!(dense.handle().info().state_summary().is_empty());
}
