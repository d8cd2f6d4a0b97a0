//! Accepting the kubelet's plugin-registration calls, whose HTTP/2
//! `:authority` is a file path.
//!
//! The kubelet dials a plugin's registration socket with
//! `grpc.DialContext(socketPath, ...)` and no `grpc.WithAuthority`
//! (k8s.io/kubernetes v1.36 `pkg/kubelet/pluginmanager/operationexecutor`,
//! `dial`), so grpc-go sends the socket's path, percent-encoded
//! (`%2Fvar%2Flib%2F...`), as `:authority`. The `h2` server under tonic
//! refuses that authority (the `http` crate's parser) and answers with
//! `RST_STREAM(PROTOCOL_ERROR)` (RFC 9113 §8.1.1): the kubelet then retries
//! with growing back-off and never lists the
//! driver in the node's CSINode. (The kubelet's CSI client sets
//! `localhost` since Kubernetes PR 112597; its registration client does
//! not.)
//!
//! [`normalized`] sits between the registration socket and the in-process
//! server: bytes from the server pass unchanged; from the client, the
//! connection preface and every frame pass unchanged except header blocks
//! (a HEADERS frame and its CONTINUATION frames, RFC 9113 §6.2 and §6.10),
//! which are decoded (HPACK, RFC 7541, with `loona-hpack`) and re-encoded
//! with `:authority` replaced by `localhost` when it is not a valid
//! authority. The re-encoder is the only HPACK encoder the server's decoder
//! ever sees on that connection, so both dynamic tables stay in step.

use std::io;

use loona_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;
use tracing::debug;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
/// Frame flags (RFC 9113 §6.2).
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The smallest SETTINGS_MAX_FRAME_SIZE a peer may announce and the
/// default (RFC 9113 §6.5.2): re-encoded blocks are split at this size.
const MAX_FRAME: usize = 16_384;
/// Largest header block accepted from the client, in bytes (the
/// registration calls' blocks are a few hundred bytes).
const MAX_BLOCK: usize = 64 * 1024;
/// Largest decoded header list accepted, in bytes (name and value lengths
/// plus 32 per field, as RFC 9113 §6.5.2 counts SETTINGS_MAX_HEADER_LIST_SIZE):
/// indexed fields make a small block decode large.
const MAX_HEADER_LIST: usize = 64 * 1024;
/// The HPACK dynamic table size both ends use: the default of
/// SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2), which the in-process
/// server never changes. A client's table size update above it is an
/// error (RFC 7541 §4.2).
const TABLE_SIZE: usize = 4096;
/// Bytes buffered between the socket and the server in each direction.
const PIPE: usize = 64 * 1024;
/// What a path-like authority is replaced by (what grpc-go itself sends
/// for `unix://` targets).
const LOCALHOST: &[u8] = b"localhost";

/// The connections accepted on `listener`, each as the server's end of an
/// in-process pipe whose client side rewrites bad authorities (module
/// docs). Serve it with `tonic`'s `serve_with_incoming`.
pub fn normalized(listener: UnixListener) -> impl Stream<Item = io::Result<DuplexStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(|accepted| {
        let socket = accepted?;
        let (server_end, ours) = tokio::io::duplex(PIPE);
        tokio::spawn(async move {
            if let Err(e) = pump(socket, ours).await {
                debug!(error = %e, "registration connection ended");
            }
        });
        Ok(server_end)
    })
}

