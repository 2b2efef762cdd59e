//! Builds the AF_XDP shim over libxdp when its headers are installed (Debian
//! `libxdp-dev`, `libbpf-dev`). Without them the crate builds without the AF_XDP port and
//! the gateway falls back to AF_PACKET.
include!("../../build-support/probe.rs");

fn main() {
    println!("cargo:rerun-if-changed=csrc/xsk_shim.c");
    println!("cargo:rerun-if-env-changed=ESPGW_NO_AF_XDP");
    println!("cargo::rustc-check-cfg=cfg(espgw_af_xdp)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let headers = probe_headers(&["/usr/include/xdp/xsk.h", "/usr/include/bpf/libbpf.h"]);
    if !linux || !headers || std::env::var_os("ESPGW_NO_AF_XDP").is_some() {
        println!("cargo:warning=libxdp headers not found: building without the AF_XDP port");
        return;
    }
    let mut build = cc::Build::new();
    build.file("csrc/xsk_shim.c").opt_level(3).warnings(true);
    sanitize(&mut build);
    build.compile("espgw_xsk_shim");
    println!("cargo:rustc-link-lib=xdp");
    println!("cargo:rustc-link-lib=bpf");
    println!("cargo:rustc-cfg=espgw_af_xdp");
}
