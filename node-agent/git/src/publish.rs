//! Publishing a directory of the computer: commit its state and push it to
//! a remote, with credentials that exist only for the call.
//!
//! The steps are the porcelain's own (`init` if the directory is not a
//! repository yet, `add -A`, `commit`, `push REMOTE HEAD:refs/heads/B`),
//! run through [`crate::run`] so they behave and print exactly as typed in
//! the shell. The credentials never reach the computer: they are not put
//! in the URL (which `push` could show or a config could keep), but added
//! as an `Authorization` header by [`WithCredentials`] to the requests
//! going to the remote's origin only.

use crate::Invocation;
use crate::error::{Error, Result};
use crate::remote::transport::{HttpRequest, HttpResponse, Transport, TransportError};
use agentcomputer_fs::FileKind;

/// HTTP basic credentials for one publish.
#[derive(Clone)]
pub struct Credentials {
    /// User name (servers that take a token as password accept any).
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// What to publish.
#[derive(Debug, Clone)]
pub struct Publish {
    /// The directory, as typed (absolute in the runtime's view, or
    /// relative to the invocation's directory).
    pub dir: String,
    /// `http://` or `https://` URL without credentials.
    pub remote: String,
    /// The remote branch; `None`: the current branch, or `main` for a new
    /// repository.
    pub branch: Option<String>,
    /// The commit message; `None`: "Publish DIR".
    pub message: Option<String>,
    /// Credentials for the remote, if it needs any.
    pub credentials: Option<Credentials>,
}

/// What a publish did.
#[derive(Debug, Clone)]
pub struct Published {
    /// The commit the remote branch points at (hex).
    pub commit: String,
    /// Whether a commit was made (false: nothing had changed).
    pub committed: bool,
    /// The remote branch.
    pub branch: String,
    /// What git printed, stdout and stderr of each step.
    pub output: String,
}

/// Why a publish failed, in the terms an API maps to its status codes.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The request itself is wrong (directory, remote, branch).
    #[error("{0}")]
    Invalid(String),
    /// There is nothing to commit and no commit to push.
    #[error("{0}")]
    Nothing(String),
    /// The egress policy refused the remote.
    #[error("{0}")]
    Denied(String),
    /// The remote refused the push (not a fast-forward, a hook, …).
    #[error("{0}")]
    Rejected(String),
    /// The remote could not be reached, or another git step failed.
    #[error("{0}")]
    Failed(String),
}

/// A transport that adds `Authorization: Basic …` to requests whose
/// origin (scheme, host, port) is the remote's.
pub struct WithCredentials<'a> {
    inner: &'a dyn Transport,
    origin: String,
    header: String,
}

/// `scheme://host[:port]` of an http(s) URL, lower-cased.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    Some(format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        authority.to_ascii_lowercase()
    ))
}

impl<'a> WithCredentials<'a> {
    /// Wraps `inner`, adding `credentials` for `remote`'s origin.
    pub fn new(inner: &'a dyn Transport, remote: &str, credentials: &Credentials) -> Self {
        use base64::Engine as _;
        let pair = format!("{}:{}", credentials.username, credentials.password);
        Self {
            inner,
            origin: origin(remote).unwrap_or_default(),
            header: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ),
        }
    }
}

impl Transport for WithCredentials<'_> {
    fn send(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        if origin(&req.url).as_deref() != Some(self.origin.as_str())
            || req
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("authorization"))
        {
            return self.inner.send(req);
        }
        let mut req = req.clone();
        req.headers
            .push(("Authorization".into(), self.header.clone()));
        self.inner.send(&req)
    }
}

/// `remote` with whatever stands before an `@` of its authority (a user
/// and password) replaced by `***`, for messages.
fn redacted(remote: &str) -> String {
    let Some((scheme, rest)) = remote.split_once("://") else {
        return remote.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => remote.to_string(),
    }
}

/// Checks a remote URL: http(s), a host, no credentials in it. The
/// message never repeats credentials found in the URL.
pub fn check_remote(remote: &str) -> Result<(), PublishError> {
    let shown = redacted(remote);
    let invalid = |m: &str| Err(PublishError::Invalid(format!("remote {shown:?}: {m}")));
    let Some((scheme, rest)) = remote.split_once("://") else {
        return invalid("not an http:// or https:// URL");
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return invalid("not an http:// or https:// URL");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return invalid(
            "credentials do not belong in the URL; pass them separately (they are never stored)",
        );
    }
    if authority.is_empty() {
        return invalid("no host");
    }
    Ok(())
}

