//! Steps where the operator's objects meet the cluster's own validation
//! and admission: an allow-all computer's NetworkPolicy, a resize of a
//! bound claim followed by a narrower egress, and a reconcile that fails
//! on purpose and must say so. They use the web server the egress step
//! starts (pod `web`, port 8080).

use std::time::Instant;

use anyhow::{Result, bail, ensure};
use serde_json::{Value, json};

use super::{Context, NS};
use crate::tools::{condition, eventually, text};

/// The web pod's `ip:port`, bracketed for IPv6.
fn web_address(cx: &Context) -> Result<String> {
    let web = cx.tools.kubectl_json(&["-n", NS, "get", "pod", "web"])?;
    let ip = text(&web, "/status/podIP").to_string();
    ensure!(
        !ip.is_empty(),
        "the web pod has no IP (the egress step starts it)"
    );
    Ok(if ip.contains(':') {
        format!("[{ip}]:8080")
    } else {
        format!("{ip}:8080")
    })
}

fn curl(address: &str) -> String {
    format!("curl -sS --max-time 5 http://{address}/")
}

/// Waits until computer `name` shows `Reconciled` with `status` ("True" or
/// "False"); returns the computer.
fn wait_reconciled(cx: &Context, name: &str, status: &str, secs: u64) -> Result<Value> {
    eventually(secs, &format!("{name} to show Reconciled={status}"), || {
        let c = cx.computer(name)?;
        let generation_done =
            c.pointer("/status/observedGeneration") == c.pointer("/metadata/generation");
        let done = condition(&c, "Reconciled") == status && (status == "False" || generation_done);
        Ok(done.then_some(c))
    })
}

/// An allow-all computer is Ready (the API server accepts its
/// NetworkPolicy); its sandbox reaches the web server while the cloud
/// metadata address is refused to it and to the shell.
pub fn allow_all(cx: &mut Context) -> Result<String> {
    let web = web_address(cx)?;
    cx.apply_computer(
        "open",
        json!({"storage": {"size": "64Mi"},
               "runtimes": {"shell": true, "javascript": true, "container": true},
               "sandbox": {"image": cx.sandbox_image()},
               "egress": {"mode": "allow-all"}}),
    )?;
    cx.wait_ready("open", 180)?;
    wait_reconciled(cx, "open", "True", 60)?;
    let out = eventually(
        60,
        "the allow-all sandbox to reach the web pod",
        || match cx.exec("open", "container", &curl(&web)) {
            Err(e) if format!("{e:#}").contains("not connected") => Err(e),
            other => Ok(Some(other)),
        },
    )??;
    ensure!(out == "egress-ok\n", "the container got {out:?}");
    for runtime in ["container", "shell"] {
        let md = cx.exec_output("open", runtime, &curl("169.254.169.254"))?;
        ensure!(
            md.code != 0 && !md.stdout.contains("egress-ok"),
            "{runtime} reached the metadata address: exit {}, {:?}",
            md.code,
            md.stdout
        );
    }
    Ok(String::new())
}

/// A computer with a sandbox allowed to the web pod is resized (its claim
/// is bound by the cluster, so the API server refuses to resize the claim),
/// then narrowed to deny-all: the sandbox is cut off within 10 s.
pub fn resize_then_deny(cx: &mut Context) -> Result<String> {
    let web = web_address(cx)?;
    let ip_cidr = {
        let ip = web.trim_end_matches(":8080").trim_matches(['[', ']']);
        if ip.contains(':') {
            format!("{ip}/128")
        } else {
            format!("{ip}/32")
        }
    };
    let spec = |size: &str, egress: Value| {
        json!({"storage": {"size": size},
               "runtimes": {"shell": true, "javascript": true, "container": true},
               "sandbox": {"image": cx.sandbox_image()},
               "egress": egress})
    };
    let allowed =
        json!({"mode": "allow-list", "cidrs": [{"cidr": ip_cidr, "ports": [{"port": 8080}]}]});
    cx.apply_computer("grown", spec("64Mi", allowed.clone()))?;
    cx.wait_ready("grown", 180)?;
    eventually(90, "the sandbox of grown to reach the web pod", || {
        let out = cx.exec_output("grown", "container", &curl(&web))?;
        Ok((out.code == 0 && out.stdout == "egress-ok\n").then_some(()))
    })?;
    eventually(60, "the claim of grown to be bound", || {
        let pvc = cx
            .tools
            .kubectl_json(&["-n", NS, "get", "pvc", "grown-workspace"])?;
        Ok((text(&pvc, "/status/phase") == "Bound").then_some(()))
    })?;
    cx.apply_computer("grown", spec("128Mi", allowed))?;
    wait_reconciled(cx, "grown", "True", 60)?;
    cx.apply_computer("grown", spec("128Mi", json!({"mode": "deny-all"})))?;
    let start = Instant::now();
    eventually(10, "the sandbox of grown to be cut off", || {
        let out = cx.exec_output("grown", "container", &curl(&web))?;
        Ok((out.code != 0 && !out.stdout.contains("egress-ok")).then_some(()))
    })?;
    Ok(format!(
        "cut off {:.1} s after the change",
        start.elapsed().as_secs_f64()
    ))
}

