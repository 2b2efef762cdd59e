//! AH (RFC 4302): integrity for the whole packet, immutable IP header fields included.

/// AH header length with an ICV of `icv_len` bytes: 12 fixed bytes and the ICV, padded to
/// 4 bytes over IPv4 and 8 over IPv6 (RFC 4302 §2.2, §3.3.3.2.1).
pub fn header_len(icv_len: usize, v4: bool) -> usize {
    let align = if v4 { 4 } else { 8 };
    (12 + icv_len).div_ceil(align) * align
}
