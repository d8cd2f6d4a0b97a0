//! curl's `-w`/`--write-out` format (curl(1), "--write-out"): `%{name}`
//! variables, `%%`, and the escapes `\n`, `\r`, `\t`, `\\`.

use std::time::Duration;

use agentcomputer_egress::http::{Request, Response};

/// What `-w` can report about a transfer.
#[derive(Debug, Default, Clone)]
pub(super) struct Transfer {
    pub url: String,
    pub method: String,
    pub http_code: u16,
    pub http_version: String,
    pub content_type: String,
    pub remote_ip: String,
    pub remote_port: String,
    pub size_download: u64,
    pub redirects: usize,
    pub redirect_url: String,
    pub elapsed: Duration,
    pub exit_code: i32,
    pub error: String,
}

impl Transfer {
    pub(super) fn new(req: &Request) -> Transfer {
        Transfer {
            url: req.url.to_string(),
            method: req.method.to_string(),
            ..Transfer::default()
        }
    }

    /// Takes in the head of the latest response.
    pub(super) fn record(&mut self, resp: &Response) {
        self.http_code = resp.status.as_u16();
        self.http_version = match resp.version {
            http::Version::HTTP_10 => "1.0".into(),
            _ => "1.1".into(),
        };
        self.content_type = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        self.remote_ip = resp.remote.ip().to_string();
        self.remote_port = resp.remote.port().to_string();
    }

    fn variable(&self, name: &str) -> Option<String> {
        Some(match name {
            "http_code" | "response_code" => format!("{:03}", self.http_code),
            "url_effective" | "url" => self.url.clone(),
            "method" => self.method.clone(),
            "http_version" => self.http_version.clone(),
            "content_type" => self.content_type.clone(),
            "remote_ip" => self.remote_ip.clone(),
            "remote_port" => self.remote_port.clone(),
            "size_download" => self.size_download.to_string(),
            "num_redirects" => self.redirects.to_string(),
            "redirect_url" => self.redirect_url.clone(),
            "time_total" => format!("{:.6}", self.elapsed.as_secs_f64()),
            "exitcode" => self.exit_code.to_string(),
            "errormsg" => self.error.clone(),
            _ => return None,
        })
    }
}

/// The text for `format`, and warnings for unknown variables (for stderr).
pub(super) fn render(format: &str, transfer: &Transfer) -> (Vec<u8>, String) {
    let mut out = String::new();
    let mut warnings = String::new();
    let mut rest = format;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("%{")
            && let Some(end) = after.find('}')
        {
            let name = &after[..end];
            match transfer.variable(name) {
                Some(value) => out.push_str(&value),
                None => {
                    warnings.push_str(&format!("curl: unknown --write-out variable: '{name}'\n"))
                }
            }
            rest = &after[end + 1..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("%%") {
            out.push('%');
            rest = after;
            continue;
        }
        if let Some(after) = rest.strip_prefix('\\')
            && let Some(e) = after.chars().next()
        {
            let replaced = match e {
                'n' => Some('\n'),
                'r' => Some('\r'),
                't' => Some('\t'),
                '\\' => Some('\\'),
                _ => None,
            };
            if let Some(r) = replaced {
                out.push(r);
                rest = &after[1..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    (out.into_bytes(), warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_escapes() {
        let t = Transfer {
            http_code: 404,
            url: "http://h/x".into(),
            size_download: 12,
            elapsed: Duration::from_millis(1500),
            ..Transfer::default()
        };
        let (text, warnings) = render(
            "%{http_code} %{url_effective} %{size_download} %{time_total}\\n100%% %{nope}\\q",
            &t,
        );
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "404 http://h/x 12 1.500000\n100% \\q"
        );
        assert_eq!(warnings, "curl: unknown --write-out variable: 'nope'\n");
        let (none, _) = render("%{http_code}", &Transfer::default());
        assert_eq!(none, b"000");
    }
}
