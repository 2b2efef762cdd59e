//! An interface's offload features by their kernel names, what `ethtool -k` shows and
//! `ethtool -K` changes, through the ethtool ioctl's feature commands: ETHTOOL_GSSET_INFO
//! (how many features), ETHTOOL_GSTRINGS (their names), ETHTOOL_GFEATURES (their state),
//! ETHTOOL_SFEATURES (a change). A feature is a bit whose position is its name's index,
//! so names are looked up on every call rather than built in.
//!
//! The gateway uses it for one thing: its AF_XDP ports keep VLAN tags in received frames
//! ([`keep_vlan_tags_in_frames`]).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

use crate::netns::{ifreq_for, ioctl_socket};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x0000_001b;
const ETHTOOL_GSSET_INFO: u32 = 0x0000_0037;
const ETHTOOL_GFEATURES: u32 = 0x0000_003a;
const ETHTOOL_SFEATURES: u32 = 0x0000_003b;
/// The string set of feature names (`enum ethtool_stringset`).
const ETH_SS_FEATURES: u32 = 4;
/// Bytes per name in ETHTOOL_GSTRINGS' answer.
const ETH_GSTRING_LEN: usize = 32;
/// More feature names than any kernel has (about 70 today): a bound on what is read.
const MAX_FEATURES: usize = 1024;

/// The kernel's names of the receive VLAN offloads: the NIC taking an 802.1Q tag
/// (`rx-vlan-offload` in `ethtool -k`'s words) or an 802.1ad tag out of a received frame
/// into its descriptor.
pub const RX_VLAN_OFFLOADS: [&str; 2] = ["rx-vlan-hw-parse", "rx-vlan-stag-hw-parse"];

/// One feature's state, as ETHTOOL_GFEATURES reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// On now.
    pub active: bool,
    /// The driver lets it be changed (`[fixed]` in `ethtool -k` when not).
    pub changeable: bool,
}

/// What [`turn_off`] did with one feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnedOff {
    /// It was off.
    AlreadyOff,
    /// It was on and is off now.
    Now,
    /// It is on and stays on: the driver does not let it change, or kept it.
    StaysOn,
    /// This kernel has no feature of that name.
    Unknown,
}

/// Runs SIOCETHTOOL on `ifname` with `cmd` (an ethtool command struct, its command word
/// first) and returns the ioctl's non-negative result.
///
/// # Safety
/// `cmd` must be at least as long as the struct the command reads and writes, as its own
/// size fields give it: the kernel writes that many bytes from its start.
unsafe fn ethtool_ioctl(ifname: &str, cmd: &mut [u8]) -> io::Result<i32> {
    let mut req = ifreq_for(ifname)?;
    req.ifr_ifru.ifru_data = cmd.as_mut_ptr().cast();
    let s = ioctl_socket()?;
    // SAFETY: SIOCETHTOOL reads the name in `req` and the command through `ifru_data`,
    // which points to `cmd`; the caller sized `cmd` for what the command writes. Both live
    // across the call.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), SIOCETHTOOL, &mut req) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {ifname}: {e}")));
    }
    Ok(r)
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

/// The names of the interface's features, in bit order (an empty name: an undefined bit).
fn feature_names(ifname: &str) -> io::Result<Vec<String>> {
    // struct ethtool_sset_info: cmd, reserved, a 64-bit mask of sets, then one count per
    // set in the mask.
    let mut info = [0u8; 24];
    put_u32(&mut info, 0, ETHTOOL_GSSET_INFO);
    info[8..16].copy_from_slice(&(1u64 << ETH_SS_FEATURES).to_ne_bytes());
    // SAFETY: with one set asked for the kernel writes the 16-byte header and one count.
    unsafe { ethtool_ioctl(ifname, &mut info)? };
    let mut mask = [0u8; 8];
    mask.copy_from_slice(&info[8..16]);
    if u64::from_ne_bytes(mask) & (1 << ETH_SS_FEATURES) == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("interface {ifname}: no feature names"),
        ));
    }
    let n = get_u32(&info, 16) as usize;
    if n > MAX_FEATURES {
        // ETHTOOL_GSTRINGS writes every name the set has, whatever length it is given.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("interface {ifname}: {n} feature names"),
        ));
    }
    // struct ethtool_gstrings: cmd, string_set, len, then `len` names of 32 bytes.
    let mut strings = vec![0u8; 12 + n * ETH_GSTRING_LEN];
    put_u32(&mut strings, 0, ETHTOOL_GSTRINGS);
    put_u32(&mut strings, 4, ETH_SS_FEATURES);
    put_u32(&mut strings, 8, n as u32);
    // SAFETY: the kernel writes as many names as the set has, `n` (its own count, read
    // just before), after the 12-byte header: the buffer's size.
    unsafe { ethtool_ioctl(ifname, &mut strings)? };
    Ok(strings[12..]
        .chunks_exact(ETH_GSTRING_LEN)
        .map(|name| {
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        })
        .collect())
}

