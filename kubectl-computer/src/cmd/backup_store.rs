//! `sync` and `verify-backup`: the computer's continuous backup in the node
//! agent's object store (docs/backup.md).

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::size::human;

/// Returns once every call answered on `computer` before it is in the
/// backup store; prints the log's position. Errors: the API's
/// (FAILED_PRECONDITION when the agent has no backup store or the
/// computer's shipper stopped, UNAVAILABLE while the store is unreachable).
pub async fn sync(client: &mut Client, computer: String) -> Result<()> {
    let r = client
        .sync(pb::SyncRequest {
            computer: computer.clone(),
        })
        .await?
        .into_inner();
    if r.position == 0 {
        outln!("{computer}: nothing to ship (not open; shipped whole when it closed)");
    } else {
        outln!(
            "{computer}: in the backup store up to position {}",
            r.position
        );
    }
    Ok(())
}

/// Restores `computer`'s latest backup on its node into a scratch file and
/// checks it; prints what was checked. Errors: the API's (DATA_LOSS naming
/// a damaged or missing object, or a failed check).
pub async fn verify_backup(client: &mut Client, computer: String) -> Result<()> {
    let r = client
        .verify_backup(pb::VerifyBackupRequest {
            computer: computer.clone(),
        })
        .await?
        .into_inner();
    outln!(
        "{computer}: backup verified: snapshot at position {}, positions up to {}, {} restored and checked in {} ms",
        r.snapshot_position,
        r.position,
        human(r.database_bytes),
        r.duration_ms
    );
    Ok(())
}
