//! Every view accepts or refuses any byte sequence without panicking.
use espgw_wire::{esp, ethernet, icmp, ipv4, ipv6, tcp, udp};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn views_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(e) = ethernet::EthernetFrame::new_checked(&bytes[..]) {
            let _ = (e.dst(), e.src(), e.vlan(), e.ethertype(), e.payload().len());
        }
        if let Ok(p) = ipv4::Ipv4Packet::new_checked(&bytes[..]) {
            let _ = (p.src(), p.dst(), p.payload().len(), p.verify_checksum(), p.frag_offset());
        }
        // Force the version nibble and a fitting length so the walk is exercised often.
        let mut v6 = bytes.clone();
        if let Some(b) = v6.first_mut() { *b = 0x60 | (*b & 0x0f); }
        if v6.len() >= 6 {
            let plen = v6.len().saturating_sub(40) as u16;
            v6[4..6].copy_from_slice(&plen.to_be_bytes());
        }
        if let Ok(p) = ipv6::Ipv6Packet::new_checked(&v6[..]) {
            let _ = (p.src(), p.dst(), p.upper_layer(), p.flow_label());
        }
        if let Ok(u) = udp::UdpPacket::new_checked(&bytes[..]) { let _ = u.payload().len(); }
        if let Ok(t) = tcp::TcpPorts::new_checked(&bytes[..]) { let _ = t.dst_port(); }
        if let Ok(i) = icmp::IcmpHeader::new_checked(&bytes[..]) { let _ = i.code(); }
        if let Ok(e) = esp::EspPacket::new_checked(&bytes[..]) { let _ = (e.spi(), e.seq(), e.body().len()); }
        let _ = esp::parse_trailer(&bytes);
    }
}
