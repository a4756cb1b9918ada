//! Prompt logprobs on SmolLM2: each prompt position's score equals what the engine itself
//! reports when it predicts that position (teacher forcing: the prefix as a prompt, one token
//! sampled with logprobs), whether the prompt is cold or in the prefix cache, prefilled in one
//! step or in chunks, alone or beside other requests (whose outputs it leaves unchanged);
//! `max_tokens` 0 scores the prompt and generates nothing.

use std::path::PathBuf;

use oxllm_core::FinishReason;
use oxllm_engine::{
    Engine, EngineConfig, GenerationRequest, PromptLogprob, RequestEvent, TokenLogprob,
};
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

fn start(config: EngineConfig) -> (Engine, Tokenizer) {
    let (file, model) = load_model(&smollm2()).unwrap();
    let tok = match &file {
        ModelFile::Gguf(g) => Tokenizer::from_gguf(g).unwrap(),
        ModelFile::Hf(_) => unreachable!("the model is a GGUF file"),
    };
    let engine = Engine::start(model, Some(tok.clone()), config).unwrap();
    (engine, tok)
}

fn config() -> EngineConfig {
    EngineConfig {
        threads: 2,
        ..EngineConfig::default()
    }
}

/// What one request gave back.
#[derive(Debug, Default)]
struct Outcome {
    ids: Vec<u32>,
    logprobs: Vec<TokenLogprob>,
    prompt_logprobs: Option<Vec<Option<PromptLogprob>>>,
    reason: Option<FinishReason>,
    completion_tokens: usize,
}

fn collect(mut s: oxllm_engine::RequestStream) -> Outcome {
    let mut out = Outcome::default();
    while let Some(ev) = s.blocking_next() {
        match ev {
            RequestEvent::Delta {
                token_ids,
                logprobs,
                prompt_logprobs,
                ..
            } => {
                out.ids.extend(token_ids);
                out.logprobs.extend(logprobs);
                if let Some(p) = prompt_logprobs {
                    assert!(out.prompt_logprobs.is_none(), "prompt logprobs sent twice");
                    out.prompt_logprobs = Some(p);
                }
            }
            RequestEvent::Finished {
                reason,
                completion_tokens,
                ..
            } => {
                out.reason = Some(reason);
                out.completion_tokens = completion_tokens;
                return out;
            }
            RequestEvent::Error(e) => panic!("request failed: {e}"),
        }
    }
    panic!("stream ended without Finished");
}

fn run_all(engine: &Engine, reqs: Vec<GenerationRequest>) -> Vec<Outcome> {
    let h = engine.handle();
    let streams: Vec<_> = reqs.into_iter().map(|r| h.submit(r).unwrap()).collect();
    streams.into_iter().map(collect).collect()
}

fn req(ids: &[u32], params: SamplingParams) -> GenerationRequest {
    GenerationRequest {
        prompt_ids: ids.to_vec(),
        params,
        choice: 0,
        constraint: None,
    }
}

/// Scores `ids` only: `max_tokens` 0, `top` alternatives per position.
fn scoring(top: usize) -> SamplingParams {
    SamplingParams {
        max_tokens: 0,
        prompt_logprobs: Some(top),
        ..SamplingParams::greedy()
    }
}

fn prompt_scores(engine: &Engine, ids: &[u32], top: usize) -> Vec<Option<PromptLogprob>> {
    let out = run_all(engine, vec![req(ids, scoring(top))]).remove(0);
    assert_eq!(out.reason, Some(FinishReason::Length));
    assert!(out.ids.is_empty(), "max_tokens 0 generated {:?}", out.ids);
    assert_eq!(out.completion_tokens, 0);
    let scores = out.prompt_logprobs.expect("no prompt logprobs");
    assert_eq!(scores.len(), ids.len());
    assert!(scores[0].is_none(), "the first prompt token has no logprob");
    for (pos, s) in scores.iter().enumerate().skip(1) {
        let s = s
            .as_ref()
            .unwrap_or_else(|| panic!("position {pos} unscored"));
        assert_eq!(s.token, ids[pos]);
        assert_eq!(s.top.len(), top);
        assert!(s.logprob <= 0.0 && s.logprob.is_finite());
        // Rank 1 exactly when no alternative is more likely.
        assert_eq!(
            s.rank == 1,
            s.top[0].1 <= s.logprob,
            "position {pos}: {s:?}"
        );
    }
    scores
}

fn encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, true).unwrap()
}

const TEXT: &str =
    "The history of the printing press begins in the fifteenth century, when Johannes \
Gutenberg combined movable metal type, oil-based inks and a wooden press adapted from wine making. \
Within fifty years printers worked in more than two hundred cities across Europe.";