/// Moves bytes between the kubelet's `socket` and the server's pipe end
/// until either side closes.
async fn pump(socket: UnixStream, server: DuplexStream) -> io::Result<()> {
    let (mut from_client, mut to_client) = socket.into_split();
    let (mut from_server, mut to_server) = tokio::io::split(server);
    let upstream = async {
        let r = rewrite(&mut from_client, &mut to_server).await;
        let _ = to_server.shutdown().await;
        r
    };
    let downstream = async {
        let r = tokio::io::copy(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
        r.map(|_| ())
    };
    let (a, b) = tokio::join!(upstream, downstream);
    a.and(b)
}

/// Copies the client's bytes to `to`, rewriting header blocks. Ends with
/// Ok at a clean end of input between frames.
pub async fn rewrite<R, W>(from: &mut R, to: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; 24];
    from.read_exact(&mut preface).await?;
    if &preface != PREFACE {
        return Err(invalid("not an HTTP/2 connection preface"));
    }
    to.write_all(&preface).await?;
    let mut decoder = Decoder::new();
    decoder.set_max_allowed_table_size(TABLE_SIZE);
    let mut encoder = Encoder::new();
    loop {
        let Some(frame) = read_frame(from).await? else {
            return Ok(());
        };
        if frame.kind != HEADERS {
            to.write_all(&frame.header).await?;
            to.write_all(&frame.payload).await?;
            continue;
        }
        let mut block = header_fragment(&frame)?.to_vec();
        let mut flags = frame.flags;
        while flags & END_HEADERS == 0 {
            let next = read_frame(from)
                .await?
                .ok_or_else(|| invalid("connection closed inside a header block"))?;
            if next.kind != CONTINUATION || next.stream != frame.stream {
                return Err(invalid("a header block continued by another frame"));
            }
            block.extend_from_slice(&next.payload);
            if block.len() > MAX_BLOCK {
                return Err(invalid("header block too large"));
            }
            flags = next.flags;
        }
        let mut headers = Vec::new();
        let mut size = 0usize;
        decoder
            .decode_with_cb(&block, |name, value| {
                size += name.len() + value.len() + 32;
                if size <= MAX_HEADER_LIST {
                    headers.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| invalid(&format!("cannot decode a header block: {e}")))?;
        if size > MAX_HEADER_LIST {
            return Err(invalid("header list too large"));
        }
        let headers = with_valid_authority(headers);
        let encoded = encoder.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])));
        write_block(to, frame.stream, frame.flags & END_STREAM, &encoded).await?;
    }
}

/// `headers` with an `:authority` that is not a valid URI authority
/// replaced by `localhost`.
pub fn with_valid_authority(mut headers: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    for (name, value) in headers.iter_mut() {
        if name == b":authority" && http_authority_is_invalid(value) {
            debug!(authority = %String::from_utf8_lossy(value), "replacing a path-like :authority");
            *value = LOCALHOST.to_vec();
        }
    }
    headers
}

/// Whether `value` is refused as an authority by the HTTP/2 server (the
/// `http` crate's parser, which `h2` uses): grpc-go sends the socket path
/// percent-encoded (`%2Fvar%2Flib...`), which it refuses too. Empty means
/// "no authority" and is kept.
fn http_authority_is_invalid(value: &[u8]) -> bool {
    !value.is_empty() && http::uri::Authority::try_from(value).is_err()
}

