//! Inbound ESP (RFC 4303 §3.4): recognising ESP (plain or in UDP, RFC 3948), finding the
//! SA, and after the burst crypto call has authenticated and decrypted the text, checking
//! the trailer and removing the encapsulation.

use espgw_config::Mode;
use espgw_wire::ipv6::{self, Ipv6Packet};
use espgw_wire::{esp, proto, udp::UdpPacket};

use crate::counters::DropReason;
use crate::encap::{refresh_upper_checksum, restore_inner, restore_transport_header};
use crate::flow::{parse_ip, IpInfo};
use crate::packet::Packet;
use crate::sa::Sa;
use crate::tables::Tables;

/// An ESP packet ready for the crypto call.
#[derive(Debug, Clone, Copy)]
pub struct OpenJob {
    /// Index of the SA in the tables.
    pub sa: u32,
    /// Sequence number as on the wire; the pipeline infers the full 64 bits.
    pub seq_low: u32,
    /// End of the headers in front of ESP (IP header, extension headers; not UDP).
    pub ip_hdr_len: usize,
    /// Offset of the ESP header (after UDP, if any).
    pub esp_off: usize,
    /// Offset of the text and its length without the ICV.
    pub text_off: usize,
    /// Length of the text without the ICV.
    pub text_len: usize,
    /// IPv6: offset of the byte naming ESP/UDP (to rewrite in transport mode).
    pub nh_at: usize,
    /// Outer TOS / traffic class (for ECN decapsulation).
    pub outer_tos: u8,
    /// Whether the outer header is IPv4.
    pub outer_v4: bool,
    /// The AH SA that was verified and removed around this ESP packet (a bundle).
    pub via_ah: Option<u32>,
}

/// Whether an inbound packet is ESP.
pub enum Classified {
    /// ESP (or ESP-in-UDP) for a known SA, ready for the crypto call.
    Esp(OpenJob),
    /// Not ESP: plaintext for the inbound SPD.
    Plain,
}

/// Looks at an inbound IP packet: ESP (or ESP-in-UDP) is matched to its SA by SPI.
/// `spi_cache` remembers the last SPI found (valid for one table snapshot): the packets of
/// a burst mostly share one SA.
#[inline(always)]
pub fn classify(
    pkt: &Packet,
    info: &IpInfo,
    tables: &Tables,
    spi_cache: &mut Option<(u32, u32)>,
) -> Result<Classified, (DropReason, Option<u32>)> {
    let d = pkt.data();
    let k = &info.key;
    let mut esp_off = info.upper_off;
    match k.proto {
        proto::ESP => {}
        proto::UDP if tables.udp_encap_ports.contains(&k.dport) => {
            let u = UdpPacket::new_checked(d.get(info.upper_off..info.total_len).unwrap_or(&[]))
                .map_err(|_| (DropReason::Malformed, None))?;
            let p = u.payload();
            // RFC 3948 §2.2/2.3: a NAT keepalive is one 0xff byte; IKE starts with a zero
            // non-ESP marker. Neither is for the data plane.
            if p == [0xff] || p.len() < 4 || p[..4] == [0, 0, 0, 0] {
                return Err((DropReason::IkeOrKeepalive, None));
            }
            esp_off += 8;
        }
        _ => return Ok(Classified::Plain),
    }
    if info.is_fragment {
        return Err((DropReason::Fragment, None));
    }
    let e = esp::EspPacket::new_checked(d.get(esp_off..info.total_len).unwrap_or(&[]))
        .map_err(|_| (DropReason::Truncated, None))?;
    let sa_idx = match *spi_cache {
        Some((spi, idx)) if spi == e.spi() => idx,
        _ => {
            let idx = *tables
                .sa_in_by_spi
                .get(&e.spi())
                .ok_or((DropReason::NoSa, None))?;
            *spi_cache = Some((e.spi(), idx));
            idx
        }
    };
    let sa = &tables.sas[sa_idx as usize];
    let body = info.total_len - esp_off - esp::HEADER_LEN;
    let min = sa.iv_len + esp::TRAILER_LEN + sa.icv_len;
    if body < min {
        return Err((DropReason::Truncated, Some(sa_idx)));
    }
    let text_len = body - sa.iv_len - sa.icv_len;
    // Block ciphers need whole blocks; checked before any crypto is spent.
    if sa.block_len > 4 && !text_len.is_multiple_of(sa.block_len) {
        return Err((DropReason::Truncated, Some(sa_idx)));
    }
    if let Mode::Tunnel { local, .. } = sa.mode {
        if local.is_ipv4() != k.v4 {
            return Err((DropReason::SaMismatch, Some(sa_idx)));
        }
    }
    let nh_at = if k.v4 {
        9
    } else if info.upper_off == ipv6::HEADER_LEN {
        // No extension headers: the fixed header's own next header names ESP / UDP (the
        // walk below would say so too, at the cost of reading the header again).
        6
    } else {
        Ipv6Packet::new_checked(d)
            .and_then(|v| v.upper_layer())
            .map(|u| u.next_header_at)
            .unwrap_or(6)
    };
    Ok(Classified::Esp(OpenJob {
        sa: sa_idx,
        seq_low: e.seq(),
        ip_hdr_len: info.upper_off,
        esp_off,
        text_off: esp_off + esp::HEADER_LEN + sa.iv_len,
        text_len,
        nh_at,
        outer_tos: info.tos,
        outer_v4: k.v4,
        via_ah: None,
    }))
}

