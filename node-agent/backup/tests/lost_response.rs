//! An upload whose response is lost (the object landed, the shipper saw an
//! error) is retried with the same bytes, not replaced by a different
//! object at the same position, which would look like another shipper's.
//!
//! The store is the real server behind a thin wrapper that drops one
//! successful `PutObject` response on request.

mod common;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentcomputer_backup::{Error, Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits};
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

#[derive(Debug)]
struct LoseOneResponse {
    inner: Arc<dyn ObjectStore>,
    armed: AtomicBool,
}

impl fmt::Display for LoseOneResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoseOneResponse({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for LoseOneResponse {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let r = self.inner.put_opts(location, payload, opts).await;
        if r.is_ok() && self.armed.swap(false, Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "test",
                source: "connection reset before the response arrived".into(),
            });
        }
        r
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_whose_response_was_lost_is_retried_not_fenced() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let lossy = Arc::new(LoseOneResponse {
        inner: server.store(),
        armed: AtomicBool::new(false),
    });
    let store: Arc<dyn ObjectStore> = lossy.clone();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/lossy");
    let options = Options {
        poll_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
        .await
        .unwrap();
    common::write_file(&fs, "a", b"a");
    assert_eq!(shipper.sync().await.unwrap().position, 2);

    lossy.armed.store(true, Ordering::SeqCst);
    common::write_file(&fs, "b", b"b");
    let e = shipper.sync().await.unwrap_err();
    assert!(matches!(e, Error::Store(_)), "{e}");
    // The object for b is at position 3 all the same; then c commits.
    common::write_file(&fs, "c", b"c");
    let at = shipper.sync().await.unwrap();
    assert_eq!(at.position, 4, "{at:?}");
    assert_eq!(shipper.positions_written(), [1, 2, 3, 4]);
    let dest = dir.path().join("restored.db");
    restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(common::files(&Fs::open(&dest).unwrap()), common::files(&fs));
    shipper.stop().await.unwrap();
}
