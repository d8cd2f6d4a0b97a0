//! How a script and its caller's environment reach the sandbox's shell
//! without crossing the privilege drop.
//!
//! `bwrap` and `setpriv` run as root in the host's user namespace and are
//! not setuid, so the dynamic loader and libc honour every variable of
//! their environment (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `GCONV_PATH`,
//! `LOCPATH`, `MALLOC_*` ...; ld.so(8), "ENVIRONMENT"): a caller's
//! variable there is code run as root. So those two get a fixed
//! environment of the agent's own ([`BASE_ENV`]) and nothing of the
//! caller's, and the script and the caller's variables travel in a
//! memfd that only the last program, `bash` running as the sandbox user,
//! reads: the caller's `LD_PRELOAD` then reaches the script's processes,
//! as the sandbox user, and nothing before them.
//!
//! The memfd also keeps the script off every argv: `/proc/PID/cmdline` is
//! readable by every local user, and a script may carry secrets.
//!
//! The memfd holds NUL-terminated records: the working directory, then
//! `NAME=VALUE` for each variable, then the script's bytes to the end.
//! [`launcher`] is the fixed `bash -c` text that reads them into one array
//! ([`RESERVED`], a name no caller may set), closes the descriptor, enters
//! the working directory, exports the variables in one `export`, and
//! `eval`s the script on its first line (after unsetting the array), so
//! `$0`, `$#`, `LINENO` and `exit` behave as under `bash -c SCRIPT`.
//!
//! The working directory is entered here, as the sandbox user, and not by
//! `bwrap --chdir`: bubblewrap changes directory as root while it still
//! holds a descriptor of the host's `/proc`, so a symbolic link in the
//! computer (`dir -> /proc/self/fd/3`) would start the script in the
//! host's filesystem. `cd -P` as uid 1000 resolves links with the sandbox
//! user's rights inside the sandbox's own mount namespace, as the script
//! itself would.

