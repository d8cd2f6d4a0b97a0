//! The real `kubectl-computer` binary in cluster mode against a real
//! kube-apiserver and etcd (operator/tests/support), with the CRD installed
//! and no operator: the test writes the status the operator would.
//!
//! Reaching a node agent through `pods/portforward` needs a kubelet, which
//! this control plane has not; the end-to-end suite covers that path. Here
//! every step before it is checked: the computer's readiness, its Secret,
//! the choice of the agent pod, and the API server's refusals.

#[path = "../../operator/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agentcomputer_crds::{AgentComputer, ComputerSnapshot, EgressMode, SourceKind};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::json;
use support::{Cluster, SYSTEM_NS, eventually};

/// Identity of the operator's token in the test control plane: used here as
/// a user whose rights the test grants.
const LIMITED_USER: &str = "system:serviceaccount:agentcomputer-system:ac-agent-computer-operator";

/// Runs the CLI as a user of `kubeconfig` would: nothing else in its
/// environment points it at an agent.
struct Cli {
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Cli {
    fn new(kubeconfig: &Path) -> Cli {
        Cli {
            kubeconfig: kubeconfig.to_path_buf(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path())
            .env("AGENTCOMPUTER_DATA_DIR", self.home.path().join("data"))
            .env_remove("AGENTCOMPUTER_ENDPOINT")
            .env_remove("AGENTCOMPUTER_TOKEN")
            .env_remove("AGENTCOMPUTER_TOKEN_FILE")
            .env_remove("AGENTCOMPUTER_CA_CERT")
            .env_remove("AGENTCOMPUTER_AGENT_NAMESPACE")
            .env_remove("XDG_DATA_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).spawn().unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Asserts failure with `status` and a one-line stderr; returns that line.
fn fails_with(out: Output, status: i32) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(status),
        "stdout: {}\nstderr: {stderr}",
        text(&out.stdout)
    );
    if status == 1 {
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
    stderr
}

fn fails(out: Output) -> String {
    fails_with(out, 1)
}

async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [AgentComputer::crd(), ComputerSnapshot::crd()] {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    for name in [
        "agentcomputers.agentcomputer.dev",
        "computersnapshots.agentcomputer.dev",
    ] {
        established(&crds, name).await;
    }
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &'static str) {
    eventually(30, "the CRD to be established", || {
        let crds = crds.clone();
        async move {
            let crd = crds.get(name).await.ok()?;
            let conditions = crd.status?.conditions?;
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        }
    })
    .await;
}

/// Writes `status` as the operator would (status subresource).
async fn set_status(api: &Api<AgentComputer>, name: &str, status: serde_json::Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn condition(t: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
    json!({"type": t, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// Waits for `child` to end, at most `secs`.
fn wait_child(mut child: Child, secs: u64) -> Output {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the CLI did not end within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_against_a_real_apiserver() {
    if support::skipped() {
        return;
    }
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    let cli = Cli::new(&cluster.kubeconfig);
    let err = fails(cli.run(&["list"]));
    assert_eq!(
        err,
        "error: this cluster does not serve AgentComputers (agentcomputer.dev/v1alpha1): \
         install the chart charts/agent-computer\n"
    );
    install_crd(&admin).await;
    support::create_namespace(&admin, "team").await;
    support::create_namespace(&admin, SYSTEM_NS).await;

    create_list_delete(&cli, &admin).await;
    snapshots(&cli, &admin).await;
    refusals(&cli).await;
    waiting(&cli, &admin).await;
    mode_rule(&cluster, &cli);
    routing(&cluster, &cli, &admin).await;
}

/// In a cluster `snapshot` makes a ComputerSnapshot object and waits for
/// the operator to take it (the test writes its status as the operator
/// would), names are unique in the namespace (the API server's
/// AlreadyExists), `snapshots` lists the computer's, `create --from
/// snapshot/S` and `fork` make AgentComputers with `spec.source` and the
/// source computer's spec, and `delete-snapshot` deletes the object.
async fn snapshots(cli: &Cli, admin: &Client) {
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), "default");
    let snaps: Api<ComputerSnapshot> = Api::namespaced(admin.clone(), "default");
    ok(cli.run(&[
        "create",
        "origin",
        "--quota",
        "300Mi",
        "--max-inodes",
        "777",
        "--wait=false",
    ]));

    let taking = cli.spawn(&["snapshot", "origin", "s1"]);
    eventually(30, "the ComputerSnapshot s1", || {
        let snaps = snaps.clone();
        async move { snaps.get_opt("s1").await.ok().flatten() }
    })
    .await;
    let s1 = snaps.get("s1").await.unwrap();
    assert_eq!(s1.spec.computer, "origin");
    snaps
        .patch_status(
            "s1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "readyToUse": true, "time": "2026-01-02T03:04:05Z", "position": 7,
                "size": "3Mi", "sizeBytes": 3 << 20,
                "conditions": [condition("Ready", "True", "Taken", "")],
            }})),
        )
        .await
        .unwrap();
    let out = ok(wait_child(taking, 60));
    assert!(
        out.starts_with("snapshot s1 of origin taken in ")
            && out.contains("(position 7, 3 MiB; ComputerSnapshot default/s1)"),
        "{out}"
    );
    // A second snapshot of that name in the namespace is the API server's
    // AlreadyExists.
    let err = fails(cli.run(&["snapshot", "origin", "s1"]));
    assert!(err.contains("already exists"), "{err}");
    // A snapshot that fails says why.
    let failing = cli.spawn(&["snapshot", "origin", "s2"]);
    eventually(30, "the ComputerSnapshot s2", || {
        let snaps = snaps.clone();
        async move { snaps.get_opt("s2").await.ok().flatten() }
    })
    .await;
    snaps
        .patch_status(
            "s2",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "readyToUse": false,
                "conditions": [condition("Ready", "False", "NoBackupStore", "the node agents have no backup store")],
            }})),
        )
        .await
        .unwrap();
    let out = wait_child(failing, 60);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "snapshot s2 of origin failed: NoBackupStore: the node agents have no backup store"
        ),
        "{err}"
    );
    let table = ok(cli.run(&["snapshots", "origin"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("READY"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("s1 ") && lines[1].contains("3 MiB") && lines[1].ends_with("true"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("s2 ") && lines[2].trim_end().ends_with("false"),
        "{table}"
    );

    // From the snapshot, and a fork: spec.source and the source's spec.
    let out = ok(cli.run(&["create", "copy", "--from", "snapshot/s1", "--wait=false"]));
    assert!(
        out.starts_with("computer copy created (quota 300 MiB, 777 inodes"),
        "{out}"
    );
    let copy = computers.get("copy").await.unwrap();
    let source = copy.spec.source.as_ref().unwrap();
    assert_eq!(
        (source.kind, source.name.as_str()),
        (SourceKind::ComputerSnapshot, "s1")
    );
    assert_eq!(copy.spec.storage.size.0, "300Mi");
    assert_eq!(copy.spec.storage.max_inodes, Some(777));
    let forking = cli.spawn(&["fork", "origin", "forked"]);
    eventually(30, "the AgentComputer forked", || {
        let computers = computers.clone();
        async move { computers.get_opt("forked").await.ok().flatten() }
    })
    .await;
    let forked = computers.get("forked").await.unwrap();
    let source = forked.spec.source.as_ref().unwrap();
    assert_eq!(
        (source.kind, source.name.as_str()),
        (SourceKind::AgentComputer, "origin")
    );
    set_status(
        &computers,
        "forked",
        json!({"phase": "Ready", "conditions": [condition("Ready", "True", "Ready", "")]}),
    )
    .await;
    let out = ok(wait_child(forking, 60));
    assert!(out.starts_with("computer forked created"), "{out}");
    let err = fails(cli.run(&["create", "x", "--from", "snapshot/nope", "--wait=false"]));
    assert!(
        err.contains("snapshot nope not found in namespace default"),
        "{err}"
    );
    let err = fails(cli.run(&["create", "x", "--from", "file:demo.db", "--wait=false"]));
    assert!(err.contains("in a cluster give snapshot/NAME"), "{err}");

    // delete-snapshot checks whose it is, then deletes the object.
    let err = fails(cli.run(&["delete-snapshot", "copy", "s1"]));
    assert!(
        err.contains("snapshot s1 is of computer origin, not copy"),
        "{err}"
    );
    assert_eq!(
        ok(cli.run(&["delete-snapshot", "origin", "s1"])),
        "deleted snapshot s1 of origin\n"
    );
    assert!(snaps.get_opt("s1").await.unwrap().is_none());
    for name in ["origin", "copy", "forked"] {
        ok(cli.run(&["delete", name, "--wait=false"]));
    }
    let _ = snaps.delete("s2", &Default::default()).await;
}

/// create maps its flags to the spec, list shows the resources as the local
/// table, namespaces separate them, delete removes them.
async fn create_list_delete(cli: &Cli, admin: &Client) {
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), "default");
    let out = ok(cli.run(&[
        "create",
        "demo",
        "--quota",
        "500Mi",
        "--max-inodes",
        "5000",
        "--allow-host",
        "pypi.org",
        "--allow-cidr",
        "10.0.0.0/8:443",
        "--runtime",
        "shell,container",
        "--sandbox-image",
        "debian:bookworm-slim",
        "--wait=false",
    ]));
    assert_eq!(
        out,
        "computer demo created (quota 500 MiB, 5000 inodes, egress allow-list: 1 host, 1 cidr)\n"
    );
    let demo = api.get("demo").await.unwrap();
    let spec = &demo.spec;
    assert_eq!(spec.storage.size.0, "500Mi");
    assert_eq!(spec.storage.max_inodes, Some(5000));
    assert_eq!(spec.egress.mode, EgressMode::AllowList);
    assert_eq!(spec.egress.hosts, ["pypi.org"]);
    assert_eq!(spec.egress.cidrs[0].cidr, "10.0.0.0/8");
    assert_eq!(spec.egress.cidrs[0].ports[0].port, 443);
    assert!(spec.runtimes.shell && !spec.runtimes.javascript && spec.runtimes.container);
    assert_eq!(spec.sandbox.as_ref().unwrap().image, "debian:bookworm-slim");

    // Defaults: 10Gi, the node agent's inode default, deny-all.
    let out = ok(cli.run(&["create", "plain", "--wait=false"]));
    assert_eq!(
        out,
        "computer plain created (quota 10 GiB, 2621440 inodes, egress deny-all)\n"
    );
    let plain = api.get("plain").await.unwrap();
    assert_eq!(plain.spec.storage.size.0, "10Gi");
    assert_eq!(plain.spec.storage.max_inodes, None);

    // Before the node agent reports usage: dashes.
    let table = ok(cli.run(&["list"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("NAME")
            && lines[0].contains(" BACKUP ")
            && lines[0].ends_with("CREATED"),
        "{table}"
    );
    let demo_line: Vec<&str> = lines[1].split_whitespace().collect();
    // Usage, state and backup age all dashes: nothing reported yet.
    assert_eq!(
        &demo_line[..8],
        ["demo", "-", "500", "MiB", "-", "-", "-", "-"],
        "{table}"
    );
    assert!(
        demo_line[8].ends_with('Z'),
        "RFC 3339 creation time: {table}"
    );
    assert!(lines[2].starts_with("plain "), "{table}");

    // The node agent's usage and the operator's phase.
    set_status(
        &api,
        "demo",
        json!({"phase": "Ready", "volume": {"bytesUsed": 3 << 20, "inodesUsed": 12, "diskBytes": 5 << 20}}),
    )
    .await;
    let table = ok(cli.run(&["list"]));
    let demo_line: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &demo_line[..9],
        ["demo", "3", "MiB", "500", "MiB", "5", "MiB", "12", "Ready"],
        "{table}"
    );

    // -n picks the namespace (and the cluster).
    ok(cli.run(&["-n", "team", "create", "other", "--wait=false"]));
    let team = ok(cli.run(&["list", "--namespace", "team"]));
    assert!(team.lines().nth(1).unwrap().starts_with("other "), "{team}");
    assert_eq!(team.lines().count(), 2, "{team}");
    assert!(!ok(cli.run(&["list"])).contains("other"));

    // delete waits until gone; the name is then free.
    assert_eq!(
        ok(cli.run(&["delete", "plain"])),
        "computer plain deleted\n"
    );
    assert!(api.get_opt("plain").await.unwrap().is_none());
    let err = fails(cli.run(&["delete", "plain"]));
    assert_eq!(
        err,
        "error: computer plain not found in namespace default\n"
    );
    ok(cli.run(&["-n", "team", "delete", "other"]));

    // A finalizer keeps it: delete waits, says so at its timeout, and
    // --wait=false does not wait.
    api.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["agentcomputer.dev/volume"]}})),
    )
    .await
    .unwrap();
    let err = fails(cli.run(&["delete", "demo", "--timeout", "1s"]));
    assert!(
        err.contains("computer demo is still being deleted after 1s"),
        "{err}"
    );
    assert_eq!(
        ok(cli.run(&["delete", "demo", "--wait=false"])),
        "computer demo deleted\n"
    );
    let child = cli.spawn(&["delete", "demo", "--timeout", "30s"]);
    // Time for the CLI to start and send its delete.
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    // Deleting a computer already being deleted is not an error; the wait
    // ends when the finalizer goes.
    assert_eq!(ok(wait_child(child, 30)), "computer demo deleted\n");
    assert!(api.get_opt("demo").await.unwrap().is_none());
}

