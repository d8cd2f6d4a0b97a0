//! The names of an archive's entries, taken apart and checked.

/// Longest entry name accepted (Linux's `PATH_MAX`, bytes).
pub const MAX_NAME_BYTES: usize = 4096;

/// The names of an archive path, `.` and empty ones dropped. Errors (in
/// words): an absolute path, a `..` component, a name past
/// [`MAX_NAME_BYTES`], one that is not UTF-8 or holds a NUL byte.
pub fn components(raw: &[u8]) -> Result<Vec<&str>, &'static str> {
    if raw.first() == Some(&b'/') {
        return Err("an absolute name");
    }
    if raw.len() > MAX_NAME_BYTES {
        return Err("a name longer than 4096 bytes (PATH_MAX)");
    }
    let text = std::str::from_utf8(raw).map_err(|_| "a name that is not UTF-8")?;
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("a `..` component"),
            _ if part.contains('\0') => return Err("a NUL byte"),
            _ => parts.push(part),
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_and_empty_names_drop_and_escapes_are_refused() {
        assert_eq!(components(b"./a//b/").unwrap(), ["a", "b"]);
        assert!(components(b"./").unwrap().is_empty());
        assert_eq!(components(b"/etc"), Err("an absolute name"));
        assert_eq!(components(b"a/../b"), Err("a `..` component"));
        assert_eq!(components(b"a\0b"), Err("a NUL byte"));
        assert_eq!(components(b"\xff"), Err("a name that is not UTF-8"));
    }
}
