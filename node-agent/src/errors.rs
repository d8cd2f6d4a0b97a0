//! Turning engine and registry errors into gRPC statuses.
//!
//! A filesystem failure becomes a status whose code follows the errno (see
//! [`code_for`]) and whose message starts with the errno name, then the
//! strerror(3) text, then the path the client gave:
//! `ENOENT: no such file or directory: src/x.txt`. The errno name is also in
//! the `errno` metadata key so clients need not parse messages.

use crate::backup::BackupError;
use agentcomputer_fs::Error as FsError;
use agentcomputer_proto::ERRNO_METADATA_KEY;
use nix::errno::Errno;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::registry::RegistryError;

/// The gRPC code for an errno.
pub fn code_for(errno: Errno) -> Code {
    match errno {
        Errno::ENOENT => Code::NotFound,
        Errno::EEXIST => Code::AlreadyExists,
        Errno::ENOSPC | Errno::EDQUOT | Errno::EFBIG => Code::ResourceExhausted,
        Errno::EACCES | Errno::EPERM | Errno::EROFS => Code::PermissionDenied,
        Errno::EINVAL | Errno::ENAMETOOLONG | Errno::ERANGE => Code::InvalidArgument,
        Errno::ENOTDIR
        | Errno::EISDIR
        | Errno::ENOTEMPTY
        | Errno::ELOOP
        | Errno::EBUSY
        | Errno::EXDEV
        | Errno::EMLINK => Code::FailedPrecondition,
        Errno::ENOSYS | Errno::ENOTSUP => Code::Unimplemented,
        Errno::ECANCELED => Code::Cancelled,
        Errno::ETIMEDOUT => Code::DeadlineExceeded,
        Errno::EAGAIN => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The symbolic name of `errno`, such as `"ENOENT"`.
pub fn error_name(errno: Errno) -> &'static str {
    FsError::from(errno).errno_name()
}

/// strerror(3) text with a lowercase first letter, as it reads after a colon.
fn describe(errno: Errno) -> String {
    let desc = errno.desc();
    let mut chars = desc.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A status for `errno` about `context` (usually the client's path):
/// `"<ENAME>: <description>: <context>"`, code from [`code_for`], errno name
/// in the metadata.
pub fn errno_status(errno: Errno, context: &str) -> Status {
    let name = error_name(errno);
    let mut message = format!("{name}: {}", describe(errno));
    if !context.is_empty() {
        message.push_str(": ");
        message.push_str(context);
    }
    with_errno(code_for(errno), message, name)
}

/// Like [`errno_status`] but with a free-form explanation instead of the
/// strerror text: `"EINVAL: <detail>"`.
pub fn errno_detail(errno: Errno, detail: impl std::fmt::Display) -> Status {
    let name = error_name(errno);
    with_errno(code_for(errno), format!("{name}: {detail}"), name)
}

/// `ABORTED` with errno `ECANCELED`: `"ECANCELED: <detail>"`, for a call
/// that stopped because what it worked on changed under it; retrying may
/// succeed.
pub fn aborted(detail: impl std::fmt::Display) -> Status {
    let name = error_name(Errno::ECANCELED);
    with_errno(Code::Aborted, format!("{name}: {detail}"), name)
}

/// [`aborted`]: computer `computer` was deleted while a call was writing
/// `what` into it. Its data went into the deleted database only, never into
/// a computer created since under the same name, so the call fails instead
/// of acknowledging it.
pub fn deleted_during(computer: &str, what: &str) -> Status {
    aborted(format_args!(
        "computer \"{computer}\" was deleted during the write of {what}; \
         nothing was written to a computer of that name"
    ))
}

/// A status of `code` with errno `name` in the metadata and `message` as
/// it is.
pub(crate) fn with_errno(code: Code, message: String, name: &'static str) -> Status {
    let mut md = MetadataMap::new();
    md.insert(ERRNO_METADATA_KEY, MetadataValue::from_static(name));
    Status::with_metadata(code, message, md)
}

/// A status for an engine error on the client's `path`. Storage failures
/// keep their SQLite detail for the operator.
pub fn fs_status(err: &FsError, path: &str) -> Status {
    match err {
        FsError::Errno { errno, .. } => errno_status(*errno, path),
        FsError::Storage(e) => {
            tracing::error!(error = %e, path, "storage failure");
            errno_detail(Errno::EIO, format_args!("storage error: {e}: {path}"))
        }
    }
}

/// A closure mapping an engine error on `path` to a status, for `map_err`.
pub fn on(path: &str) -> impl Fn(FsError) -> Status + '_ {
    move |e| fs_status(&e, path)
}

impl From<RegistryError> for Status {
    fn from(err: RegistryError) -> Status {
        let message = err.to_string();
        match err {
            RegistryError::InvalidName(_) => Status::invalid_argument(message),
            RegistryError::NotFound(_) | RegistryError::DeletedDuring { .. } => {
                Status::not_found(message)
            }
            RegistryError::AlreadyExists(_) => Status::already_exists(message),
            RegistryError::Io { .. } => {
                tracing::error!(%message, "registry I/O failure");
                Status::internal(message)
            }
            RegistryError::Engine { source, .. } => {
                tracing::error!(%message, "engine failed to open or create");
                errno_detail(source.errno(), message)
            }
            // umount(2) says EINVAL for a target that is not a mount point.
            RegistryError::NotMounted { .. } => errno_detail(Errno::EINVAL, message),
            RegistryError::NoBackup(_) => Status::failed_precondition(message),
            RegistryError::NoSnapshots(_) | RegistryError::RestoreMounted { .. } => {
                Status::failed_precondition(message)
            }
            RegistryError::InvalidSnapshotName(_) | RegistryError::BadImport { .. } => {
                Status::invalid_argument(message)
            }
            RegistryError::SnapshotNotFound { .. } | RegistryError::NoPositionAt { .. } => {
                Status::not_found(message)
            }
            RegistryError::SnapshotExists(_) => Status::already_exists(message),
            RegistryError::OutsideRetention { .. } => Status::out_of_range(message),
            RegistryError::SnapshotLimit { .. } => Status::resource_exhausted(message),
            RegistryError::RestoreBusy { .. } => Status::unavailable(message),
            // With an errno: the agent answered (it is not a broken connection).
            RegistryError::WriterElsewhere { .. } | RegistryError::WriterLease { .. } => {
                with_errno(Code::Unavailable, message, error_name(Errno::EAGAIN))
            }
            RegistryError::Backup { source, .. } => backup_status(&source, message),
            // Clients that find computers by their status (kubectl
            // computer, the Python library) look the node up again and
            // retry there; the node is in the metadata for them.
            RegistryError::Moved { node, .. } => {
                let mut status = with_errno(Code::Unavailable, message, error_name(Errno::EAGAIN));
                if let Ok(v) = node.parse() {
                    status
                        .metadata_mut()
                        .insert(agentcomputer_proto::MOVED_TO_METADATA_KEY, v);
                }
                status
            }
            RegistryError::Moving { .. } | RegistryError::HandOver { .. } => {
                with_errno(Code::Unavailable, message, error_name(Errno::EAGAIN))
            }
            RegistryError::MountNotOwned { .. } => errno_detail(Errno::EPERM, message),
            RegistryError::MountThroughLink { .. } => errno_detail(Errno::ELOOP, message),
            RegistryError::UnmountThroughLink { .. } => errno_detail(Errno::ELOOP, message),
            RegistryError::UnmountElsewhere { .. } => errno_detail(Errno::EBUSY, message),
            RegistryError::MountNotEmpty { .. } => errno_detail(Errno::ENOTEMPTY, message),
            RegistryError::MountNeedsRoot { .. } => errno_detail(Errno::EPERM, message),
            RegistryError::MountUnsafe { refused, .. } => {
                errno_detail(Errno::from_raw(refused.errno), message)
            }
            RegistryError::Mount { path, source } => match source.raw_os_error() {
                Some(raw) => errno_status(Errno::from_raw(raw), &path),
                None => errno_detail(Errno::EIO, message),
            },
        }
    }
}

/// A status for a failed backup call: UNAVAILABLE while the store cannot
/// be reached (worth retrying), DATA_LOSS for a damaged or missing object,
/// NOT_FOUND for a computer the store has no log of, FAILED_PRECONDITION
/// for a shipper that stopped (fenced by another writer), ALREADY_EXISTS
/// for a name the store's index gives another computer.
fn backup_status(err: &BackupError, message: String) -> Status {
    use agentcomputer_backup::Error as Log;
    match err {
        // With an errno, so clients tell it from a connection to the agent
        // that failed (which has none).
        BackupError::Store { .. } | BackupError::Log(Log::Store(_)) => {
            with_errno(Code::Unavailable, message, error_name(Errno::EIO))
        }
        BackupError::NameTaken { .. } => Status::already_exists(message),
        BackupError::Unreadable { .. }
        | BackupError::Log(Log::Corrupt { .. } | Log::Missing { .. } | Log::Check(_)) => {
            Status::data_loss(message)
        }
        BackupError::Log(Log::NoBackup { .. }) => Status::not_found(message),
        BackupError::Log(Log::Fenced { .. } | Log::Stopped(_)) => {
            Status::failed_precondition(message)
        }
        BackupError::Log(_) => {
            tracing::error!(%message, "backup failure");
            Status::internal(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_starts_with_errno_name_and_carries_metadata() {
        let s = fs_status(&FsError::from(Errno::ENOENT), "src/x.txt");
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "ENOENT: no such file or directory: src/x.txt");
        assert_eq!(s.metadata().get(ERRNO_METADATA_KEY).unwrap(), "ENOENT");
    }

    #[test]
    fn codes_follow_errno() {
        let cases = [
            (Errno::EEXIST, Code::AlreadyExists),
            (Errno::ENOSPC, Code::ResourceExhausted),
            (Errno::EACCES, Code::PermissionDenied),
            (Errno::EPERM, Code::PermissionDenied),
            (Errno::EINVAL, Code::InvalidArgument),
            (Errno::ENAMETOOLONG, Code::InvalidArgument),
            (Errno::ENOTDIR, Code::FailedPrecondition),
            (Errno::EISDIR, Code::FailedPrecondition),
            (Errno::ENOTEMPTY, Code::FailedPrecondition),
            (Errno::ELOOP, Code::FailedPrecondition),
            (Errno::EIO, Code::Internal),
        ];
        for (errno, code) in cases {
            let s = errno_status(errno, "p");
            assert_eq!(s.code(), code, "{errno:?}");
            assert!(
                s.message().starts_with(error_name(errno)),
                "{}",
                s.message()
            );
        }
    }

    #[test]
    fn registry_errors() {
        let s = Status::from(RegistryError::NotFound("x".into()));
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "computer \"x\" not found");
        let s = Status::from(RegistryError::AlreadyExists("demo".into()));
        assert_eq!(s.code(), Code::AlreadyExists);
        assert_eq!(s.message(), "computer \"demo\" already exists");
        assert_eq!(
            Status::from(RegistryError::InvalidName("Bad".into())).code(),
            Code::InvalidArgument
        );
        let s = Status::from(RegistryError::Mount {
            path: "/tmp/m".into(),
            source: std::io::Error::from_raw_os_error(Errno::EBUSY as i32),
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "EBUSY: device or resource busy: /tmp/m");
    }
}
