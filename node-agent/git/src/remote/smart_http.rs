//! The client side of git's smart HTTP protocol, version 0/1, stateless
//! (Documentation/gitprotocol-http.txt; the exchanges inside are those of
//! Documentation/gitprotocol-pack.txt):
//!
//! 1. `GET $URL/info/refs?service=git-upload-pack` (or
//!    `git-receive-pack`): a `# service=…` pkt-line and a flush, then the
//!    ref advertisement, `<oid> SP <ref>` lines, the first carrying the
//!    capabilities after a NUL; an empty repository advertises
//!    `capabilities^{}` with the zero id.
//! 2. Fetch: `POST $URL/git-upload-pack` with `want <oid>` lines (the
//!    first with the capabilities chosen), a flush, `have <oid>` lines and
//!    `done`. Without `multi_ack` the answer is one `ACK <oid>` or `NAK`,
//!    then the pack, multiplexed with `side-band-64k` (band 1 pack data,
//!    2 progress, 3 a fatal error).
//! 3. Push: `POST $URL/git-receive-pack` with `<old> <new> <ref>` lines
//!    (the first with the capabilities), a flush, then the pack unframed;
//!    with `report-status` the answer is `unpack ok|<error>` then
//!    `ok <ref>` or `ng <ref> <reason>` per ref, then a flush.

use super::pktline::{self, Reader, chomp};
use super::transport::{HttpRequest, HttpResponse, TransportError};
use super::{AGENT, Advert, Service, Update};
use crate::Invocation;
use crate::error::{Error, Result};
use gix_hash::ObjectId;

/// An http(s) remote URL, its credentials apart.
#[derive(Debug, Clone)]
pub struct Url {
    /// `http://host[:port]/path`, without credentials or a final `/`.
    pub base: String,
    /// The user name given in the URL, percent-decoded.
    pub user: Option<String>,
    /// The password given in the URL, percent-decoded.
    pub password: Option<String>,
    /// The user name as typed (for the URL kept in the configuration).
    user_typed: Option<String>,
}

