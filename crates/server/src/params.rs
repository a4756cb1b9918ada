//! Request fields → [`SamplingParams`]: type-level parsing is serde's, ranges are checked here
//! and by [`SamplingParams::validate`], and every error is a 400 naming the field.

use oxllm_engine::ContextBound;
use oxllm_sample::SamplingParams;

use crate::error::ApiError;
use crate::protocol::common::SamplingFields;

/// What the handlers need besides the parameters themselves.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub params: SamplingParams,
    /// `max_tokens` as sent (`None`: the endpoint's default applies).
    pub max_tokens: Option<usize>,
    /// Which field `max_tokens` came from (for error messages).
    pub max_tokens_param: &'static str,
    pub stream: bool,
    pub include_usage: bool,
}

/// Parses the shared fields; `logprobs` is the number of top alternatives asked for, if any.
pub fn parse(
    f: &SamplingFields,
    max_tokens: Option<i64>,
    max_tokens_param: &'static str,
    logprobs: Option<usize>,
) -> Result<Parsed, ApiError> {
    parse_scoring(f, max_tokens, max_tokens_param, logprobs, None)
}

/// [`parse`] for a request that may also ask for prompt logprobs (`prompt_logprobs`: top
/// alternatives per prompt token); such a request may set `max_tokens` 0 to score the prompt
/// alone.
pub fn parse_scoring(
    f: &SamplingFields,
    max_tokens: Option<i64>,
    max_tokens_param: &'static str,
    logprobs: Option<usize>,
    prompt_logprobs: Option<usize>,
) -> Result<Parsed, ApiError> {
    if f.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
        return Err(ApiError::invalid_param(
            "logit_bias",
            "logit_bias is not supported",
        ));
    }
    let stream = f.stream.unwrap_or(false);
    if f.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "stream_options can only be set when stream is true",
        ));
    }
    let n = match f.n {
        None => 1,
        Some(n) if (1..=oxllm_sample::MAX_N as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::invalid_param(
                "n",
                format!("`n` must be in [1, {}], got {n}", oxllm_sample::MAX_N),
            ))
        }
    };
    let max_tokens = match max_tokens {
        None => None,
        Some(m) if m >= 1 || (m == 0 && prompt_logprobs.is_some()) => {
            Some(usize::try_from(m).unwrap_or(usize::MAX))
        }
        Some(m) => {
            return Err(ApiError::invalid_param(
                max_tokens_param,
                format!(
                    "`{max_tokens_param}` must be at least 1 (0 only with prompt logprobs), got {m}"
                ),
            ))
        }
    };
    let top_k = match f.top_k {
        None | Some(-1) | Some(0) => None,
        Some(k) if k > 0 => Some(usize::try_from(k).unwrap_or(usize::MAX)),
        Some(k) => {
            return Err(ApiError::invalid_param(
                "top_k",
                format!("`top_k` must be -1 (off) or at least 1, got {k}"),
            ))
        }
    };
    let d = SamplingParams::default();
    let float = |v: Option<f64>, default: f32| v.map_or(default, |x| x as f32);
    let params = SamplingParams {
        temperature: float(f.temperature, d.temperature),
        top_k,
        top_p: float(f.top_p, d.top_p),
        min_p: float(f.min_p, d.min_p),
        repetition_penalty: float(f.repetition_penalty, d.repetition_penalty),
        presence_penalty: float(f.presence_penalty, d.presence_penalty),
        frequency_penalty: float(f.frequency_penalty, d.frequency_penalty),
        // OpenAI seeds are signed 64-bit integers; keep every bit.
        seed: f.seed.map(|s| s as u64),
        max_tokens: max_tokens.unwrap_or(d.max_tokens),
        stop: f
            .stop
            .clone()
            .map(|s| s.into_vec().into())
            .unwrap_or_default(),
        stop_token_ids: f.stop_token_ids.clone().unwrap_or_default(),
        ignore_eos: f.ignore_eos.unwrap_or(false),
        logprobs,
        prompt_logprobs,
        n,
    };
    params
        .validate()
        .map_err(|e| ApiError::invalid_param(e.field(), e.to_string()))?;
    Ok(Parsed {
        params,
        max_tokens,
        max_tokens_param,
        stream,
        include_usage: stream
            && f.stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
    })
}

/// How long one request can be on this server.
#[derive(Clone, Copy, Debug)]
pub struct ContextLimit {
    /// Most prompt + completion tokens.
    pub limit: usize,
    /// What sets `limit`: the model's context, or a KV cache smaller than it.
    pub bound: ContextBound,
    /// The model's own maximum context length.
    pub model_len: usize,
}

