//! Stand-in for the AF_XDP port in builds without libxdp: opening fails with a clear
//! message and the gateway falls back to AF_PACKET.

use std::io;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    Auto,
    Copy,
    Generic,
}

pub enum AfXdpPort {}

impl AfXdpPort {
    pub fn open(_ifname: &str, _queue: u32, _mode: XdpMode, _frames: u32) -> io::Result<Self> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this build has no AF_XDP support (libxdp-dev was not installed at build time)",
        ))
    }

    pub fn set_busy_poll(&mut self, _usecs: u32, _budget: u32) -> io::Result<u32> {
        match *self {}
    }

    pub fn frame_size(&self) -> usize {
        match *self {}
    }

    pub fn drop_other_hosts(&mut self, _own: [u8; 6]) {
        match *self {}
    }

    pub fn drop_vlan_tagged(&mut self) {
        match *self {}
    }
}

impl crate::Port for AfXdpPort {
    fn name(&self) -> &str {
        match *self {}
    }
    fn kind(&self) -> &'static str {
        match *self {}
    }
    fn rx_burst(
        &mut self,
        _: &mut espgw_core::packet::PacketPool,
        _: &mut Vec<espgw_core::packet::Packet>,
        _: usize,
    ) -> io::Result<usize> {
        match *self {}
    }
    fn tx_burst(
        &mut self,
        _: &mut Vec<espgw_core::packet::Packet>,
        _: &mut espgw_core::packet::PacketPool,
    ) -> io::Result<usize> {
        match *self {}
    }
}
