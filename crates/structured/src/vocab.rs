//! llguidance's view of our tokenizer: a token trie over every logit id's bytes (special
//! tokens marked so no text spells them) and text re-tokenization through our own tokenizer.
//!
//! The trie spans the model's logits row, which may be wider than the tokenizer's vocabulary:
//! the extra ids have no bytes, so no grammar ever allows them.

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use oxllm_tok::Tokenizer;

use crate::StructuredError;

struct VocabEnv {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Grammar engines ask this for forced text; an encode failure only means no forcing.
        let text = String::from_utf8_lossy(s);
        self.tokenizer.encode(&text, false).unwrap_or_default()
    }
}

/// The token environment of `tokenizer` over a logits row of `logits_vocab` ids.
pub(crate) fn token_env(
    tokenizer: &Tokenizer,
    logits_vocab: usize,
) -> Result<TokEnv, StructuredError> {
    let eos: Vec<u32> = tokenizer
        .eos_ids()
        .iter()
        .copied()
        .filter(|&id| (id as usize) < logits_vocab)
        .collect();
    let Some(&first_eos) = eos.first() else {
        return Err(StructuredError::Unsupported(
            "the tokenizer declares no end-of-sequence token".into(),
        ));
    };
    let mut words: Vec<Vec<u8>> = tokenizer
        .token_bytes()
        .into_iter()
        .take(logits_vocab)
        .map(|t| {
            if t.special {
                let mut b = Vec::with_capacity(t.bytes.len() + 1);
                b.push(TokTrie::SPECIAL_TOKEN_MARKER);
                b.extend_from_slice(&t.bytes);
                b
            } else {
                t.bytes
            }
        })
        .collect();
    words.resize(logits_vocab, Vec::new());
    let vocab = u32::try_from(logits_vocab)
        .map_err(|_| StructuredError::Unsupported("vocabulary too large".into()))?;
    let info = TokRxInfo::new(vocab, first_eos);
    // The trie builder asserts its invariants; a vocabulary that breaks them is an error here.
    let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words).with_eos_tokens(&eos))
        .map_err(|_| {
            StructuredError::Unsupported("the vocabulary does not form a token trie".into())
        })?;
    Ok(Arc::new(VocabEnv {
        trie,
        tokenizer: tokenizer.clone(),
    }))
}
