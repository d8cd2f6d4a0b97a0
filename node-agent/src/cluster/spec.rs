//! An AgentComputer's spec as the settings of its computer on this node.

use agentcomputer_crds::AgentComputer;
use agentcomputer_egress::{EgressConfig, Policy};
use agentcomputer_fs::Limits;

use crate::computer::{Config, ExecLimits, Runtimes};
use agentcomputer_crds::quantity::{QuantityError, parse_bytes};

/// Bytes of quota per inode when `spec.storage.maxInodes` is unset (the
/// default the CRD documents): one inode per 4 KiB, mke2fs.conf(5)'s
/// `inode_ratio` for its "small" type, since agents write many small files.
pub const BYTES_PER_INODE: u64 = 4096;

/// Fewest inodes a computer gets by default.
pub const MIN_INODES: u64 = 1024;

/// Why a spec cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `spec.storage.size` is not a byte count.
    #[error("spec.storage.size: {0}")]
    Size(QuantityError),
    /// `spec.limits.memory` is not a byte count.
    #[error("spec.limits.memory: {0}")]
    Memory(QuantityError),
    /// A number out of its range (the CRD's validation should stop these).
    #[error("{field}: {value} is out of range")]
    Range { field: &'static str, value: i64 },
    /// `spec.egress` is not a policy the egress engine accepts.
    #[error("spec.egress: {0}")]
    Egress(String),
    /// `spec.retention` is not a duration.
    #[error("spec.retention: {0}")]
    Retention(String),
}

/// The settings of `computer` on this node: quota from
/// `spec.storage.size`, inode limit from `spec.storage.maxInodes` (default
/// size / [`BYTES_PER_INODE`], at least [`MIN_INODES`]), egress policy,
/// runtimes, exec limits (each the default and the maximum), and
/// `NAMESPACE/NAME` as the name shown. Errors: [`SpecError`].
pub fn config_of(computer: &AgentComputer) -> Result<Config, SpecError> {
    let spec = &computer.spec;
    let max_bytes = parse_bytes(&spec.storage.size.0).map_err(SpecError::Size)?;
    let max_inodes = match spec.storage.max_inodes {
        Some(n) if n >= 1 => n as u64,
        Some(n) => {
            return Err(SpecError::Range {
                field: "spec.storage.maxInodes",
                value: n,
            });
        }
        None => (max_bytes / BYTES_PER_INODE).max(MIN_INODES),
    };
    let egress = egress_of(&spec.egress)?;
    let limits = &spec.limits;
    let positive = |field: &'static str, value: i64| {
        u64::try_from(value)
            .ok()
            .filter(|v| *v > 0)
            .ok_or(SpecError::Range { field, value })
    };
    let timeout_s = positive("spec.limits.timeoutSeconds", limits.timeout_seconds.into())?;
    let output = positive("spec.limits.outputBytes", limits.output_bytes)?;
    let memory = match &limits.memory {
        Some(q) => Some(parse_bytes(&q.0).map_err(SpecError::Memory)?),
        None => None,
    };
    let retention = match &spec.retention {
        Some(r) => Some(
            humantime::parse_duration(r)
                .map_err(|e| SpecError::Retention(format!("{r:?} is not a duration ({e})")))?,
        ),
        None => None,
    };
    Ok(Config {
        retention,
        limits: Limits {
            max_bytes,
            max_inodes,
        },
        egress,
        runtimes: Runtimes {
            shell: spec.runtimes.shell,
            javascript: spec.runtimes.javascript,
            container: spec.runtimes.container,
        },
        exec: ExecLimits {
            timeout_ms: Some(timeout_s * 1000),
            max_output_bytes: Some(output),
            memory_bytes: memory,
        },
        display_name: Some(display_name(computer)),
    })
}

