// Shared by the crates' build scripts (pulled in with `include!`): probing for a system
// library's headers so that cargo reruns the probe when the library is installed or
// removed later (a build made before `apt-get install libipsec-mb-dev` must not stay
// without it, and one made after its removal must not try to link it).

/// Whether every header exists. For each one, asks cargo to rerun the build script when
/// it changes: the header itself when it is there (removing it makes it missing, which
/// cargo treats as changed), else the nearest directory above it that exists (installing
/// a file into a directory updates the directory's modification time, which cargo's scan
/// of that directory sees even though dpkg keeps the package's old file times).
fn probe_headers(headers: &[&str]) -> bool {
    let mut all = true;
    for header in headers {
        let mut watched = std::path::Path::new(header);
        if !watched.exists() {
            all = false;
            while let Some(parent) = watched.parent() {
                watched = parent;
                if watched.exists() {
                    break;
                }
            }
        }
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    all
}

/// `ESPGW_SANITIZE=address` builds the C shim under AddressSanitizer and links the
/// package's tests with its runtime (`scripts/asan-shims.sh`). A fuzz build (cargo-fuzz:
/// `-Zsanitizer=address`, which `cc` follows with `-fsanitize=address` of its own) is
/// instrumented too.
///
/// Either way the C keeps its locals on the real stack, not on AddressSanitizer's fake
/// stack of returned frames: the runtimes this project meets (GCC 12's libasan, and
/// compiler-rt before LLVM's fix of August 2025, llvm/llvm-project#152819) hand out fake
/// frames that are not 64-byte aligned, and the AVX-512 kernels' 64-byte aligned locals
/// then fault on an aligned load (`vmovdqa64`) under `detect_stack_use_after_return=1`,
/// which newer runtimes turn on by default. No build without the sanitizer changes.
#[allow(dead_code)]
fn sanitize(build: &mut cc::Build) {
    println!("cargo:rerun-if-env-changed=ESPGW_SANITIZE");
    let own = std::env::var("ESPGW_SANITIZE").as_deref() == Ok("address");
    let rustc = std::env::var("CARGO_CFG_SANITIZE").is_ok_and(|s| s.contains("address"));
    if own {
        build
            .flag("-fsanitize=address")
            .flag("-fno-omit-frame-pointer")
            .opt_level(1);
        // The runtime as a shared library, linked into whatever links the shim (the
        // Rust test binaries are not built by a driver that adds it).
        println!("cargo:rustc-link-lib=dylib=asan");
    }
    if own || rustc {
        let compiler = build.get_compiler();
        if compiler.is_like_clang() {
            build.flag("-fsanitize-address-use-after-return=never");
        } else if compiler.is_like_gnu() {
            build.flag("--param=asan-use-after-return=0");
        }
    }
}
