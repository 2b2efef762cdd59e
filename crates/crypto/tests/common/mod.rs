//! Helpers shared by the crypto crate's integration tests.

/// Bytes from hex digits; anything else (spaces, line breaks, colons) is skipped.
pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