/// `NAMESPACE/NAME` of `computer`.
pub fn display_name(computer: &AgentComputer) -> String {
    format!(
        "{}/{}",
        computer.metadata.namespace.as_deref().unwrap_or_default(),
        computer.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `spec.egress` as the egress engine's policy. The two share one JSON
/// shape field for field (`agentcomputer-egress`'s `EgressConfig` is
/// documented as that shape), so the translation is a re-reading of the
/// same JSON; the engine then applies the operator's NetworkPolicy
/// semantics: deny-all, allow-all without cloud metadata, or the listed
/// ranges (metadata excluded from them) and host names, metadata only with
/// `allowMetadata`. Errors: `Egress` when the engine refuses the policy.
pub fn egress_of(spec: &agentcomputer_crds::EgressSpec) -> Result<EgressConfig, SpecError> {
    let json = serde_json::to_value(spec).map_err(|e| SpecError::Egress(e.to_string()))?;
    let config: EgressConfig =
        serde_json::from_value(json).map_err(|e| SpecError::Egress(e.to_string()))?;
    Policy::new(config.clone()).map_err(|e| SpecError::Egress(e.to_string()))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn computer(spec: serde_json::Value) -> AgentComputer {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "agentcomputer.dev/v1alpha1",
            "kind": "AgentComputer",
            "metadata": {"name": "demo", "namespace": "team-a", "uid": "u1"},
            "spec": spec,
        }))
        .unwrap()
    }

    /// Every size the operator places (its own check parses with
    /// `agentcomputer_crds::quantity`) the node agent applies, up to the
    /// largest the CRD admits; the engine keeps such a quota across a
    /// reopen.
    #[test]
    fn sizes_the_operator_accepts_the_agent_accepts() {
        for (size, bytes) in [
            ("8Ei", 1u64 << 63),
            ("15Ei", 15 << 60),
            ("9.2e18", 9_200_000_000_000_000_000),
            ("1.5Gi", 3 << 29),
        ] {
            let spec = serde_json::json!({"storage": {"size": size}});
            assert!(
                agentcomputer_crds::quantity::parse_bytes(size).is_ok(),
                "{size} (the operator's parse)"
            );
            let c = config_of(&computer(spec)).unwrap_or_else(|e| {
                panic!("{size}: the agent refused what the operator places: {e}")
            });
            assert_eq!(c.limits.max_bytes, bytes, "{size}");
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("fs.db");
        let limits = Limits {
            max_bytes: 1 << 63,
            ..Limits::default()
        };
        let fs = agentcomputer_fs::Fs::create(&db, limits).unwrap();
        drop(fs);
        let fs = agentcomputer_fs::Fs::open(&db).unwrap();
        assert_eq!(fs.limits().max_bytes, 1 << 63);
    }

    #[test]
    fn defaults() {
        let c = config_of(&computer(serde_json::json!({"storage": {"size": "1Gi"}}))).unwrap();
        assert_eq!(c.limits.max_bytes, 1 << 30);
        assert_eq!(c.limits.max_inodes, (1 << 30) / 4096);
        // The container runtime is opt-in in a cluster (a sandbox pod).
        assert_eq!(
            c.runtimes,
            Runtimes {
                container: false,
                ..Runtimes::default()
            }
        );
        assert_eq!(c.exec.timeout_ms, Some(300_000));
        assert_eq!(c.exec.max_output_bytes, Some(16 << 20));
        assert_eq!(c.exec.memory_bytes, None);
        assert_eq!(c.egress, EgressConfig::default());
        assert_eq!(c.display_name.as_deref(), Some("team-a/demo"));
        let small = config_of(&computer(serde_json::json!({"storage": {"size": "1Mi"}}))).unwrap();
        assert_eq!(small.limits.max_inodes, MIN_INODES);
        // The node agent's retention applies.
        assert_eq!(c.retention, None);
    }

    #[test]
    fn every_field() {
        let c = config_of(&computer(serde_json::json!({
            "storage": {"size": "2G", "maxInodes": 77},
            "retention": "36h",
            "runtimes": {"shell": false, "javascript": true},
            "limits": {"timeoutSeconds": 5, "outputBytes": 4096, "memory": "64Mi"},
            "egress": {"mode": "allow-list", "hosts": ["pypi.org"],
                       "cidrs": [{"cidr": "10.0.0.0/8", "ports": [{"port": 443}]}],
                       "allowMetadata": true},
        })))
        .unwrap();
        assert_eq!(c.limits.max_bytes, 2_000_000_000);
        assert_eq!(c.limits.max_inodes, 77);
        assert_eq!(c.retention, Some(std::time::Duration::from_secs(36 * 3600)));
        assert!(!c.runtimes.shell && c.runtimes.javascript);
        assert_eq!(c.exec.timeout_ms, Some(5000));
        assert_eq!(c.exec.max_output_bytes, Some(4096));
        assert_eq!(c.exec.memory_bytes, Some(64 << 20));
        assert_eq!(c.egress.mode, agentcomputer_egress::Mode::AllowList);
        assert_eq!(c.egress.hosts, vec!["pypi.org".to_string()]);
        assert_eq!(c.egress.cidrs[0].cidr, "10.0.0.0/8");
        assert_eq!(c.egress.cidrs[0].ports[0].port, 443);
        assert!(c.egress.allow_metadata);
        // The policy engine denies metadata unless allowMetadata.
        let strict = egress_of(&agentcomputer_crds::EgressSpec {
            mode: agentcomputer_crds::EgressMode::AllowAll,
            ..Default::default()
        })
        .unwrap();
        let policy = Policy::new(strict).unwrap();
        let metadata: std::net::IpAddr = "169.254.169.254".parse().unwrap();
        assert!(policy.check(None, metadata, 80).is_err());
        assert!(policy.check(None, "192.0.2.1".parse().unwrap(), 80).is_ok());
    }

    #[test]
    fn bad_specs_name_the_field() {
        let err = config_of(&computer(serde_json::json!({"storage": {"size": "lots"}})))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("spec.storage.size: "), "{err}");
        let err = config_of(&computer(serde_json::json!({
            "storage": {"size": "1Gi"}, "limits": {"memory": "-1"}
        })))
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("spec.limits.memory: "), "{err}");
        let err = config_of(&computer(serde_json::json!({
            "storage": {"size": "1Gi"}, "retention": "a week"
        })))
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("spec.retention: \"a week\" is not a duration"),
            "{err}"
        );
        let err = config_of(&computer(serde_json::json!({
            "storage": {"size": "1Gi"},
            "egress": {"mode": "allow-list", "cidrs": [{"cidr": "nonsense"}]}
        })))
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("spec.egress: "), "{err}");
    }
}
