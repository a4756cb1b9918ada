//! Encoding a rendered chat prompt so that the messages' contents cannot forge control tokens.
//!
//! A chat template writes the turn structure with special tokens (`<|im_start|>`, ...). If a
//! message's content contains such a token's spelling, encoding the rendered text as one piece
//! turns it into a real control token, and a user can forge, e.g., a system turn. By default
//! (the safe choice; vLLM's default is the other one) each content that contains a special
//! token's spelling is found in the rendered text and encoded as ordinary text, and only the
//! template's own text around it may produce control tokens. Prompts whose contents contain no
//! special-token spelling are encoded exactly as before, as one piece.

use oxllm_tok::Tokenizer;

use crate::error::ApiError;

/// Encodes `rendered`, in which `contents` (the messages' contents, in order) appear; contents
/// containing one of `specials` are encoded as text. 400 when such a content cannot be found
/// in the rendered text (the template changed it), rather than letting its tokens through.
pub fn encode_with_text_contents(
    tok: &Tokenizer,
    rendered: &str,
    contents: &[String],
    specials: &[String],
    add_special_tokens: bool,
) -> Result<Vec<u32>, ApiError> {
    let encode = |text: &str, special: bool| {
        tok.encode(text, special)
            .map_err(|e| ApiError::invalid_param("messages", e.to_string()))
    };
    let risky: Vec<(usize, &String)> = contents
        .iter()
        .enumerate()
        .filter(|(_, c)| specials.iter().any(|s| c.contains(s.as_str())))
        .collect();
    if risky.is_empty() {
        return encode(rendered, add_special_tokens);
    }
    let mut ids = Vec::new();
    let mut cursor = 0;
    for (i, content) in risky {
        let Some(at) = rendered[cursor..].find(content.as_str()) else {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].content"),
                "this content contains a special token's spelling, which this server encodes as text, but the chat template altered the content so it cannot be isolated; remove the special token from the message",
            ));
        };
        // BOS, when asked for, goes before the first piece only.
        ids.extend(encode(
            &rendered[cursor..cursor + at],
            add_special_tokens && cursor == 0,
        )?);
        ids.extend(
            tok.encode_as_text(content)
                .map_err(|e| ApiError::invalid_param("messages", e.to_string()))?,
        );
        cursor += at + content.len();
    }
    ids.extend(encode(&rendered[cursor..], false)?);
    Ok(ids)
}
