//! [`AppState`]: what every handler shares — the engine handle (the server holds no request
//! state of the engine's, only the streams it gets back), the tokenizer and chat template, the
//! config, metrics and admission control.

use std::sync::{Arc, OnceLock};

use oxllm_engine::EngineHandle;
use oxllm_structured::GrammarCompiler;
use oxllm_tok::{ChatTemplate, Tokenizer};

use crate::admission::{Admission, AdmitGuard};
use crate::config::ServerConfig;
use crate::drain::{self, Drain};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::params::ContextLimit;

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    engine: EngineHandle,
    tokenizer: Option<Arc<Tokenizer>>,
    /// The compiled template, or why chat is unavailable.
    template: Result<Arc<ChatTemplate>, String>,
    /// Each id's text, for logprobs (`token_texts[id]`).
    token_texts: Vec<String>,
    /// Spellings of the special tokens (shared by every chat request).
    special_tokens: Arc<[String]>,
    config: ServerConfig,
    metrics: Metrics,
    admission: Admission,
    drain: Drain,
    /// Built on the first constrained request (the token trie takes a moment to build).
    grammar: OnceLock<Result<Arc<GrammarCompiler>, String>>,
}

impl AppState {
    /// Builds the state; compiles the chat template and spells the vocabulary once (call it off
    /// the async runtime, it takes a moment for big vocabularies).
    pub fn new(engine: EngineHandle, tokenizer: Option<Tokenizer>, config: ServerConfig) -> Self {
        let template = match tokenizer.as_ref().map(ChatTemplate::from_tokenizer) {
            None => Err("this model has no tokenizer, so chat is unavailable; use /v1/completions with token ids".to_string()),
            Some(None) => Err("this model has no chat template, so /v1/chat/completions is unavailable; use /v1/completions".to_string()),
            Some(Some(Err(e))) => Err(e.to_string()),
            Some(Some(Ok(t))) => Ok(Arc::new(t)),
        };
        let token_texts = tokenizer.as_ref().map_or_else(Vec::new, |t| {
            (0..t.vocab_size() as u32)
                .map(|id| t.decode(&[id], false).unwrap_or_default())
                .collect()
        });
        let special_tokens = tokenizer
            .as_ref()
            .map_or_else(Vec::new, Tokenizer::special_token_strings)
            .into();
        AppState(Arc::new(Inner {
            engine,
            special_tokens,
            tokenizer: tokenizer.map(Arc::new),
            template,
            token_texts,
            config,
            metrics: Metrics::default(),
            admission: Admission::default(),
            drain: Drain::default(),
            grammar: OnceLock::new(),
        }))
    }

    pub fn engine(&self) -> &EngineHandle {
        &self.0.engine
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub fn admission(&self) -> &Admission {
        &self.0.admission
    }

    pub fn drain(&self) -> &Drain {
        &self.0.drain
    }

    /// The tokenizer, or 400 for a model without one.
    pub fn tokenizer(&self) -> Result<Arc<Tokenizer>, ApiError> {
        self.0.tokenizer.clone().ok_or_else(|| {
            ApiError::bad_request(
                "this model has no tokenizer: send the prompt as a list of token ids",
            )
        })
    }

    pub fn has_tokenizer(&self) -> bool {
        self.0.tokenizer.is_some()
    }

    /// The grammar compiler of this model's vocabulary, or why structured outputs are
    /// unavailable. Builds it on first use: call it off the async runtime.
    /// The model's chat template source ("" without one).
    pub fn template_source(&self) -> String {
        self.tokenizer()
            .ok()
            .and_then(|t| t.chat_template().map(str::to_owned))
            .unwrap_or_default()
    }

    /// How tool calls are written: `--tool-call-parser`, else what the template speaks.
    pub fn tool_format(&self) -> crate::tools::ToolFormat {
        self.config()
            .tool_call_parser
            .unwrap_or_else(|| crate::tools::ToolFormat::of_template(&self.template_source()))
    }

    pub fn grammar_compiler(&self) -> Result<Arc<GrammarCompiler>, String> {
        self.0
            .grammar
            .get_or_init(|| {
                let tok = self.0.tokenizer.as_ref().ok_or_else(|| {
                    "this model has no tokenizer, so outputs cannot be constrained".to_string()
                })?;
                GrammarCompiler::new(tok, self.0.engine.info().vocab_size)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// The chat template, or 400 saying why chat is unavailable.
    pub fn template(&self) -> Result<Arc<ChatTemplate>, ApiError> {
        self.0
            .template
            .clone()
            .map_err(|m| ApiError::bad_request(m).with_code("chat_template_unavailable"))
    }

    /// Why chat is unavailable, if it is.
    pub fn template_problem(&self) -> Option<&str> {
        self.0.template.as_ref().err().map(String::as_str)
    }

    /// Spellings of the tokenizer's special tokens.
    pub fn special_token_strings(&self) -> Arc<[String]> {
        Arc::clone(&self.0.special_tokens)
    }

    /// The text of token `id` (empty when unknown).
    pub fn token_text(&self, id: u32) -> &str {
        self.0
            .token_texts
            .get(id as usize)
            .map_or("", String::as_str)
    }

    /// 404 unless `model` is absent or the served name.
    pub fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(m) if m != self.0.config.served_model_name => Err(ApiError::not_found(format!(
                "The model `{m}` does not exist; this server serves `{}`.",
                self.0.config.served_model_name
            ))
            .with_param("model")
            .with_code("model_not_found")),
            _ => Ok(()),
        }
    }

    /// Longest prompt + completion a request can have: the context or the whole KV pool.
    pub fn context_limit(&self) -> usize {
        self.context().limit
    }

    /// The context limit, what sets it, and the model's own context length.
    pub fn context(&self) -> ContextLimit {
        let info = self.0.engine.info();
        let (limit, bound) = info.context_limit();
        ContextLimit {
            limit,
            bound,
            model_len: info.max_model_len,
        }
    }

    /// Admits `n` engine requests or answers 503 (busy now, retry) or 400 naming `n` (more
    /// choices than this server holds running and waiting together: no retry would succeed).
    /// While the server drains, 503 (another replica can answer).
    pub fn admit(&self, n: usize) -> Result<AdmitGuard, ApiError> {
        if self.0.drain.is_draining() {
            return Err(drain::refused_while_draining());
        }
        let capacity = self.0.engine.info().max_num_seqs + self.0.config.max_waiting;
        if n > capacity {
            return Err(ApiError::invalid_param(
                "n",
                format!(
                    "this request needs {n} sequences (prompts × n) but this server holds at most {capacity} at once ({} running + {} waiting)",
                    self.0.engine.info().max_num_seqs,
                    self.0.config.max_waiting
                ),
            ));
        }
        let stats = self.0.engine.stats();
        self.0.admission.try_admit(
            n,
            stats.num_waiting,
            self.0.engine.info().max_num_seqs,
            self.0.config.max_waiting,
        )
    }
}
