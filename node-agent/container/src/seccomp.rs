//! The sandbox's seccomp filter: system calls a sandboxed userland has no
//! use for, and that would widen the kernel code a hostile script can
//! reach, fail with `EPERM` (never a kill: a program that probes for a
//! feature gets an error it can handle).
//!
//! The list follows three maintained references, keeping what all of them
//! agree a container or desktop sandbox does without:
//! * Docker/Moby's default profile (`profiles/seccomp/default.json` of
//!   moby/moby, documented at docs.docker.com "Seccomp security profiles
//!   for Docker": calls gated behind `CAP_SYS_ADMIN`, `CAP_SYS_MODULE`,
//!   `CAP_SYS_BOOT`, `CAP_SYS_TIME`, `CAP_SYS_PTRACE`, `CAP_SYS_NICE`, …,
//!   which the sandbox never has, plus `io_uring_*`, blocked since Moby 25);
//! * systemd's `SystemCallFilter=` groups (systemd.exec(5)): `@clock`,
//!   `@cpu-emulation`, `@debug`, `@module`, `@mount`, `@obsolete`,
//!   `@raw-io`, `@reboot`, `@swap`, and `@privileged`'s key calls;
//! * Flatpak's sandbox blocklist (`flatpak-run.c`, `setup_seccomp`):
//!   `TIOCSTI`/`TIOCLINUX` ioctls, NUMA page moving, `personality` other
//!   than the default persona, `clone`/`unshare` making namespaces.
//!
//! Three programs are loaded, each with bubblewrap's `--add-seccomp-fd`
//! (the kernel runs every filter and the most restrictive answer wins,
//! seccomp(2)):
//! 1. [`denied`]: the list below → `EPERM`, built with the `seccompiler`
//!    crate (rust-vmm/Firecracker);
//! 2. `clone3` → `ENOSYS`: its flags are in memory, where a filter cannot
//!    look, so it is refused as "not implemented" and glibc and musl fall
//!    back to `clone`, whose flags the first program checks (Moby does the
//!    same);
//! 3. on x86_64, every x32-ABI call (number with bit 30 set,
//!    `__X32_SYSCALL_BIT` in `arch/x86/include/uapi/asm/unistd.h`): x32
//!    calls carry the x86_64 audit architecture, so the number checks of
//!    the other programs would not see them. They kill the process, like a
//!    call of another architecture.
//!
//! Every program begins with the architecture check: a call made through
//! another ABI (i386 `int 0x80` on x86_64, AArch32 on aarch64) kills the
//! process, since the numbers it was built for would not apply. Only
//! x86_64 and aarch64 are supported; [`Filters::for_this_arch`] refuses
//! others.
//!
//! Not covered (see `docs/container-runtime.md`): everything else an
//! unprivileged user may call (the `socket` families, `ioctl` on devices
//! the sandbox has, `memfd_create`, `pidfd_open`, …); a filter narrows the
//! kernel's attack surface, it does not remove it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// A system call denied without looking at its arguments: its name (for
/// tests and documentation) and its number on the running architecture.
pub type Denied = (&'static str, i64);

macro_rules! calls {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), libc::$name as i64)),*]
    };
}

