//! [`SamplingParams`]: what a request asks of the sampler, with OpenAI's defaults and field names,
//! and [`SamplingParams::validate`], which accepts exactly the values the sampler handles and
//! names the offending field otherwise.
//!
//! Each knob has an "off" value that makes it a no-op: `top_k` `None` or `Some(0)`, `top_p` 1,
//! `min_p` 0, `repetition_penalty` 1, `presence_penalty`/`frequency_penalty` 0.

use serde::{Deserialize, Serialize};

use crate::stop_strings::{MAX_STOP_BYTES, MAX_STOP_STRINGS};
use crate::{SamplingError, StopStrings};

/// Temperatures below this are treated as greedy (argmax), like vLLM: dividing by a tinier one
/// only amplifies rounding noise.
pub const GREEDY_EPSILON: f32 = 1e-5;
/// Largest accepted temperature (OpenAI stops at 2; larger values are legal but near-uniform).
pub const MAX_TEMPERATURE: f32 = 100.0;
/// Most top logprobs a request may ask for (OpenAI's `top_logprobs` limit).
pub const MAX_LOGPROBS: usize = 20;
/// Most choices per request (OpenAI's limit on `n`).
pub const MAX_N: usize = 128;

/// Per-request sampling and stopping parameters.
///
/// `Default` gives OpenAI's defaults (temperature 1, nothing truncated, no penalties) with
/// `max_tokens` 16 (OpenAI completions' and vLLM's default; a chat front end should set it to the
/// room left in the context). [`SamplingParams::greedy`] gives deterministic argmax decoding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 (anything below [`GREEDY_EPSILON`]) means greedy. In `[0, 100]`.
    pub temperature: f32,
    /// Keep only the `k` most likely tokens; `None` or `Some(0)` = off.
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose mass is at least `top_p`; in `(0, 1]`,
    /// 1 = off.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the top token's; in `[0, 1]`, 0 = off.
    pub min_p: f32,
    /// HF-style repetition penalty over prompt and output tokens: a seen token's positive logit
    /// is divided by it, a negative one multiplied. `> 0`, 1 = off.
    pub repetition_penalty: f32,
    /// OpenAI presence penalty: subtracted once from the logit of every token already in the
    /// output. In `[-2, 2]`.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty: subtracted from a token's logit once per occurrence in the
    /// output. In `[-2, 2]`.
    pub frequency_penalty: f32,
    /// Seed of the request's RNG; `None` = the engine derives one per request.
    pub seed: Option<u64>,
    /// Most tokens to generate; at least 1, or 0 when `prompt_logprobs` is set (score the
    /// prompt only, as an evaluation harness's loglikelihood requests do).
    pub max_tokens: usize,
    /// Stop strings: the output text ends right before the first one that appears. At most
    /// [`MAX_STOP_STRINGS`] strings of [`MAX_STOP_BYTES`] together; shared, not copied, by
    /// clones (a request's `n` choices).
    pub stop: StopStrings,
    /// Token ids that end the request (in addition to the model's end-of-sequence tokens).
    pub stop_token_ids: Vec<u32>,
    /// Keep generating after the model's end-of-sequence tokens (stop token ids still stop).
    pub ignore_eos: bool,
    /// Report the sampled token's logprob and this many top alternatives (`Some(0)` = only the
    /// sampled token's); at most [`MAX_LOGPROBS`].
    pub logprobs: Option<usize>,
    /// Report each prompt token's logprob (given the tokens before it), its rank and this many
    /// top alternatives (`Some(0)` = only the prompt token's); at most [`MAX_LOGPROBS`].
    pub prompt_logprobs: Option<usize>,
    /// Number of choices to generate for the prompt; in `[1, 128]`.
    pub n: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            max_tokens: 16,
            stop: StopStrings::default(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
            n: 1,
        }
    }
}

