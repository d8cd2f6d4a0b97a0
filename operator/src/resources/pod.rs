//! The sandbox pod of the container runtime: the computer's PVC mounted at
//! /workspace, restricted Pod Security Standard settings (runAsNonRoot, all
//! capabilities dropped, seccomp RuntimeDefault, no privilege escalation —
//! see "Pod Security Standards", restricted profile), no service account
//! token, resources from `spec.sandbox.resources`. The scheduler places it on
//! the serving node through the PV's node affinity.
//!
//! With a runner image (the node agent's image, operator flag
//! `--runner-image`) and a known node agent, the pod runs the container
//! runtime's runner: an init container copies the static
//! `agentcomputer-runner` from that image into an `emptyDir`, mounted
//! read-only at [`RUNNER_DIR`] in the sandbox container, whose command
//! becomes `agentcomputer-runner serve`. The runner dials the node agent
//! (`AGENTCOMPUTER_AGENT`, the computer's `status.endpoint`) as the
//! computer (`AGENTCOMPUTER_COMPUTER`, its uid) with the computer's token
//! (`AGENTCOMPUTER_TOKEN`, from the credential Secret's `token` key) and
//! runs the container execs the agent sends it. `spec.sandbox.command` is
//! then not used (the runner is the main process); without a runner the
//! pod runs that command, `sleep infinity` by default, and container execs
//! cannot reach it.

use agentcomputer_crds::{
    AgentComputer, NODE_AGENT_GRPC_PORT, NODE_AGENT_PROXY_PORT, SANDBOX_GID, SANDBOX_UID as UID,
    SandboxSpec,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SeccompProfile, SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::secret::TOKEN_KEY;
use super::{child_labels, owner, pod_name, pvc_name, secret_name};

/// Where the sandbox container sees the runner (read-only `emptyDir`).
pub const RUNNER_DIR: &str = "/agentcomputer";
/// The runner executable in the node agent's image (on its `PATH`).
pub const RUNNER_EXE: &str = "agentcomputer-runner";
/// Name of the init container that installs the runner.
pub const RUNNER_INIT: &str = "install-runner";
/// Name of the `emptyDir` volume holding the runner.
const RUNNER_VOLUME: &str = "agentcomputer-runner";

/// uid the sandbox runs as ([`agentcomputer_crds::SANDBOX_UID`], which the
/// PV also hands to the node agent).
pub const SANDBOX_UID: i64 = UID as i64;
/// gid the sandbox runs as, also its fsGroup ([`agentcomputer_crds::SANDBOX_GID`]).
pub const SANDBOX_GROUP: i64 = SANDBOX_GID as i64;

/// `ip:port`, with brackets for IPv6.
fn host_port(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

fn var(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value),
        value_from: None,
    }
}

/// The restricted container security context every container of the pod
/// gets (no privilege escalation, all capabilities dropped, seccomp
/// RuntimeDefault, non-root).
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// What the pod needs to run the container runtime's runner.
#[derive(Debug, Clone, Copy)]
pub struct Runner<'a> {
    /// The image carrying `agentcomputer-runner` (the node agent's).
    pub image: &'a str,
    /// The computer's `status.credentialHash`, put into the sandbox's
    /// environment as `AGENTCOMPUTER_CREDENTIAL_HASH`: the token reaches
    /// the runner as an environment variable, read once at start, so a
    /// rotated token changes the pod's spec, which makes the operator
    /// replace the pod (pod specs are immutable) and the new runner
    /// start with the new token.
    pub credential_hash: Option<&'a str>,
    /// Trust for the agent's TLS certificate (`AGENTCOMPUTER_AGENT_CA`,
    /// `AGENTCOMPUTER_AGENT_TLS_NAME`); None when the agents serve
    /// plaintext.
    pub tls: Option<&'a crate::context::AgentTls>,
}

