//! AH (RFC 4302): integrity for the whole packet, the immutable IP header fields included.
//!
//! Transport mode: `[IP hdr][AH][upper layer]`; tunnel mode: `[outer IP][AH][inner packet]`.
//! The AH header is `[next hdr][payload len][reserved][SPI][seq][IV (GMAC)][ICV][pad]`.
//!
//! The ICV covers the IP header with its mutable fields zeroed (§3.3.3.1: IPv4 TOS, flags
//! and fragment offset, TTL, checksum and the mutable options; IPv6 traffic class, flow
//! label, hop limit and the data of options marked mutable), the AH header with the ICV
//! zeroed (its padding included as it stands), the payload, and with ESN the high 32
//! sequence bits appended (§3.3.3.2.1). The ICV runs over the packet itself: its mutable
//! fields and ICV are zeroed in place and, with ESN, the high bits appended, after the
//! bytes that change are saved to an arena the caller owns (one per burst, reused, so
//! nothing allocates per packet); afterwards they are put back. The burst's ICVs go to the
//! crypto back-end together (multi-buffer), and no payload is copied.
//!
//! Not handled (the packet is dropped as `ah_unsupported`): IPv4 source-route options and
//! IPv6 routing headers in front of AH, whose "mutable but predictable" addresses would
//! have to be rewritten to their values at the final destination before the ICV.

use espgw_config::Mode;
use espgw_crypto::ah::GMAC_IV_LEN;
use espgw_crypto::{AhKey, AhOp, Icv};
use espgw_wire::{ipv6, proto};

use crate::counters::DropReason;
use crate::encap::{fix_ip_length, restore_inner, restore_transport_header, transport_split};
use crate::flow::{parse_ip, IpInfo};
use crate::packet::Packet;
use crate::sa::Sa;
use crate::tables::Tables;

use espgw_wire::ah::AhHeader;
pub use espgw_wire::ah::{header_len, FIXED_LEN};

/// IPv4 options that stay the same in transit (RFC 4302 Appendix A.1), by option number:
/// end of list, no-op, security, extended security, commercial security, router alert,
/// sender-directed multi-destination delivery.
const IMMUTABLE_V4_OPTIONS: [u8; 7] = [0, 1, 2, 5, 6, 20, 21];
/// Loose and strict source route: mutable but predictable.
const SOURCE_ROUTE_OPTIONS: [u8; 2] = [3, 9];

/// Zeroes the fields of `hdr` (the IP header and, over IPv6, the extension headers in
/// front of AH) that may change in transit. Inlined, for the common IPv4 header without
/// options (as a call of its own it cost 28 instructions per packet, callgrind); options
/// and IPv6 go out of line.
#[inline]
fn zero_mutable(hdr: &mut [u8], v4: bool) -> Result<(), DropReason> {
    if !v4 {
        return zero_mutable_v6(hdr);
    }
    let (fixed, options) = match hdr.split_at_mut_checked(20) {
        Some(parts) => parts,
        None => return Err(DropReason::Malformed),
    };
    fixed[1] = 0; // TOS (DSCP, ECN)
    fixed[6..9].fill(0); // flags, fragment offset, TTL
    fixed[10..12].fill(0); // checksum
    if options.is_empty() {
        return Ok(());
    }
    zero_mutable_v4_options(options)
}

