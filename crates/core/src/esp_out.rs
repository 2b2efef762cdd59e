//! Outbound ESP (RFC 4303 §3.3): encapsulation around the packet, leaving IV, encryption
//! and ICV to a burst call of the SA's transform (`espgw_crypto::esp`).
//!
//! Tunnel mode:    `[outer IP][UDP?][ESP hdr][IV][inner IP packet][pad][pl][nh][ICV]`
//! Transport mode: `[IP hdr][UDP?][ESP hdr][IV][upper layer][pad][pl][nh][ICV]`
//!
//! IV length, padding alignment and ICV length come from the SA's algorithm suite.

use espgw_config::Mode;
use espgw_wire::ipv6::{self, Ipv6Packet};
use espgw_wire::{checksum, esp, proto, udp};

use crate::counters::DropReason;
use crate::encap::{fix_ip_length, transport_split};
use crate::flow::IpInfo;
use crate::packet::Packet;
use crate::sa::Sa;

/// What the crypto call needs for one packet, and what to fix afterwards.
#[derive(Debug, Clone, Copy)]
pub struct SealJob {
    /// The packet's sequence number (its explicit IV too); nonce and AAD are derived
    /// from it at encryption time rather than carried here, since a 12-byte array built
    /// from two stores and copied with 8-byte loads stalls store forwarding. Until
    /// [`set_seq`]: the packet's offset in its burst's block of numbers.
    pub seq: u64,
    /// Whether the packet starts with an outer IPv4 header (tunnel mode) whose
    /// identification is taken from the sequence number.
    pub outer_ipv4: bool,
    /// Offset of the ESP header inside the packet.
    pub esp_off: u16,
    /// Offset of the text to encrypt inside the packet, and its length without the ICV.
    pub text_off: u16,
    /// Length of the text without the ICV.
    pub text_len: u16,
    /// Offset of a UDP header whose checksum must be filled after encryption (IPv6 outer);
    /// 0: none (an IP header always comes first, so 0 is never a UDP header's offset).
    pub udp_v6_checksum_at: u16,
    /// Destination for routing: family and address of the packet as it leaves.
    pub route_v4: bool,
    /// Destination address of the packet as it leaves, for routing.
    pub route_dst: u128,
    /// Bytes protected (the inner packet in tunnel mode, the upper layer in transport
    /// mode), for counters and byte lifetimes.
    pub payload_len: u32,
}

// Offsets and lengths inside a packet buffer are kept as u16 in the job (a smaller slot per
// packet, written once per pass over the burst): they always fit.
const _: () = assert!(crate::packet::BUF_SIZE <= u16::MAX as usize);

/// Appends padding, pad length and next header after the first `payload_end` bytes, and
/// room for the ICV. Returns the text length (payload + trailer).
#[inline]
fn add_trailer(
    pkt: &mut Packet,
    payload_start: usize,
    payload_end: usize,
    next_header: u8,
    sa: &Sa,
) -> Result<usize, DropReason> {
    let icv = sa.icv_len;
    let payload_len = payload_end - payload_start;
    let pad = esp::pad_len(payload_len, sa.block_len);
    let d = pkt
        .push_back(pad + esp::TRAILER_LEN + icv)
        .ok_or(DropReason::TooBig)?;
    esp::emit_trailer(
        &mut d[payload_end..payload_end + pad + esp::TRAILER_LEN],
        next_header,
    )
    .map_err(|_| DropReason::TooBig)?;
    Ok(payload_len + pad + esp::TRAILER_LEN)
}

/// SPI and the low half of the sequence number; the transform writes the IV.
#[inline]
fn write_esp_header(d: &mut [u8], at: usize, sa: &Sa, seq: u64) {
    let _ = esp::emit_header(&mut d[at..], sa.spi, seq as u32);
}

