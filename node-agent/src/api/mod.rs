//! The `agentcomputer.v1.AgentComputer` gRPC service.
//!
//! This module only routes calls; each group of calls lives in its own
//! module. Filesystem calls take a [`crate::registry::Lease`] on the
//! computer for their whole duration and run engine work on the blocking
//! thread pool.

mod archive;
mod backup;
mod computers;
pub(crate) mod container_runtime;
mod convert;
mod egress;
mod exec;
mod fs;
mod git_transport;
mod mount;
mod observe;
mod publish;
mod read;
mod search;
mod share;
mod snapshots;
pub mod streams;
mod walk;
mod write;

use agentcomputer_fs::Fs;
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_server::{AgentComputer, AgentComputerServer};
use tonic::{Request, Response, Status, Streaming};

use std::sync::Arc;

use crate::admission::{Admission, AdmissionConfig};
use crate::api::container_runtime::{ContainerRuntime, NoContainers};
use crate::auth::{Authorizer, Caller};
use crate::blocking::blocking;
use crate::registry::Registry;
use crate::share::Sharer;

pub use exec::{
    DEFAULT_EXEC_MEMORY, DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT, MAX_RESULT_BYTES, MAX_TIMEOUT,
};
pub use observe::{ExecOutcome, Observer, Unobserved};

/// The service implementation over a [`Registry`]. Every call is checked
/// by its [`Authorizer`] before it touches a computer; every exec is
/// admitted by its [`Admission`].
#[derive(Clone)]
pub struct Service {
    registry: Registry,
    auth: Arc<dyn Authorizer>,
    observer: Arc<dyn Observer>,
    containers: Arc<dyn ContainerRuntime>,
    streams: streams::StreamGate,
    admission: Admission,
    sharer: Option<Sharer>,
}

impl Service {
    /// A service serving the computers of `registry` to the callers `auth`
    /// admits, under admission limits fitting this machine
    /// ([`AdmissionConfig::for_node`]). The container runtime refuses runs
    /// until one is set with [`Service::with_containers`].
    pub fn new(registry: Registry, auth: Arc<dyn Authorizer>) -> Service {
        Service {
            registry,
            auth,
            observer: Arc::new(Unobserved),
            containers: Arc::new(NoContainers(agentcomputer_container::Unavailable(
                "this node agent was started without a container runtime".into(),
            ))),
            streams: streams::StreamGate::new(streams::StreamLimits::default()),
            admission: Admission::new(AdmissionConfig::for_node()),
            sharer: None,
        }
    }

    /// The same service reporting its calls to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Service {
        self.observer = observer;
        self
    }

    /// The same service running container execs on `containers` (the
    /// local sandbox, or the sandbox pods of a cluster).
    pub fn with_containers(mut self, containers: Arc<dyn ContainerRuntime>) -> Service {
        self.containers = containers;
        self
    }

    /// The same service with other bounds on its Read and Write streams.
    pub fn with_stream_limits(mut self, limits: streams::StreamLimits) -> Service {
        self.streams = streams::StreamGate::new(limits);
        self
    }

    /// The same service admitting execs with `admission` (whose metrics
    /// the caller may register).
    pub fn with_admission(self, admission: Admission) -> Service {
        Service { admission, ..self }
    }

    /// The same service making share links with `sharer` (without one,
    /// `Share` is `FAILED_PRECONDITION`).
    pub fn with_sharer(self, sharer: Sharer) -> Service {
        Service {
            sharer: Some(sharer),
            ..self
        }
    }

    /// The credential of `req`, to be checked by the service's rule.
    fn caller<T>(&self, req: &Request<T>) -> Caller {
        Caller::new(req.metadata(), self.auth.clone())
    }

    /// Reports the outcome of a credential check to the observer.
    fn observed(&self, checked: Result<String, Status>) -> Result<String, Status> {
        match &checked {
            Ok(key) => self.observer.used(key),
            Err(status) => self.observer.refused(status.code()),
        }
        checked
    }

    /// Checks the credential of `req` for the computer it names and
    /// returns the message with that name replaced by the registry key.
    fn authorized<T: NamesComputer>(&self, req: Request<T>) -> Result<T, Status> {
        let caller = self.caller(&req);
        let mut msg = req.into_inner();
        let key = self.observed(caller.computer(msg.computer_field()))?;
        *msg.computer_field() = key;
        Ok(msg)
    }

    /// [`Service::authorized`] for `Mount` and `Unmount`, unless the rule
    /// refuses them outright ([`Authorizer::host_mounts`]): then nothing is
    /// looked at, not even the computer's name.
    fn host_mount<T: NamesComputer>(&self, req: Request<T>) -> Result<T, Status> {
        if let Err(status) = self.caller(&req).host_mounts() {
            self.observer.refused(status.code());
            return Err(status);
        }
        self.authorized(req)
    }

    /// Checks that the caller of `req` may manage computers.
    fn manager<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let checked = self.caller(req).manage();
        if let Err(status) = &checked {
            self.observer.refused(status.code());
        }
        checked
    }

    /// The tonic server for this service, accepting and sending messages of
    /// up to [`agentcomputer_proto::MAX_MESSAGE_BYTES`].
    pub fn into_server(self) -> AgentComputerServer<Service> {
        AgentComputerServer::new(self)
            .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
    }

    /// Runs `f` on the engine of `computer` on the blocking pool.
    async fn with_fs<T, F>(&self, computer: &str, f: F) -> Result<Response<T>, Status>
    where
        F: FnOnce(&Fs) -> Result<T, Status> + Send + 'static,
        T: Send + 'static,
    {
        let lease = self.registry.acquire(computer).await?;
        blocking(move || f(lease.fs())).await.map(Response::new)
    }
}

