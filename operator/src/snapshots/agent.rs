//! The operator as a client of one node agent's gRPC API, for a
//! computer's snapshots: it dials the computer's `status.endpoint` (over
//! TLS when the agents serve it, [`crate::context::AgentTls`]) and sends
//! the computer's own token, which the agent checks against
//! `status.credentialHash` like any other caller's.

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::context::AgentTls;

/// Longest wait to connect to an agent.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for one call (a snapshot under a busy writer waits for
/// its log to catch up).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// One computer at its node agent.
#[derive(Clone)]
pub struct AgentCall {
    client: AgentComputerClient<Channel>,
    /// `Bearer <token>`.
    bearer: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    /// The computer's uid, which names it to the agent.
    uid: String,
}

impl AgentCall {
    /// Connects to the agent at `endpoint` (`host:port`) for computer
    /// `uid` with its `token`. Errors: the endpoint or TLS settings are
    /// bad, or the agent cannot be reached (as a status `UNAVAILABLE`).
    pub async fn connect(
        endpoint: &str,
        tls: Option<&AgentTls>,
        uid: &str,
        token: &str,
    ) -> Result<AgentCall, tonic::Status> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let bad = |e: tonic::transport::Error| {
            tonic::Status::unavailable(format!("node agent at {endpoint}: {e}"))
        };
        let mut at = Endpoint::from_shared(format!("{scheme}://{endpoint}"))
            .map_err(bad)?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT);
        if let Some(tls) = tls {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                .domain_name(tls.server_name.clone());
            at = at.tls_config(config).map_err(bad)?;
        }
        let channel = at.connect().await.map_err(bad)?;
        let bearer = format!("Bearer {token}")
            .parse()
            .map_err(|_| tonic::Status::invalid_argument("the computer's token is not ASCII"))?;
        Ok(AgentCall {
            client: AgentComputerClient::new(channel)
                .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES),
            bearer,
            uid: uid.to_string(),
        })
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        req.metadata_mut()
            .insert("authorization", self.bearer.clone());
        req
    }

    /// Takes snapshot `name` of the computer now.
    pub async fn snapshot(&mut self, name: &str) -> Result<pb::SnapshotInfo, tonic::Status> {
        let req = self.request(pb::SnapshotRequest {
            computer: self.uid.clone(),
            snapshot: name.to_string(),
        });
        self.client.snapshot(req).await.map(|r| r.into_inner())
    }

    /// The computer's snapshot `name`, if it has one.
    pub async fn find(&mut self, name: &str) -> Result<Option<pb::SnapshotInfo>, tonic::Status> {
        let req = self.request(pb::ListSnapshotsRequest {
            computer: self.uid.clone(),
        });
        let all = self.client.list_snapshots(req).await?.into_inner();
        Ok(all.snapshots.into_iter().find(|s| s.name == name))
    }

    /// Deletes the computer's snapshot `name`; one already gone is no error.
    pub async fn delete(&mut self, name: &str) -> Result<(), tonic::Status> {
        let req = self.request(pb::DeleteSnapshotRequest {
            computer: self.uid.clone(),
            snapshot: name.to_string(),
        });
        match self.client.delete_snapshot(req).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == tonic::Code::NotFound && s.message().contains("snapshot") => {
                Ok(())
            }
            Err(s) => Err(s),
        }
    }
}