/// Encapsulates the IP packet in `pkt` (which starts at its IP header; `info` describes
/// it) for `sa` with sequence number `seq`. The text is left in plaintext for the burst
/// crypto call.
#[inline(always)]
pub fn encapsulate(
    pkt: &mut Packet,
    sa: &Sa,
    seq: u64,
    info: &IpInfo,
) -> Result<SealJob, DropReason> {
    pkt.truncate(info.total_len);
    let esp_hdr_iv = esp::HEADER_LEN + sa.iv_len;
    let udp_len = if sa.udp.is_some() { udp::HEADER_LEN } else { 0 };
    match sa.mode {
        Mode::Tunnel { .. } => {
            let outer = sa.outer.as_ref().ok_or(DropReason::SaMismatch)?;
            let inner_len = info.total_len;
            let nh = if info.key.v4 {
                proto::IPIP
            } else {
                proto::IPV6
            };
            let text_len = add_trailer(pkt, 0, inner_len, nh, sa)?;
            let outer_v4 = outer.is_v4();
            let ip_len = outer.header_len();
            let front = ip_len + udp_len + esp_hdr_iv;
            pkt.push_front(front).ok_or(DropReason::TooBig)?;
            let total = pkt.len();
            let d = pkt.data_mut();
            write_esp_header(d, ip_len + udp_len, sa, seq);
            let mut udp_v6_checksum_at = 0;
            if let Some(u) = sa.udp {
                udp::emit(
                    &mut d[ip_len..],
                    u.src_port,
                    u.dst_port,
                    total - ip_len - udp::HEADER_LEN,
                )
                .map_err(|_| DropReason::TooBig)?;
                if !outer_v4 {
                    udp_v6_checksum_at = ip_len as u16;
                }
            }
            let (route_v4, route_dst) = outer.write(d, info, seq, total)?;
            Ok(SealJob {
                seq,
                outer_ipv4: outer_v4,
                esp_off: (ip_len + udp_len) as u16,
                text_off: front as u16,
                text_len: text_len as u16,
                udp_v6_checksum_at,
                route_v4,
                route_dst,
                payload_len: inner_len as u32,
            })
        }
        Mode::Transport => {
            // Headers that stay in front of ESP, and the byte that names what follows them.
            let (hdr_len, nh_at) = transport_split(pkt.data(), info)?;
            let next_header = *pkt.data().get(nh_at).ok_or(DropReason::Malformed)?;
            let text_len = add_trailer(pkt, hdr_len, info.total_len, next_header, sa)?;
            let gap = udp_len + esp_hdr_iv;
            if !pkt.open_gap(hdr_len, gap) {
                return Err(DropReason::TooBig);
            }
            let total = pkt.len();
            let d = pkt.data_mut();
            write_esp_header(d, hdr_len + udp_len, sa, seq);
            let protocol = if sa.udp.is_some() {
                proto::UDP
            } else {
                proto::ESP
            };
            let mut udp_v6_checksum_at = 0;
            if let Some(u) = sa.udp {
                udp::emit(
                    &mut d[hdr_len..],
                    u.src_port,
                    u.dst_port,
                    total - hdr_len - udp::HEADER_LEN,
                )
                .map_err(|_| DropReason::TooBig)?;
                if !info.key.v4 {
                    udp_v6_checksum_at = hdr_len as u16;
                }
            }
            d[nh_at] = protocol;
            fix_ip_length(d, info.key.v4, total)?;
            Ok(SealJob {
                seq,
                outer_ipv4: false,
                esp_off: (hdr_len + udp_len) as u16,
                text_off: (hdr_len + gap) as u16,
                text_len: text_len as u16,
                udp_v6_checksum_at,
                route_v4: info.key.v4,
                route_dst: info.key.dst,
                payload_len: (info.total_len - hdr_len) as u32,
            })
        }
    }
}

/// Gives an encapsulated packet (`d`, its bytes) its sequence number, reserved after
/// encapsulation: the ESP header's field, the outer IPv4 identification (its checksum
/// updated, RFC 1624) and the job's number.
#[inline(always)]
pub fn set_seq(d: &mut [u8], job: &mut SealJob, seq: u64) {
    let esp = usize::from(job.esp_off);
    if let Some(f) = d.get_mut(esp + 4..esp + 8) {
        f.copy_from_slice(&(seq as u32).to_be_bytes());
    }
    if job.outer_ipv4 {
        if let Some(h) = d.get_mut(..12) {
            let old = u16::from_be_bytes([h[4], h[5]]);
            let new = seq as u16;
            let check = u16::from_be_bytes([h[10], h[11]]);
            h[4..6].copy_from_slice(&new.to_be_bytes());
            h[10..12].copy_from_slice(&checksum::update16(check, old, new).to_be_bytes());
        }
    }
    job.seq = seq;
}

/// Work left after encryption: the UDP checksum of ESP-in-UDP over IPv6, which covers the
/// ciphertext.
#[inline]
pub fn finish(pkt: &mut Packet, job: &SealJob) {
    if job.udp_v6_checksum_at == 0 {
        return;
    }
    let at = usize::from(job.udp_v6_checksum_at);
    let d = pkt.data_mut();
    let Ok(v6) = Ipv6Packet::new_checked(&*d) else {
        return;
    };
    let (src, dst) = (v6.src(), v6.dst());
    let len = d.len() - at;
    let sum = ipv6::pseudo_header_sum(src, dst, proto::UDP, len);
    udp::fill_checksum(&mut d[at..], sum);
}

/// Seals one ESP packet in place: `esp` is `[ESP header][IV][text][room for the ICV]` with
/// the text (payload and trailer, padded to the SA's block) already written. Writes SPI and
/// sequence number; the transform writes IV and ICV. The pipeline does the same for whole
/// bursts; this form serves known-answer tests and tools.
pub fn seal_packet(sa: &Sa, seq: u64, esp: &mut [u8]) -> Result<(), DropReason> {
    if esp.len() < esp::HEADER_LEN + sa.iv_len + sa.icv_len {
        return Err(DropReason::Truncated);
    }
    let key = sa.esp_key().ok_or(DropReason::SaMismatch)?;
    let _ = esp::emit_header(esp, sa.spi, seq as u32);
    key.seal_burst(&mut [espgw_crypto::EspOp { esp, seq }]);
    Ok(())
}
