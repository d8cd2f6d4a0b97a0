//! Installing the chart, the first computer, and the upgrade to TLS.

use std::time::Instant;

use anyhow::{Result, ensure};
use serde_json::Value;

use super::*;
use crate::tools::{eventually, text};

/// `helm install` of the chart with the locally built images; the operator,
/// node agent and mounter become Ready, and the node's CSINode lists the
/// driver.
pub(super) fn helm_install(cx: &mut Context) -> Result<String> {
    let start = Instant::now();
    cx.helm_upgrade(&[])?;
    cx.time("helm install --wait", start.elapsed());
    let start = Instant::now();
    cx.wait_release_ready()?;
    cx.time("helm install to every pod Ready", start.elapsed());
    eventually(60, "the CSINode to list agentcomputer.dev", || {
        let nodes = cx.tools.kubectl_json(&["get", "csinodes"])?;
        let listed = nodes["items"].as_array().into_iter().flatten().any(|n| {
            n.pointer("/spec/drivers")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|d| text(d, "/name") == DRIVER))
        });
        Ok(listed.then_some(()))
    })?;
    Ok(String::new())
}

/// `kubectl apply` of the README's example (crds/examples/basic.yaml): the
/// computer becomes Ready and its PVC Bound.
pub(super) fn example_computer(cx: &mut Context) -> Result<String> {
    cx.tools
        .apply(&format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"{NS}\"}}}}"
        ))?
        .ok("kubectl apply of the namespace")?;
    cx.tools
        .kubectl_ok(&["-n", NS, "apply", "-f", "crds/examples/basic.yaml"])?;
    let ready = cx.wait_ready("scratch", 120)?;
    cx.time("kubectl apply to Ready (example computer)", ready);
    let pvc = cx
        .tools
        .kubectl_json(&["-n", NS, "get", "pvc", "scratch-workspace"])?;
    ensure!(
        text(&pvc, "/status/phase") == "Bound",
        "PVC scratch-workspace is {:?}, not Bound",
        text(&pvc, "/status/phase")
    );
    Ok(format!("Ready after {:.1} s", ready.as_secs_f64()))
}

/// `helm upgrade` of the running release to serve the API over TLS (a
/// self-signed certificate made here): the agents restart, the computers
/// keep their files, `kubectl computer` speaks TLS through its
/// port-forward, and the replaced sandbox pod's runner attaches over TLS.
pub(super) fn tls_upgrade(cx: &mut Context) -> Result<String> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let name = "node-agent.agentcomputer.test";
    make_certificates(dir, name)?;
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "delete",
        "secret",
        "agent-tls",
        "--ignore-not-found",
    ])?;
    // A kubernetes.io/tls Secret with the issuing CA beside the pair, as
    // cert-manager writes it.
    let file = |f: &str| format!("--from-file={f}={}", dir.join(f).display());
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "create",
        "secret",
        "generic",
        "agent-tls",
        "--type=kubernetes.io/tls",
        &file("tls.crt"),
        &file("tls.key"),
        &file("ca.crt"),
    ])?;
    // The API gateway's client certificate from the same CA, for mutual
    // TLS once the gateway runs (its step turns it on).
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "delete",
        "secret",
        "gateway-agent-client",
        "--ignore-not-found",
    ])?;
    cx.tools.kubectl_ok(&[
        "-n",
        SYSTEM_NS,
        "create",
        "secret",
        "tls",
        "gateway-agent-client",
        &format!("--cert={}", dir.join("client.crt").display()),
        &format!("--key={}", dir.join("client.key").display()),
    ])?;
    drop(tmp);
    let before = cx.exec("scratch", "shell", "cat s.txt")?;
    let start = Instant::now();
    let server_name = format!("nodeAgent.tls.serverName={name}");
    cx.helm_upgrade(&[
        "--set",
        "nodeAgent.tls.secretName=agent-tls",
        "--set",
        &server_name,
    ])?;
    cx.wait_release_ready()?;
    cx.time("helm upgrade to TLS to every pod Ready", start.elapsed());
    // The credential Secrets carry the CA once the operator reconciled.
    eventually(120, "the credential Secret to carry the agents' CA", || {
        let s = cx
            .tools
            .kubectl_json(&["-n", NS, "get", "secret", "scratch-credential"])?;
        Ok((!text(&s, "/data/ca.crt").is_empty()).then_some(()))
    })?;
    let after = eventually(120, "a shell exec over TLS", || {
        cx.exec("scratch", "shell", "cat s.txt").map(Some)
    })?;
    ensure!(
        after == before,
        "s.txt changed across the upgrade: {before:?} → {after:?}"
    );
    // The sandbox pod is replaced (new agent IP, the CA in its spec); the
    // exec waits for its runner, which attaches over TLS.
    let start = Instant::now();
    let out = eventually(180, "a container exec over TLS", || {
        cx.exec("box", "container", "cat p.txt").map(Some)
    })?;
    ensure!(out == "from-pod\n", "the container read {out:?} from p.txt");
    cx.time(
        "first container exec after the TLS upgrade",
        start.elapsed(),
    );
    let pod = cx
        .tools
        .kubectl_json(&["-n", NS, "get", "pod", "box-sandbox"])?;
    let has_ca = pod
        .pointer("/spec/containers/0/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|e| text(e, "/name") == "AGENTCOMPUTER_AGENT_CA");
    ensure!(
        has_ca,
        "the sandbox pod's runner was not given the agents' CA"
    );
    Ok(String::new())
}

/// Writes `ca.crt`, `tls.crt` and `tls.key` (PEM) into `dir`: a CA made
/// here and a P-256 server certificate for DNS name
/// `name` that it signs; and `client.crt`, `client.key`: a client
/// certificate it signs (the API gateway's, for mutual TLS).
pub(super) fn make_certificates(dir: &std::path::Path, name: &str) -> Result<()> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "agentcomputer e2e CA");
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(vec![name.to_string()])?;
    leaf.distinguished_name.push(DnType::CommonName, name);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    std::fs::write(dir.join("ca.crt"), ca_cert.pem())?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, "agentcomputer-gateway");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate()?;
    let cert = client.signed_by(&key, &issuer)?;
    std::fs::write(dir.join("client.crt"), cert.pem())?;
    std::fs::write(dir.join("client.key"), key.serialize_pem())?;
    Ok(())
}