/// Bad names and quotas get the API server's or the CLI's message.
async fn refusals(cli: &Cli) {
    let err = fails(cli.run(&["create", "Bad_Name", "--wait=false"]));
    assert!(
        err.contains("Bad_Name") && err.contains("RFC 1123"),
        "the API server's name rule: {err}"
    );
    let long = "a".repeat(53);
    let err = fails(cli.run(&["create", &long, "--wait=false"]));
    assert!(
        err.contains("at most 52 characters"),
        "the CRD's rule: {err}"
    );
    let err = fails(cli.run(&["create", "tiny", "--quota", "1k", "--wait=false"]));
    assert!(
        err.contains("storage.size must be a quantity of at least 1Mi"),
        "the CRD's rule: {err}"
    );
    let err = fails_with(cli.run(&["create", "x", "--quota", "10XB"]), 2);
    assert!(
        err.contains("unknown size suffix"),
        "the CLI's parser: {err}"
    );
    let err = fails(cli.run(&["create", "x", "--runtime", "container", "--wait=false"]));
    assert!(err.contains("spec.sandbox"), "the CRD's rule: {err}");

    ok(cli.run(&["create", "dup", "--wait=false"]));
    let err = fails(cli.run(&["create", "dup", "--wait=false"]));
    assert!(err.contains("already exists"), "{err}");
    ok(cli.run(&["delete", "dup"]));

    let err = fails(cli.run(&["mount", "dup", "/tmp/nowhere"]));
    assert!(err.contains("mount works in local mode only"), "{err}");
    let err = fails(cli.run(&["ls", "nothere"]));
    assert_eq!(
        err,
        "error: computer nothere not found in namespace default\n"
    );
}

