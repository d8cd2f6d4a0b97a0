//! The decision: may this computer open a TCP connection to (host, IP, port)?

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

use ipnet::IpNet;

use crate::config::{EgressConfig, Mode, Protocol};
use crate::control::{self, ControlAddresses};
use crate::host::{HostPattern, normalize};
use crate::node::{self, NodeAddresses};

/// Whether `ip` is a cloud metadata or credential endpoint, directly or in
/// an IPv6 form that embeds one (the shared list of
/// `agentcomputer-metadata-endpoints`, also used for the operator's
/// NetworkPolicy `except` lists; docs/egress.md).
pub fn is_metadata(ip: IpAddr) -> bool {
    agentcomputer_metadata_endpoints::is_denied(ip)
}

/// Most rules of each kind a policy may have (the resource's limits).
pub const MAX_RULES: usize = 64;
/// Most port rules per CIDR rule (the resource's limit).
pub const MAX_PORTS: usize = 32;

/// A validated egress policy. [`Policy::default`] denies everything.
///
/// Semantics (the AgentComputer resource's `spec.egress`, applied to the
/// connections the in-process runtimes open):
/// * `deny-all`: nothing.
/// * `allow-all`: every address except cloud metadata and credential
///   endpoints ([`is_metadata`])
///   unless `allowMetadata`.
/// * `allow-list`: an address inside a CIDR rule on an allowed TCP port
///   (UDP and SCTP port rules admit no TCP connection), or any address of a
///   host name matching a host rule. Metadata stays excluded from every
///   rule unless `allowMetadata`. Host rules match names only, never IP
///   literals.
/// * Loopback and "this host" addresses (127.0.0.0/8, ::1, 0.0.0.0/8, ::,
///   and the IPv6 forms that carry a loopback IPv4 address) are the node
///   agent's own, not the computer's, so only a CIDR rule lying inside
///   127.0.0.0/8 or ::1/128 reaches them; allow-all and host rules never do.
/// * The node's other addresses ([`crate::node`]) reach its services just
///   as loopback does: only an allow-list rule naming the address (a CIDR
///   rule that contains it, other than a `/0`, or a host rule matching the
///   name it was resolved from) reaches them; allow-all never does.
///   IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    config: EgressConfig,
    cidrs: Vec<CidrRule>,
    hosts: Vec<HostPattern>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct CidrRule {
    net: IpNet,
    /// TCP port ranges; `None` allows every port.
    ports: Option<Vec<RangeInclusive<u16>>>,
}

impl CidrRule {
    fn admits(&self, ip: IpAddr, port: u16) -> bool {
        self.net.contains(&ip)
            && self
                .ports
                .as_ref()
                .is_none_or(|ranges| ranges.iter().any(|r| r.contains(&port)))
    }
}

/// Why a policy could not be built; the text names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// Why a destination was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// The mode is deny-all.
    DenyAll,
    /// Allow-list mode and no rule admits the destination.
    NotListed,
    /// A cloud metadata address without `allowMetadata`.
    Metadata,
    /// A loopback or "this host" address, and the policy has no CIDR rule
    /// inside 127.0.0.0/8 or ::1/128 at all (with one, a loopback address
    /// or port it does not admit is [`DenyReason::NotListed`]).
    Local,
    /// An address of this node (not loopback), and no rule names it: no
    /// CIDR rule other than a `/0` contains it (with one, a port it does
    /// not admit is [`DenyReason::NotListed`]) and no host rule matches.
    Node,
    /// A control address of the node or the cluster ([`crate::control`]),
    /// which no egress rule reaches; the text says what answers there
    /// (`the kubelet`, `the API server`, ...).
    Control(&'static str),
}

/// A refused destination, printable for people:
/// `10.0.0.5:80 is not in the allow-list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `10.0.0.5:80`, `example.com:443` or `example.com (10.0.0.5:443)`.
    pub target: String,
    /// Which rule refused it.
    pub reason: DenyReason,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = &self.target;
        match self.reason {
            DenyReason::DenyAll => write!(f, "{target}: the egress mode is deny-all"),
            DenyReason::NotListed => write!(f, "{target} is not in the allow-list"),
            DenyReason::Metadata => write!(
                f,
                "{target} is a cloud metadata or credential endpoint and allowMetadata is off"
            ),
            DenyReason::Local => write!(
                f,
                "{target} is a loopback address; only a cidr rule inside 127.0.0.0/8 or ::1/128 allows it"
            ),
            DenyReason::Node => write!(
                f,
                "{target} is an address of this node; only a cidr or host rule naming it allows it"
            ),
            DenyReason::Control(what) => write!(
                f,
                "{target} is a control address ({what}); no egress rule reaches it unless the node agent's administrator allows it (--allow-control-addresses)"
            ),
        }
    }
}

