//! Process-wide protections the gateway applies to itself at start-up.
#![allow(unsafe_code)]

use std::io;

/// Makes the process non-dumpable: no core dump (which would hold keys), no ptrace attach
/// by an unprivileged user, and its /proc files owned by root.
pub fn forbid_core_dumps() -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes plain integers and touches no memory of ours.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the process may dump core (0 after [`forbid_core_dumps`]).
pub fn dumpable() -> io::Result<bool> {
    // SAFETY: PR_GET_DUMPABLE takes plain integers and touches no memory of ours.
    let r = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r != 0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn core_dumps_are_forbidden_in_a_child() {
        // In a child process, so the test runner itself stays as it was.
        let exe = std::env::current_exe().unwrap();
        if std::env::var_os("ESPGW_DUMPABLE_CHILD").is_some() {
            assert!(super::dumpable().unwrap());
            super::forbid_core_dumps().unwrap();
            assert!(!super::dumpable().unwrap());
            return;
        }
        let st = std::process::Command::new(exe)
            .args([
                "--exact",
                "process::tests::core_dumps_are_forbidden_in_a_child",
                "--nocapture",
            ])
            .env("ESPGW_DUMPABLE_CHILD", "1")
            .status()
            .unwrap();
        assert!(st.success());
    }
}
