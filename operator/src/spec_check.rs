//! The checks the node agent makes before it applies a spec, made by the
//! operator too, for specs an API server with an older CRD schema let
//! through: the egress policy as the node agent's policy engine builds it
//! (`agentcomputer_egress::Policy::new`: host rules that are names, not
//! addresses, labels of at most 63 characters, CIDRs, ports) and
//! `limits.memory` as a byte count below 2^63.
//!
//! A computer never placed with such a spec is not placed (no node agent
//! ever sees it); a placed one gets the narrowest sandbox policy, deny-all,
//! as the node agent's egress proxy does, and `EgressReady=False` says why.

use agentcomputer_crds::AgentComputerSpec;
use agentcomputer_crds::quantity::parse_bytes;
use agentcomputer_egress::{EgressConfig, Policy};

/// Checks `spec`. Errors: the first problem, naming the field
/// (`spec.egress: bad host rule "10.0.0.1": ...`).
pub fn check(spec: &AgentComputerSpec) -> Result<(), String> {
    let egress = |e: String| format!("spec.egress: {e}");
    let json = serde_json::to_value(&spec.egress).map_err(|e| egress(e.to_string()))?;
    let config: EgressConfig = serde_json::from_value(json).map_err(|e| egress(e.to_string()))?;
    Policy::new(config).map_err(|e| egress(e.to_string()))?;
    if let Some(memory) = &spec.limits.memory {
        let bytes = parse_bytes(&memory.0).map_err(|e| format!("spec.limits.memory: {e}"))?;
        if i64::try_from(bytes).is_err() {
            return Err(format!("spec.limits.memory: {:?} is too large", memory.0));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> AgentComputerSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn what_the_node_agent_refuses() {
        let ok = spec(serde_json::json!({"storage": {"size": "1Gi"},
            "egress": {"mode": "allow-list", "hosts": ["*.pypi.org"],
                       "cidrs": [{"cidr": "10.0.0.0/8", "ports": [{"port": 443}]}]},
            "limits": {"memory": "256Mi"}}));
        assert_eq!(check(&ok), Ok(()));
        for (bad, want) in [
            (
                serde_json::json!({"mode": "allow-list", "hosts": ["10.0.0.1"]}),
                "10.0.0.1",
            ),
            (
                serde_json::json!({"mode": "allow-list", "hosts": ["foo.123"]}),
                "foo.123",
            ),
            (
                serde_json::json!({"mode": "allow-list", "hosts": [format!("{}.com", "a".repeat(70))]}),
                "63 characters",
            ),
        ] {
            let s = spec(serde_json::json!({"storage": {"size": "1Gi"}, "egress": bad}));
            let err = check(&s).unwrap_err();
            assert!(
                err.starts_with("spec.egress: ") && err.contains(want),
                "{err}"
            );
        }
        let s = spec(serde_json::json!({"storage": {"size": "1Gi"}, "limits": {"memory": "-1"}}));
        assert!(check(&s).unwrap_err().starts_with("spec.limits.memory: "));
    }
}
