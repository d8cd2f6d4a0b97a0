//! The `agentcomputer.v1.AgentComputer` gRPC service.
//!
//! This module only routes calls; each group of calls lives in its own
//! module. Filesystem calls take a [`crate::registry::Lease`] on the
//! computer for their whole duration and run engine work on the blocking
//! thread pool.

mod computers;
mod convert;
mod egress;
pub mod errors;
mod exec;
mod fs;
mod mount;
pub mod paths;
mod read;
mod search;
mod walk;
mod write;

use agentcomputer_fs::Fs;
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_server::{AgentComputer, AgentComputerServer};
use tonic::{Request, Response, Status, Streaming};

use crate::blocking::blocking;
use crate::registry::Registry;

pub use exec::{DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT, MAX_RESULT_BYTES, MAX_TIMEOUT};

/// The service implementation over a [`Registry`].
#[derive(Clone)]
pub struct Service {
    registry: Registry,
}

impl Service {
    /// A service serving the computers of `registry`.
    pub fn new(registry: Registry) -> Service {
        Service { registry }
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

#[tonic::async_trait]
impl AgentComputer for Service {
    async fn create_computer(
        &self,
        req: Request<pb::CreateComputerRequest>,
    ) -> Result<Response<pb::Computer>, Status> {
        computers::create(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn delete_computer(
        &self,
        req: Request<pb::DeleteComputerRequest>,
    ) -> Result<Response<pb::DeleteComputerResponse>, Status> {
        computers::delete(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_computer(
        &self,
        req: Request<pb::GetComputerRequest>,
    ) -> Result<Response<pb::Computer>, Status> {
        computers::get(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_computers(
        &self,
        _req: Request<pb::ListComputersRequest>,
    ) -> Result<Response<pb::ListComputersResponse>, Status> {
        computers::list(&self.registry).await.map(Response::new)
    }

    async fn mount(
        &self,
        req: Request<pb::MountRequest>,
    ) -> Result<Response<pb::MountResponse>, Status> {
        mount::mount(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn unmount(
        &self,
        req: Request<pb::UnmountRequest>,
    ) -> Result<Response<pb::UnmountResponse>, Status> {
        mount::unmount(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn stat(&self, req: Request<pb::StatRequest>) -> Result<Response<pb::FileInfo>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| fs::stat(fs, &req))
            .await
    }

    type ReadStream = read::ReadStream;

    async fn read(
        &self,
        req: Request<pb::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let req = req.into_inner();
        let lease = self.registry.acquire(&req.computer).await?;
        read::start(lease, req).await.map(Response::new)
    }

    async fn write(
        &self,
        req: Request<Streaming<pb::WriteRequest>>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        write::write(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn mkdir(
        &self,
        req: Request<pb::MkdirRequest>,
    ) -> Result<Response<pb::FileInfo>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| fs::mkdir(fs, &req))
            .await
    }

    async fn read_dir(
        &self,
        req: Request<pb::ReadDirRequest>,
    ) -> Result<Response<pb::ReadDirResponse>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| fs::readdir(fs, &req))
            .await
    }

    async fn remove(
        &self,
        req: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::RemoveResponse>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| {
            fs::remove(fs, &req).map(|()| pb::RemoveResponse {})
        })
        .await
    }

    async fn rename(
        &self,
        req: Request<pb::RenameRequest>,
    ) -> Result<Response<pb::RenameResponse>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| {
            fs::rename(fs, &req).map(|()| pb::RenameResponse {})
        })
        .await
    }

    async fn symlink(
        &self,
        req: Request<pb::SymlinkRequest>,
    ) -> Result<Response<pb::FileInfo>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| fs::symlink(fs, &req))
            .await
    }

    async fn readlink(
        &self,
        req: Request<pb::ReadlinkRequest>,
    ) -> Result<Response<pb::ReadlinkResponse>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| fs::readlink(fs, &req))
            .await
    }

    async fn chmod(
        &self,
        req: Request<pb::ChmodRequest>,
    ) -> Result<Response<pb::FileInfo>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| fs::chmod(fs, &req))
            .await
    }

    async fn glob(
        &self,
        req: Request<pb::GlobRequest>,
    ) -> Result<Response<pb::GlobResponse>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer.clone(), move |fs| search::glob(fs, &req))
            .await
    }

    type GrepStream = search::GrepStream;

    async fn grep(
        &self,
        req: Request<pb::GrepRequest>,
    ) -> Result<Response<Self::GrepStream>, Status> {
        let req = req.into_inner();
        let lease = self.registry.acquire(&req.computer).await?;
        search::grep(lease, req).await.map(Response::new)
    }

    async fn statfs(
        &self,
        req: Request<pb::StatfsRequest>,
    ) -> Result<Response<pb::StatfsResponse>, Status> {
        let req = req.into_inner();
        self.with_fs(&req.computer, fs::statfs).await
    }

    type ExecStream = exec::ExecStream;

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        exec::start(&self.registry, req.into_inner())
            .await
            .map(Response::new)
    }
}