/// Commits `what.dir` and pushes it (see the module doc). `inv.transport`
/// must be set; the credentials are added around it.
pub fn publish(inv: &Invocation, what: &Publish) -> Result<Published, PublishError> {
    check_remote(&what.remote)?;
    if let Some(b) = &what.branch
        && !crate::refs::valid_name(b)
    {
        return Err(PublishError::Invalid(format!(
            "'{b}' is not a valid branch name"
        )));
    }
    let top = inv.engine_path(what.dir.as_bytes()).ok_or_else(|| {
        PublishError::Invalid(format!("{}: not a directory of the computer", what.dir))
    })?;
    match inv.files.stat(&top) {
        Ok(Some(a)) if a.kind == FileKind::Directory => {}
        Ok(_) => {
            return Err(PublishError::Invalid(format!(
                "{}: No such directory",
                what.dir
            )));
        }
        Err(e) => return Err(PublishError::Failed(e.to_string())),
    }
    let wrapped;
    let transport: Option<&dyn Transport> = match (&what.credentials, inv.transport) {
        (Some(c), Some(t)) => {
            wrapped = WithCredentials::new(t, &what.remote, c);
            Some(&wrapped)
        }
        (_, t) => t,
    };
    let inv = Invocation {
        files: inv.files.clone(),
        cwd: top.clone(),
        shown_root: inv.shown_root.clone(),
        env: inv.env,
        stop: inv.stop,
        fallback_name: inv.fallback_name.clone(),
        fallback_email: inv.fallback_email.clone(),
        transport,
    };
    let mut output = String::new();
    let mut step = |args: &[&str]| -> crate::Output {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let out = crate::run(&inv, &args);
        output.push_str(&String::from_utf8_lossy(&out.stdout));
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        out
    };
    let fail = |out: &crate::Output| {
        PublishError::Failed(String::from_utf8_lossy(&out.stderr).trim_end().to_string())
    };
    let is_repo = inv
        .files
        .lstat(&crate::files::join(&top, b".git"))
        .map_err(|e| PublishError::Failed(e.to_string()))?
        .is_some();
    if !is_repo {
        let branch = what.branch.clone().unwrap_or_else(|| "main".into());
        let out = step(&["init", "-q", "-b", &branch]);
        if out.code != 0 {
            return Err(fail(&out));
        }
    }
    let out = step(&["add", "-A"]);
    if out.code != 0 {
        return Err(fail(&out));
    }
    let shown_dir = inv.shown(&top);
    let message = what
        .message
        .clone()
        .unwrap_or_else(|| format!("Publish {shown_dir}"));
    let out = step(&["commit", "-q", "-m", &message]);
    let committed = out.code == 0;
    if !committed {
        let has_head = crate::run(
            &inv,
            &[
                "rev-parse".to_string(),
                "--verify".into(),
                "-q".into(),
                "HEAD".into(),
            ],
        )
        .code
            == 0;
        if !has_head {
            return Err(PublishError::Nothing(format!(
                "nothing to publish: {shown_dir} holds no files"
            )));
        }
        if out.code != 1 {
            return Err(fail(&out));
        }
    }
    let branch = match &what.branch {
        Some(b) => b.clone(),
        None => {
            let out = crate::run(&inv, &["branch".to_string(), "--show-current".into()]);
            let current = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if current.is_empty() {
                "main".into()
            } else {
                current
            }
        }
    };
    let refspec = format!("HEAD:refs/heads/{branch}");
    let out = step(&["push", &what.remote, &refspec]);
    if out.code != 0 {
        let text = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
        return Err(
            if text.contains("egress denied") || text.contains("denied by policy") {
                PublishError::Denied(text)
            } else if text.contains("[rejected]") || text.contains("[remote rejected]") {
                PublishError::Rejected(text)
            } else {
                PublishError::Failed(text)
            },
        );
    }
    let head = crate::run(&inv, &["rev-parse".to_string(), "HEAD".into()]);
    let commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
    Ok(Published {
        commit,
        committed,
        branch,
        output,
    })
}

impl From<Error> for PublishError {
    fn from(e: Error) -> Self {
        PublishError::Failed(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_are_http_urls_without_credentials() {
        assert!(check_remote("https://git.example.org/a/b.git").is_ok());
        assert!(check_remote("http://127.0.0.1:8080/r.git").is_ok());
        assert!(
            matches!(check_remote("https://u:p@x/r.git"), Err(PublishError::Invalid(m)) if m.contains("credentials"))
        );
        let Err(PublishError::Invalid(m)) = check_remote("https://ada:s3cret@x/r@b.git") else {
            panic!("credentials in the URL were taken");
        };
        assert!(
            !m.contains("s3cret") && m.contains("https://***@x/r@b.git"),
            "{m}"
        );
        assert!(check_remote("ssh://git@x/r.git").is_err());
        assert!(check_remote("/local/path").is_err());
        assert!(check_remote("https:///r.git").is_err());
    }

    #[test]
    fn credentials_go_only_to_the_remotes_origin() {
        assert_eq!(
            origin("https://Git.Example.org:443/a?x").as_deref(),
            Some("https://git.example.org:443")
        );
        assert_ne!(
            origin("https://evil.example/a"),
            origin("https://git.example.org/a")
        );
        let c = Credentials {
            username: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{c:?}").contains("secret"));
    }
}
