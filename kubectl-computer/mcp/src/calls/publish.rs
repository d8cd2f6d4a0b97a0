//! The publish call's pieces shared by the `publish` tool and the CLI's
//! `publish`: the credentials' text form, the directory as the API names
//! it, and the refusal of a remote URL with credentials in it.

use crate::error::{Error, Result};

/// The user a bare token is sent as: the name GitHub documents for
/// tokens; servers that take a token as the password accept any user.
pub const TOKEN_USER: &str = "x-access-token";

/// `USER:SECRET` split at the first colon, or a bare token (the password
/// of [`TOKEN_USER`]); trailing newlines are ignored. Errors: empty
/// credentials (the message never holds the text).
pub fn parse_credentials(text: &str) -> Result<(String, String)> {
    let text = text.trim_end_matches(['\n', '\r']);
    if text.is_empty() {
        return Err(Error::new("the credentials are empty"));
    }
    Ok(match text.split_once(':') {
        Some((user, secret)) => (user.to_string(), secret.to_string()),
        None => (TOKEN_USER.to_string(), text.to_string()),
    })
}

/// The API's form of a directory given relative to `/workspace` or
/// absolute under it: Publish roots absolute paths at `/workspace`, so
/// `site`, `/workspace/site` and `/site` are all `/site`, and `/workspace`
/// (or an empty path, `.`) is `/`.
pub fn api_dir(dir: &str) -> String {
    let dir = dir.trim_start_matches("./");
    match dir {
        "" | "." | "/workspace" | "/workspace/" => "/".to_string(),
        d if d.starts_with("/workspace/") => d["/workspace".len()..].to_string(),
        d if d.starts_with('/') => d.to_string(),
        d => format!("/{d}"),
    }
}

/// `Some(remote shown without them)` when the `http(s)://` URL `remote`
/// holds credentials (`USER:SECRET@`) in its authority; they are replaced
/// by `***` so that a message can show it.
pub fn credentials_in_url(remote: &str) -> Option<String> {
    let (scheme, rest) = remote.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..end].rfind('@')?;
    Some(format!("{scheme}://***{}", &rest[at..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_user_and_secret_or_a_token() {
        assert_eq!(
            parse_credentials("ada:s3:cret\n").unwrap(),
            ("ada".into(), "s3:cret".into())
        );
        assert_eq!(
            parse_credentials("ghp_abc").unwrap(),
            ("x-access-token".into(), "ghp_abc".into())
        );
        assert!(parse_credentials("\n").is_err());
    }

    #[test]
    fn directories_are_rooted_at_the_workspace() {
        for (given, sent) in [
            ("site", "/site"),
            ("./site", "/site"),
            ("/site", "/site"),
            ("/workspace/site", "/site"),
            ("/workspace", "/"),
            ("", "/"),
            ("workspace", "/workspace"),
        ] {
            assert_eq!(api_dir(given), sent, "{given}");
        }
    }

    #[test]
    fn credentials_in_a_url_are_found_and_hidden() {
        assert_eq!(
            credentials_in_url("https://ada:s3cret@git.example.org/r@x.git").as_deref(),
            Some("https://***@git.example.org/r@x.git")
        );
        assert_eq!(credentials_in_url("https://git.example.org/a@b"), None);
        assert_eq!(credentials_in_url("ssh://git@example.org/r.git"), None);
    }
}
