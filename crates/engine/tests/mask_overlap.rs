//! Token masks computed on a worker while the forward runs (`EngineConfig::overlap_masks`):
//! the same tokens as masks computed before the step, in captured and eager steps and a mixed
//! batch; the worker really ran inside the forward's window (a counter the engine records from
//! the worker's and the forward's timestamps); a grammar failing on the worker fails only its
//! request; cancelling constrained requests while their masks are computed loses nothing.

use std::path::PathBuf;

use oxllm_core::FinishReason;
use oxllm_engine::{Engine, EngineConfig, GenerationRequest, KvCacheSize, PlanMode, RequestEvent};
use oxllm_models::{load_model, ModelFile};
use oxllm_sample::SamplingParams;
use oxllm_structured::{Constraint, ConstraintSpec, GrammarCompiler};
use oxllm_tok::Tokenizer;
use serde_json::json;

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

fn start(plan: PlanMode, overlap_masks: bool) -> (Engine, Tokenizer, GrammarCompiler) {
    start_with(EngineConfig {
        threads: 2,
        max_num_seqs: 8,
        plan,
        overlap_masks,
        ..EngineConfig::default()
    })
}

fn start_with(config: EngineConfig) -> (Engine, Tokenizer, GrammarCompiler) {
    let (file, model) = load_model(&smollm2()).unwrap();
    let ModelFile::Gguf(g) = &file else {
        panic!("SmolLM2 is a GGUF file")
    };
    let tok = Tokenizer::from_gguf(g).unwrap();
    let vocab = model.config.vocab_size;
    let engine = Engine::start(model, Some(tok.clone()), config).unwrap();
    let compiler = GrammarCompiler::new(&tok, vocab).unwrap();
    (engine, tok, compiler)
}

fn chat(tok: &Tokenizer, user: &str) -> Vec<u32> {
    let text = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
    tok.encode(&text, false).unwrap()
}

fn req(ids: &[u32], params: &SamplingParams, constraint: Option<Constraint>) -> GenerationRequest {
    GenerationRequest {
        prompt_ids: ids.to_vec(),
        params: params.clone(),
        choice: 0,
        constraint: constraint.map(Box::new),
    }
}

type Outcome = Result<(Vec<u32>, String, FinishReason), String>;

fn run(engine: &Engine, reqs: Vec<GenerationRequest>) -> Vec<Outcome> {
    let streams = engine.handle().submit_all(reqs).unwrap();
    streams.into_iter().map(|s| s.collect_blocking()).collect()
}

fn person_schema() -> ConstraintSpec {
    ConstraintSpec::JsonSchema(json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 150}
        },
        "required": ["name", "age"],
        "additionalProperties": false
    }))
}

fn sampled(max_tokens: usize, seed: u64) -> SamplingParams {
    SamplingParams {
        max_tokens,
        temperature: 0.9,
        seed: Some(seed),
        ..SamplingParams::greedy()
    }
}

/// A constraint whose matcher is in its error state: its next mask fails.
fn broken(compiler: &GrammarCompiler, tok: &Tokenizer) -> Constraint {
    let mut c = compiler
        .compile(&ConstraintSpec::Regex("[0-9]+".into()))
        .unwrap();
    let word = tok.encode(" hello", false).unwrap()[0];
    assert!(c.advance(word).is_err());
    c
}

