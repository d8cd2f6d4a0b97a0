//! Egress of every runtime against servers in a network namespace this
//! test makes: the agent runs in that namespace too (its own mount
//! namespace binds a test `/etc/hosts` over the real one, so the system
//! resolver the policy engine uses maps the test host names), and the
//! container's proxy, the shell's `curl` and JavaScript's `fetch` must
//! reach exactly what the policy admits, with the same decisions.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Test host names, mapped in the agent's `/etc/hosts`.
const HOSTS: &str = "127.0.0.1 localhost
10.203.0.1 allowed.test
10.203.0.2 other.test
169.254.169.254 meta.allowed.test
127.0.0.1 lo.allowed.test
";

/// A network namespace held by a `sleep` process; killed on drop.
struct Netns {
    holder: Child,
}

impl Netns {
    fn new() -> Netns {
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "600"])
            .spawn()
            .expect("unshare");
        // Wait until the holder is in its own namespace.
        let mine = std::fs::read_link("/proc/self/ns/net").unwrap();
        let path = format!("/proc/{}/ns/net", holder.id());
        for _ in 0..500 {
            if std::fs::read_link(&path).is_ok_and(|l| l != mine) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let ns = Netns { holder };
        ns.ip(&["link", "set", "lo", "up"]);
        for a in ["10.203.0.1/32", "10.203.0.2/32", "10.203.0.3/32"] {
            ns.ip(&["addr", "add", a, "dev", "lo"]);
        }
        ns
    }

    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.holder.id())
    }

    /// Another namespace joined to this one by a veth pair: this side
    /// gets `10.204.0.1/24` (an address of the agent's host that is not
    /// loopback), the peer `10.204.0.2/24` (another machine).
    fn peer(&self) -> Netns {
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "600"])
            .spawn()
            .expect("unshare");
        let mine = std::fs::read_link("/proc/self/ns/net").unwrap();
        let path = format!("/proc/{}/ns/net", holder.id());
        for _ in 0..500 {
            if std::fs::read_link(&path).is_ok_and(|l| l != mine) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let peer = Netns { holder };
        let pid = peer.holder.id().to_string();
        self.ip(&[
            "link", "add", "ac-node", "type", "veth", "peer", "name", "ac-peer", "netns", &pid,
        ]);
        self.ip(&["addr", "add", "10.204.0.1/24", "dev", "ac-node"]);
        self.ip(&["link", "set", "ac-node", "up"]);
        peer.ip(&["link", "set", "lo", "up"]);
        peer.ip(&["addr", "add", "10.204.0.2/24", "dev", "ac-peer"]);
        peer.ip(&["link", "set", "ac-peer", "up"]);
        peer
    }

    fn ip(&self, args: &[&str]) {
        let st = Command::new("nsenter")
            .arg(format!("--net={}", self.path()))
            .arg("--")
            .arg("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    }

    /// Runs `f` on a thread inside the namespace (sockets made there stay
    /// in it).
    fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = self.path();
        std::thread::spawn(move || {
            let ns = std::fs::File::open(path).unwrap();
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// An HTTP server on `addr` inside `ns` answering `server-NAME`, or a
/// redirect to `http://10.203.0.2/` on `/redirect`; counts connections.
fn serve(ns: &Netns, addr: &str, name: &'static str) -> Arc<AtomicUsize> {
    let addr: SocketAddr = addr.parse().unwrap();
    let listener = ns.inside(move || std::net::TcpListener::bind(addr).unwrap());
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).into_owned();
                let reply = if head.starts_with("GET /redirect ") {
                    "HTTP/1.1 302 Found\r\nlocation: http://10.203.0.2/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
                } else {
                    let body = format!("server-{name}\n");
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    count
}

/// A gRPC client sending `token` whose connections are made inside `ns`.
async fn client_in(ns: &Netns, url: &str, token: String) -> Client {
    let path = ns.path();
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect_with_connector(tower::service_fn(move |uri: http::Uri| {
            let path = path.clone();
            async move {
                let addr = format!("{}:{}", uri.host().unwrap(), uri.port_u16().unwrap());
                let stream = std::thread::spawn(move || {
                    let ns = std::fs::File::open(path)?;
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
                    std::net::TcpStream::connect(addr)
                })
                .join()
                .unwrap()?;
                stream.set_nonblocking(true)?;
                let stream = tokio::net::TcpStream::from_std(stream)?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect in the namespace");
    AgentComputerClient::with_interceptor(channel, Bearer(Some(token)))
}

/// What a runtime got from a URL: the server that answered, or refused.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Server(String),
    Refused,
}

fn got(stdout: &str) -> Got {
    match stdout.trim().strip_prefix("server-") {
        Some(name) if !name.contains('\n') => Got::Server(name.to_string()),
        _ => Got::Refused,
    }
}

async fn in_container(c: &mut Client, computer: &str, curl_args: &str) -> (Got, Ran) {
    let r = run(
        c,
        pb::ExecRequest {
            computer: computer.into(),
            runtime: pb::Runtime::Container as i32,
            script: format!("curl -fsSL --max-time 5 {curl_args}"),
            ..Default::default()
        },
    )
    .await;
    (got(&r.stdout), r)
}

async fn in_shell(c: &mut Client, computer: &str, url: &str) -> (Got, Ran) {
    let r = sh(c, computer, &format!("curl -fsSL --max-time 5 '{url}'")).await;
    (got(&r.stdout), r)
}

async fn in_js(c: &mut Client, computer: &str, url: &str) -> (Got, Ran) {
    let src = r#"export default async ({url}) => {
        try { const r = await fetch(url); return r.status === 200 ? await r.text() : `status ${r.status}`; }
        catch (e) { return `error ${e.message}`; }
    }"#;
    let r = run(
        c,
        js_req(
            computer,
            src,
            &serde_json::json!({ "url": url }).to_string(),
        ),
    )
    .await;
    let text: String = serde_json::from_str(&r.result).unwrap_or_default();
    (got(&text), r)
}

/// A `node-agent local` in `ns` with [`HOSTS`] as its `/etc/hosts`, data
/// under `dir`; returns it and its proxy's port (on 127.0.0.1 in `ns`).
fn agent_in(ns: &Netns, dir: &std::path::Path) -> (Agent, u16) {
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, HOSTS).unwrap();
    let data = dir.join("data");
    // A free port in the namespace for the shared proxy listener.
    let proxy_port = ns.inside(|| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    });
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", ns.path()))
        .args([
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
        ])
        .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
        .arg(&hosts)
        .arg(env!("CARGO_BIN_EXE_node-agent"));
    let proxy_addr = format!("127.0.0.1:{proxy_port}");
    let agent = Agent::start_wrapped(cmd, &data, &["--proxy-listen", &proxy_addr]);
    (agent, proxy_port)
}

fn possible() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: network namespaces and the container sandbox need root");
        return false;
    }
    for tool in ["bwrap", "curl", "ip", "nsenter", "unshare"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(tool).is_file());
        if !found {
            eprintln!("SKIPPED: {tool} is not installed");
            return false;
        }
    }
    true
}

#[tokio::test]
async fn every_runtime_gets_the_same_egress_decisions() {
    if !possible() {
        return;
    }
    let ns = Netns::new();
    let s1 = serve(&ns, "10.203.0.1:80", "1");
    let s2 = serve(&ns, "10.203.0.2:80", "2");
    let s3 = serve(&ns, "10.203.0.3:8080", "3");
    let s3_other_port = serve(&ns, "10.203.0.3:80", "3b");

    let dir = tempfile::tempdir().unwrap();
    let (agent, proxy_port) = agent_in(&ns, dir.path());
    let mut c = client_in(&ns, &agent.url, agent.token()).await;

    let listed = pb::Egress {
        mode: pb::EgressMode::AllowList as i32,
        hosts: vec!["allowed.test".into(), "*.allowed.test".into()],
        cidrs: vec![pb::EgressCidr {
            cidr: "10.203.0.3/32".into(),
            ports: vec![pb::EgressPorts {
                port: 8080,
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    c.create_computer(pb::CreateComputerRequest {
        name: "listed".into(),
        egress: Some(listed),
        ..Default::default()
    })
    .await
    .unwrap();

    let server = |n: &str| Got::Server(n.to_string());
    let cases = [
        ("http://allowed.test/", server("1")),
        ("http://10.203.0.3:8080/", server("3")),
        ("http://other.test/", Got::Refused),
        ("http://10.203.0.2/", Got::Refused),
        ("http://10.203.0.3/", Got::Refused),
        // A redirect from an allowed host to a denied address.
        ("http://allowed.test/redirect", Got::Refused),
        // Listed names that resolve to metadata and loopback.
        ("http://meta.allowed.test/", Got::Refused),
        ("http://lo.allowed.test/", Got::Refused),
        // Other spellings of denied addresses.
        ("http://0x0a.203.0.2/", Got::Refused),
        ("http://168544258/", Got::Refused),
        ("http://[::ffff:10.203.0.2]/", Got::Refused),
        ("http://169.254.169.254/latest/meta-data/", Got::Refused),
        ("http://2130706433/", Got::Refused),
    ];
    for (url, want) in &cases {
        let (container, rc) = in_container(&mut c, "listed", &format!("'{url}'")).await;
        let (shell, rs) = in_shell(&mut c, "listed", url).await;
        let (js, rj) = in_js(&mut c, "listed", url).await;
        assert_eq!(&container, want, "container, {url}: {rc:?}");
        assert_eq!(&shell, want, "shell, {url}: {rs:?}");
        assert_eq!(&js, want, "javascript, {url}: {rj:?}");
    }
    // Through a CONNECT tunnel (how HTTPS goes) the same holds.
    let (g, r) = in_container(&mut c, "listed", "-p http://allowed.test/").await;
    assert_eq!(g, server("1"), "{r:?}");
    let (g, r) = in_container(&mut c, "listed", "-p http://10.203.0.2/").await;
    assert_eq!(g, Got::Refused, "{r:?}");
    assert!(r.stderr.contains("403"), "{r:?}");
    // curl drops the 403's body on a CONNECT: the exec names the refusal
    // and the policy's reason itself, once.
    assert_eq!(
        r.stderr
            .matches("egress denied CONNECT 10.203.0.2:80: ")
            .count(),
        1,
        "{r:?}"
    );
    let (_, r) = in_container(&mut c, "listed", "-p http://allowed.test/").await;
    assert!(
        !r.stderr.contains("egress denied"),
        "an earlier refusal shown again: {r:?}"
    );
    // Without the proxy nothing is reachable: there is no route.
    let (g, r) = in_container(&mut c, "listed", "--noproxy '*' http://10.203.0.1/").await;
    assert_eq!(g, Got::Refused, "{r:?}");

    assert_eq!(s2.load(Ordering::SeqCst), 0, "a denied server was reached");
    assert_eq!(
        s3_other_port.load(Ordering::SeqCst),
        0,
        "a denied port was reached"
    );
    assert!(s1.load(Ordering::SeqCst) >= 4 && s3.load(Ordering::SeqCst) == 3);

    // allow-all: everything but metadata and the node's own addresses
    // (loopback, and 10.203.0.2 on the agent's `lo`), still through the
    // proxy; another machine is reached.
    let peer = ns.peer();
    let remote = serve(&peer, "10.204.0.2:80", "remote");
    c.create_computer(pb::CreateComputerRequest {
        name: "open".into(),
        egress: Some(pb::Egress {
            mode: pb::EgressMode::AllowAll as i32,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    for (url, want) in [
        ("http://10.204.0.2/", server("remote")),
        ("http://other.test/", Got::Refused),
        ("http://169.254.169.254/", Got::Refused),
        (&*format!("http://127.0.0.1:{proxy_port}/"), Got::Refused),
    ] {
        let (container, r) = in_container(&mut c, "open", &format!("'{url}'")).await;
        assert_eq!(container, want, "container, {url}: {r:?}");
        let (shell, r) = in_shell(&mut c, "open", url).await;
        assert_eq!(shell, want, "shell, {url}: {r:?}");
    }
    assert_eq!(s2.load(Ordering::SeqCst), 0, "allow-all reached the node");
    assert!(remote.load(Ordering::SeqCst) >= 2);

    // The proxy's own listener is no open proxy: without a running exec's
    // credential it answers 407.
    let answer = ns.inside(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
        s.write_all(b"GET http://10.203.0.1/ HTTP/1.1\r\nhost: 10.203.0.1\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    });
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");

    // The proxy settings reach the container's environment.
    let r = run(
        &mut c,
        pb::ExecRequest {
            computer: "listed".into(),
            runtime: pb::Runtime::Container as i32,
            script: "echo $HTTPS_PROXY | sed 's/:[0-9a-f]*@/:TOKEN@/'; echo $NO_PROXY".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        r.stdout,
        "http://computer:TOKEN@127.0.0.1:3128\nlocalhost,127.0.0.1,::1\n"
    );
    agent.stop().await;
}

/// The node's own addresses are the node's, like its loopback: a service
/// bound to every interface of the agent's host (here `0.0.0.0:8081` in
/// the agent's namespace) is not reached under allow-all through any of
/// its addresses, by any runtime, while another machine is; a CIDR rule
/// naming the address reaches it.
#[tokio::test]
async fn allow_all_keeps_the_nodes_own_addresses_out() {
    if !possible() {
        return;
    }
    let ns = Netns::new();
    let peer = ns.peer();
    let node_service = serve(&ns, "0.0.0.0:8081", "node");
    let remote = serve(&peer, "10.204.0.2:80", "remote");
    let dir = tempfile::tempdir().unwrap();
    let (agent, _) = agent_in(&ns, dir.path());
    let mut c = client_in(&ns, &agent.url, agent.token()).await;

    let create = |name: &str, egress: pb::Egress| pb::CreateComputerRequest {
        name: name.into(),
        egress: Some(egress),
        ..Default::default()
    };
    c.create_computer(create(
        "open",
        pb::Egress {
            mode: pb::EgressMode::AllowAll as i32,
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let server = |n: &str| Got::Server(n.to_string());
    for (url, want) in [
        ("http://10.204.0.2/", server("remote")),
        // The agent's veth address, and its spellings.
        ("http://10.204.0.1:8081/", Got::Refused),
        ("http://[::ffff:10.204.0.1]:8081/", Got::Refused),
        ("http://0x0a.204.0.1:8081/", Got::Refused),
        // An address on the agent's `lo` that is not in 127.0.0.0/8.
        ("http://10.203.0.3:8081/", Got::Refused),
        ("http://other.test:8081/", Got::Refused),
        ("http://127.0.0.1:8081/", Got::Refused),
    ] {
        let (container, rc) = in_container(&mut c, "open", &format!("'{url}'")).await;
        let (shell, rs) = in_shell(&mut c, "open", url).await;
        let (js, rj) = in_js(&mut c, "open", url).await;
        assert_eq!(container, want, "container, {url}: {rc:?}");
        assert_eq!(shell, want, "shell, {url}: {rs:?}");
        assert_eq!(js, want, "javascript, {url}: {rj:?}");
        if want == Got::Refused {
            assert!(
                rs.stderr.contains("egress denied by policy"),
                "shell, {url}: {rs:?}"
            );
        }
    }
    let (_, r) = in_shell(&mut c, "open", "http://10.204.0.1:8081/").await;
    assert!(
        r.stderr
            .contains("10.204.0.1:8081 is an address of this node"),
        "{r:?}"
    );
    let (_, r) = in_container(&mut c, "open", "-p http://10.204.0.1:8081/").await;
    assert!(r.stderr.contains("403"), "CONNECT to the node: {r:?}");
    assert!(
        r.stderr.contains("egress denied CONNECT 10.204.0.1:8081: ")
            && r.stderr.contains("is an address of this node"),
        "CONNECT to the node: {r:?}"
    );
    assert_eq!(
        node_service.load(Ordering::SeqCst),
        0,
        "allow-all reached a service of the node"
    );
    assert!(remote.load(Ordering::SeqCst) >= 3);

    // A rule naming the address reaches it, from every runtime.
    c.create_computer(create(
        "named",
        pb::Egress {
            mode: pb::EgressMode::AllowList as i32,
            cidrs: vec![pb::EgressCidr {
                cidr: "10.204.0.1/32".into(),
                ports: vec![pb::EgressPorts {
                    port: 8081,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let url = "http://10.204.0.1:8081/";
    let (container, rc) = in_container(&mut c, "named", &format!("'{url}'")).await;
    let (shell, rs) = in_shell(&mut c, "named", url).await;
    let (js, rj) = in_js(&mut c, "named", url).await;
    assert_eq!(container, server("node"), "container: {rc:?}");
    assert_eq!(shell, server("node"), "shell: {rs:?}");
    assert_eq!(js, server("node"), "javascript: {rj:?}");
    assert_eq!(node_service.load(Ordering::SeqCst), 3);
    agent.stop().await;
}
