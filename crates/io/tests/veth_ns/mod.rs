//! A veth pair `xa`–`xb` in a network namespace of its own, for the io crate's tests that
//! need real interfaces (and root: CI runs them as root).

use std::process::Command;

/// Runs `ip` with `args`; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs `test` on a thread of its own inside a fresh namespace named `{prefix}-{pid}`
/// (passed to it) that holds the veth pair `xa`–`xb`, both up after `setup` (more `ip -n NS
/// ...` commands, addresses say) ran; then deletes the namespace whatever the test did,
/// and fails as the test failed. Without root it says so and returns.
pub fn in_veth_namespace(
    prefix: &str,
    setup: &[&[&str]],
    test: impl FnOnce(&str) + Send + 'static,
) {
    if espgw_io::process::effective_uid() != 0 {
        eprintln!("skipped: needs root (CI runs it as root)");
        return;
    }
    let ns = format!("{prefix}-{}", std::process::id());
    assert!(ip(&["netns", "add", &ns]));
    let in_ns = |args: &[&str]| ip(&[&["-n", ns.as_str()], args].concat());
    let ok = in_ns(&["link", "add", "xa", "type", "veth", "peer", "name", "xb"])
        && setup.iter().all(|args| in_ns(args))
        && in_ns(&["link", "set", "xa", "up"])
        && in_ns(&["link", "set", "xb", "up"]);
    let ns2 = ns.clone();
    let result = std::thread::spawn(move || {
        assert!(ok, "veth pair in {ns2}");
        espgw_io::netns::enter(&ns2).unwrap();
        test(&ns2);
    })
    .join();
    ip(&["netns", "del", &ns]);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
