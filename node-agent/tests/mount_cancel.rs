//! A host mount whose call is dropped midway (a client that hangs up, a
//! deadline) ends consistent: either mounted and recorded, or neither. The
//! registry records a mount's intent in `mounts.json` before `mount(2)`
//! (so that a killed agent leaves a trace of it); a call dropped between
//! that record and keeping the mount must not leave the intent behind
//! while the mount itself is undone.

use std::path::Path;
use std::time::Duration;

use agentcomputer_egress::EgressConfig;
use agentcomputer_fs::Limits;
use agentcomputer_node_agent::registry::Registry;
use agentcomputer_node_agent::registry::mount_records::load_records;

fn mounted_at(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    table.lines().any(|l| l.split(' ').nth(4) == Some(dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_mount_call_leaves_a_recorded_mount_or_nothing() {
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: host mounts need /dev/fuse and root");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let registry = Registry::new(data.path(), Duration::from_secs(300)).unwrap();
    registry
        .create("demo", Limits::default(), EgressConfig::default())
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    // Deadlines from nothing to the time a mount takes, so that some land
    // between the recorded intent and the kept mount.
    for (i, micros) in [
        0u64, 50, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000,
    ]
    .into_iter()
    .enumerate()
    {
        let dir = data.path().join(format!("m{i}"));
        std::fs::create_dir(&dir).unwrap();
        let call = registry.mount("demo", &dir, false);
        let finished = tokio::time::timeout(Duration::from_micros(micros), call)
            .await
            .is_ok();
        // Whatever runs on after the drop has had time to end.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let recorded = load_records(data.path())
            .unwrap()
            .iter()
            .any(|r| r.path == dir);
        let known = registry.mounts().iter().any(|r| r.path == dir);
        let mounted = mounted_at(&dir);
        outcomes.push((micros, finished, recorded, known, mounted));
        assert_eq!(
            (recorded, known),
            (mounted, mounted),
            "after a mount call dropped at {micros} µs: recorded {recorded}, known to the \
             registry {known}, mounted {mounted}"
        );
        if mounted {
            registry.unmount("demo", &dir).await.unwrap();
        }
    }
    eprintln!("(deadline µs, finished, recorded, known, mounted): {outcomes:?}");
    registry.close_all().await;
}
