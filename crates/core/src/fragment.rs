//! IPv4 fragmentation before encryption (RFC 4301 §7 "pre-fragmentation"): a plaintext
//! packet without DF that would not fit the tunnel once encapsulated is split into
//! fragments that do, each of which is then encrypted on its own. The receiver's host
//! reassembles them; the tunnel itself never carries fragmented ESP from us.

use espgw_wire::checksum;
use espgw_wire::ipv4::Ipv4Packet;

use crate::packet::{Packet, Verdict};

/// Splits the IPv4 packet `ip` into fragments of at most `max_len` bytes each, written as
/// IP packets into buffers from `get` and appended to `out`. Returns how many, or 0 if it
/// cannot be fragmented (DF set, malformed, or `max_len` too small for any payload).
pub fn fragment_v4(
    ip: &[u8],
    max_len: usize,
    mut get: impl FnMut() -> Packet,
    out: &mut Vec<Packet>,
) -> usize {
    let Ok(p) = Ipv4Packet::new_checked(ip) else {
        return 0;
    };
    if p.dont_fragment() {
        return 0;
    }
    let ihl = p.header_len();
    let total = p.total_len();
    let base_off = p.frag_offset();
    let last_mf = p.more_fragments();
    let header = &ip[..ihl];
    // Options copied into later fragments: only those with the "copied" flag (RFC 791).
    let mut later_hdr = [0u8; 60];
    later_hdr[..20].copy_from_slice(&header[..20]);
    let mut l = 20;
    let mut opts = &header[20..];
    while let Some(&kind) = opts.first() {
        let olen = match kind {
            0 => break,
            1 => 1,
            _ => match opts.get(1) {
                Some(&n) if n >= 2 && usize::from(n) <= opts.len() => usize::from(n),
                _ => break,
            },
        };
        if kind & 0x80 != 0 {
            later_hdr[l..l + olen].copy_from_slice(&opts[..olen]);
            l += olen;
        }
        opts = &opts[olen..];
    }
    let later_ihl = l.div_ceil(4) * 4;
    let payload = &ip[ihl..total];
    let mut done = 0;
    let mut n = 0;
    let start = out.len();
    while done < payload.len() {
        let hl = if done == 0 { ihl } else { later_ihl };
        let room = max_len.saturating_sub(hl) & !7;
        if room == 0 {
            out.truncate(start);
            return 0;
        }
        let chunk = room.min(payload.len() - done);
        let last = done + chunk == payload.len();
        let mut f = get();
        let mut buf = [0u8; 60];
        let hdr: &[u8] = if done == 0 {
            header
        } else {
            buf[..later_ihl].copy_from_slice(&later_hdr[..later_ihl]);
            &buf[..later_ihl]
        };
        if f.load_parts(hdr, &payload[done..done + chunk]).is_err() {
            out.truncate(start);
            return 0;
        }
        let d = f.data_mut();
        d[0] = 0x40 | (hl / 4) as u8;
        d[2..4].copy_from_slice(&((hl + chunk) as u16).to_be_bytes());
        let off = (base_off + done) / 8;
        let mf = if last { last_mf } else { true };
        let ff = (off as u16) | if mf { 0x2000 } else { 0 };
        d[6..8].copy_from_slice(&ff.to_be_bytes());
        d[10] = 0;
        d[11] = 0;
        let c = checksum::checksum(&d[..hl]);
        d[10..12].copy_from_slice(&c.to_be_bytes());
        f.verdict = Verdict::Pending;
        out.push(f);
        done += chunk;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(len: usize, df: bool) -> Vec<u8> {
        let mut ip = vec![0u8; len];
        ip[0] = 0x46; // one option word: a copied option (0x83 = LSRR-ish) padded
        ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        if df {
            ip[6] = 0x40;
        }
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 51, 100, 2]);
        ip[16..20].copy_from_slice(&[203, 0, 113, 2]);
        ip[20..24].copy_from_slice(&[0x07, 3, 0, 0]); // record route: not copied
        for (i, b) in ip[24..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let c = checksum::checksum(&ip[..24]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip
    }

    #[test]
    fn fragments_reassemble_to_the_original() {
        let ip = packet(3000, false);
        let mut out = Vec::new();
        let n = fragment_v4(&ip, 1446, Packet::new, &mut out);
        assert_eq!(n, 3);
        let mut payload = Vec::new();
        for (i, f) in out.iter().enumerate() {
            let d = f.data();
            assert!(d.len() <= 1446);
            let p = Ipv4Packet::new_checked(d).unwrap();
            assert!(p.verify_checksum());
            assert_eq!(p.ident(), 0x1234);
            assert_eq!(p.frag_offset(), payload.len());
            assert_eq!(p.more_fragments(), i < 2);
            // The non-copied option stays in the first fragment only.
            assert_eq!(p.header_len(), if i == 0 { 24 } else { 20 });
            payload.extend_from_slice(p.payload());
        }
        assert_eq!(payload, &ip[24..]);
    }

    #[test]
    fn refuses_df_and_tiny_mtu() {
        let mut out = Vec::new();
        assert_eq!(
            fragment_v4(&packet(3000, true), 1446, Packet::new, &mut out),
            0
        );
        assert_eq!(
            fragment_v4(&packet(3000, false), 27, Packet::new, &mut out),
            0
        );
        assert!(out.is_empty());
        assert_eq!(fragment_v4(&[0x45, 0, 0], 1400, Packet::new, &mut out), 0);
    }
}
