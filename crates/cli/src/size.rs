//! Byte sizes on the command line: `1073741824`, `512MiB`, `1GiB`, `2G`, `1.5GB`.
//!
//! Binary units (`K`, `M`, `G`, `T`, with or without `iB`) are powers of 1024, as memory sizes
//! usually are; `KB`, `MB`, `GB`, `TB` are powers of 1000. Case does not matter.

/// Parses a size for clap's `value_parser`; the error names the accepted forms.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(bad(text)),
    };
    let value: f64 = number.parse().map_err(|_| bad(text))?;
    let bytes = (value * scale).round();
    if !bytes.is_finite() || bytes > usize::MAX as f64 {
        return Err(format!("{text} is too large"));
    }
    Ok(bytes as usize)
}

fn bad(text: &str) -> String {
    format!("`{text}` is not a size: use bytes (1073741824) or a number with a unit (512MiB, 1GiB, 2G, 1.5GB)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("512mib"), Ok(512 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("64 KiB"), Ok(64 << 10));
        for bad in ["", "MiB", "12 parsecs", "-1G", "1.2.3M", "1e9"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
