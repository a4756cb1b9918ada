//! Engine invariants on real models: a request's greedy ids do not depend on the batch, on
//! prefix-cache hits, on chunked prefill, or on preemption; seeded sampling reproduces; stop
//! strings cut the text; dropped streams free their blocks; impossible requests are rejected.

use std::path::PathBuf;

use oxllm_core::FinishReason;
use oxllm_engine::{Engine, EngineConfig, GenerationRequest, KvCacheSize, RequestEvent};
use oxllm_models::{load_model, ModelFile};
use oxllm_sample::SamplingParams;
use oxllm_tok::Tokenizer;

fn smollm2() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let p = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/oxllm"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} missing: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/llama-f32")
}

fn start(path: &std::path::Path, config: EngineConfig) -> (Engine, Option<Tokenizer>) {
    let (file, model) = load_model(path).unwrap();
    let tok = match &file {
        ModelFile::Gguf(g) => Some(Tokenizer::from_gguf(g).unwrap()),
        ModelFile::Hf(_) => None,
    };
    let engine = Engine::start(model, tok.clone(), config).unwrap();
    (engine, tok)
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        ignore_eos: true,
        ..SamplingParams::greedy()
    }
}

fn req(ids: &[u32], params: SamplingParams) -> GenerationRequest {
    GenerationRequest {
        prompt_ids: ids.to_vec(),
        params,
        choice: 0,
        constraint: None,
    }
}

/// Runs all requests concurrently and returns each one's (ids, text, reason) in order.
fn run_all(engine: &Engine, reqs: Vec<GenerationRequest>) -> Vec<(Vec<u32>, String, FinishReason)> {
    let h = engine.handle();
    let streams: Vec<_> = reqs.into_iter().map(|r| h.submit(r).unwrap()).collect();
    streams
        .into_iter()
        .map(|s| s.collect_blocking().unwrap())
        .collect()
}

fn mixed_prompts(tok: &Tokenizer) -> Vec<Vec<u32>> {
    let texts = [
        "The capital of France is",
        "def fibonacci(n):\n    if n < 2:\n        return n\n",
        "Once upon a time, in a land far away, there lived a dragon who loved",
        "1, 2, 3, 4, 5,",
        "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
        "Rust is a systems programming language that",
        "The quick brown fox",
        "Q: What is 12 times 12?\nA:",
        "In 1969, the first humans",
        "Photosynthesis is the process by which plants",
        "SELECT name, age FROM users WHERE",
        "My favourite food is",
        "Les chats sont",
        "A list of prime numbers: 2, 3, 5, 7,",
        "The mitochondria is",
        "Hello",
    ];
    texts.iter().map(|t| tok.encode(t, true).unwrap()).collect()
}

