//! Host-name rules of an allow-list: `pypi.org` or `*.example.com`.

/// One validated host rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// Any name ending in `.suffix` (one or more labels before it), not the
    /// suffix itself: `*.example.com` matches `a.example.com` and
    /// `a.b.example.com`, not `example.com`.
    Subdomains(String),
}

impl HostPattern {
    /// Validates a rule by the resource's pattern
    /// `^(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`,
    /// at most 253 characters (RFC 1035 section 2.3.4).
    pub(crate) fn parse(rule: &str) -> Result<HostPattern, String> {
        let bad = |why: &str| Err(format!("bad host rule {rule:?}: {why}"));
        if rule.is_empty() || rule.len() > 253 {
            return bad("must be 1-253 characters");
        }
        let (wildcard, name) = match rule.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, rule),
        };
        for label in name.split('.') {
            let bytes = label.as_bytes();
            let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
            let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            let ok = !bytes.is_empty()
                && bytes.iter().all(inner)
                && edge(&bytes[0])
                && edge(&bytes[bytes.len() - 1]);
            if !ok {
                return bad(
                    "expected a lowercase DNS name such as pypi.org, optionally starting with '*.'",
                );
            }
        }
        Ok(if wildcard {
            HostPattern::Subdomains(name.to_string())
        } else {
            HostPattern::Exact(name.to_string())
        })
    }

    /// Whether `host` (already normalized by [`normalize`]) matches.
    pub(crate) fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => host == name,
            HostPattern::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
        }
    }
}

/// A URL's host as rules compare it: lowercase, without a trailing dot
/// (`Example.COM.` is `example.com`).
pub(crate) fn normalize(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_wildcard() {
        let exact = HostPattern::parse("pypi.org").unwrap();
        assert!(exact.matches("pypi.org"));
        assert!(!exact.matches("files.pypi.org"));
        assert!(!exact.matches("evilpypi.org"));

        let wild = HostPattern::parse("*.example.com").unwrap();
        assert!(wild.matches("a.example.com"));
        assert!(wild.matches("a.b.example.com"));
        assert!(!wild.matches("example.com"));
        assert!(!wild.matches("badexample.com"));
        assert!(!wild.matches(".example.com"));
    }

    #[test]
    fn rules_follow_the_resource_pattern() {
        for ok in ["a", "pypi.org", "*.githubusercontent.com", "x-1.y2"] {
            assert!(HostPattern::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "*",
            "*.",
            "a.*.com",
            "Pypi.org",
            "-a.com",
            "a-.com",
            "a..com",
            "a.com.",
            "a_b.com",
            "**.a.com",
            &"a".repeat(254),
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn normalized_hosts() {
        assert_eq!(normalize("Example.COM."), "example.com");
        assert_eq!(normalize("a.b"), "a.b");
    }
}
