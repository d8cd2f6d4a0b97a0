//! How tool results are reported: a success has text for the model and
//! structured content; every failure is a tool error (`isError: true`)
//! whose text leads with the errno name and names the path.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::error::Error;
use crate::format::shown;

/// The errno name a message leads with (`ENOENT: ...`), if any: how agents
/// that send no `errno` metadata name it.
pub(super) fn errno_of(message: &str) -> Option<&str> {
    let (head, _) = message.split_once(':')?;
    let valid = head.len() > 1
        && head.starts_with('E')
        && head
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
    valid.then_some(head)
}

/// A tool error for `err` about `path`: the message (with the path added
/// when it does not name it; escaped by [`shown`] in the text, so a
/// control character in a name cannot forge lines of the message), and
/// `{error, errno, path}` as structured content (JSON carries it as is).
/// The errno is the one the agent sent in the status metadata, else the one
/// the message leads with.
pub(super) fn failure(err: Error, path: &str) -> CallToolResult {
    let mut text = err.message;
    if !path.is_empty() {
        let escaped = shown(path);
        if text.contains(path) {
            text = text.replace(path, &escaped);
        } else {
            text = format!("{text} (path: {escaped})");
        }
    }
    let errno = err.errno.or_else(|| errno_of(&text).map(str::to_string));
    let mut result = CallToolResult::error(vec![ContentBlock::text(text.clone())]);
    result.structured_content = Some(json!({
        "error": text,
        "errno": errno,
        "path": path,
    }));
    result
}

/// An argument error found here.
pub(super) fn invalid(message: impl std::fmt::Display) -> Error {
    Error {
        message: format!("EINVAL: {message}"),
        errno: Some("EINVAL".into()),
        moved_to: None,
    }
}

/// A successful result with `text` for the model and `value` as structured
/// content.
pub(super) fn success(text: String, value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(
            errno_of("ENOENT: no such file or directory: a"),
            Some("ENOENT")
        );
        assert_eq!(errno_of("computer \"x\" not found"), None);
        assert_eq!(errno_of("Error: x"), None);
    }

    #[test]
    fn tool_errors_name_the_errno_and_the_path() {
        let r = failure(Error::new("EISDIR: is a directory"), "src");
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["errno"], "EISDIR");
        assert_eq!(s["path"], "src");
        assert_eq!(s["error"], "EISDIR: is a directory (path: src)");
        // A name with a newline cannot forge a line of the message.
        let r = failure(Error::new("ENOENT: a\nEPERM: x"), "a\nEPERM: x");
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"], "ENOENT: a\\nEPERM: x");
        assert_eq!(s["path"], "a\nEPERM: x");
        let r = failure(Error::new("EACCES: denied"), "b\r");
        assert_eq!(
            r.structured_content.unwrap()["error"],
            "EACCES: denied (path: b\\r)"
        );
    }

    #[test]
    fn the_errno_sent_in_metadata_wins_over_the_text() {
        let sent = Error {
            message: "computer \"x\" was deleted".into(),
            errno: Some("ECANCELED".into()),
            moved_to: None,
        };
        let s = failure(sent, "a").structured_content.unwrap();
        assert_eq!(s["errno"], "ECANCELED");
        let none = failure(Error::new("no such agent"), "a");
        assert_eq!(none.structured_content.unwrap()["errno"], Value::Null);
    }
}
