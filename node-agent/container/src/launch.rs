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
//! The memfd holds `NAME=VALUE\0` records, an empty record (`\0`), then
//! the script's bytes to the end. [`launcher`] is the fixed `bash -c`
//! text that reads them: it reads every record before exporting any (so
//! no caller variable can change how the rest is read), closes the
//! descriptor, exports the records in order and `eval`s the script on its
//! first line, so `$0`, `$#`, `LINENO` and `exit` behave as under
//! `bash -c SCRIPT`.

use std::io::{Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;

/// The whole environment of `bwrap` and `setpriv`, and the variables the
/// sandbox's shell starts with (the caller's and the run's own come on
/// top): values chosen by the agent, none influencing how a program is
/// loaded.
pub const BASE_ENV: &[(&str, &str)] = &[
    ("PATH", crate::local::PATH),
    ("HOME", crate::WORKSPACE),
    ("USER", "computer"),
    ("LOGNAME", "computer"),
    ("TMPDIR", "/tmp"),
    ("LANG", "C.UTF-8"),
];

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
    if BASH_READONLY.contains(&name) {
        return Err(Refused(format!(
            "env entry {name:?} is a read-only variable of bash and cannot be set for the script"
        )));
    }
    Ok(())
}

/// The memfd's bytes for `env` (in order; later entries win) and
/// `script`. Errors: a name [`check_name`] refuses, or a NUL byte in a
/// value or the script (a shell variable cannot hold one).
pub fn payload(env: &[(String, String)], script: &str) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::with_capacity(script.len() + 64 * env.len() + 1);
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
    out.push(0);
    if script.contains('\0') {
        return Err(Refused(
            "the script holds a NUL byte, which bash cannot read".into(),
        ));
    }
    out.extend_from_slice(script.as_bytes());
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

/// The `bash -c` text that reads the payload from descriptor `fd`, sets
/// the environment and runs the script. One line, so that the script's
/// `LINENO` counts from 1. It holds no variable of its own while the
/// caller's are exported: the records wait in the positional parameters,
/// which `eval`'s first statement empties.
pub fn launcher(fd: i32) -> String {
    format!(
        "while IFS= read -r -d '' -u {fd} t && [ -n \"$t\" ]; do set -- \"$@\" \"$t\"; done; \
         IFS= read -r -d '' -u {fd} t; exec {fd}<&-; set -- \"$t\" \"$@\"; unset t; \
         while [ $# -gt 1 ]; do export -- \"$2\" || exit 125; set -- \"$1\" \"${{@:3}}\"; done; \
         eval \"set --; $1\""
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
        let fd = memfd(&payload(&env, script).unwrap()).unwrap();
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
    fn names_the_shell_cannot_set_are_refused_with_the_name() {
        for bad in ["", "1A", "a-b", "a.b", "BASH_FUNC_f%%", "SHELLOPTS", "UID"] {
            let e = payload(&[(bad.to_string(), "v".to_string())], "true").unwrap_err();
            assert!(e.0.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(payload(&[], "echo a\0b").is_err());
        assert!(payload(&[("A".into(), "a\0".into())], "true").is_err());
        assert!(payload(&[("_a1".into(), "v".into())], "true").is_ok());
    }
}
