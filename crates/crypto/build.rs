//! Builds the small C shim over intel-ipsec-mb's job API when the library's header is
//! installed (Debian `libipsec-mb-dev`). Without it the crate still builds and the
//! aws-lc-rs back-end serves alone.
include!("../../build-support/probe.rs");

fn main() {
    println!("cargo:rerun-if-changed=csrc/ipsec_mb_shim.c");
    println!("cargo:rerun-if-changed=csrc/gcm_batch.c");
    println!("cargo:rerun-if-changed=csrc/gcm_batch_avx2.c");
    println!("cargo:rerun-if-changed=csrc/gcm_batch_aesni.c");
    println!("cargo:rerun-if-changed=csrc/gcm_batch.h");
    println!("cargo:rerun-if-changed=csrc/chacha_batch.c");
    println!("cargo:rerun-if-changed=csrc/chacha_batch.h");
    println!("cargo:rerun-if-env-changed=ESPGW_NO_IPSEC_MB");
    println!("cargo::rustc-check-cfg=cfg(espgw_ipsec_mb)");
    let target_x86_64 = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
    // Either location will do: the probe of each is kept so that cargo watches both.
    let header = [
        probe_headers(&["/usr/include/intel-ipsec-mb.h"]),
        probe_headers(&["/usr/local/include/intel-ipsec-mb.h"]),
    ]
    .contains(&true);
    if !target_x86_64 || !header || std::env::var_os("ESPGW_NO_IPSEC_MB").is_some() {
        println!(
            "cargo:warning=intel-ipsec-mb not found: only the aws-lc-rs crypto back-end is built"
        );
        return;
    }
    let mut build = cc::Build::new();
    build
        .file("csrc/ipsec_mb_shim.c")
        .file("csrc/gcm_batch.c")
        .file("csrc/gcm_batch_avx2.c")
        .file("csrc/gcm_batch_aesni.c")
        .file("csrc/chacha_batch.c")
        .opt_level(3)
        // Each function on a 64-byte line of its own, so that where its loops fall does not
        // move with the size of the Rust code linked before it. Unaligned (GCC's 16 bytes),
        // a change to the SPD lookup alone moved `open_lanes` from 16 to 48 bytes into its
        // line and inbound AES-GCM at 64-byte frames lost 4 % (`ab-builds.py`, 10 rounds, 10
        // of 10 slower; docs/performance.md, "The short SPD scan in place of the flow cache").
        .flag("-falign-functions=64")
        .warnings(true);
    sanitize(&mut build);
    build.compile("espgw_ipsec_mb_shim");
    println!("cargo:rustc-link-lib=IPSec_MB");
    println!("cargo:rustc-cfg=espgw_ipsec_mb");
}
