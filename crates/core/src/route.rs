//! Longest-prefix-match routing to an output port, and next-hop MAC addresses.
//!
//! One hash table per prefix length present, probed from the longest: few lengths are
//! in use in a gateway's table, so a lookup is a few probes. (A DIR-24-8 table can replace
//! it behind the same API if tables grow large.)

use rustc_hash::FxHashMap;

use espgw_config::mask;
use espgw_wire::ethernet::MacAddr;

#[derive(Default)]
struct Lpm {
    width: u8,
    /// (prefix length, mask, table), longest first.
    levels: Vec<(u8, u128, FxHashMap<u128, u16>)>,
}

impl Lpm {
    fn new(width: u8) -> Self {
        Lpm {
            width,
            levels: Vec::new(),
        }
    }

    fn insert(&mut self, addr: u128, len: u8, port: u16) {
        let m = mask(self.width, len);
        let lvl = match self.levels.iter().position(|(l, _, _)| *l == len) {
            Some(i) => i,
            None => {
                self.levels.push((len, m, FxHashMap::default()));
                self.levels.sort_by_key(|l| std::cmp::Reverse(l.0));
                self.levels
                    .iter()
                    .position(|(l, _, _)| *l == len)
                    .expect("inserted")
            }
        };
        // The first route for a prefix wins, as in the configuration's order.
        self.levels[lvl].2.entry(addr & m).or_insert(port);
    }

    fn lookup(&self, addr: u128) -> Option<u16> {
        self.levels
            .iter()
            .find_map(|(_, m, t)| t.get(&(addr & m)).copied())
    }
}

/// Routes of both families.
pub struct RouteTable {
    v4: Lpm,
    v6: Lpm,
    len: usize,
}

impl Default for RouteTable {
    fn default() -> Self {
        Self::new()
    }
}

impl RouteTable {
    pub fn new() -> Self {
        RouteTable {
            v4: Lpm::new(32),
            v6: Lpm::new(128),
            len: 0,
        }
    }

    pub fn insert(&mut self, v4: bool, addr: u128, len: u8, port: u16) {
        if v4 {
            self.v4.insert(addr, len, port)
        } else {
            self.v6.insert(addr, len, port)
        }
        self.len += 1;
    }

    /// The output port for a destination.
    pub fn lookup(&self, v4: bool, addr: u128) -> Option<u16> {
        if v4 {
            self.v4.lookup(addr)
        } else {
            self.v6.lookup(addr)
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Next-hop MAC addresses: per destination address if known, else per port.
pub struct Neighbours {
    by_ip: FxHashMap<(bool, u128), MacAddr>,
    by_port: Vec<MacAddr>,
}

impl Neighbours {
    pub fn new(by_port: Vec<MacAddr>) -> Self {
        Neighbours {
            by_ip: FxHashMap::default(),
            by_port,
        }
    }
    pub fn insert_ip(&mut self, v4: bool, addr: u128, mac: MacAddr) {
        self.by_ip.insert((v4, addr), mac);
    }
    pub fn set_port(&mut self, port: usize, mac: MacAddr) {
        if let Some(m) = self.by_port.get_mut(port) {
            *m = mac;
        }
    }
    pub fn lookup(&self, port: u16, v4: bool, addr: u128) -> Option<MacAddr> {
        if !self.by_ip.is_empty() {
            if let Some(m) = self.by_ip.get(&(v4, addr)) {
                return Some(*m);
            }
        }
        self.by_port.get(usize::from(port)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let mut t = RouteTable::new();
        t.insert(true, 0xc000_0200, 24, 1); // 192.0.2.0/24
        t.insert(true, 0xc000_0280, 25, 2); // 192.0.2.128/25
        t.insert(true, 0, 0, 3);
        assert_eq!(t.lookup(true, 0xc000_0201), Some(1));
        assert_eq!(t.lookup(true, 0xc000_02ff), Some(2));
        assert_eq!(t.lookup(true, 0x0a00_0001), Some(3));
        let v6: u128 = "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        assert_eq!(t.lookup(false, v6), None);
        t.insert(false, v6, 32, 0);
        assert_eq!(t.lookup(false, v6 + 5), Some(0));
        assert_eq!(t.lookup(false, !v6), None);
    }

    #[test]
    fn neighbours() {
        let mut n = Neighbours::new(vec![[2, 0, 0, 0, 0, 1]]);
        n.insert_ip(true, 7, [2, 0, 0, 0, 0, 7]);
        assert_eq!(n.lookup(0, true, 7), Some([2, 0, 0, 0, 0, 7]));
        assert_eq!(n.lookup(0, true, 8), Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(n.lookup(5, true, 8), None);
    }
}