impl SamplingParams {
    /// Defaults with temperature 0: argmax decoding, no RNG involved.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Whether tokens are chosen by argmax (temperature below [`GREEDY_EPSILON`]).
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_EPSILON
    }

    /// `top_k` as an active limit: `None` when off.
    pub fn effective_top_k(&self) -> Option<usize> {
        self.top_k.filter(|&k| k > 0)
    }

    /// Checks every field against its allowed range; the error names the first offending field.
    pub fn validate(&self) -> Result<(), SamplingError> {
        fn out(field: &'static str, value: impl ToString, allowed: &'static str) -> SamplingError {
            SamplingError::OutOfRange {
                field,
                value: value.to_string(),
                allowed,
            }
        }
        let t = self.temperature;
        if !(t.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&t)) {
            return Err(out("temperature", t, "finite and in [0, 100]"));
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(out("top_p", p, "in (0, 1]"));
        }
        let m = self.min_p;
        if !(0.0..=1.0).contains(&m) {
            return Err(out("min_p", m, "in [0, 1]"));
        }
        let r = self.repetition_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(out("repetition_penalty", r, "finite and > 0"));
        }
        for (field, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(out(field, v, "in [-2, 2]"));
            }
        }
        if self.max_tokens == 0 && self.prompt_logprobs.is_none() {
            return Err(out(
                "max_tokens",
                0,
                "at least 1 (0 only when prompt logprobs are asked for)",
            ));
        }
        for (field, n) in [
            ("logprobs", self.logprobs),
            ("prompt_logprobs", self.prompt_logprobs),
        ] {
            if let Some(l) = n.filter(|&l| l > MAX_LOGPROBS) {
                return Err(out(field, l, "at most 20"));
            }
        }
        if !(1..=MAX_N).contains(&self.n) {
            return Err(out("n", self.n, "in [1, 128]"));
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return Err(SamplingError::TooManyStops {
                count: self.stop.len(),
                max: MAX_STOP_STRINGS,
            });
        }
        let bytes = self.stop.total_bytes();
        if bytes > MAX_STOP_BYTES {
            return Err(SamplingError::StopsTooLong {
                bytes,
                max: MAX_STOP_BYTES,
            });
        }
        if let Some(index) = self.stop.iter().position(|s| s.is_empty()) {
            return Err(SamplingError::EmptyStop { index });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(p: SamplingParams) -> &'static str {
        match p.validate() {
            Err(e) => e.field(),
            Ok(()) => "ok",
        }
    }

    #[test]
    fn defaults_are_openai_and_valid() {
        let d = SamplingParams::default();
        assert_eq!(d.temperature, 1.0);
        assert_eq!(d.top_p, 1.0);
        assert_eq!(d.n, 1);
        assert!(d.validate().is_ok());
        assert!(SamplingParams::greedy().validate().is_ok());
        assert!(SamplingParams::greedy().is_greedy());
        assert!(!d.is_greedy());
    }

    #[test]
    fn each_bad_field_is_named() {
        let d = SamplingParams::default;
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: -0.1,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::NAN,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::INFINITY,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: 101.0,
                    ..d()
                },
                "temperature",
            ),
            (SamplingParams { top_p: 0.0, ..d() }, "top_p"),
            (SamplingParams { top_p: 1.01, ..d() }, "top_p"),
            (
                SamplingParams {
                    top_p: f32::NAN,
                    ..d()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    min_p: -0.01,
                    ..d()
                },
                "min_p",
            ),
            (SamplingParams { min_p: 1.5, ..d() }, "min_p"),
            (
                SamplingParams {
                    min_p: f32::NAN,
                    ..d()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    repetition_penalty: 0.0,
                    ..d()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    repetition_penalty: f32::INFINITY,
                    ..d()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    presence_penalty: 2.5,
                    ..d()
                },
                "presence_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: -2.5,
                    ..d()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: f32::NAN,
                    ..d()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    max_tokens: 0,
                    ..d()
                },
                "max_tokens",
            ),
            (
                SamplingParams {
                    prompt_logprobs: Some(21),
                    ..d()
                },
                "prompt_logprobs",
            ),
            (
                SamplingParams {
                    logprobs: Some(21),
                    ..d()
                },
                "logprobs",
            ),
            (SamplingParams { n: 0, ..d() }, "n"),
            (SamplingParams { n: 129, ..d() }, "n"),
            (
                SamplingParams {
                    stop: vec!["a".into(), String::new()].into(),
                    ..d()
                },
                "stop",
            ),
            (
                SamplingParams {
                    stop: vec!["x".to_string(); MAX_STOP_STRINGS + 1].into(),
                    ..d()
                },
                "stop",
            ),
            (
                SamplingParams {
                    stop: vec!["x".repeat(MAX_STOP_BYTES / 2 + 1); 2].into(),
                    ..d()
                },
                "stop",
            ),
        ];
        for (p, field) in cases {
            assert_eq!(field_of(p.clone()), field, "{p:?}");
            let msg = p
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(msg.contains(field), "message {msg:?} should name {field}");
        }
        let edge = SamplingParams {
            temperature: 100.0,
            top_p: 1e-6,
            min_p: 1.0,
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            logprobs: Some(20),
            n: 128,
            top_k: Some(0),
            // Scoring the prompt alone.
            max_tokens: 0,
            prompt_logprobs: Some(20),
            ..d()
        };
        assert_eq!(edge.validate(), Ok(()));
    }

    #[test]
    fn error_message_has_range() {
        let e = SamplingParams {
            top_p: 2.0,
            ..SamplingParams::default()
        }
        .validate();
        assert_eq!(
            e.err().map(|e| e.to_string()).as_deref(),
            Some("`top_p` must be in (0, 1], got 2")
        );
    }
}
