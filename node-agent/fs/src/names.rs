//! Validation of directory entry names (raw bytes).

use crate::{Errno, NAME_MAX, Result};

/// What one name given to an inode-level call denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name<'a> {
    /// An ordinary entry name.
    Normal(&'a [u8]),
    /// `.`: the directory itself.
    Dot,
    /// `..`: the directory's parent.
    DotDot,
    /// `/`: the root itself, as returned by `resolve_parent("/")`
    /// (Linux's `LAST_ROOT`).
    Root,
}

/// Classifies `name`: `ENOENT` if empty (as Linux for `""`), `ENAMETOOLONG`
/// past [`NAME_MAX`] bytes, `EINVAL` if it holds `/` or NUL.
pub(crate) fn classify(name: &[u8]) -> Result<Name<'_>> {
    match name {
        b"" => Err(Errno::ENOENT.into()),
        b"/" => Ok(Name::Root),
        b"." => Ok(Name::Dot),
        b".." => Ok(Name::DotDot),
        _ if name.len() > NAME_MAX => Err(Errno::ENAMETOOLONG.into()),
        _ if name.iter().any(|&b| b == b'/' || b == 0) => Err(Errno::EINVAL.into()),
        _ => Ok(Name::Normal(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_names() {
        assert_eq!(classify(b"a").unwrap(), Name::Normal(b"a"));
        assert_eq!(classify(b".").unwrap(), Name::Dot);
        assert_eq!(classify(b"..").unwrap(), Name::DotDot);
        assert_eq!(classify(b"/").unwrap(), Name::Root);
        assert_eq!(classify(b"...").unwrap(), Name::Normal(b"..."));
        assert_eq!(classify(b"").unwrap_err().errno(), Errno::ENOENT);
        assert_eq!(classify(b"a/b").unwrap_err().errno(), Errno::EINVAL);
        assert_eq!(classify(b"a\0b").unwrap_err().errno(), Errno::EINVAL);
        assert!(classify(&[b'x'; 255]).is_ok());
        assert_eq!(
            classify(&[b'x'; 256]).unwrap_err().errno(),
            Errno::ENAMETOOLONG
        );
    }
}
