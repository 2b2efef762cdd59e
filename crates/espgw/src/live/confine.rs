//! Least privilege for the running gateway. Start-up needs root or a few capabilities
//! (open AF_XDP/AF_PACKET sockets, load the XDP program, create TUN devices); once every
//! port, socket and file the gateway will use is open, it
//! 1. becomes an unprivileged user (`--user`, default `espgw` where that user exists),
//! 2. keeps one capability, CAP_IPC_LOCK, which `mlockall(MCL_FUTURE)` needs so that memory
//!    allocated later is locked as well (the kernel checks it at every new mapping),
//! 3. locks all its memory (no key reaches swap; core dumps were forbidden before the
//!    configuration was read),
//! 4. installs a seccomp filter allowing only the system calls listed in [`ALLOWED`].
//!
//! Capabilities and the filter are per thread and inherited: this runs on the main thread
//! before any other thread starts.

use espgw_io::process::{self, Account, Capability};
use espgw_io::seccomp::{self, Action, WithArg0};
use std::path::Path;

/// What a system call outside the list does (`--seccomp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SeccompArg {
    /// Kill the gateway (SIGSYS): the default.
    Kill,
    /// Allow it, and have the kernel log it (audit): to find a call the list lacks.
    Log,
    /// No filter.
    Off,
}

/// The one capability kept after start-up.
pub const KEPT: &[Capability] = &[Capability::IpcLock];

