//! Constrained decoding through the engine on SmolLM2: the token mask is a step input of the
//! plans, so a constrained request follows its grammar in captured and eager steps alike, and
//! an unconstrained request's ids do not change when constrained ones share its batch.

use std::path::PathBuf;

use oxllm_core::FinishReason;
use oxllm_engine::{Engine, EngineConfig, GenerationRequest, PlanMode};
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

fn start(plan: PlanMode) -> (Engine, Tokenizer, GrammarCompiler) {
    let (file, model) = load_model(&smollm2()).unwrap();
    let ModelFile::Gguf(g) = &file else {
        panic!("SmolLM2 is a GGUF file")
    };
    let tok = Tokenizer::from_gguf(g).unwrap();
    let vocab = model.config.vocab_size;
    let config = EngineConfig {
        threads: 2,
        max_num_seqs: 8,
        plan,
        ..EngineConfig::default()
    };
    let engine = Engine::start(model, Some(tok.clone()), config).unwrap();
    let compiler = GrammarCompiler::new(&tok, vocab).unwrap();
    (engine, tok, compiler)
}

fn chat(tok: &Tokenizer, user: &str) -> Vec<u32> {
    let text = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
    tok.encode(&text, false).unwrap()
}

fn req(ids: Vec<u32>, params: SamplingParams, constraint: Option<Constraint>) -> GenerationRequest {
    let constraint = constraint.map(Box::new);
    GenerationRequest {
        prompt_ids: ids,
        params,
        choice: 0,
        constraint,
    }
}

