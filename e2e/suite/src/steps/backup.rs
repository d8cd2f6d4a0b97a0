//! Continuous backup of a computer in the cluster to the object store
//! (docs/backup.md), as a user checks it: `kubectl computer sync` and
//! `verify-backup`, and the Lease that makes the computer's node agent its
//! only writer.

use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;

use super::*;
use crate::tools::{eventually, text};

/// The computer this step makes.
const NAME: &str = "saved";

/// With the release's `backup.url` set (e2e/run.sh sets it to the
/// cluster's object store): a computer's files written through `kubectl
/// computer exec` are in the store once `sync` returns, at a position that
/// grows with the next write; `verify-backup` restores the latest backup on
/// the node and checks it; while the computer is open, the Lease
/// `ac-<uid>` in the agents' namespace names the computer's node as its
/// holder. Skipped (and says so) when the release has no backup.url.
pub(super) fn backup(cx: &mut Context) -> Result<String> {
    let values: Value = serde_json::from_str(
        &cx.tools
            .helm(&["get", "values", "ac", "-n", SYSTEM_NS, "-o", "json"])?
            .ok("helm get values")?,
    )
    .context("helm get values printed no JSON")?;
    let url = text(&values, "/backup/url").to_string();
    if url.is_empty() {
        return Ok(
            "skipped: the release has no backup.url (E2E_HELM_VALUES names no backup values)"
                .into(),
        );
    }
    cx.apply_computer(NAME, serde_json::json!({"storage": {"size": "64Mi"}}))?;
    cx.wait_ready(NAME, 120)?;
    let c = cx.computer(NAME)?;
    let uid = text(&c, "/metadata/uid").to_string();
    let node = text(&c, "/status/node").to_string();
    ensure!(
        !uid.is_empty() && !node.is_empty(),
        "computer {NAME} has uid {uid:?} and node {node:?}"
    );

    let written = cx.exec(
        NAME,
        "shell",
        "mkdir -p notes && seq 1 2000 > notes/lines.txt && head -c 300000 /dev/zero > zeros.bin && sha256sum notes/lines.txt zeros.bin",
    )?;
    ensure!(
        written.lines().count() == 2,
        "sha256sum printed {written:?}"
    );

    // The computer is open now: its agent holds its Lease.
    let lease_name = format!("ac-{uid}");
    let lease = eventually(60, &format!("Lease {lease_name} held by {node}"), || {
        let lease = cx
            .tools
            .kubectl_json(&["-n", SYSTEM_NS, "get", "lease", &lease_name])?;
        let holder = text(&lease, "/spec/holderIdentity");
        ensure!(holder == node, "held by {holder:?}, not by {node:?}");
        Ok(Some(lease))
    })?;
    for (label, want) in [
        ("app.kubernetes.io~1managed-by", "agentcomputer-node-agent"),
        ("agentcomputer.dev~1computer-uid", uid.as_str()),
    ] {
        let got = text(&lease, &format!("/metadata/labels/{label}"));
        ensure!(
            got == want,
            "Lease {lease_name}: label {} is {got:?}, not {want:?}",
            label.replace("~1", "/")
        );
    }

    let start = Instant::now();
    let first = sync(cx)?;
    cx.time("kubectl computer sync after a write", start.elapsed());
    ensure!(first > 0, "sync reported position 0 for an open computer");
    cx.exec(NAME, "shell", "echo more >> notes/lines.txt")?;
    let second = sync(cx)?;
    ensure!(
        second > first,
        "a write after position {first} was synced at position {second}"
    );

    let start = Instant::now();
    let verified = cx
        .tools
        .cli(&["-n", NS, "verify-backup", NAME], None)?
        .ok(&format!("kubectl computer verify-backup {NAME}"))?;
    cx.time("kubectl computer verify-backup", start.elapsed());
    let upto: u64 = number_after(&verified, "positions up to ")
        .with_context(|| format!("verify-backup printed no \"positions up to N\": {verified:?}"))?;
    ensure!(
        upto >= second,
        "verify-backup restored up to position {upto}, sync had reached {second}: {verified:?}"
    );

    // Still its node's after all that.
    let lease = cx
        .tools
        .kubectl_json(&["-n", SYSTEM_NS, "get", "lease", &lease_name])?;
    ensure!(
        text(&lease, "/spec/holderIdentity") == node,
        "Lease {lease_name} moved to {:?} while {node} served the computer",
        text(&lease, "/spec/holderIdentity")
    );

    cx.tools.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "agentcomputer",
        NAME,
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(format!(
        "{url}: positions {first} then {second}, verified up to {upto}"
    ))
}

/// `kubectl computer sync NAME`, requiring exit 0: the position it printed.
fn sync(cx: &Context) -> Result<u64> {
    let out = cx
        .tools
        .cli(&["-n", NS, "sync", NAME], None)?
        .ok(&format!("kubectl computer sync {NAME}"))?;
    number_after(&out, "in the backup store up to position ")
        .with_context(|| format!("sync printed no position: {out:?}"))
}

/// The decimal number right after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::number_after;

    #[test]
    fn reads_the_cli_positions() {
        assert_eq!(
            number_after(
                "saved: in the backup store up to position 12\n",
                "in the backup store up to position "
            ),
            Some(12)
        );
        assert_eq!(
            number_after(
                "saved: backup verified: snapshot at position 1, positions up to 7, 96 KiB restored and checked in 3 ms\n",
                "positions up to "
            ),
            Some(7)
        );
        assert_eq!(
            number_after(
                "saved: nothing to ship (not open; shipped whole when it closed)\n",
                "in the backup store up to position "
            ),
            None
        );
    }
}