impl Url {
    /// Splits `typed` (`http://user:token@host/repo.git`).
    pub fn parse(typed: &str) -> Result<Self> {
        let (scheme, rest) = typed
            .split_once("://")
            .ok_or_else(|| Error::fatal(format!("invalid URL '{typed}'")))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(Error::fatal(format!("invalid URL '{typed}'")));
        }
        let (user_typed, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (Some(user.to_string()), Some(percent_decode(pass))),
                None => (Some(u.to_string()), None),
            },
            None => (None, None),
        };
        let path = path.trim_end_matches('/');
        Ok(Self {
            base: format!("{}://{host}{path}", scheme.to_ascii_lowercase()),
            user: user_typed.as_deref().map(percent_decode),
            password,
            user_typed,
        })
    }

    /// The URL as git shows it: no user name, no password.
    pub fn shown(&self) -> String {
        self.base.clone()
    }

    /// The URL kept in `remote.<name>.url`: the user name, no password.
    pub fn stored(&self) -> String {
        match &self.user_typed {
            Some(user) => {
                let (scheme, rest) = self.base.split_once("://").unwrap_or(("http", &self.base));
                format!("{scheme}://{user}@{rest}")
            }
            None => self.base.clone(),
        }
    }

    /// `scheme://host[:port]`, as git names a server when it asks for
    /// a user name.
    fn origin(&self) -> String {
        let (scheme, rest) = self.base.split_once("://").unwrap_or(("http", &self.base));
        let host = rest.split('/').next().unwrap_or(rest);
        format!("{scheme}://{host}")
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(hex) = b.get(i + 1..i + 3)
            && let Some(v) = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 4648 base64, for the basic authentication header.
fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Sends one request and checks the HTTP status as git's remote-curl
/// does; `service` names the content type expected.
fn exchange(
    inv: &Invocation,
    url: &Url,
    method: &'static str,
    path: &str,
    content_type: Option<&str>,
    accept: &str,
    body: Vec<u8>,
) -> Result<HttpResponse> {
    inv.check_stop()?;
    let transport = inv.transport.ok_or_else(|| {
        Error::fatal(format!(
            "unable to access '{}/': network access is not available here",
            url.shown()
        ))
    })?;
    let mut headers = vec![
        ("User-Agent".to_string(), "git/2.39.5".to_string()),
        ("Accept".to_string(), accept.to_string()),
        ("Pragma".to_string(), "no-cache".to_string()),
    ];
    if let Some(ct) = content_type {
        headers.push(("Content-Type".to_string(), ct.to_string()));
    }
    if let Some(user) = &url.user {
        let pair = format!("{user}:{}", url.password.as_deref().unwrap_or(""));
        headers.push((
            "Authorization".to_string(),
            format!("Basic {}", base64(pair.as_bytes())),
        ));
    }
    let req = HttpRequest {
        method,
        url: format!("{}/{path}", url.base),
        headers,
        body,
    };
    let resp = match transport.send(&req) {
        Ok(r) => r,
        Err(TransportError::Stopped) => return Err(Error::Stopped),
        Err(TransportError::Failed(reason)) => {
            return Err(Error::fatal(format!(
                "unable to access '{}/': {reason}",
                url.shown()
            )));
        }
    };
    inv.check_stop()?;
    match resp.status {
        200..=299 => Ok(resp),
        401 if url.password.is_none() => Err(Error::fatal(format!(
            "could not read {} for '{}': No such device or address",
            if url.user.is_none() {
                "Username"
            } else {
                "Password"
            },
            url.origin()
        ))),
        401 => Err(Error::fatal(format!(
            "Authentication failed for '{}/'",
            url.shown()
        ))),
        404 => Err(Error::fatal(format!(
            "repository '{}/' not found",
            url.shown()
        ))),
        code => Err(Error::fatal(format!(
            "unable to access '{}/': The requested URL returned error: {code}",
            url.shown()
        ))),
    }
}

/// Step 1: the ref advertisement for `service`.
pub fn advertise(inv: &Invocation, url: &Url, service: Service) -> Result<Advert> {
    let name = service.name();
    let resp = exchange(
        inv,
        url,
        "GET",
        &format!("info/refs?service={name}"),
        None,
        "*/*",
        Vec::new(),
    )?;
    if resp.content_type != format!("application/x-{name}-advertisement") {
        return Err(Error::fatal(format!(
            "unable to access '{}/': the server does not speak git's smart HTTP protocol (dumb HTTP is not supported here)",
            url.shown()
        )));
    }
    let mut r = Reader::new(&resp.body);
    // "# service=NAME" LF, then a flush-pkt.
    match r.next_line()? {
        Some(l) if chomp(l) == format!("# service={name}").as_bytes() => {
            while r.next_line()?.is_some() {}
        }
        _ => {
            return Err(Error::fatal(format!(
                "invalid server response; got '{}'",
                String::from_utf8_lossy(resp.body.get(..40).unwrap_or(&resp.body))
            )));
        }
    }
    parse_refs(&mut r)
}

fn parse_refs(r: &mut Reader) -> Result<Advert> {
    let mut advert = Advert::default();
    let mut first = true;
    while let Some(line) = r.next_line()? {
        let line = chomp(line);
        if let Some(msg) = line.strip_prefix(b"ERR ") {
            return Err(Error::fatal(format!(
                "remote error: {}",
                String::from_utf8_lossy(msg)
            )));
        }
        let (line, caps) = match line.iter().position(|b| *b == 0) {
            Some(i) => (&line[..i], Some(&line[i + 1..])),
            None => (line, None),
        };
        if first {
            first = false;
            if let Some(caps) = caps {
                advert.caps = String::from_utf8_lossy(caps)
                    .split(' ')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect();
                for c in &advert.caps {
                    if let Some(target) = c.strip_prefix("symref=HEAD:") {
                        advert.head = Some(target.to_string());
                    }
                }
            }
        }
        let text = String::from_utf8_lossy(line);
        let Some((hex, name)) = text.split_once(' ') else {
            return Err(Error::fatal(format!("protocol error: unexpected '{text}'")));
        };
        let id = ObjectId::from_hex(hex.as_bytes())
            .map_err(|_| Error::fatal(format!("protocol error: expected sha/ref, got '{text}'")))?;
        if name == "capabilities^{}" || name.ends_with("^{}") {
            continue;
        }
        advert.refs.push((name.to_string(), id));
    }
    Ok(advert)
}

/// Step 2: asks for `wants` (saying we have `haves`) and returns the pack.
pub fn upload_pack(
    inv: &Invocation,
    url: &Url,
    advert: &Advert,
    wants: &[ObjectId],
    haves: &[ObjectId],
) -> Result<Vec<u8>> {
    let mut caps = Vec::new();
    for c in ["side-band-64k", "ofs-delta", "no-progress", "include-tag"] {
        if advert.has(c) {
            caps.push(c);
        }
    }
    caps.push(AGENT);
    let mut body = Vec::new();
    for (i, w) in wants.iter().enumerate() {
        let line = if i == 0 {
            format!("want {} {}\n", w.to_hex(), caps.join(" "))
        } else {
            format!("want {}\n", w.to_hex())
        };
        pktline::write(&mut body, line.as_bytes());
    }
    pktline::flush(&mut body);
    for h in haves {
        pktline::write(&mut body, format!("have {}\n", h.to_hex()).as_bytes());
    }
    pktline::write(&mut body, b"done\n");
    let resp = exchange(
        inv,
        url,
        "POST",
        "git-upload-pack",
        Some("application/x-git-upload-pack-request"),
        "application/x-git-upload-pack-result",
        body,
    )?;
    let sideband = advert.has("side-band-64k");
    let mut r = Reader::new(&resp.body);
    loop {
        if !sideband && r.rest().starts_with(b"PACK") {
            return Ok(r.rest().to_vec());
        }
        let Some(line) = r.next_line()? else {
            continue;
        };
        let text = chomp(line);
        if text == b"NAK" || text.starts_with(b"ACK ") || text.starts_with(b"shallow ") {
            continue;
        }
        if let Some(msg) = text.strip_prefix(b"ERR ") {
            return Err(Error::fatal(format!(
                "remote error: {}",
                String::from_utf8_lossy(msg)
            )));
        }
        if !sideband {
            return Err(Error::fatal("protocol error: bad pack header"));
        }
        // The first band packet: from here on, everything is banded.
        let mut pack = Vec::new();
        let mut packet = Some(line);
        loop {
            match packet {
                None => return Ok(pack),
                Some(p) => match p.first() {
                    Some(1) => pack.extend_from_slice(&p[1..]),
                    Some(2) => {}
                    Some(3) => {
                        return Err(Error::fatal(format!(
                            "remote error: {}",
                            String::from_utf8_lossy(chomp(&p[1..]))
                        )));
                    }
                    _ => return Err(Error::fatal("protocol error: bad band")),
                },
            }
            if r.at_end() {
                return Ok(pack);
            }
            packet = r.next_line()?;
        }
    }
}

/// Step 3: sends `updates` and the pack; returns each ref's outcome.
pub fn receive_pack(
    inv: &Invocation,
    url: &Url,
    advert: &Advert,
    updates: &[Update],
    pack: Option<Vec<u8>>,
) -> Result<Vec<(String, Option<String>)>> {
    let mut caps = vec!["report-status"];
    if advert.has("delete-refs") {
        caps.push("delete-refs");
    }
    caps.push(AGENT);
    let mut body = Vec::new();
    for (i, u) in updates.iter().enumerate() {
        let mut line = format!("{} {} {}", u.old.to_hex(), u.new.to_hex(), u.name).into_bytes();
        if i == 0 {
            line.push(0);
            line.extend_from_slice(caps.join(" ").as_bytes());
        }
        line.push(b'\n');
        pktline::write(&mut body, &line);
    }
    pktline::flush(&mut body);
    if let Some(pack) = pack {
        body.extend_from_slice(&pack);
    }
    let resp = exchange(
        inv,
        url,
        "POST",
        "git-receive-pack",
        Some("application/x-git-receive-pack-request"),
        "application/x-git-receive-pack-result",
        body,
    )?;
    let mut r = Reader::new(&resp.body);
    let mut out = Vec::new();
    let mut unpack_error = None;
    while !r.at_end() {
        let Some(line) = r.next_line()? else { break };
        let text = String::from_utf8_lossy(chomp(line)).into_owned();
        if let Some(status) = text.strip_prefix("unpack ") {
            if status != "ok" {
                unpack_error = Some(status.to_string());
            }
        } else if let Some(name) = text.strip_prefix("ok ") {
            out.push((name.to_string(), None));
        } else if let Some(rest) = text.strip_prefix("ng ") {
            let (name, reason) = rest.split_once(' ').unwrap_or((rest, "failed"));
            out.push((name.to_string(), Some(reason.to_string())));
        }
    }
    if let Some(e) = unpack_error {
        return Err(Error::Failed {
            code: 1,
            message: format!(
                "error: remote unpack failed: {e}\nerror: failed to push some refs to '{}'",
                url.shown()
            ),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_and_urls() {
        assert_eq!(super::base64(b"user:pw"), "dXNlcjpwdw==");
        assert_eq!(super::base64(b"ab"), "YWI=");
        let u = super::Url::parse("http://me:s%40cret@127.0.0.1:8/r.git/").unwrap();
        assert_eq!(u.base, "http://127.0.0.1:8/r.git");
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        assert_eq!(u.stored(), "http://me@127.0.0.1:8/r.git");
        assert_eq!(u.shown(), "http://127.0.0.1:8/r.git");
    }
}
