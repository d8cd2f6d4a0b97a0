//! Control addresses: the node's and the cluster's own services (the
//! kubelet, the API server, the cluster DNS's other ports, the node agent's
//! and the operator's ports, the node's addresses given by `--node-ips`).
//!
//! A computer's connections are made by the node agent, from the agent's
//! network namespace, so they would reach these services with the agent's
//! standing whenever an allow-list happened to name their range (a tenant
//! allowed `10.0.0.0/8` reaches a kubelet at `10.0.0.7:10250`). No egress
//! rule reaches a control address: [`crate::Policy::check`] refuses it
//! before looking at the policy ([`crate::DenyReason::Control`]), unless
//! the node agent's administrator lists it as allowed
//! (`--allow-control-addresses`, chart value `egress.allowControlAddresses`);
//! an allowed control address is then decided by the ordinary rules.
//!
//! The set is the node agent's, one per process ([`current`], [`update`]):
//! fixed entries from its command line and its own listeners, and entries
//! it discovers and replaces while it runs (a Service's endpoints), each
//! under a group name so a newer discovery replaces the older one.

use parking_lot::RwLock;
use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Arc;

use ipnet::IpNet;

/// What a control address is, as denials print it.
pub mod what {
    /// The node agent's own listeners (API, egress proxy, share links,
    /// metrics), on every address of the node, and other nodes' agents.
    pub const NODE_AGENT: &str = "the node agent";
    /// Port 10250 on every address of the node.
    pub const KUBELET: &str = "the kubelet";
    /// The `kubernetes` Service's address and its endpoints.
    pub const API_SERVER: &str = "the API server";
    /// The cluster DNS's addresses, every port but 53.
    pub const DNS: &str = "the cluster DNS";
    /// The operator's pods and Service.
    pub const OPERATOR: &str = "the operator";
    /// An address given by `--node-ips`.
    pub const NODE: &str = "an address of this node";
    /// An entry of `--control-addresses`.
    pub const DECLARED: &str = "declared by --control-addresses";
}

/// Where an address rule applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every address of a range.
    Net(IpNet),
    /// Every address of this node ([`crate::node`]), loopback and "this
    /// host" addresses included.
    Node,
}

/// An address rule of the command line: `CIDR`, `CIDR:PORT`,
/// `CIDR:PORT-END`, `[IPV6-CIDR]:PORT`, a bare address (one host), or
/// `node:PORT[-END]` (that port on every address of this node). No port
/// means every port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrRule {
    /// The addresses: a CIDR, or every address of this node.
    pub scope: Scope,
    /// TCP ports; `None` is every port.
    pub ports: Option<RangeInclusive<u16>>,
}

impl AddrRule {
    fn admits(&self, ip: IpAddr, port: u16, on_node: bool) -> bool {
        self.ports.as_ref().is_none_or(|r| r.contains(&port))
            && match &self.scope {
                Scope::Net(net) => contains(net, ip),
                Scope::Node => on_node,
            }
    }
}

impl FromStr for AddrRule {
    type Err = String;

    /// Errors: a range that is not an IPv4 or IPv6 CIDR or address, a port
    /// outside 1-65535, an end port below the port. The message quotes the
    /// text.
    fn from_str(text: &str) -> Result<AddrRule, String> {
        let bad = |why: &str| {
            Err(format!(
                "{text:?}: {why}; expected CIDR[:PORT[-END]] (10.0.0.0/8:443, [fd00::/8]:80, 192.0.2.1) or node:PORT[-END]"
            ))
        };
        let (addr, ports) = if let Some(rest) = text.strip_prefix('[') {
            match rest.split_once(']') {
                Some((addr, "")) => (addr, None),
                Some((addr, tail)) => match tail.strip_prefix(':') {
                    Some(ports) => (addr, Some(ports)),
                    None => return bad("text after the bracketed address"),
                },
                None => return bad("a '[' without ']'"),
            }
        } else if text.matches(':').count() == 1 {
            let (addr, ports) = text.split_once(':').unwrap();
            (addr, Some(ports))
        } else {
            (text, None)
        };
        let ports = match ports {
            None => None,
            Some(p) => {
                let (start, end) = p.split_once('-').unwrap_or((p, p));
                let number = |s: &str| s.parse::<u16>().ok().filter(|n| *n != 0);
                match (number(start), number(end)) {
                    (Some(s), Some(e)) if s <= e => Some(s..=e),
                    (Some(_), Some(_)) => return bad("the end port is below the port"),
                    _ => return bad("a port must be 1-65535"),
                }
            }
        };
        let scope = if addr == "node" {
            Scope::Node
        } else if let Ok(net) = addr.parse::<IpNet>() {
            Scope::Net(canonical_net(net.trunc()))
        } else if let Ok(ip) = addr.parse::<IpAddr>() {
            Scope::Net(IpNet::from(ip.to_canonical()))
        } else {
            return bad("not an IPv4 or IPv6 CIDR or address");
        };
        Ok(AddrRule { scope, ports })
    }
}

