//! The cloud metadata and credential endpoints a computer's programs may
//! not reach unless its egress policy sets `allowMetadata`, in one list
//! shared by the node agent's policy engine (`agentcomputer-egress`) and
//! the operator's NetworkPolicy `except` lists.
//!
//! From inside a pod these addresses hand out the node's or the pod's cloud
//! credentials. Besides the addresses themselves, IPv6 has forms that carry
//! an IPv4 address and reach it through a translator, a dual-stack socket
//! or a tunnel; [`embedded_ipv4`] decodes them and [`denied_nets`] lists
//! the ones expressible as CIDRs. The list and its sources are in
//! docs/egress.md.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// One endpoint: an address and the documentation naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The address.
    pub addr: IpAddr,
    /// Who serves it there, and the document that says so.
    pub source: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, source: &'static str) -> Endpoint {
    Endpoint {
        addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        source,
    }
}

#[allow(clippy::too_many_arguments)]
const fn v6(s: [u16; 8], source: &'static str) -> Endpoint {
    Endpoint {
        addr: IpAddr::V6(Ipv6Addr::new(
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
        )),
        source,
    }
}

/// Every denied endpoint, with its source.
pub const ENDPOINTS: &[Endpoint] = &[
    v4(
        169,
        254,
        169,
        254,
        "AWS EC2 instance metadata service (EC2 User Guide, \"Access instance metadata\"); \
         also Google Compute Engine (\"About VM metadata\"), Azure Instance Metadata Service, \
         Oracle Cloud Infrastructure (\"Getting Instance Metadata\"), DigitalOcean (\"Droplet \
         Metadata API\"), IBM Cloud VPC and OpenStack (\"Metadata service\")",
    ),
    v6(
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
        "AWS EC2 instance metadata service over IPv6 (EC2 User Guide, \"Access instance metadata\")",
    ),
    v4(
        169,
        254,
        170,
        2,
        "AWS ECS task metadata and IAM role credentials (ECS Developer Guide, \"Task IAM role\": \
         AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)",
    ),
    v4(
        169,
        254,
        170,
        23,
        "Amazon EKS Pod Identity Agent (EKS User Guide, \"Learn how EKS Pod Identity grants pods \
         access to AWS services\")",
    ),
    v6(
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23],
        "Amazon EKS Pod Identity Agent over IPv6 (EKS User Guide, same page)",
    ),
    v6(
        [0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254],
        "Google Compute Engine metadata server over IPv6 (\"Access VM metadata\", IPv6-only VMs)",
    ),
    v4(
        100,
        100,
        100,
        200,
        "Alibaba Cloud ECS instance metadata (ECS documentation, \"Instance metadata\")",
    ),
    v4(
        169,
        254,
        0,
        23,
        "Tencent Cloud CVM instance metadata, metadata.tencentyun.com (CVM documentation, \
         \"Instance Metadata\")",
    ),
    v4(
        168,
        63,
        129,
        16,
        "Azure WireServer, which hands VM extension settings (protected settings included) \
         to the guest agent (Azure docs, \"What is IP address 168.63.129.16?\")",
    ),
];

/// Whether `ip` is a denied endpoint, directly or in an IPv6 form that
/// embeds a denied IPv4 endpoint (see [`embedded_ipv4`]).
pub fn is_denied(ip: IpAddr) -> bool {
    if ENDPOINTS.iter().any(|e| e.addr == ip) {
        return true;
    }
    match ip {
        IpAddr::V4(_) => false,
        IpAddr::V6(v6) => embedded_ipv4(v6)
            .into_iter()
            .any(|a| ENDPOINTS.iter().any(|e| e.addr == IpAddr::V4(a))),
    }
}

/// NAT64 well-known prefix 64:ff9b::/96 (RFC 6052 section 2.1).
const NAT64_WKP: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);
/// NAT64 local-use prefix 64:ff9b:1::/48 (RFC 8215).
const NAT64_LOCAL: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48);
/// 6to4, 2002::/16 (RFC 3056 section 2).
const SIX_TO_FOUR: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);
/// Teredo, 2001::/32 (RFC 4380 section 4).
const TEREDO: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32);

