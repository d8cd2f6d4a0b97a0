//! How the real `kubectl-computer` binary authenticates to a node agent
//! (served in-process on an ephemeral loopback port): it finds the agent
//! token by itself, is refused without it or with a wrong one, another user
//! cannot read it, and it speaks TLS with a private CA.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

mod common;

/// The CLI's view of an in-process agent.
struct Server(common::Agent);

impl std::ops::Deref for Server {
    type Target = common::Agent;
    fn deref(&self) -> &common::Agent {
        &self.0
    }
}

impl Server {
    fn start(data: &Path, tls: Option<tonic::transport::ServerTlsConfig>) -> Server {
        Server(common::Agent::start(data, tls, false))
    }

    fn http(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The CLI against `url` with nothing about credentials from this
/// environment: `HOME` and `XDG_DATA_HOME` point to `home`.
fn cli(url: &str, home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.env("AGENTCOMPUTER_ENDPOINT", url)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("AGENTCOMPUTER_CA_CERT")
        .env_remove("AGENTCOMPUTER_TLS_SERVER_NAME")
        .env_remove("AGENTCOMPUTER_DATA_DIR");
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: std::io::Result<Output>) -> String {
    let out = out.expect("run kubectl-computer");
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Asserts exit status 1 and a one-line error; returns it.
fn fails(out: std::io::Result<Output>) -> String {
    let out = out.expect("run kubectl-computer");
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn the_cli_finds_the_token_of_the_default_data_directory() {
    let home = tempfile::tempdir().unwrap();
    // Where node-agent local puts it without --data-dir: XDG_DATA_HOME.
    let data = home.path().join(".local/share/agentcomputer");
    let server = Server::start(&data, None);
    let url = server.http();

    assert!(ok(cli(&url, home.path()).args(["create", "demo"]).output()).contains("demo"));
    assert!(ok(cli(&url, home.path()).arg("list").output()).contains("demo"));
    // `localhost` is this machine too.
    let by_name = format!("http://localhost:{}", server.addr.port());
    assert!(ok(cli(&by_name, home.path()).arg("list").output()).contains("demo"));

    // AGENTCOMPUTER_DATA_DIR names another data directory: its token.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = Server::start(elsewhere.path(), None);
    let out = cli(&other.http(), home.path())
        .env("AGENTCOMPUTER_DATA_DIR", elsewhere.path())
        .arg("list")
        .output();
    assert_eq!(ok(out).lines().count(), 1, "only the header");

    // --token and AGENTCOMPUTER_TOKEN_FILE come first.
    let token = std::fs::read_to_string(data.join("token")).unwrap();
    let file = home.path().join("token-copy");
    std::fs::write(&file, &token).unwrap();
    let nowhere = home.path().join("nowhere");
    let out = cli(&url, &nowhere)
        .env("AGENTCOMPUTER_TOKEN_FILE", &file)
        .arg("list")
        .output();
    assert!(ok(out).contains("demo"));
    let out = cli(&url, &nowhere)
        .args(["--token", token.trim(), "list"])
        .output();
    assert!(ok(out).contains("demo"));
    let out = cli(&url, &nowhere)
        .env("AGENTCOMPUTER_TOKEN", token.trim())
        .env("AGENTCOMPUTER_TOKEN_FILE", home.path().join("missing"))
        .arg("list")
        .output();
    assert!(ok(out).contains("demo"));
}

#[test]
fn without_the_right_token_the_agent_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, None);
    let url = server.http();
    // No token anywhere.
    let empty = dir.path().join("empty");
    let err = fails(cli(&url, &empty).args(["create", "demo"]).output());
    assert!(
        err.starts_with("error: this node agent needs its agent token: kubectl-computer reads"),
        "{err}"
    );
    // A wrong one.
    let err = fails(
        cli(&url, &empty)
            .args(["--token", &"0".repeat(64), "list"])
            .output(),
    );
    assert!(err.starts_with("error: wrong agent token"), "{err}");
    let err = fails(
        cli(&url, &empty)
            .env("AGENTCOMPUTER_TOKEN_FILE", empty.join("t"))
            .arg("list")
            .output(),
    );
    assert_eq!(
        err,
        format!(
            "error: cannot read token file {} (AGENTCOMPUTER_TOKEN_FILE): no such file or directory\n",
            empty.join("t").display()
        )
    );
    // Nothing was created by the refused calls.
    let out = cli(&url, &empty)
        .env("AGENTCOMPUTER_DATA_DIR", &data)
        .arg("list")
        .output();
    assert_eq!(ok(out).lines().count(), 1);
}

/// The data directory is private to the agent's user: another local user
/// (`nobody`) cannot read the token, and the CLI says so in one line.
#[test]
fn another_user_cannot_read_the_token() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: running the CLI as another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, None);
    // A copy of the CLI that `nobody` may run, and a home it may use.
    let shared = tempfile::tempdir().unwrap();
    let exe = shared.path().join("kubectl-computer");
    std::fs::copy(env!("CARGO_BIN_EXE_kubectl-computer"), &exe).unwrap();
    for p in [shared.path(), dir.path(), &exe] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let as_nobody = |extra: &[(&str, &Path)]| {
        let mut cmd = Command::new(&exe);
        cmd.env_clear()
            .env("AGENTCOMPUTER_ENDPOINT", server.http())
            .env("AGENTCOMPUTER_DATA_DIR", &data)
            .env("HOME", shared.path())
            .arg("list")
            .uid(65534)
            .gid(65534);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.output()
    };
    let token = data.join("token");
    let err = fails(as_nobody(&[]));
    assert_eq!(
        err,
        format!(
            "error: no token readable at {}: permission denied — the agent belongs to another user\n",
            token.display()
        )
    );
    let err = fails(as_nobody(&[("AGENTCOMPUTER_TOKEN_FILE", &token)]));
    assert_eq!(
        err,
        format!(
            "error: no token readable at {}: permission denied\n",
            token.display()
        )
    );
    // Its owner gets through.
    let out = cli(&server.http(), dir.path())
        .env("AGENTCOMPUTER_DATA_DIR", &data)
        .arg("list")
        .output();
    ok(out);
}