/// Denied on every supported architecture, whatever the arguments.
const DENIED_EVERYWHERE: &[Denied] = calls![
    // Loading and replacing kernels and modules (@module, @reboot).
    SYS_kexec_load,
    SYS_kexec_file_load,
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_reboot,
    // Kernel programs, profiling and page-fault handling in user space:
    // large, often-exploited kernel surfaces (Moby: CAP_SYS_ADMIN / CAP_BPF
    // / CAP_PERFMON; userfaultfd is Moby's and Flatpak's too).
    SYS_bpf,
    SYS_perf_event_open,
    SYS_userfaultfd,
    // The kernel keyring is not namespaced (Moby, Flatpak).
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    // File handles bypass the mount tree (the "shocker" escape; Moby).
    SYS_open_by_handle_at,
    SYS_name_to_handle_at,
    // Mounting (@mount): the sandbox's tree is fixed by bubblewrap.
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_move_mount,
    SYS_fsopen,
    SYS_fsmount,
    SYS_fspick,
    SYS_fsconfig,
    SYS_open_tree,
    SYS_mount_setattr,
    // Swap, accounting, quotas, the kernel log (@swap, @privileged).
    SYS_swapon,
    SYS_swapoff,
    SYS_acct,
    SYS_quotactl,
    SYS_quotactl_fd,
    SYS_syslog,
    SYS_lookup_dcookie,
    // The clock is the host's (@clock).
    SYS_settimeofday,
    SYS_clock_settime,
    SYS_adjtimex,
    SYS_clock_adjtime,
    // Other processes' memory and files, tracing (@debug, Moby's
    // CAP_SYS_PTRACE group): strace and gdb do not work in the sandbox.
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_kcmp,
    SYS_pidfd_getfd,
    // Joining namespaces; hanging up terminals.
    SYS_setns,
    SYS_vhangup,
    // Filesystem-wide event monitoring (Moby: CAP_SYS_ADMIN; open to
    // unprivileged callers since Linux 5.13, fanotify(7)).
    SYS_fanotify_init,
    // NUMA placement and page moving (Moby: CAP_SYS_NICE; Flatpak).
    SYS_mbind,
    SYS_set_mempolicy,
    SYS_get_mempolicy,
    SYS_migrate_pages,
    SYS_move_pages,
    // io_uring: a second system call interface with a long record of
    // kernel vulnerabilities, not filtered by seccomp once set up (Moby 25
    // blocks it; so do ChromeOS and Android). Runtimes that use it (libuv,
    // some databases) fall back to ordinary calls when setup fails.
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
];

/// Denied on x86_64 only (the calls do not exist on aarch64).
#[cfg(target_arch = "x86_64")]
// Port I/O (@raw-io); loading a library the old way (@obsolete).
const DENIED_ARCH: &[Denied] = calls![SYS_iopl, SYS_ioperm, SYS_uselib];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_ARCH: &[Denied] = &[];

/// Namespace flags of `clone` and `unshare` (`linux/sched.h`); a sandboxed
/// process may not make namespaces, the user namespace above all (it would
/// make the process "root" over a new set of kernel objects).
pub const NAMESPACE_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
];

/// `CLONE_NEWTIME` (`linux/sched.h`): only meaningful for `unshare` (for
/// `clone` the same bit is part of the exit signal).
pub const CLONE_NEWTIME: u64 = 0x80;

