//! The object store the backup runs against must make conditional writes
//! atomic: of N concurrent `PutObject` calls with `If-None-Match: *` on one
//! key exactly one succeeds, and of N concurrent `If-Match: <etag>` calls
//! naming the current ETag exactly one succeeds. The backup's fencing rests
//! on this (docs/backup.md); these tests hold the server to it.

mod common;

use std::sync::Arc;

use futures::future::join_all;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

const ROUNDS: usize = 40;
const WRITERS: usize = 8;

fn payload(round: usize, writer: usize) -> PutPayload {
    PutPayload::from(format!("round {round} writer {writer}").into_bytes())
}

async fn body(store: &Arc<dyn ObjectStore>, key: &Path) -> String {
    let bytes = store.get(key).await.unwrap().bytes().await.unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_of_one_key_have_one_winner() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    for round in 0..ROUNDS {
        let key = Path::from(format!("race/create/{round}"));
        let results = join_all((0..WRITERS).map(|w| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let opts = PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                };
                store.put_opts(&key, payload(round, w), opts).await
            })
        }))
        .await;
        let mut winners = Vec::new();
        for (w, r) in results.into_iter().enumerate() {
            match r.unwrap() {
                Ok(_) => winners.push(w),
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => panic!("round {round} writer {w}: unexpected error {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        assert_eq!(
            body(&store, &key).await,
            format!("round {round} writer {}", winners[0])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_if_match_updates_have_one_winner() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let key = Path::from("race/update/head");
    let mut current = store
        .put(&key, PutPayload::from_static(b"initial"))
        .await
        .unwrap();
    for round in 0..ROUNDS {
        let version = UpdateVersion {
            e_tag: current.e_tag.clone(),
            version: None,
        };
        let results = join_all((0..WRITERS).map(|w| {
            let store = store.clone();
            let key = key.clone();
            let version = version.clone();
            tokio::spawn(async move {
                let opts = PutOptions {
                    mode: PutMode::Update(version),
                    ..Default::default()
                };
                store.put_opts(&key, payload(round, w), opts).await
            })
        }))
        .await;
        let mut winners = Vec::new();
        for (w, r) in results.into_iter().enumerate() {
            match r.unwrap() {
                Ok(res) => winners.push((w, res)),
                Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => panic!("round {round} writer {w}: unexpected error {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: winners {:?}",
            winners.iter().map(|(w, _)| w).collect::<Vec<_>>()
        );
        let (w, res) = winners.pop().unwrap();
        assert_eq!(
            body(&store, &key).await,
            format!("round {round} writer {w}")
        );
        assert_ne!(
            res.e_tag, current.e_tag,
            "round {round}: the ETag did not change"
        );
        current = res;
    }
    // A stale ETag is refused and changes nothing.
    let stale = UpdateVersion {
        e_tag: Some("\"0123456789abcdef0123456789abcdef\"".into()),
        version: None,
    };
    let r = store
        .put_opts(
            &key,
            PutPayload::from_static(b"stale"),
            PutOptions {
                mode: PutMode::Update(stale),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(r, Err(object_store::Error::Precondition { .. })),
        "{r:?}"
    );
    let last = body(&store, &key).await;
    assert!(
        last.starts_with(&format!("round {} writer", ROUNDS - 1)),
        "{last}"
    );
}
