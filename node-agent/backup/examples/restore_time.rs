//! Time to the first answered call of a computer restored from its backup:
//! a database of each size in `RESTORE_SIZES_MIB` (default `10,1024`) made
//! of 1 MiB files through the engine, shipped (its snapshot), then restored
//! into a new file, checked (the restore's own checks), opened by the
//! engine and asked one `stat`; prints each phase and the total.
//!
//! Run: cargo run --release -p agentcomputer-backup --example restore_time
//! (needs scripts/install-object-store.sh). Recorded in docs/benchmarks.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use agentcomputer_backup::{Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits, ROOT_INO};
use object_store::path::Path;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(server) = common::ObjectServer::start() else {
        std::process::exit(2)
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let sizes: Vec<usize> = std::env::var("RESTORE_SIZES_MIB")
        .unwrap_or_else(|_| "10,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for mib in sizes {
        let db = dir.path().join(format!("src-{mib}.db"));
        let fs = Fs::create(
            &db,
            Limits {
                max_bytes: (mib as u64 + 64) << 20,
                ..Limits::default()
            },
        )
        .unwrap();
        fs.leave_checkpoints_to_backup().unwrap();
        let prefix = Path::from(format!("restore/{mib}"));
        let shipper = Shipper::start(&db, store.clone(), prefix.clone(), Options::default())
            .await
            .unwrap();
        let t = Instant::now();
        for i in 0..mib {
            common::write_file(&fs, &format!("f{i}"), &common::content(i, 1 << 20));
        }
        shipper.sync().await.unwrap();
        let shipped = t.elapsed();
        shipper.stop().await.unwrap();
        drop(fs);

        let dest = dir.path().join(format!("restored-{mib}.db"));
        let t = Instant::now();
        let r = restore(&store, &prefix, &dest).await.unwrap();
        let restored = t.elapsed();
        let t = Instant::now();
        let fs = Fs::open(&dest).unwrap();
        let attr = fs.lookup(ROOT_INO, b"f0").unwrap();
        let answered = t.elapsed();
        assert_eq!(attr.size, 1 << 20);
        let bytes = u64::from(r.db_pages) * u64::from(r.page_size);
        println!(
            "{mib} MiB of files ({:.0} MiB database): written and shipped in {:.2} s; restore and checks {:.2} s, open and first stat {:.3} s: first answer {:.2} s after the restore began",
            bytes as f64 / (1 << 20) as f64,
            shipped.as_secs_f64(),
            restored.as_secs_f64(),
            answered.as_secs_f64(),
            (restored + answered).as_secs_f64()
        );
    }
}
