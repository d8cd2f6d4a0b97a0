//! The runtime contract in the API's terms: [`v1::Runtime`] values for the
//! contract's [`Runtime`], what an Exec asks for ([`Requested`]), and Exec
//! events for its [`OutputChunk`]s.

use agentcomputer_runtime_contract::{OutputChunk, Runtime};

use crate::v1;

impl From<Runtime> for v1::Runtime {
    fn from(runtime: Runtime) -> v1::Runtime {
        match runtime {
            Runtime::Shell => v1::Runtime::Shell,
            Runtime::JavaScript => v1::Runtime::Javascript,
            Runtime::Container => v1::Runtime::Container,
        }
    }
}

/// What an Exec asks for: one runtime, or `RUNTIME_AUTO`, the choice
/// between the shell and the container made from the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// This runtime.
    Runtime(Runtime),
    /// The shell runtime when it has every command the script names, else
    /// the container runtime.
    Auto,
}

impl Requested {
    /// `auto`, or the runtime's name.
    pub const fn name(self) -> &'static str {
        match self {
            Requested::Runtime(runtime) => runtime.name(),
            Requested::Auto => "auto",
        }
    }
}

impl From<v1::Runtime> for Requested {
    /// `RUNTIME_UNSPECIFIED` is the shell, as the API documents.
    fn from(runtime: v1::Runtime) -> Requested {
        match runtime {
            v1::Runtime::Unspecified | v1::Runtime::Shell => Requested::Runtime(Runtime::Shell),
            v1::Runtime::Javascript => Requested::Runtime(Runtime::JavaScript),
            v1::Runtime::Container => Requested::Runtime(Runtime::Container),
            v1::Runtime::Auto => Requested::Auto,
        }
    }
}

impl From<OutputChunk> for v1::exec_event::Event {
    fn from(chunk: OutputChunk) -> v1::exec_event::Event {
        match chunk {
            OutputChunk::Stdout(b) => v1::exec_event::Event::Stdout(b),
            OutputChunk::Stderr(b) => v1::exec_event::Event::Stderr(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_round_trip_through_the_api() {
        for runtime in Runtime::ALL {
            assert_eq!(
                Requested::from(v1::Runtime::from(runtime)),
                Requested::Runtime(runtime)
            );
        }
        assert_eq!(
            Requested::from(v1::Runtime::Unspecified),
            Requested::Runtime(Runtime::Shell)
        );
        assert_eq!(Requested::from(v1::Runtime::Auto), Requested::Auto);
        assert_eq!(Requested::Auto.name(), "auto");
        assert_eq!(
            v1::Runtime::Auto
                .as_str_name()
                .strip_prefix("RUNTIME_")
                .map(str::to_lowercase)
                .as_deref(),
            Some(Requested::Auto.name())
        );
    }

    #[test]
    fn api_enum_names_follow_the_contract_names() {
        for runtime in Runtime::ALL {
            let api = v1::Runtime::from(runtime).as_str_name();
            assert_eq!(
                api.strip_prefix("RUNTIME_")
                    .map(str::to_lowercase)
                    .as_deref(),
                Some(runtime.name()),
            );
        }
    }

    #[test]
    fn chunks_keep_their_stream() {
        use v1::exec_event::Event;
        assert_eq!(
            Event::from(OutputChunk::Stdout(b"o".to_vec())),
            Event::Stdout(b"o".to_vec())
        );
        assert_eq!(
            Event::from(OutputChunk::Stderr(b"e".to_vec())),
            Event::Stderr(b"e".to_vec())
        );
    }
}
