//! The steps of one reconcile, one module each, and what a failed step
//! leaves behind.
//!
//! A reconcile of a live computer ([`crate::controller::apply`]) runs, in
//! order: the [`claim`] check (a claim of its name kept by an earlier
//! computer blocks it), [`place`]ment, then the [`credential`],
//! [`volume`], [`egress`] and [`sandbox`] steps; then derives the status
//! ([`crate::status::derive`], a pure function), publishes its
//! [`events`] and writes the [`status`]. A deleted computer runs
//! [`cleanup`].
//!
//! Placement failing ends the reconcile; each later step that fails is
//! recorded as a [`StepFailure`] and the independent steps after it still
//! run: the egress policy is applied even when the volume step fails. Only
//! the sandbox step depends on others (its pod needs the credential, the
//! claim, and the egress policy that confines it), so it is skipped,
//! leaving any live pod as it is, when one of them failed.

pub mod claim;
pub mod cleanup;
pub mod credential;
pub mod egress;
pub mod events;
pub mod place;
pub mod relocation;
pub mod sandbox;
pub mod source;
pub mod status;
pub mod volume;

use std::fmt;

use crate::error::Error;

/// One step of a reconcile; its [`Step::as_str`] is the `step` label of
/// `agentcomputer_operator_reconcile_errors_total` and the step named in
/// the `Reconciled` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The checks of the spec the node agent makes ([`crate::spec_check`]).
    Spec,
    /// Finalizer, kept-claim check, node choice and the node label.
    Placement,
    /// The credential Secret.
    Credential,
    /// The PersistentVolumeClaim and PersistentVolume.
    Volume,
    /// The sandbox's NetworkPolicy.
    Egress,
    /// The sandbox Pod.
    Sandbox,
    /// The status subresource.
    Status,
    /// Releasing a deleted computer's objects.
    Cleanup,
}

impl Step {
    /// Lower-case name (`placement`, `credential`, `volume`, `egress`,
    /// `sandbox`, `status`, `cleanup`, and `spec` for the spec's own checks).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Spec => "spec",
            Step::Placement => "placement",
            Step::Credential => "credential",
            Step::Volume => "volume",
            Step::Egress => "egress",
            Step::Sandbox => "sandbox",
            Step::Status => "status",
            Step::Cleanup => "cleanup",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step that failed, with the error it failed with.
#[derive(Debug)]
pub struct StepFailure {
    /// Which step.
    pub step: Step,
    /// Why.
    pub error: Error,
}

impl StepFailure {
    /// The reason of the `Reconciled=False` condition: the API server's
    /// reason for a refused request (`Forbidden`, `Invalid`, `Conflict`,
    /// ...), else a CamelCase name of the error's kind.
    pub fn reason(&self) -> String {
        condition_reason(&self.error)
    }

    /// `step volume: <the error>`, the line the condition, the event and
    /// the log carry.
    pub fn describe(&self) -> String {
        format!("step {}: {}", self.step, api_message(&self.error))
    }
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The failed steps of one reconcile, in the order they ran, as one line.
pub fn describe_all(failures: &[StepFailure]) -> String {
    failures
        .iter()
        .map(StepFailure::describe)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Tags an error with the step it happened in.
pub trait InStep<T> {
    /// `Err(e)` becomes [`Error::Steps`] with one failure of `step` (an
    /// error already tagged keeps its step).
    fn in_step(self, step: Step) -> Result<T, Error>;
}

impl<T, E: Into<Error>> InStep<T> for Result<T, E> {
    fn in_step(self, step: Step) -> Result<T, Error> {
        self.map_err(|e| match e.into() {
            tagged @ Error::Steps(_) => tagged,
            error => Error::Steps(vec![StepFailure { step, error }]),
        })
    }
}

/// A condition reason for `e` (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`,
/// as metav1.Condition requires).
pub fn condition_reason(e: &Error) -> String {
    let api_reason = match e {
        Error::Kube(kube::Error::Api(s)) => Some(s.reason.as_str()),
        _ => None,
    };
    let from_api = api_reason.filter(|r| {
        !r.is_empty()
            && r.len() <= 64
            && r.starts_with(|c: char| c.is_ascii_alphabetic())
            && r.chars().all(|c| c.is_ascii_alphanumeric())
    });
    match (from_api, e) {
        (Some(r), _) => r.to_string(),
        (None, Error::Kube(kube::Error::Api(s))) => format!("HTTP{}", s.code),
        (None, Error::Kube(_)) => "APIUnreachable".into(),
        (None, Error::Finalizer(_)) => "FinalizerFailed".into(),
        (None, Error::MissingField(_)) => "MissingField".into(),
        (None, Error::Serialize(_)) => "SerializeFailed".into(),
        (None, Error::Config(_)) => "Misconfigured".into(),
        (None, Error::InvalidSpec(_)) => "InvalidSpec".into(),
        (None, Error::Agent(_)) => "NodeAgentFailed".into(),
        (None, Error::Steps(f)) => f
            .first()
            .map(StepFailure::reason)
            .unwrap_or_else(|| "Failed".into()),
    }
}

/// The API server's own message for a refused request, else the error.
fn api_message(e: &Error) -> String {
    match e {
        Error::Kube(kube::Error::Api(s)) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> Error {
        Error::Kube(kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn reasons_come_from_the_api_server() {
        let f = StepFailure {
            step: Step::Volume,
            error: api(
                403,
                "Forbidden",
                "only dynamically provisioned pvc can be resized",
            ),
        };
        assert_eq!(f.reason(), "Forbidden");
        assert_eq!(
            f.describe(),
            "step volume: only dynamically provisioned pvc can be resized"
        );
        // A reason a condition cannot carry is replaced by the code.
        let odd = StepFailure {
            step: Step::Egress,
            error: api(500, "", "etcd timeout"),
        };
        assert_eq!(odd.reason(), "HTTP500");
        assert_eq!(
            condition_reason(&Error::Config("x".into())),
            "Misconfigured"
        );
    }

    #[test]
    fn tagging_keeps_the_first_step() {
        let r: Result<(), Error> = Err(Error::Config("no".into()));
        let tagged = r.in_step(Step::Egress).in_step(Step::Sandbox).unwrap_err();
        let Error::Steps(f) = &tagged else {
            panic!("{tagged:?}")
        };
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].step, Step::Egress);
        assert_eq!(describe_all(f), "step egress: configuration: no");
    }
}