/// IPv4 options (`opts`: what follows the 20 fixed bytes): each mutable option zeroed
/// whole (RFC 4302 §3.3.3.1.1.2); source routes are refused.
#[inline(never)]
fn zero_mutable_v4_options(opts: &mut [u8]) -> Result<(), DropReason> {
    let mut i = 0;
    while i < opts.len() {
        let t = opts[i];
        match t {
            0 => break, // end of list: the rest is padding, immutable
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = usize::from(*opts.get(i + 1).ok_or(DropReason::Malformed)?);
        if len < 2 || i + len > opts.len() {
            return Err(DropReason::Malformed);
        }
        let number = t & 0x1f;
        if SOURCE_ROUTE_OPTIONS.contains(&number) {
            return Err(DropReason::AhUnsupported);
        }
        if !IMMUTABLE_V4_OPTIONS.contains(&number) {
            opts[i..i + len].fill(0);
        }
        i += len;
    }
    Ok(())
}

/// The IPv6 header's mutable fields, and the mutable option data of the hop-by-hop and
/// destination options headers in front of AH.
#[inline(never)]
fn zero_mutable_v6(hdr: &mut [u8]) -> Result<(), DropReason> {
    if hdr.len() < ipv6::HEADER_LEN {
        return Err(DropReason::Malformed);
    }
    hdr[0] &= 0xf0; // traffic class (high nibble)
    hdr[1..4].fill(0); // traffic class (low nibble), flow label
    hdr[7] = 0; // hop limit
    let mut nh = hdr[6];
    let mut off = ipv6::HEADER_LEN;
    while off < hdr.len() {
        match nh {
            proto::HOPOPT | proto::DSTOPTS => {
                let len = (usize::from(*hdr.get(off + 1).ok_or(DropReason::Malformed)?) + 1) * 8;
                if off + len > hdr.len() {
                    return Err(DropReason::Malformed);
                }
                zero_mutable_v6_options(&mut hdr[off + 2..off + len])?;
                nh = hdr[off];
                off += len;
            }
            proto::ROUTING => return Err(DropReason::AhUnsupported),
            proto::FRAGMENT => return Err(DropReason::Fragment),
            _ => return Err(DropReason::Malformed),
        }
    }
    Ok(())
}

/// The options area of a hop-by-hop or destination options header: the data of every
/// option whose type has the "may change en route" bit (0x20) is zeroed (RFC 8200 §4.2).
fn zero_mutable_v6_options(opts: &mut [u8]) -> Result<(), DropReason> {
    let mut j = 0;
    while j < opts.len() {
        let t = opts[j];
        if t == 0 {
            j += 1; // Pad1
            continue;
        }
        let len = usize::from(*opts.get(j + 1).ok_or(DropReason::Malformed)?);
        let end = j + 2 + len;
        if end > opts.len() {
            return Err(DropReason::Malformed);
        }
        if t & 0x20 != 0 {
            opts[j + 2..end].fill(0);
        }
        j = end;
    }
    Ok(())
}

/// Where AH sits in a packet: its offset and length, and the IP family in front of it.
#[derive(Debug, Clone, Copy)]
struct AhAt {
    off: usize,
    len: usize,
    v4: bool,
}

/// The high half of `seq` if the SA uses ESN: the ICV covers it (RFC 4302 §3.3.3.2.1).
fn seq_hi(seq: u64, esn: bool) -> Option<u32> {
    esn.then_some((seq >> 32) as u32)
}

/// One packet's part in a burst's ICV computation, prepared in place (`prepare`): where
/// its saved front (the headers through the ICV, as they were) lies in the burst's arena,
/// its AES-GMAC IV, where its ICV sits, and how many bytes were appended for the ICV.
#[derive(Debug, Clone, Copy)]
pub struct IcvJob {
    /// Where the saved front starts in the arena; it is `icv_end` bytes long.
    pub saved_at: usize,
    /// Offset of the ICV in the packet.
    pub icv_at: usize,
    /// Offset of the end of the ICV (the length of the saved front).
    pub icv_end: usize,
    /// AES-GMAC's IV from the AH header (zero for the MACs).
    pub iv: [u8; GMAC_IV_LEN],
    /// Bytes appended to the packet (ESN's high sequence bits), taken off by [`restore`].
    pub appended: usize,
}

/// Makes the AH packet in `pkt` what its ICV covers, in place, as RFC 4302 §3.3.3
/// describes: the headers' mutable fields and the ICV zeroed and, with ESN, the high
/// sequence bits appended, so that the ICV runs over the packet itself (no copy of the
/// payload). What is changed is saved to `arena` first; [`restore`] puts it back (the
/// caller restores every prepared packet, authentic or not). On error the packet is as it
/// was and nothing is left in the arena. Inlined: its result, returned through memory,
/// was read back before it had landed (`perf`: a fifth of `stage_protect`'s time).
#[inline(always)]
fn prepare(
    pkt: &mut Packet,
    at: AhAt,
    key: &AhKey,
    seq_hi: Option<u32>,
    arena: &mut Vec<u8>,
) -> Result<IcvJob, DropReason> {
    let iv_end = at.off + FIXED_LEN + key.iv_len();
    let icv_end = iv_end + key.icv_len();
    let d = pkt.data();
    if at.off + at.len > d.len() || icv_end > at.off + at.len {
        return Err(DropReason::Truncated);
    }
    let saved_at = arena.len();
    arena.extend_from_slice(&d[..icv_end]);
    // Read whole (GMAC) or not at all (the MACs): a copy of variable length, written a
    // byte at a time into the job, was read back as one word before it had landed.
    let iv = match key.iv_len() {
        GMAC_IV_LEN => d
            .get(at.off + FIXED_LEN..iv_end)
            .and_then(|b| <[u8; GMAC_IV_LEN]>::try_from(b).ok())
            .unwrap_or_default(),
        _ => [0u8; GMAC_IV_LEN],
    };
    let job = IcvJob {
        saved_at,
        icv_at: iv_end,
        icv_end,
        iv,
        appended: 0,
    };
    let d = pkt.data_mut();
    d[iv_end..icv_end].fill(0);
    let zeroed = zero_mutable(&mut d[..at.off], at.v4);
    let appended = match (zeroed, seq_hi) {
        (Err(r), _) => Err(r),
        (Ok(()), None) => Ok(0),
        (Ok(()), Some(hi)) => match pkt.push_back(4) {
            Some(d) => {
                let n = d.len();
                d[n - 4..].copy_from_slice(&hi.to_be_bytes());
                Ok(4)
            }
            None => Err(DropReason::TooBig),
        },
    };
    match appended {
        Ok(appended) => Ok(IcvJob { appended, ..job }),
        Err(r) => {
            restore(pkt, &job, arena);
            arena.truncate(saved_at);
            Err(r)
        }
    }
}

/// Undoes `prepare`: the appended bytes taken off, the headers and the ICV field as they
/// were.
pub fn restore(pkt: &mut Packet, job: &IcvJob, arena: &[u8]) {
    if job.appended > 0 {
        pkt.truncate(pkt.len().saturating_sub(job.appended));
    }
    let saved = arena.get(job.saved_at..job.saved_at + job.icv_end);
    if let (Some(dst), Some(src)) = (pkt.data_mut().get_mut(..job.icv_end), saved) {
        dst.copy_from_slice(src);
    }
}

/// What an outbound AH packet needs next.
#[derive(Debug, Clone, Copy)]
pub struct Protected {
    /// Family of the packet as it leaves (the outer header in tunnel mode), for routing.
    pub route_v4: bool,
    /// Destination address of the packet as it leaves, for routing.
    pub route_dst: u128,
    /// Bytes protected (inner packet or upper layer), for counters and lifetimes.
    pub payload_len: u32,
}

/// Adds AH for `sa` (whose key is `key`) with sequence number `seq` to the IP packet in
/// `pkt` (plaintext, or an ESP packet when AH is the outer SA of a bundle), all but the
/// ICV, and prepares the packet in place for it (`prepare`), for the burst's ICVs to be
/// computed together; then [`restore`] and [`write_icv`]. Inlined, as `prepare` is: its
/// result, returned through memory, was read back before it had landed (`perf`, AH
/// AES-XCBC-MAC-96 at 64 B: a third of the burst loop's own time at that one load).
#[inline(always)]
pub fn stage_protect(
    pkt: &mut Packet,
    sa: &Sa,
    key: &AhKey,
    seq: u64,
    arena: &mut Vec<u8>,
) -> Result<(Protected, IcvJob), DropReason> {
    let info = parse_ip(pkt.data())?;
    if info.is_fragment {
        return Err(DropReason::Fragment);
    }
    pkt.truncate(info.total_len);
    let iv_icv = key.iv_len() + key.icv_len();
    let (ah_off, ah_len, next_header, v4, route, payload_len) = match sa.mode {
        Mode::Tunnel { .. } => {
            let outer = sa.outer.as_ref().ok_or(DropReason::SaMismatch)?;
            let v4 = outer.is_v4();
            let ah_len = header_len(iv_icv, v4);
            let ip_len = outer.header_len();
            pkt.push_front(ip_len + ah_len).ok_or(DropReason::TooBig)?;
            let total = pkt.len();
            let route = outer.write(pkt.data_mut(), &info, seq, total)?;
            let nh = if info.key.v4 {
                proto::IPIP
            } else {
                proto::IPV6
            };
            (ip_len, ah_len, nh, v4, route, info.total_len)
        }
        Mode::Transport => {
            let v4 = info.key.v4;
            let (hdr_len, nh_at) = transport_split(pkt.data(), &info)?;
            let ah_len = header_len(iv_icv, v4);
            let nh = *pkt.data().get(nh_at).ok_or(DropReason::Malformed)?;
            if !pkt.open_gap(hdr_len, ah_len) {
                return Err(DropReason::TooBig);
            }
            let total = pkt.len();
            let d = pkt.data_mut();
            d[nh_at] = proto::AH;
            fix_ip_length(d, v4, total)?;
            let route = (v4, info.key.dst);
            (hdr_len, ah_len, nh, v4, route, info.total_len - hdr_len)
        }
    };
    let d = pkt.data_mut();
    let ah = &mut d[ah_off..ah_off + ah_len];
    espgw_wire::ah::emit_header(ah, next_header, ah_len, sa.spi, seq as u32)
        .map_err(|_| DropReason::TooBig)?;
    // GMAC's IV: the sequence number, unique for the key's life since it never wraps.
    let iv_len = key.iv_len();
    let iv = seq.to_be_bytes();
    ah[FIXED_LEN..FIXED_LEN + iv_len].copy_from_slice(&iv[8 - iv_len..]);
    let at = AhAt {
        off: ah_off,
        len: ah_len,
        v4,
    };
    let job = prepare(pkt, at, key, seq_hi(seq, sa.esn), arena)?;
    let done = Protected {
        route_v4: route.0,
        route_dst: route.1,
        payload_len: payload_len as u32,
    };
    Ok((done, job))
}

/// Adds AH to one packet, ICV included ([`stage_protect`], the ICV, [`write_icv`]); the
/// pipeline does the same a burst at a time. `arena` is cleared and reused.
pub fn protect(
    pkt: &mut Packet,
    sa: &Sa,
    key: &AhKey,
    seq: u64,
    arena: &mut Vec<u8>,
) -> Result<Protected, DropReason> {
    arena.clear();
    let (done, job) = stage_protect(pkt, sa, key, seq, arena)?;
    let mut icv = Icv::NONE;
    let mut ops = [AhOp {
        text: pkt.data_mut(),
        iv: job.iv,
        icv: &mut icv,
    }];
    key.tag_burst(&mut ops);
    restore(pkt, &job, arena);
    let icv = icv.get().ok_or(DropReason::CryptoFailed)?;
    write_icv(pkt, &job, icv, key.icv_len());
    Ok(done)
}

/// Writes the ICV computed for `job` into its packet (the first `icv_len` bytes of `icv`).
pub fn write_icv(pkt: &mut Packet, job: &IcvJob, icv: &[u8], icv_len: usize) {
    let (Some(dst), Some(src)) = (
        pkt.data_mut().get_mut(job.icv_at..job.icv_at + icv_len),
        icv.get(..icv_len),
    ) else {
        return;
    };
    dst.copy_from_slice(src);
}

/// An inbound AH packet matched to its SA.
#[derive(Debug, Clone, Copy)]
pub struct AhJob {
    /// Index of the SA in the tables.
    pub sa: u32,
    /// Sequence number as on the wire; the pipeline infers the full 64 bits.
    pub seq_low: u32,
    /// Offset of the AH header in the packet.
    pub ah_off: usize,
    /// Length of the AH header (with IV and ICV).
    pub ah_len: usize,
    /// Offset of the byte naming AH (to restore in transport mode).
    pub nh_at: usize,
    /// The protocol AH protects (from its next header field).
    pub next_header: u8,
    /// Outer TOS / traffic class (for ECN decapsulation in tunnel mode).
    pub outer_tos: u8,
    /// Whether the packet is IPv4.
    pub v4: bool,
}

/// Where AH starts in an IP packet and the offset of the byte that names it, if the packet
/// carries AH (after IPv6 extension headers that may precede it); and whether an IPv6
/// fragment header comes first (then AH is not checkable before reassembly).
#[inline(always)]
fn find(d: &[u8], info: &IpInfo) -> Option<(usize, usize, bool)> {
    if info.key.v4 {
        return (info.key.proto == proto::AH).then_some((info.upper_off, 9, false));
    }
    let mut nh = *d.get(6)?;
    let mut nh_at = 6;
    let mut off = ipv6::HEADER_LEN;
    let mut fragment = false;
    for _ in 0..8 {
        match nh {
            proto::AH => return Some((off, nh_at, fragment)),
            proto::HOPOPT | proto::DSTOPTS | proto::ROUTING => {
                let len = (usize::from(*d.get(off + 1)?) + 1) * 8;
                nh_at = off;
                nh = *d.get(off)?;
                off += len;
            }
            proto::FRAGMENT => {
                fragment = true;
                nh_at = off;
                nh = *d.get(off)?;
                off += 8;
            }
            _ => return None,
        }
    }
    None
}

/// Recognises AH and finds its SA by SPI. `Ok(None)`: the packet is not AH.
#[inline(always)]
pub fn classify(
    pkt: &Packet,
    info: &IpInfo,
    tables: &Tables,
) -> Result<Option<AhJob>, (DropReason, Option<u32>)> {
    let d = pkt.data().get(..info.total_len).unwrap_or(&[]);
    // The common case first, cheaply: IPv4 not AH, IPv6 going straight to its upper layer.
    // (IPv6's flow key names the protocol after AH, so the chain itself is looked at.)
    let may_be_ah = if info.key.v4 {
        info.key.proto == proto::AH
    } else {
        matches!(
            d.get(6),
            Some(&(proto::AH | proto::HOPOPT | proto::ROUTING | proto::DSTOPTS | proto::FRAGMENT))
        )
    };
    if !may_be_ah {
        return Ok(None);
    }
    let Some((ah_off, nh_at, behind_fragment)) = find(d, info) else {
        return Ok(None);
    };
    if info.is_fragment || behind_fragment {
        return Err((DropReason::Fragment, None));
    }
    let ah = AhHeader::new_checked(d.get(ah_off..).unwrap_or(&[]))
        .map_err(|_| (DropReason::Truncated, None))?;
    let (spi, seq_low, ah_len) = (ah.spi(), ah.seq(), ah.header_len());
    let sa_idx = *tables
        .ah_in_by_spi
        .get(&spi)
        .ok_or((DropReason::NoSa, None))?;
    let sa = &tables.sas[sa_idx as usize];
    // Lenient on padding (some peers pad IPv4 to 8), strict on room for IV and ICV.
    let align = if info.key.v4 { 4 } else { 8 };
    if ah_len < FIXED_LEN + sa.iv_len + sa.icv_len
        || !ah_len.is_multiple_of(align)
        || ah_off + ah_len > d.len()
    {
        return Err((DropReason::Truncated, Some(sa_idx)));
    }
    if let Mode::Tunnel { local, .. } = sa.mode {
        if local.is_ipv4() != info.key.v4 {
            return Err((DropReason::SaMismatch, Some(sa_idx)));
        }
    }
    Ok(Some(AhJob {
        sa: sa_idx,
        seq_low,
        ah_off,
        ah_len,
        nh_at,
        next_header: ah.next_header(),
        outer_tos: info.tos,
        v4: info.key.v4,
    }))
}

/// Prepares the AH packet in `pkt` (trimmed to its IP length) in place for its ICV with
/// the full sequence number `seq` (`prepare`: what changes is saved to `arena`), for the
/// burst's ICVs to be computed together; then [`is_authentic`] and [`restore`]. Inlined,
/// as `prepare` is, for the same reason.
#[inline(always)]
pub fn stage_verify(
    pkt: &mut Packet,
    job: &AhJob,
    key: &AhKey,
    seq: u64,
    esn: bool,
    arena: &mut Vec<u8>,
) -> Result<IcvJob, DropReason> {
    let at = AhAt {
        off: job.ah_off,
        len: job.ah_len,
        v4: job.v4,
    };
    prepare(pkt, at, key, seq_hi(seq, esn), arena)
}

/// Whether the ICV the packet arrived with (saved in `arena` by `prepare`) is `icv`
/// (computed for `job`), compared in constant time; a missing ICV is not authentic.
pub fn is_authentic(arena: &[u8], job: &IcvJob, icv: Option<&[u8]>, icv_len: usize) -> bool {
    let received = arena.get(job.saved_at + job.icv_at..job.saved_at + job.icv_at + icv_len);
    match (received, icv.and_then(|t| t.get(..icv_len))) {
        (Some(r), Some(t)) => espgw_crypto::ct::ct_eq(r, t),
        _ => false,
    }
}

/// Removes AH from an authentic packet: leaves the inner packet (tunnel) or the packet as
/// it was before AH was inserted (transport), and returns its header as parsed. Inlined:
/// the header, returned through memory, was read back before it had landed (`perf`: the
/// largest single stall of the inbound AH pass).
#[inline(always)]
pub fn remove(pkt: &mut Packet, job: &AhJob, sa: &Sa) -> Result<IpInfo, DropReason> {
    let end = job.ah_off + job.ah_len;
    match sa.mode {
        Mode::Tunnel { .. } => {
            let inner_v4 = match job.next_header {
                proto::IPIP => true,
                proto::IPV6 => false,
                _ => return Err(DropReason::BadNextHeader),
            };
            pkt.pull_front(end);
            restore_inner(pkt, inner_v4, job.outer_tos)
        }
        Mode::Transport => {
            if !pkt.close_gap(job.ah_off, job.ah_len) {
                return Err(DropReason::Malformed);
            }
            restore_transport_header(pkt.data_mut(), job.nh_at, job.next_header, job.v4)?;
            parse_ip(pkt.data()).map_err(|_| DropReason::Malformed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lengths_follow_the_alignment_rule() {
        // HMAC-SHA1-96 and -MD5-96: 24 both ways; SHA-256-128: 28 over IPv4, 32 over IPv6;
        // GMAC (8-byte IV, 16-byte ICV): 36 / 40.
        assert_eq!((header_len(12, true), header_len(12, false)), (24, 24));
        assert_eq!((header_len(16, true), header_len(16, false)), (28, 32));
        assert_eq!((header_len(24, true), header_len(32, false)), (36, 48));
        assert_eq!((header_len(24, true), header_len(24, false)), (36, 40));
    }

    #[test]
    fn ipv4_mutable_fields_and_options_are_zeroed() {
        // Header with a router alert (immutable), a timestamp option (mutable, number 4)
        // and end of list.
        let mut h = vec![
            0x48, 0xb8, 0, 40, 0x12, 0x34, 0x40, 0x00, 64, 51, 0xab, 0xcd,
        ];
        h.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 2]);
        h.extend_from_slice(&[148, 4, 0, 0]); // router alert
        h.extend_from_slice(&[68, 8, 5, 0, 1, 2, 3, 4]); // timestamp (0x44)
        h.extend_from_slice(&[0, 0, 0, 0]); // EOL + padding
        let mut z = h.clone();
        zero_mutable(&mut z, true).unwrap();
        assert_eq!(z[1], 0);
        assert_eq!(&z[6..12], &[0, 0, 0, 51, 0, 0]);
        assert_eq!(&z[4..6], &h[4..6], "identification stays");
        assert_eq!(&z[12..20], &h[12..20], "addresses stay");
        assert_eq!(&z[20..24], &h[20..24], "router alert stays");
        assert_eq!(&z[24..32], &[0; 8], "timestamp zeroed whole");
        let mut lsrr = h.clone();
        lsrr[24] = 131;
        assert_eq!(
            zero_mutable(&mut lsrr, true),
            Err(DropReason::AhUnsupported)
        );
        let mut bad = h.clone();
        bad[25] = 40; // option longer than the header
        assert_eq!(zero_mutable(&mut bad, true), Err(DropReason::Malformed));
    }

    #[test]
    fn ipv6_mutable_fields_and_option_data_are_zeroed() {
        let mut h = vec![0x6b, 0x81, 0x23, 0x45, 0, 32, proto::HOPOPT, 64];
        h.extend_from_slice(&[0x20; 32]); // addresses
                                          // Hop-by-hop: next AH, length 0 (8 bytes): an option 0x3e (mutable bit set) with
                                          // 2 data bytes, and an option 0x1e (immutable) with 0 bytes.
        h.extend_from_slice(&[proto::AH, 0, 0x3e, 2, 0xaa, 0xbb, 0x1e, 0]);
        let mut z = h.clone();
        zero_mutable(&mut z, false).unwrap();
        assert_eq!(&z[..8], &[0x60, 0, 0, 0, 0, 32, proto::HOPOPT, 0]);
        assert_eq!(&z[40..48], &[proto::AH, 0, 0x3e, 2, 0, 0, 0x1e, 0]);
        let mut routed = h.clone();
        routed[6] = proto::ROUTING;
        assert_eq!(
            zero_mutable(&mut routed, false),
            Err(DropReason::AhUnsupported)
        );
        let mut short = h.clone();
        short[43] = 9; // option runs past its header
        assert_eq!(zero_mutable(&mut short, false), Err(DropReason::Malformed));
    }
}
