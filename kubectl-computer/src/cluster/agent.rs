//! Reaching the node agent that serves a computer: its credential, the
//! agent pod on its node, and gRPC over a port-forward of the API server
//! (`pods/portforward`, one port-forward per connection). The user never
//! needs a pod IP.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use agentcomputer_crds::{ComputerPhase, NODE_AGENT_GRPC_PORT};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use tokio::io::DuplexStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Uri};

use super::computers::not_ready_reason;
use super::{Cluster, api_error};
use crate::client::{self, Bearer, Client};
use crate::error::{CliError, Result};

/// Label of the node agent pods (the Helm chart's DaemonSet).
pub const AGENT_POD_LABEL: &str = "app.kubernetes.io/name=agentcomputer-node-agent";

/// Key of the token in a computer's credential Secret.
const TOKEN_KEY: &str = "token";
/// Keys the operator adds when the node agents serve TLS: the PEM
/// certificates that sign them and the DNS name in their certificate.
const CA_KEY: &str = "ca.crt";
const TLS_SERVER_NAME_KEY: &str = "tls-server-name";

/// How to reach one computer's agent.
#[derive(Debug, Clone)]
pub struct Route {
    /// The computer as requests name it: `NAMESPACE/NAME`.
    pub computer: String,
    /// The computer's access token (from its credential Secret).
    pub token: String,
    /// Node serving the computer.
    pub node: String,
    /// A ready node agent pod on that node, in the agent namespace.
    pub pod: String,
    /// How to check the agent's TLS certificate when it serves TLS:
    /// (CA PEM, server name), from the credential Secret.
    pub tls: Option<(Vec<u8>, String)>,
}

impl Cluster {
    /// Finds how to reach computer `name`. Errors, each one line: the
    /// computer is not found, not Ready (with the reason), has no credential
    /// yet, its Secret cannot be read, or no ready node agent runs on its node.
    pub async fn route(&self, name: &str) -> Result<Route> {
        let c = self.get(name).await?;
        let status = c.status.clone().unwrap_or_default();
        if status.phase != Some(ComputerPhase::Ready) {
            return Err(CliError::new(format!(
                "computer {name} is not Ready: {}",
                not_ready_reason(&c)
            )));
        }
        let node = status
            .node
            .ok_or_else(|| CliError::new(format!("computer {name} is not placed on a node yet")))?;
        let secret = status.credential_secret.ok_or_else(|| {
            CliError::new(format!("computer {name} has no credential Secret yet"))
        })?;
        let (token, tls) = self.credential(&secret).await?;
        let pod = self.agent_pod(&node).await?;
        Ok(Route {
            computer: format!("{}/{name}", self.namespace),
            token,
            node,
            pod,
            tls,
        })
    }

