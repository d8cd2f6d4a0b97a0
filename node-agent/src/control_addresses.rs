//! The node agent's control addresses (docs/egress.md, "Control
//! addresses"): what it tells the egress engine
//! ([`agentcomputer_egress::control`]) no computer may reach, whatever its
//! allow-list says, and the administrator's exceptions.
//!
//! * Both modes: the agent's own listening ports and the kubelet's 10250 on
//!   every address of the node, loopback included; `--control-addresses`;
//!   the exceptions of `--allow-control-addresses`.
//! * Cluster mode also: every port of the node's addresses (`--node-ips`),
//!   of the API server's Service address (`KUBERNETES_SERVICE_HOST`, which
//!   the kubelet sets in every pod), of the cluster DNS (the nameservers of
//!   `/etc/resolv.conf`, every port but 53), and of the endpoints of the
//!   `kubernetes` Service and of `--control-services`
//!   ([`watch_services`], read again every [`SERVICES_REFRESH`]).

use std::net::IpAddr;
use std::time::Duration;

use agentcomputer_egress::control::{self, AddrRule, ControlRule, Ports, what};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

/// The kubelet's port (its authenticated API).
pub const KUBELET_PORT: u16 = 10250;

/// How often the control Services' endpoints are read again.
pub const SERVICES_REFRESH: Duration = Duration::from_secs(30);

/// The Service whose endpoints are the API server's.
pub const API_SERVER_SERVICE: (&str, &str) = ("default", "kubernetes");

/// Command-line arguments shared by both modes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ControlArgs {
    /// More addresses no computer may reach whatever its egress policy says,
    /// comma-separated: CIDR[:PORT[-END]] (10.0.0.0/16, 192.0.2.1:9100,
    /// [fd00::/8]:443) or node:PORT[-END] (that port on every address of
    /// this node, loopback included).
    #[arg(long, env = "AGENTCOMPUTER_CONTROL_ADDRESSES", value_delimiter = ',', value_parser = parse_rule)]
    pub control_addresses: Vec<AddrRule>,
    /// Control addresses handed back to the computers' egress policies
    /// (same syntax): the kubelet, the API server, a node address, ... are
    /// then reached by the computers whose allow-list names them.
    #[arg(long, env = "AGENTCOMPUTER_ALLOW_CONTROL_ADDRESSES", value_delimiter = ',', value_parser = parse_rule)]
    pub allow_control_addresses: Vec<AddrRule>,
}

fn parse_rule(text: &str) -> Result<AddrRule, String> {
    text.parse()
}

/// Registers the kubelet's port, the agent's own `ports`, the declared
/// control addresses and the exceptions.
pub fn configure(args: &ControlArgs, own_ports: impl IntoIterator<Item = u16>) {
    let mut rules = vec![ControlRule::node_port(KUBELET_PORT, what::KUBELET)];
    rules.extend(
        own_ports
            .into_iter()
            .filter(|p| *p != 0)
            .map(|p| ControlRule::node_port(p, what::NODE_AGENT)),
    );
    rules.extend(
        args.control_addresses
            .iter()
            .cloned()
            .map(|r| ControlRule::from_rule(r, what::DECLARED)),
    );
    let allowed = args.allow_control_addresses.clone();
    control::update(|c| {
        c.add(rules);
        c.allow(allowed);
    });
}

/// Registers one more port of the agent's own (a listener bound after
/// [`configure`], on a port the system picked).
pub fn add_own_port(port: u16) {
    control::update(|c| c.add([ControlRule::node_port(port, what::NODE_AGENT)]));
}

/// Cluster mode's fixed control addresses: every port of `node_ips`, of
/// the API server's Service address `api_service` (from
/// `KUBERNETES_SERVICE_HOST`) and every port but 53 of the `nameservers`.
pub fn configure_cluster(node_ips: &[IpAddr], api_service: Option<IpAddr>, nameservers: &[IpAddr]) {
    let mut rules: Vec<ControlRule> = node_ips
        .iter()
        .map(|ip| ControlRule::host(*ip, what::NODE))
        .collect();
    rules.extend(api_service.map(|ip| ControlRule::host(ip, what::API_SERVER)));
    rules.extend(nameservers.iter().map(|ip| ControlRule {
        ports: Ports::AllBut(53),
        ..ControlRule::host(*ip, what::DNS)
    }));
    control::update(|c| c.add(rules));
}

/// The API server's Service address from the environment the kubelet gives
/// every pod (`KUBERNETES_SERVICE_HOST`); `None` outside a pod.
pub fn api_service_from_env() -> Option<IpAddr> {
    std::env::var("KUBERNETES_SERVICE_HOST").ok()?.parse().ok()
}

