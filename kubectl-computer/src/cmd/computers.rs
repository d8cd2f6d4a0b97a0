//! `create`, `delete`, `list`.

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;
use crate::format::time;
use crate::size::human;

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
    println!(
        "computer {} created (quota {}, {} inodes, egress {})",
        c.name,
        human(c.max_bytes),
        c.max_inodes,
        super::egress::describe(c.egress.as_ref())
    );
    Ok(())
}

pub async fn delete(client: &mut Client, name: String) -> Result<()> {
    client
        .delete_computer(pb::DeleteComputerRequest { name: name.clone() })
        .await?;
    println!("computer {name} deleted");
    Ok(())
}

pub async fn list(client: &mut Client) -> Result<()> {
    let list = client
        .list_computers(pb::ListComputersRequest {})
        .await?
        .into_inner();
    println!(
        "{:<30} {:>10} {:>10} {:>8} {:<8} CREATED",
        "NAME", "USED", "QUOTA", "INODES", "STATE"
    );
    for c in list.computers {
        println!(
            "{:<30} {:>10} {:>10} {:>8} {:<8} {}",
            c.name,
            human(c.used_bytes),
            human(c.max_bytes),
            c.used_inodes,
            if c.open { "open" } else { "idle" },
            time(c.created_unix_nanos)
        );
    }
    Ok(())
}