/// The state of every feature bit, `bits` of them.
fn feature_states(ifname: &str, bits: usize) -> io::Result<Vec<Feature>> {
    let blocks = bits.div_ceil(32);
    // struct ethtool_gfeatures: cmd, size, then `size` blocks of four masks.
    let mut g = vec![0u8; 8 + blocks * 16];
    put_u32(&mut g, 0, ETHTOOL_GFEATURES);
    put_u32(&mut g, 4, blocks as u32);
    // SAFETY: the kernel writes at most `size` blocks (fewer when it has fewer words; it
    // refuses a size too small) after the 8-byte header: the buffer's size.
    unsafe { ethtool_ioctl(ifname, &mut g)? };
    Ok((0..bits)
        .map(|i| {
            let (block, bit) = (8 + (i / 32) * 16, 1u32 << (i % 32));
            Feature {
                active: get_u32(&g, block + 8) & bit != 0,
                changeable: get_u32(&g, block) & bit != 0,
            }
        })
        .collect())
}

/// The state of the named feature; `None` if this kernel has no feature of that name.
pub fn feature(ifname: &str, name: &str) -> io::Result<Option<Feature>> {
    let names = feature_names(ifname)?;
    let states = feature_states(ifname, names.len())?;
    Ok(names.iter().position(|n| n == name).map(|i| states[i]))
}

/// Turns the named features off where they are on and the driver lets them change;
/// says, for each name in order, what came of it. Needs `CAP_NET_ADMIN` when there is
/// something to change.
pub fn turn_off(ifname: &str, wanted: &[&str]) -> io::Result<Vec<TurnedOff>> {
    let names = feature_names(ifname)?;
    let states = feature_states(ifname, names.len())?;
    let index: Vec<Option<usize>> = wanted
        .iter()
        .map(|w| names.iter().position(|n| n == w))
        .collect();
    let to_change: Vec<usize> = index
        .iter()
        .flatten()
        .copied()
        .filter(|&i| states[i].active && states[i].changeable)
        .collect();
    if !to_change.is_empty() {
        let blocks = names.len().div_ceil(32);
        // struct ethtool_sfeatures: cmd, size, then `size` blocks of (valid, requested):
        // the bits to change, and their new values (0: off).
        let mut s = vec![0u8; 8 + blocks * 8];
        put_u32(&mut s, 0, ETHTOOL_SFEATURES);
        put_u32(&mut s, 4, blocks as u32);
        for &i in &to_change {
            let at = 8 + (i / 32) * 8;
            let valid = get_u32(&s, at) | 1 << (i % 32);
            put_u32(&mut s, at, valid);
        }
        // SAFETY: ETHTOOL_SFEATURES only reads the header and `size` blocks, the buffer.
        unsafe { ethtool_ioctl(ifname, &mut s)? };
    }
    // What the driver made of it, read back (it may keep a feature another one needs).
    let after = feature_states(ifname, names.len())?;
    Ok(index
        .iter()
        .map(|i| match i {
            None => TurnedOff::Unknown,
            Some(i) if !states[*i].active => TurnedOff::AlreadyOff,
            Some(i) if after[*i].active => TurnedOff::StaysOn,
            Some(_) => TurnedOff::Now,
        })
        .collect())
}

/// Turns the interface's receive VLAN offloads ([`RX_VLAN_OFFLOADS`]) off, so that a tag
/// stays in the received frame where an XDP program reads it: with them on, a NIC takes
/// the tag out into its descriptor and a frame of another VLAN reaches the program looking
/// untagged (the kernel puts the tag back for sockets and VLAN sub-interfaces, not for
/// XDP). Says, per offload, what came of it.
pub fn keep_vlan_tags_in_frames(ifname: &str) -> io::Result<[(&'static str, TurnedOff); 2]> {
    let done = turn_off(ifname, &RX_VLAN_OFFLOADS)?;
    Ok([
        (RX_VLAN_OFFLOADS[0], done[0]),
        (RX_VLAN_OFFLOADS[1], done[1]),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_features_named_and_no_vlan_offload_to_turn_off() {
        let names = feature_names("lo").unwrap();
        assert!(names.iter().any(|n| n == "rx-checksum"), "{names:?}");
        // Loopback computes no checksums: `ethtool -k lo` shows rx-checksumming on, fixed.
        let rx_checksum = feature("lo", "rx-checksum").unwrap().unwrap();
        assert!(rx_checksum.active && !rx_checksum.changeable);
        assert_eq!(feature("lo", "no-such-feature").unwrap(), None);
        let done = keep_vlan_tags_in_frames("lo").unwrap();
        assert!(done.iter().all(|(_, d)| *d != TurnedOff::Now), "{done:?}");
        assert_eq!(
            turn_off("lo", &["no-such-feature"]).unwrap(),
            [TurnedOff::Unknown]
        );
        assert!(feature_names("espgw-none0").is_err());
    }
}