impl std::error::Error for Denial {}

impl Policy {
    /// Validates `config` as the resource's schema does. Errors: host or
    /// CIDR rules outside allow-list mode, more than [`MAX_RULES`] rules of
    /// a kind or [`MAX_PORTS`] ports in a rule, a CIDR that does not parse,
    /// a port outside 1-65535 or an `endPort` below `port`, a host rule
    /// that is not a lowercase DNS name with an optional `*.` prefix.
    pub fn new(config: EgressConfig) -> Result<Policy, PolicyError> {
        let err = |m: String| Err(PolicyError(m));
        if config.mode != Mode::AllowList && (!config.cidrs.is_empty() || !config.hosts.is_empty())
        {
            return err(
                "egress.cidrs and egress.hosts may only be set when egress.mode is allow-list"
                    .into(),
            );
        }
        if config.cidrs.len() > MAX_RULES || config.hosts.len() > MAX_RULES {
            return err(format!(
                "at most {MAX_RULES} cidr rules and {MAX_RULES} host rules"
            ));
        }
        let mut cidrs = Vec::with_capacity(config.cidrs.len());
        for rule in &config.cidrs {
            let net: IpNet = match rule.cidr.parse() {
                Ok(net) => net,
                Err(_) => {
                    return err(format!(
                        "cidr must be an IPv4 or IPv6 CIDR such as 10.0.0.0/8, not {:?}",
                        rule.cidr
                    ));
                }
            };
            if rule.ports.len() > MAX_PORTS {
                return err(format!("at most {MAX_PORTS} ports per cidr rule"));
            }
            let mut ports = Vec::new();
            for p in &rule.ports {
                let start = port_number(p.port)?;
                let end = match p.end_port {
                    Some(end) => port_number(end)?,
                    None => start,
                };
                if end < start {
                    return err(format!("endPort {end} is below port {start}"));
                }
                if p.protocol == Protocol::TCP {
                    ports.push(start..=end);
                }
            }
            cidrs.push(CidrRule {
                net: net.trunc(),
                ports: (!rule.ports.is_empty()).then_some(ports),
            });
        }
        let hosts = config
            .hosts
            .iter()
            .map(|h| HostPattern::parse(h).map_err(PolicyError))
            .collect::<Result<_, _>>()?;
        Ok(Policy {
            config,
            cidrs,
            hosts,
        })
    }

    /// A policy that allows every destination but metadata, loopback and
    /// the node's own addresses.
    pub fn allow_all() -> Policy {
        Policy {
            config: EgressConfig {
                mode: Mode::AllowAll,
                ..EgressConfig::default()
            },
            ..Policy::default()
        }
    }

    /// The configuration this policy was built from.
    pub fn config(&self) -> &EgressConfig {
        &self.config
    }

    /// Decides a TCP connection to `ip:port`. `host` is the name the
    /// address was resolved from (`None` for an IP literal); only host
    /// rules look at it. The node's addresses are those of
    /// [`node::current`] (read at most [`node::REFRESH`] ago), the control
    /// addresses those of [`control::current`].
    pub fn check(&self, host: Option<&str>, ip: IpAddr, port: u16) -> Result<(), Denial> {
        self.check_in(&node::current(), &control::current(), host, ip, port)
    }

    /// [`Policy::check`] with `node` as the node's addresses and no
    /// control address.
    pub fn check_on(
        &self,
        node: &NodeAddresses,
        host: Option<&str>,
        ip: IpAddr,
        port: u16,
    ) -> Result<(), Denial> {
        self.check_in(node, &ControlAddresses::default(), host, ip, port)
    }