impl ContextLimit {
    /// The sentence a client reads first: OpenAI's wording when the model's context is the
    /// limit, the KV cache's size (and the model's context beside it) when the cache is.
    fn describe(&self) -> String {
        match self.bound {
            ContextBound::ModelContext => {
                format!("This model's maximum context length is {} tokens.", self.limit)
            }
            ContextBound::KvCache => format!(
                "This server's KV cache holds at most {} tokens for one request (the model's maximum context length is {} tokens; start the server with a larger --kv-cache to allow more).",
                self.limit, self.model_len
            ),
        }
    }
}

/// Sets `max_tokens` for a prompt of `prompt_len` tokens: the value sent, else `default`
/// (`None`: all the room left), and checks prompt + completion against `ctx`.
pub fn fit_to_context(
    parsed: &Parsed,
    prompt_len: usize,
    default: Option<usize>,
    ctx: &ContextLimit,
    prompt_param: &'static str,
) -> Result<SamplingParams, ApiError> {
    let limit = ctx.limit;
    let room = limit.saturating_sub(prompt_len);
    let max_tokens = parsed
        .max_tokens
        .or(default)
        .unwrap_or(room)
        .max(usize::from(room == 0));
    if prompt_len + max_tokens > limit {
        let param = if prompt_len >= limit {
            prompt_param
        } else {
            parsed.max_tokens_param
        };
        return Err(ApiError::invalid_param(
            param,
            format!(
                "{} However, you requested {} tokens ({prompt_len} in the {prompt_param}, {max_tokens} in the completion). Please reduce the length of the {prompt_param} or completion.",
                ctx.describe(),
                prompt_len + max_tokens
            ),
        )
        .with_code("context_length_exceeded"));
    }
    Ok(oxllm_sample::SamplingParams {
        max_tokens,
        ..parsed.params.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: &str) -> SamplingFields {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn ranges_name_their_field() {
        let cases = [
            (r#"{"n": 0}"#, "n"),
            (r#"{"temperature": -1}"#, "temperature"),
            (r#"{"top_p": 0}"#, "top_p"),
            (r#"{"top_k": -2}"#, "top_k"),
            (r#"{"min_p": 2}"#, "min_p"),
            (r#"{"presence_penalty": 3}"#, "presence_penalty"),
            (r#"{"frequency_penalty": -3}"#, "frequency_penalty"),
            (r#"{"repetition_penalty": 0}"#, "repetition_penalty"),
            (r#"{"stop": ["a", ""]}"#, "stop"),
            (r#"{"logit_bias": {"1": 5}}"#, "logit_bias"),
            (
                r#"{"stream_options": {"include_usage": true}}"#,
                "stream_options",
            ),
        ];
        for (json, field) in cases {
            let e = parse(&fields(json), None, "max_tokens", None).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{json}");
        }
        let e = parse(&fields("{}"), Some(0), "max_completion_tokens", None).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_completion_tokens"));
        let p = parse(
            &fields(r#"{"top_k": -1, "seed": -5, "stop": "x", "stream": true, "stream_options": {"include_usage": true}}"#),
            Some(7),
            "max_tokens",
            Some(2),
        )
        .unwrap();
        assert_eq!(p.params.top_k, None);
        assert_eq!(p.params.seed, Some((-5i64) as u64));
        assert_eq!(&p.params.stop[..], ["x".to_string()]);
        assert_eq!(p.params.max_tokens, 7);
        assert!(p.stream && p.include_usage);
    }

    fn ctx(limit: usize) -> ContextLimit {
        ContextLimit {
            limit,
            bound: ContextBound::ModelContext,
            model_len: limit,
        }
    }

    #[test]
    fn context_fitting() {
        let p = parse(&fields("{}"), None, "max_tokens", None).unwrap();
        assert_eq!(
            fit_to_context(&p, 10, None, &ctx(100), "messages")
                .unwrap()
                .max_tokens,
            90
        );
        assert_eq!(
            fit_to_context(&p, 10, Some(16), &ctx(100), "prompt")
                .unwrap()
                .max_tokens,
            16
        );
        let e = fit_to_context(&p, 100, None, &ctx(100), "messages").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let p = parse(&fields("{}"), Some(50), "max_tokens", None).unwrap();
        let e = fit_to_context(&p, 60, None, &ctx(100), "prompt").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert!(e
            .message
            .starts_with("This model's maximum context length is 100 tokens."));
        let pool = ContextLimit {
            limit: 672,
            bound: ContextBound::KvCache,
            model_len: 8192,
        };
        let e = fit_to_context(&p, 700, None, &pool, "prompt").unwrap_err();
        assert!(
            e.message.contains("KV cache holds at most 672")
                && e.message.contains("maximum context length is 8192"),
            "{}",
            e.message
        );
    }
}
