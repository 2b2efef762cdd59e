//! ARP (RFC 826) for the gateway's own IPv4 addresses: requests answered in place,
//! senders learned (only those asking for the gateway; others only refresh what is known).

use super::*;

pub(super) fn receive(
    p: &mut Packet,
    hl: usize,
    port: u16,
    info: &PortInfo,
    cache: &NeighbourCache,
) -> Triage {
    let d = p.data_mut();
    // Ethernet / IPv4 ARP only (the view refuses anything else).
    let Some(mut a) = d
        .get_mut(hl..)
        .and_then(|b| wire_arp::ArpPacket::new_checked(b).ok())
    else {
        return Triage::Drop(DropReason::Malformed);
    };
    let (sha, spa, tpa) = (a.sender_mac(), a.sender_ip(), a.target_ip());
    let sender = IpAddr::from(spa);
    let target = IpAddr::from(tpa);
    let for_us = info.addresses.iter().any(|p| p.addr == target);
    if spa != [0; 4] && on_link(info, sender) && sha[0] & 1 == 0 {
        // ARP for the gateway teaches a new neighbour; other ARP on the link only
        // refreshes one it knows (a spoofing sender cannot fill the table).
        let spa_bits = u128::from(u32::from_be_bytes(spa));
        if for_us {
            cache.learn(port, true, spa_bits, sha);
        } else {
            cache.refresh(port, true, spa_bits, sha);
        }
    }
    if a.op() != wire_arp::OP_REQUEST || !for_us {
        return Triage::Consumed;
    }
    // Request for one of our addresses: turn it into the reply.
    a.set_op(wire_arp::OP_REPLY);
    a.set_target(sha, spa);
    a.set_sender(info.mac, tpa);
    // To the requester's hardware address (RFC 826), from ours.
    if let Ok(mut e) = EthernetFrame::new_checked(d) {
        e.set_dst(sha);
        e.set_src(info.mac);
    }
    Triage::Reply
}
