//! pkt-line framing (Documentation/gitprotocol-common.txt, "pkt-line
//! Format"): four hex digits giving the length including themselves, then
//! the data; `0000` is a flush-pkt. Decoding is gitoxide's
//! `gix-packetline`; encoding is the four-digit prefix.

use crate::error::{Error, Result};
use gix_packetline::PacketLineRef;
use gix_packetline::decode::Stream;

/// Largest data in one pkt-line (65520 less the 4-byte prefix).
pub const MAX_DATA: usize = 65516;

/// Appends `data` as one pkt-line.
pub fn write(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("{:04x}", data.len() + 4).as_bytes());
    out.extend_from_slice(data);
}

/// Appends a flush-pkt.
pub fn flush(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0000");
}

/// One decoded line: `None` for a flush (or delimiter) packet.
pub type Line<'a> = Option<&'a [u8]>;

/// Reads pkt-lines from a byte buffer.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Lines from the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.data[self.pos..]
    }

    /// Whether everything was read.
    pub fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The next line. Errors: a malformed or cut-off packet, which git
    /// reports as a protocol error.
    pub fn next_line(&mut self) -> Result<Line<'a>> {
        let data: &'a [u8] = &self.data[self.pos..];
        match gix_packetline::decode::streaming(data) {
            Ok(Stream::Complete {
                line,
                bytes_consumed,
            }) => {
                self.pos += bytes_consumed;
                Ok(match line {
                    PacketLineRef::Data(d) => Some(d),
                    _ => None,
                })
            }
            Ok(Stream::Incomplete { .. }) => Err(Error::fatal(
                "the remote end hung up unexpectedly".to_string(),
            )),
            Err(e) => Err(Error::fatal(format!(
                "protocol error: bad line length: {e}"
            ))),
        }
    }
}

/// `line` without its trailing newline.
pub fn chomp(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}