#[test]
fn smollm2_greedy_is_batch_invariant_and_survives_chunking_preemption_and_prefix_hits() {
    let path = smollm2();
    let (engine, tok) = start(
        &path,
        EngineConfig {
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let prompts = mixed_prompts(tok.as_ref().unwrap());
    // Alone, one at a time.
    let alone: Vec<_> = prompts
        .iter()
        .map(|p| run_all(&engine, vec![req(p, greedy(24))]).remove(0))
        .collect();
    // All 16 together.
    let together = run_all(
        &engine,
        prompts.iter().map(|p| req(p, greedy(24))).collect(),
    );
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.0, b.0, "request {i}: batch changed greedy ids");
        assert_eq!(a.1, b.1, "request {i}: text");
    }
    // Prefix cache: the same prompts again hit cached blocks and still agree.
    let hits_before = engine.handle().stats().prefix_hit_tokens;
    let warm = run_all(
        &engine,
        prompts.iter().map(|p| req(p, greedy(24))).collect(),
    );
    let hits_after = engine.handle().stats().prefix_hit_tokens;
    assert!(hits_after > hits_before, "no prefix-cache hits recorded");
    for (a, b) in alone.iter().zip(&warm) {
        assert_eq!(a.0, b.0, "prefix hit changed greedy ids");
    }
    drop(engine);

    // Chunked prefill with a 16-token budget.
    let (chunked, _) = start(
        &path,
        EngineConfig {
            max_num_batched_tokens: 16,
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let out = run_all(
        &chunked,
        prompts.iter().map(|p| req(p, greedy(24))).collect(),
    );
    for (a, b) in alone.iter().zip(&out) {
        assert_eq!(a.0, b.0, "chunked prefill changed greedy ids");
    }
    drop(chunked);

    // Prompt tokens capped at 3 per step while others decode (prompts split across many steps,
    // each beside decodes).
    let (capped, _) = start(
        &path,
        EngineConfig {
            max_prefill_beside_decode: Some(3),
            max_num_seqs: 4,
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let out = run_all(
        &capped,
        prompts.iter().map(|p| req(p, greedy(24))).collect(),
    );
    for (a, b) in alone.iter().zip(&out) {
        assert_eq!(a.0, b.0, "the prefill cap changed greedy ids");
    }
    drop(capped);

    // A pool too small for all 16 at once forces preemption.
    let (small, _) = start(
        &path,
        EngineConfig {
            kv_cache: KvCacheSize::Blocks(12),
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let out = run_all(&small, prompts.iter().map(|p| req(p, greedy(24))).collect());
    assert!(
        small.handle().stats().num_preemptions > 0,
        "pool was not small enough"
    );
    for (a, b) in alone.iter().zip(&out) {
        assert_eq!(a.0, b.0, "preemption changed greedy ids");
    }
}

#[test]
fn tiny_llama_f32_batch_invariance_and_oracle_greedy() {
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tiny_llama().join("oracle.json")).unwrap())
            .unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let prompt = ids(&oracle["prompt_ids"]);
    let want = ids(&oracle["greedy_ids"]);
    let (engine, _) = start(
        &tiny_llama(),
        EngineConfig {
            max_num_batched_tokens: 7,
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let mut reqs = vec![req(&prompt, greedy(32))];
    for k in 1..16u32 {
        let p: Vec<u32> = (0..(k * 3 % 17 + 1))
            .map(|i| (i * 37 + k * 11) % 1024)
            .collect();
        reqs.push(req(&p, greedy(10 + k as usize)));
    }
    let out = run_all(&engine, reqs);
    assert_eq!(
        out[0].0, want,
        "engine greedy (chunked, batched) vs transformers"
    );
}

#[test]
fn seeded_sampling_reproduces_across_batches_and_stop_strings_cut() {
    let path = smollm2();
    let (engine, tok) = start(
        &path,
        EngineConfig {
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let tok = tok.unwrap();
    let prompts = mixed_prompts(&tok);
    let sampled = |seed| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        top_k: Some(40),
        seed: Some(seed),
        max_tokens: 20,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let a = run_all(&engine, vec![req(&prompts[2], sampled(7))]).remove(0);
    let mut batch = vec![req(&prompts[2], sampled(7))];
    batch.extend(prompts.iter().take(6).map(|p| req(p, sampled(99))));
    let b = run_all(&engine, batch).remove(0);
    assert_eq!(a.0, b.0, "same seed, different batch");
    let c = run_all(&engine, vec![req(&prompts[2], sampled(8))]).remove(0);
    assert_ne!(a.0, c.0, "different seeds should differ");

    // Stop string: take a piece of the greedy text and stop on it.
    let full = run_all(&engine, vec![req(&prompts[5], greedy(30))]).remove(0);
    let words: Vec<&str> = full.1.split(' ').filter(|w| w.len() > 3).collect();
    assert!(words.len() >= 3, "greedy text too short: {:?}", full.1);
    let stop_word = words[2].to_string();
    let cut_at = full.1.find(&stop_word).unwrap();
    let stopped = run_all(
        &engine,
        vec![req(
            &prompts[5],
            SamplingParams {
                stop: vec![stop_word.clone()].into(),
                ..greedy(30)
            },
        )],
    )
    .remove(0);
    assert_eq!(stopped.2, FinishReason::Stop);
    assert_eq!(
        stopped.1,
        full.1[..cut_at],
        "text must end right before {stop_word:?}"
    );
}

#[test]
fn dropped_streams_free_blocks_and_bad_requests_are_rejected() {
    let path = smollm2();
    let (engine, tok) = start(
        &path,
        EngineConfig {
            threads: 2,
            ..EngineConfig::default()
        },
    );
    let tok = tok.unwrap();
    let h = engine.handle();
    let prompt = tok
        .encode("Tell me a long story about a robot.", true)
        .unwrap();
    let mut streams: Vec<_> = (0..8)
        .map(|_| h.submit(req(&prompt, greedy(200))).unwrap())
        .collect();
    for s in &mut streams {
        // wait for the first delta so the request is running and holds blocks
        match s.blocking_next() {
            Some(RequestEvent::Delta { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(h.stats().num_blocks_used() > 0);
    drop(streams);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let s = h.stats();
        if s.num_running == 0 && s.num_waiting == 0 {
            // Prefix-cached blocks may stay around, but none is referenced by a request.
            assert_eq!(
                s.num_blocks_free + 1,
                s.num_blocks_total,
                "blocks still in use: {s:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "aborts did not happen: {s:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let too_long = vec![1u32; 100];
    let err = h
        .submit(req(
            &too_long,
            SamplingParams {
                max_tokens: 100_000,
                ..greedy(1)
            },
        ))
        .err()
        .expect("must be rejected");
    assert!(err.to_string().contains("exceeds"), "{err}");
    let err = h.submit(req(&[], greedy(4))).err().expect("empty prompt");
    assert!(err.to_string().contains("empty"), "{err}");
    let err = h.submit(req(&[999_999], greedy(4))).err().expect("bad id");
    assert!(err.to_string().contains("vocabulary"), "{err}");
    let err = h
        .submit(req(
            &prompt,
            SamplingParams {
                top_p: 2.0,
                ..greedy(4)
            },
        ))
        .err()
        .expect("bad top_p");
    assert!(err.to_string().contains("top_p"), "{err}");
}

/// The K/V cache's element type: SmolLM2 (quantized) gets f16 by default and the tiny f32
/// checkpoint f32; an f16 cache holds twice the tokens of the same byte budget, and SmolLM2's
/// greedy answer to a clear question is the same with either cache.
#[test]
fn kv_cache_dtype_resolves_per_model_and_f16_keeps_the_answer() {
    use oxllm_engine::{KvCacheDtype, KvDtype};
    let budget = KvCacheSize::Bytes(64 << 20);
    let with = |dtype| EngineConfig {
        threads: 2,
        kv_cache: budget,
        kv_cache_dtype: dtype,
        ..EngineConfig::default()
    };
    let (tiny, _) = start(&tiny_llama(), with(KvCacheDtype::Auto));
    assert_eq!(tiny.handle().info().kv_dtype, KvDtype::F32);
    let (auto, tok) = start(&smollm2(), with(KvCacheDtype::Auto));
    let (full, _) = start(&smollm2(), with(KvCacheDtype::F32));
    let (a, f) = (auto.handle().info().clone(), full.handle().info().clone());
    assert_eq!(a.kv_dtype, KvDtype::F16);
    assert_eq!(f.kv_dtype, KvDtype::F32);
    assert!(
        a.num_blocks >= 2 * f.num_blocks - 1 && a.kv_bytes <= 64 << 20,
        "f16 {} blocks ({} bytes), f32 {} blocks",
        a.num_blocks,
        a.kv_bytes,
        f.num_blocks
    );
    let tok = tok.unwrap();
    let prompt = tok
        .encode(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            false,
        )
        .unwrap();
    let half = run_all(&auto, vec![req(&prompt, greedy(6))]);
    let exact = run_all(&full, vec![req(&prompt, greedy(6))]);
    assert_eq!(half[0].0, exact[0].0, "{:?} vs {:?}", half[0].1, exact[0].1);
    assert!(half[0].1.contains("Paris"), "{:?}", half[0].1);
}
