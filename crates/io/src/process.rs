//! Process-wide protections the gateway applies to itself at start-up: no core dumps, the
//! switch to an unprivileged user keeping only the capabilities still needed, memory locked
//! out of swap, and (in [`crate::seccomp`]) a system-call filter.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;

/// Linux capability numbers (linux/capability.h) the gateway names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Capability {
    NetAdmin = 12,
    NetRaw = 13,
    IpcLock = 14,
    Bpf = 39,
}

/// The highest capability number this code knows the kernel may have (CAP_CHECKPOINT_RESTORE
/// in 5.9+); bounding-set drops beyond the kernel's own last one fail harmlessly.
const LAST_CAPABILITY: u32 = 40;

fn check(r: libc::c_int, what: &str) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    }
}

fn prctl(op: libc::c_int, arg: libc::c_ulong, what: &str) -> io::Result<()> {
    // SAFETY: the prctl operations used here take plain integers and touch no memory of ours.
    check(
        unsafe {
            libc::prctl(
                op,
                arg,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        },
        what,
    )
}

/// Makes the process non-dumpable: no core dump (which would hold keys), no ptrace attach
/// by an unprivileged user, and its /proc files owned by root.
pub fn forbid_core_dumps() -> io::Result<()> {
    prctl(libc::PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
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

/// A user account the gateway can switch to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The user id of the process at the other end of a connected Unix stream socket
/// (`SO_PEERCRED`, set by the kernel at connect time: the peer cannot forge it).
pub fn peer_uid(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: `ucred` is plain old data; getsockopt fills it in.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `fd` is a live descriptor for the borrow; `cred` and `len` are live locals
    // of the sizes passed.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Looks `name` up in the user database (`None`: no such user).
pub fn lookup_user(name: &str) -> io::Result<Option<Account>> {
    let cname = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name holds a NUL"))?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: `passwd` is plain old data; getpwnam_r fills it in.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: the name is NUL-terminated, `buf` is
    // writable for its length, and `pwd`/`result` are live locals. The strings `pwd` points
    // to live in `buf`, which is not read after this call.
    let r = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    if result.is_null() {
        return Ok(None);
    }
    Ok(Some(Account {
        name: name.to_string(),
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    }))
}

/// The effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// CPU time the calling thread has used (user and system), or zero where the clock is
/// not there.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call; the kernel writes nothing
    // else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// This thread's capability sets.
fn get_capabilities() -> io::Result<[CapData; 2]> {
    let mut data = [CapData::default(); 2];
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capget writes two data structs (version 3) into `data`, a live local.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    check(r as libc::c_int, "capget")?;
    Ok(data)
}

/// Whether this thread holds `cap` in its permitted set.
pub fn permitted(cap: Capability) -> io::Result<bool> {
    let bit = cap as u32;
    Ok(get_capabilities()?[(bit / 32) as usize].permitted & (1 << (bit % 32)) != 0)
}

/// Sets this thread's effective and permitted capabilities to those of `keep` it holds
/// (inheritable and ambient empty). Threads started afterwards inherit the set.
fn set_capabilities(keep: &[Capability]) -> io::Result<()> {
    let held = get_capabilities()?;
    let mut data = [CapData::default(); 2];
    for c in keep {
        let bit = *c as u32;
        let mask = 1 << (bit % 32);
        let d = &mut data[(bit / 32) as usize];
        if held[(bit / 32) as usize].permitted & mask != 0 {
            d.effective |= mask;
            d.permitted |= mask;
        }
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads one header and two data structs, laid out as linux/capability.h
    // defines them (version 3), all live locals.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    check(r as libc::c_int, "capset")?;
    // SAFETY: plain integer arguments.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    check(r, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
}

/// Drops every capability not in `keep` from the bounding set, where the process may (it
/// needs CAP_SETPCAP: root may, a service started with a few ambient capabilities may not,
/// and there systemd's CapabilityBoundingSet= has done it).
fn shrink_bounding_set(keep: &[Capability]) {
    for bit in 0..=LAST_CAPABILITY {
        if !keep.iter().any(|c| *c as u32 == bit) {
            // SAFETY: plain integer arguments; failure (EPERM, EINVAL) leaves the set as it was.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, bit as libc::c_ulong, 0, 0, 0) };
        }
    }
}

/// Becomes `account` (when given; its primary group as the only group) with only the
/// capabilities in `keep` that it holds, which no later exec can regain (no_new_privs). Must run before
/// any other thread starts: capabilities are per thread and only new threads inherit.
pub fn drop_privileges(account: Option<&Account>, keep: &[Capability]) -> io::Result<()> {
    shrink_bounding_set(keep);
    if let Some(a) = account {
        // Keep the permitted set across the uid change; the effective set is re-raised below.
        prctl(libc::PR_SET_KEEPCAPS, 1, "prctl(PR_SET_KEEPCAPS)")?;
        let groups = [a.gid];
        // SAFETY: `groups` is a live array of the length passed. glibc applies setgroups,
        // setresgid and setresuid to every thread of the process.
        check(unsafe { libc::setgroups(1, groups.as_ptr()) }, "setgroups")?;
        // SAFETY: plain integer arguments.
        check(unsafe { libc::setresgid(a.gid, a.gid, a.gid) }, "setresgid")?;
        // SAFETY: plain integer arguments.
        check(unsafe { libc::setresuid(a.uid, a.uid, a.uid) }, "setresuid")?;
        prctl(libc::PR_SET_KEEPCAPS, 0, "prctl(PR_SET_KEEPCAPS)")?;
    }
    set_capabilities(keep)?;
    // A change of credentials resets the dumpable flag: set it again.
    forbid_core_dumps()?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
}

/// Locks every present and future page in memory, so that no key is ever written to swap.
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: plain flag arguments.
    check(
        unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) },
        "mlockall",
    )
}

/// Gives `path` (a file or directory, and what a directory holds, one level deep) to `account`.
pub fn give_to(path: &std::path::Path, account: &Account) -> io::Result<()> {
    std::os::unix::fs::chown(path, Some(account.uid), Some(account.gid))?;
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            std::os::unix::fs::chown(e?.path(), Some(account.uid), Some(account.gid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A thread's CPU clock moves while it computes and not while it sleeps.
    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let t0 = thread_cpu_time();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let slept = thread_cpu_time() - t0;
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let worked = thread_cpu_time() - t0 - slept;
        assert!(slept < std::time::Duration::from_millis(30), "{slept:?}");
        assert!(worked > std::time::Duration::from_millis(20), "{worked:?}");
    }

    /// Runs the named test again in a child process with `ESPGW_PROCESS_CHILD` set, so that
    /// process-wide changes leave the test runner as it was.
    pub(crate) fn in_child(test: &str) -> bool {
        if std::env::var_os("ESPGW_PROCESS_CHILD").is_some() {
            return true;
        }
        let exe = std::env::current_exe().unwrap();
        let st = std::process::Command::new(exe)
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env("ESPGW_PROCESS_CHILD", "1")
            .status()
            .unwrap();
        assert!(st.success(), "{test} failed in its child process");
        false
    }

    pub(crate) fn status_field(name: &str) -> String {
        // Capabilities, no_new_privs and seccomp are per thread: this thread's view.
        let s = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} not in /proc/self/status"))
            .trim()
            .to_string()
    }

    #[test]
    fn core_dumps_are_forbidden_in_a_child() {
        if !in_child("process::tests::core_dumps_are_forbidden_in_a_child") {
            return;
        }
        assert!(dumpable().unwrap());
        forbid_core_dumps().unwrap();
        assert!(!dumpable().unwrap());
    }

    #[test]
    fn root_becomes_nobody_with_only_the_kept_capability() {
        if effective_uid() != 0 {
            eprintln!("not root: the uid change is tested by the live tests' checks instead");
            return;
        }
        if !in_child("process::tests::root_becomes_nobody_with_only_the_kept_capability") {
            return;
        }
        let nobody = lookup_user("nobody").unwrap().expect("user nobody");
        drop_privileges(Some(&nobody), &[Capability::IpcLock]).unwrap();
        let uids: Vec<String> = status_field("Uid")
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(uids, vec![nobody.uid.to_string(); 4]);
        let gids: Vec<String> = status_field("Gid")
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(gids, vec![nobody.gid.to_string(); 4]);
        assert_eq!(status_field("Groups"), nobody.gid.to_string());
        let bit = 1u64 << (Capability::IpcLock as u32);
        assert_eq!(
            u64::from_str_radix(&status_field("CapEff"), 16).unwrap(),
            bit
        );
        assert_eq!(
            u64::from_str_radix(&status_field("CapPrm"), 16).unwrap(),
            bit
        );
        assert_eq!(u64::from_str_radix(&status_field("CapAmb"), 16).unwrap(), 0);
        assert_eq!(
            u64::from_str_radix(&status_field("CapBnd"), 16).unwrap(),
            bit
        );
        assert_eq!(status_field("NoNewPrivs"), "1");
        assert!(!dumpable().unwrap());
        // And it is really gone: root's files are out of reach, setuid back fails.
        assert!(std::fs::read("/etc/shadow").is_err());
        // SAFETY: plain integer arguments.
        assert_ne!(unsafe { libc::setuid(0) }, 0);
        // The kept capability works: memory can be locked beyond RLIMIT_MEMLOCK.
        lock_memory().unwrap();
        assert!(status_field("VmLck").starts_with(|c: char| c != '0'));
    }

    #[test]
    fn unknown_user_is_none() {
        assert_eq!(lookup_user("espgw-no-such-user-x").unwrap(), None);
        assert_eq!(lookup_user("root").unwrap().unwrap().uid, 0);
    }
}
