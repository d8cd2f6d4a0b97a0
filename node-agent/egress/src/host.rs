//! Host-name rules of an allow-list: `pypi.org` or `*.example.com`.

/// Longest DNS label, bytes (RFC 1035 section 2.3.4).
const MAX_LABEL: usize = 63;

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
    /// at most 253 characters and 63 per label (RFC 1035 section 2.3.4).
    /// Stricter than the pattern: a rule whose last label is all digits
    /// (`10.0.0.1`) is refused, since URLs read such a host as an IPv4
    /// address (WHATWG URL Standard, "ends in a number") and host rules
    /// never match IP literals; the message points to a CIDR rule.
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
            if bytes.len() > MAX_LABEL {
                return bad("a DNS label is at most 63 characters (RFC 1035 section 2.3.4)");
            }
        }
        if name
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(format!(
                "bad host rule {rule:?}: an IP address, and host rules match names only; \
                 allow it with a cidr rule instead (kubectl-computer create --allow-cidr {name})"
            ));
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
            &format!("{}.com", "a".repeat(64)),
            "10.0.0.1",
            "*.10.0.0.1",
            "host.123",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
        assert!(HostPattern::parse(&format!("{}.com", "a".repeat(63))).is_ok());
        assert!(HostPattern::parse("123.example.com").is_ok());
        let ip = HostPattern::parse("10.0.0.1").unwrap_err();
        assert!(ip.contains("--allow-cidr 10.0.0.1"), "{ip}");
        let long = HostPattern::parse(&format!("{}.com", "a".repeat(64))).unwrap_err();
        assert!(long.contains("63 characters"), "{long}");
    }

    #[test]
    fn normalized_hosts() {
        assert_eq!(normalize("Example.COM."), "example.com");
        assert_eq!(normalize("a.b"), "a.b");
    }
}
