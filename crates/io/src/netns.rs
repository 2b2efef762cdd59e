//! Network namespaces and interface facts for a thread that works in another
//! namespace than the process (the RFC 2544 tester opens one port in each of the test
//! bed's host namespaces).
//!
//! `setns(2)` with `CLONE_NEWNET` moves only the calling thread; sockets opened after
//! it belong to the new namespace for their whole life. sysfs keeps showing the
//! namespace it was mounted in, so interface facts come from ioctls on a socket of the
//! thread's own namespace instead.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Moves the calling thread into the named namespace (`ip netns` name, from
/// /run/netns).
pub fn enter(name: &str) -> io::Result<()> {
    if name.is_empty() || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{name}' is not a namespace name"),
        ));
    }
    let f = File::open(format!("/run/netns/{name}"))
        .map_err(|e| io::Error::new(e.kind(), format!("namespace {name}: {e}")))?;
    // SAFETY: setns(2) on a descriptor we own for the call's duration; it changes only
    // this thread's network namespace and touches no memory of ours.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns {name}: {e}")));
    }
    Ok(())
}

pub(crate) fn ifreq_for(ifname: &str) -> io::Result<libc::ifreq> {
    let c = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ || bytes.len() < 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{ifname}' is not an interface name"),
        ));
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

pub(crate) fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) returns a new descriptor or -1; a valid one is owned here.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs an interface ioctl (`SIOCGIF*`) on `ifname` and returns the filled request.
fn interface_ioctl(ifname: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let mut req = ifreq_for(ifname)?;
    let s = ioctl_socket()?;
    // SAFETY: the SIOCGIF* requests used here read the name and write their answer
    // inside `req`, a valid ifreq that lives across the call.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), request, &mut req) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {ifname}: {e}")));
    }
    Ok(req)
}

/// The interface's index in the calling thread's namespace.
pub fn if_index(ifname: &str) -> io::Result<i32> {
    let req = interface_ioctl(ifname, libc::SIOCGIFINDEX)?;
    // SAFETY: after SIOCGIFINDEX succeeded the union holds the index.
    Ok(unsafe { req.ifr_ifru.ifru_ifindex })
}

/// The interface's MAC address in the calling thread's namespace.
pub fn mac_address(ifname: &str) -> io::Result<[u8; 6]> {
    let req = interface_ioctl(ifname, libc::SIOCGIFHWADDR)?;
    // SAFETY: after SIOCGIFHWADDR succeeded the union holds a sockaddr.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(mac)
}

/// `struct ethtool_drvinfo` of <linux/ethtool.h>, as far as the driver's name needs.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// The name of the interface's driver ("veth", "ice", "mlx5_core"), as `ethtool -i`
/// prints it.
pub fn driver(ifname: &str) -> io::Result<String> {
    // SAFETY: the struct is plain integers and byte arrays; all zeroes is a valid value.
    let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    let mut req = ifreq_for(ifname)?;
    req.ifr_ifru.ifru_data = (&mut info as *mut EthtoolDrvinfo).cast();
    let s = ioctl_socket()?;
    // SAFETY: SIOCETHTOOL with ETHTOOL_GDRVINFO reads the name in `req` and writes at
    // most one `struct ethtool_drvinfo` through `ifru_data`, which points to `info`; both
    // live across the call.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), SIOCETHTOOL, &mut req) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {ifname}: {e}")));
    }
    let len = info
        .driver
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(info.driver.len());
    Ok(String::from_utf8_lossy(&info.driver[..len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_facts() {
        assert_eq!(if_index("lo").unwrap(), 1);
        assert_eq!(mac_address("lo").unwrap(), [0; 6]);
        assert!(if_index("no-such-if0").is_err());
        assert!(if_index("").is_err());
        assert!(if_index("a-name-much-too-long-for-linux").is_err());
        assert!(enter("../etc").is_err());
        assert!(driver("no-such-if0").is_err());
    }
}