#[test]
fn overlapped_masks_give_the_synchronous_tokens_and_overlap_the_forward() {
    let greedy = SamplingParams {
        max_tokens: 40,
        ..SamplingParams::greedy()
    };
    let free = SamplingParams {
        max_tokens: 20,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    for plan in [PlanMode::Captured, PlanMode::Eager] {
        let mut by_mode = Vec::new();
        for overlap in [true, false] {
            let (engine, tok, compiler) = start(plan, overlap);
            let person = chat(&tok, "Describe a person as JSON with a name and an age.");
            let story = chat(&tok, "Tell me a story about a cat.");
            let code = chat(&tok, "Give me a code.");
            let schema = || Some(compiler.compile(&person_schema()).unwrap());
            let regex = ConstraintSpec::Regex("[0-9]{3}-[a-z]{4}".into());
            let outs = run(
                &engine,
                vec![
                    req(&person, &greedy, schema()),
                    req(&story, &free, None),
                    req(&person, &sampled(40, 7), schema()),
                    req(
                        &code,
                        &sampled(20, 3),
                        Some(compiler.compile(&regex).unwrap()),
                    ),
                ],
            );
            // Batch 1, constrained alone.
            let alone = run(&engine, vec![req(&person, &sampled(40, 11), schema())]);
            let stats = engine.handle().stats();
            assert!(stats.masks_computed > 0, "{plan:?} {overlap}: no masks");
            if overlap {
                assert!(
                    stats.masks_overlapped > 0,
                    "{plan:?}: no step computed its masks while its forward ran"
                );
            } else {
                assert_eq!(
                    stats.masks_overlapped, 0,
                    "{plan:?}: synchronous run overlapped"
                );
            }
            let outs: Vec<_> = outs.into_iter().chain(alone).map(Result::unwrap).collect();
            let v: serde_json::Value = serde_json::from_str(&outs[0].1)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", outs[0].1));
            assert!(v["name"].is_string() && v["age"].is_i64(), "{}", outs[0].1);
            by_mode.push(outs);
        }
        assert_eq!(
            by_mode[0], by_mode[1],
            "{plan:?}: overlap changed the tokens"
        );
    }
}

#[test]
fn a_grammar_failing_on_the_worker_fails_only_its_request() {
    let (engine, tok, compiler) = start(PlanMode::Eager, true);
    let mut probe = broken(&compiler, &tok);
    let mut mask = vec![0u32; probe.mask_words()];
    assert!(
        probe.fill_mask(&mut mask).is_err(),
        "the broken grammar masks"
    );
    let person = chat(&tok, "Describe a person as JSON with a name and an age.");
    let story = chat(&tok, "Tell me a story about a cat.");
    let free = SamplingParams {
        max_tokens: 16,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let schema = || Some(compiler.compile(&person_schema()).unwrap());
    let mixed = run(
        &engine,
        vec![
            req(&person, &sampled(32, 5), schema()),
            req(&story, &free, Some(broken(&compiler, &tok))),
            req(&story, &free, None),
        ],
    );
    let err = mixed[1]
        .as_ref()
        .expect_err("the broken grammar's request succeeded");
    assert!(!err.is_empty());
    let without = run(
        &engine,
        vec![
            req(&person, &sampled(32, 5), schema()),
            req(&story, &free, None),
        ],
    );
    assert_eq!(
        mixed[0], without[0],
        "a failed neighbour changed a constrained row"
    );
    assert_eq!(
        mixed[2], without[1],
        "a failed neighbour changed a free row"
    );
    assert_eq!(engine.handle().stats().num_running, 0);
}

#[test]
fn cancelling_constrained_requests_mid_step_loses_nothing() {
    let (engine, tok, compiler) = start(PlanMode::Captured, true);
    let h = engine.handle();
    let person = chat(&tok, "Describe a person as JSON with a name and an age.");
    let schema = || Some(compiler.compile(&person_schema()).unwrap());
    let reqs = (0..6)
        .map(|i| req(&person, &sampled(64, i), schema()))
        .collect();
    let mut streams = h.submit_all(reqs).unwrap();
    // Wait until the constrained requests decode, then cancel two of them: one by abort, one
    // by dropping its stream, while the engine keeps stepping (and computing masks).
    let first = streams[0].blocking_next();
    assert!(
        matches!(first, Some(RequestEvent::Delta { .. })),
        "{first:?}"
    );
    h.abort(streams[1].id);
    drop(streams.remove(2));
    let mut aborted = streams.remove(1);
    // The aborted stream ends (a finish or closed channel), never hangs.
    while let Some(ev) = aborted.blocking_next() {
        if matches!(ev, RequestEvent::Finished { .. } | RequestEvent::Error(_)) {
            break;
        }
    }
    for (i, s) in streams.into_iter().enumerate() {
        let (_, text, _) = s
            .collect_blocking()
            .expect("a neighbour of a cancelled request");
        // The first stream's opening delta was read above.
        if i > 0 {
            let v: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
            assert!(v["name"].is_string(), "{text}");
        }
    }
    // The engine still serves, and holds nothing of the cancelled requests.
    let after = run(&engine, vec![req(&person, &sampled(24, 9), schema())]);
    assert!(after[0].is_ok(), "{after:?}");
    let stats = h.stats();
    assert_eq!(stats.num_running + stats.num_waiting, 0, "{stats:?}");
}

/// Constrained requests preempted (a pool too small for all of them) while their masks are
/// computed beside the forward resume where they were: the same tokens as with room for all,
/// every JSON answer valid.
#[test]
fn preemption_while_masks_are_computed_loses_nothing() {
    let greedy = SamplingParams {
        max_tokens: 40,
        ..SamplingParams::greedy()
    };
    let mut by_pool = Vec::new();
    for kv_cache in [None, Some(KvCacheSize::Blocks(14))] {
        let base = EngineConfig::default();
        let (engine, tok, compiler) = start_with(EngineConfig {
            threads: 2,
            max_num_seqs: 8,
            plan: PlanMode::Captured,
            overlap_masks: true,
            kv_cache: kv_cache.unwrap_or(base.kv_cache),
            ..base
        });
        let person = chat(&tok, "Describe a person as JSON with a name and an age.");
        let other = chat(
            &tok,
            "Describe someone else, as JSON, with a name and an age.",
        );
        let schema = || Some(compiler.compile(&person_schema()).unwrap());
        let reqs = (0..6u64)
            .map(|i| {
                let prompt = if i % 2 == 0 { &person } else { &other };
                let params = if i < 2 {
                    greedy.clone()
                } else {
                    sampled(40, 100 + i)
                };
                req(prompt, &params, schema())
            })
            .collect();
        let outs: Vec<_> = run(&engine, reqs).into_iter().map(Result::unwrap).collect();
        let stats = engine.handle().stats();
        assert!(stats.masks_overlapped > 0, "no step overlapped its masks");
        if kv_cache.is_some() {
            assert!(stats.num_preemptions > 0, "the pool was not small enough");
        } else {
            assert_eq!(stats.num_preemptions, 0);
        }
        for (ids, text, _) in &outs {
            let v: serde_json::Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?} {ids:?}"));
            assert!(v["name"].is_string() && v["age"].is_i64(), "{text}");
        }
        by_pool.push(outs);
    }
    assert_eq!(by_pool[0], by_pool[1], "preemption changed the tokens");
}
