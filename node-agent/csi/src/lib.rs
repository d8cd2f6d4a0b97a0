//! The Agent Computer mounter: the privileged half of the node side.
//!
//! `agentcomputer-mounter` is the CSI node plugin of driver
//! `agentcomputer.dev`. It registers with the kubelet (no sidecars), answers
//! NodePublishVolume by mounting a FUSE filesystem at the target path and
//! hands the connection's `/dev/fuse` descriptor to the unprivileged node
//! agent, which serves it. It never runs tenant code and never reads file
//! data. See `docs/csi.md`.
//!
//! * [`mounter::run`]: the whole process, given [`mounter::MounterConfig`];
//! * [`handover`]: the protocol between mounter and agent (both ends);
//! * [`node`], [`identity`]: the gRPC services; [`publish`]: the mounts;
//!   [`adopt`]: taking the connections back from the agent after a restart;
//!   [`grace`]: the bound on how long a connection waits for an agent.

pub mod adopt;
pub mod authority;
pub mod grace;
pub mod handover;
pub mod identity;
pub mod mounter;
pub mod mountinfo;
pub mod node;
pub mod publish;
pub mod sockets;

/// Generated gRPC code.
pub mod pb {
    /// The CSI spec's `csi.v1` package (`proto/csi/v1/csi.proto`, v1.12.0).
    #[allow(clippy::all, missing_docs)]
    pub mod csi {
        tonic::include_proto!("csi.v1");
    }
    /// The kubelet's `pluginregistration` package
    /// (`proto/pluginregistration/v1/api.proto`, k8s.io/kubelet v0.36.3).
    #[allow(clippy::all, missing_docs)]
    pub mod registration {
        tonic::include_proto!("pluginregistration");
    }
}
