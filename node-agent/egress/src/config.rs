//! The stored shape of an egress policy.
//!
//! Field for field the JSON shape of the AgentComputer resource's
//! `spec.egress` (crate `agentcomputer-crds`, `EgressSpec`), so one policy
//! text means the same in a cluster and in local mode, and so a computer's
//! `computer.json` can hold it. [`crate::Policy::new`] validates it.

use serde::{Deserialize, Serialize};

/// An egress policy as written by people: `{"mode": "allow-list",
/// "cidrs": [{"cidr": "10.0.0.0/8", "ports": [{"port": 443}]}],
/// "hosts": ["pypi.org", "*.githubusercontent.com"], "allowMetadata": false}`.
///
/// Every field has a default, so `{}` (and a missing policy) is deny-all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressConfig {
    /// What is allowed at all; see [`Mode`].
    #[serde(default)]
    pub mode: Mode,
    /// Destinations by IP range and port (allow-list mode only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidrs: Vec<CidrConfig>,
    /// Destinations by DNS name, `pypi.org` or `*.example.com` (allow-list
    /// mode only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Allow the cloud metadata and credential endpoints (169.254.169.254,
    /// fd00:ec2::254, 169.254.170.2, ...; the list in docs/egress.md).
    #[serde(default)]
    pub allow_metadata: bool,
}

/// Policy mode, written in kebab-case (`deny-all`, `allow-all`, `allow-list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No outbound connections at all (the default).
    #[default]
    DenyAll,
    /// Any destination except cloud metadata (unless `allowMetadata`).
    AllowAll,
    /// Only the destinations in `cidrs` and `hosts`.
    AllowList,
}

impl Mode {
    /// The spelling used in JSON and on command lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::DenyAll => "deny-all",
            Mode::AllowAll => "allow-all",
            Mode::AllowList => "allow-list",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "deny-all" => Ok(Mode::DenyAll),
            "allow-all" => Ok(Mode::AllowAll),
            "allow-list" => Ok(Mode::AllowList),
            other => Err(format!(
                "unknown egress mode {other:?}; expected deny-all, allow-all or allow-list"
            )),
        }
    }
}

/// An IP range a computer may connect to, with the ports allowed there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CidrConfig {
    /// IPv4 or IPv6 range in CIDR notation, `10.0.0.0/8` or `2001:db8::/32`.
    pub cidr: String,
    /// Ports allowed in the range; empty allows every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortConfig>,
}

/// A destination port or an inclusive port range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortConfig {
    /// Destination port, 1-65535.
    pub port: i32,
    /// Last port of the range starting at `port` (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_port: Option<i32>,
    /// Transport protocol: `TCP` (default), `UDP` or `SCTP`.
    #[serde(default)]
    pub protocol: Protocol,
}

/// Transport protocol of a port rule, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// `TCP`, the default when a rule names none.
    #[default]
    TCP,
    /// `UDP`.
    UDP,
    /// `SCTP`.
    SCTP,
}

impl CidrConfig {
    /// Parses the command-line form `CIDR[:PORT[-END]]`: `10.0.0.0/8`,
    /// `10.0.0.0/8:443`, `10.0.0.0/8:8000-8099`, `[2001:db8::/32]:443`.
    /// An address without a prefix length is one host (`/32` or `/128`).
    pub fn parse_flag(text: &str) -> Result<CidrConfig, String> {
        let bad = |why: &str| format!("bad --allow-cidr {text:?}: {why}");
        let (range, ports) = if let Some(rest) = text.strip_prefix('[') {
            let (range, after) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            match after {
                "" => (range, None),
                _ => (
                    range,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("expected ':PORT'"))?,
                    ),
                ),
            }
        } else if text.matches(':').count() == 1 {
            let (range, ports) = text.split_once(':').unwrap_or((text, ""));
            (range, Some(ports))
        } else {
            // No colon (IPv4 without port) or several (bare IPv6).
            (text, None)
        };
        let cidr = if range.contains('/') {
            range.to_string()
        } else {
            let ip: std::net::IpAddr = range.parse().map_err(|_| bad("not an IP address"))?;
            format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 })
        };
        let mut rule = CidrConfig {
            cidr,
            ports: Vec::new(),
        };
        if let Some(ports) = ports {
            let number = |s: &str| s.parse::<i32>().map_err(|_| bad("bad port"));
            let (port, end_port) = match ports.split_once('-') {
                Some((a, b)) => (number(a)?, Some(number(b)?)),
                None => (number(ports)?, None),
            };
            rule.ports.push(PortConfig {
                port,
                end_port,
                protocol: Protocol::TCP,
            });
        }
        Ok(rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_the_resource_shape() {
        let text = r#"{"mode":"allow-list","cidrs":[{"cidr":"10.0.0.0/8","ports":[{"port":80,"endPort":90,"protocol":"TCP"}]}],"hosts":["*.example.com"],"allowMetadata":true}"#;
        let config: EgressConfig = serde_json::from_str(text).unwrap();
        assert_eq!(config.mode, Mode::AllowList);
        assert_eq!(config.cidrs[0].ports[0].end_port, Some(90));
        assert!(config.allow_metadata);
        assert_eq!(serde_json::to_string(&config).unwrap(), text);
        let empty: EgressConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.mode, Mode::DenyAll);
    }

    #[test]
    fn cidr_flags() {
        let one = CidrConfig::parse_flag("127.0.0.1").unwrap();
        assert_eq!(one.cidr, "127.0.0.1/32");
        assert!(one.ports.is_empty());
        let port = CidrConfig::parse_flag("10.0.0.0/8:443").unwrap();
        assert_eq!(
            (port.cidr.as_str(), port.ports[0].port),
            ("10.0.0.0/8", 443)
        );
        let range = CidrConfig::parse_flag("10.0.0.0/8:8000-8099").unwrap();
        assert_eq!(range.ports[0].end_port, Some(8099));
        let v6 = CidrConfig::parse_flag("[2001:db8::/32]:443").unwrap();
        assert_eq!((v6.cidr.as_str(), v6.ports[0].port), ("2001:db8::/32", 443));
        let bare = CidrConfig::parse_flag("::1").unwrap();
        assert_eq!(bare.cidr, "::1/128");
        assert!(CidrConfig::parse_flag("10.0.0.0/8:http").is_err());
        assert!(CidrConfig::parse_flag("example.com").is_err());
    }
}
