//! What ESP and AH share around their own headers: the outer IP header of tunnel mode
//! (written on the way out, ECN restored on the way in, RFC 6040), and in transport mode
//! where the protocol's header goes and how the IP header is fixed up around it. Both
//! transforms (`esp_out`/`esp_in`, `ah`) call these; neither calls the other.

use espgw_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use espgw_wire::ipv6::{self, Ipv6Packet, Ipv6Repr};

use crate::counters::DropReason;
use crate::flow::IpInfo;
use crate::packet::Packet;

/// RFC 6040 §4.2: the inner ECN field after decapsulation, or `None` to drop.
pub fn ecn_decap(outer: u8, inner: u8) -> Option<u8> {
    const NOT_ECT: u8 = 0;
    const ECT1: u8 = 1;
    const ECT0: u8 = 2;
    const CE: u8 = 3;
    match (inner, outer) {
        (NOT_ECT, CE) => None,
        (NOT_ECT, _) => Some(NOT_ECT),
        (ECT0, ECT1) => Some(ECT1),
        (ECT0 | ECT1, CE) => Some(CE),
        (i, _) => Some(i),
    }
}

/// Tunnel mode: `pkt` starts at the inner packet (perhaps followed by TFC padding, RFC 4303
/// §2.7): applies RFC 6040 ECN decapsulation with the outer `outer_tos` and trims the packet
/// to the inner header's own length.
pub fn restore_inner(pkt: &mut Packet, inner_v4: bool, outer_tos: u8) -> Result<(), DropReason> {
    let d = pkt.data_mut();
    let outer_ecn = outer_tos & 3;
    let inner_len = if inner_v4 {
        let mut ip = Ipv4Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        let tos = ip.tos();
        let ecn = ecn_decap(outer_ecn, tos & 3).ok_or(DropReason::EcnDrop)?;
        if ecn != tos & 3 {
            ip.set_tos((tos & !3) | ecn);
            ip.fill_checksum();
        }
        ip.total_len()
    } else {
        let mut ip = Ipv6Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        let tc = ip.traffic_class();
        let ecn = ecn_decap(outer_ecn, tc & 3).ok_or(DropReason::EcnDrop)?;
        if ecn != tc & 3 {
            ip.set_traffic_class((tc & !3) | ecn);
        }
        ip.total_len()
    };
    pkt.truncate(inner_len);
    Ok(())
}

/// Transport mode: once the ESP or AH bytes are gone, `d` is the restored packet: the
/// byte at `nh_at` names `next_header` again and the IP length (and IPv4 checksum) match.
pub fn restore_transport_header(
    d: &mut [u8],
    nh_at: usize,
    next_header: u8,
    v4: bool,
) -> Result<(), DropReason> {
    let total = d.len();
    *d.get_mut(nh_at).ok_or(DropReason::Malformed)? = next_header;
    if v4 {
        // The header still holds the longer length: fix it before the checked view looks.
        let tl = u16::try_from(total).map_err(|_| DropReason::Malformed)?;
        d[2..4].copy_from_slice(&tl.to_be_bytes());
        let mut ip = Ipv4Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        ip.fill_checksum();
    } else {
        let plen = u16::try_from(total.saturating_sub(40)).map_err(|_| DropReason::Malformed)?;
        d.get_mut(4..6)
            .ok_or(DropReason::Malformed)?
            .copy_from_slice(&plen.to_be_bytes());
    }
    Ok(())
}

/// Writes the outer IP header of a tunnel-mode packet of `total` bytes (ESP or AH) at the
/// start of `d`; returns the family and destination to route on. RFC 4301 §5.1.2.1 /
/// RFC 6040 normal mode: DSCP and ECN are copied from the inner header, and DF from an
/// inner IPv4 header.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn emit_tunnel_header(
    d: &mut [u8],
    local: std::net::IpAddr,
    remote: std::net::IpAddr,
    protocol: u8,
    inner: &IpInfo,
    ttl: u8,
    seq: u64,
    total: usize,
) -> Result<(bool, u128), DropReason> {
    match (local, remote) {
        (std::net::IpAddr::V4(l), std::net::IpAddr::V4(r)) => {
            Ipv4Repr {
                src: l,
                dst: r,
                protocol,
                tos: inner.tos,
                ttl,
                ident: seq as u16,
                dont_fragment: inner.key.v4 && inner.dont_fragment,
                payload_len: total - 20,
            }
            .emit(d)
            .map_err(|_| DropReason::TooBig)?;
            Ok((true, u128::from(u32::from(r))))
        }
        (std::net::IpAddr::V6(l), std::net::IpAddr::V6(r)) => {
            Ipv6Repr {
                src: l,
                dst: r,
                next_header: protocol,
                traffic_class: inner.tos,
                flow_label: 0,
                hop_limit: ttl,
                payload_len: total - ipv6::HEADER_LEN,
            }
            .emit(d)
            .map_err(|_| DropReason::TooBig)?;
            Ok((false, u128::from(r)))
        }
        _ => Err(DropReason::SaMismatch),
    }
}

/// Transport mode: the end of the headers that stay in front of ESP or AH, and the offset
/// of the byte naming what follows them (IPv4: the protocol field; IPv6: after hop-by-hop,
/// routing and fragment headers, RFC 4303 §3.1.1, RFC 4302 §3.1.1).
#[inline]
pub fn transport_split(d: &[u8], info: &IpInfo) -> Result<(usize, usize), DropReason> {
    if info.key.v4 {
        Ok((info.upper_off, 9))
    } else {
        let v6 = Ipv6Packet::new_checked(d).map_err(|_| DropReason::Malformed)?;
        let u = v6.upper_layer().map_err(|_| DropReason::Malformed)?;
        Ok((u.per_hop_end, u.per_hop_next_header_at))
    }
}

/// Transport mode: after ESP or AH was inserted, the packet is `total` bytes: fix the IP
/// length (and the IPv4 checksum).
#[inline]
pub fn fix_ip_length(d: &mut [u8], v4: bool, total: usize) -> Result<(), DropReason> {
    if v4 {
        let mut ip = Ipv4Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        ip.set_total_len(u16::try_from(total).map_err(|_| DropReason::TooBig)?);
        ip.fill_checksum();
    } else {
        let plen = u16::try_from(total - ipv6::HEADER_LEN).map_err(|_| DropReason::TooBig)?;
        d[4..6].copy_from_slice(&plen.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ecn_decap;

    #[test]
    fn rfc6040_decapsulation_table() {
        // ecn_decap(outer, inner), RFC 6040 Figure 4.
        assert_eq!(ecn_decap(0, 0), Some(0));
        assert_eq!(ecn_decap(3, 0), None);
        assert_eq!(ecn_decap(1, 2), Some(1));
        assert_eq!(ecn_decap(3, 2), Some(3));
        assert_eq!(ecn_decap(3, 1), Some(3));
        assert_eq!(ecn_decap(2, 3), Some(3));
        assert_eq!(ecn_decap(0, 3), Some(3));
    }
}
