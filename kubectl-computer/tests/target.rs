//! Which target the real binary picks when flags and the environment
//! disagree: `--local`, `--kube` and `--context` beat
//! `AGENTCOMPUTER_ENDPOINT`, and `-n` with an endpoint is refused.

use std::process::{Command, Output, Stdio};

mod common;

/// The CLI with `AGENTCOMPUTER_ENDPOINT` set to `url`, the agent's data
/// directory for its token, and no kubeconfig anywhere.
fn cli(url: &str, data: &std::path::Path, home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-computer"))
        .env("AGENTCOMPUTER_ENDPOINT", url)
        .env("AGENTCOMPUTER_DATA_DIR", data)
        .env("HOME", home)
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn explicit_flags_beat_the_endpoint_variable_and_a_namespace_needs_a_cluster() {
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let agent = common::Agent::start(data.path(), None, false);
    let run = |args: &[&str]| cli(&agent.url, data.path(), home.path(), args);

    // The variable alone: that agent.
    let out = run(&["create", "via-env", "--quota", "1Mi"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["list"]);
    assert!(text(&out.stdout).contains("via-env"), "{out:?}");

    // --kube and --context: the cluster (there is no kubeconfig here, so it
    // fails), never the agent of the variable.
    for flags in [&["--kube"][..], &["--context", "prod"]] {
        let args: Vec<&str> = flags.iter().copied().chain(["list"]).collect();
        let out = run(&args);
        assert!(!out.status.success(), "{flags:?}: {out:?}");
        assert!(!text(&out.stdout).contains("via-env"), "{flags:?}: {out:?}");
        assert!(
            !text(&out.stderr).contains(&agent.url),
            "{flags:?}: {out:?}"
        );
    }
    // --local: the agent on this machine's default address, not the
    // variable's (whatever answers at 127.0.0.1:7433 does not hold via-env).
    let out = run(&["--local", "list"]);
    assert!(!text(&out.stdout).contains("via-env"), "{out:?}");
    assert!(!text(&out.stderr).contains(&agent.url), "{out:?}");

    // -n with the variable and no cluster flag: refused, saying why.
    let out = run(&["-n", "team", "list"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: -n/--namespace team has no meaning with AGENTCOMPUTER_ENDPOINT {}: a node agent reached directly \
             has no namespaces; leave out -n, or choose the cluster with --kube\n",
            agent.url
        )
    );
    // ...and with --endpoint.
    let out = run(&["--endpoint", &agent.url, "-n", "team", "list"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!(
            "-n/--namespace team has no meaning with --endpoint {}",
            agent.url
        )),
        "{out:?}"
    );
    // -n with an endpoint and a command naming a computer: the name is
    // sent as NS/NAME (an API gateway's form; this local agent has no
    // namespaces and says the name is not one of its).
    let out = run(&[
        "--endpoint",
        &agent.url,
        "-n",
        "team",
        "exec",
        "x",
        "--",
        "true",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("\"team/x\""), "{out:?}");
    // -n with --kube ignores the variable: the cluster.
    let out = run(&["--kube", "-n", "team", "list"]);
    assert!(!out.status.success());
    assert!(!text(&out.stderr).contains("has no meaning"), "{out:?}");
    // --endpoint with a flag naming another target: the parser refuses.
    for other in ["--local", "--kube"] {
        let out = run(&["--endpoint", &agent.url, other, "list"]);
        assert!(!out.status.success(), "{other}");
        assert!(
            text(&out.stderr).contains("cannot be used with"),
            "{other}: {out:?}"
        );
    }
}