#[test]
fn prompt_logprobs_equal_teacher_forced_predictions() {
    let (engine, tok) = start(config());
    let ids = encode(&tok, TEXT);
    assert!(ids.len() > 40, "prompt too short: {}", ids.len());
    let top = 20;
    let scores = prompt_scores(&engine, &ids, top);
    // Teacher forcing: the prefix up to each position as a prompt, one greedy token with the
    // 20 most likely alternatives: the same distribution the prompt row predicted.
    for pos in [1, 2, 7, 16, 17, 31, ids.len() - 1] {
        let params = SamplingParams {
            max_tokens: 1,
            logprobs: Some(top),
            ignore_eos: true,
            ..SamplingParams::greedy()
        };
        let forced = run_all(&engine, vec![req(&ids[..pos], params)]).remove(0);
        let step = &forced.logprobs[0];
        let s = scores[pos].as_ref().unwrap();
        assert_eq!(step.top, s.top, "position {pos}: top alternatives differ");
        if let Some(&(_, l)) = step.top.iter().find(|(t, _)| *t == ids[pos]) {
            assert_eq!(
                l, s.logprob,
                "position {pos}: the prompt token's logprob differs"
            );
        }
    }
}

#[test]
fn prompt_logprobs_equal_the_logprobs_of_sampled_tokens() {
    let (engine, tok) = start(config());
    let prompt = encode(&tok, "Once upon a time, in a quiet village by the sea,");
    // Seeded sampling at temperature 1 picks tokens that are often not the most likely.
    let params = SamplingParams {
        temperature: 1.0,
        seed: Some(7),
        max_tokens: 24,
        logprobs: Some(5),
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let generated = run_all(&engine, vec![req(&prompt, params)]).remove(0);
    assert_eq!(generated.ids.len(), 24);
    let mut full = prompt.clone();
    full.extend_from_slice(&generated.ids);
    let scores = prompt_scores(&engine, &full, 5);
    let mut below_top = 0;
    for (i, lp) in generated.logprobs.iter().enumerate() {
        let s = scores[prompt.len() + i].as_ref().unwrap();
        assert_eq!(s.token, lp.token);
        assert_eq!(s.logprob, lp.logprob, "generated token {i}");
        assert_eq!(s.top, lp.top, "generated token {i}");
        below_top += usize::from(s.rank > 1);
    }
    assert!(
        below_top > 0,
        "every sampled token was the most likely: rank untested"
    );
}

#[test]
fn prompt_logprobs_cold_warm_chunked_and_batched_agree() {
    let (engine, tok) = start(config());
    let ids = encode(&tok, TEXT);
    let cold = prompt_scores(&engine, &ids, 3);
    // Warm: a plain request caches the prompt's blocks first; the scoring request must still
    // compute (and score) every position.
    let plain = SamplingParams {
        max_tokens: 2,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    run_all(&engine, vec![req(&ids, plain.clone())]);
    let hits_before = engine.handle().stats().prefix_hit_tokens;
    run_all(&engine, vec![req(&ids, plain.clone())]);
    assert!(
        engine.handle().stats().prefix_hit_tokens > hits_before,
        "the prompt is not in the prefix cache"
    );
    let warm = prompt_scores(&engine, &ids, 3);
    assert_eq!(cold, warm, "a prefix-cache hit changed prompt logprobs");

    // Beside other requests: the scores, and the neighbours' greedy ids, are those of each alone.
    let others: Vec<Vec<u32>> = [
        "The capital of France is",
        "1, 2, 3, 4, 5,",
        "def add(a, b):",
    ]
    .iter()
    .map(|t| encode(&tok, t))
    .collect();
    let greedy = SamplingParams {
        max_tokens: 12,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let alone: Vec<Vec<u32>> = others
        .iter()
        .map(|p| run_all(&engine, vec![req(p, greedy.clone())]).remove(0).ids)
        .collect();
    let mut reqs: Vec<GenerationRequest> = others.iter().map(|p| req(p, greedy.clone())).collect();
    reqs.insert(1, req(&ids, scoring(3)));
    let together = run_all(&engine, reqs);
    assert_eq!(together[1].prompt_logprobs.as_ref(), Some(&cold));
    let neighbours: Vec<Vec<u32>> = [0, 2, 3].iter().map(|&i| together[i].ids.clone()).collect();
    assert_eq!(
        neighbours, alone,
        "a scoring request changed its neighbours' outputs"
    );

    // Chunked prefill (16-token steps) scores each chunk's rows, including each chunk's last.
    let (chunked, _) = start(EngineConfig {
        max_num_batched_tokens: 16,
        ..config()
    });
    assert_eq!(prompt_scores(&chunked, &ids, 3), cold);
}

#[test]
fn generation_after_prompt_logprobs_is_unchanged() {
    let (engine, tok) = start(config());
    let ids = encode(
        &tok,
        "Q: What is the largest planet in the solar system?\nA:",
    );
    let greedy = SamplingParams {
        max_tokens: 16,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let plain = run_all(&engine, vec![req(&ids, greedy.clone())]).remove(0);
    let with_scores = run_all(
        &engine,
        vec![req(
            &ids,
            SamplingParams {
                prompt_logprobs: Some(1),
                ..greedy
            },
        )],
    )
    .remove(0);
    assert_eq!(plain.ids, with_scores.ids);
    assert_eq!(with_scores.completion_tokens, 16);
    assert_eq!(
        with_scores.prompt_logprobs.map(|p| p.len()),
        Some(ids.len()),
        "prompt logprobs ride on the first delta"
    );
}