/// A reconcile that fails (a ValidatingAdmissionPolicy freezing the
/// computer's claim) shows as `Reconciled=False` with the reason in
/// `kubectl describe` and a Warning event; once lifted, it recovers.
pub fn failed_reconcile_visible(cx: &mut Context) -> Result<String> {
    cx.apply_computer("frozen", json!({"storage": {"size": "64Mi"}}))?;
    cx.wait_ready("frozen", 180)?;
    let policy = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": "e2e-freeze-claims"},
         "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["persistentvolumeclaims"]}]},
            "validations": [{"expression": "object.metadata.name != 'frozen-workspace'",
                "message": "claims of frozen are frozen by the e2e policy", "reason": "Forbidden"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": "e2e-freeze-claims"},
         "spec": {"policyName": "e2e-freeze-claims", "validationActions": ["Deny"]}}]});
    cx.tools
        .apply(&policy.to_string())?
        .ok("kubectl apply of the freezing policy")?;
    // The API server takes a policy in asynchronously: wait until it
    // refuses a (dry-run) change of the claim before changing the spec.
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let probe = cx.tools.kubectl(&[
            "-n",
            NS,
            "annotate",
            "pvc",
            "frozen-workspace",
            "e2e-probe=1",
            "--overwrite",
            "--dry-run=server",
        ])?;
        if probe.code != 0 && probe.stderr.contains("frozen by the e2e policy") {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the freezing policy did not take effect within 30 s: {}",
            probe.stderr.trim()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Any change makes the operator reconcile (and fail) at once.
    cx.apply_computer(
        "frozen",
        json!({"storage": {"size": "64Mi"}, "egress": {"mode": "allow-all"}}),
    )?;
    let result = (|| -> Result<()> {
        let c = wait_reconciled(cx, "frozen", "False", 60)?;
        let describe = cx
            .tools
            .kubectl_ok(&["-n", NS, "describe", "agentcomputer", "frozen"])?;
        ensure!(
            describe.contains("claims of frozen are frozen"),
            "kubectl describe does not show the reason: {describe}"
        );
        ensure!(
            c.pointer("/status/observedGeneration") != c.pointer("/metadata/generation"),
            "observedGeneration moved although the reconcile failed"
        );
        let events = cx.tools.kubectl_ok(&[
            "-n",
            NS,
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=frozen",
            "-o",
            "custom-columns=T:.type,R:.reason",
        ])?;
        if !events
            .lines()
            .any(|l| l.contains("Warning") && l.contains("Forbidden"))
        {
            bail!("no Warning event of the failure: {events}");
        }
        let exec = cx.exec_output("frozen", "shell", "true")?;
        ensure!(
            exec.code != 0 && exec.stderr.contains("Reconciled=False"),
            "kubectl computer exec does not name the failure: {:?}",
            exec.stderr
        );
        Ok(())
    })();
    for kind in [
        "validatingadmissionpolicybinding",
        "validatingadmissionpolicy",
    ] {
        cx.tools
            .kubectl_ok(&["delete", kind, "e2e-freeze-claims"])?;
    }
    result?;
    wait_reconciled(cx, "frozen", "True", 60)?;
    cx.wait_ready("frozen", 60)?;
    Ok(String::new())
}