/// Builds the pod. `agent_ip` is the address of the serving node agent
/// (the cluster IP of the node-local agent Service, or the agent pod's IP;
/// see [`crate::context::Config::agent_service`]): the pod
/// gets HTTP(S)_PROXY pointing at it when the egress policy lists host
/// names (with `proxy_credential`, the computer's `status.credentialHash`,
/// as the proxy credential), and, with `runner`, the runner dialing it
/// (module docs).
pub fn build(
    c: &AgentComputer,
    sandbox: &SandboxSpec,
    agent_ip: Option<&str>,
    proxy_credential: Option<&str>,
    runner: Option<Runner<'_>>,
) -> Pod {
    let proxy = agent_ip;
    let mut env = vec![
        EnvVar {
            name: "AGENTCOMPUTER_NAME".into(),
            value: Some(c.name_any()),
            value_from: None,
        },
        EnvVar {
            name: "HOME".into(),
            value: Some("/workspace".into()),
            value_from: None,
        },
    ];
    // The node agent's proxy knows the computer by its credential's
    // fingerprint (the hex of `status.credentialHash`), sent as the proxy
    // URL's password (Proxy-Authorization: Basic). The fingerprint opens
    // the proxy only, under this computer's own egress policy; the API
    // refuses it (it hashes what it is given). So the token itself never
    // reaches the sandbox's processes, and a rotated token changes the URL,
    // which replaces the pod.
    let fingerprint = proxy_credential.and_then(|h| h.strip_prefix("sha256:"));
    if let (Some(ip), Some(fingerprint)) = (
        proxy.filter(|_| !c.spec.egress.hosts.is_empty()),
        fingerprint,
    ) {
        let url = format!(
            "http://computer:{fingerprint}@{}",
            host_port(ip, NODE_AGENT_PROXY_PORT)
        );
        for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.push(EnvVar {
                name: k.into(),
                value: Some(url.clone()),
                value_from: None,
            });
        }
        for k in ["NO_PROXY", "no_proxy"] {
            env.push(EnvVar {
                name: k.into(),
                value: Some("localhost,127.0.0.1,::1".into()),
                value_from: None,
            });
        }
    }
    let mut volumes = vec![Volume {
        name: "workspace".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc_name(c),
            read_only: Some(false),
        }),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "workspace".into(),
        mount_path: "/workspace".into(),
        ..Default::default()
    }];
    let mut init = None;
    let command = match (agent_ip, runner) {
        (
            Some(ip),
            Some(Runner {
                image,
                credential_hash,
                tls,
            }),
        ) => {
            env.push(var(
                "AGENTCOMPUTER_AGENT",
                host_port(ip, NODE_AGENT_GRPC_PORT),
            ));
            env.push(var("AGENTCOMPUTER_COMPUTER", c.uid().unwrap_or_default()));
            env.push(EnvVar {
                name: "AGENTCOMPUTER_TOKEN".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret_name(c),
                        key: TOKEN_KEY.into(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
            });
            if let Some(hash) = credential_hash {
                env.push(var("AGENTCOMPUTER_CREDENTIAL_HASH", hash.to_string()));
            }
            if let Some(tls) = tls {
                env.push(var("AGENTCOMPUTER_AGENT_CA", tls.ca_pem.clone()));
                env.push(var("AGENTCOMPUTER_AGENT_TLS_NAME", tls.server_name.clone()));
            }
            volumes.push(Volume {
                name: RUNNER_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: None,
                    // The runner is a few MiB.
                    size_limit: Some(Quantity("64Mi".into())),
                }),
                ..Default::default()
            });
            mounts.push(VolumeMount {
                name: RUNNER_VOLUME.into(),
                mount_path: RUNNER_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            });
            let small = Quantity("32Mi".into());
            init = Some(vec![Container {
                name: RUNNER_INIT.into(),
                image: Some(image.to_string()),
                command: Some(vec![RUNNER_EXE.into(), "install".into(), RUNNER_DIR.into()]),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        [
                            ("cpu".to_string(), Quantity("10m".into())),
                            ("memory".to_string(), small.clone()),
                        ]
                        .into(),
                    ),
                    limits: Some([("memory".to_string(), small)].into()),
                    ..Default::default()
                }),
                volume_mounts: Some(vec![VolumeMount {
                    name: RUNNER_VOLUME.into(),
                    mount_path: RUNNER_DIR.into(),
                    ..Default::default()
                }]),
                security_context: Some(SecurityContext {
                    read_only_root_filesystem: Some(true),
                    ..restricted()
                }),
                ..Default::default()
            }]);
            vec![format!("{RUNNER_DIR}/{RUNNER_EXE}"), "serve".into()]
        }
        _ => sandbox
            .command
            .clone()
            .unwrap_or_else(|| vec!["sleep".into(), "infinity".into()]),
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(c)),
            namespace: c.namespace(),
            labels: Some(child_labels(c, "sandbox")),
            owner_references: Some(owner(c)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            restart_policy: Some("Always".into()),
            node_selector: c.spec.node_selector.clone(),
            tolerations: c.spec.tolerations.clone(),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(SANDBOX_UID),
                run_as_group: Some(SANDBOX_GROUP),
                fs_group: Some(SANDBOX_GROUP),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "sandbox".into(),
                image: Some(sandbox.image.clone()),
                command: Some(command),
                working_dir: Some("/workspace".into()),
                env: Some(env),
                resources: sandbox.resources.clone(),
                volume_mounts: Some(mounts),
                security_context: Some(restricted()),
                ..Default::default()
            }],
            init_containers: init,
            volumes: Some(volumes),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_crds::{AgentComputerSpec, StorageSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn computer() -> AgentComputer {
        let mut c = AgentComputer::new(
            "c1",
            AgentComputerSpec {
                storage: StorageSpec {
                    size: Quantity("1Gi".into()),
                    reclaim_policy: Default::default(),
                    max_inodes: None,
                },
                runtimes: Default::default(),
                sandbox: None,
                egress: Default::default(),
                limits: Default::default(),
                node_selector: None,
                tolerations: None,
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("u-1".into());
        c
    }

    fn sandbox(command: Option<Vec<String>>) -> SandboxSpec {
        SandboxSpec {
            image: "debian:bookworm-slim".into(),
            command,
            resources: None,
            idle_timeout_seconds: 0,
        }
    }

    fn env(pod: &Pod) -> Vec<EnvVar> {
        pod.spec.as_ref().unwrap().containers[0]
            .env
            .clone()
            .unwrap()
    }

    #[test]
    fn with_a_runner_the_pod_runs_it_against_its_agent() {
        let runner = Runner {
            image: "reg/node-agent:1",
            credential_hash: Some("sha256:ab"),
            tls: None,
        };
        let pod = build(
            &computer(),
            &sandbox(Some(vec!["sleep".into(), "1".into()])),
            Some("fd00::7"),
            Some("sha256:ab"),
            Some(runner),
        );
        let spec = pod.spec.as_ref().unwrap();
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("reg/node-agent:1"));
        assert_eq!(
            spec.containers[0].command.as_deref().unwrap(),
            ["/agentcomputer/agentcomputer-runner", "serve"]
        );
        let env = env(&pod);
        let get = |n: &str| env.iter().find(|e| e.name == n).cloned();
        assert_eq!(
            get("AGENTCOMPUTER_AGENT").unwrap().value.as_deref(),
            Some("[fd00::7]:7433")
        );
        assert_eq!(
            get("AGENTCOMPUTER_COMPUTER").unwrap().value.as_deref(),
            Some("u-1")
        );
        assert_eq!(
            get("AGENTCOMPUTER_CREDENTIAL_HASH")
                .unwrap()
                .value
                .as_deref(),
            Some("sha256:ab")
        );
        let token = get("AGENTCOMPUTER_TOKEN").unwrap().value_from.unwrap();
        let key = token.secret_key_ref.unwrap();
        assert_eq!(
            (key.name.as_str(), key.key.as_str()),
            ("c1-credential", "token")
        );
        // A rotated token changes the spec (and so replaces the pod).
        let rotated = build(
            &computer(),
            &sandbox(None),
            Some("fd00::7"),
            Some("sha256:cd"),
            Some(Runner {
                credential_hash: Some("sha256:cd"),
                ..runner
            }),
        );
        assert_ne!(pod.spec, rotated.spec);
        assert!(get("AGENTCOMPUTER_AGENT_CA").is_none());

        // Agents serving TLS: the runner gets the trust and the name.
        let tls = crate::context::AgentTls {
            ca_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            server_name: "node-agent.agentcomputer-system.svc".into(),
        };
        let with_tls = build(
            &computer(),
            &sandbox(None),
            Some("fd00::7"),
            Some("sha256:ab"),
            Some(Runner {
                tls: Some(&tls),
                ..runner
            }),
        );
        let env = super::tests::env(&with_tls);
        let get = |n: &str| {
            env.iter()
                .find(|e| e.name == n)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(get("AGENTCOMPUTER_AGENT_CA"), Some(tls.ca_pem.clone()));
        assert_eq!(
            get("AGENTCOMPUTER_AGENT_TLS_NAME").as_deref(),
            Some("node-agent.agentcomputer-system.svc")
        );
    }

    #[test]
    fn without_a_runner_or_an_agent_the_command_is_the_specs() {
        let own = Some(vec!["sleep".into(), "1".into()]);
        let runner = Runner {
            image: "reg/node-agent:1",
            credential_hash: None,
            tls: None,
        };
        for pod in [
            build(
                &computer(),
                &sandbox(own.clone()),
                Some("10.0.0.1"),
                None,
                None,
            ),
            build(&computer(), &sandbox(own.clone()), None, None, Some(runner)),
        ] {
            let spec = pod.spec.unwrap();
            assert!(spec.init_containers.is_none());
            assert_eq!(spec.containers[0].command, own);
            assert!(
                !spec.containers[0]
                    .env
                    .as_ref()
                    .unwrap()
                    .iter()
                    .any(|e| e.name.starts_with("AGENTCOMPUTER_AGENT"))
            );
        }
        let default = build(&computer(), &sandbox(None), None, None, None);
        assert_eq!(
            default.spec.unwrap().containers[0]
                .command
                .as_deref()
                .unwrap(),
            ["sleep", "infinity"]
        );
    }
}
