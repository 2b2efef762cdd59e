//! The front of the pass: the host stage's triage and the read of the Ethernet and IP
//! headers, once for the common frame (untagged IPv4 without options), through the checked
//! views for every other.

use super::*;

/// What the front of the pass (the host stage, then the header read) made of a frame.
#[derive(Debug, PartialEq)]
pub(super) enum Front {
    /// The host stage took it.
    Host(Triage),
    /// On to the pipeline: the frame's length as received, its IP header as parsed (the
    /// Ethernet header gone) or why it is dropped, and whether its TTL is still to be
    /// decremented.
    Ip {
        frame_len: usize,
        parsed: Result<IpInfo, DropReason>,
        ttl_due: bool,
    },
}

/// The host stage and the header read for one frame. The common frame (untagged IPv4
/// without options, checksum right) is read once, and the host stage decides from what
/// was read ([`host::triage_parsed`]); every other frame, and every one the host stage
/// does not give the pipeline that way, goes the general way ([`front_through_views`]).
/// One read instead of two: about 30 instructions per packet (callgrind, 64 bytes).
#[inline(always)]
pub(super) fn front(
    p: &mut Packet,
    port: u16,
    t: &Tables,
    cache: &NeighbourCache,
    hop: HopLimit,
) -> Front {
    if let Some(info) = read_common_frame(p.data()) {
        if let Some(ttl_due) = host::triage_parsed(&info, port, t, hop) {
            let frame_len = p.len();
            p.pull_front(ethernet::HEADER_LEN);
            return Front::Ip {
                frame_len,
                parsed: Ok(info),
                ttl_due,
            };
        }
    }
    front_through_views(p, port, t, cache, hop)
}

/// [`front`] for every frame: the host stage's own triage, then [`ingress`].
#[inline(always)]
fn front_through_views(
    p: &mut Packet,
    port: u16,
    t: &Tables,
    cache: &NeighbourCache,
    hop: HopLimit,
) -> Front {
    match host::triage_inline(p, port, t, cache, hop) {
        (Triage::Pipeline, ttl_due) => Front::Ip {
            frame_len: p.len(),
            parsed: ingress(p),
            ttl_due,
        },
        (claimed, _) => Front::Host(claimed),
    }
}

/// The common frame, untagged IPv4 without options or IPv6 without extension headers,
/// read at once: the Ethernet view's VLAN handling and the IP views' checks cost about 50
/// instructions more per packet (callgrind, `bench dataplane`, 64 bytes). `None`: any
/// other frame.
#[inline(always)]
fn read_common_frame(frame: &[u8]) -> Option<IpInfo> {
    let (eth, ip) = frame.split_first_chunk::<{ ethernet::HEADER_LEN }>()?;
    let ethertype = [eth[12], eth[13]];
    if ethertype == ETHERTYPE_IPV4.to_be_bytes() {
        parse_ipv4_no_options(ip)
    } else if ethertype == ETHERTYPE_IPV6.to_be_bytes() {
        parse_ipv6_no_extensions(ip)
    } else {
        None
    }
}

/// Strips the Ethernet header (and VLAN tag) and parses the IP header.
#[inline(always)]
pub(super) fn ingress(p: &mut Packet) -> Result<IpInfo, DropReason> {
    if let Some(info) = read_common_frame(p.data()) {
        p.pull_front(ethernet::HEADER_LEN);
        return Ok(info);
    }
    ingress_through_views(p)
}

