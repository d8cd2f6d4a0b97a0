//! Errors of a reconcile.

/// Why a reconcile failed. Every variant is retried with backoff by the
/// controller; the `reason` label of the error metric comes from [`Error::reason`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The finalizer helper failed (it wraps apply/cleanup errors).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The object lacks something the API server always sets (namespace, uid).
    #[error("object is missing {0}")]
    MissingField(&'static str),
    /// Serializing an object to apply failed.
    #[error("serialize: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The operator's configuration does not match the cluster (e.g. the
    /// node agents' Service is headless).
    #[error("configuration: {0}")]
    Config(String),
    /// The spec is one the node agent would refuse (the CRD's schema should
    /// have stopped it); nothing is applied for it.
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// Steps of a reconcile failed (in the order they ran); the steps
    /// independent of them ran.
    #[error("{}", crate::steps::describe_all(.0))]
    Steps(Vec<crate::steps::StepFailure>),
    /// A node agent could not be reached or refused a call.
    #[error("node agent: {0}")]
    Agent(String),
}

impl Error {
    /// Short, low-cardinality label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 422 => "invalid",
            Error::Kube(kube::Error::Api(s)) if s.code == 403 => "forbidden",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(inner)
                | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner.reason(),
                _ => "finalizer",
            },
            Error::MissingField(_) => "missing-field",
            Error::Serialize(_) => "serialize",
            Error::Config(_) => "config",
            Error::InvalidSpec(_) => "invalid-spec",
            Error::Steps(f) => f.first().map_or("steps", |f| f.error.reason()),
            Error::Agent(_) => "agent",
        }
    }

    /// `(step, reason)` pairs for the error metric: one per failed step;
    /// an error outside the steps counts under `step="reconcile"`.
    pub fn labels(&self) -> Vec<(&'static str, &'static str)> {
        match self {
            Error::Steps(f) => f
                .iter()
                .map(|f| (f.step.as_str(), f.error.reason()))
                .collect(),
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(inner)
                | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner.labels(),
                _ => vec![("finalizer", self.reason())],
            },
            other => vec![("reconcile", other.reason())],
        }
    }
}

/// Result of the operator's fallible functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// True when the API answered 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
