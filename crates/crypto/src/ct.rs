//! Constant-time helpers.

/// Compares two byte strings in time that depends only on their lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // Eight bytes a step: an ICV is 8 to 32 bytes, and this runs once per packet opened.
    let (a_words, a_tail) = a.as_chunks::<8>();
    let (b_words, b_tail) = b.as_chunks::<8>();
    let mut diff = 0u64;
    for (x, y) in a_words.iter().zip(b_words) {
        diff |= u64::from_ne_bytes(*x) ^ u64::from_ne_bytes(*y);
    }
    for (x, y) in a_tail.iter().zip(b_tail) {
        diff |= u64::from(x ^ y);
    }
    // black_box keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::ct_eq;

    #[test]
    fn equal_and_unequal() {
        assert!(ct_eq(b"abcd", b"abcd"));
        assert!(!ct_eq(b"abcd", b"abce"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(ct_eq(b"", b""));
    }

    /// Every length an ICV or key has, with one byte changed at every position: whole
    /// words and the tail both count.
    #[test]
    fn one_byte_differs_anywhere() {
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(ct_eq(&a, &a.clone()));
            for pos in 0..len {
                for bit in 0..8 {
                    let mut b = a.clone();
                    b[pos] ^= 1 << bit;
                    assert!(!ct_eq(&a, &b), "len {len} pos {pos} bit {bit}");
                }
            }
        }
    }
}
