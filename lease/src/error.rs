//! What can go wrong: acquiring a Lease, and holding it.

use k8s_openapi::jiff::Timestamp;

/// Why [`crate::LeaseLock::acquire`] did not take the Lease.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    /// Another identity holds the Lease and has renewed it recently: it is
    /// free at `until` (its `renewTime + leaseDurationSeconds`) unless
    /// renewed again, or earlier if released.
    #[error("held by {holder} until {until}")]
    Held {
        /// The holder's identity (`spec.holderIdentity`).
        holder: String,
        /// When the Lease expires unless renewed.
        until: Timestamp,
    },
    /// Another candidate wrote the Lease between this one's read and write
    /// (409 Conflict): it most likely took the Lease. Retry to find out.
    #[error("lost a race for the lease: another candidate wrote it first")]
    Race,
    /// The API server refused or could not be reached (anything but 409).
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// Why a held Lease is no longer valid. Once lost it stays lost: the owner
/// must acquire the Lease again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// No renew succeeded within the renew deadline (the API server was
    /// unreachable, slow or refusing); another candidate may take the Lease
    /// once its lease duration has passed.
    #[error("lease not renewed within the renew deadline")]
    RenewDeadline,
    /// At a renew, another identity held the Lease.
    #[error("lease taken over by {0}")]
    TakenBy(String),
    /// At a renew, the Lease had been deleted or released by someone else.
    #[error("lease deleted or released by someone else")]
    Gone,
    /// This holder released the Lease, or dropped its [`crate::HeldLease`].
    #[error("lease released by its holder")]
    Released,
}
