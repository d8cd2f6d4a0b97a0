//! `share`: a link that downloads one file without a credential.

use std::time::{Duration, UNIX_EPOCH};

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::Result;

/// Asks the agent for a share link to `path` of `computer` that works for
/// `expires` (rounded up to whole seconds; the agent allows 1 s to 7 days),
/// prints the URL on stdout and when it expires on stderr. Errors: the
/// agent's (path errors, a directory, an expiry out of bounds, an agent
/// that serves no links).
pub async fn share(
    client: &mut Client,
    computer: String,
    path: String,
    expires: Duration,
) -> Result<()> {
    let seconds = expires.as_secs() + u64::from(expires.subsec_nanos() > 0);
    let link = client
        .share(pb::ShareRequest {
            computer,
            path,
            expires_in_seconds: seconds.max(1),
        })
        .await?
        .into_inner();
    outln!("{}", link.url);
    if let Ok(secs) = u64::try_from(link.expires_unix_seconds) {
        let at = UNIX_EPOCH + Duration::from_secs(secs);
        errln!(
            "{} expires {}",
            link.path,
            humantime::format_rfc3339_seconds(at)
        );
    }
    Ok(())
}