impl fmt::Display for AddrRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addr = match &self.scope {
            Scope::Node => "node".to_string(),
            Scope::Net(IpNet::V6(n)) if self.ports.is_some() => format!("[{n}]"),
            Scope::Net(n) => n.to_string(),
        };
        match &self.ports {
            None => write!(f, "{addr}"),
            Some(r) if r.start() == r.end() => write!(f, "{addr}:{}", r.start()),
            Some(r) => write!(f, "{addr}:{}-{}", r.start(), r.end()),
        }
    }
}

/// Which ports of a control address are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    /// Every port.
    All,
    /// These ports only.
    Range(RangeInclusive<u16>),
    /// Every port but this one (the cluster DNS keeps 53).
    AllBut(u16),
}

impl Ports {
    fn contains(&self, port: u16) -> bool {
        match self {
            Ports::All => true,
            Ports::Range(r) => r.contains(&port),
            Ports::AllBut(p) => port != *p,
        }
    }
}

/// One control address: where, which ports, and what answers there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRule {
    /// The addresses: a CIDR, or every address of this node.
    pub scope: Scope,
    /// The ports refused there.
    pub ports: Ports,
    /// Printed in the denial, e.g. [`what::KUBELET`].
    pub what: &'static str,
}

impl ControlRule {
    /// Every port of `ip` (in canonical form).
    pub fn host(ip: IpAddr, what: &'static str) -> ControlRule {
        ControlRule {
            scope: Scope::Net(IpNet::from(ip.to_canonical())),
            ports: Ports::All,
            what,
        }
    }

    /// `port` on every address of this node.
    pub fn node_port(port: u16, what: &'static str) -> ControlRule {
        ControlRule {
            scope: Scope::Node,
            ports: Ports::Range(port..=port),
            what,
        }
    }

    /// An address rule of the command line as a control address.
    pub fn from_rule(rule: AddrRule, what: &'static str) -> ControlRule {
        ControlRule {
            scope: rule.scope,
            ports: rule.ports.map_or(Ports::All, Ports::Range),
            what,
        }
    }

    fn matches(&self, ip: IpAddr, port: u16, on_node: bool) -> bool {
        self.ports.contains(port)
            && match &self.scope {
                Scope::Net(net) => contains(net, ip),
                Scope::Node => on_node,
            }
    }
}

/// The node agent's control addresses and the administrator's exceptions.
/// [`ControlAddresses::default`] has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlAddresses {
    /// (group, rule): a group is replaced as a whole by
    /// [`ControlAddresses::replace`].
    rules: Vec<(&'static str, ControlRule)>,
    allowed: Vec<AddrRule>,
}

impl ControlAddresses {
    /// Adds fixed control addresses (group `"fixed"`).
    pub fn add(&mut self, rules: impl IntoIterator<Item = ControlRule>) {
        self.rules.extend(rules.into_iter().map(|r| ("fixed", r)));
    }

    /// Replaces every rule of `group` with `rules` (a newer discovery of
    /// the same source).
    pub fn replace(&mut self, group: &'static str, rules: impl IntoIterator<Item = ControlRule>) {
        self.rules.retain(|(g, _)| *g != group);
        self.rules.extend(rules.into_iter().map(|r| (group, r)));
    }

    /// Lets the ordinary egress rules decide the destinations `rules`
    /// admit, control addresses or not.
    pub fn allow(&mut self, rules: impl IntoIterator<Item = AddrRule>) {
        self.allowed.extend(rules);
    }

    /// The rules of `group`.
    pub fn group(&self, group: &str) -> impl Iterator<Item = &ControlRule> {
        self.rules
            .iter()
            .filter(move |(g, _)| *g == group)
            .map(|(_, r)| r)
    }

    /// What answers at `ip:port` if it is a control address not allowed by
    /// an exception; `None` otherwise. `on_node`: whether `ip` is an
    /// address of this node (loopback included), for [`Scope::Node`].
    /// IPv6 forms carrying an IPv4 address (mapped, compatible, NAT64,
    /// 6to4, Teredo) are judged as that address too.
    pub fn refusal(&self, ip: IpAddr, port: u16, on_node: bool) -> Option<&'static str> {
        let ip = ip.to_canonical();
        let (_, rule) = self
            .rules
            .iter()
            .find(|(_, r)| r.matches(ip, port, on_node))?;
        match self.allowed.iter().any(|a| a.admits(ip, port, on_node)) {
            true => None,
            false => Some(rule.what),
        }
    }

    /// Whether there is no control address at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Whether `net` contains `ip`, or an IPv4 address an IPv6 `ip` carries.
fn contains(net: &IpNet, ip: IpAddr) -> bool {
    net.contains(&ip)
        || match (net, ip) {
            (IpNet::V4(_), IpAddr::V6(v6)) => agentcomputer_metadata_endpoints::embedded_ipv4(v6)
                .into_iter()
                .any(|a| net.contains(&IpAddr::V4(a))),
            _ => false,
        }
}

/// `::ffff:10.0.0.0/104` is `10.0.0.0/8`.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).unwrap_or(net),
            None => net,
        },
        _ => net,
    }
}

