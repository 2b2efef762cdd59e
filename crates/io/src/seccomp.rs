//! A system-call allow-list (seccomp BPF) for the running gateway: once the ports are open,
//! anything outside the list the gateway itself uses is refused, so a bug in packet parsing
//! cannot be turned into `execve`, `ptrace` or a new socket.
//!
//! The filter is the classic shape: check the architecture (a 32-bit or x32 call under a
//! 64-bit filter would otherwise be read with the wrong numbers), then one comparison per
//! allowed system-call number, then the default action.
#![allow(unsafe_code)]

use std::io;

/// What a system call outside the list gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The whole process is killed (SIGSYS): the production setting.
    Kill,
    /// Allowed, and logged by the kernel (audit): for finding a missing call.
    Log,
    /// Fails with EPERM.
    Errno,
}

impl Action {
    fn ret(self) -> u32 {
        match self {
            Action::Kill => libc::SECCOMP_RET_KILL_PROCESS,
            Action::Log => libc::SECCOMP_RET_LOG,
            Action::Errno => libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        }
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

// struct seccomp_data: int nr; __u32 arch; ...
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A system call allowed only when its first argument (its low 32 bits) has one value:
/// e.g. `bpf` for BPF_MAP_DELETE_ELEM alone.
#[derive(Debug, Clone, Copy)]
pub struct WithArg0 {
    pub nr: libc::c_long,
    pub arg0: u32,
}

// struct seccomp_data: ..., __u64 instruction_pointer (at 8), __u64 args[6] (at 16).
#[cfg(target_endian = "little")]
const OFFSET_ARG0_LOW: u32 = 16;
#[cfg(target_endian = "big")]
const OFFSET_ARG0_LOW: u32 = 20;

/// The filter program for `allowed` and `with_arg0` (at most 60 of the latter and 250
/// calls in all: jump offsets are 8 bits).
pub fn program(
    allowed: &[libc::c_long],
    with_arg0: &[WithArg0],
    default: Action,
) -> Vec<libc::sock_filter> {
    assert!(
        allowed.len() + 4 * with_arg0.len() <= 250,
        "seccomp allow-list too long for 8-bit jumps"
    );
    const HEAD: usize = 4;
    const BLOCK: usize = 4;
    // Layout: head, one comparison per allowed call, one 4-instruction block per call with
    // an argument check, the default return, then "allow" (the last instruction).
    let allow_at = HEAD + allowed.len() + BLOCK * with_arg0.len() + 1;
    let to = |from: usize, target: usize| (target - from - 1) as u8;
    let mut p = vec![
        insn(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        // Foreign architecture: kill, whatever the default (its numbers mean other calls).
        insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH),
        insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ];
    for nr in allowed {
        let at = p.len();
        p.push(insn(BPF_JEQ_K, to(at, allow_at), 0, *nr as u32));
    }
    for rule in with_arg0 {
        let at = p.len();
        // Another call: on to the next block. This one: its argument decides, and the
        // accumulator (no longer the call number) is not used again.
        p.push(insn(BPF_JEQ_K, 0, (BLOCK - 1) as u8, rule.nr as u32));
        p.push(insn(BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW));
        p.push(insn(BPF_JEQ_K, to(at + 2, allow_at), 0, rule.arg0));
        p.push(insn(BPF_RET_K, 0, 0, default.ret()));
    }
    p.push(insn(BPF_RET_K, 0, 0, default.ret()));
    p.push(insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    debug_assert_eq!(p.len(), allow_at + 1);
    p
}

/// Installs the filter on every thread of the process (no_new_privs is set first, which a
/// filter installed without CAP_SYS_ADMIN requires). It cannot be removed.
pub fn install(
    allowed: &[libc::c_long],
    with_arg0: &[WithArg0],
    default: Action,
) -> io::Result<()> {
    let mut filter = program(allowed, with_arg0, default);
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: plain integer arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points to `filter`, both alive for the call; the kernel copies the
    // program. TSYNC applies it to every thread (or fails naming the one it cannot).
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &prog as *const libc::sock_fprog,
        )
    };
    match r {
        0 => Ok(()),
        r if r > 0 => Err(io::Error::other(format!(
            "seccomp: thread {r} could not take the filter"
        ))),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The process's seccomp mode as /proc reports it (0 none, 2 filter).
pub fn mode() -> io::Result<u32> {
    let s = std::fs::read_to_string("/proc/thread-self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no Seccomp line in /proc/thread-self/status"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::tests::in_child;

    /// What the test binary needs to run a test to its end and report it.
    const TEST_HARNESS: &[libc::c_long] = &[
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_writev,
        libc::SYS_openat,
        libc::SYS_close,
        libc::SYS_statx,
        libc::SYS_newfstatat,
        libc::SYS_fstat,
        libc::SYS_lseek,
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mprotect,
        libc::SYS_brk,
        libc::SYS_futex,
        libc::SYS_sigaltstack,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigaction,
        libc::SYS_madvise,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_poll,
        libc::SYS_ioctl,
        libc::SYS_fcntl,
        libc::SYS_sched_yield,
    ];

    #[test]
    fn a_call_outside_the_list_fails_and_the_list_works() {
        if !in_child("seccomp::tests::a_call_outside_the_list_fails_and_the_list_works") {
            return;
        }
        let only_f_getfd = [WithArg0 {
            nr: libc::SYS_dup,
            arg0: 0,
        }];
        install(TEST_HARNESS, &only_f_getfd, Action::Errno).unwrap();
        assert_eq!(mode().unwrap(), 2);
        // Listed: works.
        assert!(std::fs::read_to_string("/proc/thread-self/status").is_ok());
        // Not listed: refused, and nothing happened.
        // SAFETY: plain integer arguments.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        assert_eq!(fd, -1);
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
        // SAFETY: getppid has no arguments.
        assert_eq!(unsafe { libc::syscall(libc::SYS_getppid) }, -1);
        // Allowed for one first argument only: dup(0) works, dup(1) is refused.
        // SAFETY: dup of standard input/output; the new descriptors are closed at once.
        let d0 = unsafe { libc::dup(0) };
        assert!(d0 > 2, "dup(0) refused");
        // SAFETY: as above.
        let d1 = unsafe { libc::dup(1) };
        assert_eq!(d1, -1);
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
        // SAFETY: closes the descriptor dup(0) made.
        unsafe { libc::close(d0) };
    }

    #[test]
    fn kill_mode_ends_the_process_with_sigsys() {
        use std::os::unix::process::ExitStatusExt;
        if std::env::var_os("ESPGW_SECCOMP_KILL_CHILD").is_some() {
            install(TEST_HARNESS, &[], Action::Kill).unwrap();
            // SAFETY: getppid has no arguments; the filter kills the process here.
            unsafe { libc::syscall(libc::SYS_getppid) };
            // Not reached; if it were, the parent sees a clean exit and fails.
            return;
        }
        let st = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "seccomp::tests::kill_mode_ends_the_process_with_sigsys",
            ])
            .env("ESPGW_SECCOMP_KILL_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(st.signal(), Some(libc::SIGSYS), "{st:?}");
    }

    #[test]
    fn program_shape() {
        let p = program(&[1, 2, 3], &[], Action::Kill);
        assert_eq!(p.len(), 4 + 3 + 2);
        // Each comparison jumps exactly to the final "allow".
        for (i, ins) in p[4..7].iter().enumerate() {
            let target = 4 + i + 1 + ins.jt as usize;
            assert_eq!(target, p.len() - 1);
            assert_eq!(p[target].k, libc::SECCOMP_RET_ALLOW);
        }
        assert_eq!(p[7].k, libc::SECCOMP_RET_KILL_PROCESS);
        let q = program(&[1], &[WithArg0 { nr: 9, arg0: 3 }], Action::Errno);
        assert_eq!(q.len(), 4 + 1 + 4 + 2);
        // The block: a different call skips it to the default return.
        assert_eq!(5 + 1 + q[5].jf as usize, 9);
        assert_eq!(q[9].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        // The matching argument reaches "allow".
        assert_eq!(7 + 1 + q[7].jt as usize, q.len() - 1);
    }
}
