//! The sandbox pod's NetworkPolicy, built from `spec.egress`
//! (networking.k8s.io/v1 NetworkPolicy semantics):
//! - every mode denies all ingress (execs reach the sandbox through the
//!   kubelet, not the network);
//! - deny-all: no egress rule, so nothing leaves the pod;
//! - allow-all: 0.0.0.0/0 and ::/0, each block with its own `except`: the
//!   cloud metadata and credential endpoints of its family and the IPv6
//!   prefixes that route to an IPv4 one (NAT64, 6to4, IPv4-compatible)
//!   (`agentcomputer_metadata_endpoints::denied_nets`, docs/egress.md).
//!   The IPv4-mapped forms (`::ffff:169.254.169.254`) are left out: the API
//!   server refuses them in an ipBlock, and no packet carries one (a socket
//!   given a mapped address sends IPv4, which the IPv4 block's `except`
//!   covers); the node agent's policy engine and proxy still refuse them;
//! - allow-list: each CIDR with its ports (metadata carved out of ranges
//!   that contain it), cluster DNS, and, when host names are listed, only the
//!   node agent's egress proxy port for those.
//!
//! `allowMetadata: true` drops the metadata exclusions.
//!
//! When sandbox pods run the container runtime's runner (the operator has a
//! runner image), every mode, deny-all included, also allows TCP to the
//! node agent pods' gRPC port ([`NODE_AGENT_GRPC_PORT`]): the runner dials
//! its node agent there. The agent checks the computer's token on that
//! connection like on any call.

use std::net::IpAddr;

use agentcomputer_crds::{
    AgentComputer, EgressMode, NODE_AGENT_GRPC_PORT, NODE_AGENT_PROXY_PORT, labels,
};
use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::{child_labels, netpol_name, owner};
use crate::context::Config;

/// Labels of the cluster DNS pods (kube-dns/CoreDNS keep `k8s-app: kube-dns`).
const DNS_LABEL: (&str, &str) = ("k8s-app", "kube-dns");

/// Builds the policy selecting the computer's sandbox pod.
pub fn build(c: &AgentComputer, cfg: &Config) -> NetworkPolicy {
    let egress = &c.spec.egress;
    let mut rules = match egress.mode {
        EgressMode::DenyAll => vec![],
        EgressMode::AllowAll => vec![NetworkPolicyEgressRule {
            to: Some(vec![
                ip_peer("0.0.0.0/0".parse().unwrap(), egress.allow_metadata),
                ip_peer("::/0".parse().unwrap(), egress.allow_metadata),
            ]),
            ports: None,
        }],
        EgressMode::AllowList => allow_list(c, cfg),
    };
    if cfg.runner_image.is_some() {
        rules.push(to_agents(cfg, NODE_AGENT_GRPC_PORT));
    }
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(netpol_name(c)),
            namespace: c.namespace(),
            labels: Some(child_labels(c, "egress")),
            owner_references: Some(owner(c)),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(sandbox_selector(c)),
            // No rule lists at all rather than empty ones: the API server
            // drops empty lists, and applying them would rewrite the object
            // on every reconcile.
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: None,
            egress: (!rules.is_empty()).then_some(rules),
        }),
    }
}

/// Selects the computer's sandbox pod.
pub fn sandbox_selector(c: &AgentComputer) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            [
                (labels::COMPUTER.to_string(), c.name_any()),
                (labels::COMPONENT.to_string(), "sandbox".to_string()),
            ]
            .into(),
        ),
        match_expressions: None,
    }
}

