//! The egress flags of `create`. The node agent validates the policy;
//! here the flags only become the message.

use agentcomputer_proto::v1 as pb;
use clap::{Args, ValueEnum};

use crate::error::{CliError, Result};

/// Where the new computer's programs may connect (docs/egress.md).
#[derive(Args, Debug, Default)]
pub struct EgressArgs {
    /// Outbound network policy [default: deny-all, or allow-list when
    /// --allow-host or --allow-cidr is given].
    #[arg(long = "egress", value_enum)]
    mode: Option<ModeArg>,
    /// Host name the computer may reach, e.g. pypi.org or *.example.com
    /// (any subdomain); names only, an IP address needs --allow-cidr;
    /// repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    hosts: Vec<String>,
    /// IP range the computer may reach: CIDR[:PORT[-END]], e.g. 10.0.0.0/8,
    /// 10.0.0.0/8:443, 127.0.0.1:8080, [2001:db8::/32]:443; repeatable.
    #[arg(long = "allow-cidr", value_name = "CIDR[:PORT]", value_parser = parse_cidr)]
    cidrs: Vec<pb::EgressCidr>,
    /// Allow the cloud metadata address 169.254.169.254 (and fd00:ec2::254).
    #[arg(long)]
    allow_metadata: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ModeArg {
    /// No outbound connections.
    DenyAll,
    /// Anything but cloud metadata and the node's own loopback.
    AllowAll,
    /// Only --allow-host and --allow-cidr destinations.
    AllowList,
}

impl EgressArgs {
    /// The request's policy. Errors: rules with a mode other than
    /// allow-list.
    pub fn to_proto(&self) -> Result<pb::Egress> {
        let has_rules = !self.hosts.is_empty() || !self.cidrs.is_empty();
        let mode = match (self.mode, has_rules) {
            (None, true) | (Some(ModeArg::AllowList), _) => pb::EgressMode::AllowList,
            (None, false) | (Some(ModeArg::DenyAll), _) => pb::EgressMode::DenyAll,
            (Some(ModeArg::AllowAll), _) => pb::EgressMode::AllowAll,
        };
        if has_rules && mode != pb::EgressMode::AllowList {
            return Err(CliError::new(
                "--allow-host and --allow-cidr need --egress allow-list",
            ));
        }
        Ok(pb::Egress {
            mode: mode as i32,
            cidrs: self.cidrs.clone(),
            hosts: self.hosts.clone(),
            allow_metadata: self.allow_metadata,
        })
    }
}

/// `CIDR[:PORT[-END]]`; a bare address is one host (/32 or /128), and an
/// IPv6 range with a port is written in brackets.
fn parse_cidr(text: &str) -> std::result::Result<pb::EgressCidr, String> {
    let (range, ports) = if let Some(rest) = text.strip_prefix('[') {
        let (range, after) = rest.split_once(']').ok_or("missing ']'")?;
        match after.strip_prefix(':') {
            Some(p) => (range, Some(p)),
            None if after.is_empty() => (range, None),
            None => return Err("expected ':PORT' after ']'".into()),
        }
    } else if text.matches(':').count() == 1 {
        let (range, ports) = text.split_once(':').unwrap_or((text, ""));
        (range, Some(ports))
    } else {
        (text, None)
    };
    let (addr, prefix) = match range.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (range, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let prefix = match prefix {
        Some(p) => p.parse::<u8>().map_err(|_| format!("bad prefix {p:?}"))?,
        None if ip.is_ipv4() => 32,
        None => 128,
    };
    let number = |s: &str| s.parse::<u32>().map_err(|_| format!("bad port {s:?}"));
    let ports = match ports {
        None => Vec::new(),
        Some(p) => {
            let (port, end_port) = match p.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(p)?, 0),
            };
            vec![pb::EgressPorts { port, end_port }]
        }
    };
    Ok(pb::EgressCidr {
        cidr: format!("{ip}/{prefix}"),
        ports,
    })
}

/// `deny-all`, `allow-all`, `allow-list (2 hosts, 1 cidr)`.
pub fn describe(egress: Option<&pb::Egress>) -> String {
    let Some(e) = egress else {
        return "deny-all".into();
    };
    let metadata = if e.allow_metadata { ", metadata" } else { "" };
    match pb::EgressMode::try_from(e.mode).unwrap_or(pb::EgressMode::DenyAll) {
        pb::EgressMode::AllowAll => format!("allow-all{metadata}"),
        pb::EgressMode::AllowList => format!(
            "allow-list: {} host{}, {} cidr{}{metadata}",
            e.hosts.len(),
            if e.hosts.len() == 1 { "" } else { "s" },
            e.cidrs.len(),
            if e.cidrs.len() == 1 { "" } else { "s" },
        ),
        _ => "deny-all".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_flags() {
        let c = parse_cidr("127.0.0.1").unwrap();
        assert_eq!((c.cidr.as_str(), c.ports.len()), ("127.0.0.1/32", 0));
        let c = parse_cidr("10.0.0.0/8:8000-8099").unwrap();
        assert_eq!(c.cidr, "10.0.0.0/8");
        assert_eq!((c.ports[0].port, c.ports[0].end_port), (8000, 8099));
        let c = parse_cidr("[2001:db8::/32]:443").unwrap();
        assert_eq!((c.cidr.as_str(), c.ports[0].port), ("2001:db8::/32", 443));
        assert_eq!(parse_cidr("::1").unwrap().cidr, "::1/128");
        assert!(parse_cidr("pypi.org").is_err());
        assert!(parse_cidr("10.0.0.0/8:https").is_err());
    }

    #[test]
    fn rules_imply_allow_list() {
        let args = EgressArgs {
            hosts: vec!["pypi.org".into()],
            ..EgressArgs::default()
        };
        let e = args.to_proto().unwrap();
        assert_eq!(e.mode, pb::EgressMode::AllowList as i32);
        assert_eq!(describe(Some(&e)), "allow-list: 1 host, 0 cidrs");
        let conflicting = EgressArgs {
            mode: Some(ModeArg::AllowAll),
            hosts: vec!["pypi.org".into()],
            ..EgressArgs::default()
        };
        assert!(conflicting.to_proto().is_err());
        assert_eq!(
            EgressArgs::default().to_proto().unwrap().mode,
            pb::EgressMode::DenyAll as i32
        );
    }
}