fn run(engine: &Engine, reqs: Vec<GenerationRequest>) -> Vec<(Vec<u32>, String, FinishReason)> {
    let h = engine.handle();
    let streams: Vec<_> = reqs.into_iter().map(|r| h.submit(r).unwrap()).collect();
    streams
        .into_iter()
        .map(|s| s.collect_blocking().unwrap())
        .collect()
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

fn check_person(text: &str) {
    let v: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    assert!(v["name"].is_string(), "{text}");
    let age = v["age"].as_i64().unwrap_or(-1);
    assert!((0..=150).contains(&age), "{text}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{text}");
}

fn check_code(text: &str) {
    let b = text.as_bytes();
    assert_eq!(b.len(), 8, "{text:?}");
    assert!(b[..3].iter().all(u8::is_ascii_digit), "{text:?}");
    assert_eq!(b[3], b'-', "{text:?}");
    assert!(b[4..].iter().all(u8::is_ascii_lowercase), "{text:?}");
}

#[test]
fn constrained_rows_follow_their_grammar_and_leave_unconstrained_rows_unchanged() {
    let greedy = SamplingParams {
        max_tokens: 48,
        ..SamplingParams::greedy()
    };
    let sampled = SamplingParams {
        max_tokens: 48,
        temperature: 0.9,
        seed: Some(7),
        ..SamplingParams::greedy()
    };
    let free = SamplingParams {
        max_tokens: 24,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let mut texts_by_plan = Vec::new();
    for plan in [PlanMode::Captured, PlanMode::Eager] {
        let (engine, tok, compiler) = start(plan);
        let person = chat(&tok, "Describe a person as JSON with a name and an age.");
        let code = chat(&tok, "Give me a code.");
        let story = chat(&tok, "Tell me a story about a cat.");
        let alone = run(&engine, vec![req(story.clone(), free.clone(), None)]).remove(0);
        let mixed = run(
            &engine,
            vec![
                req(
                    person.clone(),
                    greedy.clone(),
                    Some(compiler.compile(&person_schema()).unwrap()),
                ),
                req(story.clone(), free.clone(), None),
                req(
                    person.clone(),
                    sampled.clone(),
                    Some(compiler.compile(&person_schema()).unwrap()),
                ),
                req(
                    code.clone(),
                    sampled.clone(),
                    Some(
                        compiler
                            .compile(&ConstraintSpec::Regex("[0-9]{3}-[a-z]{4}".into()))
                            .unwrap(),
                    ),
                ),
                req(
                    code.clone(),
                    greedy.clone(),
                    Some(
                        compiler
                            .compile(&ConstraintSpec::Choice(vec!["yes".into(), "no".into()]))
                            .unwrap(),
                    ),
                ),
            ],
        );
        assert_eq!(
            mixed[1].0, alone.0,
            "{plan:?}: constrained neighbours changed free ids"
        );
        for i in [0, 2] {
            check_person(&mixed[i].1);
            assert_eq!(mixed[i].2, FinishReason::Stop, "{plan:?}: {}", mixed[i].1);
        }
        check_code(&mixed[3].1);
        assert!(
            ["yes", "no"].contains(&mixed[4].1.as_str()),
            "{:?}",
            mixed[4].1
        );
        // A max_tokens cut inside the grammar ends with `length`.
        let cut = run(
            &engine,
            vec![req(
                person.clone(),
                SamplingParams {
                    max_tokens: 3,
                    ..greedy.clone()
                },
                Some(compiler.compile(&person_schema()).unwrap()),
            )],
        )
        .remove(0);
        assert_eq!(cut.2, FinishReason::Length);
        assert!(cut.1.starts_with('{'), "{:?}", cut.1);
        let stats = engine.handle().stats();
        assert!(stats.masks_computed > 0);
        // Every constrained token but an EOS was consumed by its grammar after a mask.
        assert!(stats.grammar_advances > 0 && stats.grammar_advances <= stats.masks_computed);
        assert_eq!(
            compiler.stats().compiled,
            3,
            "schema, regex and choice compile once each"
        );
        texts_by_plan.push((mixed[0].1.clone(), mixed[2].1.clone(), mixed[3].1.clone()));
    }
    assert_eq!(
        texts_by_plan[0], texts_by_plan[1],
        "captured and eager disagree"
    );
}

#[test]
fn bad_grammars_are_compile_errors() {
    // Not caught yet: a Lark grammar whose rules never terminate (`start: "a" start`) compiles
    // and runs until `max_tokens`.
    let (file, model) = load_model(&smollm2()).unwrap();
    let ModelFile::Gguf(g) = &file else {
        panic!("SmolLM2 is a GGUF file")
    };
    let tok = Tokenizer::from_gguf(g).unwrap();
    let compiler = GrammarCompiler::new(&tok, model.config.vocab_size).unwrap();
    for spec in [
        ConstraintSpec::Regex("[a-".into()),
        ConstraintSpec::Lark("start: foo".into()),
        ConstraintSpec::Choice(vec![]),
        ConstraintSpec::JsonSchema(
            json!({"type": "object", "properties": {"a": {"type": "strin"}}}),
        ),
        ConstraintSpec::JsonSchema(json!(17)),
    ] {
        let r = compiler.compile(&spec);
        assert!(r.is_err(), "{spec:?} compiled");
    }
}

/// A constraint set to start after a marker (the end of a reasoning block) leaves the output
/// free until the marker's tokens were generated, then masks.
#[test]
fn constraint_starts_after_its_marker() {
    let (file, model) = load_model(&smollm2()).unwrap();
    let ModelFile::Gguf(g) = &file else {
        panic!("SmolLM2 is a GGUF file")
    };
    let tok = Tokenizer::from_gguf(g).unwrap();
    let compiler = GrammarCompiler::new(&tok, model.config.vocab_size).unwrap();
    let marker = tok.encode("</think>", false).unwrap();
    assert!(marker.len() >= 2, "{marker:?}");
    let mut c = compiler
        .compile(&ConstraintSpec::Regex("[0-9]+".into()))
        .unwrap()
        .start_after(marker.clone());
    let other = tok.encode(" hello", false).unwrap()[0];
    assert!(!c.is_active());
    // A partial marker, interrupted, does not count.
    c.advance(marker[0]).unwrap();
    c.advance(other).unwrap();
    assert!(!c.is_active());
    for &t in &marker {
        c.advance(t).unwrap();
    }
    assert!(c.is_active());
    let mut mask = vec![0u32; c.mask_words()];
    c.fill_mask(&mut mask).unwrap();
    let allowed: Vec<u32> = (0..model.config.vocab_size as u32)
        .filter(|&t| mask[t as usize / 32] & (1 << (t % 32)) != 0)
        .collect();
    assert!(!allowed.is_empty());
    for t in allowed {
        let text = tok.decode(&[t], false).unwrap();
        assert!(text.chars().all(|ch| ch.is_ascii_digit()), "{t}: {text:?}");
    }
    // A token the grammar forbids is an error, never a silent pass.
    assert!(c.advance(other).is_err());
}
