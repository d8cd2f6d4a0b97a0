//! The addresses of this node: every address of every network interface in
//! the agent's network namespace, plus addresses the agent is told belong
//! to its node although no interface here carries them (in a cluster, the
//! node's own addresses when the agent runs in a pod network).
//!
//! A computer's connections are made by the node agent (in-process
//! runtimes, the egress proxy), so each of these addresses reaches the
//! node's own services (a kubelet, databases, the agent itself) just as
//! loopback does. The policy treats them alike: only a rule naming the
//! address reaches it ([`crate::Policy::check`]).
//!
//! Interfaces and their addresses change while the agent runs, so the set
//! is read again (getifaddrs(3), one netlink dump) when the last read is
//! older than [`REFRESH`]; between reads a decision costs one read lock
//! and a hash lookup.

use parking_lot::RwLock;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one read of the interfaces' addresses is used.
pub const REFRESH: Duration = Duration::from_secs(1);

/// A set of node addresses, compared in canonical form (an IPv4-mapped
/// IPv6 address is its IPv4 address).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddresses {
    addrs: HashSet<IpAddr>,
}

impl NodeAddresses {
    /// Whether `ip` (in any spelling [`IpAddr::to_canonical`] reduces) is
    /// one of the set.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.addrs.contains(&ip.to_canonical())
    }

    /// Every address of every interface of this network namespace, plus
    /// the addresses given to [`add_node_addresses`]. Errors: getifaddrs
    /// failing (out of memory or file descriptors).
    pub fn read() -> std::io::Result<NodeAddresses> {
        let mut set: NodeAddresses = extra().into_iter().collect();
        for ifaddr in nix::ifaddrs::getifaddrs()? {
            let Some(addr) = ifaddr.address else { continue };
            if let Some(v4) = addr.as_sockaddr_in() {
                set.addrs.insert(IpAddr::V4(v4.ip()));
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                set.addrs.insert(IpAddr::V6(v6.ip()).to_canonical());
            }
        }
        Ok(set)
    }

    /// How many addresses the set holds.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }
}

impl FromIterator<IpAddr> for NodeAddresses {
    fn from_iter<I: IntoIterator<Item = IpAddr>>(iter: I) -> NodeAddresses {
        NodeAddresses {
            addrs: iter.into_iter().map(|ip| ip.to_canonical()).collect(),
        }
    }
}

struct Cache {
    read_at: Instant,
    addrs: Arc<NodeAddresses>,
}

static CACHE: RwLock<Option<Cache>> = RwLock::new(None);
static EXTRA: RwLock<Vec<IpAddr>> = RwLock::new(Vec::new());

fn extra() -> Vec<IpAddr> {
    EXTRA.read().clone()
}

/// Adds addresses that belong to this node although no interface of the
/// agent's network namespace carries them (in a cluster: the node's
/// addresses, given to an agent in a pod network). They count from the
/// next decision on.
pub fn add_node_addresses(addrs: impl IntoIterator<Item = IpAddr>) {
    EXTRA
        .write()
        .extend(addrs.into_iter().map(|ip| ip.to_canonical()));
    *CACHE.write() = None;
}

/// The node's addresses now: the last read if younger than [`REFRESH`],
/// else a new read. When a read fails the previous set stays in use (and
/// with none yet, the added addresses alone), and the next decision tries
/// again.
pub fn current() -> Arc<NodeAddresses> {
    if let Some(c) = CACHE.read().as_ref()
        && c.read_at.elapsed() < REFRESH
    {
        return c.addrs.clone();
    }
    let mut cache = CACHE.write();
    if let Some(c) = cache.as_ref()
        && c.read_at.elapsed() < REFRESH
    {
        return c.addrs.clone();
    }
    match NodeAddresses::read() {
        Ok(addrs) => {
            let addrs = Arc::new(addrs);
            *cache = Some(Cache {
                read_at: Instant::now(),
                addrs: addrs.clone(),
            });
            addrs
        }
        Err(e) => {
            tracing::warn!(error = %e, "egress: cannot read the node's addresses");
            match cache.as_ref() {
                Some(c) => c.addrs.clone(),
                None => Arc::new(extra().into_iter().collect()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share the process-wide cache: one at a time, so adding
    /// addresses in one never replaces the set another is comparing.
    static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    #[test]
    fn the_interfaces_addresses_are_read() {
        let _serial = SERIAL.lock();
        let now = current();
        // Every namespace has lo; its address is one of the node's.
        assert!(now.contains("127.0.0.1".parse().unwrap()), "{now:?}");
        assert!(!now.contains("203.0.113.77".parse().unwrap()), "{now:?}");
        // The same set is used until it is older than REFRESH.
        assert!(Arc::ptr_eq(&now, &current()));
    }

    #[test]
    fn added_addresses_count_in_every_spelling() {
        let _serial = SERIAL.lock();
        add_node_addresses(["198.51.100.9".parse().unwrap()]);
        let now = current();
        assert!(now.contains("198.51.100.9".parse().unwrap()));
        assert!(now.contains("::ffff:198.51.100.9".parse().unwrap()));
    }
}
