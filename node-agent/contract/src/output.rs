//! A piece of a run's output.

/// A piece of output on one stream, sent in the order the program
/// produced it. Runtimes send at most their output cap in chunks, then
/// their own closing message on [`OutputChunk::Stderr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Bytes written to standard output (`echo`, `console.log`,
    /// `process.stdout.write`).
    Stdout(Vec<u8>),
    /// Bytes written to standard error (`>&2`, `console.error`, the report
    /// of an uncaught error or a limit).
    Stderr(Vec<u8>),
}

impl OutputChunk {
    /// The chunk's bytes, whichever stream they are on.
    pub fn bytes(&self) -> &[u8] {
        match self {
            OutputChunk::Stdout(b) | OutputChunk::Stderr(b) => b,
        }
    }

    /// The chunk's bytes, taken out of it.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            OutputChunk::Stdout(b) | OutputChunk::Stderr(b) => b,
        }
    }

    /// Whether the chunk is on standard error.
    pub fn is_stderr(&self) -> bool {
        matches!(self, OutputChunk::Stderr(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_stream() {
        let out = OutputChunk::Stdout(b"abc".to_vec());
        let err = OutputChunk::Stderr(b"de".to_vec());
        assert_eq!((out.bytes(), out.is_stderr()), (&b"abc"[..], false));
        assert_eq!((err.bytes(), err.is_stderr()), (&b"de"[..], true));
        assert_eq!(err.into_bytes(), b"de");
    }
}
