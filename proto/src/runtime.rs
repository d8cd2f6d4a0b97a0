//! The runtime contract in the API's terms: [`v1::Runtime`] values for the
//! contract's [`Runtime`], and Exec events for its [`OutputChunk`]s.

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

impl From<v1::Runtime> for Runtime {
    /// `RUNTIME_UNSPECIFIED` is the shell, as the API documents.
    fn from(runtime: v1::Runtime) -> Runtime {
        match runtime {
            v1::Runtime::Unspecified | v1::Runtime::Shell => Runtime::Shell,
            v1::Runtime::Javascript => Runtime::JavaScript,
            v1::Runtime::Container => Runtime::Container,
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
            assert_eq!(Runtime::from(v1::Runtime::from(runtime)), runtime);
        }
        assert_eq!(Runtime::from(v1::Runtime::Unspecified), Runtime::Shell);
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
