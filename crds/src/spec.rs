//! `AgentComputer.spec`: what the user asks for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::status::AgentComputerStatus;

/// A persistent computer for an AI agent: one SQLite database holding a whole
/// POSIX filesystem, served by the node agent on one node, with in-process
/// shell and JavaScript runtimes and an optional sandbox pod that mounts the
/// same files at /workspace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentcomputer.dev",
    version = "v1alpha1",
    kind = "AgentComputer",
    plural = "agentcomputers",
    singular = "agentcomputer",
    shortname = "computer",
    shortname = "computers",
    category = "all",
    namespaced,
    status = "AgentComputerStatus",
    derive = "PartialEq",
    validation = Rule::new("!(has(self.spec.runtimes) && has(self.spec.runtimes.container) && self.spec.runtimes.container) || has(self.spec.sandbox)").message("spec.sandbox (with at least its image) is required when spec.runtimes.container is true"),
    validation = Rule::new("has(self.spec.source) == has(oldSelf.spec.source) && (!has(self.spec.source) || self.spec.source == oldSelf.spec.source)").message("spec.source is immutable: it says where the computer's files came from"),
    validation = Rule::new("size(self.metadata.name) <= 52").message("metadata.name of an AgentComputer must be at most 52 characters: it also names the computer's volume claim, secret and sandbox pod"),
    doc = "AgentComputer is a persistent computer for an AI agent: one SQLite database holding a whole POSIX filesystem, placed on a node that runs the node agent, with in-process shell and JavaScript runtimes and an optional sandbox pod that mounts the same files at /workspace.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Lifecycle phase of the computer"),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node", description = "Node whose agent serves the computer"),
    printcolumn(name = "Size", type_ = "string", json_path = ".spec.storage.size", description = "Storage quota"),
    printcolumn(name = "Disk", type_ = "string", json_path = ".status.volume.disk", description = "Space the computer's database takes on the node's disk (status.volume.diskBytes as a quantity, e.g. 25Mi)"),
    printcolumn(name = "Backup", type_ = "date", json_path = ".status.backup.lastShippedTime", description = "When the latest backup object went up (continuous backup)"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".status.endpoint", description = "gRPC endpoint of the serving node agent", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AgentComputerSpec {
    /// Storage of the computer's filesystem: its quota and what happens to the
    /// data when the computer is deleted.
    pub storage: StorageSpec,

    /// Runtimes the computer may use. The shell and JavaScript runtimes run
    /// in-process in the node agent; the container runtime starts a sandbox pod.
    #[serde(default)]
    pub runtimes: RuntimesSpec,

    /// The sandbox pod used by the container runtime. Required when
    /// runtimes.container is true, ignored otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSpec>,

    /// Outbound network policy of every runtime of this computer. Sandbox pods
    /// get a NetworkPolicy built from it; the in-process runtimes apply it
    /// directly. Defaults to deny-all.
    #[serde(default)]
    pub egress: EgressSpec,

    /// Limits applied to every exec on this computer, whatever the runtime.
    #[serde(default)]
    pub limits: ExecLimits,

    /// Only nodes with all of these labels may serve the computer (and run its
    /// sandbox pod). Same semantics as a pod's spec.nodeSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Taints this computer tolerates when it is placed, copied to its sandbox
    /// pod. Same semantics as a pod's spec.tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub tolerations: Option<Vec<Toleration>>,

    /// Start from another object's files instead of an empty filesystem,
    /// as a PersistentVolumeClaim's dataSourceRef: a ComputerSnapshot or an
    /// AgentComputer (a fork) of this namespace. Across nodes it needs the
    /// node agents' backup store; without one the computer is placed on
    /// its source's node only, and waits with condition Placed False,
    /// reason SourceOnAnotherNode, when that node cannot take it.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::snapshot::SourceRef>,

    /// How long the computer's past states stay restorable, as a duration
    /// ("7d", "36h", "90m"): a point-in-time restore reaches back this far
    /// (an older time is refused), and the snapshot a restore takes first
    /// (which undoes it) is kept this long. Needs the node agents' backup
    /// store. Unset: the node agents' default (the chart's
    /// backup.retention, 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ns|us|ms|s|m|h|d|w) ?)+$"))]
    pub retention: Option<String>,
}

/// Storage of the computer's filesystem.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("isQuantity(string(self.size)) && quantity(string(self.size)).compareTo(quantity('1Mi')) >= 0").message("storage.size must be a quantity of at least 1Mi, e.g. 10Gi").field_path(".size"),
    validation = Rule::new("quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0").message("storage.size may only grow").field_path(".size"),
    validation = Rule::new("!has(oldSelf.maxInodes) || (has(self.maxInodes) && self.maxInodes >= oldSelf.maxInodes)").message("storage.maxInodes may only grow").field_path(".maxInodes")
)]
pub struct StorageSpec {
    /// Quota of the computer's filesystem (file contents and metadata), e.g.
    /// "10Gi". Writes past it fail with ENOSPC. Also the capacity of the
    /// computer's PersistentVolume and PersistentVolumeClaim. May only grow.
    pub size: Quantity,

