//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// One's-complement sum of `data` folded into 32 bits, added to `initial`.
pub fn sum(data: &[u8], initial: u32) -> u32 {
    let mut acc = u64::from(initial);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        acc += u64::from(u32::from_be_bytes([c[4], c[5], c[6], c[7]]));
    }
    let mut rest = chunks.remainder().chunks_exact(2);
    for c in &mut rest {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = rest.remainder() {
        acc += u64::from(*last) << 8;
    }
    while acc > 0xffff_ffff {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
}

/// Folds a 32-bit sum to 16 bits and complements it.
#[inline]
pub fn finish(s: u32) -> u16 {
    // Two folds always suffice, so no loop (and no branch) is needed: the first leaves at
    // most 0xffff + 0xffff = 0x1fffe, the second at most 0xfffe + 1.
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

/// Checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data, 0))
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word changed from `old` to `new`.
#[inline]
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    let s = u32::from(!check) + u32::from(!old) + u32::from(new);
    finish(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folds agree with folding until nothing carries, for sums at and around every
    /// boundary a carry can cross, and across the range.
    #[test]
    fn finish_folds_every_sum() {
        let slow = |mut s: u32| {
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16);
            }
            !(s as u16)
        };
        let edges = [
            0,
            1,
            0xfffe,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0x1_ffff,
            0xffff_0000,
            u32::MAX,
        ];
        let spread = (0..=u32::MAX / 65_521).map(|i| i * 65_521);
        for s in edges.into_iter().chain(spread) {
            assert_eq!(finish(s), slow(s), "{s:#x}");
        }
    }

    #[test]
    fn rfc1071_example() {
        // The RFC 1071 §3 example: sum of 0001 f203 f4f5 f6f7 is ddf2 (before complement).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(&d, 0)), !0xddf2);
    }

    #[test]
    fn incremental_matches_full() {
        let mut d = [
            0x45u8, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        let c = checksum(&d);
        d[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&d), 0);
        let old = u16::from_be_bytes([d[8], d[9]]);
        d[8] = 63;
        let new = u16::from_be_bytes([d[8], d[9]]);
        let c2 = update16(c, old, new);
        d[10..12].copy_from_slice(&c2.to_be_bytes());
        assert_eq!(checksum(&d), 0);
    }

    #[test]
    fn odd_length() {
        assert_eq!(checksum(&[0xff]), !0xff00);
    }
}
