//! Sleeping until one of several descriptors is readable: what an idle worker does
//! instead of spinning (the machine is shared with the generator and the peer gateway).
#![allow(unsafe_code)]

use std::os::fd::RawFd;

/// Waits up to `timeout_ms` for any of `fds` to become readable; returns how many are.
pub fn wait_readable(fds: &[RawFd], timeout_ms: i32) -> usize {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is a live array of `p.len()` pollfd structures for the call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    r.max(0) as usize
}
