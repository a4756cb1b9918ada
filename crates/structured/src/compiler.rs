//! [`GrammarCompiler`]: compiles constraint specs against one model's vocabulary, caching
//! compiled grammars by the SHA-256 of their content.
//!
//! Compilation happens at admission (the server calls [`GrammarCompiler::compile`] before a
//! request reaches the engine), so a schema or grammar that does not compile, or that allows
//! no output at all, is reported to the client instead of running unconstrained. A cached
//! grammar is cloned for each request: the clone starts fresh and shares the lexer's caches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use llguidance::{Matcher, ParserFactory};
use oxllm_tok::Tokenizer;
use sha2::{Digest, Sha256};

use crate::{Constraint, ConstraintSpec, StructuredError};

/// Compiled grammars kept at most; past it the cache starts over (schemas are mostly reused
/// verbatim, so a simple bound is enough).
const CACHE_CAPACITY: usize = 512;

/// Counters for `oxllm bench` and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompileStats {
    pub compiled: u64,
    pub cache_hits: u64,
    /// Total time spent compiling (cache misses only), in seconds.
    pub compile_seconds: f64,
}

pub struct GrammarCompiler {
    factory: ParserFactory,
    eos_ids: Arc<[u32]>,
    logits_vocab: usize,
    cache: Mutex<(HashMap<[u8; 32], Matcher>, CompileStats)>,
}

impl GrammarCompiler {
    /// A compiler for `tokenizer`'s vocabulary over a logits row of `logits_vocab` ids.
    pub fn new(tokenizer: &Tokenizer, logits_vocab: usize) -> Result<Self, StructuredError> {
        let env = crate::vocab::token_env(tokenizer, logits_vocab)?;
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| StructuredError::Unsupported(e.to_string()))?;
        factory.quiet();
        let eos_ids: Arc<[u32]> = env.tok_trie().eos_tokens().into();
        Ok(GrammarCompiler {
            factory,
            eos_ids,
            logits_vocab,
            cache: Mutex::new((HashMap::new(), CompileStats::default())),
        })
    }

    /// Width of the masks this compiler's constraints fill.
    pub fn logits_vocab(&self) -> usize {
        self.logits_vocab
    }

    pub fn stats(&self) -> CompileStats {
        self.cache.lock().map(|c| c.1).unwrap_or_default()
    }

    /// A fresh constraint for `spec`; compiled once per distinct content.
    pub fn compile(&self, spec: &ConstraintSpec) -> Result<Constraint, StructuredError> {
        let key: [u8; 32] = Sha256::digest(spec.cache_key().as_bytes()).into();
        if let Ok(mut cache) = self.cache.lock() {
            if let Some(m) = cache.0.get(&key).cloned() {
                cache.1.cache_hits += 1;
                return Ok(Constraint::new(
                    m,
                    Arc::clone(&self.eos_ids),
                    self.logits_vocab,
                ));
            }
        }
        let start = Instant::now();
        let grammar = spec.grammar()?;
        // The parser reports compile errors as its error state; a panic inside llguidance on
        // an odd grammar is reported the same way rather than taking the server down.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.factory.create_parser(grammar)
        }))
        .map_err(|_| StructuredError::Compile("the grammar engine failed on this grammar".into()))?
        .map_err(|e| StructuredError::Compile(clean_message(&e.to_string())))?;
        crate::termination::check_terminates(parser.parser.grammar()).map_err(|rule| {
            StructuredError::Compile(format!(
                "the grammar never terminates: no finite output completes rule `{rule}`"
            ))
        })?;
        let mut matcher = Matcher::new(Ok(parser));
        check_producible(&mut matcher)?;
        let elapsed = start.elapsed().as_secs_f64();
        if let Ok(mut cache) = self.cache.lock() {
            if cache.0.len() >= CACHE_CAPACITY {
                cache.0.clear();
            }
            cache.0.insert(key, matcher.clone());
            cache.1.compiled += 1;
            cache.1.compile_seconds += elapsed;
        }
        Ok(Constraint::new(
            matcher,
            Arc::clone(&self.eos_ids),
            self.logits_vocab,
        ))
    }
}

/// Rejects a grammar under which no output can start (an empty language, or rules that never
/// terminate): its first mask would allow nothing.
fn check_producible(matcher: &mut Matcher) -> Result<(), StructuredError> {
    let mut probe = matcher.clone();
    const EMPTY: &str = "the grammar allows no output: its language is empty";
    match probe.compute_mask() {
        Ok(mask) if !mask.is_zero() => Ok(()),
        Ok(_) => Err(StructuredError::Compile(EMPTY.into())),
        // The engine reports a grammar with no first token as an error of its own
        // (`NoExtensionBias`), which means nothing to a client.
        Err(e) => Err(StructuredError::Compile(format!(
            "{EMPTY} ({})",
            clean_message(&e.to_string())
        ))),
    }
}

/// llguidance's messages can carry its whole parser state; a client needs the first line.
fn clean_message(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg).trim();
    first.chars().take(500).collect()
}