/// Authenticates and decrypts one ESP packet (`[ESP header][IV][text][ICV]`) in place and
/// returns the length of the text. `seq` is the full sequence number (with ESN, its high
/// half comes from the replay window). The pipeline does the same for whole bursts.
pub fn open_packet(sa: &Sa, seq: u64, esp: &mut [u8]) -> Result<usize, DropReason> {
    let text_len = esp
        .len()
        .checked_sub(esp::HEADER_LEN + sa.iv_len + sa.icv_len)
        .ok_or(DropReason::Truncated)?;
    let key = sa.esp_key().ok_or(DropReason::SaMismatch)?;
    let mut ok = [false];
    key.open_burst(&mut [espgw_crypto::EspOp { esp, seq }], &mut ok);
    if ok[0] {
        Ok(text_len)
    } else {
        Err(DropReason::AuthFailed)
    }
}

/// Removes the ESP encapsulation from an authenticated, decrypted packet. On success the
/// packet holds the inner IP packet (tunnel) or the restored IP packet (transport), and
/// what its header says is returned (a packet whose header does not parse is malformed).
#[inline]
pub fn decapsulate(pkt: &mut Packet, job: &OpenJob, sa: &Sa) -> Result<IpInfo, DropReason> {
    let text = pkt
        .data()
        .get(job.text_off..job.text_off + job.text_len)
        .ok_or(DropReason::Truncated)?;
    let t = esp::parse_trailer(text).map_err(|_| DropReason::BadPadding)?;
    if t.next_header == proto::NO_NEXT {
        return Err(DropReason::Dummy);
    }
    match sa.mode {
        Mode::Tunnel { .. } => {
            let inner_v4 = match t.next_header {
                proto::IPIP => true,
                proto::IPV6 => false,
                _ => return Err(DropReason::BadNextHeader),
            };
            pkt.pull_front(job.text_off);
            pkt.truncate(t.payload_len);
            restore_inner(pkt, inner_v4, job.outer_tos)
        }
        Mode::Transport => {
            let hdr = job.ip_hdr_len;
            pkt.truncate(job.text_off + t.payload_len);
            if !pkt.close_gap(hdr, job.text_off - hdr) {
                return Err(DropReason::Malformed);
            }
            restore_transport_header(pkt.data_mut(), job.nh_at, t.next_header, job.outer_v4)?;
            let info = parse_ip(pkt.data()).map_err(|_| DropReason::Malformed)?;
            // ESP after a UDP header came NAT-T encapsulated: a NAT may have changed the
            // addresses the upper layer's checksum covers.
            if job.esp_off != job.ip_hdr_len {
                refresh_upper_checksum(pkt.data_mut(), &info);
            }
            Ok(info)
        }
    }
}
