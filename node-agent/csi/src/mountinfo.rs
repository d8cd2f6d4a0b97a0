//! Reading the mount table (`/proc/self/mountinfo`, proc(5)).

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of mountinfo: the fields the mounter needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Field 3: the `st_dev` of files on the mount as `(major, minor)`. A
    /// FUSE connection is number `minor` under fusectl
    /// (`/sys/fs/fuse/connections/<minor>`, major 0: an anonymous device).
    pub device: (u32, u32),
    /// Field 5: where it is mounted.
    pub mountpoint: PathBuf,
    /// Field 6: per-mount options (`rw` or `ro`, `nosuid`, ...).
    pub options: Vec<String>,
    /// First field after `-`: the filesystem type, e.g. `fuse.agentcomputer`.
    pub fstype: String,
    /// Second field after `-`: the source, e.g. `agentcomputer:<volume>`.
    pub source: String,
    /// Third field after `-`: the superblock's options, e.g. FUSE's
    /// `rw,user_id=1000,group_id=1000,default_permissions,allow_other`.
    pub super_options: Vec<String>,
}

impl MountEntry {
    /// Whether the mount is read-only (`ro` among the per-mount options).
    pub fn read_only(&self) -> bool {
        self.options.iter().any(|o| o == "ro")
    }

    /// The value of superblock option `key` (`key=value`), if present.
    pub fn super_option(&self, key: &str) -> Option<&str> {
        self.super_options
            .iter()
            .find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    }
}

/// Every mount point with the topmost mount at it, in mount order of those
/// mounts. Errors: reading `/proc/self/mountinfo`.
pub fn topmost() -> io::Result<Vec<MountEntry>> {
    let info = std::fs::read("/proc/self/mountinfo")?;
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<MountEntry> = info
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(parse_line)
        .filter(|e| seen.insert(e.mountpoint.clone()))
        .collect();
    out.reverse();
    Ok(out)
}

/// The topmost mount at exactly `path`, if any (later lines are mounted on
/// top of earlier ones). Errors: reading `/proc/self/mountinfo`.
pub fn mount_at(path: &Path) -> io::Result<Option<MountEntry>> {
    let info = std::fs::read("/proc/self/mountinfo")?;
    Ok(info
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(parse_line)
        .find(|e| e.mountpoint == path))
}

/// How many mounts there are at exactly `path`.
pub fn count_at(path: &Path) -> io::Result<usize> {
    let info = std::fs::read("/proc/self/mountinfo")?;
    Ok(info
        .split(|&b| b == b'\n')
        .filter_map(parse_line)
        .filter(|e| e.mountpoint == path)
        .count())
}

/// Parses one line of mountinfo (proc(5)); `None` for a malformed line.
pub fn parse_line(line: &[u8]) -> Option<MountEntry> {
    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let device = std::str::from_utf8(fields.get(2)?).ok()?.split_once(':')?;
    let device = (device.0.parse().ok()?, device.1.parse().ok()?);
    let mountpoint = fields.get(4)?;
    let options = fields.get(5)?;
    let dash = fields.iter().position(|f| *f == b"-")?;
    let fstype = fields.get(dash + 1)?;
    let source = fields.get(dash + 2)?;
    let super_options = fields.get(dash + 3).copied().unwrap_or_default();
    let text = |b: &[u8]| String::from_utf8_lossy(&unescape(b)).into_owned();
    Some(MountEntry {
        device,
        mountpoint: PathBuf::from(OsString::from_vec(unescape(mountpoint))),
        options: text(options).split(',').map(str::to_string).collect(),
        fstype: text(fstype),
        source: text(source),
        super_options: text(super_options)
            .split(',')
            .filter(|o| !o.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// Undoes mountinfo's octal escapes (`\040` space, `\011`, `\012`, `\134`).
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\'
            && i + 3 < s.len()
            && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((s[i + 1] - b'0') * 64 + (s[i + 2] - b'0') * 8 + (s[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_fuse_line_with_escapes_and_optional_fields() {
        let line = b"36 35 0:45 / /var/lib/a\\040b ro,nosuid,nodev shared:7 - fuse.agentcomputer agentcomputer:vol-1 rw,user_id=1000";
        let e = parse_line(line).unwrap();
        assert_eq!(e.device, (0, 45));
        assert_eq!(e.mountpoint, PathBuf::from("/var/lib/a b"));
        assert_eq!(e.fstype, "fuse.agentcomputer");
        assert_eq!(e.source, "agentcomputer:vol-1");
        assert!(e.read_only());
        assert_eq!(e.super_option("user_id"), Some("1000"));
        assert_eq!(e.super_option("user"), None);
        assert_eq!(e.super_option("group_id"), None);
        assert!(parse_line(b"").is_none());
        assert!(parse_line(b"36 35 0-45 / /a rw - fuse.x s rw").is_none());
    }

    #[test]
    fn finds_the_root_mount() {
        assert!(mount_at(Path::new("/")).unwrap().is_some());
        assert!(mount_at(Path::new("/no/such/mount")).unwrap().is_none());
        let all = topmost().unwrap();
        assert_eq!(
            all.iter()
                .filter(|e| e.mountpoint == Path::new("/"))
                .count(),
            1
        );
        assert_eq!(
            all.iter().find(|e| e.mountpoint == Path::new("/")),
            mount_at(Path::new("/")).unwrap().as_ref()
        );
    }
}