/// Every frame [`ingress`] does not read at once: VLAN tags, IPv6, options, and the
/// reason a frame is refused.
#[inline(always)]
fn ingress_through_views(p: &mut Packet) -> Result<IpInfo, DropReason> {
    let (hl, et) = {
        let e = EthernetFrame::new_checked(p.data()).map_err(|_| DropReason::Malformed)?;
        (e.header_len(), e.ethertype())
    };
    if et != ETHERTYPE_IPV4 && et != ETHERTYPE_IPV6 {
        return Err(DropReason::NotIp);
    }
    p.pull_front(hl);
    let info = parse_ip(p.data())?;
    if (et == ETHERTYPE_IPV4) != info.key.v4 {
        return Err(DropReason::Malformed);
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_config::{Config, Prefix};

    /// One port, 198.51.100.1/24.
    fn one_port_tables() -> Tables {
        let mut c = Config {
            burst: 32,
            ..Config::default()
        };
        let mut port = espgw_config::implied_port(0);
        port.addresses = vec![
            Prefix {
                addr: "198.51.100.1".parse().unwrap(),
                len: 24,
            },
            Prefix {
                addr: "2001:db8:100::1".parse().unwrap(),
                len: 64,
            },
        ];
        c.ports.push(port);
        Tables::build(&c, espgw_crypto::default_provider().as_ref(), None).unwrap()
    }

    /// `frame` through the front of the pass and through the host stage's triage then
    /// `ingress`: the same answer, and the packet left the same.
    fn front_agrees_with_the_views(
        frame: &[u8],
        port: u16,
        hop: HopLimit,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let (t, cache) = (one_port_tables(), NeighbourCache::default());
        let (mut fast, mut views) = (Packet::new(), Packet::new());
        fast.load(frame).unwrap();
        views.load(frame).unwrap();
        let got = front(&mut fast, port, &t, &cache, hop);
        proptest::prop_assert_eq!(
            &got,
            &front_through_views(&mut views, port, &t, &cache, hop)
        );
        proptest::prop_assert_eq!(fast.data(), views.data());
        Ok(())
    }

    proptest::proptest! {
        /// The front of the pass answers as the host stage's triage and then `ingress`
        /// do, and leaves the packet as they do: IPv4 frames to the gateway or through
        /// it (ESP, AH, UDP, ICMP; any TTL; fragments; checksum right or not; options;
        /// multicast and broadcast), other ethertypes, truncated frames, on a port that
        /// exists and one that does not, as a router and as a bump in the wire.
        #[test]
        fn the_front_answers_as_triage_then_ingress_do(
            ethertype in proptest::sample::select(vec![0x0800u16, 0x0800, 0x0800, 0x86dd, 0x8100]),
            version_ihl in proptest::sample::select(vec![0x45u8, 0x45, 0x45, 0x46, 0x55]),
            proto in proptest::sample::select(vec![50u8, 51, 17, 1]),
            ttl in proptest::sample::select(vec![0u8, 1, 2, 64]),
            flags_frag in proptest::sample::select(vec![0u16, 0x4000, 0x2000, 0x0001]),
            dst in proptest::sample::select(vec![
                [198u8, 51, 100, 1], [203, 0, 113, 9], [224, 0, 0, 5], [255, 255, 255, 255],
            ]),
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..24),
            fix_checksum in proptest::sample::select(vec![true, true, true, false]),
            cut in proptest::option::weighted(0.1, 0usize..60),
            port in proptest::sample::select(vec![0u16, 0, 0, 1]),
            keep_ttl: bool,
        ) {
            let hop = if keep_ttl { HopLimit::Keep } else { HopLimit::Decrement };
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            f.extend_from_slice(&ethertype.to_be_bytes());
            let ip_at = f.len();
            let hl = usize::from(version_ihl & 0x0f) * 4;
            let total = (hl + body.len()) as u16;
            f.extend_from_slice(&[version_ihl, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 1]);
            f.extend_from_slice(&flags_frag.to_be_bytes());
            f.extend_from_slice(&[ttl, proto, 0, 0, 192, 0, 2, 7]);
            f.extend_from_slice(&dst);
            f.resize(ip_at + hl, 0);
            if fix_checksum {
                let c = espgw_wire::checksum::checksum(&f[ip_at..]);
                f[ip_at + 10..ip_at + 12].copy_from_slice(&c.to_be_bytes());
            }
            f.extend_from_slice(&body);
            if let Some(cut) = cut {
                f.truncate(cut);
            }
            front_agrees_with_the_views(&f, port, hop)?;
        }
    }

    proptest::proptest! {
        /// The same for IPv6 frames: to the gateway's address or through it, multicast
        /// (all nodes, a solicited-node address), every next header the general path
        /// tells apart (ESP, AH, UDP, TCP, ICMPv6, fragment and the other extension
        /// headers, none), every hop limit, a payload length short, exact or beyond the
        /// frame, truncated frames, on a port that exists and one that does not.
        #[test]
        fn the_front_answers_as_triage_then_ingress_do_for_ipv6(
            version in proptest::sample::select(vec![0x60u8, 0x60, 0x60, 0x40]),
            next_header in proptest::sample::select(vec![50u8, 51, 17, 6, 58, 44, 0, 43, 60, 59]),
            hop_limit in proptest::sample::select(vec![0u8, 1, 2, 64, 255]),
            dst in proptest::sample::select(vec![
                0x2001_0db8_0100_0000_0000_0000_0000_0001u128,
                0x2001_0db8_0113_0000_0000_0000_0000_0020,
                0xff02_0000_0000_0000_0000_0000_0000_0001,
                0xff02_0000_0000_0000_0000_0001_ff00_0001,
            ]),
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..32),
            length_skew in -2i32..3,
            cut in proptest::option::weighted(0.1, 0usize..80),
            port in proptest::sample::select(vec![0u16, 0, 0, 1]),
            keep_hop_limit: bool,
        ) {
            let hop = if keep_hop_limit { HopLimit::Keep } else { HopLimit::Decrement };
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
            let plen = (body.len() as i32 + length_skew).max(0) as u16;
            f.extend_from_slice(&[version, 0, 0, 0]);
            f.extend_from_slice(&plen.to_be_bytes());
            f.extend_from_slice(&[next_header, hop_limit]);
            f.extend_from_slice(&0x2001_0db8_0100_0000_0000_0000_0000_0010u128.to_be_bytes());
            f.extend_from_slice(&dst.to_be_bytes());
            f.extend_from_slice(&body);
            if let Some(cut) = cut {
                f.truncate(cut);
            }
            front_agrees_with_the_views(&f, port, hop)?;
        }

        /// `ingress` answers as the views alone do, and leaves the packet where they
        /// leave it: IPv4 (sometimes with options), IPv6 or other bytes behind an
        /// untagged, VLAN-tagged or other Ethernet header, perhaps with one byte changed.
        #[test]
        fn ingress_answers_as_the_views_do(
            ethertype in proptest::sample::select(vec![0x0800u16, 0x86dd, 0x8100, 0x0806]),
            ihl in 5u8..7,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            poke: Option<(proptest::sample::Index, u8)>,
        ) {
            let mut frame = vec![0u8; 12];
            frame.extend_from_slice(&ethertype.to_be_bytes());
            if ethertype == 0x8100 {
                frame.extend_from_slice(&[0, 7, 0x08, 0x00]);
            }
            let hl = usize::from(ihl) * 4;
            let ip_at = frame.len();
            let total = (hl + body.len()) as u16;
            frame.extend_from_slice(&[0x40 | ihl, 0]);
            frame.extend_from_slice(&total.to_be_bytes());
            frame.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2]);
            frame.resize(ip_at + hl, 0);
            let c = espgw_wire::checksum::checksum(&frame[ip_at..]);
            frame[ip_at + 10..ip_at + 12].copy_from_slice(&c.to_be_bytes());
            frame.extend_from_slice(&body);
            if let Some((at, v)) = poke {
                let at = at.index(frame.len());
                frame[at] = v;
            }
            let (mut fast, mut views) = (Packet::new(), Packet::new());
            fast.load(&frame).unwrap();
            views.load(&frame).unwrap();
            let got = ingress(&mut fast);
            proptest::prop_assert_eq!(got, ingress_through_views(&mut views));
            if got.is_ok() {
                proptest::prop_assert_eq!(fast.data(), views.data());
            }
        }
    }
}
