//! One holder of a Kubernetes Lease (`coordination.k8s.io/v1`), for leader
//! election and for fencing writes.
//!
//! A [`LeaseLock`] names a Lease, the identity that wants it and the
//! [`Timing`] it is held with. [`LeaseLock::acquire`] makes one attempt and
//! returns a [`HeldLease`], which renews the Lease in a background task and
//! answers, synchronously and cheaply, whether the holder may still act
//! ([`HeldLease::valid`], and the clonable [`Fence`] for other tasks).
//!
//! The protocol is client-go's `tools/leaderelection` over a Lease lock:
//! - the Lease is free when absent, released (empty `holderIdentity`) or
//!   expired (`renewTime + leaseDurationSeconds` in the past); a free Lease,
//!   or one already held by the same identity, is taken by writing the
//!   identity and the times into it;
//! - every write is a replace guarded by resourceVersion (or a create), so of
//!   two candidates racing for one Lease exactly one wins: the other gets 409;
//! - the holder rewrites `renewTime` every retry period. Its validity ends at
//!   the **renew deadline** after the start of its last successful renew,
//!   which is shorter than the lease duration, so it stops acting before any
//!   other candidate may take the Lease over; once lost it stays lost;
//! - a clean stop clears `holderIdentity` ([`HeldLease::release`]), so
//!   another candidate takes the Lease at once instead of after expiry.
//!
//! Expiry is judged on the `renewTime` the holder wrote, against the
//! candidate's clock: clocks are assumed to agree to well within
//! `lease_duration - renew_deadline` (5 s with the defaults).

mod error;
mod fence;
mod held;
mod lock;
mod record;
mod renew;
mod timing;

pub use error::{AcquireError, Lost};
pub use fence::Fence;
pub use held::HeldLease;
pub use lock::LeaseLock;
pub use timing::{Timing, TimingError};
