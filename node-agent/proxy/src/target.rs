//! Where a proxied request wants to go, read the way the in-process HTTP
//! client reads URLs (WHATWG URL parsing by the `url` crate), so that IP
//! literals in any spelling (`2130706433`, `0x7f.1`, `[::ffff:7f00:1]`)
//! are recognised as the address they are and judged as such.

use agentcomputer_egress::Target;

/// A destination: host (name or IP literal) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dest {
    pub host: url::Host<String>,
    pub port: u16,
}

impl Dest {
    /// The host as the policy engine's resolver takes it.
    pub fn target(&self) -> Target<'_> {
        match &self.host {
            url::Host::Domain(name) => Target::Name(name),
            url::Host::Ipv4(ip) => Target::Ip((*ip).into()),
            url::Host::Ipv6(ip) => Target::Ip((*ip).into()),
        }
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a request's target is refused (answered with `400`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A `CONNECT` target that is not `HOST:PORT` (the value as sent).
    #[error("CONNECT needs HOST:PORT, not {0:?}")]
    BadAuthority(String),
    /// A plain request whose target is not an absolute URL (as sent).
    #[error("a proxy request needs an absolute http:// URL, not {0:?}")]
    NotAbsolute(String),
    /// An absolute URL of a scheme other than `http` (the scheme).
    #[error("only http:// URLs are forwarded; use CONNECT for {0}://")]
    Scheme(String),
}

/// Parses a `CONNECT` request target (`host:port`, `[v6]:port`).
pub fn parse_authority(text: &str) -> Result<Dest, TargetError> {
    let bad = || TargetError::BadAuthority(text.to_string());
    if text.is_empty() || text.contains(['/', '@', '?', '#', '\\']) {
        return Err(bad());
    }
    let (_, port_text) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port_text.parse().map_err(|_| bad())?;
    if port == 0 {
        return Err(bad());
    }
    let url = url::Url::parse(&format!("http://{text}/")).map_err(|_| bad())?;
    let host = url.host().ok_or_else(bad)?.to_owned();
    Ok(Dest { host, port })
}

/// Parses an absolute-form request target of plain HTTP forwarding;
/// returns the destination and the origin-form target to send upstream.
pub(crate) fn parse_absolute(text: &str) -> Result<(Dest, String), TargetError> {
    let url = url::Url::parse(text).map_err(|_| TargetError::NotAbsolute(text.to_string()))?;
    if url.scheme() != "http" {
        return Err(TargetError::Scheme(url.scheme().to_string()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(TargetError::NotAbsolute(text.to_string()));
    }
    let host = url
        .host()
        .ok_or_else(|| TargetError::NotAbsolute(text.to_string()))?
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let mut origin = url.path().to_string();
    if let Some(q) = url.query() {
        origin.push('?');
        origin.push_str(q);
    }
    Ok((Dest { host, port }, origin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn ip(d: &Dest) -> Option<IpAddr> {
        match d.target() {
            Target::Ip(ip) => Some(ip),
            Target::Name(_) => None,
        }
    }

    #[test]
    fn ip_literal_tricks_are_addresses() {
        for text in [
            "2130706433:80",
            "0x7f.1:80",
            "127.1:80",
            "0177.0.0.1:80",
            "[::ffff:127.0.0.1]:80",
        ] {
            let d = parse_authority(text).unwrap();
            let got = ip(&d).unwrap_or_else(|| panic!("{text} read as a name"));
            assert_eq!(
                got.to_canonical(),
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "{text}"
            );
        }
        let name = parse_authority("Example.COM.:443").unwrap();
        assert_eq!(name.target(), Target::Name("example.com."));
    }

    #[test]
    fn bad_authorities_are_refused() {
        for text in [
            "example.com",
            "example.com:",
            "example.com:0",
            "example.com:99999",
            "a@b:80",
            "a/b:80",
            "",
        ] {
            assert!(parse_authority(text).is_err(), "{text}");
        }
    }

    #[test]
    fn absolute_targets() {
        let (d, origin) = parse_absolute("http://h.test:8080/a/b?c=1").unwrap();
        assert_eq!(
            (d.to_string(), origin.as_str()),
            ("h.test:8080".into(), "/a/b?c=1")
        );
        let (d, origin) = parse_absolute("http://h.test").unwrap();
        assert_eq!((d.port, origin.as_str()), (80, "/"));
        assert!(matches!(
            parse_absolute("/index.html"),
            Err(TargetError::NotAbsolute(_))
        ));
        assert!(matches!(
            parse_absolute("https://h.test/"),
            Err(TargetError::Scheme(_))
        ));
        assert!(parse_absolute("http://u:p@h.test/").is_err());
    }
}
