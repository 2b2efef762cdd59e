//! The built-in configurations with a per-worker SA set for every protect policy
//! (`testbed up --per-worker-sas`): each SA gets `workers - 1` siblings, and each policy
//! naming it names the whole set instead (`per_worker_sas`), so that gateway 1's worker w
//! seals with SA w and gateway 2 checks each SA's numbers in its own replay window.
//!
//! Why the test bed has it: with one SA spread over workers by flow hash, gateway 1's
//! workers interleave the SA's sequence numbers on the wire, and gateway 2's one window sees
//! them out of order; on the 16-core host every four-worker search dropped replays and
//! stopped at trials losing 0.003-0.2 % (docs/performance.md, 2026-11-28). With a set, the
//! interleaving is between SAs, each in order.
//!
//! The transformation works on the native format's text line by line, for the test bed's
//! own configurations (one `key = ...` line per SA, an `sa = ...` line per policy); a block
//! it cannot read is an error, not a guess.

/// The SPI of sibling `k` of an SA: the original's with `k` in its third byte (the
/// in-memory benchmark's sets use this too), so siblings of different SAs cannot collide.
pub fn sibling_spi(spi: u32, k: usize) -> u32 {
    spi | ((k as u32) << 16)
}

/// The name of sibling `k` (sibling 0 is the SA itself).
fn sibling_name(name: &str, k: usize) -> String {
    if k == 0 {
        name.to_string()
    } else {
        format!("{name}-w{k}")
    }
}

/// `text` (the native format) with a set of `workers` SAs in place of each SA that a
/// protect policy names; unchanged with one worker.
pub fn per_worker_config(text: &str, workers: usize) -> Result<String, String> {
    if workers <= 1 {
        return Ok(text.to_string());
    }
    if workers > 255 {
        return Err(format!("{workers} workers: at most 255 per-worker SAs"));
    }
    let mut out = String::new();
    for block in blocks(text) {
        match block.first().map(|l| l.trim()) {
            Some("[[sa]]") => {
                for k in 0..workers {
                    out.push_str(&sibling(&block, k)?);
                }
            }
            Some("[[policy]]") => out.push_str(&policy_with_set(&block, workers)),
            _ => block.iter().for_each(|l| {
                out.push_str(l);
                out.push('\n');
            }),
        }
    }
    Ok(out)
}

/// The text's lines in blocks: what comes before the first table, then each `[[...]]` table
/// with the lines up to the next.
fn blocks(text: &str) -> Vec<Vec<&str>> {
    let mut blocks: Vec<Vec<&str>> = vec![Vec::new()];
    for line in text.lines() {
        if line.trim_start().starts_with("[[") {
            blocks.push(Vec::new());
        }
        if let Some(b) = blocks.last_mut() {
            b.push(line);
        }
    }
    blocks
}

/// The value of `key = value` on `line`, its comment and quotes removed.
fn value_of<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let (k, v) = line.split_once('=')?;
    if k.trim() != key {
        return None;
    }
    let v = v.split('#').next()?.trim();
    Some(v.trim_matches('"'))
}

/// Sibling `k` of the SA in `block`: its name, SPI and key changed, each key byte XORed with
/// `k` (siblings never share a key: under one key their IVs would repeat).
fn sibling(block: &[&str], k: usize) -> Result<String, String> {
    let find = |key: &str| block.iter().find_map(|l| value_of(l, key));
    let name = find("name").ok_or("an [[sa]] without a name")?;
    let mut out = String::new();
    for line in block {
        let changed = if value_of(line, "name").is_some() {
            format!("name = \"{}\"", sibling_name(name, k))
        } else if let Some(spi) = value_of(line, "spi") {
            let spi = parse_spi(spi).ok_or_else(|| format!("SA {name}: spi '{spi}'"))?;
            format!("spi = 0x{:08x}", sibling_spi(spi, k))
        } else if let Some(key) = value_of(line, "key") {
            format!(
                "key = \"0x{}\"",
                xor_hex(key, k).ok_or_else(|| format!("SA {name}: its key is not hex"))?
            )
        } else {
            line.to_string()
        };
        out.push_str(&changed);
        out.push('\n');
    }
    Ok(out)
}