/// create waits for the Ready condition and, when it does not come, names
/// the condition that holds it.
async fn waiting(cli: &Cli, admin: &Client) {
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), "default");
    let exists = |name: &'static str| {
        let api = api.clone();
        move || {
            let api = api.clone();
            async move { api.get_opt(name).await.ok().flatten().map(|_| ()) }
        }
    };

    let child = cli.spawn(&["create", "stuck", "--timeout", "4s"]);
    eventually(10, "stuck to be created", exists("stuck")).await;
    set_status(
        &api,
        "stuck",
        json!({"phase": "Pending", "conditions": [
            condition("Placed", "False", "NoEligibleNode", "0/1 nodes are eligible: 1 no published capacity"),
            condition("Ready", "False", "NotPlaced", "not placed"),
        ]}),
    )
    .await;
    let err = fails(wait_child(child, 30));
    assert_eq!(
        err,
        "error: computer stuck is not Ready after 4s: Pending: Placed=False NoEligibleNode: \
         0/1 nodes are eligible: 1 no published capacity; it was created, see kubectl \
         describe agentcomputer stuck -n default\n"
    );

    // No node has room for the quota: the wait ends as soon as the operator
    // says so, long before the timeout, and the computer stays to be
    // placed when a node with room comes.
    let child = cli.spawn(&["create", "huge", "--quota", "1Ti", "--timeout", "300s"]);
    eventually(10, "huge to be created", exists("huge")).await;
    let said = std::time::Instant::now();
    set_status(
        &api,
        "huge",
        json!({"phase": "Pending", "conditions": [
            condition("Placed", "False", "NoNodeHasRoom", "0/2 nodes are eligible: 2 no room for 1Ti (90Gi free)"),
            condition("Ready", "False", "NotPlaced", "not placed"),
        ]}),
    )
    .await;
    let err = fails(wait_child(child, 60));
    assert!(
        said.elapsed() < Duration::from_secs(30),
        "{:?}",
        said.elapsed()
    );
    assert_eq!(
        err,
        "error: computer huge cannot be placed now: Pending: Placed=False NoNodeHasRoom: \
         0/2 nodes are eligible: 2 no room for 1Ti (90Gi free); it was created and stays \
         Pending: the operator places it when a node with room for it appears (or room is \
         freed); delete it to give up (kubectl describe agentcomputer huge -n default)\n"
    );
    assert!(
        api.get_opt("huge").await.unwrap().is_some(),
        "the computer stays"
    );

    // No operator at all.
    let err = fails(cli.run(&["create", "lonely", "--timeout", "1s"]));
    assert!(
        err.contains("no status yet (is the operator running?)"),
        "{err}"
    );

    let child = cli.spawn(&["create", "quick", "--timeout", "30s"]);
    eventually(10, "quick to be created", exists("quick")).await;
    set_status(
        &api,
        "quick",
        json!({"phase": "Ready", "conditions": [condition("Ready", "True", "Ready", "")]}),
    )
    .await;
    let out = ok(wait_child(child, 30));
    assert!(out.starts_with("computer quick created"), "{out}");
    for name in ["stuck", "huge", "lonely", "quick"] {
        ok(cli.run(&["delete", name]));
    }
}