/// The IPv4 addresses an IPv6 address may stand for:
/// * IPv4-mapped `::ffff:a.b.c.d` (RFC 4291 section 2.5.5.2), which a
///   dual-stack socket connects to as IPv4;
/// * IPv4-compatible `::a.b.c.d` (RFC 4291 section 2.5.5.1, deprecated);
/// * IPv4-translated `::ffff:0:a.b.c.d` (RFC 2765 section 2.1, SIIT; RFC
///   6145 keeps the translator), which a stateless translator turns into
///   IPv4;
/// * NAT64 `64:ff9b::a.b.c.d` (RFC 6052), and inside the local-use prefix
///   64:ff9b:1::/48 (RFC 8215) every RFC 6052 layout whose prefix fits in
///   it (prefix lengths 48, 56, 64 and 96, bits 64-71 skipped);
/// * 6to4 `2002:aabb:ccdd::/48` (RFC 3056);
/// * Teredo's client address, the last 32 bits inverted (RFC 4380).
///
/// Several candidates may come back: a caller denies if any is denied.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let b = ip.octets();
    let at = |i: usize| Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3]);
    let mut out = Vec::new();
    if let Some(a) = ip.to_ipv4_mapped() {
        out.push(a);
    }
    if b[..12].iter().all(|&x| x == 0) && !ip.is_unspecified() && !ip.is_loopback() {
        out.push(at(12));
    }
    if b[..8].iter().all(|&x| x == 0) && b[8..12] == [0xff, 0xff, 0, 0] {
        out.push(at(12));
    }
    if NAT64_WKP.contains(&ip) || NAT64_LOCAL.contains(&ip) {
        out.push(at(12));
    }
    if NAT64_LOCAL.contains(&ip) {
        // RFC 6052 section 2.2: /48: bits 48-63 and 72-87; /56: 56-63 and
        // 72-95; /64: 72-103 (bits 64-71, "u", are zero).
        out.push(Ipv4Addr::new(b[6], b[7], b[9], b[10]));
        out.push(Ipv4Addr::new(b[7], b[9], b[10], b[11]));
        out.push(Ipv4Addr::new(b[9], b[10], b[11], b[12]));
    }
    if SIX_TO_FOUR.contains(&ip) {
        out.push(at(2));
    }
    if TEREDO.contains(&ip) {
        let c = at(12).to_bits();
        out.push(Ipv4Addr::from_bits(!c));
    }
    out
}

/// The denied endpoints and their IPv6 embeddings as CIDRs, for
/// NetworkPolicy `except` lists: each endpoint as a /32 or /128; for each
/// IPv4 endpoint its IPv4-mapped, IPv4-compatible and NAT64 (64:ff9b::/96
/// and 64:ff9b:1::/96) /128s and its 6to4 /48. Teredo and the shorter
/// local-use NAT64 layouts put host bits before the IPv4 address, so they
/// are no prefix; the policy engine judges them ([`is_denied`]).
pub fn denied_nets() -> Vec<IpNet> {
    let mut out = Vec::new();
    for e in ENDPOINTS {
        match e.addr {
            IpAddr::V6(a) => out.push(IpNet::V6(Ipv6Net::new_assert(a, 128))),
            IpAddr::V4(a) => {
                out.push(IpNet::V4(Ipv4Net::new_assert(a, 32)));
                let [w, x, y, z] = a.octets();
                let low = u16::from_be_bytes([w, x]);
                let high = u16::from_be_bytes([y, z]);
                for prefix in [
                    [0, 0, 0, 0, 0, 0xffff],
                    [0, 0, 0, 0, 0, 0],
                    [0x64, 0xff9b, 0, 0, 0, 0],
                    [0x64, 0xff9b, 1, 0, 0, 0],
                ] {
                    let s = Ipv6Addr::new(
                        prefix[0], prefix[1], prefix[2], prefix[3], prefix[4], prefix[5], low, high,
                    );
                    out.push(IpNet::V6(Ipv6Net::new_assert(s, 128)));
                }
                let six_to_four = Ipv6Addr::new(0x2002, low, high, 0, 0, 0, 0, 0);
                out.push(IpNet::V6(Ipv6Net::new_assert(six_to_four, 48)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_documented_endpoints_and_their_embeddings_are_denied() {
        for a in [
            "169.254.169.254",
            "fd00:ec2::254",
            "169.254.170.2",
            "169.254.170.23",
            "fd00:ec2::23",
            "100.100.100.200",
            "fd20:ce::254",
            "169.254.0.23",
            "168.63.129.16",
            // IPv4-mapped, IPv4-compatible, NAT64 well-known and local-use.
            "::ffff:169.254.169.254",
            "::169.254.169.254",
            "::a9fe:aa02",
            // IPv4-translated (SIIT).
            "::ffff:0:169.254.169.254",
            "64:ff9b::169.254.169.254",
            "64:ff9b::100.100.100.200",
            "64:ff9b:1::169.254.170.23",
            // Local-use NAT64 with a /48 and a /64 prefix (RFC 6052 2.2).
            "64:ff9b:1:a9fe:a9:fe00::",
            "64:ff9b:1:0:a9:fea9:fe00:0",
            // 6to4 of 169.254.169.254, any host part.
            "2002:a9fe:a9fe::1",
            "2002:a9fe:aa02:5::7",
            // Teredo with the client 169.254.169.254 (inverted).
            "2001:0:4136:e378:8000:63bf:5601:5601",
        ] {
            assert!(is_denied(ip(a)), "{a}");
        }
    }

    #[test]
    fn ordinary_addresses_pass() {
        for a in [
            "169.254.169.253",
            "169.254.1.1",
            "100.100.100.201",
            "8.8.8.8",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
            "2001:db8::1",
            "::1",
            "::",
            "2606:4700::1111",
        ] {
            assert!(!is_denied(ip(a)), "{a}");
        }
    }

    #[test]
    fn every_denied_net_is_denied_by_the_engine() {
        let nets = denied_nets();
        assert_eq!(nets.len(), 3 + 6 * 6);
        for n in nets {
            assert!(is_denied(n.addr()), "{n}");
            assert!(is_denied(n.broadcast()), "{n}");
        }
    }
}
