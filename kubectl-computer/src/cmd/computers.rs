//! `create`, `delete`, `list`.

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::format::time;
use crate::size::human;

/// The STATE of every computer a local agent lists: the cluster phase of a
/// usable computer.
const READY: &str = agentcomputer_crds::ComputerPhase::Ready.as_str();

pub async fn create(
    client: &mut Client,
    name: String,
    quota: Option<u64>,
    max_inodes: Option<u64>,
    egress: pb::Egress,
) -> Result<()> {
    let c = client
        .create_computer(pb::CreateComputerRequest {
            name,
            max_bytes: quota.unwrap_or(0),
            max_inodes: max_inodes.unwrap_or(0),
            egress: Some(egress),
        })
        .await?
        .into_inner();
    outln!(
        "{}",
        created_line(&c.name, c.max_bytes, c.max_inodes, c.egress.as_ref())
    );
    Ok(())
}

/// What `create` prints in every mode:
/// `computer NAME created (quota 10 GiB, 2621440 inodes, egress deny-all)`.
pub fn created_line(name: &str, quota: u64, inodes: u64, egress: Option<&pb::Egress>) -> String {
    format!(
        "computer {name} created (quota {}, {inodes} inodes, egress {})",
        human(quota),
        super::egress::describe(egress)
    )
}

/// One line of `list`, whatever the mode.
pub struct Row {
    pub name: String,
    /// Bytes used; `None` when not reported yet.
    pub used_bytes: Option<u64>,
    /// The quota as text (`10 GiB`).
    pub quota: String,
    /// Inodes used; `None` when not reported yet.
    pub used_inodes: Option<u64>,
    /// Bytes the computer's database takes on its node's disk; `None`
    /// when not reported.
    pub disk_bytes: Option<u64>,
    /// The phase in a cluster (`Pending`, `Ready`, `Unavailable`,
    /// `Terminating`); always `Ready` for a local agent.
    pub state: String,
    /// In a cluster, the age of the latest backup object (`status.backup`,
    /// `-` before one); `None` (no column) for a local agent.
    pub backup: Option<String>,
    /// RFC 3339 creation time.
    pub created: String,
}

/// Prints `list`'s table: a header, then one line per row. The BACKUP
/// column is there when the rows have it (a cluster).
pub fn print_table(rows: &[Row]) {
    let backup = rows.iter().any(|r| r.backup.is_some());
    let column = |v: &str| {
        if backup {
            format!("{v:<8} ")
        } else {
            String::new()
        }
    };
    outln!(
        "{:<30} {:>10} {:>10} {:>10} {:>8} {:<8} {}CREATED",
        "NAME",
        "USED",
        "QUOTA",
        "DISK",
        "INODES",
        "STATE",
        column("BACKUP")
    );
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for r in rows {
        outln!(
            "{:<30} {:>10} {:>10} {:>10} {:>8} {:<8} {}{}",
            r.name,
            or_dash(r.used_bytes.map(human)),
            r.quota,
            or_dash(r.disk_bytes.map(human)),
            or_dash(r.used_inodes.map(|n| n.to_string())),
            r.state,
            column(r.backup.as_deref().unwrap_or("-")),
            r.created
        );
    }
}

/// An age as kubectl prints one: `42s`, `5m`, `3h`, `2d`.
pub fn age(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..7_200 => format!("{}m", s / 60),
        7_200..172_800 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

pub async fn delete(client: &mut Client, name: String) -> Result<()> {
    client
        .delete_computer(pb::DeleteComputerRequest { name: name.clone() })
        .await?;
    outln!("computer {name} deleted");
    Ok(())
}

pub async fn list(client: &mut Client) -> Result<()> {
    let list = client
        .list_computers(pb::ListComputersRequest {})
        .await?
        .into_inner();
    let rows: Vec<Row> = list
        .computers
        .into_iter()
        .map(|c| Row {
            used_bytes: Some(c.used_bytes),
            quota: human(c.max_bytes),
            used_inodes: Some(c.used_inodes),
            disk_bytes: Some(c.disk_bytes),
            // The cluster's phase vocabulary: a computer a local agent
            // lists is usable at once, whether its engine is open or
            // closed while idle (it opens on first use).
            state: READY.into(),
            backup: None,
            created: time(c.created_unix_nanos),
            name: c.name,
        })
        .collect();
    print_table(&rows);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ages_as_kubectl_prints_them() {
        assert_eq!(age(Duration::from_millis(300)), "0s");
        assert_eq!(age(Duration::from_secs(119)), "119s");
        assert_eq!(age(Duration::from_secs(600)), "10m");
        assert_eq!(age(Duration::from_secs(3 * 3600)), "3h");
        assert_eq!(age(Duration::from_secs(3 * 86_400)), "3d");
    }
}