    /// [`Policy::check`] with `node` as the node's addresses and `control`
    /// as the control addresses. Order: deny-all, metadata, control
    /// addresses, loopback, the node's addresses, the rules.
    pub fn check_in(
        &self,
        node: &NodeAddresses,
        control: &ControlAddresses,
        host: Option<&str>,
        ip: IpAddr,
        port: u16,
    ) -> Result<(), Denial> {
        let ip = ip.to_canonical();
        let deny = |reason| {
            Err(Denial {
                target: target(host, Some(ip), port),
                reason,
            })
        };
        if self.config.mode == Mode::DenyAll {
            return deny(DenyReason::DenyAll);
        }
        if !self.config.allow_metadata && is_metadata(ip) {
            return deny(DenyReason::Metadata);
        }
        let local = is_local(ip);
        if let Some(what) = control.refusal(ip, port, local || is_node(node, ip)) {
            return deny(DenyReason::Control(what));
        }
        if local {
            let inside_loopback = |net: &IpNet| LOOPBACK.iter().any(|lo| lo.contains(net));
            let mut loopback_rules = self.cidrs.iter().filter(|r| inside_loopback(&r.net));
            if loopback_rules.clone().any(|r| r.admits(ip, port)) {
                return Ok(());
            }
            // With a loopback rule in place, pointing at loopback rules is
            // no help: the address or port is simply not listed.
            return match loopback_rules.next() {
                Some(_) => deny(DenyReason::NotListed),
                None => deny(DenyReason::Local),
            };
        }
        if is_node(node, ip) {
            // Only a rule that names the address: a "/0" means anywhere,
            // as allow-all does.
            let mut naming = self.cidrs.iter().filter(|r| r.net.prefix_len() > 0);
            if naming.clone().any(|r| r.admits(ip, port))
                || host.is_some_and(|h| self.host_listed(h))
            {
                return Ok(());
            }
            return match naming.any(|r| r.net.contains(&ip)) {
                true => deny(DenyReason::NotListed),
                false => deny(DenyReason::Node),
            };
        }
        if self.config.mode == Mode::AllowAll
            || self.cidrs.iter().any(|r| r.admits(ip, port))
            || host.is_some_and(|h| self.host_listed(h))
        {
            return Ok(());
        }
        deny(DenyReason::NotListed)
    }

    /// Decides what can be decided about a host name before looking it up,
    /// so a lookup that cannot lead anywhere is never made: deny-all, or an
    /// allow-list without CIDR rules whose host rules do not match.
    pub fn precheck_name(&self, host: &str, port: u16) -> Result<(), Denial> {
        let reason = match self.config.mode {
            Mode::DenyAll => DenyReason::DenyAll,
            Mode::AllowList if self.cidrs.is_empty() && !self.host_listed(host) => {
                DenyReason::NotListed
            }
            _ => return Ok(()),
        };
        Err(Denial {
            target: target(Some(host), None, port),
            reason,
        })
    }

    fn host_listed(&self, host: &str) -> bool {
        let host = normalize(host);
        self.hosts.iter().any(|p| p.matches(&host))
    }
}

const LOOPBACK: [IpNet; 2] = [
    IpNet::V4(ipnet::Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8)),
    IpNet::V6(ipnet::Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128)),
];

/// Loopback, an address Linux treats as this host (0.0.0.0/8, ::), or an
/// IPv6 form carrying a loopback IPv4 address (IPv4-compatible
/// `::127.0.0.1`, NAT64 `64:ff9b::127.0.0.1`, ...; the candidates of
/// [`agentcomputer_metadata_endpoints::embedded_ipv4`]).
fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.octets()[0] == 0,
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || agentcomputer_metadata_endpoints::embedded_ipv4(v6)
                    .iter()
                    .any(|a| a.is_loopback())
        }
    }
}

/// An address of this node, directly or in an IPv6 form carrying one of
/// its IPv4 addresses.
fn is_node(node: &NodeAddresses, ip: IpAddr) -> bool {
    node.contains(ip)
        || match ip {
            IpAddr::V4(_) => false,
            IpAddr::V6(v6) => agentcomputer_metadata_endpoints::embedded_ipv4(v6)
                .into_iter()
                .any(|a| node.contains(IpAddr::V4(a))),
        }
}

fn port_number(n: i32) -> Result<u16, PolicyError> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| PolicyError(format!("port {n} is outside 1-65535")))
}