    /// What happens to the filesystem when the AgentComputer is deleted:
    /// Delete removes its PersistentVolume, PersistentVolumeClaim and data;
    /// Retain keeps them for later recovery.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,

    /// Most inodes (files, directories, symlinks...) the filesystem may
    /// hold; creating one more fails with ENOSPC. Unset: the node agent's
    /// default (one inode per 4 KiB of size, as mkfs.ext4 gives by default,
    /// at least 1,024). May only grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_inodes: Option<i64>,
}

/// What happens to a computer's volume when the computer is deleted.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Delete the PersistentVolume, the PersistentVolumeClaim and the data.
    #[default]
    Delete,
    /// Keep the PersistentVolume and PersistentVolumeClaim (and so the data).
    Retain,
}

/// Which runtimes a computer may use.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimesSpec {
    /// In-process bash interpreter in the node agent (no process spawning).
    #[serde(default = "yes")]
    pub shell: bool,
    /// In-process JavaScript (QuickJS) isolate in the node agent.
    #[serde(default = "yes")]
    pub javascript: bool,
    /// A full Linux container: the sandbox pod, which mounts the computer's
    /// files at /workspace.
    #[serde(default)]
    pub container: bool,
}

fn yes() -> bool {
    true
}

impl Default for RuntimesSpec {
    fn default() -> Self {
        Self {
            shell: true,
            javascript: true,
            container: false,
        }
    }
}

/// The sandbox pod of the container runtime.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// Container image of the sandbox, e.g. "debian:bookworm-slim". It runs as
    /// a non-root user (uid 1000) with all capabilities dropped.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,

    /// Command of the sandbox container when the operator runs without a
    /// runner image. Defaults to ["sleep", "infinity"]. With a runner image
    /// (as the Helm chart installs it) the container runs the node agent's
    /// agentcomputer-runner, which serves container execs, and this is not
    /// used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub command: Option<Vec<String>>,

    /// Compute resources of the sandbox container (requests and limits of
    /// cpu, memory, ephemeral-storage), as in a pod's container.resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Seconds without activity after which the sandbox pod is stopped; it is
    /// started again on the next container exec. 0 keeps it running.
    #[serde(default)]
    #[schemars(range(min = 0, max = 604800))]
    pub idle_timeout_seconds: i64,
}

