//! The Debian packages the lab's commands need, installed where missing: the README's
//! commands must work on a fresh machine. Used by the test bed and the strongSwan DUT.

use std::path::Path;
use std::process::{Command, Stdio};

fn have(tool: &str) -> bool {
    if tool.starts_with('/') {
        return Path::new(tool).exists();
    }
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

/// Installs the Debian packages of the tools (name or absolute path, package) that are
/// missing: the README's commands must work on a fresh machine.
pub(crate) fn ensure_packages(what: &[(&str, &str)]) -> Result<(), String> {
    let mut missing: Vec<&str> = what
        .iter()
        .filter(|(t, _)| !have(t))
        .map(|(_, p)| *p)
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    if !have("apt-get") {
        return Err(format!("needs the packages: {}", missing.join(" ")));
    }
    println!("installing {} (apt-get)", missing.join(" "));
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend_from_slice(&missing);
    // A fresh machine may not have package lists yet: update once and retry.
    let ok = apt(&install) || (apt(&["update", "-qq"]) && apt(&install));
    if ok {
        Ok(())
    } else {
        Err(format!("could not install {}", missing.join(" ")))
    }
}