/// Every system call the running gateway makes, found with `strace -f` over the live test
/// suite (packet I/O on all three back-ends, reload, show, stop, metrics, SIGHUP, sequence
/// state) and by reading the code paths strace cannot reach in a test (error paths, abort).
pub const ALLOWED: &[libc::c_long] = &[
    // Packet I/O: AF_XDP kicks and waits, AF_PACKET rings, TUN reads and writes.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvmmsg,
    libc::SYS_sendmmsg,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_getsockopt,
    // Control socket and metrics: accept, deadlines, non-blocking listeners.
    libc::SYS_accept4,
    libc::SYS_setsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_shutdown,
    libc::SYS_ioctl,
    libc::SYS_fcntl,
    libc::SYS_close,
    // Reload (reading the configuration) and sequence state (write, fsync, rename).
    libc::SYS_openat,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_getdents64,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_readlink,
    libc::SYS_getcwd,
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_brk,
    // Threads (connection threads are started while running), time, signals.
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_sigaltstack,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    // The kernel's own restart of a sleep or poll interrupted by a stop (SIGSTOP/SIGCONT, a
    // cgroup freeze, a debugger): strace never shows it, and without it a stopped and
    // continued gateway was killed (SIGSYS in espgw-worker-0, found 2026-11-25).
    libc::SYS_restart_syscall,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_gettimeofday,
    libc::SYS_getrandom,
    libc::SYS_getpid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// Calls allowed for one first argument: thread names (prctl PR_SET_NAME, so that no
/// running thread can make the process dumpable again), and the AF_XDP socket map entry a
/// closing port removes (bpf BPF_MAP_DELETE_ELEM; no program or map can be loaded).
pub const ALLOWED_WITH_ARG0: &[WithArg0] = &[
    WithArg0 {
        nr: libc::SYS_prctl,
        arg0: libc::PR_SET_NAME as u32,
    },
    WithArg0 {
        nr: libc::SYS_bpf,
        arg0: 3, // BPF_MAP_DELETE_ELEM
    },
];

/// The account `--user` names, or by default `espgw` when the gateway starts as root and
/// that user exists (`None`: stay the user it was started as).
pub fn account(user: Option<&str>) -> Result<Option<Account>, ConfineError> {
    let root = process::effective_uid() == 0;
    let name = match user {
        Some(u) => u,
        None if root => "espgw",
        None => return Ok(None),
    };
    let found = process::lookup_user(name).map_err(|source| ConfineError::UserLookup {
        user: name.to_string(),
        source,
    })?;
    match found {
        // Already that user (a service started as it): nothing to switch.
        Some(a) if a.uid == process::effective_uid() => Ok(None),
        Some(_) if !root => Err(ConfineError::NotRoot {
            user: name.to_string(),
            uid: process::effective_uid(),
        }),
        Some(a) => Ok(Some(a)),
        None if user.is_none() => Ok(None),
        None => Err(ConfineError::NoSuchUser(name.to_string())),
    }
}

/// The name of `uid` from /etc/passwd, or the number. Called on a refused reload, under
/// the filter: the file is read directly because glibc's getpwuid may first try nscd's
/// socket, and `socket` is not in the allow-list.
pub fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

/// Gives the files the gateway writes while running to `account`: the sequence-state
/// directory and the control socket (so that `espgw stop` can remove it and the user may
/// use it). Called before the switch, as systemd's StateDirectory= would.
pub fn hand_over(account: &Account, paths: &[&Path]) -> Result<(), ConfineError> {
    for p in paths {
        if p.exists() {
            process::give_to(p, account).map_err(|source| ConfineError::HandOver {
                path: p.to_path_buf(),
                user: account.name.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Step 4 alone: the gateway's system-call filter on every thread of the process (also
/// used by `bench dataplane --seccomp` to measure what it costs).
pub fn install_filter(mode: SeccompArg) -> Result<(), ConfineError> {
    let action = match mode {
        SeccompArg::Kill => Action::Kill,
        SeccompArg::Log => Action::Log,
        SeccompArg::Off => return Ok(()),
    };
    seccomp::install(ALLOWED, ALLOWED_WITH_ARG0, action).map_err(ConfineError::Seccomp)
}

/// Steps 1-4 above. Memory that cannot be locked (no CAP_IPC_LOCK when started as a plain
/// user) is a warning, not a refusal.
pub fn confine(account: Option<&Account>, seccomp_mode: SeccompArg) -> Result<(), ConfineError> {
    if account.is_none() && process::effective_uid() == 0 {
        crate::warn!("privileges", "detail" => "running as root: no user espgw and no --user \
            given (only the capabilities are reduced)");
    }
    process::drop_privileges(account, KEPT).map_err(ConfineError::DropPrivileges)?;
    // Asked now: capget is not in the filter's list.
    let kept = if process::permitted(Capability::IpcLock).unwrap_or(false) {
        "ipc_lock"
    } else {
        "none"
    };
    let locked = match process::lock_memory() {
        Ok(()) => true,
        Err(e) => {
            crate::warn!("mlockall", "error" => e,
                "detail" => "memory is not locked: keys may reach swap");
            false
        }
    };
    install_filter(seccomp_mode)?;
    crate::info!("confined",
        "user" => account.map_or_else(|| format!("uid {}", process::effective_uid()), |a| a.name.clone()),
        "capabilities" => kept, "memory_locked" => locked,
        "seccomp" => format!("{seccomp_mode:?}").to_lowercase());
    Ok(())
}

/// Why the gateway could not confine itself. `Display` names the user, path or step.
#[derive(Debug)]
pub enum ConfineError {
    /// The user database could not be read.
    UserLookup {
        /// The `--user` asked for (or the default `espgw`).
        user: String,
        /// What reading it said.
        source: std::io::Error,
    },
    /// A user switch asked of a process that is not root.
    NotRoot {
        /// The user asked for.
        user: String,
        /// The uid the gateway runs as.
        uid: u32,
    },
    /// `--user` names no user.
    NoSuchUser(String),
    /// A file the gateway writes could not be given to its user.
    HandOver {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The user it was to be given to.
        user: String,
        /// What chown said.
        source: std::io::Error,
    },
    /// Core dumps could not be forbidden (`prctl(PR_SET_DUMPABLE)`).
    CoreDumps(std::io::Error),
    /// Changing user or reducing capabilities failed.
    DropPrivileges(std::io::Error),
    /// The system-call filter could not be installed.
    Seccomp(std::io::Error),
}

impl std::fmt::Display for ConfineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfineError::UserLookup { user, source } => write!(f, "--user {user}: {source}"),
            ConfineError::NotRoot { user, uid } => write!(
                f,
                "--user {user}: only root can change user (the gateway runs as uid {uid})"
            ),
            ConfineError::NoSuchUser(user) => write!(f, "--user {user}: no such user"),
            ConfineError::HandOver { path, user, source } => {
                write!(f, "giving {} to user {user}: {source}", path.display())
            }
            ConfineError::CoreDumps(e) => write!(f, "prctl(PR_SET_DUMPABLE): {e}"),
            ConfineError::DropPrivileges(e) => write!(f, "dropping privileges: {e}"),
            ConfineError::Seccomp(e) => write!(f, "seccomp: {e}"),
        }
    }
}

impl std::error::Error for ConfineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfineError::UserLookup { source, .. } | ConfineError::HandOver { source, .. } => {
                Some(source)
            }
            ConfineError::CoreDumps(e)
            | ConfineError::DropPrivileges(e)
            | ConfineError::Seccomp(e) => Some(e),
            ConfineError::NotRoot { .. } | ConfineError::NoSuchUser(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_user_is_refused_by_name() {
        let e = account(Some("espgw-no-such-user-xyz")).unwrap_err();
        // As root the lookup finds no such user; as another user a switch is refused first
        // only when the user exists, so both runs see NoSuchUser.
        assert!(
            matches!(&e, ConfineError::NoSuchUser(u) if u == "espgw-no-such-user-xyz"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "--user espgw-no-such-user-xyz: no such user");
    }
}