/// One frame: its 9-byte header as read, and its payload.
struct Frame {
    header: [u8; 9],
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// Reads one frame; `None` at a clean end of input before its header.
async fn read_frame<R: AsyncRead + Unpin>(from: &mut R) -> io::Result<Option<Frame>> {
    let mut header = [0u8; 9];
    let mut got = 0;
    while got < header.len() {
        let n = from.read(&mut header[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
    }
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    if len > MAX_BLOCK {
        return Err(invalid("frame too large"));
    }
    let mut payload = vec![0u8; len];
    from.read_exact(&mut payload).await?;
    Ok(Some(Frame {
        header,
        kind: header[3],
        flags: header[4],
        stream: u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff,
        payload,
    }))
}

/// The header block fragment of a HEADERS frame: without its padding and
/// priority fields (RFC 9113 §6.2). The priority is dropped, as the
/// server ignores it (RFC 9113 §5.3.2).
fn header_fragment(frame: &Frame) -> io::Result<&[u8]> {
    let p = &frame.payload;
    let mut start = 0;
    let mut end = p.len();
    if frame.flags & PADDED != 0 {
        let pad = *p
            .first()
            .ok_or_else(|| invalid("PADDED frame without pad length"))? as usize;
        start = 1;
        end = end
            .checked_sub(pad)
            .filter(|&e| e >= start)
            .ok_or_else(|| invalid("padding longer than the frame"))?;
    }
    if frame.flags & PRIORITY != 0 {
        start += 5;
        if start > end {
            return Err(invalid("PRIORITY frame too short"));
        }
    }
    Ok(&p[start..end])
}

/// Writes `block` as a HEADERS frame (with `end_stream`) and as many
/// CONTINUATION frames as [`MAX_FRAME`] needs.
async fn write_block<W: AsyncWrite + Unpin>(
    to: &mut W,
    stream: u32,
    end_stream: u8,
    block: &[u8],
) -> io::Result<()> {
    let chunks: Vec<&[u8]> = if block.is_empty() {
        vec![&[][..]]
    } else {
        block.chunks(MAX_FRAME).collect()
    };
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let kind = if i == 0 { HEADERS } else { CONTINUATION };
        let mut flags = if i == last { END_HEADERS } else { 0 };
        if i == 0 {
            flags |= end_stream;
        }
        let len = (chunk.len() as u32).to_be_bytes();
        let id = stream.to_be_bytes();
        let header = [
            len[1], len[2], len[3], kind, flags, id[0], id[1], id[2], id[3],
        ];
        to.write_all(&header).await?;
        to.write_all(chunk).await?;
    }
    Ok(())
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_path_like_authorities_are_replaced() {
        let h = |a: &str| vec![(b":authority".to_vec(), a.as_bytes().to_vec())];
        for (given, kept) in [
            ("/var/lib/kubelet/plugins_registry/x.sock", false),
            ("%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fx.sock", false),
            ("var/lib/x.sock", false),
            ("localhost", true),
            ("localhost:50051", true),
            ("[::1]:80", true),
            ("", true),
        ] {
            let out = with_valid_authority(h(given));
            let expect = if kept { given.as_bytes() } else { LOCALHOST };
            assert_eq!(out[0].1, expect, "{given}");
        }
    }

    #[tokio::test]
    async fn header_blocks_are_rewritten_and_other_frames_pass() {
        // A client's connection: preface, SETTINGS, a padded HEADERS frame
        // split over a CONTINUATION, then DATA.
        let mut enc = Encoder::new();
        let block = enc.encode(
            [
                (&b":method"[..], &b"POST"[..]),
                (b":scheme", b"http"),
                (b":path", b"/pluginregistration.Registration/GetInfo"),
                (b":authority", b"/var/lib/kubelet/plugins_registry/a.sock"),
                (b"content-type", b"application/grpc"),
            ]
            .into_iter(),
        );
        let (first, second) = block.split_at(10);
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // SETTINGS
        let mut headers = vec![2u8]; // pad length
        headers.extend_from_slice(first);
        headers.extend_from_slice(&[0, 0]);
        let len = headers.len() as u32;
        input.extend_from_slice(&len.to_be_bytes()[1..]);
        input.extend_from_slice(&[HEADERS, PADDED, 0, 0, 0, 1]);
        input.extend_from_slice(&headers);
        let len = second.len() as u32;
        input.extend_from_slice(&len.to_be_bytes()[1..]);
        input.extend_from_slice(&[CONTINUATION, END_HEADERS, 0, 0, 0, 1]);
        input.extend_from_slice(second);
        input.extend_from_slice(&[0, 0, 3, 0x0, END_STREAM, 0, 0, 0, 1, 7, 8, 9]); // DATA

        let mut out = Vec::new();
        rewrite(&mut &input[..], &mut out).await.unwrap();

        assert_eq!(&out[..24], PREFACE);
        assert_eq!(&out[24..33], &[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        let rest = &out[33..];
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        assert_eq!(rest[3], HEADERS);
        assert_eq!(rest[4], END_HEADERS);
        assert_eq!(&rest[5..9], &[0, 0, 0, 1]);
        let decoded = Decoder::new().decode(&rest[9..9 + len]).unwrap();
        let authority = decoded.iter().find(|(n, _)| n == b":authority").unwrap();
        assert_eq!(authority.1, LOCALHOST);
        assert_eq!(decoded.len(), 5);
        assert_eq!(
            &rest[9 + len..],
            &[0, 0, 3, 0x0, END_STREAM, 0, 0, 0, 1, 7, 8, 9]
        );
    }
}
