//! Handing FUSE connections between processes.
//!
//! A FUSE connection is a `/dev/fuse` descriptor plus the `FUSE_INIT`
//! record its first server answered. Both modes hand such connections
//! between processes so that mounts outlive the node agent: in a cluster
//! the privileged mounter hands each mount it makes to the unprivileged
//! agent and keeps a duplicate (docs/csi.md); locally the agent hands a
//! duplicate of each host mount to its descriptor holder (docs/fuse.md).
//! Both speak over a unix `SOCK_SEQPACKET` socket, one JSON object per
//! record, a descriptor as `SCM_RIGHTS` on the record it belongs to. This
//! crate is that corridor, used by both ends of both links:
//!
//! * [`record`]: one record with its descriptors, blocking or on tokio
//!   ([`record::AsyncSeqpacket`]), refusing truncated data or control
//!   messages;
//! * [`init`]: the `FUSE_INIT` record as it travels (hexadecimal);
//! * [`fsname`]: the mount's filesystem type and source, by which mounts
//!   of a computer are found in the mount table;
//! * [`mounter`]: the protocol between the mounter and the agent, and the
//!   agent's end of it;
//! * [`holder`]: the protocol between the agent and its local holder.
//!
//! It links neither the engine nor FUSE, so the privileged mounter stays
//! small, and the agent no longer links the mounter to talk to it.

pub mod fsname;
pub mod holder;
pub mod init;
pub mod mounter;
pub mod record;