fn allow_list(c: &AgentComputer, cfg: &Config) -> Vec<NetworkPolicyEgressRule> {
    let egress = &c.spec.egress;
    let mut rules = Vec::new();
    for rule in &egress.cidrs {
        // The API server validated the syntax; a value it let through but we
        // cannot parse is skipped rather than widened.
        let Ok(net) = rule.cidr.parse::<IpNet>().map(|n| n.trunc()) else {
            continue;
        };
        if !egress.allow_metadata && metadata_nets().any(|m| m.contains(&net)) {
            continue; // the range is all metadata: allowing it would defeat the exclusion
        }
        let ports = (!rule.ports.is_empty()).then(|| {
            rule.ports
                .iter()
                .map(|p| NetworkPolicyPort {
                    port: Some(IntOrString::Int(p.port)),
                    end_port: p.end_port,
                    protocol: Some(p.protocol.as_str().into()),
                })
                .collect()
        });
        rules.push(NetworkPolicyEgressRule {
            to: Some(vec![ip_peer(net, egress.allow_metadata)]),
            ports,
        });
    }
    // Name resolution for the listed ranges; host names resolve in the proxy.
    rules.push(NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector::default()),
            pod_selector: Some(LabelSelector {
                match_labels: Some([(DNS_LABEL.0.to_string(), DNS_LABEL.1.to_string())].into()),
                match_expressions: None,
            }),
            ip_block: None,
        }]),
        ports: Some(
            ["UDP", "TCP"]
                .iter()
                .map(|p| NetworkPolicyPort {
                    port: Some(IntOrString::Int(53)),
                    end_port: None,
                    protocol: Some((*p).into()),
                })
                .collect(),
        ),
    });
    if !egress.hosts.is_empty() {
        rules.push(to_agents(cfg, NODE_AGENT_PROXY_PORT));
    }
    rules
}

/// TCP to `port` of the node agent pods (agent namespace, agent labels).
fn to_agents(cfg: &Config, port: u16) -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(
                    [(
                        "kubernetes.io/metadata.name".to_string(),
                        cfg.agent_namespace.clone(),
                    )]
                    .into(),
                ),
                match_expressions: None,
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(cfg.agent_labels.clone()),
                match_expressions: None,
            }),
            ip_block: None,
        }]),
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(i32::from(port))),
            end_port: None,
            protocol: Some("TCP".into()),
        }]),
    }
}

/// The cloud metadata and credential endpoints and their IPv6 embeddings,
/// from the list the node agent's policy engine uses too.
fn metadata_nets() -> impl Iterator<Item = IpNet> {
    agentcomputer_metadata_endpoints::denied_nets().into_iter()
}

/// An ipBlock peer for `net`, with the metadata addresses it contains carved
/// out unless allowed. Every `except` is one the API server accepts: of the
/// family of `net`, a strict subset of it, and never IPv4-mapped IPv6.
fn ip_peer(net: IpNet, allow_metadata: bool) -> NetworkPolicyPeer {
    let except: Vec<String> = if allow_metadata {
        vec![]
    } else {
        metadata_nets()
            .filter(|m| !ipv4_mapped(m))
            .filter(|m| {
                same_family(m.addr(), net.addr())
                    && net.contains(m)
                    && m.prefix_len() > net.prefix_len()
            })
            .map(|m| m.to_string())
            .collect()
    };
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: net.to_string(),
            except: (!except.is_empty()).then_some(except),
        }),
        namespace_selector: None,
        pod_selector: None,
    }
}

