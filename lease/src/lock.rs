//! A candidate for one Lease: its name, the identity that wants it, the
//! timing, and what a created Lease carries (labels, owner).

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::record::{self, Holder};
use crate::{AcquireError, HeldLease, Timing, TimingError};

/// One candidate (`identity`) for the Lease `name` in the namespace of an
/// `Api<Lease>`. Cheap to clone; holds no Lease by itself.
#[derive(Clone)]
pub struct LeaseLock {
    pub(crate) api: Api<Lease>,
    pub(crate) name: String,
    pub(crate) identity: String,
    pub(crate) timing: Timing,
    labels: BTreeMap<String, String>,
    owner: Option<OwnerReference>,
}

/// Whether a Kubernetes error is 404 Not Found.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a Kubernetes error is 409 Conflict (stale resourceVersion, or a
/// create of an existing object).
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaseLock {
    /// A candidate `identity` (a pod or node name: unique among the
    /// candidates) for the Lease `name`. Errors: `timing` fails
    /// [`Timing::validate`].
    pub fn new(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Result<Self, TimingError> {
        timing.validate()?;
        Ok(LeaseLock {
            api,
            name: name.into(),
            identity: identity.into(),
            timing,
            labels: BTreeMap::new(),
            owner: None,
        })
    }

    /// Labels the Lease carries, so that Leases of one kind can be listed
    /// and cleaned up by selector. Written when this candidate creates or
    /// takes the Lease (added to the labels already there).
    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// An owner of the Lease (e.g. the object it guards), so that the
    /// garbage collector deletes it with its owner. Added when this
    /// candidate creates or takes the Lease, unless an owner with the same
    /// uid is there.
    pub fn with_owner(mut self, owner: OwnerReference) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timing the Lease is held with.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// One attempt to take the Lease: it is taken when absent (created),
    /// released, expired, or already held by this identity (e.g. before a
    /// restart). The returned holder is valid for the renew deadline from
    /// the start of this attempt and renews in the background (a task on
    /// the current Tokio runtime). Errors: [`AcquireError::Held`] when
    /// another identity holds it, [`AcquireError::Race`] when another
    /// candidate wrote it first, [`AcquireError::Api`] for other failures.
    /// Holders of one identity are not told apart: keep at most one
    /// [`HeldLease`] per Lease and identity.
    pub async fn acquire(&self) -> Result<HeldLease, AcquireError> {
        let started = Instant::now();
        let now = Timestamp::now();
        let seconds = self.timing.lease_duration_seconds();
        let written = match self.api.get_opt(&self.name).await? {
            None => {
                let fresh = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(record::fresh(&self.identity, now, seconds)),
                };
                self.create(self.stamp(fresh)).await?
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(Default::default);
                if let Holder::Other { holder, until } = record::holder(spec, &self.identity, now) {
                    return Err(AcquireError::Held { holder, until });
                }
                record::take(spec, &self.identity, now, seconds);
                match self.replace(&self.stamp(lease)).await {
                    Ok(l) => l,
                    Err(e) if is_conflict(&e) => return Err(AcquireError::Race),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        tracing::debug!(lease = %self.name, identity = %self.identity, "lease acquired");
        Ok(HeldLease::start(
            self.clone(),
            written,
            started + self.timing.renew_deadline,
        ))
    }

    /// Clears the Lease's holder if this identity holds it, so that another
    /// candidate takes it at once; for an identity that holds the Lease
    /// without a [`HeldLease`] (e.g. after a restart). Ok(false) when it
    /// was not held by this identity (or absent). Errors: API failures; a
    /// conflict when the Lease kept changing.
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let mut tries = 0;
        loop {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(false);
            };
            if record::holder_identity(spec) != Some(self.identity.as_str()) {
                return Ok(false);
            }
            record::clear(spec);
            match self.replace(&lease).await {
                Ok(_) => return Ok(true),
                Err(e) if is_conflict(&e) && tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Adds this candidate's labels and owner to `lease`.
    fn stamp(&self, mut lease: Lease) -> Lease {
        let meta = &mut lease.metadata;
        if !self.labels.is_empty() {
            let labels = meta.labels.get_or_insert_with(Default::default);
            labels.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(owner) = &self.owner {
            let owners = meta.owner_references.get_or_insert_with(Default::default);
            if !owners.iter().any(|o| o.uid == owner.uid) {
                owners.push(owner.clone());
            }
        }
        lease
    }

    async fn create(&self, lease: Lease) -> Result<Lease, AcquireError> {
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(l) => Ok(l),
            Err(e) if is_conflict(&e) => Err(AcquireError::Race),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the Lease, guarded by `lease`'s resourceVersion.
    pub(crate) async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
    }
}