/// The `nameserver` addresses of a resolv.conf(5) text (comments, other
/// options and unparsable lines skipped).
pub fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            // An IPv6 nameserver may carry a zone: fe80::1%eth0.
            words.next()?.split('%').next()?.parse().ok()
        })
        .collect()
}

/// The nameservers of /etc/resolv.conf (none when it cannot be read).
pub fn system_nameservers() -> Vec<IpAddr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .map(|t| nameservers(&t))
        .unwrap_or_default()
}

/// A Service whose endpoints are control addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlService {
    pub namespace: String,
    pub name: String,
    /// What denials call it: `the API server`, `the ac-system/ac-operator-metrics Service`.
    pub what: &'static str,
}

impl std::str::FromStr for ControlService {
    type Err = String;

    /// `NAMESPACE/NAME`. Errors: no `/` or an empty part.
    fn from_str(text: &str) -> Result<ControlService, String> {
        match text.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(ControlService::new(ns, name))
            }
            _ => Err(format!("{text:?}: expected NAMESPACE/NAME of a Service")),
        }
    }
}

impl ControlService {
    /// The Service `namespace/name`; the API server's has its own text.
    pub fn new(namespace: &str, name: &str) -> ControlService {
        let what = if (namespace, name) == API_SERVER_SERVICE {
            what::API_SERVER
        } else {
            // Made once per Service named at start, for the process's life.
            Box::leak(format!("the {namespace}/{name} Service").into_boxed_str())
        };
        ControlService {
            namespace: namespace.into(),
            name: name.into(),
            what,
        }
    }

    /// Its endpoints' addresses now (the EndpointSlices labelled with its
    /// name). Errors: the API server's (e.g. forbidden).
    async fn addresses(&self, client: &kube::Client) -> kube::Result<Vec<IpAddr>> {
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &self.namespace);
        let params =
            ListParams::default().labels(&format!("kubernetes.io/service-name={}", self.name));
        Ok(endpoint_addresses(&api.list(&params).await?.items))
    }
}

/// Every endpoint address of `slices` (IPv4 and IPv6; FQDN slices skipped).
pub fn endpoint_addresses(slices: &[EndpointSlice]) -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = slices
        .iter()
        .filter(|s| s.address_type != "FQDN")
        .flat_map(|s| s.endpoints.iter().flatten())
        .flat_map(|e| &e.addresses)
        .filter_map(|a| a.parse().ok())
        .collect();
    addrs.sort();
    addrs.dedup();
    addrs
}

/// Keeps the endpoints of `services` among the control addresses, reading
/// them every [`SERVICES_REFRESH`] until the task is dropped. A Service
/// that cannot be read keeps its last known endpoints (a warning is
/// logged), so an API server outage opens nothing.
pub async fn watch_services(client: kube::Client, services: Vec<ControlService>) {
    loop {
        for service in &services {
            match service.addresses(&client).await {
                Ok(addrs) => {
                    // Its text is unique to it: the group of its endpoints.
                    let group = service.what;
                    let rules = addrs
                        .into_iter()
                        .map(|ip| ControlRule::host(ip, service.what));
                    control::update(|c| c.replace(group, rules));
                }
                Err(e) => tracing::warn!(
                    service = %format!("{}/{}", service.namespace, service.name),
                    error = %e,
                    "egress: cannot read a control Service's endpoints; keeping the last ones"
                ),
            }
        }
        tokio::time::sleep(SERVICES_REFRESH).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::Endpoint;

    #[test]
    fn resolv_conf_nameservers_are_read() {
        let text = "# generated\nsearch ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\nnameserver bogus\noptions ndots:5\n";
        assert_eq!(
            nameservers(text),
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "fe80::1".parse().unwrap()
            ]
        );
        assert!(nameservers("").is_empty());
    }

    #[test]
    fn endpoint_slices_give_their_addresses() {
        let slice = |kind: &str, addrs: &[&str]| EndpointSlice {
            address_type: kind.into(),
            endpoints: Some(vec![Endpoint {
                addresses: addrs.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let got = endpoint_addresses(&[
            slice("IPv4", &["192.0.2.10", "192.0.2.11"]),
            slice("IPv6", &["2001:db8::10"]),
            slice("FQDN", &["api.example.com"]),
            slice("IPv4", &["192.0.2.10"]),
        ]);
        let want: Vec<IpAddr> = ["192.0.2.10", "192.0.2.11", "2001:db8::10"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn control_services_parse() {
        let s: ControlService = "ac-system/ac-operator-metrics".parse().unwrap();
        assert_eq!(s.what, "the ac-system/ac-operator-metrics Service");
        let api: ControlService = "default/kubernetes".parse().unwrap();
        assert_eq!(api.what, what::API_SERVER);
        for bad in ["kubernetes", "/x", "x/", "a/b/c"] {
            assert!(bad.parse::<ControlService>().is_err(), "{bad}");
        }
    }
}
