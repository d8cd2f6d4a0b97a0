//! The API gateway (`agentcomputer-gateway`, docs/gateway.md) in front of
//! a real `node-agent cluster` and a real kube-apiserver: calls go through
//! by the caller's own credential (unary, server-streaming exec, a
//! client-streaming upload, a bidirectional exec with streamed stdin),
//! wrong, missing and rotated credentials are refused, the route follows
//! the agent when its address changes, each limit refuses with
//! RESOURCE_EXHAUSTED naming itself, `/metrics` counts the calls, and a
//! deleted computer's last token gets NOT_FOUND. Over TLS, the gateway
//! and the agents authenticate each other when the agents ask for client
//! certificates. The
//! gateway runs with the RBAC the chart renders for it.

mod cluster_support;
mod tls_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use cluster_support::support::{self, Cluster, Proc, eventually};
use cluster_support::*;
use pb::exec_event::Event;
use tonic::Code;
use tonic::transport::Channel;

/// The chart's RBAC for the gateway, rendered by helm.
fn chart_rbac(cluster: &Cluster) -> String {
    let chart = repo().join("charts/agent-computer");
    let out = cluster.helm(&[
        "template",
        support::RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        support::SYSTEM_NS,
        "--set",
        "gateway.enabled=true",
        "--show-only",
        "templates/gateway-rbac.yaml",
    ]);
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A running gateway: its API address and its operations address.
struct Gateway {
    proc: Proc,
    api: String,
    ops: String,
}

impl Gateway {
    fn start(cluster: &Cluster, log: &str, extra: &[&str]) -> Gateway {
        let log = cluster.dir.path().join(log);
        let proc = Proc::spawn(
            "agentcomputer-gateway",
            Command::new(support::gateway_exe())
                .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
                .args(["--drain-delay", "0s", "--grace", "2s"])
                .args(extra)
                .env("KUBECONFIG", &cluster.gateway_kubeconfig)
                .env("RUST_LOG", "info,kube=warn"),
            log.clone(),
        );
        let (api, ops) = wait_addresses(&log);
        Gateway {
            proc,
            api: format!("http://{api}"),
            ops: format!("http://{ops}"),
        }
    }

    async fn ready(&mut self) {
        let url = format!("{}/readyz", self.ops);
        eventually(30, "the gateway's /readyz", || {
            let url = url.clone();
            async move { (get(&url).await.0 == 200).then_some(()) }
        })
        .await;
        assert!(
            self.proc.alive(),
            "gateway exited:\n{}",
            self.proc.log_tail()
        );
    }

    async fn client(&self, token: Option<&str>) -> Api_ {
        let channel = Channel::from_shared(self.api.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        AgentComputerClient::with_interceptor(channel, Bearer(token.map(str::to_string)))
            .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
    }
}

fn wait_addresses(log: &Path) -> (String, String) {
    for _ in 0..300 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let find = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix).map(|a| a.trim().to_string()))
        };
        if let (Some(a), Some(m)) = (find("listening on "), find("metrics on ")) {
            return (a, m);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "the gateway printed no addresses:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// The Python interpreter with the official MCP client
/// (`scripts/mcp-python.sh` makes its virtual environment once).
fn mcp_python() -> std::path::PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("scripts/mcp-python.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "scripts/mcp-python.sh failed");
    std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// An MCP `initialize` POST with bearer `token`: status and body.
async fn post(url: &str, token: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// Two MCP POSTs without a credential on one kept-alive HTTP/1.1
/// connection; returns everything the server sent.
async fn refused_twice_on_one_connection(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let body = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}".repeat(200);
    let head = |close: bool| {
        format!(
            "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        )
    };
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.set_nodelay(true).unwrap();
    // The body a moment after the head, as through a port-forward: the
    // server sees the request before its body.
    s.write_all(head(false).as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(body.as_bytes()).await.unwrap();
    // The first answer arrives before the second request is sent, as a
    // client reusing its connection does.
    let mut first = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut first))
        .await
        .unwrap()
        .unwrap();
    let mut all = String::from_utf8_lossy(&first[..n]).to_string();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = s
        .write_all(format!("{}{body}", head(true)).as_bytes())
        .await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
    all.push_str(&String::from_utf8_lossy(&rest));
    all
}

/// Publishes `agent` as the computer's serving agent, as the operator
/// does from the agent pod's IP (`status.endpoint`).
async fn set_endpoint(admin: &kube::Client, ns: &str, name: &str, agent: &Agent) {
    use agentcomputer_crds::AgentComputer;
    use kube::api::{Api, Patch, PatchParams};
    let endpoint = agent.grpc.strip_prefix("http://").unwrap();
    Api::<AgentComputer>::namespaced(admin.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"endpoint": endpoint}})),
        )
        .await
        .unwrap();
}

