//! The Share call: checks the file and has the [`Sharer`] sign a link.

use agentcomputer_fs::FileKind;
use agentcomputer_proto::v1 as pb;
use nix::errno::Errno;
use tonic::Status;

use crate::blocking::blocking;
use crate::errors::{errno_status, on};
use crate::paths::ApiPath;
use crate::registry::Registry;
use crate::share::{self, ShareError, Sharer};

/// Makes a link to `req.path` (a regular file, a final symlink followed)
/// of `req.computer` (already the registry key). Errors: path errors,
/// `EISDIR` for a directory, `EINVAL` for other non-regular files and the
/// root, `INVALID_ARGUMENT` for an expiry past [`share::MAX_EXPIRY`],
/// `FAILED_PRECONDITION` when `sharer` is `None` or the computer has no
/// credential to tie links to.
pub async fn share(
    registry: &Registry,
    sharer: Option<&Sharer>,
    req: pb::ShareRequest,
) -> Result<pb::ShareResponse, Status> {
    let Some(sharer) = sharer else {
        return Err(Status::failed_precondition(
            "this node agent serves no share links (locally: --share-listen; in a cluster: the chart's nodeAgent.share.enabled and nodeAgent.share.url; docs/share.md)",
        ));
    };
    let path = ApiPath::parse(&req.path)?;
    let expires = share::expiry(req.expires_in_seconds, share::now_unix_seconds())
        .map_err(Status::invalid_argument)?;
    let lease = registry.acquire(&req.computer).await?;
    let checked = path.clone();
    blocking(move || {
        let (attr, _handle) = lease
            .fs()
            .open_path(agentcomputer_fs::ROOT_INO, &checked.engine_path(), true)
            .map_err(on(checked.shown()))?;
        match attr.kind {
            FileKind::RegularFile if !checked.dir_only() => Ok(()),
            FileKind::Directory => Err(errno_status(Errno::EISDIR, checked.shown())),
            FileKind::RegularFile => Err(errno_status(Errno::ENOTDIR, checked.shown())),
            _ => Err(errno_status(Errno::EINVAL, checked.shown())),
        }
    })
    .await?;
    let relative = path.relative();
    let url = sharer
        .link(&req.computer, &relative, expires)
        .await
        .map_err(|e| match e {
            ShareError::Registry(e) => Status::from(e),
            e @ ShareError::Unbound(_) => Status::failed_precondition(e.to_string()),
        })?;
    Ok(pb::ShareResponse {
        url: url.to_string(),
        expires_unix_seconds: expires,
        path: relative,
    })
}