    /// The token in credential Secret `secret` and, when the agents serve
    /// TLS, the trust for their certificate.
    pub(super) async fn credential(
        &self,
        secret: &str,
    ) -> Result<(String, Option<(Vec<u8>, String)>)> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let s = secrets.get(secret).await.map_err(|e| {
            CliError::new(format!(
                "cannot read the credential Secret {}/{secret}: {}",
                self.namespace,
                api_error(&e)
            ))
        })?;
        let key = |k: &str| s.data.as_ref().and_then(|d| d.get(k)).map(|b| b.0.clone());
        let tls = match (key(CA_KEY), key(TLS_SERVER_NAME_KEY)) {
            (Some(ca), Some(name)) => Some((ca, String::from_utf8_lossy(&name).trim().to_string())),
            _ => None,
        };
        let bytes = s
            .data
            .as_ref()
            .and_then(|d| d.get(TOKEN_KEY))
            .map(|b| b.0.clone())
            .ok_or_else(|| {
                CliError::new(format!(
                    "the credential Secret {}/{secret} has no {TOKEN_KEY:?} key",
                    self.namespace
                ))
            })?;
        String::from_utf8(bytes)
            .map(|t| (t.trim().to_string(), tls))
            .map_err(|_| {
                CliError::new(format!(
                    "the token in Secret {}/{secret} is not text",
                    self.namespace
                ))
            })
    }

    /// A Running and Ready node agent pod on `node` (the newest if several,
    /// as during a rolling update).
    pub async fn agent_pod(&self, node: &str) -> Result<String> {
        let params = ListParams::default()
            .labels(AGENT_POD_LABEL)
            .fields(&format!("spec.nodeName={node}"));
        let pods = self.pods().list(&params).await.map_err(|e| api_error(&e))?;
        let mut ready: Vec<&Pod> = pods.items.iter().filter(|p| pod_ready(p)).collect();
        ready.sort_by_key(|p| p.metadata.creation_timestamp.clone());
        ready
            .last()
            .and_then(|p| p.metadata.name.clone())
            .ok_or_else(|| {
                CliError::new(format!(
                    "no ready node agent on node {node} (pods labelled {AGENT_POD_LABEL} in namespace {})",
                    self.agent_namespace
                ))
            })
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.agent_namespace)
    }

    /// A port-forward stream to `pod`'s gRPC port.
    async fn forward(&self, pod: &str) -> Result<DuplexStream> {
        forward(self.pods(), pod).await
    }

    /// An API client for computer `name`, and the name to send in requests.
    pub async fn client(&self, name: &str) -> Result<(Client, String)> {
        let route = self.route(name).await?;
        let connector = Forwarder {
            pods: self.pods(),
            pod: route.pod.clone(),
        };
        // The URI only fills the :authority of requests; the connector
        // ignores it. An agent serving TLS is spoken to in TLS through the
        // port-forward, its certificate checked against the Secret's CA
        // and server name.
        let scheme = if route.tls.is_some() { "https" } else { "http" };
        let uri = format!(
            "{scheme}://{}.{}.pod:{NODE_AGENT_GRPC_PORT}",
            route.pod, self.agent_namespace
        );
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| CliError::new(format!("invalid pod name {:?}: {e}", route.pod)))?;
        if let Some((ca, name)) = &route.tls {
            let tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name(name.clone());
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| CliError::new(format!("cannot set up TLS to the node agent: {e}")))?;
        }
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| match forwarding_error(&e) {
                // The port-forward's own message names the pod already.
                Some(message) => CliError::new(message),
                None => CliError::new(format!(
                    "cannot reach the node agent {}/{} on node {}: {}",
                    self.agent_namespace,
                    route.pod,
                    route.node,
                    client::root_cause(&e)
                )),
            })?;
        let source = format!("the credential Secret of computer {}", route.computer);
        let bearer = Bearer::new(&route.token, &source)?;
        Ok((client::over(channel, bearer), route.computer))
    }

    /// `port-forward`: serves `address` until interrupted, forwarding each
    /// connection to the agent of computer `name` through its own
    /// port-forward. Prints the lines of [`forward_lines`] first. An agent
    /// serving TLS is forwarded as it is (TLS end to end); its CA
    /// certificate is written to a temporary file that lives as long as the
    /// forward.
    pub async fn port_forward(&self, name: &str, address: SocketAddr) -> Result<()> {
        let route = self.route(name).await?;
        let ca_file = match &route.tls {
            Some((ca, _)) => Some(write_ca(ca)?),
            None => None,
        };
        // Fail now, not at the first connection, if forwarding is refused.
        drop(self.forward(&route.pod).await?);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| CliError::new(format!("cannot listen on {address}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| CliError::new(format!("cannot listen on {address}: {e}")))?;
        let host = match local {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        let tls = match (&route.tls, &ca_file) {
            (Some((_, server_name)), Some(file)) => Some((file.path(), server_name.as_str())),
            _ => None,
        };
        for line in forward_lines(&format!("{host}:{}", local.port()), &route, tls) {
            outln!("{line}");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        loop {
            let (mut conn, _) = tokio::select! {
                // Returning drops the CA file, on SIGTERM and SIGHUP too.
                () = crate::interrupt::interrupted() => return Ok(()),
                accepted = listener.accept() => accepted
                    .map_err(|e| CliError::new(format!("accepting on {local}: {e}")))?,
            };
            let pods = self.pods();
            let pod = route.pod.clone();
            tokio::spawn(async move {
                match forward(pods, &pod).await {
                    Ok(mut upstream) => {
                        let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                        if let Some(failure) = take_forward_failure() {
                            errln!("error: {failure}");
                        }
                    }
                    Err(CliError { message: e, .. }) => errln!("error: {e}"),
                }
            });
        }
    }
}

/// What `port-forward` prints, one `KEY VALUE` per line, for `--endpoint`,
/// `--token`, `--ca-cert` and `--tls-server-name` (and the Python client's
/// `Client.port_forward_computer`): `endpoint http://ADDR` (`https://`
/// when the agent serves TLS), `token TOKEN`, for TLS `ca-cert PATH` and
/// `tls-server-name NAME` (the name in the agent's certificate, which is
/// not the local address), and last `computer NAMESPACE/NAME`.
pub fn forward_lines(addr: &str, route: &Route, tls: Option<(&Path, &str)>) -> Vec<String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut lines = vec![
        format!("endpoint {scheme}://{addr}"),
        format!("token {}", route.token),
    ];
    if let Some((ca, server_name)) = tls {
        lines.push(format!("ca-cert {}", ca.display()));
        lines.push(format!("tls-server-name {server_name}"));
    }
    lines.push(format!("computer {}", route.computer));
    lines
}

/// Writes the agents' CA certificate (PEM) to a temporary file, removed
/// when the returned handle is dropped.
fn write_ca(pem: &[u8]) -> Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut file = tempfile::Builder::new()
        .prefix("agentcomputer-ca-")
        .suffix(".pem")
        .tempfile()
        .map_err(|e| CliError::new(format!("cannot write the agent's CA certificate: {e}")))?;
    file.write_all(pem)
        .and_then(|()| file.flush())
        .map_err(|e| CliError::new(format!("cannot write the agent's CA certificate: {e}")))?;
    Ok(file)
}

/// The last error the API server reported on a port-forward's error
/// channel (for example that nothing listens on the port); the data stream
/// itself only closes. `main` adds it to a failure it explains.
static FORWARD_FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Takes the message of [`FORWARD_FAILURE`], if any.
pub fn take_forward_failure() -> Option<String> {
    FORWARD_FAILURE.lock().ok().and_then(|mut f| f.take())
}

/// Opens one port-forward to `pod`'s gRPC port. Errors: the API server's
/// refusal in one line (`RBAC forbids pods/portforward: ...`, the pod is
/// gone, the kubelet is unreachable).
async fn forward(pods: Api<Pod>, pod: &str) -> Result<DuplexStream> {
    let mut forwarder = pods
        .portforward(pod, &[NODE_AGENT_GRPC_PORT])
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.is_forbidden() => {
                CliError::new(format!("RBAC forbids pods/portforward: {}", s.message))
            }
            _ => CliError::new(format!(
                "port-forward to node agent pod {pod}: {}",
                api_error(&e)
            )),
        })?;
    let stream = forwarder
        .take_stream(NODE_AGENT_GRPC_PORT)
        .ok_or_else(|| CliError::new("port-forward gave no stream"))?;
    if let Some(errors) = forwarder.take_error(NODE_AGENT_GRPC_PORT) {
        let pod = pod.to_string();
        tokio::spawn(async move {
            if let Some(message) = errors.await
                && let Ok(mut slot) = FORWARD_FAILURE.lock()
            {
                *slot = Some(format!("port-forward to {pod}: {message}"));
            }
        });
    }
    // The forwarder's task keeps running until the stream closes.
    drop(forwarder);
    Ok(stream)
}