/// Which mode the binary picks from the files on the machine.
fn mode_rule(cluster: &Cluster, cli: &Cli) {
    ok(cli.run(&["create", "here", "--wait=false"]));
    // KUBECONFIG unset: ~/.kube/config counts.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".kube")).unwrap();
    std::fs::copy(&cluster.kubeconfig, home.path().join(".kube/config")).unwrap();
    let data = home.path().join("data");
    let run = |extra: &[&str], args: &[&str]| {
        let mut cmd = cli.command(args);
        cmd.env_remove("KUBECONFIG")
            .env("HOME", home.path())
            .env("AGENTCOMPUTER_DATA_DIR", &data);
        for pair in extra.chunks(2) {
            cmd.env(pair[0], pair[1]);
        }
        cmd.output().unwrap()
    };
    let listed_here = |out: &Output| text(&out.stdout).contains("\nhere ");
    assert!(listed_here(&run(&[], &["list"])), "~/.kube/config: cluster");

    // A local agent's token file makes local the default...
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("token"), "0".repeat(64)).unwrap();
    // When the local agent's port is free, stand in for the agent to see the
    // CLI come; otherwise some agent serves it and must not list "here".
    let stand_in = std::net::TcpListener::bind("127.0.0.1:7433").ok().map(|l| {
        l.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if l.accept().is_ok() {
                    return true; // and the connection closes
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        })
    });
    let local = run(&[], &["list"]);
    assert!(!listed_here(&local), "token file: local");
    if let Some(stand_in) = stand_in {
        assert!(
            stand_in.join().unwrap(),
            "the CLI connected to the local agent"
        );
        let err = text(&local.stderr);
        assert!(!local.status.success(), "the stand-in closes at once");
        assert!(!err.contains("namespace"), "not the cluster: {err}");
    }
    // ...unless the cluster is asked for.
    for flags in [&["--kube"][..], &["-n", "default"], &["--context", "test"]] {
        let args: Vec<&str> = flags.iter().copied().chain(["list"]).collect();
        assert!(listed_here(&run(&[], &args)), "{flags:?}: cluster");
    }
    let err = fails(run(&[], &["--context", "nope", "list"]));
    assert!(err.contains("nope"), "unknown context: {err}");

    // --endpoint beats the machine's files.
    let err = fails(run(&[], &["--endpoint", "http://127.0.0.1:1", "list"]));
    assert!(err.contains("http://127.0.0.1:1"), "direct: {err}");
    // An explicit --kube beats AGENTCOMPUTER_ENDPOINT.
    assert!(
        listed_here(&run(
            &["AGENTCOMPUTER_ENDPOINT", "http://127.0.0.1:1"],
            &["--kube", "list"],
        )),
        "--kube: cluster"
    );
    // A namespace with an endpoint is refused.
    let err = fails(run(
        &[],
        &["--endpoint", "http://127.0.0.1:1", "-n", "default", "list"],
    ));
    assert!(err.contains("has no meaning"), "{err}");
    let err = fails(run(
        &["AGENTCOMPUTER_ENDPOINT", "http://127.0.0.1:1"],
        &["port-forward", "here"],
    ));
    assert!(
        err.contains("port-forward works in cluster mode only"),
        "{err}"
    );
    ok(cli.run(&["delete", "here"]));
}