/// `::ffff:a.b.c.d/n`: an IPv4 address in IPv6 form, which the API server
/// refuses in an ipBlock.
fn ipv4_mapped(net: &IpNet) -> bool {
    matches!(net, IpNet::V6(v6) if v6.addr().to_ipv4_mapped().is_some())
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::{
        AgentComputerSpec, CidrRule, EgressSpec, PortRule, Protocol, StorageSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn computer(egress: EgressSpec) -> AgentComputer {
        let mut c = AgentComputer::new(
            "c1",
            AgentComputerSpec {
                storage: StorageSpec {
                    size: Quantity("1Gi".into()),
                    reclaim_policy: Default::default(),
                    max_inodes: None,
                },
                runtimes: Default::default(),
                sandbox: None,
                egress,
                limits: Default::default(),
                node_selector: None,
                tolerations: None,
                source: None,
                retention: None,
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("u1".into());
        c
    }

    fn egress_of(np: &NetworkPolicy) -> Vec<NetworkPolicyEgressRule> {
        np.spec.as_ref().unwrap().egress.clone().unwrap_or_default()
    }

    #[test]
    fn deny_all_has_no_egress_and_no_ingress() {
        let np = build(&computer(EgressSpec::default()), &Config::default());
        let spec = np.spec.as_ref().unwrap();
        assert_eq!(spec.policy_types.as_deref().unwrap(), ["Ingress", "Egress"]);
        assert!(spec.egress.is_none(), "no egress rule admits nothing");
        assert!(spec.ingress.is_none(), "no ingress rule admits nothing");
        assert_eq!(
            spec.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["agentcomputer.dev/computer"],
            "c1"
        );
    }

    #[test]
    fn with_a_runner_every_mode_reaches_only_the_agents_grpc_port() {
        let cfg = Config {
            runner_image: Some("registry/node-agent:1".into()),
            ..Config::default()
        };
        let np = build(&computer(EgressSpec::default()), &cfg);
        let rules = egress_of(&np);
        assert_eq!(rules.len(), 1, "deny-all: the runner's connection only");
        let peer = &rules[0].to.as_ref().unwrap()[0];
        assert!(peer.ip_block.is_none());
        assert_eq!(
            peer.namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            cfg.agent_namespace
        );
        assert_eq!(
            peer.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap(),
            &cfg.agent_labels
        );
        let ports = rules[0].ports.as_ref().unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].port, Some(IntOrString::Int(7433)));
        assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        let open = EgressSpec {
            mode: EgressMode::AllowAll,
            ..Default::default()
        };
        let rules = egress_of(&build(&computer(open), &cfg));
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[1].ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(7433))
        );
    }

    #[test]
    fn allow_all_excludes_metadata_unless_allowed() {
        let e = EgressSpec {
            mode: EgressMode::AllowAll,
            ..Default::default()
        };
        let rules = egress_of(&build(&computer(e.clone()), &Config::default()));
        let peers = rules[0].to.as_ref().unwrap();
        let v4 = peers[0].ip_block.as_ref().unwrap();
        assert_eq!(v4.cidr, "0.0.0.0/0");
        let v4_except = v4.except.as_deref().unwrap();
        for a in [
            "169.254.169.254/32",
            "169.254.170.2/32",
            "169.254.170.23/32",
            "100.100.100.200/32",
        ] {
            assert!(v4_except.iter().any(|e| e == a), "{a} in {v4_except:?}");
        }
        let v6 = peers[1].ip_block.as_ref().unwrap();
        let v6_except = v6.except.as_deref().unwrap();
        for a in [
            "fd00:ec2::254/128",
            "fd00:ec2::23/128",
            "::a9fe:a9fe/128",
            "64:ff9b::a9fe:a9fe/128",
            "64:ff9b:1::a9fe:aa02/128",
            "2002:a9fe:a9fe::/48",
            "64:ff9b::6464:64c8/128",
        ] {
            assert!(v6_except.iter().any(|e| e == a), "{a} in {v6_except:?}");
        }
        assert!(!v6_except.iter().any(|e| e.starts_with("::ffff:")));
        // The shared list but its IPv4-mapped forms, which the policy
        // engine denies as the IPv4 addresses they are.
        let shared = agentcomputer_metadata_endpoints::denied_nets();
        let mapped = shared.iter().filter(|n| ipv4_mapped(n)).count();
        assert!(mapped > 0);
        assert_eq!(v4_except.len() + v6_except.len(), shared.len() - mapped);
        let open = EgressSpec {
            allow_metadata: true,
            ..e
        };
        let rules = egress_of(&build(&computer(open), &Config::default()));
        assert!(
            rules[0].to.as_ref().unwrap()[0]
                .ip_block
                .as_ref()
                .unwrap()
                .except
                .is_none()
        );
    }

    #[test]
    fn allow_list_ports_dns_proxy_and_metadata_ranges() {
        let e = EgressSpec {
            mode: EgressMode::AllowList,
            cidrs: vec![
                CidrRule {
                    cidr: "10.20.0.0/16".into(),
                    ports: vec![PortRule {
                        port: 5432,
                        end_port: None,
                        protocol: Protocol::Tcp,
                    }],
                },
                CidrRule {
                    cidr: "169.254.0.0/16".into(),
                    ports: vec![],
                },
                CidrRule {
                    cidr: "169.254.169.254/32".into(),
                    ports: vec![],
                },
            ],
            hosts: vec!["pypi.org".into()],
            allow_metadata: false,
        };
        let rules = egress_of(&build(&computer(e), &Config::default()));
        // 2 CIDR rules (the bare metadata /32 is dropped) + DNS + proxy.
        assert_eq!(rules.len(), 4, "{rules:#?}");
        let r0 = &rules[0];
        assert_eq!(
            r0.to.as_ref().unwrap()[0].ip_block.as_ref().unwrap().cidr,
            "10.20.0.0/16"
        );
        assert_eq!(
            r0.ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(5432))
        );
        let r1 = rules[1].to.as_ref().unwrap()[0].ip_block.as_ref().unwrap();
        assert_eq!(
            r1.except.as_deref().unwrap(),
            [
                "169.254.169.254/32",
                "169.254.170.2/32",
                "169.254.170.23/32",
                "169.254.0.23/32"
            ]
        );
        let dns = &rules[2];
        assert_eq!(dns.ports.as_ref().unwrap().len(), 2);
        let proxy = &rules[3];
        assert_eq!(
            proxy.ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(3128))
        );
        let peer = &proxy.to.as_ref().unwrap()[0];
        assert_eq!(
            peer.namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "agentcomputer-system"
        );
    }

    /// What the API server's ipBlock validation asks of every `except`:
    /// no IPv4-mapped IPv6 address, same family as `cidr`, a strict subset.
    fn assert_valid_blocks(np: &NetworkPolicy) {
        for rule in egress_of(np) {
            for peer in rule.to.unwrap_or_default() {
                let Some(block) = peer.ip_block else { continue };
                let cidr: IpNet = block.cidr.parse().unwrap();
                for e in block.except.unwrap_or_default() {
                    let ex: IpNet = e.parse().unwrap();
                    if let IpNet::V6(v6) = ex {
                        assert!(
                            v6.addr().to_ipv4_mapped().is_none(),
                            "IPv4-mapped {e} in the except of {cidr}"
                        );
                    }
                    assert!(
                        same_family(ex.addr(), cidr.addr())
                            && cidr.contains(&ex)
                            && ex.prefix_len() > cidr.prefix_len(),
                        "{e} is not a strict subset of {cidr}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_ip_block_is_one_the_api_server_accepts() {
        let allow_all = EgressSpec {
            mode: EgressMode::AllowAll,
            ..Default::default()
        };
        let np = build(&computer(allow_all), &Config::default());
        assert_valid_blocks(&np);
        let v6 = egress_of(&np)[0].to.as_ref().unwrap()[1]
            .ip_block
            .clone()
            .unwrap();
        assert_eq!(v6.cidr, "::/0");
        // The IPv4 metadata addresses are carved out of the IPv4 block;
        // the IPv6 embeddings that route elsewhere (NAT64, 6to4) of the IPv6.
        assert!(
            v6.except
                .as_ref()
                .unwrap()
                .contains(&"64:ff9b::a9fe:a9fe/128".to_string())
        );
        let list = EgressSpec {
            mode: EgressMode::AllowList,
            cidrs: [
                "0.0.0.0/0",
                "::/0",
                "169.254.0.0/16",
                "fd00::/8",
                "::/96",
                "64:ff9b::/96",
            ]
            .iter()
            .map(|c| CidrRule {
                cidr: (*c).into(),
                ports: vec![],
            })
            .collect(),
            ..Default::default()
        };
        assert_valid_blocks(&build(&computer(list), &Config::default()));
    }

    #[test]
    fn allow_list_without_hosts_has_no_proxy_rule() {
        let e = EgressSpec {
            mode: EgressMode::AllowList,
            cidrs: vec![CidrRule {
                cidr: "2001:db8::/32".into(),
                ports: vec![],
            }],
            ..Default::default()
        };
        let rules = egress_of(&build(&computer(e), &Config::default()));
        assert_eq!(rules.len(), 2);
        assert!(rules[0].ports.is_none());
    }
}
