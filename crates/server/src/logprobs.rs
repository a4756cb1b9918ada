//! Engine logprobs → the two OpenAI shapes: completions' parallel lists (`tokens`,
//! `token_logprobs`, `top_logprobs` as `{text: logprob}`, `text_offset`) and chat's
//! `content: [{token, logprob, bytes, top_logprobs}]`; and prompt logprobs in both the
//! completions lists (`echo` with `logprobs`: the first prompt token's entries `null`, as
//! OpenAI and vLLM write them) and vLLM's `prompt_logprobs` (token id ->
//! `{logprob, rank, decoded_token}`, the prompt token and its top alternatives).

use oxllm_engine::{PromptLogprob, TokenLogprob};
use serde_json::{Map, Value};

use crate::protocol::chat::{ChatLogprobs, ChatTokenLogprob, TopLogprob};
use crate::protocol::completions::{CompletionLogprobs, PromptLogprobEntry, PromptTokenLogprobs};
use crate::state::AppState;

/// Completions logprobs of an echoed prompt `ids` from its scores (`scores[0]` is `None`);
/// offsets start at 0 and `offset` ends past the prompt's tokens.
pub fn echoed_prompt(
    state: &AppState,
    ids: &[u32],
    scores: &[Option<PromptLogprob>],
    offset: &mut usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (pos, &id) in ids.iter().enumerate() {
        let text = state.token_text(id);
        out.tokens.push(text.to_string());
        let score = scores.get(pos).and_then(Option::as_ref);
        out.token_logprobs.push(score.map(|s| finite(s.logprob)));
        out.top_logprobs.push(score.map(|s| {
            s.top
                .iter()
                .map(|&(t, l)| (state.token_text(t).to_string(), json_logprob(l)))
                .collect()
        }));
        out.text_offset.push(*offset);
        *offset += text.chars().count();
    }
    out
}

/// vLLM's `prompt_logprobs` from the engine's scores.
pub fn vllm_prompt(
    state: &AppState,
    scores: &[Option<PromptLogprob>],
) -> Vec<Option<PromptTokenLogprobs>> {
    scores
        .iter()
        .map(|s| {
            s.as_ref().map(|s| {
                let entry = |logprob: f32, rank: usize, id: u32| PromptLogprobEntry {
                    logprob: finite(logprob),
                    rank,
                    decoded_token: state.token_text(id).to_string(),
                };
                let mut m: PromptTokenLogprobs = s
                    .top
                    .iter()
                    .enumerate()
                    .map(|(i, &(t, l))| (t, entry(l, i + 1, t)))
                    .collect();
                m.insert(s.token, entry(s.logprob, s.rank, s.token));
                m
            })
        })
        .collect()
}

/// Appends `more` to `out` (the prompt's lists, then the completion's).
pub fn extend(out: &mut CompletionLogprobs, more: CompletionLogprobs) {
    out.tokens.extend(more.tokens);
    out.token_logprobs.extend(more.token_logprobs);
    out.top_logprobs.extend(more.top_logprobs);
    out.text_offset.extend(more.text_offset);
}

/// Completions logprobs for `lps`; `offset` is the character offset of the first token's text
/// in the choice's text and is advanced past the tokens.
pub fn completion(
    state: &AppState,
    lps: &[TokenLogprob],
    offset: &mut usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for lp in lps {
        let text = state.token_text(lp.token);
        out.tokens.push(text.to_string());
        out.token_logprobs.push(Some(finite(lp.logprob)));
        let mut top = Map::new();
        for &(id, l) in &lp.top {
            top.insert(state.token_text(id).to_string(), json_logprob(l));
        }
        out.top_logprobs.push(Some(top));
        out.text_offset.push(*offset);
        *offset += text.chars().count();
    }
    out
}

/// Chat logprobs for `lps`.
pub fn chat(state: &AppState, lps: &[TokenLogprob]) -> ChatLogprobs {
    ChatLogprobs {
        content: lps
            .iter()
            .map(|lp| {
                let text = state.token_text(lp.token);
                ChatTokenLogprob {
                    token: text.to_string(),
                    logprob: finite(lp.logprob),
                    bytes: text.as_bytes().to_vec(),
                    top_logprobs: lp
                        .top
                        .iter()
                        .map(|&(id, l)| {
                            let t = state.token_text(id);
                            TopLogprob {
                                token: t.to_string(),
                                logprob: finite(l),
                                bytes: t.as_bytes().to_vec(),
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

/// A `top_logprobs` value as a JSON number with the digits `token_logprobs` prints for the
/// same f32, so a client comparing the two (lm-evaluation-harness's `is_greedy`: the token's
/// logprob against the best of its top) sees equal values. Widening the f32 would print its
/// binary expansion instead: -1.7585334777832031 beside -1.7585335.
fn json_logprob(l: f32) -> Value {
    let l = finite(l);
    Value::from(l.to_string().parse::<f64>().unwrap_or(f64::from(l)))
}

/// JSON has no infinities: a `-inf` logprob (a token of probability 0) is written as the
/// lowest finite value, as vLLM does with -9999.0.
fn finite(l: f32) -> f32 {
    if l.is_finite() {
        l
    } else {
        -9999.0
    }
}

#[cfg(test)]
mod json_tests {
    use super::*;

    #[test]
    fn top_values_print_as_the_token_logprobs_print() {
        for l in [
            -1.758_533_5f32,
            -0.1,
            -12.531_655,
            -9999.0,
            0.0,
            f32::NEG_INFINITY,
            -3.0e-8,
        ] {
            let token = serde_json::to_string(&finite(l)).unwrap();
            let top = serde_json::to_string(&json_logprob(l)).unwrap();
            assert_eq!(token, top, "{l}");
        }
    }
}