use std::io::{Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;

/// The whole environment of `bwrap` and `setpriv`, and the variables the
/// sandbox's shell starts with (the caller's and the run's own come on
/// top): values chosen by the agent, none influencing how a program is
/// loaded.
pub const BASE_ENV: &[(&str, &str)] = &[
    ("PATH", crate::local::PATH),
    ("HOME", crate::WORKSPACE),
    ("USER", agentcomputer_runtime_contract::SANDBOX_USER),
    ("LOGNAME", agentcomputer_runtime_contract::SANDBOX_USER),
    ("TMPDIR", "/tmp"),
    ("LANG", "C.UTF-8"),
];

/// The launcher's own array: refused as a caller's variable name.
pub const RESERVED: &str = "AGENTCOMPUTER_LAUNCH";

/// Variables bash keeps read-only for itself (bash(1), "Shell
/// Variables"): a caller cannot set them for the script.
const BASH_READONLY: &[&str] = &[
    "BASHOPTS",
    "BASH_VERSINFO",
    "EUID",
    "PPID",
    "SHELLOPTS",
    "UID",
];

/// Why a run's environment or script cannot be handed to the sandbox's
/// shell; the message names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Checks that the shell can set `name` for the script: a shell name
/// (letters, digits and `_`, not starting with a digit; POSIX.1-2017 XBD
/// 3.235) that bash does not keep read-only. Errors: [`Refused`] naming it.
pub fn check_name(name: &str) -> Result<(), Refused> {
    let mut chars = name.chars();
    let shell_name = chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if !shell_name {
        return Err(Refused(format!(
            "env entry {name:?} is not a shell variable name (letters, digits and '_', not starting \
             with a digit); the container runtime sets the caller's variables in the sandbox's shell"
        )));
    }
    if name == RESERVED {
        return Err(Refused(format!(
            "env entry {name:?} is reserved for the container runtime's launcher"
        )));
    }
    if BASH_READONLY.contains(&name) {
        return Err(Refused(format!(
            "env entry {name:?} is a read-only variable of bash and cannot be set for the script"
        )));
    }
    Ok(())
}

/// The memfd's bytes for a run in `cwd` (an absolute path inside the
/// sandbox) with `env` (in order; later entries win) and `script`.
/// Errors: a name [`check_name`] refuses, or a NUL byte in the working
/// directory, a value or the script (a shell variable cannot hold one).
pub fn payload(cwd: &str, env: &[(String, String)], script: &str) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::with_capacity(cwd.len() + script.len() + 64 * env.len() + 2);
    if cwd.contains('\0') {
        return Err(Refused(format!(
            "the working directory {cwd:?} holds a NUL byte"
        )));
    }
    out.extend_from_slice(cwd.as_bytes());
    out.push(0);
    for (name, value) in env {
        check_name(name)?;
        if value.contains('\0') {
            return Err(Refused(format!("env entry {name:?} holds a NUL byte")));
        }
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    if script.contains('\0') {
        return Err(Refused(
            "the script holds a NUL byte, which bash cannot read".into(),
        ));
    }
    out.extend_from_slice(script.as_bytes());
    // The script's record ends like the others, so an empty script is a
    // record too.
    out.push(0);
    Ok(out)
}

/// A close-on-exec memfd holding `payload`, at offset 0.
pub fn memfd(payload: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(
        "agentcomputer-script",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(payload)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// The `bash -c` text that reads the payload from descriptor `fd`, enters
/// the working directory (exit status 125 with a message when it cannot),
/// sets the environment and runs the script. One line, so that the
/// script's `LINENO` counts from 1; linear in the payload's size. Only
/// [`RESERVED`] is set while the caller's variables are exported, and the
/// script's first statement unsets it.
pub fn launcher(fd: i32) -> String {
    let a = RESERVED;
    format!(
        "{{ mapfile -d '' -u {fd} {a} && exec {fd}<&-; }} || exit 125; \
         {{ cd -P -- \"${{{a}[0]}}\" || {{ echo \"container: cannot enter the working directory ${{{a}[0]}}\" >&2; exit 125; }}; }} && \
         {{ [ \"${{#{a}[@]}}\" -lt 3 ] || export -- \"${{{a}[@]:1:${{#{a}[@]}}-2}}\" || exit 125; }} && \
         eval \"unset {a}; ${{{a}[-1]}}\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn run(env: &[(&str, &str)], script: &str) -> (String, i32) {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let fd = memfd(&payload("/", &env, script).unwrap()).unwrap();
        use std::os::fd::AsRawFd;
        let raw = fd.as_raw_fd();
        let mut cmd = Command::new("/bin/bash");
        cmd.arg("-c")
            .arg(launcher(raw))
            .arg("/bin/bash")
            .env_clear();
        for (k, v) in BASE_ENV {
            cmd.env(k, v);
        }
        use std::os::unix::process::CommandExt;
        // SAFETY: fcntl is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(raw, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code().unwrap_or(-1),
        )
    }

    #[test]
    fn the_script_runs_as_under_bash_c_with_the_callers_variables() {
        let script = "echo \"$0 $# $LINENO\"\necho \"$LINENO [$A] [$t] [$B]\"\nbash -c 'echo child:$A'\nexit 7";
        let (out, code) = run(&[("A", "x y\n'z'"), ("t", "mine"), ("B", "$(id)")], script);
        assert_eq!(
            out,
            "/bin/bash 0 1\n2 [x y\n'z'] [mine] [$(id)]\nchild:x y 'z'\n"
        );
        assert_eq!(code, 7);
    }

    #[test]
    fn the_descriptor_is_closed_before_the_script_runs() {
        let (out, _) = run(
            &[],
            "ls -l /proc/$$/fd /proc/self/fd | grep -c memfd:agentcomputer-script",
        );
        assert_eq!(out.trim(), "0");
    }

    #[test]
    fn later_entries_win_and_an_empty_value_is_kept() {
        let (out, _) = run(
            &[("V", "1"), ("V", "2"), ("E", "")],
            "echo \"$V\" \"${E-unset}\"; env | grep -c '^E=$'",
        );
        assert_eq!(out, "2 \n1\n");
    }

    #[test]
    fn a_callers_ifs_and_ten_thousand_variables_are_all_set() {
        let (out, code) = run(
            &[("IFS", "2"), ("A", "a"), ("Z", "z")],
            "echo \"[$A] [$Z]\"",
        );
        assert_eq!((out.as_str(), code), ("[a] [z]\n", 0));
        let many: Vec<(String, String)> = (0..10_000)
            .map(|i| (format!("V_{i}"), i.to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (out, _) = run(&refs, "env | grep -c '^V_'; echo \"$V_9999\"");
        assert_eq!(out, "10000\n9999\n");
    }

    #[test]
    fn a_working_directory_that_cannot_be_entered_ends_the_run_with_125() {
        let env: Vec<(String, String)> = Vec::new();
        let fd = memfd(&payload("/nonexistent-dir", &env, "echo ran").unwrap()).unwrap();
        use std::os::fd::AsRawFd;
        let raw = fd.as_raw_fd();
        let mut cmd = Command::new("/bin/bash");
        cmd.arg("-c").arg(launcher(raw)).arg("/bin/bash");
        use std::os::unix::process::CommandExt;
        // SAFETY: fcntl is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                libc::fcntl(raw, libc::F_SETFD, 0);
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(out.stdout.is_empty());
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("container: cannot enter the working directory /nonexistent-dir")
        );
    }

    #[test]
    fn names_the_shell_cannot_set_are_refused_with_the_name() {
        for bad in [
            "",
            "1A",
            "a-b",
            "a.b",
            "BASH_FUNC_f%%",
            "SHELLOPTS",
            "UID",
            RESERVED,
        ] {
            let e = payload("/", &[(bad.to_string(), "v".to_string())], "true").unwrap_err();
            assert!(e.0.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(payload("/", &[], "echo a\0b").is_err());
        assert!(payload("/\0", &[], "true").is_err());
        assert!(payload("/", &[("A".into(), "a\0".into())], "true").is_err());
        assert!(payload("/", &[("_a1".into(), "v".into())], "true").is_ok());
    }
}
