//! The runtimes and their names.

use std::fmt;
use std::str::FromStr;

/// One of the runtimes a computer runs programs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Runtime {
    /// A bash script, run in-process by the shell interpreter (the default).
    #[default]
    Shell,
    /// An ES module, run in-process by the JavaScript isolate.
    JavaScript,
    /// A bash script run with real binaries in a sandbox.
    Container,
}

impl Runtime {
    /// Every runtime, in the order they are offered.
    pub const ALL: [Runtime; 3] = [Runtime::Shell, Runtime::JavaScript, Runtime::Container];

    /// The runtime's one name: in requests of the CLI and MCP tools, in
    /// messages, logs and metrics, and as its `spec.runtimes` field
    /// (`shell`, `javascript`, `container`).
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::Shell => "shell",
            Runtime::JavaScript => "javascript",
            Runtime::Container => "container",
        }
    }

    /// The runtime a name or alias stands for: [`Runtime::name`], or `js`
    /// for JavaScript; exact, lowercase. `None` for anything else.
    pub fn from_name(name: &str) -> Option<Runtime> {
        match name {
            "shell" => Some(Runtime::Shell),
            "javascript" | "js" => Some(Runtime::JavaScript),
            "container" => Some(Runtime::Container),
            _ => None,
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A runtime name no runtime goes by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRuntime(pub String);

impl fmt::Display for UnknownRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown runtime {:?}; the runtimes are shell, javascript (js), container",
            self.0
        )
    }
}

impl std::error::Error for UnknownRuntime {}

impl FromStr for Runtime {
    type Err = UnknownRuntime;

    /// [`Runtime::from_name`]; errors: [`UnknownRuntime`] naming the text.
    fn from_str(s: &str) -> Result<Runtime, UnknownRuntime> {
        Runtime::from_name(s).ok_or_else(|| UnknownRuntime(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for runtime in Runtime::ALL {
            assert_eq!(runtime.name().parse::<Runtime>(), Ok(runtime));
            assert_eq!(runtime.to_string(), runtime.name());
        }
        let names: Vec<&str> = Runtime::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names, ["shell", "javascript", "container"]);
    }

    #[test]
    fn js_is_an_alias_of_javascript() {
        assert_eq!(Runtime::from_name("js"), Some(Runtime::JavaScript));
        assert_eq!(Runtime::JavaScript.name(), "javascript");
    }

    #[test]
    fn unknown_names_are_refused_by_name() {
        for bad in ["", "Shell", "RUNTIME_SHELL", "python", "js "] {
            let err = bad.parse::<Runtime>().unwrap_err();
            assert_eq!(err, UnknownRuntime(bad.to_string()));
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn shell_is_the_default() {
        assert_eq!(Runtime::default(), Runtime::Shell);
    }
}
