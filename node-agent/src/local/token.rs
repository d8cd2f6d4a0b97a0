//! The agent token of local mode: one secret, kept in `<data-dir>/token`,
//! that every API call must carry.
//!
//! The file holds 32 random bytes from the operating system as 64 lowercase
//! hex characters and a newline, mode `0600`. It is made once and kept
//! across restarts, so clients keep working after the agent restarts; delete
//! it (with the agent stopped) to get a new one. Whoever can read the file
//! can use every computer of the agent: the data directory is private to the
//! agent's user ([`crate::private`]), so that is that user (and root).

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rand::TryRngCore;
use subtle::ConstantTimeEq;
use tonic::Status;

use crate::auth::Authorizer;
use crate::private;

/// Name of the token file inside the data directory.
pub const TOKEN_FILE: &str = crate::layout::TOKEN_FILE;

/// Random bytes in a token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// What an unauthenticated client is told about finding the token. It does
/// not name the data directory: the address may be reachable by others.
pub const HOW_TO_AUTHENTICATE: &str = "kubectl-computer reads the agent token from the file `token` in the agent's data directory \
     (AGENTCOMPUTER_DATA_DIR, default ~/.local/share/agentcomputer) for a loopback endpoint, \
     or from --token, AGENTCOMPUTER_TOKEN or AGENTCOMPUTER_TOKEN_FILE; \
     other clients send `authorization: Bearer <token>`";

/// Why the token could not be loaded or made. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file exists but does not hold a token.
    #[error(
        "bad agent token file {path}: {reason}; it must hold {} lowercase hex characters (stop the agent and delete the file to make a new token)",
        TOKEN_BYTES * 2
    )]
    Malformed { path: PathBuf, reason: String },
    /// Reading or writing the file failed.
    #[error("agent token file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The operating system's random source failed.
    #[error("cannot make an agent token: no randomness: {0}")]
    Random(String),
}

/// The agent token: the [`Authorizer`] of local mode. Every call needs it;
/// then any computer may be used and computers may be managed.
#[derive(Clone)]
pub struct AgentToken {
    token: String,
}

impl std::fmt::Debug for AgentToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentToken(<redacted>)")
    }
}

impl AgentToken {
    /// The token of `data_dir`: read from `<data_dir>/token`, or made and
    /// written there if the file does not exist. `data_dir` must exist.
    ///
    /// A new token is written to a temporary file (`0600`, `O_EXCL`), synced
    /// and then hard-linked to its name, so a reader never sees a partly
    /// written token and two agents starting at once end up with the same
    /// one. Errors: [`TokenError::Malformed`] for an existing file that does
    /// not hold a token (it is left as it is), [`TokenError::Io`] naming the
    /// file, [`TokenError::Random`].
    pub fn load_or_create(data_dir: &Path) -> Result<AgentToken, TokenError> {
        let path = data_dir.join(TOKEN_FILE);
        match read(&path) {
            Err(TokenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            }
            other => return other,
        }
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::rngs::OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| TokenError::Random(e.to_string()))?;
        let token = hex::encode(bytes);
        let tmp = data_dir.join(format!(".{TOKEN_FILE}.{}", std::process::id()));
        let io = |source| TokenError::Io {
            path: path.clone(),
            source,
        };
        let written = (|| {
            let _ = std::fs::remove_file(&tmp);
            let mut f = private::create_new_file(&tmp)?;
            f.write_all(format!("{token}\n").as_bytes())?;
            f.sync_all()?;
            std::fs::hard_link(&tmp, &path)
        })();
        let _ = std::fs::remove_file(&tmp);
        match written {
            Ok(()) => {
                std::fs::File::open(data_dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io)?;
                tracing::info!(path = %path.display(), "made a new agent token");
                Ok(AgentToken { token })
            }
            // Another agent made it first: use that one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
            Err(e) => Err(io(e)),
        }
    }

    /// The token's text (64 hex characters), to hand to a client.
    pub fn expose(&self) -> &str {
        &self.token
    }

    /// Checks a call's token in constant time. Errors: `UNAUTHENTICATED`,
    /// saying whether the token was missing or wrong and how to find it.
    pub fn check(&self, given: Option<&str>) -> Result<(), Status> {
        match given {
            None => Err(Status::unauthenticated(format!(
                "this node agent needs its agent token: {HOW_TO_AUTHENTICATE}"
            ))),
            Some(t) if bool::from(t.as_bytes().ct_eq(self.token.as_bytes())) => Ok(()),
            Some(_) => Err(Status::unauthenticated(format!(
                "wrong agent token for this node agent: {HOW_TO_AUTHENTICATE}"
            ))),
        }
    }
}