/// Outbound network policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.mode == 'allow-list' || ((!has(self.cidrs) || size(self.cidrs) == 0) && (!has(self.hosts) || size(self.hosts) == 0))").message("egress.cidrs and egress.hosts may only be set when egress.mode is allow-list"),
    validation = Rule::new("!has(self.hosts) || self.hosts.all(h, !h.matches('(^|[.])[0-9]+$'))").message("egress.hosts are host names, not IP addresses (a name's last label is never all digits): allow an address with a cidr rule").field_path(".hosts")
)]
pub struct EgressSpec {
    /// deny-all: no outbound connections. allow-all: any destination except
    /// cloud metadata. allow-list: only the destinations in cidrs and hosts
    /// (plus cluster DNS).
    #[serde(default)]
    pub mode: EgressMode,

    /// Destinations by IP range and port (allow-list mode). Cloud metadata
    /// (169.254.169.254) stays excluded from every range unless allowMetadata.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub cidrs: Vec<CidrRule>,

    /// Destinations by DNS host name (allow-list mode), e.g. "pypi.org" or
    /// "*.githubusercontent.com". Host names are enforced by the node agent's
    /// egress proxy: sandbox pods get HTTP(S)_PROXY settings and may reach
    /// only the proxy. Each is a lowercase DNS name of at most 253
    /// characters and 63 per label, whose last label is not all digits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
            )
        )
    )]
    pub hosts: Vec<String>,

    /// Allow the cloud metadata address 169.254.169.254. Off by default: it
    /// hands out node credentials on most clouds.
    #[serde(default)]
    pub allow_metadata: bool,
}

/// Egress policy mode.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum EgressMode {
    /// No outbound connections at all.
    #[default]
    DenyAll,
    /// Any destination except cloud metadata (unless allowMetadata).
    AllowAll,
    /// Only the listed CIDRs/ports and host names, plus cluster DNS.
    AllowList,
}

/// An IP range a computer may connect to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("isCIDR(self.cidr)").message("cidr must be an IPv4 or IPv6 CIDR such as 10.0.0.0/8").field_path(".cidr"))]
pub struct CidrRule {
    /// IPv4 or IPv6 range in CIDR notation, e.g. "10.0.0.0/8" or "2001:db8::/32".
    #[schemars(length(min = 3, max = 64))]
    pub cidr: String,

    /// Ports allowed in that range; empty allows every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ports: Vec<PortRule>,
}

/// A destination port or port range.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.endPort) || self.endPort >= self.port").message("endPort must not be below port").field_path(".endPort"))]
pub struct PortRule {
    /// Destination port (1-65535).
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Last port of a range starting at port (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub end_port: Option<i32>,
    /// Transport protocol: TCP (default), UDP or SCTP.
    #[serde(default)]
    pub protocol: Protocol,
}

/// Transport protocol of a [`PortRule`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// TCP.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
    /// SCTP.
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// The protocol's name as Kubernetes spells it (`TCP`, `UDP`, `SCTP`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

/// Limits of every exec, whatever the runtime.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.memory) || (isQuantity(string(self.memory)) && quantity(string(self.memory)).compareTo(quantity('0')) >= 0 && quantity(string(self.memory)).compareTo(quantity('8Ei')) < 0)").message("limits.memory must be a quantity of bytes from 0 to below 8Ei, e.g. 256Mi").field_path(".memory"))]
pub struct ExecLimits {
    /// Wall-clock limit of one exec in seconds; the exec is cancelled and
    /// reports a timeout past it.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: i32,

    /// Most bytes of stdout plus stderr one exec may produce; output past it
    /// is dropped and the exec reports the cap.
    #[serde(default = "default_output")]
    #[schemars(range(min = 1024, max = 1073741824))]
    pub output_bytes: i64,

    /// Memory limit of one in-process exec (shell or JavaScript heap), e.g.
    /// "256Mi". The sandbox pod's memory comes from sandbox.resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

fn default_timeout() -> i32 {
    300
}

fn default_output() -> i64 {
    16 * 1024 * 1024
}

impl Default for ExecLimits {
    fn default() -> Self {
        Self {
            timeout_seconds: default_timeout(),
            output_bytes: default_output(),
            memory: None,
        }
    }
}
