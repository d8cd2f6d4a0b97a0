//! Paths in their three forms: engine-absolute (`/proj/src/a.rs`),
//! repository-relative (`src/a.rs`, what the index and trees hold) and
//! as typed or shown relative to the current directory (`../a.rs`).

/// Whether repository path `path` is `dir` or lies under it; every path
/// is under the empty `dir` (the top of the work tree).
pub fn is_under(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/')
}

/// `path` with `.`, `..` and repeated `/` removed lexically; `None` if
/// `..` climbs above the start.
pub fn normalize(path: &[u8]) -> Option<Vec<u8>> {
    let absolute = path.starts_with(b"/");
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in path.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    if absolute {
        out.push(b'/');
    }
    out.extend_from_slice(&parts.join(&b'/'));
    Some(out)
}

/// The repository path of `arg` typed in `cwd` (engine-absolute) for the
/// work tree at `top` (engine-absolute); `None` when it lies outside.
pub fn repo_path(top: &[u8], cwd: &[u8], arg: &[u8]) -> Option<Vec<u8>> {
    let joined = if arg.starts_with(b"/") {
        arg.to_vec()
    } else {
        let mut j = cwd.to_vec();
        j.push(b'/');
        j.extend_from_slice(arg);
        j
    };
    let abs = normalize(&joined)?;
    let top = normalize(top)?;
    if top == b"/" {
        return Some(abs[1..].to_vec());
    }
    if abs == top {
        return Some(Vec::new());
    }
    abs.strip_prefix(top.as_slice())?
        .strip_prefix(b"/")
        .map(<[u8]>::to_vec)
}

/// Repository path `path` as seen from repository directory `from`
/// (`src` → `a.rs` is `../a.rs`), the form `git status` prints.
pub fn relative(path: &[u8], from: &[u8]) -> Vec<u8> {
    if from.is_empty() {
        return path.to_vec();
    }
    let p: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    let f: Vec<&[u8]> = from.split(|b| *b == b'/').collect();
    let common = p.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = Vec::new();
    for _ in common..f.len() {
        out.extend_from_slice(b"../");
    }
    out.extend_from_slice(&p[common..].join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// Whether a repository path names something git refuses to track: a
/// `.git` component or an empty/`.`/`..` component (git's `verify_path`).
pub fn forbidden(path: &[u8]) -> bool {
    path.split(|b| *b == b'/')
        .any(|c| c.is_empty() || c == b"." || c == b".." || c.eq_ignore_ascii_case(b".git"))
}

/// `path` as git prints it in listings (git's `quote_c_style` with the
/// default `core.quotePath = true`): as is when it holds only printable
/// ASCII other than `"` and `\\` (and no space when `quote_space`, which
/// `status --short`/`--porcelain` ask for), else in double quotes with C
/// escapes and octal bytes (`"\\303\\274n.txt"`).
pub fn quote(path: &[u8], quote_space: bool) -> String {
    let plain =
        |b: u8| (0x21..0x7f).contains(&b) && b != b'"' && b != b'\\' || (b == b' ' && !quote_space);
    if path.iter().all(|b| plain(*b)) {
        return String::from_utf8_lossy(path).into_owned();
    }
    let mut out = String::from("\"");
    for &b in path {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\x07' => out.push_str("\\a"),
            b'\x08' => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\x0b' => out.push_str("\\v"),
            b'\x0c' => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_paths_become_repository_paths() {
        assert_eq!(repo_path(b"/p", b"/p/src", b"a.rs").unwrap(), b"src/a.rs");
        assert_eq!(repo_path(b"/p", b"/p/src", b"../b").unwrap(), b"b");
        assert_eq!(repo_path(b"/p", b"/p/src", b".").unwrap(), b"src");
        assert_eq!(repo_path(b"/p", b"/p", b".").unwrap(), b"");
        assert_eq!(repo_path(b"/p", b"/p", b"/p/x//y/").unwrap(), b"x/y");
        assert!(repo_path(b"/p", b"/p", b"../q").is_none());
        assert!(repo_path(b"/p", b"/p", b"/pq").is_none());
        assert_eq!(repo_path(b"/", b"/", b"a").unwrap(), b"a");
    }

    #[test]
    fn shown_paths_are_relative_to_the_current_directory() {
        assert_eq!(relative(b"a.rs", b"src"), b"../a.rs");
        assert_eq!(relative(b"src/a.rs", b"src"), b"a.rs");
        assert_eq!(relative(b"x/y", b""), b"x/y");
        assert_eq!(relative(b"src", b"src"), b".");
    }

    #[test]
    fn listed_paths_are_quoted_as_git_quotes_them() {
        assert_eq!(quote(b"plain/path.rs", true), "plain/path.rs");
        assert_eq!(quote(b"sp ace.txt", false), "sp ace.txt");
        assert_eq!(quote(b"sp ace.txt", true), "\"sp ace.txt\"");
        assert_eq!(
            quote("\u{fc}n.txt".as_bytes(), false),
            "\"\\303\\274n.txt\""
        );
        assert_eq!(quote(b"q\"uote", false), "\"q\\\"uote\"");
        assert_eq!(quote(b"back\\slash", false), "\"back\\\\slash\"");
    }

    #[test]
    fn under_means_the_directory_or_below() {
        assert!(is_under(b"a/b", b"a"));
        assert!(is_under(b"a", b"a"));
        assert!(!is_under(b"ab", b"a"));
        assert!(is_under(b"x", b""));
        assert!(forbidden(b".git/config"));
        assert!(forbidden(b"a/.GIT/x"));
        assert!(!forbidden(b"a/.gitignore"));
    }
}
