//! Writing a tree of a computer as a tar stream.

use std::collections::HashMap;
use std::io::{Read, Write};

use agentcomputer_fs::{Attr, Errno, FileKind, Fs, Ino};

use crate::STEP_BYTES;
use crate::error::{ArchiveError, carry};

/// Directory entries read per engine call of the walk.
const LISTING_BATCH: usize = 1024;

/// Writes entries as POSIX pax archives (ustar headers, and a pax
/// extended header before an entry that needs one: a name or link target
/// longer than ustar holds, extended attributes as `SCHILY.xattr.NAME`
/// records as GNU tar and bsdtar write them, an mtime's nanoseconds) into
/// `W`: directories depth first, never following a symlink under them;
/// FIFOs, devices and sockets are skipped. Memory: one step of file data,
/// one entry's extended attributes and, per directory being walked and per
/// file with more than one link, a name.
pub struct Packer<'a, W: Write> {
    fs: &'a Fs,
    builder: tar::Builder<W>,
    /// Files with more than one link already written: inode to name.
    linked: HashMap<Ino, String>,
    /// Told each entry's name as it is written.
    each: Box<dyn FnMut(&str) + 'a>,
}

impl<'a, W: Write> Packer<'a, W> {
    /// A packer of files of `fs` writing to `out`.
    pub fn new(fs: &'a Fs, out: W) -> Packer<'a, W> {
        let mut builder = tar::Builder::new(out);
        builder.mode(tar::HeaderMode::Complete);
        Packer {
            fs,
            builder,
            linked: HashMap::new(),
            each: Box::new(|_| {}),
        }
    }

    /// Calls `each` with every entry's name as it is written: `tar cv`'s
    /// list.
    pub fn each(mut self, each: impl FnMut(&str) + 'a) -> Packer<'a, W> {
        self.each = Box::new(each);
        self
    }

    /// Writes `attr` (not followed if a symlink) as `name`, and when it is
    /// a directory everything under it, named `name/...` (`NAME` alone
    /// under `.`: names are stored as the tar crate normalizes them,
    /// without `./` and a directory's trailing `/`). Errors: the
    /// engine's, naming the member ([`ArchiveError::Fs`]); the sink's
    /// ([`ArchiveError::Io`]).
    pub fn add(&mut self, attr: &Attr, name: &str) -> Result<(), ArchiveError> {
        if attr.kind != FileKind::Directory {
            return self.entry(attr, name);
        }
        self.entry(attr, name)?;
        // The walk keeps its own stack (a directory, its name and where its
        // listing stopped), so a tree of any depth costs heap, never the
        // thread's stack.
        let mut stack: Vec<(Ino, String, u64)> = vec![(attr.ino, name.to_string(), 0)];
        while let Some((dir, name, after)) = stack.pop() {
            let entries = self
                .fs
                .readdir(dir, after, LISTING_BATCH)
                .map_err(ArchiveError::fs(&name))?;
            let Some(last) = entries.last() else {
                continue;
            };
            // The rest of this directory after the subdirectory, if any,
            // that this batch descends into.
            let mut resume = last.cookie;
            let mut descend = None;
            for e in entries {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let child_name = String::from_utf8_lossy(&e.name);
                let child = if name == "." {
                    child_name.into_owned()
                } else {
                    format!("{}/{child_name}", name.trim_end_matches('/'))
                };
                let attr = self.fs.getattr(e.ino).map_err(ArchiveError::fs(&child))?;
                self.entry(&attr, &child)?;
                if e.kind == FileKind::Directory {
                    resume = e.cookie;
                    descend = Some((e.ino, child));
                    break;
                }
            }
            stack.push((dir, name, resume));
            if let Some((ino, child)) = descend {
                stack.push((ino, child, 0));
            }
        }
        Ok(())
    }

    /// Writes the end of the archive and gives the sink back, flushed.
    pub fn finish(self) -> Result<W, ArchiveError> {
        let mut out = self.builder.into_inner().map_err(ArchiveError::from_io)?;
        out.flush().map_err(ArchiveError::Io)?;
        Ok(out)
    }

    /// Writes one entry (not a directory's contents).
    fn entry(&mut self, attr: &Attr, name: &str) -> Result<(), ArchiveError> {
        let mut header = tar::Header::new_ustar();
        header.set_mode(attr.perm & 0o7777);
        header.set_uid(u64::from(attr.uid));
        header.set_gid(u64::from(attr.gid));
        let nanos = attr.mtime.as_nanos();
        header.set_mtime(u64::try_from(nanos / 1_000_000_000).unwrap_or(0));
        let mut pax = Vec::new();
        if nanos % 1_000_000_000 != 0 {
            let mtime = format!("{}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000);
            pax_record(&mut pax, "mtime", mtime.as_bytes());
        }
        let link = match attr.kind {
            FileKind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                (self.each)(&dir_name(name));
                None
            }
            FileKind::Symlink => {
                let target = self.fs.readlink(attr.ino).map_err(ArchiveError::fs(name))?;
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                (self.each)(name);
                Some(target)
            }
            FileKind::RegularFile => {
                (self.each)(name);
                match self.linked.get(&attr.ino) {
                    Some(first) if attr.nlink > 1 => {
                        header.set_entry_type(tar::EntryType::Link);
                        header.set_size(0);
                        Some(first.clone().into_bytes())
                    }
                    _ => {
                        if attr.nlink > 1 {
                            self.linked.insert(attr.ino, name.to_string());
                        }
                        header.set_entry_type(tar::EntryType::Regular);
                        header.set_size(attr.size);
                        None
                    }
                }
            }
            _ => return Ok(()),
        };
        if header.entry_type() != tar::EntryType::Link {
            for xname in self
                .fs
                .listxattr(attr.ino)
                .map_err(ArchiveError::fs(name))?
            {
                let value = match self.fs.getxattr(attr.ino, &xname) {
                    Ok(v) => v,
                    // Removed since it was listed.
                    Err(e) if e.errno() == Errno::ENODATA => continue,
                    Err(e) => return Err(ArchiveError::fs(name)(e)),
                };
                let mut key = b"SCHILY.xattr.".to_vec();
                key.extend_from_slice(&xname);
                pax_record(&mut pax, &String::from_utf8_lossy(&key), &value);
            }
        }
        if header.set_path(name).is_err() {
            pax_record(&mut pax, "path", name.as_bytes());
            header
                .set_path(truncated(name, 100))
                .map_err(ArchiveError::from_io)?;
        }
        if let Some(target) = &link {
            let shown = String::from_utf8_lossy(target);
            if target.len() > 100 || header.set_link_name(shown.as_ref()).is_err() {
                pax_record(&mut pax, "linkpath", target);
                header
                    .set_link_name(truncated(&shown, 100))
                    .map_err(ArchiveError::from_io)?;
            }
        }
        if !pax.is_empty() {
            let mut x = tar::Header::new_ustar();
            x.set_entry_type(tar::EntryType::XHeader);
            x.set_mode(0o644);
            x.set_mtime(header.mtime().unwrap_or(0));
            x.set_size(pax.len() as u64);
            // As GNU tar names them: the directory's PaxHeaders, the name.
            let base = name.rsplit('/').next().unwrap_or(name);
            x.set_path(truncated(&format!("PaxHeaders/{base}"), 100))
                .map_err(ArchiveError::from_io)?;
            x.set_cksum();
            self.builder
                .append(&x, &pax[..])
                .map_err(ArchiveError::from_io)?;
        }
        header.set_cksum();
        let written = if header.entry_type() == tar::EntryType::Regular {
            let data = FileReader {
                fs: self.fs,
                ino: attr.ino,
                at: 0,
                size: attr.size,
                name,
            };
            self.builder.append(&header, data)
        } else {
            self.builder.append(&header, std::io::empty())
        };
        written.map_err(ArchiveError::from_io)
    }
}

/// Appends the pax record `key=value` ("LENGTH key=value\n", the length
/// counting itself; POSIX.1-2008, pax "Extended Header Records").
fn pax_record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let rest = 1 + key.len() + 1 + value.len() + 1;
    let mut len = rest + rest.to_string().len();
    if len.to_string().len() + rest != len {
        len = rest + len.to_string().len();
    }
    out.extend_from_slice(format!("{len} {key}=").as_bytes());
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncated(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A directory's name as tar lists it: with one trailing `/`.
fn dir_name(name: &str) -> String {
    format!("{}/", name.trim_end_matches('/'))
}

/// Exactly `size` bytes of a file: what it holds, zeros past an end that
/// moved back meanwhile (the header already promised `size`).
struct FileReader<'a> {
    fs: &'a Fs,
    ino: Ino,
    at: u64,
    size: u64,
    name: &'a str,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = usize::try_from(self.size - self.at)
            .unwrap_or(usize::MAX)
            .min(buf.len())
            .min(STEP_BYTES);
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .fs
            .read_into(self.ino, self.at, &mut buf[..want])
            .map_err(|e| carry(self.name, e))?;
        let n = if n == 0 {
            buf[..want].fill(0);
            want
        } else {
            n
        };
        self.at += n as u64;
        Ok(n)
    }
}
