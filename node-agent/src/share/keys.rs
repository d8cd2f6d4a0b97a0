//! Each computer's share-link key: the secret its links are signed with
//! ([`super::sign`]), kept in the computer's own directory.

use std::io;
use std::path::Path;

use crate::blocking::blocking;
use crate::computer::SETTINGS_FILE;
use crate::private;
use crate::registry::{Registry, RegistryError};

/// The secret of computer `name` that signs its share links
/// ([`crate::share`]): [`SHARE_KEY_BYTES`] random bytes kept in
/// `computers/<name>/share.key` (`0600`). Being in the computer's own
/// directory, it goes when the computer is deleted, and with it every
/// link it signed; a computer made again under the same name gets a new
/// one. With `create`, a missing key is made (under the computer's lock,
/// so never for a computer being deleted); without, a missing key or
/// computer is `Ok(None)`. Errors: `InvalidName`, `NotFound` (with
/// `create`), `Io` for a key file that cannot be read or written or
/// has the wrong length.
pub async fn share_key(
    registry: &Registry,
    name: &str,
    create: bool,
) -> Result<Option<[u8; SHARE_KEY_BYTES]>, RegistryError> {
    let dir = registry.computer_dir(name)?;
    let owned = name.to_string();
    let io_err = move |source| RegistryError::Io {
        name: owned.clone(),
        source,
    };
    if !create {
        return blocking(move || read_share_key(&dir)).await.map_err(io_err);
    }
    let _guard = registry.lock_computer(name).await;
    if !dir.join(SETTINGS_FILE).exists() {
        return Err(RegistryError::NotFound(name.to_string()));
    }
    blocking(move || {
        if let Some(key) = read_share_key(&dir)? {
            return Ok(Some(key));
        }
        let mut key = [0u8; SHARE_KEY_BYTES];
        rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut key)
            .map_err(io::Error::other)?;
        // Written aside, synced, then renamed: a reader sees no key or
        // the whole key.
        let tmp = dir.join(format!(".{SHARE_KEY_FILE}.tmp"));
        {
            use std::io::Write;
            let mut f = private::create_file(&tmp)?;
            f.write_all(&key)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(SHARE_KEY_FILE))?;
        Ok(Some(key))
    })
    .await
    .map_err(io_err)
}

pub use crate::layout::SHARE_KEY_FILE;

/// Bytes in a share-link key (256 bits, the output size of SHA-256, as
/// RFC 2104 section 3 recommends for an HMAC key at least).
pub const SHARE_KEY_BYTES: usize = 32;

/// The share-link key in computer directory `dir`, `None` when the file
/// (or the directory) is missing.
fn read_share_key(dir: &Path) -> io::Result<Option<[u8; SHARE_KEY_BYTES]>> {
    match std::fs::read(dir.join(SHARE_KEY_FILE)) {
        Ok(bytes) => bytes.try_into().map(Some).map_err(|bytes: Vec<u8>| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{SHARE_KEY_FILE} holds {} bytes, not {SHARE_KEY_BYTES}",
                    bytes.len()
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
