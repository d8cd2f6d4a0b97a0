//! `tar`'s diagnostics, worded as GNU tar words them.

use agentcomputer_archive::ArchiveError;

/// Exit status of a fatal error, as GNU tar's.
pub(super) const EXIT_FATAL: i32 = 2;

/// GNU tar's last line after a fatal error.
pub(super) const NOT_RECOVERABLE: &str = "tar: Error is not recoverable: exiting now\n";

/// GNU tar's last line after errors it went on past.
pub(super) const FAILED_BEFORE: &str = "tar: Exiting with failure status due to previous errors\n";

/// The `strerror` text of an engine error ("No space left on device").
pub(super) fn strerror(e: &agentcomputer_fs::Error) -> String {
    crate::errno::io_error(e.errno()).to_string()
}

/// The lines reporting `e`, ending with [`NOT_RECOVERABLE`]; `entries` is
/// how many entries were read before it (none: the input may not be an
/// archive at all).
///
/// - engine errors: `tar: NAME: Cannot open: No space left on device`
/// - refused entries: `tar: NAME: refused: a `..` component`
/// - broken input: `tar: This does not look like a tar archive (...)`
///   before any entry, `tar: NAME: the stream ended after ...` inside one
pub(super) fn fatal(e: &ArchiveError, entries: u64) -> String {
    let first = match e {
        ArchiveError::Fs { name, error } => {
            format!("tar: {name}: Cannot open: {}", strerror(error))
        }
        ArchiveError::Refused { name, why } => format!("tar: {name}: refused: {why}"),
        ArchiveError::Malformed {
            name: Some(name),
            detail,
        } => format!("tar: {name}: {detail}"),
        ArchiveError::Malformed { name: None, detail } if entries == 0 => {
            format!("tar: This does not look like a tar archive ({detail})")
        }
        ArchiveError::Malformed { name: None, detail } => format!("tar: {detail}"),
        ArchiveError::Io(e) => format!("tar: {e}"),
    };
    format!("{first}\n{NOT_RECOVERABLE}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::Errno;

    #[test]
    fn errors_read_as_gnu_tar_writes_them() {
        let e = ArchiveError::Fs {
            name: "a/b".into(),
            error: Errno::ENOSPC.into(),
        };
        assert_eq!(
            fatal(&e, 3),
            "tar: a/b: Cannot open: No space left on device\n\
             tar: Error is not recoverable: exiting now\n"
        );
        let e = ArchiveError::Malformed {
            name: None,
            detail: "x".into(),
        };
        assert!(fatal(&e, 0).starts_with("tar: This does not look like a tar archive (x)\n"));
    }
}