/// A request message that names one computer.
trait NamesComputer {
    fn computer_field(&mut self) -> &mut String;
}

macro_rules! names_computer {
    ($field:ident: $($t:ty),+) => {
        $(impl NamesComputer for $t {
            fn computer_field(&mut self) -> &mut String {
                &mut self.$field
            }
        })+
    };
}

names_computer!(name: pb::GetComputerRequest);
names_computer!(computer: pb::MountRequest, pb::UnmountRequest, pb::StatRequest,
    pb::ReadRequest, pb::MkdirRequest, pb::ReadDirRequest, pb::RemoveRequest,
    pb::RenameRequest, pb::SymlinkRequest, pb::ReadlinkRequest, pb::ChmodRequest,
    pb::GlobRequest, pb::GrepRequest, pb::StatfsRequest, pb::ExecRequest,
    pb::BackupRequest, pb::ShareRequest, pb::SyncRequest, pb::VerifyBackupRequest,
    pb::ExportRequest);
names_computer!(computer: pb::SnapshotRequest, pb::ListSnapshotsRequest,
    pb::DeleteSnapshotRequest, pb::RestoreComputerRequest, pb::PublishRequest);

#[tonic::async_trait]
impl AgentComputer for Service {
    async fn create_computer(
        &self,
        req: Request<pb::CreateComputerRequest>,
    ) -> Result<Response<pb::Computer>, Status> {
        self.manager(&req)?;
        computers::create(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn delete_computer(
        &self,
        req: Request<pb::DeleteComputerRequest>,
    ) -> Result<Response<pb::DeleteComputerResponse>, Status> {
        self.manager(&req)?;
        computers::delete(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_computer(
        &self,
        req: Request<pb::GetComputerRequest>,
    ) -> Result<Response<pb::Computer>, Status> {
        let req = self.authorized(req)?;
        computers::get(&self.registry, req).await.map(Response::new)
    }

    async fn list_computers(
        &self,
        req: Request<pb::ListComputersRequest>,
    ) -> Result<Response<pb::ListComputersResponse>, Status> {
        self.manager(&req)?;
        computers::list(&self.registry).await.map(Response::new)
    }

    async fn mount(
        &self,
        req: Request<pb::MountRequest>,
    ) -> Result<Response<pb::MountResponse>, Status> {
        let req = self.host_mount(req)?;
        mount::mount(&self.registry, req).await.map(Response::new)
    }

    async fn unmount(
        &self,
        req: Request<pb::UnmountRequest>,
    ) -> Result<Response<pb::UnmountResponse>, Status> {
        let req = self.host_mount(req)?;
        mount::unmount(&self.registry, req).await.map(Response::new)
    }

    async fn stat(&self, req: Request<pb::StatRequest>) -> Result<Response<pb::FileInfo>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| fs::stat(fs, &req))
            .await
    }

    type ReadStream = read::ReadStream;

    async fn read(
        &self,
        req: Request<pb::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let client = streams::client_of(&req);
        let req = self.authorized(req)?;
        let permit = self.streams.admit(&client, &req.computer)?;
        let lease = self.registry.acquire(&req.computer).await?;
        let idle = self.streams.limits().idle_timeout;
        read::start(lease, req, permit, idle)
            .await
            .map(Response::new)
    }

    type BackupStream = backup::BackupStream;

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        let client = streams::client_of(&req);
        let req = self.authorized(req)?;
        let permit = self.streams.admit(&client, &req.computer)?;
        let lease = self.registry.acquire(&req.computer).await?;
        let idle = self.streams.limits().idle_timeout;
        backup::start(lease, permit, idle).await.map(Response::new)
    }

    async fn sync(
        &self,
        req: Request<pb::SyncRequest>,
    ) -> Result<Response<pb::SyncResponse>, Status> {
        let req = self.authorized(req)?;
        let synced = self.registry.sync(&req.computer).await?;
        Ok(Response::new(pb::SyncResponse {
            position: synced.position,
        }))
    }

    async fn verify_backup(
        &self,
        req: Request<pb::VerifyBackupRequest>,
    ) -> Result<Response<pb::VerifyBackupResponse>, Status> {
        let req = self.authorized(req)?;
        let v = self.registry.verify_backup(&req.computer).await?;
        Ok(Response::new(pb::VerifyBackupResponse {
            snapshot_position: v.restored.snapshot,
            position: v.restored.position,
            database_bytes: v.bytes,
            duration_ms: v.elapsed.as_millis() as u64,
        }))
    }

    async fn write(
        &self,
        req: Request<Streaming<pb::WriteRequest>>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let caller = self.caller(&req);
        let client = streams::client_of(&req);
        let check = |requested: &str| self.observed(caller.computer(requested));
        write::write(
            &self.registry,
            check,
            &self.streams,
            &client,
            req.into_inner(),
        )
        .await
        .map(Response::new)
    }

    async fn mkdir(
        &self,
        req: Request<pb::MkdirRequest>,
    ) -> Result<Response<pb::FileInfo>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| fs::mkdir(fs, &req))
            .await
    }

    async fn read_dir(
        &self,
        req: Request<pb::ReadDirRequest>,
    ) -> Result<Response<pb::ReadDirResponse>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| fs::readdir(fs, &req))
            .await
    }

    async fn remove(
        &self,
        req: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::RemoveResponse>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| {
            fs::remove(fs, &req).map(|()| pb::RemoveResponse {})
        })
        .await
    }

    async fn rename(
        &self,
        req: Request<pb::RenameRequest>,
    ) -> Result<Response<pb::RenameResponse>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| {
            fs::rename(fs, &req).map(|()| pb::RenameResponse {})
        })
        .await
    }

    async fn symlink(
        &self,
        req: Request<pb::SymlinkRequest>,
    ) -> Result<Response<pb::FileInfo>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| fs::symlink(fs, &req))
            .await
    }

    async fn readlink(
        &self,
        req: Request<pb::ReadlinkRequest>,
    ) -> Result<Response<pb::ReadlinkResponse>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| fs::readlink(fs, &req))
            .await
    }

    async fn chmod(
        &self,
        req: Request<pb::ChmodRequest>,
    ) -> Result<Response<pb::FileInfo>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| fs::chmod(fs, &req))
            .await
    }

    async fn glob(
        &self,
        req: Request<pb::GlobRequest>,
    ) -> Result<Response<pb::GlobResponse>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer.clone(), move |fs| search::glob(fs, &req))
            .await
    }

    type GrepStream = search::GrepStream;

    async fn grep(
        &self,
        req: Request<pb::GrepRequest>,
    ) -> Result<Response<Self::GrepStream>, Status> {
        let req = self.authorized(req)?;
        let lease = self.registry.acquire(&req.computer).await?;
        search::grep(lease, req).await.map(Response::new)
    }

    async fn statfs(
        &self,
        req: Request<pb::StatfsRequest>,
    ) -> Result<Response<pb::StatfsResponse>, Status> {
        let req = self.authorized(req)?;
        self.with_fs(&req.computer, fs::statfs).await
    }

    async fn share(
        &self,
        req: Request<pb::ShareRequest>,
    ) -> Result<Response<pb::ShareResponse>, Status> {
        let req = self.authorized(req)?;
        share::share(&self.registry, self.sharer.as_ref(), req)
            .await
            .map(Response::new)
    }

    async fn publish(
        &self,
        req: Request<pb::PublishRequest>,
    ) -> Result<Response<pb::PublishResponse>, Status> {
        let req = self.authorized(req)?;
        publish::publish(&self.registry, req)
            .await
            .map(Response::new)
    }

    async fn snapshot(
        &self,
        req: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotInfo>, Status> {
        let req = self.authorized(req)?;
        snapshots::snapshot(&self.registry, req)
            .await
            .map(Response::new)
    }

    async fn list_snapshots(
        &self,
        req: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
        let req = self.authorized(req)?;
        snapshots::list(&self.registry, req)
            .await
            .map(Response::new)
    }

    async fn delete_snapshot(
        &self,
        req: Request<pb::DeleteSnapshotRequest>,
    ) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
        let req = self.authorized(req)?;
        snapshots::delete(&self.registry, req)
            .await
            .map(Response::new)
    }

    async fn restore_computer(
        &self,
        req: Request<pb::RestoreComputerRequest>,
    ) -> Result<Response<pb::RestoreComputerResponse>, Status> {
        let req = self.authorized(req)?;
        snapshots::restore(&self.registry, req)
            .await
            .map(Response::new)
    }

    async fn create_computer_from(
        &self,
        req: Request<pb::CreateComputerFromRequest>,
    ) -> Result<Response<pb::Computer>, Status> {
        self.manager(&req)?;
        snapshots::create_from(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn import_computer(
        &self,
        req: Request<Streaming<pb::ImportComputerRequest>>,
    ) -> Result<Response<pb::Computer>, Status> {
        self.manager(&req)?;
        let idle = self.streams.limits().idle_timeout;
        snapshots::import(&self.registry, idle, req.into_inner())
            .await
            .map(Response::new)
    }

    type ExecStream = exec::ExecStream;

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        let req = self.authorized(req)?;
        exec::start(
            &self.registry,
            &self.containers,
            &self.admission,
            req,
            self.observer.clone(),
        )
        .await
        .map(Response::new)
    }

    type ExportStream = archive::ExportStream;

    async fn export(
        &self,
        req: Request<pb::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        let client = streams::client_of(&req);
        let req = self.authorized(req)?;
        let permit = self.streams.admit(&client, &req.computer)?;
        let lease = self.registry.acquire(&req.computer).await?;
        let idle = self.streams.limits().idle_timeout;
        archive::export(lease, permit, req, idle)
            .await
            .map(Response::new)
    }

    async fn import(
        &self,
        req: Request<Streaming<pb::ImportRequest>>,
    ) -> Result<Response<pb::ImportResponse>, Status> {
        let caller = self.caller(&req);
        let client = streams::client_of(&req);
        let check = |requested: &str| self.observed(caller.computer(requested));
        archive::import(
            &self.registry,
            check,
            &self.streams,
            &client,
            req.into_inner(),
        )
        .await
        .map(Response::new)
    }

    type ExecStreamStream = exec::ExecStream;

    async fn exec_stream(
        &self,
        req: Request<Streaming<pb::ExecStreamRequest>>,
    ) -> Result<Response<Self::ExecStreamStream>, Status> {
        let caller = self.caller(&req);
        let mut input = req.into_inner();
        let idle = self.streams.limits().idle_timeout;
        let first = match tokio::time::timeout(idle, input.message()).await {
            Ok(first) => first?,
            Err(_) => return Err(streams::idle_error("exec", idle)),
        };
        let Some(pb::ExecStreamRequest {
            msg: Some(pb::exec_stream_request::Msg::Start(mut start)),
        }) = first
        else {
            return Err(crate::errors::errno_detail(
                nix::errno::Errno::EINVAL,
                "the first ExecStream message must be `start`",
            ));
        };
        start.computer = self.observed(caller.computer(&start.computer))?;
        let (chunks, stdin) = exec::stdin_channel();
        let failure = stdin.failure.clone();
        let failed = stdin.failed.clone();
        let events = exec::start_with_input(
            &self.registry,
            &self.containers,
            &self.admission,
            start,
            Some(stdin),
            self.observer.clone(),
        )
        .await?;
        tokio::spawn(exec::forward_stdin(input, chunks, failure, failed));
        Ok(Response::new(events))
    }
}
