//! Engine logprobs → the two OpenAI shapes: completions' parallel lists (`tokens`,
//! `token_logprobs`, `top_logprobs` as `{text: logprob}`, `text_offset`) and chat's
//! `content: [{token, logprob, bytes, top_logprobs}]`.

use oxllm_engine::TokenLogprob;
use serde_json::{Map, Value};

use crate::protocol::chat::{ChatLogprobs, ChatTokenLogprob, TopLogprob};
use crate::protocol::completions::CompletionLogprobs;
use crate::state::AppState;

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
            top.insert(state.token_text(id).to_string(), Value::from(finite(l)));
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

/// JSON has no infinities: a `-inf` logprob (a token of probability 0) is written as the
/// lowest finite value, as vLLM does with -9999.0.
fn finite(l: f32) -> f32 {
    if l.is_finite() {
        l
    } else {
        -9999.0
    }
}