/// File commands find the computer's credential and a ready agent pod on
/// its node, and say in one line what is missing.
async fn routing(cluster: &Cluster, cli: &Cli, admin: &Client) {
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), "default");
    ok(cli.run(&["create", "work", "--wait=false"]));
    let err = fails(cli.run(&["ls", "work"]));
    assert_eq!(
        err,
        "error: computer work is not Ready: no status yet (is the operator running?)\n"
    );
    set_status(
        &api,
        "work",
        json!({"phase": "Ready", "node": "node-a", "credentialSecret": "work-credential",
               "conditions": [condition("Ready", "True", "Ready", "")]}),
    )
    .await;
    let err = fails(cli.run(&["exec", "work", "--", "true"]));
    assert_eq!(
        err,
        "error: cannot read the credential Secret default/work-credential: secrets \"work-credential\" not found\n"
    );
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    let secret = serde_json::from_value(json!({
        "metadata": {"name": "work-credential"},
        "stringData": {"token": "ab".repeat(32)}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let no_agent = "error: no ready node agent on node node-a (pods labelled \
                    app.kubernetes.io/name=agentcomputer-node-agent in namespace agentcomputer-system)\n";
    assert_eq!(fails(cli.run(&["cat", "work", "x"])), no_agent);

    // An agent pod on another node, and one on node-a that is not ready.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM_NS);
    for (name, node) in [("agent-b", "node-b"), ("agent-a", "node-a")] {
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "agentcomputer-node-agent"}},
            "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "agent"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let ready = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}})),
            )
            .await
            .unwrap();
        }
    };
    ready("agent-b").await;
    assert_eq!(fails(cli.run(&["cat", "work", "x"])), no_agent);
    assert_eq!(fails(cli.run(&["port-forward", "work"])), no_agent);

    // Ready on node-a: the CLI asks the API server for a port-forward,
    // which needs that node's kubelet (there is none here).
    ready("agent-a").await;
    let err = fails(cli.run(&["ls", "work"]));
    assert!(
        err.starts_with("error: port-forward to node agent pod agent-a: "),
        "{err}"
    );
    let err = fails(cli.run(&["port-forward", "work"]));
    assert!(
        err.starts_with("error: port-forward to node agent pod agent-a: "),
        "{err}"
    );

    // A user who may read the computer, its Secret and the agent pods but
    // not forward to them gets the API server's refusal.
    let read = |ns: &str, rules: serde_json::Value| {
        let (roles, bindings): (Api<Role>, Api<RoleBinding>) = (
            Api::namespaced(admin.clone(), ns),
            Api::namespaced(admin.clone(), ns),
        );
        let role =
            serde_json::from_value(json!({"metadata": {"name": "cli"}, "rules": rules})).unwrap();
        let binding = serde_json::from_value(json!({
            "metadata": {"name": "cli"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cli"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": LIMITED_USER}]
        }))
        .unwrap();
        async move {
            roles.create(&PostParams::default(), &role).await.unwrap();
            bindings
                .create(&PostParams::default(), &binding)
                .await
                .unwrap();
        }
    };
    read(
        "default",
        json!([
            {"apiGroups": ["agentcomputer.dev"], "resources": ["agentcomputers"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        ]),
    )
    .await;
    read(
        SYSTEM_NS,
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
    )
    .await;
    let limited = Cli::new(&cluster.operator_kubeconfig);
    let err = eventually(10, "the RBAC rules to apply", || {
        let out = limited.run(&["ls", "work"]);
        async move {
            let err = text(&out.stderr);
            err.contains("pods/portforward").then_some(err)
        }
    })
    .await;
    assert!(
        err.starts_with(
            "error: RBAC forbids pods/portforward: pods \"agent-a\" is forbidden: User \""
        ) && err.contains("cannot get resource \"pods/portforward\""),
        "{err}"
    );
    let err = fails(limited.run(&["port-forward", "work"]));
    assert!(
        err.starts_with("error: RBAC forbids pods/portforward: "),
        "{err}"
    );
    let err = fails(limited.run(&["delete", "work"]));
    assert!(
        err.contains("cannot delete resource \"agentcomputers\""),
        "{err}"
    );
    credentials(cli, &limited, admin).await;
    ok(cli.run(&["delete", "work"]));
}

/// `credentials` prints the gateway's address (given, or announced by its
/// Service), the computer's name there and its token, as shell
/// assignments, JSON or a private file.
async fn credentials(cli: &Cli, limited: &Cli, admin: &Client) {
    use k8s_openapi::api::core::v1::Service;
    let token = "ab".repeat(32);
    let err = fails(cli.run(&["credentials", "work"]));
    assert_eq!(
        err,
        "error: no API gateway runs in namespace agentcomputer-system (the chart's gateway.enabled; \
         --agent-namespace names the release's namespace); pass --gateway URL\n"
    );
    let out = ok(cli.run(&[
        "credentials",
        "work",
        "--gateway",
        "https://gw.example.com/",
    ]));
    assert_eq!(
        out,
        format!(
            "export AGENTCOMPUTER_ENDPOINT='https://gw.example.com'\nexport AGENTCOMPUTER_COMPUTER='default/work'\nexport AGENTCOMPUTER_TOKEN='{token}'\n"
        )
    );
    // The address the chart's Service announces.
    let services: Api<Service> = Api::namespaced(admin.clone(), SYSTEM_NS);
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "ac-agent-computer-gateway",
                     "labels": {"app.kubernetes.io/name": "agentcomputer-gateway"},
                     "annotations": {"agentcomputer.dev/gateway-url": "https://agents.example.com"}},
        "spec": {"ports": [{"name": "api", "port": 443}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    // The same label and annotation in another namespace collect nothing.
    let decoy: Api<Service> = Api::namespaced(admin.clone(), "team");
    let fake = serde_json::from_value(json!({
        "metadata": {"name": "decoy",
                     "labels": {"app.kubernetes.io/name": "agentcomputer-gateway"},
                     "annotations": {"agentcomputer.dev/gateway-url": "https://attacker.example"}},
        "spec": {"ports": [{"name": "api", "port": 443}]}
    }))
    .unwrap();
    decoy.create(&PostParams::default(), &fake).await.unwrap();
    let out = ok(cli.run(&["credentials", "work", "-o", "json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        json!({"endpoint": "https://agents.example.com", "computer": "default/work", "token": token})
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("work.env");
    assert_eq!(
        ok(cli.run(&["credentials", "work", "--file", file.to_str().unwrap()])),
        ""
    );
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&file).unwrap().contains(&token));
    // A user who may read the Secret but not list Services names the
    // gateway itself.
    let err = fails(limited.run(&["credentials", "work"]));
    assert!(
        err.starts_with("error: cannot look for the API gateway's Service: ")
            && err.ends_with("; pass --gateway URL\n"),
        "{err}"
    );
    let out = ok(limited.run(&["credentials", "work", "--gateway", "http://10.0.0.1:7443"]));
    assert!(out.contains(&token), "{out}");
    let err = fails(cli.run(&["credentials", "nosuch", "--gateway", "http://x"]));
    assert_eq!(
        err,
        "error: computer nosuch not found in namespace default\n"
    );
}
