//! `espgw-lab bench spd`: SPD classification over rule sets of growing size.

use super::*;

/// xorshift64*: deterministic rules and keys without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

pub(super) fn spd(quick: bool) -> Result<(), String> {
    println!("espgw-lab bench spd: IPv4 rules on /16, /24 and /32 destinations with and without /24 sources,");
    println!("a third with port ranges; lookups of keys that hit (half) and miss (half)");
    println!(
        "{:>7} {:>7} {:>22} {:>22}",
        "rules", "groups", "tuple-space ns/lookup", "linear scan ns/lookup"
    );
    for &n in &[1usize, 100, 1000, 10_000] {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
        let base = 0xc612_0000u32; // 198.18.0.0/15
        let rules: Vec<SpdRule> = (0..n)
            .map(|i| {
                let r = rng.next();
                let dst_len = [16u8, 24, 32][(r % 3) as usize];
                let src_len = if r & 8 == 0 { 0 } else { 24 };
                let dst = u128::from(base | ((r >> 8) as u32 & 0x1ffff));
                let src = u128::from(base | ((r >> 32) as u32 & 0x1ffff));
                let ports = if i % 3 == 0 {
                    let lo = (r >> 40) as u16 & 0x3fff;
                    Range::new(lo, lo + 100)
                } else {
                    ANY_PORT
                };
                SpdRule {
                    v4: true,
                    src,
                    src_len,
                    dst,
                    dst_len,
                    proto: ANY_PROTO,
                    sport: ANY_PORT,
                    dport: ports,
                    priority: 0,
                    action: if i % 2 == 0 {
                        SpdAction::Protect(i as u32)
                    } else {
                        SpdAction::Bypass
                    },
                }
            })
            .collect();
        let keys: Vec<FlowKey> = (0..4096)
            .map(|i| {
                let r = rng.next();
                let (src, dst) = if i % 2 == 0 {
                    let ru = &rules[(r as usize) % rules.len()];
                    (ru.src | (r >> 50) as u128 & 0xff, ru.dst)
                } else {
                    (
                        u128::from(base | (r as u32 & 0x1ffff)),
                        u128::from(base | ((r >> 20) as u32 & 0x1ffff)),
                    )
                };
                FlowKey {
                    v4: true,
                    src,
                    dst,
                    proto: 17,
                    sport: 1000,
                    dport: (r >> 40) as u16 & 0x3fff,
                }
            })
            .collect();
        let spd = Spd::new(rules);
        let groups = count_groups(&spd);
        let iters = if quick { 50_000 } else { 2_000_000 };
        let t = Instant::now();
        for i in 0..iters {
            black_box(spd.lookup(black_box(&keys[i % keys.len()])));
        }
        let fast = t.elapsed().as_nanos() as f64 / iters as f64;
        let lin_iters = (iters / n.max(1)).clamp(100, iters);
        let t = Instant::now();
        for i in 0..lin_iters {
            black_box(spd.lookup_linear(black_box(&keys[i % keys.len()])));
        }
        let lin = t.elapsed().as_nanos() as f64 / lin_iters as f64;
        // Both must agree; a benchmark of a wrong answer is worthless.
        for k in keys.iter().take(256) {
            if spd.lookup_index(k) != spd.lookup_linear(k) {
                return Err("tuple-space and linear lookups disagree".into());
            }
        }
        println!("{:>7} {:>7} {:>22.1} {:>22.1}", n, groups, fast, lin);
    }
    Ok(())
}

pub(super) fn count_groups(spd: &Spd) -> usize {
    let mut pairs: Vec<(u8, u8)> = spd.rules().iter().map(|r| (r.src_len, r.dst_len)).collect();
    pairs.sort();
    pairs.dedup();
    pairs.len()
}
