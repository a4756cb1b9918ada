//! [`Tokenizer`]: text <-> token ids, plus the special-token facts a generation loop needs.
//!
//! Wraps a `tokenizers::Tokenizer` built from a `tokenizer.json`, a Hugging Face model
//! directory, or a GGUF vocabulary (the constructors live in `hf_dir`, `gguf_vocab` and
//! `gguf_file`).
//!
//! Guarantees:
//! * special tokens written in the text (e.g. `<|im_start|>`) are encoded as their single
//!   special id by `encode`, whatever `add_special_tokens` says, and as the text they spell by
//!   `encode_as_text`;
//! * with `add_special_tokens`, BOS is prepended only when the source declares it (GGUF
//!   `add_bos_token`, `tokenizer_config.json` `add_bos_token`, or the tokenizer.json
//!   post-processor), never twice by this crate;
//! * `decode` rejects ids outside the vocabulary instead of silently dropping them;
//! * nothing here panics on user input.

use std::path::Path;
use std::sync::OnceLock;

use crate::error::TokError;

/// What a constructor knows besides the `tokenizers` pipeline itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenizerSpec {
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    /// This crate prepends BOS itself (the pipeline does not).
    pub prepend_bos: bool,
    /// This crate appends the first EOS itself (the pipeline does not).
    pub append_eos: bool,
    pub chat_template: Option<String>,
}

/// A loaded tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    spec: TokenizerSpec,
    vocab_size: usize,
    /// A copy of `inner` that encodes special-token strings as ordinary text (made on first
    /// use of [`Tokenizer::encode_as_text`]).
    text_only: OnceLock<tokenizers::Tokenizer>,
}

impl Tokenizer {
    pub(crate) fn from_parts(inner: tokenizers::Tokenizer, spec: TokenizerSpec) -> Self {
        let vocab_size = inner.get_vocab_size(true);
        Tokenizer {
            inner,
            spec,
            vocab_size,
            text_only: OnceLock::new(),
        }
    }

    /// Load a `tokenizer.json`. BOS/EOS handling is whatever its post-processor does; no EOS
    /// ids or chat template are known (use [`Tokenizer::from_hf_dir`] for those).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| TokError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
            TokError::InvalidTokenizerFile {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        Ok(Self::from_parts(inner, TokenizerSpec::default()))
    }

    pub(crate) fn spec_mut(&mut self) -> &mut TokenizerSpec {
        &mut self.spec
    }

    pub(crate) fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Encode `text`. With `add_special_tokens`, BOS/EOS are added as the source declares.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokError> {
        let encoding = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(TokError::backend)?;
        let body = encoding.get_ids();
        let mut ids = Vec::with_capacity(body.len() + 2);
        if add_special_tokens && self.spec.prepend_bos {
            ids.extend(self.spec.bos_id);
        }
        ids.extend_from_slice(body);
        if add_special_tokens && self.spec.append_eos {
            ids.extend(self.spec.eos_ids.first().copied());
        }
        Ok(ids)
    }

    /// Encode `text` with every special-token string in it (e.g. `<|im_end|>`) encoded as the
    /// ordinary text it spells, never as its control id; no BOS/EOS. For untrusted text placed
    /// inside a prompt whose control tokens come from elsewhere (a chat template).
    pub fn encode_as_text(&self, text: &str) -> Result<Vec<u32>, TokError> {
        let text_only = self.text_only.get_or_init(|| {
            let mut t = self.inner.clone();
            t.set_encode_special_tokens(true);
            t
        });
        let encoding = text_only.encode(text, false).map_err(TokError::backend)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The spellings of the special (control) tokens, e.g. `<|im_start|>`.
    pub fn special_token_strings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .inner
            .get_added_tokens_decoder()
            .into_values()
            .filter(|t| t.special && !t.content.is_empty())
            .map(|t| t.content)
            .collect();
        out.sort_unstable();
        out
    }

    /// Decode `ids` to text; with `skip_special_tokens`, special tokens are left out.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokError> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(TokError::TokenIdOutOfRange {
                id,
                vocab_size: self.vocab_size,
            });
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(TokError::backend)
    }

    /// The beginning-of-sequence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.spec.bos_id
    }

    /// Every id that ends generation (EOS, end-of-turn, ...), in declaration order.
    pub fn eos_ids(&self) -> &[u32] {
        &self.spec.eos_ids
    }

    /// Whether `id` ends generation.
    pub fn is_eos(&self, id: u32) -> bool {
        self.spec.eos_ids.contains(&id)
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The id of a token, spelled as the vocabulary or an added token spells it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary spelling of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The chat template (Jinja source), if the source has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.spec.chat_template.as_deref()
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn backend(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}
