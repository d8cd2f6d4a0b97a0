//! Cluster mode's tie between share links and credentials: a computer's
//! link key is derived with the fingerprint of its current credential
//! (`status.credentialHash`, as the node's [`Index`] holds it), so rotating
//! the credential revokes every link made before, and a computer with no
//! published fingerprint can have no links.

use std::sync::Arc;

use super::index::Index;
use crate::share::KeyBinding;

/// The [`KeyBinding`] of cluster mode over the node's [`Index`].
pub struct CredentialBinding {
    index: Arc<Index>,
}

impl CredentialBinding {
    /// The binding over `index`.
    pub fn new(index: Arc<Index>) -> CredentialBinding {
        CredentialBinding { index }
    }
}

impl KeyBinding for CredentialBinding {
    /// The credential fingerprint of the computer with uid `computer`;
    /// `None` for a computer not placed here or with no fingerprint.
    fn binding(&self, computer: &str) -> Option<Vec<u8>> {
        self.index.get(computer)?.credential.map(|c| c.to_vec())
    }
}
