//! How a computer's FUSE mounts are named in the mount table: filesystem
//! type `fuse.agentcomputer`, source `agentcomputer:<computer>` (the
//! `fsname` FUSE option; in a cluster the computer is the volume id).
//! The mounter finds the targets it must adopt by these, and `df`/`mount`
//! show which computer a mount serves.

/// The `fsname` prefix and the FUSE subtype.
pub const FS_NAME: &str = "agentcomputer";

/// The mount table's filesystem type of every such mount.
pub const FS_TYPE: &str = "fuse.agentcomputer";

/// The mount's source (`fsname`) for `computer`: `agentcomputer:<computer>`.
pub fn source(computer: &str) -> String {
    format!("{FS_NAME}:{computer}")
}

/// The computer a mount table source names, if it is one of ours.
pub fn computer_of(source: &str) -> Option<&str> {
    source
        .strip_prefix(FS_NAME)?
        .strip_prefix(':')
        .filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names_the_computer_and_back() {
        assert_eq!(source("v-1"), "agentcomputer:v-1");
        assert_eq!(computer_of(&source("v-1")), Some("v-1"));
        assert_eq!(computer_of("agentcomputer:"), None);
        assert_eq!(computer_of("agentcomputerx:v"), None);
        assert_eq!(computer_of("tmpfs"), None);
    }
}
