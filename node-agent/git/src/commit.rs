//! Commit objects: reading them, making them, and the identities and
//! dates they carry (git-commit-tree(1), "COMMIT INFORMATION").

use crate::error::{Error, Result};
use crate::odb::{HASH, Odb, hex};
use bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_object::Kind;

pub use gix_object::Commit;

/// Reads commit `id`.
pub fn read(odb: &Odb, id: &ObjectId) -> Result<Commit> {
    let data = odb.read_kind(id, Kind::Commit)?;
    gix_object::CommitRef::from_bytes(&data, HASH)
        .and_then(|c| c.into_owned())
        .map_err(|e| Error::Corrupt(format!("commit {}: {e}", hex(id))))
}

/// Who made a change, and when.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
    /// Seconds since the epoch.
    pub seconds: i64,
    /// Offset from UTC in seconds.
    pub offset: i32,
}

impl Identity {
    /// As gitoxide's signature type.
    pub fn signature(&self) -> gix_actor::Signature {
        gix_actor::Signature {
            name: self.name.clone().into(),
            email: self.email.clone().into(),
            time: gix_date::Time {
                seconds: self.seconds,
                offset: self.offset,
            },
        }
    }
}

/// Parses a date as git takes it in `GIT_AUTHOR_DATE`: `@SECONDS +HHMM`,
/// `SECONDS +HHMM`, or ISO 8601 / RFC 2822 as gitoxide's `gix-date`
/// parses them.
pub fn parse_date(text: &str, now: std::time::SystemTime) -> Option<(i64, i32)> {
    let t = text.trim();
    let mut parts = t.trim_start_matches('@').split_whitespace();
    if let (Some(secs), Some(zone), None) = (parts.next(), parts.next(), parts.next())
        && let (Ok(secs), Some(offset)) = (secs.parse::<i64>(), parse_zone(zone))
    {
        return Some((secs, offset));
    }
    {
        let _ = now;
        gix_date::parse(t, None)
    }
    .ok()
    .map(|time| (time.seconds, time.offset))
}

fn parse_zone(zone: &str) -> Option<i32> {
    let (sign, digits) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let h: i32 = digits[..2].parse().ok()?;
    let m: i32 = digits[2..].parse().ok()?;
    Some(sign * (h * 3600 + m * 60))
}

/// A commit message cleaned as `git commit` does by default
/// (`--cleanup=strip` without an editor: trailing whitespace and
/// surrounding blank lines removed, runs of blank lines squeezed, one
/// final newline).
pub fn clean_message(message: &str) -> String {
    let mut out = String::new();
    let mut blank_run = false;
    for line in message.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run = !out.is_empty();
            continue;
        }
        if blank_run {
            out.push('\n');
            blank_run = false;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The first line of a commit message (its subject).
pub fn subject(message: &[u8]) -> String {
    let text = message.to_str_lossy();
    let mut out = String::new();
    // git joins the lines of the first paragraph with spaces.
    for line in text.lines() {
        if line.trim().is_empty() {
            if out.is_empty() {
                continue;
            }
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line.trim());
    }
    out
}

/// git's default date format (`Mon Dec 7 04:26:23 2026 +0000`).
pub fn format_date(time: &gix_date::Time) -> String {
    time.format(gix_date::time::format::DEFAULT)
        .unwrap_or_else(|_| time.seconds.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cleaned_like_git_commit() {
        assert_eq!(
            clean_message("\n\nfirst  \n\n\n\nbody\n\n"),
            "first\n\nbody\n"
        );
        assert_eq!(clean_message("x"), "x\n");
        assert_eq!(clean_message("  \n"), "");
    }

    #[test]
    fn raw_dates_and_zones_parse() {
        let now = std::time::SystemTime::now();
        assert_eq!(
            parse_date("@1700000000 +0130", now),
            Some((1700000000, 5400))
        );
        assert_eq!(
            parse_date("1700000000 -0500", now),
            Some((1700000000, -18000))
        );
        assert!(parse_date("nonsense", now).is_none());
    }

    #[test]
    fn subjects_join_the_first_paragraph() {
        assert_eq!(subject(b"a\nb\n\nc"), "a b");
        assert_eq!(subject(b"\n\nx\n"), "x");
    }
}
