//! The sandbox pod of the container runtime: the computer's PVC mounted at
//! /workspace, restricted Pod Security Standard settings (runAsNonRoot, all
//! capabilities dropped, seccomp RuntimeDefault, no privilege escalation —
//! see "Pod Security Standards", restricted profile), no service account
//! token, resources from `spec.sandbox.resources`. The scheduler places it on
//! the serving node through its own required node affinity
//! (`kubernetes.io/hostname`), or, for a volume made before computers could
//! move, through the PV's.
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
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource,
    Pod, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile, SecretKeySelector,
    SecurityContext, Volume, VolumeMount,
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
/// Name of the sandbox container (the runner, or `spec.sandbox.command`).
pub const SANDBOX_CONTAINER: &str = "sandbox";
/// Name of the `emptyDir` volume holding the runner.
const RUNNER_VOLUME: &str = "agentcomputer-runner";

/// uid the sandbox runs as ([`agentcomputer_crds::SANDBOX_UID`], which the
/// PV also hands to the node agent).
pub const SANDBOX_UID: i64 = UID as i64;
/// gid the sandbox runs as, also its fsGroup ([`agentcomputer_crds::SANDBOX_GID`]).
pub const SANDBOX_GROUP: i64 = SANDBOX_GID as i64;

/// `ip:port`, with brackets for IPv6.
/// Required node affinity to the node whose `kubernetes.io/hostname` is
/// `hostname`.
fn pinned_to_host(hostname: &str) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".into(),
                        operator: "In".into(),
                        values: Some(vec![hostname.into()]),
                    }]),
                    match_fields: None,
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

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
    pin_to: Option<&str>,
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
            affinity: pin_to.map(pinned_to_host),
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
                name: SANDBOX_CONTAINER.into(),
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

/// The runner image `pod` carries: the image of its [`RUNNER_INIT`] init
/// container (what `kubectl get pod -o jsonpath='{.spec.initContainers[0].image}'`
/// shows). None for a pod without a runner.
pub fn runner_image(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == RUNNER_INIT)?
        .image
        .as_deref()
}

/// Keeps the runner of a live pod: when both `existing` and `desired` have
/// a runner and their images differ, `desired` is given the image of
/// `existing`, and the image `desired` named is returned (the newer runner,
/// pending until the pod is next created). None when there is nothing to
/// keep: either pod has no runner, or the images are equal.
///
/// Why: the runner runs from the copy its init container made when the pod
/// started. An init container's image may be changed on a live pod (the
/// API server allows `spec.initContainers[*].image` updates), but the
/// kubelet does not run an init container again once the pod has
/// initialized; it runs them all again, with the images then in the spec,
/// only when it must create the pod sandbox again (Kubernetes v1.36.3,
/// pkg/kubelet/kuberuntime: `computeInitContainerActions` skips completed
/// init containers of an initialized pod; `computePodActions` restarts from
/// the first init container with a new sandbox). Writing the new image into
/// a live pod would make its spec name a runner it does not run, and
/// replacing the pod would kill the sandbox's processes; keeping the image
/// does neither, and the next pod (after an idle stop, a spec change that
/// needs a new pod, a deletion) gets the new runner.
pub fn keep_runner(desired: &mut Pod, existing: &Pod) -> Option<String> {
    let current = runner_image(existing)?.to_string();
    let init = desired
        .spec
        .as_mut()?
        .init_containers
        .as_mut()?
        .iter_mut()
        .find(|c| c.name == RUNNER_INIT)?;
    if init.image.as_deref() == Some(current.as_str()) {
        return None;
    }
    init.image.replace(current)
}

/// Why the node agent refused the runner of `pod`: the sandbox container is
/// not running and ended last with
/// [`agentcomputer_crds::RUNNER_EXIT_INCOMPATIBLE`] (its current state
/// terminated so, or waiting to restart after such a termination). Returns
/// the container's termination message (the runner writes the agent's
/// refusal there) or a generic text. None while the container runs (a
/// runner restarted after a refusal may have attached since) or ended
/// otherwise.
pub fn runner_refused(pod: &Pod) -> Option<String> {
    runner_stopped(
        pod,
        agentcomputer_crds::RUNNER_EXIT_INCOMPATIBLE,
        "the node agent refused the runner's attach protocol",
    )
}

/// Why the sandbox's workspace mount is lost: the sandbox container is not
/// running and ended last with
/// [`agentcomputer_crds::RUNNER_EXIT_WORKSPACE_LOST`] (the runner found the
/// FUSE connection of `/workspace` ended for good). Returns the container's
/// termination message (the runner's "workspace mount lost: ...") or a
/// generic text; None otherwise, as for [`runner_refused`].
pub fn workspace_lost(pod: &Pod) -> Option<String> {
    runner_stopped(
        pod,
        agentcomputer_crds::RUNNER_EXIT_WORKSPACE_LOST,
        "workspace mount lost",
    )
}

