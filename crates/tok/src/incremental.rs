//! [`IncrementalDecoder`]: streaming detokenization, one token id at a time.
//!
//! Method (prefix offsets): keep the ids since the last emitted chunk began. On every new id,
//! decode the window `[prefix_offset..]` and the already-emitted part `[prefix_offset..read_offset]`;
//! if the longer text does not end in U+FFFD (an unfinished UTF-8 sequence), emit what it adds
//! and slide the window forward. Decoding a window instead of the whole sequence keeps each
//! step cheap while still letting tokens that join across boundaries (byte pieces of one
//! character, decoders that treat the first token specially) come out right.
//!
//! Guarantees:
//! * no delta ever ends with half of a multi-byte character: bytes are held until complete;
//! * for byte-level tokenizers, the concatenation of all deltas from [`IncrementalDecoder::push`]
//!   followed by [`IncrementalDecoder::flush`] equals `Tokenizer::decode(all_ids)` (tested on the
//!   fixture corpus, emoji and ZWJ sequences included);
//! * memory is bounded by the tokens since the last emitted chunk, not the whole stream;
//! * an out-of-range id is an error and leaves the decoder unchanged.

use crate::error::TokError;
use crate::tokenizer::Tokenizer;

/// Streams text out of a sequence of token ids. Create with [`Tokenizer::incremental_decoder`].
#[derive(Debug, Clone)]
pub struct IncrementalDecoder<'t> {
    tok: &'t Tokenizer,
    skip_special_tokens: bool,
    /// Ids from `prefix_offset` on (earlier ones are dropped once emitted).
    window: Vec<u32>,
    /// Start of the not-yet-emitted ids, as an index into `window`.
    read_offset: usize,
}

impl Tokenizer {
    /// A streaming decoder over this tokenizer.
    pub fn incremental_decoder(&self, skip_special_tokens: bool) -> IncrementalDecoder<'_> {
        IncrementalDecoder {
            tok: self,
            skip_special_tokens,
            window: Vec::new(),
            read_offset: 0,
        }
    }
}

impl IncrementalDecoder<'_> {
    /// Add one id; returns the newly completed text (often empty while bytes are held).
    pub fn push(&mut self, id: u32) -> Result<String, TokError> {
        let vocab_size = self.tok.vocab_size();
        if id as usize >= vocab_size {
            return Err(TokError::TokenIdOutOfRange { id, vocab_size });
        }
        self.window.push(id);
        let full = self.decode(&self.window)?;
        if full.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        self.emit(full)
    }

    /// Emit whatever is still held (e.g. a genuinely invalid byte sequence at the end of the
    /// stream, which decodes to U+FFFD) and reset the window.
    pub fn flush(&mut self) -> Result<String, TokError> {
        if self.read_offset >= self.window.len() {
            return Ok(String::new());
        }
        let full = self.decode(&self.window)?;
        let delta = self.emit(full)?;
        self.window.clear();
        self.read_offset = 0;
        Ok(delta)
    }

    /// Number of ids pushed but not yet part of any emitted text.
    pub fn pending(&self) -> usize {
        self.window.len() - self.read_offset
    }

    fn decode(&self, ids: &[u32]) -> Result<String, TokError> {
        self.tok.decode(ids, self.skip_special_tokens)
    }

    /// `full` is the decode of the whole window; return what it adds to the emitted prefix and
    /// slide the window so it starts at the chunk just emitted.
    fn emit(&mut self, full: String) -> Result<String, TokError> {
        let prefix = self.decode(&self.window[..self.read_offset])?;
        let delta = match full.strip_prefix(prefix.as_str()) {
            Some(rest) => rest.to_string(),
            None => {
                // The decoder rewrote already-emitted text; emit from the first difference.
                let common = prefix
                    .char_indices()
                    .zip(full.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(prefix.len().min(full.len()), |((i, _), _)| i);
                full.get(common..).unwrap_or_default().to_string()
            }
        };
        if delta.is_empty() {
            return Ok(delta);
        }
        self.window.drain(..self.read_offset);
        self.read_offset = self.window.len();
        Ok(delta)
    }
}
