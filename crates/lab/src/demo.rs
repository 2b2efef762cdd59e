//! The built-in demonstration and the capture generator.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use espgw_config::Format;
use espgw_core::flow::parse_ip;
use espgw_core::{Direction, Tables};
use espgw_crypto::CryptoProvider;
use espgw_io::pcap::{PcapReader, PcapWriter, LINKTYPE_ETHERNET, LINKTYPE_RAW};
use espgw_wire::esp::EspPacket;
use espgw_wire::proto;

use crate::gen::{self, FlowSpec, L4};
use crate::gen_cmd::GenArgs;
use espgw::{offline, report};

fn parse_l4(s: &str) -> Result<L4, String> {
    match s {
        "udp" => Ok(L4::Udp),
        "tcp" => Ok(L4::Tcp),
        "icmp" => Ok(L4::Icmp),
        o => Err(format!("unknown protocol '{o}' (udp, tcp, icmp)")),
    }
}

/// `espgw-lab gen`: a capture of test traffic.
pub fn gen_capture(a: &GenArgs) -> Result<(), String> {
    if a.src.is_ipv4() != a.dst.is_ipv4() {
        return Err("--src and --dst must be of one family".into());
    }
    let sizes: Vec<usize> = if a.size == "imix" {
        gen::imix_sizes()
    } else {
        vec![a
            .size
            .parse::<usize>()
            .map_err(|_| format!("--size: '{}' is not a number or imix", a.size))?]
    };
    let spec = FlowSpec {
        src: a.src,
        dst: a.dst,
        l4: parse_l4(&a.proto)?,
        sport: a.sport,
        dport: a.dport,
        src_mac: [0x02, 0, 0, 0, 0, 0x01],
        dst_mac: [0x02, 0, 0, 0, 0x01, 0x01],
    };
    let link = if a.raw {
        LINKTYPE_RAW
    } else {
        LINKTYPE_ETHERNET
    };
    let mut w = PcapWriter::create(&a.output, link).map_err(|e| e.to_string())?;
    for i in 0..a.count {
        let f = gen::frame(&spec, sizes[(i as usize) % sizes.len()], i + 1);
        w.write_frame(i * 1000, &f).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())?;
    println!("wrote {} frames to {}", a.count, a.output.display());
    Ok(())
}

fn describe(frame: &[u8]) -> String {
    let Some(ip) = frame.get(14..) else {
        return "?".into();
    };
    let Ok(info) = parse_ip(ip) else {
        return "unparsable".into();
    };
    let k = info.key;
    let addr = |v: u128| -> IpAddr {
        if k.v4 {
            IpAddr::V4((v as u32).into())
        } else {
            IpAddr::V6(v.into())
        }
    };
    let what = match k.proto {
        proto::UDP if k.dport == 4500 || k.sport == 4500 => "esp-in-udp".to_string(),
        proto::UDP => format!("udp {}>{}", k.sport, k.dport),
        proto::TCP => format!("tcp {}>{}", k.sport, k.dport),
        proto::ICMP | proto::ICMPV6 => format!("icmp type {}", k.sport),
        proto::ESP => {
            let esp = ip
                .get(info.upper_off..)
                .and_then(|e| EspPacket::new_checked(e).ok());
            esp.map_or("esp".into(), |e| {
                format!("esp spi 0x{:x} seq {}", e.spi(), e.seq())
            })
        }
        p => format!("proto {p}"),
    };
    format!("{} > {} {}", addr(k.src), addr(k.dst), what)
}

fn read_all(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let mut r = PcapReader::open(path).map_err(|e| e.to_string())?;
    let mut v = Vec::new();
    while let Some((_, rec)) = r.next_record().map_err(|e| e.to_string())? {
        v.push(rec.to_vec());
    }
    Ok(v)
}

