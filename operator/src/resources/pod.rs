//! The sandbox pod of the container runtime: the computer's PVC mounted at
//! /workspace, restricted Pod Security Standard settings (runAsNonRoot, all
//! capabilities dropped, seccomp RuntimeDefault, no privilege escalation —
//! see "Pod Security Standards", restricted profile), no service account
//! token, resources from `spec.sandbox.resources`. The scheduler places it on
//! the serving node through the PV's node affinity.

use agentcomputer_crds::{
    AgentComputer, NODE_AGENT_PROXY_PORT, SANDBOX_GID, SANDBOX_UID as UID, SandboxSpec,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext,
    PodSpec, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::{child_labels, owner, pod_name, pvc_name};

/// uid the sandbox runs as ([`agentcomputer_crds::SANDBOX_UID`], which the
/// PV also hands to the node agent).
pub const SANDBOX_UID: i64 = UID as i64;
/// gid the sandbox runs as, also its fsGroup ([`agentcomputer_crds::SANDBOX_GID`]).
pub const SANDBOX_GROUP: i64 = SANDBOX_GID as i64;

/// Builds the pod. `proxy` is the node agent's pod IP when the egress policy
/// lists host names: the pod then gets HTTP(S)_PROXY pointing at it.
pub fn build(c: &AgentComputer, sandbox: &SandboxSpec, proxy: Option<&str>) -> Pod {
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
    if let Some(ip) = proxy.filter(|_| !c.spec.egress.hosts.is_empty()) {
        let url = if ip.contains(':') {
            format!("http://[{ip}]:{NODE_AGENT_PROXY_PORT}")
        } else {
            format!("http://{ip}:{NODE_AGENT_PROXY_PORT}")
        };
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
    let command = sandbox
        .command
        .clone()
        .unwrap_or_else(|| vec!["sleep".into(), "infinity".into()]);
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
                volume_mounts: Some(vec![VolumeMount {
                    name: "workspace".into(),
                    mount_path: "/workspace".into(),
                    ..Default::default()
                }]),
                security_context: Some(SecurityContext {
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
                }),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "workspace".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc_name(c),
                    read_only: Some(false),
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}
