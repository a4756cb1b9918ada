//! Each token id's byte string: what a grammar engine needs to know which tokens can extend a
//! partial output.
//!
//! Byte-level BPE vocabularies spell bytes in the GPT-2 alphabet (mapped back here);
//! SentencePiece-style vocabularies with byte fallback spell a space as `▁` and raw bytes as
//! `<0xNN>`. Added tokens are their literal text; special added tokens (`<|im_end|>`, ...)
//! are flagged, since no generated *text* can spell them.
//!
//! Guarantees: one entry per id below [`Tokenizer::vocab_size`]; ids the vocabulary does not
//! name get an empty byte string (no text can produce them); nothing here panics.

use std::collections::HashMap;

use crate::byte_alphabet::byte_to_char;
use crate::Tokenizer;

/// The bytes one token id stands for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenBytes {
    pub bytes: Vec<u8>,
    /// A special token (control token): produced only as itself, never by spelling text.
    pub special: bool,
}

impl Tokenizer {
    /// The byte string of every token id (index = id).
    pub fn token_bytes(&self) -> Vec<TokenBytes> {
        let n = self.vocab_size();
        let mut out = vec![TokenBytes::default(); n];
        let inner = self.inner();
        let byte_fallback = inner.token_to_id("<0x0A>").is_some();
        let table = byte_to_char();
        let char_to_byte: HashMap<char, u8> = table
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        let added = inner.get_added_tokens_decoder();
        for (id, slot) in out.iter_mut().enumerate() {
            let id = id as u32;
            if let Some(tok) = added.get(&id) {
                slot.bytes = tok.content.as_bytes().to_vec();
                slot.special = tok.special;
                continue;
            }
            let Some(spelling) = inner.id_to_token(id) else {
                continue;
            };
            slot.bytes = if byte_fallback {
                fallback_bytes(&spelling)
            } else {
                // A spelling outside the alphabet is literal text (e.g. a GGUF user token).
                spelling
                    .chars()
                    .map(|c| char_to_byte.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_else(|| spelling.as_bytes().to_vec())
            };
        }
        out
    }
}

/// SentencePiece spelling: `<0xNN>` is byte NN, `▁` a space.
fn fallback_bytes(spelling: &str) -> Vec<u8> {
    if let Some(hex) = spelling
        .strip_prefix("<0x")
        .and_then(|s| s.strip_suffix('>'))
    {
        if let (2, Ok(b)) = (hex.len(), u8::from_str_radix(hex, 16)) {
            return vec![b];
        }
    }
    spelling.replace('\u{2581}', " ").into_bytes()
}