/// `10.0.0.5:80`, `[::1]:80`, `example.com:443`, `example.com (10.0.0.5:443)`.
fn target(host: Option<&str>, ip: Option<IpAddr>, port: u16) -> String {
    let addr = ip.map(|ip| std::net::SocketAddr::new(ip, port).to_string());
    match (host, addr) {
        (Some(h), Some(a)) => format!("{h} ({a})"),
        (Some(h), None) => format!("{h}:{port}"),
        (None, Some(a)) => a,
        (None, None) => format!("port {port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CidrConfig, PortConfig};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    type Ports<'a> = &'a [(i32, Option<i32>)];

    fn list(cidrs: &[(&str, Ports)], hosts: &[&str]) -> Policy {
        Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: cidrs
                .iter()
                .map(|(cidr, ports)| CidrConfig {
                    cidr: cidr.to_string(),
                    ports: ports
                        .iter()
                        .map(|(port, end_port)| PortConfig {
                            port: *port,
                            end_port: *end_port,
                            protocol: Protocol::TCP,
                        })
                        .collect(),
                })
                .collect(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allow_metadata: false,
        })
        .unwrap()
    }

    fn reason(r: Result<(), Denial>) -> Option<DenyReason> {
        r.err().map(|d| d.reason)
    }

    #[test]
    fn default_denies_everything() {
        let p = Policy::default();
        assert_eq!(
            reason(p.check(None, ip("93.184.215.14"), 443)),
            Some(DenyReason::DenyAll)
        );
        assert_eq!(
            reason(p.precheck_name("example.com", 443)),
            Some(DenyReason::DenyAll)
        );
    }

    #[test]
    fn allow_all_keeps_metadata_and_loopback_out() {
        let p = Policy::allow_all();
        assert!(p.check(None, ip("93.184.215.14"), 443).is_ok());
        assert!(p.check(Some("x.example"), ip("10.1.2.3"), 22).is_ok());
        for m in [
            "169.254.169.254",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            // Other clouds' credential endpoints and the IPv6 forms that
            // reach them through a translator or a dual-stack socket.
            "169.254.170.2",
            "169.254.170.23",
            "fd00:ec2::23",
            "100.100.100.200",
            "::169.254.169.254",
            "64:ff9b::169.254.169.254",
            "64:ff9b:1::169.254.170.2",
            "2002:a9fe:a9fe::1",
        ] {
            assert_eq!(
                reason(p.check(None, ip(m), 80)),
                Some(DenyReason::Metadata),
                "{m}"
            );
        }
        for l in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "0.0.0.0",
            "::",
            "::ffff:127.0.0.1",
            // IPv4-compatible and NAT64 forms of loopback.
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::7f00:1",
        ] {
            assert_eq!(
                reason(p.check(None, ip(l), 80)),
                Some(DenyReason::Local),
                "{l}"
            );
        }
        let with_metadata = Policy::new(EgressConfig {
            mode: Mode::AllowAll,
            allow_metadata: true,
            ..EgressConfig::default()
        })
        .unwrap();
        assert!(with_metadata.check(None, ip("169.254.169.254"), 80).is_ok());
    }

    #[test]
    fn the_nodes_addresses_need_a_rule_naming_them() {
        let node: NodeAddresses = [ip("10.0.0.7"), ip("2001:db8::7"), ip("192.0.2.2")]
            .into_iter()
            .collect();
        let open = Policy::allow_all();
        for a in [
            "10.0.0.7",
            "::ffff:10.0.0.7",
            "::10.0.0.7",
            "64:ff9b::10.0.0.7",
            "2001:db8::7",
        ] {
            assert_eq!(
                reason(open.check_on(&node, None, ip(a), 10250)),
                Some(DenyReason::Node),
                "{a}"
            );
        }
        // Other addresses, the node's neighbours included, stay open.
        assert!(open.check_on(&node, None, ip("10.0.0.8"), 80).is_ok());
        assert!(open.check_on(&node, None, ip("2001:db8::8"), 80).is_ok());
        assert_eq!(
            open.check_on(&node, None, ip("10.0.0.7"), 10250)
                .unwrap_err()
                .to_string(),
            "10.0.0.7:10250 is an address of this node; only a cidr or host rule naming it allows it"
        );
        // A CIDR rule containing it names it, on its ports; a /0 does not.
        let p = list(
            &[("10.0.0.0/24", &[(8080, None)]), ("0.0.0.0/0", &[])],
            &["db.example.com"],
        );
        assert!(p.check_on(&node, None, ip("10.0.0.7"), 8080).is_ok());
        assert_eq!(
            reason(p.check_on(&node, None, ip("10.0.0.7"), 10250)),
            Some(DenyReason::NotListed)
        );
        assert_eq!(
            reason(p.check_on(&node, None, ip("192.0.2.2"), 80)),
            Some(DenyReason::Node)
        );
        assert!(p.check_on(&node, None, ip("192.0.2.3"), 80).is_ok());
        // So does a host rule matching the name it was resolved from.
        assert!(
            p.check_on(&node, Some("db.example.com"), ip("192.0.2.2"), 5432)
                .is_ok()
        );
        assert_eq!(
            reason(p.check_on(&node, Some("x.example.com"), ip("192.0.2.2"), 5432)),
            Some(DenyReason::Node)
        );
        // Loopback keeps its own rule: a rule naming a node address does
        // not open it.
        assert_eq!(
            reason(p.check_on(&node, None, ip("127.0.0.1"), 8080)),
            Some(DenyReason::Local)
        );
    }

    #[test]
    fn control_addresses_are_refused_whatever_the_rules() {
        use crate::control::{ControlRule, Ports, Scope, what};
        let node: NodeAddresses = [ip("192.0.2.2"), ip("10.244.0.5")].into_iter().collect();
        let mut control = ControlAddresses::default();
        control.add([
            ControlRule::host(ip("192.0.2.2"), what::NODE),
            ControlRule::node_port(10250, what::KUBELET),
            ControlRule::node_port(7433, what::NODE_AGENT),
            ControlRule::host(ip("10.96.0.1"), what::API_SERVER),
            ControlRule {
                scope: Scope::Net("10.96.0.10/32".parse().unwrap()),
                ports: Ports::AllBut(53),
                what: what::DNS,
            },
        ]);
        let check = |p: &Policy, host: Option<&str>, a: &str, port| {
            p.check_in(&node, &control, host, ip(a), port)
        };
        let wide = list(
            &[
                ("127.0.0.0/8", &[]),
                ("192.0.2.2/32", &[]),
                ("10.0.0.0/8", &[]),
                ("0.0.0.0/0", &[]),
            ],
            &["api.example.com"],
        );
        for (p, host, a, port, w) in [
            (&wide, None, "192.0.2.2", 22, what::NODE),
            (&wide, None, "::ffff:192.0.2.2", 22, what::NODE),
            (&wide, None, "127.0.0.1", 10250, what::KUBELET),
            (&wide, None, "127.0.0.1", 7433, what::NODE_AGENT),
            (&wide, None, "10.244.0.5", 10250, what::KUBELET),
            (&wide, None, "10.244.0.5", 7433, what::NODE_AGENT),
            (&wide, None, "10.96.0.1", 443, what::API_SERVER),
            (
                &wide,
                Some("api.example.com"),
                "10.96.0.1",
                443,
                what::API_SERVER,
            ),
            (&wide, None, "10.96.0.10", 9153, what::DNS),
            (
                &Policy::allow_all(),
                None,
                "10.96.0.1",
                443,
                what::API_SERVER,
            ),
        ] {
            assert_eq!(
                reason(check(p, host, a, port)),
                Some(DenyReason::Control(w)),
                "{a}:{port}"
            );
        }
        // Everything else keeps the ordinary rules.
        assert!(check(&wide, None, "127.0.0.1", 8080).is_ok());
        assert!(check(&wide, None, "10.244.0.5", 8080).is_ok());
        assert!(check(&wide, None, "10.96.0.10", 53).is_ok());
        assert!(check(&wide, None, "10.96.0.2", 443).is_ok());
        // Deny-all and metadata are reported as before.
        assert_eq!(
            reason(Policy::default().check_in(&node, &control, None, ip("10.96.0.1"), 443)),
            Some(DenyReason::DenyAll)
        );
        assert_eq!(
            check(&wide, None, "10.96.0.1", 443)
                .unwrap_err()
                .to_string(),
            "10.96.0.1:443 is a control address (the API server); no egress rule reaches it unless the node agent's administrator allows it (--allow-control-addresses)"
        );
        // An exception hands the destination back to the rules: the node's
        // address then needs a rule naming it, as any node address does.
        control.allow(["192.0.2.2:5432".parse().unwrap()]);
        let check = |p: &Policy, a: &str, port| p.check_in(&node, &control, None, ip(a), port);
        assert!(check(&wide, "192.0.2.2", 5432).is_ok());
        assert_eq!(
            reason(check(&Policy::allow_all(), "192.0.2.2", 5432)),
            Some(DenyReason::Node)
        );
        assert_eq!(
            reason(check(&wide, "192.0.2.2", 5433)),
            Some(DenyReason::Control(what::NODE))
        );
    }

    #[test]
    fn the_live_interfaces_are_the_nodes() {
        // Whatever this machine's addresses are, allow-all reaches none.
        let now = node::current();
        let open = Policy::allow_all();
        for ifaddr in nix::ifaddrs::getifaddrs().unwrap() {
            let Some(addr) = ifaddr.address else { continue };
            let a = match (addr.as_sockaddr_in(), addr.as_sockaddr_in6()) {
                (Some(v4), _) => IpAddr::V4(v4.ip()),
                (_, Some(v6)) => IpAddr::V6(v6.ip()),
                _ => continue,
            };
            assert!(now.contains(a), "{a}");
            assert!(open.check(None, a, 80).is_err(), "{a}");
        }
    }

    #[test]
    fn cidr_rules_with_ports() {
        let p = list(
            &[
                ("10.0.0.0/8", &[(443, None), (8000, Some(8099))]),
                ("192.168.1.7/32", &[]),
                ("2001:db8::/32", &[(443, None)]),
            ],
            &[],
        );
        assert!(p.check(None, ip("10.1.2.3"), 443).is_ok());
        assert!(p.check(None, ip("10.1.2.3"), 8050).is_ok());
        assert_eq!(
            reason(p.check(None, ip("10.1.2.3"), 80)),
            Some(DenyReason::NotListed)
        );
        assert!(p.check(None, ip("192.168.1.7"), 1).is_ok());
        assert!(p.check(None, ip("192.168.1.8"), 1).is_err());
        assert!(p.check(None, ip("2001:db8::1"), 443).is_ok());
        assert!(p.check(None, ip("::ffff:10.0.0.1"), 443).is_ok());
        assert!(p.check(None, ip("11.0.0.1"), 443).is_err());
    }

    #[test]
    fn udp_port_rules_admit_no_tcp() {
        let p = Policy::new(EgressConfig {
            mode: Mode::AllowList,
            cidrs: vec![CidrConfig {
                cidr: "10.0.0.0/8".into(),
                ports: vec![PortConfig {
                    port: 53,
                    end_port: None,
                    protocol: Protocol::UDP,
                }],
            }],
            ..EgressConfig::default()
        })
        .unwrap();
        assert!(p.check(None, ip("10.0.0.1"), 53).is_err());
    }

    #[test]
    fn metadata_stays_out_of_ranges() {
        let p = list(&[("169.254.0.0/16", &[]), ("0.0.0.0/0", &[])], &[]);
        assert!(p.check(None, ip("169.254.1.1"), 80).is_ok());
        assert_eq!(
            reason(p.check(None, ip("169.254.169.254"), 80)),
            Some(DenyReason::Metadata)
        );
        // 0.0.0.0/0 is not a loopback rule.
        assert_eq!(
            reason(p.check(None, ip("127.0.0.1"), 80)),
            Some(DenyReason::Local)
        );
    }

    #[test]
    fn loopback_needs_a_loopback_rule() {
        let p = list(&[("127.0.0.1/32", &[(8080, None)]), ("::1/128", &[])], &[]);
        assert!(p.check(None, ip("127.0.0.1"), 8080).is_ok());
        assert!(p.check(Some("localhost"), ip("127.0.0.1"), 8080).is_ok());
        assert_eq!(
            reason(p.check(None, ip("127.0.0.1"), 8081)),
            Some(DenyReason::NotListed)
        );
        assert_eq!(
            reason(p.check(None, ip("127.0.0.2"), 8080)),
            Some(DenyReason::NotListed)
        );
        assert!(p.check(None, ip("::1"), 1).is_ok());
        assert!(p.check(None, ip("0.0.0.0"), 8080).is_err());
        // Without any loopback rule the message explains what would be needed.
        let wide = list(&[("10.0.0.0/8", &[])], &[]);
        assert_eq!(
            reason(wide.check(None, ip("127.0.0.1"), 8080)),
            Some(DenyReason::Local)
        );
    }

    #[test]
    fn host_rules_are_checked_against_the_addresses() {
        let p = list(&[], &["pypi.org", "*.example.com"]);
        assert!(p.precheck_name("pypi.org", 443).is_ok());
        assert!(p.precheck_name("PyPI.org.", 443).is_ok());
        assert!(p.precheck_name("a.example.com", 80).is_ok());
        assert_eq!(
            reason(p.precheck_name("example.com", 443)),
            Some(DenyReason::NotListed)
        );
        assert!(p.check(Some("pypi.org"), ip("151.101.0.223"), 443).is_ok());
        // A listed name does not open metadata or loopback (DNS rebinding).
        assert_eq!(
            reason(p.check(Some("a.example.com"), ip("169.254.169.254"), 80)),
            Some(DenyReason::Metadata)
        );
        assert_eq!(
            reason(p.check(Some("a.example.com"), ip("127.0.0.1"), 80)),
            Some(DenyReason::Local)
        );
        // Host rules match names, not the address itself.
        assert!(p.check(None, ip("151.101.0.223"), 443).is_err());
        assert!(p.check(Some("evil.org"), ip("151.101.0.223"), 443).is_err());
    }

    #[test]
    fn prechecks_need_a_lookup_when_cidrs_exist() {
        let p = list(&[("10.0.0.0/8", &[])], &[]);
        assert!(p.precheck_name("anything.internal", 80).is_ok());
        assert!(Policy::allow_all().precheck_name("x", 1).is_ok());
    }

    #[test]
    fn invalid_configs_are_refused() {
        let bad = |config: EgressConfig| Policy::new(config).unwrap_err().0;
        let cidr = |c: &str, port: i32, end: Option<i32>| CidrConfig {
            cidr: c.into(),
            ports: vec![PortConfig {
                port,
                end_port: end,
                protocol: Protocol::TCP,
            }],
        };
        let allow_list = |cidrs, hosts: &[&str]| EgressConfig {
            mode: Mode::AllowList,
            cidrs,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allow_metadata: false,
        };
        assert!(
            bad(EgressConfig {
                mode: Mode::AllowAll,
                hosts: vec!["a.com".into()],
                ..EgressConfig::default()
            })
            .contains("only be set when egress.mode is allow-list")
        );
        assert!(bad(allow_list(vec![cidr("10.0.0.0/33", 1, None)], &[])).contains("cidr"));
        assert!(bad(allow_list(vec![cidr("10.0.0.0/8", 0, None)], &[])).contains("port 0"));
        assert!(bad(allow_list(vec![cidr("10.0.0.0/8", 70000, None)], &[])).contains("70000"));
        assert!(bad(allow_list(vec![cidr("10.0.0.0/8", 90, Some(80))], &[])).contains("endPort"));
        assert!(bad(allow_list(vec![], &["*.Bad.com"])).contains("host rule"));
        // Host bits are allowed, as Kubernetes' isCIDR allows them.
        let p = Policy::new(allow_list(vec![cidr("10.1.2.3/8", 80, None)], &[])).unwrap();
        assert!(p.check(None, ip("10.9.9.9"), 80).is_ok());
    }

    #[test]
    fn denials_read_well() {
        let p = list(&[("10.0.0.0/8", &[(443, None)])], &[]);
        let d = p.check(None, ip("10.0.0.5"), 80).unwrap_err();
        assert_eq!(d.to_string(), "10.0.0.5:80 is not in the allow-list");
        let d = p
            .check(Some("db.internal"), ip("11.0.0.5"), 443)
            .unwrap_err();
        assert_eq!(
            d.to_string(),
            "db.internal (11.0.0.5:443) is not in the allow-list"
        );
        let d = Policy::default()
            .precheck_name("pypi.org", 443)
            .unwrap_err();
        assert_eq!(d.to_string(), "pypi.org:443: the egress mode is deny-all");
        let lo = list(&[("127.0.0.1/32", &[(18080, None)])], &[]);
        let d = lo.check(None, ip("127.0.0.1"), 18081).unwrap_err();
        assert_eq!(d.to_string(), "127.0.0.1:18081 is not in the allow-list");
    }
}
