//! The GPT-2 byte-to-character alphabet used by byte-level BPE vocabularies.
//!
//! Byte-level BPE spells every byte as one printable character: printable Latin-1 bytes stand
//! for themselves, the rest are moved to U+0100 and up, in byte order. A vocabulary entry is a
//! string in that alphabet. This module gives the mapping and re-spells arbitrary text into it.
//!
//! Guarantees: the mapping is a bijection between the 256 bytes and 256 chars; `respell` of a
//! string already in the alphabet returns it unchanged.

/// The character that stands for each byte.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next_shifted = 0u32;
    for (byte, slot) in table.iter_mut().enumerate() {
        let b = byte as u32;
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
        let code = if printable {
            b
        } else {
            next_shifted += 1;
            0xff + next_shifted
        };
        // Codes stay below 0x200, all valid scalar values.
        *slot = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    table
}

/// Whether every character of `token` belongs to the byte alphabet.
pub fn is_spelled(token: &str, table: &[char; 256]) -> bool {
    token.chars().all(|c| table.contains(&c))
}

/// `token` unchanged if it is already spelled in the alphabet, else its UTF-8 bytes re-spelled.
pub fn respell(token: &str, table: &[char; 256]) -> String {
    if is_spelled(token, table) {
        token.to_string()
    } else {
        token.bytes().map(|b| table[b as usize]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_letters() {
        let t = byte_to_char();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        let mut all: Vec<char> = t.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 256);
    }

    #[test]
    fn respell_only_foreign_tokens() {
        let t = byte_to_char();
        assert_eq!(respell("Ġhello", &t), "Ġhello");
        assert_eq!(respell("a b", &t), "aĠb");
    }
}