/// `espgw-lab demo`.
pub fn run(provider: &dyn CryptoProvider, out: &Path, count: usize) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let gw1 = espgw_config::parse(
        espgw_config::DEFAULT_CONFIG,
        "<built-in default>",
        Some(Format::Native),
    )
    .map_err(|e| e.to_string())?;
    let gw2 = espgw_config::parse(
        espgw_config::DEFAULT_PEER_CONFIG,
        "<built-in peer>",
        Some(Format::Native),
    )
    .map_err(|e| e.to_string())?;
    let t1 = Arc::new(Tables::build(&gw1, provider, None).map_err(|e| e.to_string())?);
    let t2 = Arc::new(Tables::build(&gw2, provider, None).map_err(|e| e.to_string())?);
    let plain = out.join("plaintext.pcap");
    let esp = out.join("esp.pcap");
    let back = out.join("decrypted.pcap");
    let (originals, stray) = write_traffic(&plain, count)?;

    let mut gw1 = offline::node(t1.clone());
    let south = offline::arrival_port(&t1, Direction::Out).map_err(|e| e.to_string())?;
    offline::run_pcap(&mut gw1, south, &plain, &esp, None).map_err(|e| e.to_string())?;
    let mut gw2 = offline::node(t2.clone());
    let north = offline::arrival_port(&t2, Direction::In).map_err(|e| e.to_string())?;
    offline::run_pcap(&mut gw2, north, &esp, &back, None).map_err(|e| e.to_string())?;

    let esp_frames = read_all(&esp)?;
    let back_frames = read_all(&back)?;
    println!("espgw-lab demo: built-in default configuration, AES-128-GCM tunnel 192.0.2.1 -> 192.0.2.2 ({})", provider.name());
    println!(
        "gateway 1 encrypts {} -> {}; gateway 2 decrypts it -> {}\n",
        plain.display(),
        esp.display(),
        back.display()
    );
    let identical = print_table(&originals, &stray, &esp_frames, &back_frames);
    let all_esp = esp_frames.iter().all(|f| {
        f.get(14..)
            .and_then(|ip| parse_ip(ip).ok())
            .is_some_and(|i| i.key.proto == proto::ESP)
    });
    println!(
        "\ngateway 1 (outbound):\n{}",
        report::text(&t1, gw1.counters())
    );
    println!(
        "gateway 2 (inbound):\n{}",
        report::text(&t2, gw2.counters())
    );
    println!(
        "result: {identical} of {} protected frames came back identical; the transport side carried {} frames, {}",
        originals.len(),
        esp_frames.len(),
        if all_esp { "all ESP" } else { "NOT all ESP" }
    );
    if identical != originals.len() || !all_esp {
        return Err("demo failed: see the table above".into());
    }
    Ok(())
}

/// Writes the demonstration's traffic from the south of gateway 1 to `plain`: IPv4 and
/// IPv6, UDP, TCP and ICMP, several sizes, then one packet no policy covers. Returns the
/// protected frames and that stray one.
fn write_traffic(plain: &Path, count: usize) -> Result<(Vec<Vec<u8>>, Vec<u8>), String> {
    let flows: Vec<(FlowSpec, &str)> = [
        ("198.51.100.10", "203.0.113.20", L4::Udp),
        ("198.51.100.11", "203.0.113.21", L4::Tcp),
        ("198.51.100.12", "203.0.113.22", L4::Icmp),
        ("2001:db8:100::10", "2001:db8:113::20", L4::Udp),
        ("2001:db8:100::11", "2001:db8:113::21", L4::Icmp),
    ]
    .iter()
    .map(|(s, d, l4)| {
        (
            FlowSpec {
                src: s.parse().expect("addr"),
                dst: d.parse().expect("addr"),
                l4: *l4,
                sport: 40000,
                dport: 9,
                src_mac: [0x02, 0, 0, 0, 0, 0x01],
                dst_mac: [0x02, 0, 0, 0, 0x01, 0x01],
            },
            "protected",
        )
    })
    .collect();
    let sizes = [64usize, 128, 512, 1024, 1518];
    let mut w = PcapWriter::create(plain, LINKTYPE_ETHERNET).map_err(|e| e.to_string())?;
    let mut originals = Vec::new();
    for i in 0..count {
        let (spec, _) = &flows[i % flows.len()];
        let f = gen::frame(spec, sizes[i % sizes.len()], i as u64 + 1);
        w.write_frame(i as u64 * 1000, &f)
            .map_err(|e| e.to_string())?;
        originals.push(f);
    }
    let stray = FlowSpec {
        src: "198.51.100.10".parse().expect("addr"),
        dst: "192.0.2.99".parse().expect("addr"),
        l4: L4::Udp,
        sport: 40000,
        dport: 9,
        src_mac: [0x02, 0, 0, 0, 0, 0x01],
        dst_mac: [0x02, 0, 0, 0, 0x01, 0x01],
    };
    w.write_frame(count as u64 * 1000, &gen::frame(&stray, 64, 0))
        .map_err(|e| e.to_string())?;
    w.flush().map_err(|e| e.to_string())?;
    drop(w);
    Ok((originals, gen::frame(&stray, 64, 0)))
}

/// Prints each frame in, out and back; returns how many came back identical.
fn print_table(
    originals: &[Vec<u8>],
    stray: &[u8],
    esp_frames: &[Vec<u8>],
    back_frames: &[Vec<u8>],
) -> usize {
    println!(
        "{:>3}  {:<52} {:>5}   {:<50} {:>5}  after gw2",
        "#", "in: plaintext on gw1 south", "bytes", "out: ESP on gw1 north", "bytes"
    );
    let mut identical = 0;
    for (i, orig) in originals.iter().enumerate() {
        let e = esp_frames.get(i);
        let b = back_frames.get(i);
        let same = b.is_some_and(|b| b.get(14..) == orig.get(14..));
        identical += usize::from(same);
        println!(
            "{:>3}  {:<52} {:>5}   {:<50} {:>5}  {}",
            i + 1,
            describe(orig),
            orig.len() + gen::FCS_LEN,
            e.map_or("-".into(), |e| describe(e)),
            e.map_or(0, |e| e.len() + gen::FCS_LEN),
            if same {
                "identical to the original"
            } else {
                "MISMATCH"
            }
        );
    }
    println!(
        "{:>3}  {:<52} {:>5}   {:<50}",
        originals.len() + 1,
        describe(stray),
        64,
        "dropped: no policy covers it"
    );
    identical
}
