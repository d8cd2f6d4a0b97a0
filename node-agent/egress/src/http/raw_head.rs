//! The response head as the server wrote it.
//!
//! hyper's HTTP/1 client hands back header names lowercased; it can keep
//! their case (`preserve_header_case`), but only in an extension type that
//! is private in hyper 1.x (`HeaderCaseMap`). `curl -i` shows names as the
//! server sent them and scripts grep for `^Content-Length`, so the bytes
//! of the head are copied as hyper reads them and parsed again with
//! httparse (the parser hyper itself uses).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most head bytes kept; hyper's own read buffer limit is larger, but a
/// head this big is not worth showing exactly (the fallback is Title-Case).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header lines parsed (hyper's default `max_headers` is 100).
const MAX_HEADERS: usize = 128;

/// Status reason and header lines of one response, as received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RawHead {
    /// The reason phrase (`Not Found`), possibly empty.
    pub reason: String,
    /// Header lines in arrival order, names spelled as the server did.
    pub headers: Vec<(String, Vec<u8>)>,
}

#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    head: Option<RawHead>,
    /// Nothing more to record: a final head was parsed, or parsing failed.
    done: bool,
}

impl Capture {
    fn record(&mut self, fresh: &[u8]) {
        if self.done {
            return;
        }
        self.bytes.extend_from_slice(fresh);
        loop {
            let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut lines);
            match resp.parse(&self.bytes) {
                Ok(httparse::Status::Complete(len)) => {
                    // 1xx heads (100 Continue) precede the one that counts.
                    if resp
                        .code
                        .is_some_and(|c| (100..200).contains(&c) && c != 101)
                    {
                        self.bytes.drain(..len);
                        continue;
                    }
                    self.head = Some(RawHead {
                        reason: resp.reason.unwrap_or_default().to_string(),
                        headers: resp
                            .headers
                            .iter()
                            .map(|h| (h.name.to_string(), h.value.to_vec()))
                            .collect(),
                    });
                    self.finish();
                }
                Ok(httparse::Status::Partial) if self.bytes.len() <= MAX_HEAD_BYTES => {}
                _ => self.finish(),
            }
            return;
        }
    }

    fn finish(&mut self) {
        self.done = true;
        self.bytes = Vec::new();
    }
}

/// Where a [`Tap`] leaves the head once hyper has read it.
#[derive(Clone, Default)]
pub(super) struct Captured(Arc<Mutex<Capture>>);

impl Captured {
    /// The final head, if it arrived whole and parsed.
    pub(super) fn take(&self) -> Option<RawHead> {
        self.0.lock().ok()?.head.take()
    }
}

/// A connection that copies what is read until the response head is
/// complete; writes pass straight through.
pub(super) struct Tap<T> {
    inner: T,
    captured: Captured,
}

impl<T> Tap<T> {
    pub(super) fn new(inner: T) -> (Tap<T>, Captured) {
        let captured = Captured::default();
        let tap = Tap {
            inner,
            captured: captured.clone(),
        };
        (tap, captured)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled
            && let Ok(mut capture) = self.captured.0.lock()
            && !capture.done
        {
            capture.record(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `content-length` as `Content-Length`: what nearly every server sends,
/// for when the head could not be captured.
pub(super) fn title_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(pieces: &[&[u8]]) -> Option<RawHead> {
        let mut c = Capture::default();
        for p in pieces {
            c.record(p);
        }
        c.head
    }

    #[test]
    fn names_keep_their_case_across_reads() {
        let head = captured(&[
            b"HTTP/1.1 200 Fine\r\nContent-Le",
            b"ngth: 6\r\nX-Request-ID: a\r\nx-lower: b\r\n\r\nhello\n",
        ])
        .unwrap();
        assert_eq!(head.reason, "Fine");
        let names: Vec<&str> = head.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Content-Length", "X-Request-ID", "x-lower"]);
        assert_eq!(head.headers[0].1, b"6");
    }

    #[test]
    fn informational_heads_are_skipped() {
        let head =
            captured(&[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nETag: x\r\n\r\n"])
                .unwrap();
        assert_eq!(head.reason, "Created");
        assert_eq!(head.headers, [("ETag".to_string(), b"x".to_vec())]);
    }

    #[test]
    fn garbage_gives_no_head() {
        assert_eq!(captured(&[b"not http at all\r\n\r\n"]), None);
        assert_eq!(captured(&[b"HTTP/1.1 200 OK\r\nA: b\r\n"]), None);
    }

    #[test]
    fn title_case_names() {
        assert_eq!(title_case("content-length"), "Content-Length");
        assert_eq!(title_case("x-request-id"), "X-Request-Id");
        assert_eq!(title_case("etag"), "Etag");
    }
}
