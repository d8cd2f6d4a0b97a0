//! Pass/fail/skip of one observed outcome against a case's expectations.

use crate::Observed;
use crate::corpus::{Case, Expect};

/// Result of judging one case for one shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Matched one accepted outcome.
    Pass,
    /// Matched none; the text says how the first accepted outcome differs.
    Fail(String),
    /// Not run; the text says why.
    Skip(String),
    /// The shell refused the script before running it; the text is the
    /// construct it named. Counted apart from agreeing and differing.
    Refused(String),
}

/// The construct a refusal message names (the text after `it uses `, up
/// to `, which`), or the whole message.
pub fn refused_construct(message: &str) -> String {
    message
        .split_once("it uses ")
        .and_then(|(_, rest)| rest.split_once(", which"))
        .map_or(message, |(construct, _)| construct)
        .to_string()
}

/// Why `case` cannot be run fairly by any of the shells, if so: it calls
/// host programs outside the prelude (Python modules, the Oils build tree).
pub fn skip_reason(case: &Case) -> Option<String> {
    let s = &case.script;
    for needle in [
        "python",
        "$REPO_ROOT/bin",
        "$REPO_ROOT/_",
        "$REPO_ROOT/vendor",
        "_build/",
    ] {
        if s.contains(needle) {
            return Some(format!("needs host `{needle}`"));
        }
    }
    let helpers = [
        "argv.py",
        "printenv.py",
        "stdout_stderr.py",
        "read_from_fd.py",
    ];
    for word in s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')) {
        if word.ends_with(".py") && !helpers.contains(&word) {
            return Some(format!("needs host `{word}`"));
        }
    }
    None
}

fn differs(want: &Expect, got: &Observed) -> Option<String> {
    if got.timed_out {
        return Some("timeout".into());
    }
    if let Some(out) = &want.stdout
        && out.as_bytes() != got.stdout.as_slice()
    {
        return Some(format!(
            "stdout {:?} != expected {:?}",
            clip(&String::from_utf8_lossy(&got.stdout)),
            clip(out)
        ));
    }
    if let Some(status) = want.status
        && status != got.status
    {
        return Some(format!("status {} != expected {status}", got.status));
    }
    if let Some(err) = &want.stderr
        && err.as_bytes() != got.stderr.as_slice()
    {
        return Some(format!(
            "stderr {:?} != expected {:?}",
            clip(&String::from_utf8_lossy(&got.stderr)),
            clip(err)
        ));
    }
    None
}

fn clip(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX).collect();
        t.push('…');
        t
    }
}

/// Judges `got` against the outcomes `case` accepts for bash.
pub fn judge(case: &Case, got: &Observed) -> Verdict {
    if let Some(message) = &got.refused {
        return Verdict::Refused(refused_construct(message));
    }
    let alts = case.accepted_for("bash");
    let mut first = None;
    for want in &alts {
        match differs(want, got) {
            None => return Verdict::Pass,
            Some(why) => {
                first.get_or_insert(why);
            }
        }
    }
    Verdict::Fail(first.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::parse;

    fn obs(out: &str, status: i32) -> Observed {
        Observed {
            stdout: out.as_bytes().to_vec(),
            status,
            ..Observed::default()
        }
    }

    #[test]
    fn bash_qualified_expectation_wins() {
        let c = &parse("#### x\nfoo\n## stdout: a\n## BUG bash stdout: b\n").unwrap()[0];
        assert_eq!(judge(c, &obs("b\n", 0)), Verdict::Pass);
        assert!(matches!(judge(c, &obs("a\n", 0)), Verdict::Fail(_)));
        assert!(matches!(judge(c, &obs("b\n", 1)), Verdict::Fail(_)));
    }

    #[test]
    fn unknown_python_helpers_are_skipped() {
        let c = &parse("#### x\nfoo.py\n## stdout: a\n").unwrap()[0];
        assert!(skip_reason(c).is_some());
        let c = &parse("#### x\nargv.py a\n## stdout: a\n").unwrap()[0];
        assert_eq!(skip_reason(c), None);
    }
}