static CURRENT: RwLock<Option<Arc<ControlAddresses>>> = RwLock::new(None);

/// The node agent's control addresses now (none until [`update`]).
pub fn current() -> Arc<ControlAddresses> {
    CURRENT.read().clone().unwrap_or_default()
}

/// Changes the node agent's control addresses; they count from the next
/// decision on.
pub fn update(change: impl FnOnce(&mut ControlAddresses)) {
    let mut slot = CURRENT.write();
    let mut next = slot.as_deref().cloned().unwrap_or_default();
    change(&mut next);
    *slot = Some(Arc::new(next));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn address_rules_parse_and_print() {
        for (text, printed) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.1.2.3/8:443", "10.0.0.0/8:443"),
            ("192.0.2.1", "192.0.2.1/32"),
            ("192.0.2.1:10250", "192.0.2.1/32:10250"),
            ("[fd00::/8]:80-90", "[fd00::/8]:80-90"),
            ("[::1]:7433", "[::1/128]:7433"),
            ("fd00::/8", "fd00::/8"),
            ("node:10250", "node:10250"),
            ("node", "node"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ] {
            let rule: AddrRule = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(rule.to_string(), printed, "{text}");
        }
        for (text, why) in [
            ("10.0.0.0/33", "not an IPv4 or IPv6 CIDR"),
            ("10.0.0.0/8:0", "1-65535"),
            ("10.0.0.0/8:70000", "1-65535"),
            ("10.0.0.0/8:90-80", "end port is below"),
            ("[fd00::/8", "without ']'"),
            ("[fd00::/8]x", "after the bracketed"),
            ("kubelet:10250", "not an IPv4 or IPv6"),
            ("", "not an IPv4 or IPv6"),
        ] {
            let e = text.parse::<AddrRule>().unwrap_err();
            assert!(
                e.contains(why) && e.contains(&format!("{text:?}")),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn control_rules_refuse_by_address_port_and_node() {
        let mut c = ControlAddresses::default();
        c.add([
            ControlRule::host(ip("10.96.0.1"), what::API_SERVER),
            ControlRule {
                scope: Scope::Net("10.96.0.10/32".parse().unwrap()),
                ports: Ports::AllBut(53),
                what: what::DNS,
            },
            ControlRule::node_port(10250, what::KUBELET),
        ]);
        assert_eq!(
            c.refusal(ip("10.96.0.1"), 443, false),
            Some(what::API_SERVER)
        );
        assert_eq!(
            c.refusal(ip("::ffff:10.96.0.1"), 443, false),
            Some(what::API_SERVER)
        );
        assert_eq!(
            c.refusal(ip("64:ff9b::10.96.0.1"), 443, false),
            Some(what::API_SERVER)
        );
        assert_eq!(c.refusal(ip("10.96.0.2"), 443, false), None);
        assert_eq!(c.refusal(ip("10.96.0.10"), 53, false), None);
        assert_eq!(c.refusal(ip("10.96.0.10"), 9153, false), Some(what::DNS));
        assert_eq!(c.refusal(ip("192.0.2.2"), 10250, true), Some(what::KUBELET));
        assert_eq!(c.refusal(ip("192.0.2.2"), 10250, false), None);
        assert_eq!(c.refusal(ip("192.0.2.2"), 10251, true), None);
    }

    #[test]
    fn exceptions_let_the_ordinary_rules_decide() {
        let mut c = ControlAddresses::default();
        c.add([
            ControlRule::node_port(10250, what::KUBELET),
            ControlRule::host(ip("10.96.0.1"), what::API_SERVER),
        ]);
        c.allow(["192.0.2.2:10250".parse().unwrap()]);
        assert_eq!(c.refusal(ip("192.0.2.2"), 10250, true), None);
        assert_eq!(c.refusal(ip("192.0.2.3"), 10250, true), Some(what::KUBELET));
        c.allow(["node:10250".parse().unwrap()]);
        assert_eq!(c.refusal(ip("127.0.0.1"), 10250, true), None);
        assert_eq!(
            c.refusal(ip("10.96.0.1"), 443, false),
            Some(what::API_SERVER)
        );
    }

    #[test]
    fn a_group_is_replaced_as_a_whole() {
        let mut c = ControlAddresses::default();
        c.add([ControlRule::node_port(7433, what::NODE_AGENT)]);
        c.replace(
            "api",
            [ControlRule::host(ip("192.0.2.10"), what::API_SERVER)],
        );
        assert_eq!(
            c.refusal(ip("192.0.2.10"), 6443, false),
            Some(what::API_SERVER)
        );
        c.replace(
            "api",
            [ControlRule::host(ip("192.0.2.11"), what::API_SERVER)],
        );
        assert_eq!(c.refusal(ip("192.0.2.10"), 6443, false), None);
        assert_eq!(
            c.refusal(ip("192.0.2.11"), 6443, false),
            Some(what::API_SERVER)
        );
        assert_eq!(c.group("api").count(), 1);
        assert_eq!(
            c.refusal(ip("127.0.0.1"), 7433, true),
            Some(what::NODE_AGENT)
        );
    }
}