/// `personality(2)` values allowed, as in Moby's profile: `PER_LINUX`,
/// `PER_LINUX32`, `UNAME26`, `PER_LINUX32|UNAME26`, and `0xffffffff`
/// (query). Anything else (e.g. `ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC`)
/// is `EPERM`.
pub const PERSONALITIES: &[u64] = &[0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// Terminal ioctls that push input into, or drive, a terminal
/// (`TIOCSTI`, `TIOCLINUX`; `asm-generic/ioctls.h`), as in Flatpak.
pub const TERMINAL_IOCTLS: &[(&str, u64)] = &[("TIOCSTI", 0x5412), ("TIOCLINUX", 0x541c)];

/// `__X32_SYSCALL_BIT`.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `AUDIT_ARCH_X86_64` (`linux/audit.h`: `EM_X86_64 | __AUDIT_ARCH_64BIT |
/// __AUDIT_ARCH_LE`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;

/// The syscalls denied without looking at their arguments, on this
/// architecture.
pub fn denied() -> impl Iterator<Item = Denied> {
    DENIED_EVERYWHERE.iter().chain(DENIED_ARCH).copied()
}

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The agent runs on an architecture with no filter here (the value
    /// is `std::env::consts::ARCH`).
    #[error("no seccomp filter is defined for the {0} architecture (only x86_64 and aarch64)")]
    Arch(&'static str),
    /// seccompiler refused the rules (a rule this build cannot express).
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[from] seccompiler::BackendError),
    /// Creating or writing the memfd bubblewrap reads a program from failed.
    #[error("cannot hand the seccomp filter to bubblewrap: {0}")]
    Io(#[from] std::io::Error),
}

/// The compiled programs, ready to be handed to bubblewrap.
#[derive(Debug, Clone)]
pub struct Filters {
    programs: Vec<BpfProgram>,
}

impl Filters {
    /// Compiles the filters for the architecture this binary runs on.
    /// Errors: an architecture other than x86_64 and aarch64, or a rule
    /// the compiler rejects.
    pub fn for_this_arch() -> Result<Filters, Error> {
        let arch_name = std::env::consts::ARCH;
        if !matches!(arch_name, "x86_64" | "aarch64") {
            return Err(Error::Arch(arch_name));
        }
        let arch =
            TargetArch::try_from(arch_name).map_err(|_| Error::Arch(std::env::consts::ARCH))?;
        let mut programs = vec![
            SeccompFilter::new(
                rules()?,
                SeccompAction::Allow,
                SeccompAction::Errno(libc::EPERM as u32),
                arch,
            )?
            .try_into()?,
            SeccompFilter::new(
                BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
                SeccompAction::Allow,
                SeccompAction::Errno(libc::ENOSYS as u32),
                arch,
            )?
            .try_into()?,
        ];
        #[cfg(target_arch = "x86_64")]
        programs.push(x32_guard());
        Ok(Filters { programs })
    }

    /// The programs, in the order they are loaded.
    pub fn programs(&self) -> &[BpfProgram] {
        &self.programs
    }

    /// One memfd per program holding its instructions (the
    /// `struct sock_filter` array bubblewrap reads until end of file), at
    /// offset 0, close-on-exec. A run needs its own: bubblewrap reads
    /// from the descriptor's offset.
    pub fn memfds(&self) -> Result<Vec<OwnedFd>, Error> {
        self.programs
            .iter()
            .map(|p| {
                let fd = nix::sys::memfd::memfd_create(
                    "agentcomputer-seccomp",
                    nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
                )
                .map_err(std::io::Error::from)?;
                let mut file = std::fs::File::from(fd);
                file.write_all(&bytes(p))?;
                use std::io::Seek;
                file.seek(std::io::SeekFrom::Start(0))?;
                Ok(OwnedFd::from(file))
            })
            .collect()
    }
}

/// The program's instructions as the kernel's `struct sock_filter` array
/// (`u16 code, u8 jt, u8 jf, u32 k`, native byte order).
pub fn bytes(program: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for i in program {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

fn condition(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, Error> {
    Ok(SeccompCondition::new(arg, len, op, value)?)
}

/// The rules of the `EPERM` program: syscall number → conditions (an
/// empty list denies every call; several rules are alternatives, the
/// conditions of one rule must all hold).
fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, Error> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        denied().map(|(_, nr)| (nr, Vec::new())).collect();
    // clone(flags, ...) on x86_64 and aarch64 has its flags in the first
    // argument (an unsigned long): one rule per namespace flag.
    let with_flag = |arg_len: SeccompCmpArgLen, flags: &mut dyn Iterator<Item = u64>| {
        flags
            .map(|f| {
                Ok(SeccompRule::new(vec![condition(
                    0,
                    arg_len.clone(),
                    SeccompCmpOp::MaskedEq(f),
                    f,
                )?])?)
            })
            .collect::<Result<Vec<_>, Error>>()
    };
    rules.insert(
        libc::SYS_clone,
        with_flag(
            SeccompCmpArgLen::Qword,
            &mut NAMESPACE_FLAGS.iter().map(|(_, f)| *f),
        )?,
    );
    // unshare(int flags).
    rules.insert(
        libc::SYS_unshare,
        with_flag(
            SeccompCmpArgLen::Dword,
            &mut NAMESPACE_FLAGS
                .iter()
                .map(|(_, f)| *f)
                .chain([CLONE_NEWTIME]),
        )?,
    );
    // personality(unsigned int persona): denied unless one of the allowed.
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(
            PERSONALITIES
                .iter()
                .map(|p| condition(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *p))
                .collect::<Result<_, _>>()?,
        )?],
    );
    // ioctl(fd, unsigned int request, ...): the kernel compares the
    // request as 32 bits.
    rules.insert(
        libc::SYS_ioctl,
        TERMINAL_IOCTLS
            .iter()
            .map(|(_, req)| {
                Ok(SeccompRule::new(vec![condition(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    *req,
                )?])?)
            })
            .collect::<Result<_, Error>>()?,
    );
    Ok(rules)
}

/// x86_64: x32 calls (bit 30 set in the number) kill the process; other
/// architectures are left to the other programs' check.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    // Classic BPF opcodes (linux/bpf_common.h) and seccomp_data offsets
    // (linux/seccomp.h: nr at 0, arch at 4).
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let i = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        i(LD_W_ABS, 0, 0, 4),
        // Another architecture: the other programs kill it.
        i(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        i(LD_W_ABS, 0, 0, 0),
        i(JGE_K, 0, 1, X32_SYSCALL_BIT),
        i(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        i(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `struct sock_fprog`.
    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const sock_filter,
    }

    /// What a forked child reports: each call's `errno` (0 for success).
    const CHILD_CALLS: usize = 128;

    /// A system call number and its six arguments.
    type Call = (i64, [u64; 6]);

    /// Forks; the child becomes a session leader (no terminal), loads
    /// `programs` and makes `calls` (number and six arguments), writing
    /// each result's errno into a pipe. Returns the errnos, or the wait
    /// status when the child did not finish.
    fn in_filtered_child(programs: &[BpfProgram], calls: &[Call]) -> Result<Vec<i32>, i32> {
        assert!(calls.len() <= CHILD_CALLS);
        let progs: Vec<SockFprog> = programs
            .iter()
            .map(|p| SockFprog {
                len: p.len() as libc::c_ushort,
                filter: p.as_ptr(),
            })
            .collect();
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the child makes only raw system calls on memory
        // prepared before the fork, then _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            unsafe {
                libc::close(fds[0]);
                libc::setsid();
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    libc::_exit(101);
                }
                for p in &progs {
                    if libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        p as *const SockFprog,
                    ) != 0
                    {
                        libc::_exit(102);
                    }
                }
                for (nr, a) in calls {
                    let r = libc::syscall(*nr, a[0], a[1], a[2], a[3], a[4], a[5]);
                    if r == 0 && (*nr == libc::SYS_clone) {
                        // A clone the filter let through: the copy ends here.
                        libc::_exit(0);
                    }
                    let e: i32 = if r < 0 { *libc::__errno_location() } else { 0 };
                    libc::write(fds[1], (&e as *const i32).cast(), 4);
                }
                libc::_exit(0);
            }
        }
        unsafe { libc::close(fds[1]) };
        let mut out = Vec::new();
        let mut file = std::fs::File::from(unsafe {
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[0])
        });
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut buf).unwrap();
        for c in buf.chunks_exact(4) {
            out.push(i32::from_ne_bytes(c.try_into().unwrap()));
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(out)
        } else {
            Err(status)
        }
    }

    #[test]
    fn the_filters_compile_and_fit_the_kernel_limit() {
        let f = Filters::for_this_arch().unwrap();
        #[cfg(target_arch = "x86_64")]
        assert_eq!(f.programs().len(), 3);
        for p in f.programs() {
            // BPF_MAXINSNS (linux/bpf_common.h).
            assert!(!p.is_empty() && p.len() <= 4096, "{}", p.len());
            assert_eq!(bytes(p).len(), p.len() * 8);
        }
        let names: Vec<&str> = denied().map(|(n, _)| n).collect();
        for must in [
            "SYS_kexec_load",
            "SYS_bpf",
            "SYS_userfaultfd",
            "SYS_keyctl",
            "SYS_open_by_handle_at",
            "SYS_mount",
            "SYS_ptrace",
            "SYS_setns",
            "SYS_io_uring_setup",
        ] {
            assert!(names.contains(&must), "{must} is not denied");
        }
    }

    /// Every listed call gets EPERM (with arguments that would make the
    /// kernel answer EFAULT, EINVAL or EBADF without the filter, so a call
    /// that got past the filter would show), conditional rules deny only
    /// what they name, clone3 is ENOSYS, and ordinary calls still work.
    #[test]
    fn listed_calls_fail_with_eperm_and_others_work() {
        let f = Filters::for_this_arch().unwrap();
        let bad = [u64::MAX; 6];
        let listed: Vec<Denied> = denied().collect();
        let mut calls: Vec<Call> = listed.iter().map(|(_, nr)| (*nr, bad)).collect();
        let flags = |f: u64| [f, 0, 0, 0, 0, 0];
        let conditional: Vec<(&str, Call, i32)> = vec![
            (
                "clone(CLONE_NEWUSER)",
                (
                    libc::SYS_clone,
                    flags(libc::CLONE_NEWUSER as u64 | libc::SIGCHLD as u64),
                ),
                libc::EPERM,
            ),
            (
                "clone(CLONE_NEWNET)",
                (
                    libc::SYS_clone,
                    flags(libc::CLONE_NEWNET as u64 | libc::SIGCHLD as u64),
                ),
                libc::EPERM,
            ),
            (
                "unshare(CLONE_NEWUSER)",
                (libc::SYS_unshare, flags(libc::CLONE_NEWUSER as u64)),
                libc::EPERM,
            ),
            (
                "unshare(CLONE_NEWNS|CLONE_FILES)",
                (
                    libc::SYS_unshare,
                    flags((libc::CLONE_NEWNS | libc::CLONE_FILES) as u64),
                ),
                libc::EPERM,
            ),
            (
                "unshare(CLONE_NEWTIME)",
                (libc::SYS_unshare, flags(CLONE_NEWTIME)),
                libc::EPERM,
            ),
            (
                "unshare(CLONE_FILES)",
                (libc::SYS_unshare, flags(libc::CLONE_FILES as u64)),
                0,
            ),
            (
                "personality(ADDR_NO_RANDOMIZE)",
                (libc::SYS_personality, flags(0x0040000)),
                libc::EPERM,
            ),
            (
                "personality(query)",
                (libc::SYS_personality, flags(0xffff_ffff)),
                0,
            ),
            (
                "clone3",
                (libc::SYS_clone3, [u64::MAX, 88, 0, 0, 0, 0]),
                libc::ENOSYS,
            ),
            (
                "ioctl(TIOCSTI)",
                (libc::SYS_ioctl, [0, 0x5412, u64::MAX, 0, 0, 0]),
                libc::EPERM,
            ),
            (
                "ioctl(999999, FIONREAD)",
                (
                    libc::SYS_ioctl,
                    [999_999, libc::FIONREAD, u64::MAX, 0, 0, 0],
                ),
                libc::EBADF,
            ),
            ("getpid", (libc::SYS_getpid, [0; 6]), 0),
        ];
        calls.extend(conditional.iter().map(|(_, c, _)| *c));
        let got = in_filtered_child(f.programs(), &calls).expect("the child did not finish");
        assert_eq!(got.len(), calls.len());
        for ((name, _), e) in listed.iter().zip(&got) {
            assert_eq!(*e, libc::EPERM, "{name}: errno {e}");
        }
        for ((name, _, want), e) in conditional.iter().zip(&got[listed.len()..]) {
            assert_eq!(e, want, "{name}: errno {e}, wanted {want}");
        }
    }

    /// An x32 call kills the process (without the guard it would reach the
    /// kernel as an x86_64 call the other programs do not match).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_calls_kill_the_process() {
        let f = Filters::for_this_arch().unwrap();
        let x32_getpid = libc::SYS_getpid | X32_SYSCALL_BIT as i64;
        let status = in_filtered_child(f.programs(), &[(x32_getpid, [0; 6])]).unwrap_err();
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "status {status:#x}"
        );
    }

    /// The memfds hold exactly the programs' bytes, from offset 0.
    #[test]
    fn each_memfd_holds_one_program() {
        let f = Filters::for_this_arch().unwrap();
        let fds = f.memfds().unwrap();
        assert_eq!(fds.len(), f.programs().len());
        for (fd, p) in fds.into_iter().zip(f.programs()) {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut got).unwrap();
            assert_eq!(got, bytes(p));
        }
    }
}