fn parse_spi(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `0x...` hex with every byte XORed with `k`, as hex without the prefix.
fn xor_hex(key: &str, k: usize) -> Option<String> {
    let hex = key.strip_prefix("0x")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            let b = u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()?;
            Some(format!("{:02x}", b ^ k as u8))
        })
        .collect()
}

/// The policy in `block`, its `sa = "X"` replaced by the set of X's siblings when it
/// protects; other policies as they are.
fn policy_with_set(block: &[&str], workers: usize) -> String {
    let protects = block
        .iter()
        .any(|l| value_of(l, "action") == Some("protect"));
    let mut out = String::new();
    for line in block {
        match value_of(line, "sa").filter(|_| protects) {
            Some(name) => {
                let set: Vec<String> = (0..workers)
                    .map(|k| format!("\"{}\"", sibling_name(name, k)))
                    .collect();
                out.push_str(&format!("per_worker_sas = [{}]", set.join(", ")));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::parse_native as parse;
    use espgw_config::{DEFAULT_CONFIG, DEFAULT_PEER_CONFIG};

    /// Both built-in configurations with a set of three: they parse; every SA has two
    /// siblings with their own SPI and key; every protect policy names the set in order;
    /// the peer's siblings match gateway 1's (same SPI, same key) so that they interoperate.
    #[test]
    fn the_built_in_configurations_get_a_set_per_policy() {
        let (one, peer_one) = (parse(DEFAULT_CONFIG), parse(DEFAULT_PEER_CONFIG));
        let gw1 = parse(&per_worker_config(DEFAULT_CONFIG, 3).unwrap());
        let gw2 = parse(&per_worker_config(DEFAULT_PEER_CONFIG, 3).unwrap());
        assert_eq!(gw1.sas.len(), 3 * one.sas.len());
        assert_eq!(gw2.sas.len(), 3 * peer_one.sas.len());
        let mut keys = std::collections::HashSet::new();
        for sa in &gw1.sas {
            assert!(keys.insert(sa.enc_key.to_vec()), "a key repeats");
            let twin = gw2
                .sas
                .iter()
                .find(|s| s.spi == sa.spi)
                .expect("the peer's twin");
            assert_eq!(twin.enc_key.to_vec(), sa.enc_key.to_vec());
            assert_ne!(twin.direction, sa.direction);
        }
        for (c, base) in [(&gw1, &one), (&gw2, &peer_one)] {
            assert_eq!(c.policies.len(), base.policies.len());
            for (p, b) in c.policies.iter().zip(&base.policies) {
                match b.action {
                    espgw_config::Action::Protect(spi) => assert_eq!(
                        p.per_worker_sas,
                        vec![spi, spi | 1 << 16, spi | 2 << 16],
                        "{p:?}"
                    ),
                    _ => assert!(p.per_worker_sas.is_empty()),
                }
            }
        }
        assert_eq!(
            per_worker_config(DEFAULT_CONFIG, 1).unwrap(),
            DEFAULT_CONFIG
        );
    }

    /// What it cannot read is an error naming the SA, never a silent guess.
    #[test]
    fn an_sa_it_cannot_read_is_an_error() {
        let text = "[[sa]]\nname = \"a\"\nspi = 0x1001\nkey = \"0xabc\"\n";
        assert_eq!(
            per_worker_config(text, 2).unwrap_err(),
            "SA a: its key is not hex"
        );
        let text = "[[sa]]\nname = \"a\"\nspi = zz\n";
        assert_eq!(per_worker_config(text, 2).unwrap_err(), "SA a: spi 'zz'");
        assert!(per_worker_config("[[sa]]\nspi = 1\n", 2).is_err());
        assert!(per_worker_config(DEFAULT_CONFIG, 256).is_err());
    }
}
