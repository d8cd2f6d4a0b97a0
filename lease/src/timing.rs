//! How long a Lease lasts, how long its holder may act without renewing it,
//! and how often it tries.

use std::time::Duration;

/// The three durations of client-go's leader election.
///
/// The defaults (15 s, 10 s, 2 s) are client-go's recommended ones:
/// `RecommendedDefaultLeaderElectionConfiguration` in
/// `k8s.io/component-base/config/v1alpha1/defaults.go`, which
/// kube-controller-manager and kube-scheduler use for their
/// `--leader-elect-lease-duration`, `--leader-elect-renew-deadline` and
/// `--leader-elect-retry-period`. [`Timing::validate`] applies the checks of
/// client-go's `leaderelection.NewLeaderElector`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long other candidates wait after the holder's last `renewTime`
    /// before they may take the Lease (`spec.leaseDurationSeconds`). The
    /// Lease stores whole seconds: a fraction is rounded up when written.
    pub lease_duration: Duration,
    /// How long the holder may act after the start of its last successful
    /// renew (or the acquisition): its validity ends then, even if renewals
    /// are still being retried. Shorter than `lease_duration`, so the holder
    /// stops before anyone else may take over; the difference is the clock
    /// disagreement tolerated between holder and candidates.
    pub renew_deadline: Duration,
    /// How often the holder renews, and how soon it retries a failed renew.
    pub retry_period: Duration,
}

/// client-go's `JitterFactor`: the renew deadline must leave room for more
/// than one retry period stretched by this factor.
const JITTER_FACTOR: f64 = 1.2;

impl Default for Timing {
    /// 15 s lease, 10 s renew deadline, 2 s retry period (client-go's).
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why a [`Timing`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// `lease_duration` is under one second (the Lease stores whole seconds).
    #[error("lease duration {0:?} is under 1 s")]
    LeaseTooShort(Duration),
    /// `renew_deadline` is not shorter than `lease_duration`: the holder
    /// could still act after another candidate took the Lease.
    #[error(
        "renew deadline {renew_deadline:?} is not shorter than the lease duration {lease_duration:?}"
    )]
    DeadlineNotBeforeExpiry {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured lease duration.
        lease_duration: Duration,
    },
    /// `renew_deadline` is not over 1.2 retry periods: a single slow
    /// retry would end the holder's validity.
    #[error(
        "renew deadline {renew_deadline:?} is not over 1.2 x the retry period {retry_period:?}"
    )]
    DeadlineTooShortForRetries {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured retry period.
        retry_period: Duration,
    },
    /// `retry_period` is zero.
    #[error("retry period is zero")]
    NoRetryPeriod,
}

impl Timing {
    /// client-go's proportions (15 : 10 : 2) for another lease duration:
    /// renew deadline two thirds of it, retry period two fifteenths. For
    /// 15 s this is [`Timing::default`].
    pub fn scaled_to(lease_duration: Duration) -> Timing {
        Timing {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: lease_duration * 2 / 15,
        }
    }

    /// Checks the durations against each other: lease at least 1 s, renew
    /// deadline shorter than the lease and longer than 1.2 retry periods,
    /// retry period not zero.
    pub fn validate(&self) -> Result<(), TimingError> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err(TimingError::LeaseTooShort(self.lease_duration));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(TimingError::DeadlineNotBeforeExpiry {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period.is_zero() {
            return Err(TimingError::NoRetryPeriod);
        }
        if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * JITTER_FACTOR {
            return Err(TimingError::DeadlineTooShortForRetries {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }

    /// `lease_duration` in whole seconds, rounded up, as the Lease stores it.
    pub fn lease_duration_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(lease: u64, deadline: u64, retry: u64) -> Timing {
        Timing {
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(deadline),
            retry_period: Duration::from_millis(retry),
        }
    }

    #[test]
    fn defaults_are_client_gos_and_valid() {
        assert_eq!(Timing::default(), t(15_000, 10_000, 2_000));
        assert_eq!(
            Timing::scaled_to(Duration::from_secs(15)),
            Timing::default()
        );
        assert_eq!(Timing::default().validate(), Ok(()));
        assert_eq!(Timing::scaled_to(Duration::from_secs(3)).validate(), Ok(()));
    }

    #[test]
    fn invalid_timings_are_named() {
        assert!(matches!(
            t(900, 500, 100).validate(),
            Err(TimingError::LeaseTooShort(_))
        ));
        assert!(matches!(
            t(3_000, 3_000, 500).validate(),
            Err(TimingError::DeadlineNotBeforeExpiry { .. })
        ));
        assert!(matches!(
            t(3_000, 600, 500).validate(),
            Err(TimingError::DeadlineTooShortForRetries { .. })
        ));
        assert_eq!(
            t(3_000, 2_000, 0).validate(),
            Err(TimingError::NoRetryPeriod)
        );
        assert_eq!(t(3_000, 2_000, 500).validate(), Ok(()));
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(t(3_000, 2_000, 500).lease_duration_seconds(), 3);
        assert_eq!(t(3_001, 2_000, 500).lease_duration_seconds(), 4);
    }
}