/// The termination message of the sandbox container when it is not
/// running and ended last with `code` (its current state terminated so, or
/// waiting to restart after such a termination); `fallback` when it left
/// none.
fn runner_stopped(pod: &Pod, code: i32, fallback: &str) -> Option<String> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == SANDBOX_CONTAINER)?;
    let state = status.state.as_ref()?;
    let ended = match (&state.terminated, &state.waiting) {
        (Some(t), _) => t,
        (None, Some(_)) => status.last_state.as_ref()?.terminated.as_ref()?,
        (None, None) => return None,
    };
    if ended.exit_code != code {
        return None;
    }
    Some(
        ended
            .message
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or(fallback)
            .to_string(),
    )
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
                source: None,
                retention: None,
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
            None,
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
            None,
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
            None,
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
                None,
            ),
            build(
                &computer(),
                &sandbox(own.clone()),
                None,
                None,
                Some(runner),
                None,
            ),
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
        let default = build(&computer(), &sandbox(None), None, None, None, None);
        assert_eq!(
            default.spec.unwrap().containers[0]
                .command
                .as_deref()
                .unwrap(),
            ["sleep", "infinity"]
        );
    }

    fn with_runner(image: &str) -> Pod {
        build(
            &computer(),
            &sandbox(None),
            Some("10.96.0.9"),
            Some("sha256:ab"),
            Some(Runner {
                image,
                credential_hash: Some("sha256:ab"),
                tls: None,
            }),
            None,
        )
    }

    #[test]
    fn a_live_pod_keeps_its_runner_image() {
        let existing = with_runner("reg/node-agent:1");
        let mut desired = with_runner("reg/node-agent:2");
        assert_eq!(runner_image(&desired), Some("reg/node-agent:2"));
        assert_eq!(
            keep_runner(&mut desired, &existing).as_deref(),
            Some("reg/node-agent:2"),
            "the newer image is reported as pending"
        );
        assert_eq!(runner_image(&desired), Some("reg/node-agent:1"));
        // The runner image was the only difference: what is applied equals
        // the live pod, so the API server has nothing to change.
        assert_eq!(desired.spec, existing.spec);
        // Same image: nothing kept, nothing pending.
        let mut same = with_runner("reg/node-agent:1");
        assert_eq!(keep_runner(&mut same, &existing), None);
        assert_eq!(same.spec, existing.spec);
    }

    #[test]
    fn other_changes_stay_with_the_runner_image_kept() {
        let existing = with_runner("reg/node-agent:1");
        // A rotated token (an env change: the API server refuses it, so the
        // pod is replaced and the new one gets the new runner).
        let mut desired = build(
            &computer(),
            &sandbox(None),
            Some("10.96.0.9"),
            Some("sha256:cd"),
            Some(Runner {
                image: "reg/node-agent:2",
                credential_hash: Some("sha256:cd"),
                tls: None,
            }),
            None,
        );
        assert!(keep_runner(&mut desired, &existing).is_some());
        assert_eq!(runner_image(&desired), Some("reg/node-agent:1"));
        assert_ne!(desired.spec, existing.spec, "the token change is kept");
    }

    #[test]
    fn pods_without_a_runner_keep_nothing() {
        let bare = build(&computer(), &sandbox(None), None, None, None, None);
        assert_eq!(runner_image(&bare), None);
        // A pod made before the agent was known gets the runner: no image
        // to keep, the init container is new (and the pod replaced).
        let mut desired = with_runner("reg/node-agent:2");
        assert_eq!(keep_runner(&mut desired, &bare), None);
        assert_eq!(runner_image(&desired), Some("reg/node-agent:2"));
        // A pod losing its runner stays without one.
        let mut no_runner = bare.clone();
        assert_eq!(
            keep_runner(&mut no_runner, &with_runner("reg/node-agent:1")),
            None
        );
        assert_eq!(runner_image(&no_runner), None);
    }

    #[test]
    fn a_refused_runner_is_read_from_the_sandbox_containers_termination() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
            PodStatus,
        };
        let terminated = |code: i32, message: Option<&str>| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                message: message.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        };
        let with_status =
            |name: &str, state: Option<ContainerState>, last: Option<ContainerState>| {
                let mut pod = with_runner("reg/node-agent:1");
                pod.status = Some(PodStatus {
                    container_statuses: Some(vec![ContainerStatus {
                        name: name.into(),
                        state,
                        last_state: last,
                        ..Default::default()
                    }]),
                    ..Default::default()
                });
                pod
            };
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }),
            ..Default::default()
        };
        // Crash-looping after a refusal: the agent's words come through.
        let refused = with_status(
            SANDBOX_CONTAINER,
            Some(waiting.clone()),
            Some(terminated(3, Some("attach protocol 1 is not served\n"))),
        );
        assert_eq!(
            runner_refused(&refused).as_deref(),
            Some("attach protocol 1 is not served")
        );
        // Just ended, no message: a generic text.
        let bare = with_status(SANDBOX_CONTAINER, Some(terminated(3, None)), None);
        assert!(runner_refused(&bare).unwrap().contains("refused"));
        // Other exits, a runner running again (it may have attached), other
        // containers, no status: not a refusal.
        let running = ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        };
        for pod in [
            with_status(
                SANDBOX_CONTAINER,
                Some(waiting.clone()),
                Some(terminated(2, None)),
            ),
            with_status(SANDBOX_CONTAINER, Some(running), Some(terminated(3, None))),
            with_status(RUNNER_INIT, Some(terminated(3, None)), None),
            with_runner("reg/node-agent:1"),
        ] {
            assert_eq!(runner_refused(&pod), None);
        }
        // A lost workspace is its own status, not a refusal.
        let lost = with_status(
            SANDBOX_CONTAINER,
            Some(waiting.clone()),
            Some(terminated(
                4,
                Some(
                    "workspace mount lost: statfs /workspace: Transport endpoint is not connected",
                ),
            )),
        );
        assert_eq!(runner_refused(&lost), None);
        assert_eq!(
            workspace_lost(&lost).as_deref(),
            Some("workspace mount lost: statfs /workspace: Transport endpoint is not connected")
        );
        let just_ended = with_status(SANDBOX_CONTAINER, Some(terminated(4, None)), None);
        assert_eq!(
            workspace_lost(&just_ended).as_deref(),
            Some("workspace mount lost")
        );
        assert_eq!(workspace_lost(&refused), None);
        let running = ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(
            workspace_lost(&with_status(
                SANDBOX_CONTAINER,
                Some(running),
                Some(terminated(4, None))
            )),
            None
        );
    }
}