/// An ExecStream call: the start, then `stdin` in pieces, then its end;
/// returns stdout and the exit code.
async fn exec_stream(c: &mut Api_, computer: &str, script: &str, stdin: &[&[u8]]) -> (String, i32) {
    use pb::exec_stream_request::Msg;
    let mut msgs = vec![pb::ExecStreamRequest {
        msg: Some(Msg::Start(pb::ExecRequest {
            computer: computer.into(),
            runtime: pb::Runtime::Shell as i32,
            script: script.into(),
            ..Default::default()
        })),
    }];
    for piece in stdin {
        msgs.push(pb::ExecStreamRequest {
            msg: Some(Msg::Stdin(piece.to_vec())),
        });
    }
    msgs.push(pb::ExecStreamRequest {
        msg: Some(Msg::StdinEnd(pb::StdinEnd {})),
    });
    let mut events = c
        .exec_stream(futures::stream::iter(msgs))
        .await
        .unwrap()
        .into_inner();
    let mut out = String::new();
    while let Some(ev) = events.message().await.unwrap() {
        match ev.event.unwrap() {
            Event::Stdout(b) => out.push_str(&String::from_utf8_lossy(&b)),
            Event::Stderr(_) => {}
            Event::Exit(e) => return (out, e.code),
        }
    }
    panic!("exec stream ended without an exit event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_routes_each_credential_to_its_computer() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    ok(
        cluster.kubectl(&["apply", "-f", "-"], Some(&chart_rbac(&cluster))),
        "apply the chart's gateway RBAC",
    );
    let dir = cluster.dir.path().to_path_buf();
    // With share links, which the MCP `share` tool makes.
    let share_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let share = [
        "--share-listen".to_string(),
        share_addr.to_string(),
        "--share-url".to_string(),
        format!("http://{share_addr}/"),
    ];
    let agent = Agent::start_with(
        &cluster,
        &dir.join("agent-data"),
        "agent.log",
        "127.0.0.1:0",
        &share,
    )
    .await;
    let (ta, tb) = (token("gateway a"), token("gateway b"));
    computer(
        &admin,
        NS_A,
        "alpha",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &ta,
    )
    .await;
    computer(
        &admin,
        NS_B,
        "beta",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tb,
    )
    .await;
    let alpha = format!("{NS_A}/alpha");
    let beta = format!("{NS_B}/beta");
    set_endpoint(&admin, NS_A, "alpha", &agent).await;

    let mut gw = Gateway::start(&cluster, "gateway.log", &[]);
    gw.ready().await;
    let mut a = gw.client(Some(&ta)).await;
    let mut b = gw.client(Some(&tb)).await;
    // Not served yet: the gateway says so, naming the computer.
    let (code, msg) = code_of(exec(&mut b, &beta, pb::Runtime::Shell, "true").await);
    assert_eq!(code, Code::Unavailable, "{msg}");
    assert!(msg.contains("team-b/beta is not served"), "{msg}");
    set_endpoint(&admin, NS_B, "beta", &agent).await;

    // Server streaming, once the agent published the computer's endpoint.
    let (out, code) = eventually(60, "an exec through the gateway", || {
        let (mut a, alpha) = (a.clone(), alpha.clone());
        async move {
            let r = exec(
                &mut a,
                &alpha,
                pb::Runtime::Shell,
                "echo hi; echo from alpha > who",
            )
            .await;
            if let Err(e) = &r {
                eprintln!("not yet: {e:?}");
            }
            r.ok()
        }
    })
    .await;
    assert_eq!((out.as_str(), code), ("hi\n", 0));
    // Client streaming and server streaming of 5 MiB, byte for byte.
    let data: Vec<u8> = (0..5u32 << 20).map(|i| (i % 251) as u8).collect();
    write(&mut a, &alpha, "big.bin", &data).await.unwrap();
    assert_eq!(read(&mut a, &alpha, "big.bin").await.unwrap(), data);
    // Both directions at once: stdin streamed in while output streams back.
    let (out, code) = exec_stream(&mut a, &alpha, "wc -l", &[b"1\n2\n", b"3\n"]).await;
    assert_eq!((out.trim(), code), ("3", 0));
    // The computer's name alone works as against the agent.
    let (out, _) = exec(&mut a, "alpha", pb::Runtime::Shell, "cat who")
        .await
        .unwrap();
    assert_eq!(out, "from alpha\n");

    // Each credential reaches its own computer only; the agent refuses
    // another's with the same answer as a computer that does not exist.
    let (out, _) = eventually(60, "beta through the gateway", || {
        let (mut b, beta) = (b.clone(), beta.clone());
        async move { exec(&mut b, &beta, pb::Runtime::Shell, "ls").await.ok() }
    })
    .await;
    assert_eq!(out, "");
    let (code, _) = code_of(exec(&mut b, &alpha, pb::Runtime::Shell, "cat who").await);
    assert_eq!(code, Code::NotFound);
    let mut none = gw.client(None).await;
    let (code, msg) = code_of(exec(&mut none, &alpha, pb::Runtime::Shell, "true").await);
    assert_eq!(code, Code::Unauthenticated, "{msg}");
    assert!(msg.contains("authorization: Bearer"), "{msg}");
    let mut wrong = gw.client(Some(&token("nobody"))).await;
    let (code, _) = code_of(exec(&mut wrong, &alpha, pb::Runtime::Shell, "true").await);
    assert_eq!(code, Code::Unauthenticated);

    // A rotated credential: the old one is refused at the gateway once
    // the new fingerprint is published, the new one works.
    let ta2 = token("gateway a rotated");
    set_hash(&admin, NS_A, "alpha", &ta2).await;
    eventually(30, "the old credential refused", || {
        let (mut a, alpha) = (a.clone(), alpha.clone());
        async move {
            let r = exec(&mut a, &alpha, pb::Runtime::Shell, "true").await;
            (r.err().map(|s| s.code()) == Some(Code::Unauthenticated)).then_some(())
        }
    })
    .await;
    let a2 = gw.client(Some(&ta2)).await;
    let (out, _) = eventually(30, "the new credential", || {
        let (mut a2, alpha) = (a2.clone(), alpha.clone());
        async move {
            exec(&mut a2, &alpha, pb::Runtime::Shell, "cat who")
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(out, "from alpha\n");

    // The agent is recreated at another address (a new pod IP): the
    // route follows status.endpoint, same client, same gateway.
    let before = agent.grpc.clone();
    agent.stop().await;
    let agent = Agent::start_with(
        &cluster,
        &dir.join("agent-data"),
        "agent2.log",
        "127.0.0.1:0",
        &share,
    )
    .await;
    assert_ne!(agent.grpc, before);
    set_endpoint(&admin, NS_A, "alpha", &agent).await;
    let (out, _) = eventually(60, "the call after the agent moved", || {
        let (mut a2, alpha) = (a2.clone(), alpha.clone());
        async move {
            exec(&mut a2, &alpha, pb::Runtime::Shell, "cat who")
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(out, "from alpha\n");

    // The computer as a remote MCP server, driven by the official Python
    // MCP client (every tool, 401 without or with a wrong token).
    let python = mcp_python();
    let client = repo().join("kubectl-computer/tests/mcp/client.py");
    let url = format!("{}/mcp/{NS_A}/alpha", gw.api);
    let out = Command::new(&python)
        .arg(&client)
        .args(["http", &url, &ta2])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("ok: http ")),
        "client.py through the gateway:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another computer's path with this credential: as if it did not exist.
    let (status, _) = post(&format!("{}/mcp/{NS_B}/beta", gw.api), &ta2).await;
    assert_eq!(status, 404);
    let (status, _) = post(&format!("{}/mcp/{NS_A}/alpha", gw.api), "wrong").await;
    assert_eq!(status, 401);
    // A refusal leaves an HTTP/1.1 connection usable: two refused
    // requests with bodies on one connection both get their answer.
    let answers = refused_twice_on_one_connection(&format!("{}/mcp/{NS_A}/alpha", gw.api)).await;
    assert_eq!(answers.matches("HTTP/1.1 401").count(), 2, "{answers}");

    // The metrics name the calls, by method and code, and by computer.
    let (status, text) = get(&format!("{}/metrics", gw.ops)).await;
    assert_eq!(status, 200);
    for line in [
        "agentcomputer_gateway_calls_total{code=\"OK\",method=\"Exec\"}",
        "agentcomputer_gateway_calls_total{code=\"UNAUTHENTICATED\",method=\"Exec\"}",
        "agentcomputer_gateway_calls_total{code=\"OK\",method=\"Write\"}",
        "agentcomputer_gateway_calls_total{code=\"OK\",method=\"ExecStream\"}",
        "agentcomputer_gateway_computer_calls_total{code=\"NOT_FOUND\",computer=\"team-b/beta\"}",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    // The access log names calls and never a credential.
    let log = std::fs::read_to_string(dir.join("gateway.log")).unwrap();
    assert!(log.contains("\"computer\":\"team-a/alpha\""), "{log}");
    for t in [&ta, &tb, &ta2] {
        assert!(
            !log.contains(t.as_str()),
            "a credential in the gateway's log"
        );
    }

    // Limits: a second gateway allowing one call in flight per credential
    // and two a second.
    let mut tight = Gateway::start(
        &cluster,
        "gateway-tight.log",
        &["--per-token-in-flight", "1", "--per-token-rate", "2"],
    );
    tight.ready().await;
    let mut t = tight.client(Some(&ta2)).await;
    let long = {
        let (mut t, alpha) = (t.clone(), alpha.clone());
        tokio::spawn(
            async move { exec(&mut t, &alpha, pb::Runtime::Shell, "sleep 2; echo done").await },
        )
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, msg) = code_of(exec(&mut t, &alpha, pb::Runtime::Shell, "true").await);
    assert_eq!(code, Code::ResourceExhausted, "{msg}");
    assert!(msg.contains("--per-token-in-flight"), "{msg}");
    assert_eq!(long.await.unwrap().unwrap().0, "done\n");
    // Quick calls back to back: a burst of four passes, and unless each
    // call took half a second (the rate's refill) one is refused.
    let mut refused = None;
    for _ in 0..20 {
        if let Err(s) = stat(&mut t, &alpha, "who").await {
            refused = Some(s);
            break;
        }
    }
    let s = refused.expect("twenty calls back to back passed a rate of two a second");
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    assert!(s.message().contains("--per-token-rate"), "{s:?}");

    // A deleted computer: its last token gets NOT_FOUND naming it, over
    // gRPC and MCP, while a token that never was valid stays
    // UNAUTHENTICATED.
    {
        use agentcomputer_crds::AgentComputer;
        use kube::api::{Api, DeleteParams};
        let api = Api::<AgentComputer>::namespaced(admin.clone(), NS_B);
        let _ = api.delete("beta", &DeleteParams::default()).await.unwrap();
    }
    let s = eventually(60, "the deleted computer's token answered", || {
        let (mut b, beta) = (b.clone(), beta.clone());
        async move {
            let r = exec(&mut b, &beta, pb::Runtime::Shell, "true").await;
            r.err().filter(|s| s.code() == Code::NotFound)
        }
    })
    .await;
    assert!(s.message().contains("team-b/beta was deleted"), "{s:?}");
    let (status, body) = post(&format!("{}/mcp/{NS_B}/beta", gw.api), &tb).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("was deleted"), "{body}");
    let (code, _) = code_of(exec(&mut wrong, &alpha, pb::Runtime::Shell, "true").await);
    assert_eq!(code, Code::Unauthenticated);

    tight.proc.kill();
    gw.proc.kill();
    agent.stop().await;
}

/// TLS at both hops. The gateway serves its clients over TLS. Mutual TLS
/// to the agent: it serves TLS and asks for client certificates signed by
/// the installation's CA. The gateway presenting one signed by
/// it is served; one presenting a certificate of another CA is refused at
/// the handshake (the call gets UNAVAILABLE); clients presenting none
/// (sandbox runners, a port-forwarded CLI, a gateway without one) are
/// served, the credential authorising each call as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_and_the_agents_authenticate_each_other() {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    ok(
        cluster.kubectl(&["apply", "-f", "-"], Some(&chart_rbac(&cluster))),
        "apply the chart's gateway RBAC",
    );
    let dir = cluster.dir.path().to_path_buf();
    let ca = tls_support::test_ca("installation CA");
    let stranger = tls_support::test_ca("another CA");
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let ca_file = file("ca.crt", &ca.pem);
    let (agent_cert, agent_key) = ca.issue(&["agent.test"]);
    let (gw_cert, gw_key) = ca.issue(&["gateway"]);
    let (bad_cert, bad_key) = stranger.issue(&["gateway"]);
    let extra = [
        "--tls-cert".to_string(),
        file("agent.crt", &agent_cert),
        "--tls-key".to_string(),
        file("agent.key", &agent_key),
        "--tls-client-ca".to_string(),
        ca_file.clone(),
    ];
    let agent = Agent::start_with(
        &cluster,
        &dir.join("agent-data"),
        "agent.log",
        "127.0.0.1:0",
        &extra,
    )
    .await;
    let t = token("mutual");
    computer(
        &admin,
        NS_A,
        "alpha",
        NODE,
        serde_json::json!({"storage": {"size": "16Mi"}}),
        &t,
    )
    .await;
    set_endpoint(&admin, NS_A, "alpha", &agent).await;
    let alpha = format!("{NS_A}/alpha");
    let to_agents = [
        "--agent-ca-cert",
        &ca_file,
        "--agent-tls-server-name",
        "agent.test",
    ];

    let (gw_cert, gw_key) = (file("gw.crt", &gw_cert), file("gw.key", &gw_key));
    // Its own listener serves TLS too (a certificate for gateway.test), as
    // with the chart's gateway.tls: clients reach https://GATEWAY.
    let (front_cert, front_key) = ca.issue(&["gateway.test"]);
    let (front_cert, front_key) = (
        file("front.crt", &front_cert),
        file("front.key", &front_key),
    );
    let mut trusted = Gateway::start(
        &cluster,
        "gateway-mtls.log",
        &[
            &to_agents[..],
            &[
                "--agent-client-cert",
                &gw_cert,
                "--agent-client-key",
                &gw_key,
                "--tls-cert",
                &front_cert,
                "--tls-key",
                &front_key,
            ],
        ]
        .concat(),
    );
    trusted.ready().await;
    let front = trusted.api.replace("http://", "https://");
    let channel = Endpoint::from_shared(front)
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&ca.pem))
                .domain_name("gateway.test"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let c = AgentComputerClient::with_interceptor(channel, Bearer(Some(t.clone())));
    let (out, _) = eventually(60, "an exec through the gateway over mutual TLS", || {
        let (mut c, alpha) = (c.clone(), alpha.clone());
        async move {
            exec(&mut c, &alpha, pb::Runtime::Shell, "echo mutual")
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(out, "mutual\n");

    let (bad_cert, bad_key) = (file("bad.crt", &bad_cert), file("bad.key", &bad_key));
    let mut untrusted = Gateway::start(
        &cluster,
        "gateway-stranger.log",
        &[
            &to_agents[..],
            &[
                "--agent-client-cert",
                &bad_cert,
                "--agent-client-key",
                &bad_key,
            ],
        ]
        .concat(),
    );
    untrusted.ready().await;
    let mut c = untrusted.client(Some(&t)).await;
    let (code, msg) = code_of(exec(&mut c, &alpha, pb::Runtime::Shell, "echo no").await);
    assert_eq!(code, Code::Unavailable, "{msg}");
    assert!(msg.contains("cannot reach the node agent serving"), "{msg}");

    let mut anonymous = Gateway::start(&cluster, "gateway-anonymous.log", &to_agents);
    anonymous.ready().await;
    let mut c = anonymous.client(Some(&t)).await;
    let (out, _) = exec(&mut c, &alpha, pb::Runtime::Shell, "echo anonymous")
        .await
        .unwrap();
    assert_eq!(out, "anonymous\n");
    // A direct client without a certificate, as a sandbox runner.
    let port = agent.grpc.rsplit(':').next().unwrap();
    let channel = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&ca.pem))
                .domain_name("agent.test"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut direct = AgentComputerClient::with_interceptor(channel, Bearer(Some(t.clone())));
    let (out, _) = exec(&mut direct, &alpha, pb::Runtime::Shell, "echo direct")
        .await
        .unwrap();
    assert_eq!(out, "direct\n");

    for g in [&mut trusted, &mut untrusted, &mut anonymous] {
        g.proc.kill();
    }
    agent.stop().await;
}