#[test]
fn the_cli_speaks_tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ca = TestCa::new("agentcomputer test CA");
    let (cert_pem, key_pem) = ca.issue(&["localhost"]);
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, cert_pem).unwrap();
    std::fs::write(&key, key_pem).unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let tls = agentcomputer_node_agent::tls::server_tls(&cert, &key, None).unwrap();
    let server = Server::start(&data, Some(tls));
    let url = format!("https://localhost:{}", server.addr.port());
    let with_token = |cmd: &mut Command| {
        cmd.env("AGENTCOMPUTER_DATA_DIR", &data);
    };

    let mut cmd = cli(&url, dir.path());
    with_token(&mut cmd);
    let out = cmd
        .args(["--ca-cert", ca_file.to_str().unwrap(), "create", "demo"])
        .output();
    assert!(ok(out).contains("demo"));
    let mut cmd = cli(&url, dir.path());
    with_token(&mut cmd);
    let out = cmd
        .env("AGENTCOMPUTER_CA_CERT", &ca_file)
        .args(["exec", "demo", "--", "echo over tls"])
        .output();
    assert_eq!(ok(out), "over tls\n");

    // Without the CA: the platform's roots do not know it.
    let mut cmd = cli(&url, dir.path());
    with_token(&mut cmd);
    let err = fails(cmd.arg("list").output());
    assert_eq!(
        err,
        format!(
            "error: cannot connect to node agent at {url}: the agent's TLS certificate is not signed by a trusted certificate authority (pass the CA's certificate with --ca-cert PEM or AGENTCOMPUTER_CA_CERT)\n"
        )
    );
    // Another CA of the same name does not do either.
    let impostor = TestCa::new("agentcomputer test CA");
    let impostor_file = dir.path().join("impostor.crt");
    std::fs::write(&impostor_file, &impostor.pem).unwrap();
    let mut cmd = cli(&url, dir.path());
    with_token(&mut cmd);
    let err = fails(
        cmd.env("AGENTCOMPUTER_CA_CERT", &impostor_file)
            .arg("list")
            .output(),
    );
    assert!(
        err.contains("not signed by a trusted certificate authority"),
        "{err}"
    );
    // The certificate names localhost, not 127.0.0.1.
    let by_ip = format!("https://{}", server.addr);
    let mut cmd = cli(&by_ip, dir.path());
    with_token(&mut cmd);
    let err = fails(
        cmd.env("AGENTCOMPUTER_CA_CERT", &ca_file)
            .arg("list")
            .output(),
    );
    assert_eq!(
        err,
        format!(
            "error: cannot connect to node agent at {by_ip}: the agent's TLS certificate is not valid for host 127.0.0.1\n"
        )
    );
    // With the name the certificate holds, as `port-forward` prints it for
    // an agent serving TLS behind a local address.
    let mut cmd = cli(&by_ip, dir.path());
    with_token(&mut cmd);
    let out = cmd
        .env("AGENTCOMPUTER_CA_CERT", &ca_file)
        .args([
            "--tls-server-name",
            "localhost",
            "exec",
            "demo",
            "--",
            "echo by name",
        ])
        .output();
    assert_eq!(ok(out), "by name\n");
    let mut cmd = cli(&by_ip, dir.path());
    with_token(&mut cmd);
    let err = fails(
        cmd.env("AGENTCOMPUTER_CA_CERT", &ca_file)
            .env("AGENTCOMPUTER_TLS_SERVER_NAME", "other.example")
            .arg("list")
            .output(),
    );
    assert_eq!(
        err,
        format!(
            "error: cannot connect to node agent at {by_ip}: the agent's TLS certificate is not valid for host other.example\n"
        )
    );
    // Plain http:// to the TLS port.
    let http_url = format!("http://localhost:{}", server.addr.port());
    let mut cmd = cli(&http_url, dir.path());
    with_token(&mut cmd);
    let err = fails(cmd.arg("list").output());
    assert!(
        err.ends_with("if the agent serves TLS, use an https:// endpoint\n"),
        "{err}"
    );
    // A CA file without a certificate.
    let mut cmd = cli(&url, dir.path());
    with_token(&mut cmd);
    let err = fails(cmd.env("AGENTCOMPUTER_CA_CERT", &key).arg("list").output());
    assert_eq!(
        err,
        format!(
            "error: no certificate (-----BEGIN CERTIFICATE-----) in CA certificate file {}\n",
            key.display()
        )
    );
    // https:// to an agent serving plain HTTP/2.
    let plain_data = dir.path().join("plain");
    let plain = Server::start(&plain_data, None);
    let plain_url = format!("https://localhost:{}", plain.addr.port());
    let err = fails(
        cli(&plain_url, dir.path())
            .env("AGENTCOMPUTER_CA_CERT", &ca_file)
            .arg("list")
            .output(),
    );
    assert!(
        err.starts_with(&format!(
            "error: cannot connect to node agent at {plain_url}: "
        )),
        "{err}"
    );
}

/// A certificate authority made at test time.
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf certificate for `names`: (certificate PEM, key PEM).
    fn issue(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