/// The connector's message, if the connection failed in the port-forward.
fn forwarding_error(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(CliError { message, .. }) = e.downcast_ref::<CliError>() {
            return Some(message.clone());
        }
        cause = e.source();
    }
    None
}

fn pod_ready(p: &Pod) -> bool {
    let Some(status) = &p.status else {
        return false;
    };
    p.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// A tonic connector: every connection is a new port-forward to the pod.
#[derive(Clone)]
struct Forwarder {
    pods: Api<Pod>,
    pod: String,
}

impl tower::Service<Uri> for Forwarder {
    type Response = TokioIo<DuplexStream>;
    type Error = CliError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (pods, pod) = (self.pods.clone(), self.pod.clone());
        Box::pin(async move { forward(pods, &pod).await.map(TokioIo::new) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, ready: &str, deleting: bool) -> Pod {
        let mut meta = serde_json::json!({"name": "p"});
        if deleting {
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(serde_json::json!({
            "metadata": meta,
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    #[test]
    fn only_running_ready_pods_serve() {
        assert!(pod_ready(&pod("Running", "True", false)));
        assert!(!pod_ready(&pod("Running", "False", false)));
        assert!(!pod_ready(&pod("Pending", "True", false)));
        assert!(!pod_ready(&pod("Running", "True", true)));
        assert!(!pod_ready(&Pod::default()));
    }

    #[test]
    fn forward_lines_name_tls() {
        let route = Route {
            computer: "team/demo".into(),
            token: "tok".into(),
            node: "n".into(),
            pod: "p".into(),
            tls: None,
        };
        assert_eq!(
            forward_lines("127.0.0.1:4000", &route, None),
            [
                "endpoint http://127.0.0.1:4000",
                "token tok",
                "computer team/demo"
            ]
        );
        let ca = write_ca(b"-----BEGIN CERTIFICATE-----\n").unwrap();
        assert_eq!(
            std::fs::read(ca.path()).unwrap(),
            b"-----BEGIN CERTIFICATE-----\n"
        );
        let lines = forward_lines("[::1]:4000", &route, Some((ca.path(), "agent.svc")));
        assert_eq!(lines[0], "endpoint https://[::1]:4000");
        assert_eq!(lines[2], format!("ca-cert {}", ca.path().display()));
        assert_eq!(lines[3], "tls-server-name agent.svc");
        assert_eq!(lines.last().unwrap(), "computer team/demo");
        let path = ca.path().to_path_buf();
        drop(ca);
        assert!(!path.exists(), "the CA file outlived the forward");
    }
}
