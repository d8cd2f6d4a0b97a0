//! The node agent's tar streams, as the CLI's `put -r`, `get -r`, `import`
//! and `export` share them: [`send`] feeds an Import call from a blocking
//! producer, [`receive`] hands an Export call to a blocking consumer.
//! Neither side holds the archive: it moves through bounded channels of
//! 1 MiB chunks.

use std::io::{Read, Write};

use agentcomputer_proto::CHUNK_BYTES;
use agentcomputer_proto::v1 as pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::error::{CliError, Result};

/// Chunks in flight between the blocking thread and the call.
const AHEAD: usize = 4;

/// Runs an Import of the archive `produce` writes into its sink (on a
/// blocking thread) under `header.path`. A producer's error ends the call
/// without its end message, so the agent keeps nothing of it; `failed`
/// words that error.
pub async fn send(
    client: &mut Client,
    header: pb::ImportHeader,
    produce: impl FnOnce(&mut ImportSink) -> std::io::Result<()> + Send + 'static,
    failed: impl FnOnce(std::io::Error) -> CliError + Send + 'static,
) -> Result<pb::ImportResponse> {
    let (tx, rx) = mpsc::channel::<pb::ImportRequest>(AHEAD);
    let (fail_tx, fail_rx) = oneshot::channel::<CliError>();
    let writer = tokio::task::spawn_blocking(move || {
        use pb::import_request::Msg;
        if tx
            .blocking_send(pb::ImportRequest {
                msg: Some(Msg::Header(header)),
            })
            .is_err()
        {
            return;
        }
        let mut sink = ImportSink {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
        };
        match produce(&mut sink).and_then(|()| sink.flush()) {
            Ok(()) => {
                let _ = tx.blocking_send(pb::ImportRequest {
                    msg: Some(Msg::End(pb::ImportEnd {})),
                });
            }
            // The call ended first: its answer says why.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            // Without its end message the agent drops what it unpacked.
            Err(e) => {
                let _ = fail_tx.send(failed(e));
            }
        }
    });
    let result = tokio::select! {
        biased;
        Ok(e) = fail_rx => Err(e),
        r = client.import(ReceiverStream::new(rx)) => r.map(|r| r.into_inner()).map_err(CliError::from),
    };
    writer.abort();
    result
}

/// The tar stream as Import data messages of [`CHUNK_BYTES`]; a write
/// after the call ended is `BrokenPipe`.
pub struct ImportSink {
    tx: mpsc::Sender<pb::ImportRequest>,
    buf: Vec<u8>,
}

impl ImportSink {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.tx
            .blocking_send(pb::ImportRequest {
                msg: Some(pb::import_request::Msg::Data(data)),
            })
            .map_err(|_| std::io::ErrorKind::BrokenPipe.into())
    }
}

impl Write for ImportSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Runs an Export and gives its tar stream to `consume` on a blocking
/// thread. A stream that breaks is an error of the reader (so nothing
/// takes a cut archive for a whole one) and the call's error is the
/// answer; else `consume`'s.
pub async fn receive<T: Send + 'static>(
    client: &mut Client,
    req: pb::ExportRequest,
    consume: impl FnOnce(ChunkReader) -> Result<T> + Send + 'static,
) -> Result<T> {
    let mut stream = client.export(req).await?.into_inner();
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(AHEAD);
    let reader = ChunkReader {
        rx,
        chunk: Vec::new(),
        at: 0,
    };
    let consumer = tokio::task::spawn_blocking(move || consume(reader));
    let fed: Result<()> = async {
        loop {
            let (item, broke) = match stream.message().await {
                Ok(Some(m)) => (Ok(m.data), None),
                Ok(None) => return Ok(()),
                Err(status) => {
                    let cut = std::io::Error::other("the archive's stream broke");
                    (Err(cut), Some(status))
                }
            };
            let tx = tx.clone();
            let sent = tokio::task::spawn_blocking(move || tx.send(item).is_ok())
                .await
                .unwrap_or(false);
            if let Some(status) = broke {
                return Err(status.into());
            }
            if !sent {
                return Ok(());
            }
        }
    }
    .await;
    drop(tx);
    let consumed = consumer
        .await
        .map_err(|e| CliError::new(format!("the archive's reader stopped: {e}")))?;
    fed?;
    consumed
}

/// The Export stream, read on the blocking thread.
pub struct ChunkReader {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk?;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