impl Authorizer for AgentToken {
    fn computer(&self, requested: &str, token: Option<&str>) -> Result<String, Status> {
        self.check(token)?;
        Ok(requested.to_string())
    }

    fn manage(&self, token: Option<&str>) -> Result<(), Status> {
        self.check(token)
    }
}

/// Reads and validates the token file at `path` (not following a symlink).
fn read(path: &Path) -> Result<AgentToken, TokenError> {
    let io = |source| TokenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(io)?;
    let mut text = String::new();
    // One byte more than a valid file holds, so a long file is caught.
    (&mut f)
        .take(TOKEN_BYTES as u64 * 2 + 2)
        .read_to_string(&mut text)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => TokenError::Malformed {
                path: path.to_path_buf(),
                reason: "not UTF-8 text".into(),
            },
            _ => io(e),
        })?;
    let token = text.strip_suffix('\n').unwrap_or(&text);
    let malformed = |reason: String| TokenError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    if token.len() != TOKEN_BYTES * 2 {
        return Err(malformed(if text.len() > TOKEN_BYTES * 2 + 1 {
            "it is too long".into()
        } else {
            format!("it holds {} characters", token.len())
        }));
    }
    if let Some(c) = token.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(malformed(format!("it holds {c:?}")));
    }
    Ok(AgentToken {
        token: token.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = AgentToken::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(TOKEN_FILE);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", a.expose())
        );
        assert_eq!(a.expose().len(), 64);
        let b = AgentToken::load_or_create(dir.path()).unwrap();
        assert_eq!(a.expose(), b.expose());
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // Another directory gets another token.
        let other = tempfile::tempdir().unwrap();
        let c = AgentToken::load_or_create(other.path()).unwrap();
        assert_ne!(a.expose(), c.expose());
    }

    #[test]
    fn bad_files_are_errors_naming_the_file_and_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        let cases: [(&[u8], &str); 5] = [
            (b"", "it holds 0 characters"),
            (b"abc\n", "it holds 3 characters"),
            (&[b'A'; 64], "it holds 'A'"),
            (&[b'a'; 80], "it is too long"),
            (&[0xff; 64], "not UTF-8"),
        ];
        for (content, reason) in cases {
            std::fs::write(&path, content).unwrap();
            let err = AgentToken::load_or_create(dir.path()).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, TokenError::Malformed { .. }), "{msg}");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains(reason), "{msg}");
            assert_eq!(std::fs::read(&path).unwrap(), content);
        }
        // A symlink is not followed.
        std::fs::remove_file(&path).unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, format!("{}\n", "a".repeat(64))).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = AgentToken::load_or_create(dir.path()).unwrap_err();
        assert!(matches!(err, TokenError::Io { .. }), "{err}");
    }

    #[test]
    fn check_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let t = AgentToken::load_or_create(dir.path()).unwrap();
        assert!(t.check(Some(t.expose())).is_ok());
        assert!(t.manage(Some(t.expose())).is_ok());
        assert_eq!(t.computer("demo", Some(t.expose())).unwrap(), "demo");
        let missing = t.check(None).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::Unauthenticated);
        assert!(missing.message().contains("needs its agent token"));
        assert!(missing.message().contains("AGENTCOMPUTER_TOKEN"));
        let wrong = t.computer("demo", Some(&"0".repeat(64))).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(wrong.message().starts_with("wrong agent token"));
        let prefix = &t.expose()[..63];
        assert!(t.check(Some(prefix)).is_err());
        assert!(t.check(Some(&format!("{}0", t.expose()))).is_err());
        assert!(!format!("{t:?}").contains(t.expose()));
    }
}
