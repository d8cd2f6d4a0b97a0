//! Reconcile logic against a mocked API server (tower-test): an in-memory
//! object store answers GET/PATCH/DELETE/POST the way the API server does
//! for the calls the operator makes (including finalizers: a deleted object
//! with finalizers stays, marked, until they are removed), and can inject
//! failures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentcomputer_crds::{AgentComputer, ComputerPhase, EgressMode, ReclaimPolicy};
use agentcomputer_operator::context::{Config, Context, PlacementCaches};
use agentcomputer_operator::controller::reconcile;
use agentcomputer_operator::metrics::Metrics;
use agentcomputer_operator::{Error, FINALIZER};
use http::{Method, Request, Response};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::client::Body;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const NS: &str = "team";

/// A fault: the next `times` requests with this method whose path contains
/// `path` fail with `code`.
struct Fault {
    method: Method,
    path: String,
    code: u16,
    times: usize,
}

#[derive(Default)]
struct Fake {
    objects: Mutex<HashMap<String, Value>>,
    log: Mutex<Vec<(Method, String)>>,
    faults: Mutex<Vec<Fault>>,
    uid: Mutex<u64>,
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

impl Fake {
    fn get(&self, path: &str) -> Option<Value> {
        self.objects.lock().unwrap().get(path).cloned()
    }

    fn put(&self, path: &str, v: Value) {
        self.objects.lock().unwrap().insert(path.to_string(), v);
    }

    fn calls(&self, method: Method, path_part: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p)| *m == method && p.contains(path_part))
            .count()
    }

    fn fail(&self, method: Method, path: &str, code: u16, times: usize) {
        self.faults.lock().unwrap().push(Fault {
            method,
            path: path.into(),
            code,
            times,
        });
    }

    fn next_uid(&self) -> String {
        let mut u = self.uid.lock().unwrap();
        *u += 1;
        format!("uid-{}", *u)
    }

    fn handle(&self, method: Method, path: String, ctype: String, body: Value) -> (u16, Value) {
        self.log
            .lock()
            .unwrap()
            .push((method.clone(), path.clone()));
        {
            let mut faults = self.faults.lock().unwrap();
            if let Some(f) = faults
                .iter_mut()
                .find(|f| f.method == method && path.contains(&f.path) && f.times > 0)
            {
                f.times -= 1;
                return (f.code, status_body(f.code, "Injected", "injected fault"));
            }
        }
        let mut objects = self.objects.lock().unwrap();
        match method {
            Method::GET => match objects.get(&path) {
                Some(v) => (200, v.clone()),
                None => (
                    404,
                    status_body(404, "NotFound", &format!("{path} not found")),
                ),
            },
            Method::DELETE => match objects.get_mut(&path) {
                // Like the API server: an object with finalizers is only
                // marked for deletion.
                Some(v)
                    if v["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| !f.is_empty()) =>
                {
                    if v["metadata"]["deletionTimestamp"].is_null() {
                        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                    }
                    (200, v.clone())
                }
                Some(_) => (200, objects.remove(&path).unwrap()),
                None => (
                    404,
                    status_body(404, "NotFound", &format!("{path} not found")),
                ),
            },
            Method::POST => {
                if path.ends_with("/events") {
                    return (201, body);
                }
                let key = format!("{path}/{}", body["metadata"]["name"].as_str().unwrap());
                if objects.contains_key(&key) {
                    return (409, status_body(409, "AlreadyExists", "exists"));
                }
                objects.insert(key, body.clone());
                (201, body)
            }
            Method::PATCH => {
                if let Some(base) = path.strip_suffix("/status") {
                    let Some(obj) = objects.get_mut(base) else {
                        return (404, status_body(404, "NotFound", "no object"));
                    };
                    obj["status"] = body["status"].clone();
                    return (200, obj.clone());
                }
                let existing = objects.get(&path).cloned();
                // Like the API server: a PV's node affinity is immutable.
                if let Some(old) = &existing
                    && path.contains("/persistentvolumes/")
                    && !body["spec"]["nodeAffinity"].is_null()
                    && body["spec"]["nodeAffinity"] != old["spec"]["nodeAffinity"]
                {
                    return (
                        422,
                        status_body(422, "Invalid", "nodeAffinity: field is immutable"),
                    );
                }
                let next = if ctype.contains("apply-patch") {
                    let mut next = body;
                    match existing {
                        Some(old) => {
                            for k in ["uid", "finalizers", "deletionTimestamp", "annotations"] {
                                if !old["metadata"][k].is_null() && next["metadata"][k].is_null() {
                                    next["metadata"][k] = old["metadata"][k].clone();
                                }
                            }
                            if !old["status"].is_null() {
                                next["status"] = old["status"].clone();
                            }
                        }
                        None => next["metadata"]["uid"] = Value::String(self.next_uid()),
                    }
                    next
                } else if ctype.contains("json-patch") {
                    let Some(mut old) = existing else {
                        return (404, status_body(404, "NotFound", "no object"));
                    };
                    // Like the API server, a missing list tests equal to null.
                    if old["metadata"].get("finalizers").is_none() {
                        old["metadata"]["finalizers"] = Value::Null;
                    }
                    let p: json_patch::Patch = serde_json::from_value(body).unwrap();
                    if json_patch::patch(&mut old, &p).is_err() {
                        return (422, status_body(422, "Invalid", "json patch test failed"));
                    }
                    old
                } else {
                    let Some(mut old) = existing else {
                        return (404, status_body(404, "NotFound", "no object"));
                    };
                    json_patch::merge(&mut old, &body);
                    old
                };
                // The last finalizer of a deleted object gone: it goes.
                if !next["metadata"]["deletionTimestamp"].is_null()
                    && next["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|f| f.is_empty())
                {
                    objects.remove(&path);
                    return (200, next);
                }
                objects.insert(path, next.clone());
                (200, next)
            }
            _ => (405, status_body(405, "MethodNotAllowed", "unsupported")),
        }
    }
}

async fn serve(mut handle: Handle, fake: Arc<Fake>) {
    while let Some((req, send)) = handle.next_request().await {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let ctype = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let (code, out) = fake.handle(method, path, ctype, body);
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&out).unwrap()))
                .unwrap(),
        );
    }
}

struct Env {
    ctx: Arc<Context>,
    fake: Arc<Fake>,
    nodes: Writer<Node>,
    agents: Writer<Pod>,
    capacities: Writer<CSIStorageCapacity>,
    computers: Writer<AgentComputer>,
}

fn env() -> Env {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let fake = Arc::new(Fake::default());
    tokio::spawn(serve(handle, fake.clone()));
    let client = Client::new(svc, "default");
    let (ns, nw): (Store<Node>, Writer<Node>) = reflector::store();
    let (ag, aw): (Store<Pod>, Writer<Pod>) = reflector::store();
    let (caps, capw): (Store<CSIStorageCapacity>, Writer<CSIStorageCapacity>) = reflector::store();
    let (cs, cw): (Store<AgentComputer>, Writer<AgentComputer>) = reflector::store();
    let ctx = Arc::new(Context::new(
        client,
        Config::default(),
        PlacementCaches {
            nodes: ns,
            agents: ag,
            capacities: caps,
        },
        cs,
        Arc::new(Metrics::new()),
        None,
    ));
    Env {
        ctx,
        fake,
        nodes: nw,
        agents: aw,
        capacities: capw,
        computers: cw,
    }
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": format!("host-{name}")}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn agent(node: &str, ip: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("agent-{node}"), "namespace": "agentcomputer-system"},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// The CSIStorageCapacity the node agent of `node` publishes, with `room`
/// (a quantity) at resourceVersion `rv`.
fn capacity(node: &str, room: &str, rv: &str) -> CSIStorageCapacity {
    serde_json::from_value(json!({
        "metadata": {"name": format!("agentcomputer-{node}"), "namespace": "agentcomputer-system",
                     "resourceVersion": rv, "labels": {"agentcomputer.dev/node": node}},
        "storageClassName": "agentcomputer",
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": format!("host-{node}")}},
        "capacity": room,
        "maximumVolumeSize": room,
    }))
    .unwrap()
}

fn computer_path(name: &str) -> String {
    format!("/apis/agentcomputer.dev/v1alpha1/namespaces/{NS}/agentcomputers/{name}")
}

/// Stores a computer in the fake (as the API server would hold it) and
/// returns it.
fn computer(env: &Env, name: &str, spec: Value) -> AgentComputer {
    let v = json!({
        "apiVersion": "agentcomputer.dev/v1alpha1", "kind": "AgentComputer",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"), "generation": 1},
        "spec": spec,
    });
    env.fake.put(&computer_path(name), v.clone());
    serde_json::from_value(v).unwrap()
}

fn current(env: &Env, name: &str) -> AgentComputer {
    serde_json::from_value(env.fake.get(&computer_path(name)).expect("computer exists")).unwrap()
}

/// Runs reconciles the way the controller would (each on the latest object)
/// until the finalizer is in place and one full reconcile ran.
async fn settle(env: &Env, name: &str) -> Result<kube::runtime::controller::Action, Error> {
    let c = current(env, name);
    if !c.finalizers().iter().any(|f| f == FINALIZER) {
        reconcile(Arc::new(c), env.ctx.clone()).await?;
        assert!(
            current(env, name)
                .finalizers()
                .iter()
                .any(|f| f == FINALIZER),
            "finalizer added first"
        );
    }
    reconcile(Arc::new(current(env, name)), env.ctx.clone()).await
}

fn add<K: kube::Resource + Clone>(w: &mut Writer<K>, obj: K)
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    w.apply_watcher_event(&watcher::Event::Apply(obj));
}

fn two_nodes(env: &mut Env) {
    add(&mut env.nodes, node("a"));
    add(&mut env.nodes, node("b"));
    add(&mut env.agents, agent("a", "10.0.0.1"));
    add(&mut env.agents, agent("b", "10.0.0.2"));
    add(&mut env.capacities, capacity("a", "100Gi", "1"));
    add(&mut env.capacities, capacity("b", "100Gi", "1"));
}

/// The computer's finalizer is released: the object is gone (no finalizer
/// left) or has none of ours.
fn released(env: &Env, name: &str) -> bool {
    env.fake.get(&computer_path(name)).is_none_or(|c| {
        c["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty())
    })
}

fn status(c: &AgentComputer) -> agentcomputer_crds::AgentComputerStatus {
    c.status.clone().expect("status written")
}

fn condition<'a>(c: &'a AgentComputer, t: &str) -> (&'a str, &'a str) {
    let s = c.status.as_ref().unwrap();
    let cond = s
        .conditions
        .iter()
        .find(|x| x.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition"));
    (cond.status.as_str(), cond.reason.as_str())
}

const PV: &str = "/api/v1/persistentvolumes/agentcomputer-c1-uid";
const PVC: &str = "/api/v1/namespaces/team/persistentvolumeclaims/c1-workspace";
const SECRET: &str = "/api/v1/namespaces/team/secrets/c1-credential";
const NETPOL: &str = "/apis/networking.k8s.io/v1/namespaces/team/networkpolicies/c1-egress";
const POD: &str = "/api/v1/namespaces/team/pods/c1-sandbox";

#[tokio::test]
async fn create_places_on_least_loaded_node_and_applies_all_objects() {
    let mut env = env();
    two_nodes(&mut env);
    // Node a already serves a computer, so c1 goes to b.
    let mut other = computer(&env, "busy", json!({"storage": {"size": "1Gi"}}));
    other.status = Some(agentcomputer_crds::AgentComputerStatus {
        node: Some("a".into()),
        ..Default::default()
    });
    add(&mut env.computers, other);
    computer(&env, "c1", json!({"storage": {"size": "2Gi"}}));

    settle(&env, "c1").await.unwrap();

    let c = current(&env, "c1");
    let st = status(&c);
    assert_eq!(st.phase, Some(ComputerPhase::Ready));
    assert_eq!(st.node.as_deref(), Some("b"));
    assert_eq!(st.endpoint.as_deref(), Some("10.0.0.2:7433"));
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(condition(&c, "Ready"), ("True", "NodeAgentReady"));
    assert_eq!(condition(&c, "Placed"), ("True", "Placed"));

    let pv = env.fake.get(PV).expect("PV applied");
    assert_eq!(pv["spec"]["csi"]["driver"], "agentcomputer.dev");
    assert_eq!(pv["spec"]["csi"]["volumeHandle"], "c1-uid");
    assert_eq!(pv["spec"]["capacity"]["storage"], "2Gi");
    assert_eq!(pv["spec"]["claimRef"]["name"], "c1-workspace");
    assert_eq!(pv["spec"]["claimRef"]["namespace"], NS);
    assert!(
        pv["spec"]["nodeAffinity"].is_null(),
        "a new PV is not pinned by node affinity (it is immutable and computers move)"
    );
    assert!(
        pv["metadata"]["ownerReferences"].is_null(),
        "a PV must not have a namespaced owner"
    );
    // What the node agent reads off the PV.
    assert_eq!(pv["metadata"]["labels"]["agentcomputer.dev/node"], "b");
    assert_eq!(
        pv["metadata"]["finalizers"],
        json!(["agentcomputer.dev/node-data"]),
        "the node agent's finalizer from creation"
    );
    let attrs = &pv["spec"]["csi"]["volumeAttributes"];
    assert_eq!(attrs["agentcomputer.dev/namespace"], NS);
    assert_eq!(attrs["agentcomputer.dev/name"], "c1");
    assert_eq!(attrs["agentcomputer.dev/uid"], "1000");
    assert_eq!(attrs["agentcomputer.dev/gid"], "1000");
    assert_eq!(
        c.labels().get("agentcomputer.dev/node").map(String::as_str),
        Some("b"),
        "the computer is labelled with its node"
    );
    let pvc = env.fake.get(PVC).expect("PVC applied");
    assert_eq!(pvc["spec"]["volumeName"], "agentcomputer-c1-uid");
    assert_eq!(pvc["metadata"]["ownerReferences"][0]["uid"], "c1-uid");
    assert_eq!(pvc["metadata"]["ownerReferences"][0]["controller"], true);
    let secret = env.fake.get(SECRET).expect("secret applied");
    let token: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["token"].clone()).unwrap();
    assert_eq!(token.0.len(), 64);
    assert_eq!(st.credential_hash, Some(sha256_of(&token.0)));
    let np = env.fake.get(NETPOL).expect("network policy applied");
    assert!(np["spec"]["egress"].is_null(), "deny-all by default");
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(
        env.fake.get(POD).is_none(),
        "no sandbox without the container runtime"
    );
    assert_eq!(
        env.fake.calls(Method::POST, "/events"),
        1,
        "one Placed event"
    );
}

#[tokio::test]
async fn computers_placed_before_the_cache_catches_up_are_still_spread() {
    let mut env = env();
    two_nodes(&mut env);
    // Both computers sit in the cache without a status, as they do when
    // applied together: the cache has not seen either status write yet.
    for name in ["c1", "c2"] {
        let c = computer(&env, name, json!({"storage": {"size": "1Gi"}}));
        add(&mut env.computers, c);
    }
    settle(&env, "c1").await.unwrap();
    settle(&env, "c2").await.unwrap();
    let n1 = status(&current(&env, "c1")).node.unwrap();
    let n2 = status(&current(&env, "c2")).node.unwrap();
    assert_ne!(
        n1, n2,
        "the first placement counts before the cache shows it"
    );

    // Once the cache shows both, a third computer still sees one per node and
    // takes the first by name; the assumptions were dropped, not double counted.
    for name in ["c1", "c2"] {
        let c = current(&env, name);
        add(&mut env.computers, c);
    }
    let load = env.ctx.load();
    assert_eq!((load.get("a"), load.get("b")), (Some(&1), Some(&1)));
    computer(&env, "c3", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c3").await.unwrap();
    assert_eq!(status(&current(&env, "c3")).node.as_deref(), Some("a"));
}

#[tokio::test]
async fn update_keeps_the_token_changes_policy_and_adds_sandbox() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    let token_before = env.fake.get(SECRET).unwrap()["data"]["token"].clone();
    let status_writes = env.fake.calls(Method::PATCH, "/status");

    // Unchanged spec: no status write.
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        env.fake.calls(Method::PATCH, "/status"),
        status_writes,
        "unchanged status is not rewritten"
    );

    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["spec"]["egress"] = json!({"mode": "allow-list", "cidrs": [{"cidr": "10.9.0.0/16", "ports": [{"port": 443}]}], "hosts": ["pypi.org"]});
    c["spec"]["runtimes"] = json!({"container": true});
    c["spec"]["sandbox"] =
        json!({"image": "debian:bookworm-slim", "resources": {"limits": {"memory": "1Gi"}}});
    c["metadata"]["generation"] = json!(2);
    env.fake.put(&computer_path("c1"), c);
    settle(&env, "c1").await.unwrap();

    assert_eq!(
        env.fake.get(SECRET).unwrap()["data"]["token"],
        token_before,
        "token is stable"
    );
    let np = env.fake.get(NETPOL).unwrap();
    let rules = np["spec"]["egress"].as_array().unwrap();
    assert_eq!(rules.len(), 3, "cidr, dns, proxy: {rules:?}");
    assert_eq!(rules[0]["to"][0]["ipBlock"]["cidr"], "10.9.0.0/16");
    let pod = env.fake.get(POD).expect("sandbox pod");
    // Pinned to the serving node by its own affinity (the PV is not).
    let pinned = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(pinned["key"], "kubernetes.io/hostname", "{pod}");
    assert!(
        pinned["values"][0]
            .as_str()
            .is_some_and(|h| h.starts_with("host-")),
        "{pod}"
    );
    let ctr = &pod["spec"]["containers"][0];
    assert_eq!(ctr["image"], "debian:bookworm-slim");
    assert_eq!(
        ctr["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(ctr["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(ctr["volumeMounts"][0]["mountPath"], "/workspace");
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "c1-workspace"
    );
    assert_eq!(ctr["resources"]["limits"]["memory"], "1Gi");
    let env_vars = ctr["env"].as_array().unwrap();
    // The proxy URL carries the computer's credential fingerprint (never
    // its token) as the proxy credential.
    let hash = current(&env, "c1").status.unwrap().credential_hash.unwrap();
    let fingerprint = hash.strip_prefix("sha256:").unwrap();
    assert!(env_vars.iter().any(|e| e["name"] == "HTTPS_PROXY"
        && e["value"] == format!("http://computer:{fingerprint}@10.0.0.1:3128").as_str()));
    assert!(
        !env_vars
            .iter()
            .any(|e| e["valueFrom"]["secretKeyRef"]["key"] == "token"
                && e["name"] != "AGENTCOMPUTER_TOKEN")
    );
    let c = current(&env, "c1");
    assert_eq!(condition(&c, "SandboxReady"), ("False", "Starting"));
    assert_eq!(status(&c).observed_generation, Some(2));
    assert_eq!(status(&c).sandbox_pod.as_deref(), Some("c1-sandbox"));
    assert_eq!(c.spec.egress.mode, EgressMode::AllowList);
}

#[tokio::test]
async fn no_ready_agent_keeps_the_computer_pending() {
    let mut env = env();
    add(&mut env.nodes, node("a"));
    let mut unready = agent("a", "10.0.0.1");
    unready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    add(&mut env.agents, unready);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));

    let action = settle(&env, "c1").await.unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(30))
    );
    let c = current(&env, "c1");
    assert_eq!(status(&c).phase, Some(ComputerPhase::Pending));
    assert_eq!(status(&c).node, None);
    let placed = status(&c)
        .conditions
        .into_iter()
        .find(|x| x.type_ == "Placed")
        .unwrap();
    assert_eq!(
        (placed.status.as_str(), placed.reason.as_str()),
        ("False", "NoEligibleNode")
    );
    assert_eq!(
        placed.message,
        "0/1 nodes are eligible: 1 no ready node agent"
    );
    assert!(
        env.fake.get(PV).is_none(),
        "nothing is created before placement"
    );
    assert_eq!(
        env.fake.calls(Method::POST, "/events"),
        1,
        "one NoEligibleNode warning"
    );

    // The agent becomes ready and publishes its room: the computer is placed.
    add(&mut env.agents, agent("a", "10.0.0.1"));
    add(&mut env.capacities, capacity("a", "10Gi", "1"));
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        status(&current(&env, "c1")).phase,
        Some(ComputerPhase::Ready)
    );
}

#[tokio::test]
async fn node_selector_and_taints_steer_placement() {
    let mut env = env();
    two_nodes(&mut env);
    let mut tainted: Node = node("c");
    tainted
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("pool".into(), "agents".into());
    tainted.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: "dedicated".into(),
        value: Some("agents".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    add(&mut env.nodes, tainted);
    add(&mut env.agents, agent("c", "10.0.0.3"));
    add(&mut env.capacities, capacity("c", "10Gi", "1"));
    computer(
        &env,
        "c1",
        json!({"storage": {"size": "1Gi"}, "nodeSelector": {"pool": "agents"}}),
    );
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        status(&current(&env, "c1")).phase,
        Some(ComputerPhase::Pending),
        "taint not tolerated"
    );

    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["spec"]["tolerations"] = json!([{"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}]);
    env.fake.put(&computer_path("c1"), c);
    settle(&env, "c1").await.unwrap();
    assert_eq!(status(&current(&env, "c1")).node.as_deref(), Some("c"));
}

#[tokio::test]
async fn node_loss_marks_the_computer_unavailable_without_moving_it() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    let placed_on = status(&current(&env, "c1")).node.unwrap();

    // The node agent on that node goes away.
    let gone = agent(&placed_on, "unused");
    env.agents
        .apply_watcher_event(&watcher::Event::Delete(gone));
    settle(&env, "c1").await.unwrap();
    let c = current(&env, "c1");
    assert_eq!(status(&c).phase, Some(ComputerPhase::Unavailable));
    assert_eq!(
        status(&c).node.as_deref(),
        Some(placed_on.as_str()),
        "the data is on that node: never re-placed"
    );
    assert_eq!(status(&c).endpoint, None);
    assert_eq!(condition(&c, "Ready"), ("False", "NodeAgentNotReady"));
    assert_eq!(
        env.fake.calls(Method::POST, "/events"),
        2,
        "Placed, then NodeAgentLost"
    );

    // The Node object itself disappears.
    env.nodes
        .apply_watcher_event(&watcher::Event::Delete(node(&placed_on)));
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        condition(&current(&env, "c1"), "Ready"),
        ("False", "NodeGone")
    );

    // It comes back.
    add(&mut env.nodes, node(&placed_on));
    add(&mut env.agents, agent(&placed_on, "10.0.0.9"));
    settle(&env, "c1").await.unwrap();
    let c = current(&env, "c1");
    assert_eq!(status(&c).phase, Some(ComputerPhase::Ready));
    assert_eq!(status(&c).endpoint.as_deref(), Some("10.0.0.9:7433"));
}

async fn delete_computer(env: &Env, name: &str) {
    let mut c = env.fake.get(&computer_path(name)).unwrap();
    c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    env.fake.put(&computer_path(name), c);
    reconcile(Arc::new(current(env, name)), env.ctx.clone())
        .await
        .unwrap();
}

#[tokio::test]
async fn deletion_with_delete_policy_removes_volume_and_finalizer() {
    let mut env = env();
    two_nodes(&mut env);
    computer(
        &env,
        "c1",
        json!({"storage": {"size": "1Gi"}, "runtimes": {"container": true}, "sandbox": {"image": "busybox"}}),
    );
    settle(&env, "c1").await.unwrap();
    for p in [PV, PVC, SECRET, NETPOL, POD] {
        assert!(env.fake.get(p).is_some(), "{p} exists before deletion");
    }
    let before = env.fake.log.lock().unwrap().len();
    delete_computer(&env, "c1").await;
    for p in [PVC, SECRET, NETPOL, POD] {
        assert!(env.fake.get(p).is_none(), "{p} deleted");
    }
    // The PV waits, Terminating, for the node agent: marked to have its data
    // deleted before the deletion was requested.
    let pv = env
        .fake
        .get(PV)
        .expect("PV kept by the node agent's finalizer");
    assert!(!pv["metadata"]["deletionTimestamp"].is_null(), "PV deleted");
    assert_eq!(
        pv["metadata"]["annotations"]["agentcomputer.dev/delete-data"],
        "true"
    );
    assert_eq!(
        pv["metadata"]["finalizers"],
        json!(["agentcomputer.dev/node-data"])
    );
    let log = env.fake.log.lock().unwrap()[before..].to_vec();
    let mark = log
        .iter()
        .position(|(m, p)| *m == Method::PATCH && p == PV)
        .expect("PV annotated");
    let delete = log
        .iter()
        .rposition(|(m, p)| *m == Method::DELETE && p == PV)
        .expect("PV deleted");
    assert!(mark < delete, "annotation before deletion: {log:?}");
    assert!(
        released(&env, "c1"),
        "the computer does not wait for the node agent"
    );
    // The node agent removes its finalizer once the data is gone: the PV goes.
    let pv_patch = json!([{"op": "remove", "path": "/metadata/finalizers/0"}]);
    assert_eq!(
        env.fake
            .handle(
                Method::PATCH,
                PV.into(),
                "application/json-patch+json".into(),
                pv_patch
            )
            .0,
        200
    );
    assert!(env.fake.get(PV).is_none());
}

#[tokio::test]
async fn deletion_with_retain_policy_keeps_and_orphans_the_volume() {
    let mut env = env();
    two_nodes(&mut env);
    computer(
        &env,
        "c1",
        json!({"storage": {"size": "1Gi", "reclaimPolicy": "Retain"}}),
    );
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        current(&env, "c1").spec.storage.reclaim_policy,
        ReclaimPolicy::Retain
    );
    delete_computer(&env, "c1").await;
    let pvc = env.fake.get(PVC).expect("claim kept");
    assert!(
        pvc["metadata"]["ownerReferences"].is_null(),
        "claim orphaned so GC keeps it"
    );
    let pv = env.fake.get(PV).expect("volume kept");
    assert_eq!(
        pv["metadata"]["annotations"]["agentcomputer.dev/retained-from"],
        "team/c1"
    );
    assert!(
        pv["metadata"]["annotations"]["agentcomputer.dev/delete-data"].is_null(),
        "a kept volume's data is never marked for deletion"
    );
    assert!(pv["metadata"]["deletionTimestamp"].is_null());
    assert!(env.fake.get(SECRET).is_none());
    assert!(env.fake.get(NETPOL).is_none());
    assert!(released(&env, "c1"));
}

#[tokio::test]
async fn api_failures_surface_as_errors_and_metrics() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    env.fake.fail(Method::PATCH, "/persistentvolumes/", 500, 1);
    let err = settle(&env, "c1").await.unwrap_err();
    assert_eq!(err.reason(), "api", "{err}");
    // The failure is in status: the step, the API server's reason, and no
    // generation observed; the egress step after it ran.
    let c = current(&env, "c1");
    assert_eq!(condition(&c, "Reconciled"), ("False", "Injected"));
    assert_eq!(condition(&c, "VolumeReady"), ("False", "Injected"));
    assert_eq!(condition(&c, "EgressReady"), ("True", "Applied"));
    assert_eq!(condition(&c, "Ready"), ("False", "ReconcileFailed"));
    assert_eq!(status(&c).observed_generation, None);
    assert!(
        env.fake.get(NETPOL).is_some(),
        "egress applied all the same"
    );
    let text = env.ctx.metrics.render();
    assert!(
        text.contains(
            "agentcomputer_operator_reconcile_errors_total{reason=\"api\",step=\"volume\"} 1"
        ),
        "{text}"
    );
    // The retry succeeds.
    settle(&env, "c1").await.unwrap();
    let c = current(&env, "c1");
    assert_eq!(status(&c).phase, Some(ComputerPhase::Ready));
    assert_eq!(condition(&c, "Reconciled"), ("True", "Applied"));
    assert_eq!(status(&c).observed_generation, c.metadata.generation);

    // Cleanup failures keep the finalizer, so deletion is retried.
    env.fake
        .fail(Method::DELETE, "/persistentvolumeclaims/", 503, 1);
    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    env.fake.put(&computer_path("c1"), c);
    assert!(
        reconcile(Arc::new(current(&env, "c1")), env.ctx.clone())
            .await
            .is_err()
    );
    assert_eq!(current(&env, "c1").finalizers(), [FINALIZER.to_string()]);
    reconcile(Arc::new(current(&env, "c1")), env.ctx.clone())
        .await
        .unwrap();
    assert!(released(&env, "c1"));
}

#[tokio::test]
async fn immutable_pod_change_replaces_the_sandbox() {
    let mut env = env();
    two_nodes(&mut env);
    computer(
        &env,
        "c1",
        json!({"storage": {"size": "1Gi"}, "runtimes": {"container": true}, "sandbox": {"image": "busybox"}}),
    );
    settle(&env, "c1").await.unwrap();
    assert!(env.fake.get(POD).is_some());
    env.fake.fail(Method::PATCH, "/pods/c1-sandbox", 422, 1);
    settle(&env, "c1").await.unwrap();
    assert!(env.fake.get(POD).is_none(), "pod deleted to be recreated");
    assert_eq!(
        condition(&current(&env, "c1"), "SandboxReady"),
        ("False", "Replacing")
    );
    settle(&env, "c1").await.unwrap();
    assert!(env.fake.get(POD).is_some(), "pod recreated");
}

#[tokio::test]
async fn refused_sandbox_pod_is_reported_and_the_computer_stays_usable() {
    let mut env = env();
    two_nodes(&mut env);
    computer(
        &env,
        "c1",
        json!({"storage": {"size": "1Gi"}, "runtimes": {"container": true}, "sandbox": {"image": "busybox"}}),
    );
    // As when a ResourceQuota or an admission webhook refuses the pod.
    env.fake.fail(Method::PATCH, "/pods/c1-sandbox", 403, 2);
    let action = settle(&env, "c1").await.unwrap();
    let c = current(&env, "c1");
    let st = status(&c);
    assert_eq!(st.phase, Some(ComputerPhase::Ready));
    assert!(st.endpoint.is_some(), "in-process runtimes stay reachable");
    assert_eq!(st.sandbox_pod, None);
    assert_eq!(condition(&c, "SandboxReady"), ("False", "SandboxRejected"));
    let msg = &st
        .conditions
        .iter()
        .find(|x| x.type_ == "SandboxReady")
        .unwrap()
        .message;
    assert!(
        msg.contains("injected fault"),
        "API server's reason kept: {msg}"
    );
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        env.fake.calls(Method::POST, "/events"),
        2,
        "Placed and SandboxRejected"
    );

    // Still refused: no second Warning for the same cause.
    reconcile(Arc::new(current(&env, "c1")), env.ctx.clone())
        .await
        .unwrap();
    assert_eq!(env.fake.calls(Method::POST, "/events"), 2);

    // Once admitted the pod is created and the condition moves on.
    settle(&env, "c1").await.unwrap();
    assert!(env.fake.get(POD).is_some());
    assert_eq!(
        condition(&current(&env, "c1"), "SandboxReady"),
        ("False", "Starting")
    );
}

#[tokio::test]
async fn idle_sandbox_is_stopped_and_restarted_on_activity() {
    let mut env = env();
    two_nodes(&mut env);
    let spec = json!({"storage": {"size": "1Gi"}, "runtimes": {"container": true},
                      "sandbox": {"image": "busybox", "idleTimeoutSeconds": 60}});
    computer(&env, "c1", spec);
    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["metadata"]["annotations"] =
        json!({"agentcomputer.dev/last-activity": "2020-01-01T00:00:00Z"});
    env.fake.put(&computer_path("c1"), c);
    settle(&env, "c1").await.unwrap();
    assert!(env.fake.get(POD).is_none(), "idle: no pod");
    assert_eq!(
        condition(&current(&env, "c1"), "SandboxReady"),
        ("False", "Idle")
    );

    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["metadata"]["annotations"]["agentcomputer.dev/last-activity"] =
        json!(k8s_openapi::jiff::Timestamp::now().to_string());
    env.fake.put(&computer_path("c1"), c);
    let action = settle(&env, "c1").await.unwrap();
    assert!(env.fake.get(POD).is_some(), "activity starts the pod");
    // The idle timer, not the 300 s resync, decides the next reconcile.
    assert_ne!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(300))
    );
}

#[tokio::test]
async fn missing_uid_is_a_clear_error() {
    let env = env();
    let mut c = computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    c.metadata.uid = None;
    c.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let err = reconcile(Arc::new(c), env.ctx.clone()).await.unwrap_err();
    assert!(err.to_string().contains("metadata.uid"), "{err}");
}

#[tokio::test]
async fn existing_volume_pins_the_node_even_when_status_is_stale() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    let node = status(&current(&env, "c1")).node.unwrap();
    // A reconcile from a cache that has not seen the status yet, while the
    // other node is now the least loaded one.
    let mut stale = current(&env, "c1");
    stale.status = None;
    let mut busy = computer(&env, "busy", json!({"storage": {"size": "1Gi"}}));
    busy.status = Some(agentcomputer_crds::AgentComputerStatus {
        node: Some(node.clone()),
        ..Default::default()
    });
    add(&mut env.computers, busy.clone());
    let mut busy2 = busy.clone();
    busy2.metadata.name = Some("busy2".into());
    add(&mut env.computers, busy2);
    reconcile(Arc::new(stale), env.ctx.clone()).await.unwrap();
    assert_eq!(
        status(&current(&env, "c1")).node,
        Some(node),
        "the PV's node wins over a new choice"
    );
    assert_eq!(
        env.fake.calls(Method::POST, "/events"),
        1,
        "no second Placed event"
    );
}

#[tokio::test]
async fn growing_storage_resizes_the_volume_and_keeps_the_claim_request() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["spec"]["storage"]["size"] = json!("3Gi");
    env.fake.put(&computer_path("c1"), c);
    // The claim keeps its request: the API server refuses to resize a
    // claim of a pre-provisioned volume (422 unbound, 403 bound).
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        env.fake.get(PV).unwrap()["spec"]["capacity"]["storage"],
        "3Gi"
    );
    assert_eq!(
        env.fake.get(PVC).unwrap()["spec"]["resources"]["requests"]["storage"],
        "1Gi"
    );
    let st = status(&current(&env, "c1"));
    assert_eq!(st.volume.unwrap().capacity.unwrap().0, "3Gi");
}

fn sha256_of(token: &[u8]) -> String {
    // Independent of the operator's code path: the coreutils tool.
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child.stdin.take().unwrap().write_all(token).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

fn secret_token(env: &Env) -> String {
    let secret = env.fake.get(SECRET).expect("secret");
    let token: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["token"].clone()).unwrap();
    String::from_utf8(token.0).unwrap()
}

fn set_secret_token(env: &Env, token: &[u8]) {
    let mut secret = env.fake.get(SECRET).expect("secret");
    secret["data"]["token"] =
        serde_json::to_value(k8s_openapi::ByteString(token.to_vec())).unwrap();
    env.fake.put(SECRET, secret);
}

#[tokio::test]
async fn rotated_deleted_and_malformed_tokens() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    let first = secret_token(&env);
    assert_eq!(
        status(&current(&env, "c1")).credential_hash,
        Some(sha256_of(first.as_bytes()))
    );
    let events = env.fake.calls(Method::POST, "/events");

    // The user rotates the token: kept, and the hash follows.
    let rotated = "ab".repeat(32);
    set_secret_token(&env, rotated.as_bytes());
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        secret_token(&env),
        rotated,
        "the user's token is not overwritten"
    );
    let st = status(&current(&env, "c1"));
    assert_eq!(st.credential_hash, Some(sha256_of(rotated.as_bytes())));
    assert_eq!(st.phase, Some(ComputerPhase::Ready));
    assert_eq!(
        env.fake.calls(Method::POST, "/events"),
        events + 1,
        "CredentialRotated"
    );

    // The Secret is deleted: a new token, another rotation.
    env.fake.objects.lock().unwrap().remove(SECRET);
    settle(&env, "c1").await.unwrap();
    let fresh = secret_token(&env);
    assert_eq!(fresh.len(), 64);
    assert_ne!(fresh, rotated);
    assert_ne!(fresh, first);
    assert_eq!(
        status(&current(&env, "c1")).credential_hash,
        Some(sha256_of(fresh.as_bytes()))
    );

    // A malformed token: kept as written, every request refused, and said so.
    set_secret_token(&env, b"hunter2");
    settle(&env, "c1").await.unwrap();
    assert_eq!(secret_token(&env), "hunter2", "bad input loses nothing");
    let c = current(&env, "c1");
    let st = status(&c);
    assert_eq!(st.credential_hash, None, "no hash: no token is accepted");
    assert_eq!(st.phase, Some(ComputerPhase::Unavailable));
    assert_eq!(condition(&c, "CredentialReady"), ("False", "InvalidToken"));
    assert_eq!(condition(&c, "Ready"), ("False", "CredentialInvalid"));
    let msg = &st
        .conditions
        .iter()
        .find(|x| x.type_ == "CredentialReady")
        .unwrap()
        .message;
    assert!(msg.contains("64 hexadecimal characters"), "{msg}");

    // Fixed: Ready again with the new hash.
    let good = "0f".repeat(32);
    set_secret_token(&env, good.as_bytes());
    settle(&env, "c1").await.unwrap();
    let st = status(&current(&env, "c1"));
    assert_eq!(st.phase, Some(ComputerPhase::Ready));
    assert_eq!(st.credential_hash, Some(sha256_of(good.as_bytes())));
}

#[tokio::test]
async fn a_computer_that_fits_nowhere_stays_pending_and_says_why() {
    let mut env = env();
    for n in ["a", "b", "c"] {
        add(&mut env.nodes, node(n));
        add(&mut env.agents, agent(n, "10.0.0.1"));
    }
    add(&mut env.capacities, capacity("a", "2Gi", "1"));
    // A capacity of another storage class is not this driver's.
    let mut other = capacity("c", "100Gi", "1");
    other.storage_class_name = "fast".into();
    add(&mut env.capacities, other);
    computer(&env, "c1", json!({"storage": {"size": "5Gi"}}));
    let action = settle(&env, "c1").await.unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(30))
    );
    let c = current(&env, "c1");
    assert_eq!(status(&c).phase, Some(ComputerPhase::Pending));
    let placed = status(&c)
        .conditions
        .into_iter()
        .find(|x| x.type_ == "Placed")
        .unwrap();
    assert_eq!(placed.reason, "NoEligibleNode");
    assert_eq!(
        placed.message,
        "0/3 nodes are eligible: 1 no room for 5Gi (2Gi free), 2 no published capacity"
    );
    assert!(env.fake.get(PV).is_none());
    assert!(c.labels().get("agentcomputer.dev/node").is_none());

    // Node b's agent publishes enough room: placed there.
    add(&mut env.capacities, capacity("b", "8Gi", "1"));
    settle(&env, "c1").await.unwrap();
    assert_eq!(status(&current(&env, "c1")).node.as_deref(), Some("b"));
}

#[tokio::test]
async fn placements_the_capacity_does_not_reflect_yet_do_not_overfill_a_node() {
    let mut env = env();
    add(&mut env.nodes, node("a"));
    add(&mut env.agents, agent("a", "10.0.0.1"));
    add(&mut env.capacities, capacity("a", "5Gi", "1"));
    for name in ["c1", "c2"] {
        let c = computer(&env, name, json!({"storage": {"size": "3Gi"}}));
        add(&mut env.computers, c);
    }
    settle(&env, "c1").await.unwrap();
    assert_eq!(status(&current(&env, "c1")).node.as_deref(), Some("a"));
    // The agent has not republished: 5Gi still shows, but 3Gi are promised.
    settle(&env, "c2").await.unwrap();
    let c2 = current(&env, "c2");
    assert_eq!(status(&c2).phase, Some(ComputerPhase::Pending));
    let placed = status(&c2)
        .conditions
        .into_iter()
        .find(|x| x.type_ == "Placed")
        .unwrap();
    assert_eq!(
        placed.message,
        "0/1 nodes are eligible: 1 no room for 3Gi (2Gi free)"
    );
    assert_eq!(env.ctx.room().get("a"), Some(&(2u64 << 30)));
    // The computers cache catches up with c1's status: its quota still
    // counts until the capacity changes.
    let c1 = current(&env, "c1");
    add(&mut env.computers, c1);
    settle(&env, "c2").await.unwrap();
    assert_eq!(
        status(&current(&env, "c2")).phase,
        Some(ComputerPhase::Pending)
    );

    // The agent republishes with c1 counted (and a grown disk): the
    // reservation ends and c2 fits.
    add(&mut env.capacities, capacity("a", "4Gi", "2"));
    assert_eq!(env.ctx.room().get("a"), Some(&(4u64 << 30)));
    settle(&env, "c2").await.unwrap();
    assert_eq!(status(&current(&env, "c2")).node.as_deref(), Some("a"));
}

#[tokio::test]
async fn the_node_label_is_kept_when_the_status_is_stale() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    let node = status(&current(&env, "c1")).node.unwrap();
    // Someone strips the label; a reconcile from a stale cache (no status)
    // puts it back from the PV, without a new placement.
    let mut c = env.fake.get(&computer_path("c1")).unwrap();
    c["metadata"]["labels"] = json!({});
    env.fake.put(&computer_path("c1"), c);
    let mut stale = current(&env, "c1");
    stale.status = None;
    reconcile(Arc::new(stale), env.ctx.clone()).await.unwrap();
    assert_eq!(
        current(&env, "c1").labels().get("agentcomputer.dev/node"),
        Some(&node)
    );
    // Labelled already: no further computer patch.
    let patches = env.fake.calls(Method::PATCH, &computer_path("c1"));
    settle(&env, "c1").await.unwrap();
    assert_eq!(
        env.fake.calls(Method::PATCH, &computer_path("c1")),
        patches,
        "labelled and unchanged: nothing written"
    );
}

#[tokio::test]
async fn a_volume_deleted_under_a_live_computer_is_left_to_finish_then_made_again() {
    let mut env = env();
    two_nodes(&mut env);
    computer(&env, "c1", json!({"storage": {"size": "1Gi"}}));
    settle(&env, "c1").await.unwrap();
    // Someone deletes the PV: the node agent's finalizer holds it.
    env.fake
        .handle(Method::DELETE, PV.into(), String::new(), Value::Null);
    assert!(!env.fake.get(PV).unwrap()["metadata"]["deletionTimestamp"].is_null());
    let action = settle(&env, "c1")
        .await
        .expect("no error loop on a terminating PV");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(30))
    );
    let c = current(&env, "c1");
    assert_eq!(condition(&c, "VolumeReady"), ("False", "VolumeDeleting"));
    assert_eq!(condition(&c, "Ready"), ("False", "VolumeDeleting"));
    assert_eq!(status(&c).phase, Some(ComputerPhase::Unavailable));
    // The node agent releases it; the next reconcile makes a new one.
    let release = json!([{"op": "remove", "path": "/metadata/finalizers/0"}]);
    env.fake.handle(
        Method::PATCH,
        PV.into(),
        "application/json-patch+json".into(),
        release,
    );
    assert!(env.fake.get(PV).is_none());
    settle(&env, "c1").await.unwrap();
    let pv = env.fake.get(PV).expect("PV made again");
    assert!(pv["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(
        status(&current(&env, "c1")).phase,
        Some(ComputerPhase::Ready)
    );
}

#[tokio::test]
async fn a_spec_the_node_agent_refuses_is_refused_before_placement_and_narrows_a_placed_one() {
    let mut env = env();
    two_nodes(&mut env);
    // As an API server with an older CRD would let through.
    computer(
        &env,
        "c1",
        json!({"storage": {"size": "1Gi"},
               "egress": {"mode": "allow-list", "hosts": ["10.0.0.1"]}}),
    );
    let err = settle(&env, "c1").await.unwrap_err();
    assert_eq!(err.reason(), "invalid-spec", "{err}");
    let c = current(&env, "c1");
    assert_eq!(condition(&c, "Reconciled"), ("False", "InvalidSpec"));
    assert_eq!(condition(&c, "Ready").0, "False");
    let msg = c
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|k| k.type_ == "Reconciled")
        .unwrap()
        .message
        .clone();
    assert!(msg.contains("10.0.0.1"), "{msg}");
    assert!(
        c.labels().get("agentcomputer.dev/node").is_none(),
        "no node agent sees it"
    );
    assert!(env.fake.get(PV).is_none() && env.fake.get(PVC).is_none());

    // A placed allow-all computer changed to such a spec: its sandbox
    // policy becomes the narrowest (deny-all), as the node agent's proxy.
    computer(
        &env,
        "c2",
        json!({"storage": {"size": "1Gi"}, "egress": {"mode": "allow-all"}}),
    );
    settle(&env, "c2").await.unwrap();
    let np = "/apis/networking.k8s.io/v1/namespaces/team/networkpolicies/c2-egress";
    assert!(!env.fake.get(np).unwrap()["spec"]["egress"].is_null());
    let mut c = env.fake.get(&computer_path("c2")).unwrap();
    c["spec"]["egress"] = json!({"mode": "allow-list", "hosts": ["foo.123"]});
    c["metadata"]["generation"] = json!(2);
    env.fake.put(&computer_path("c2"), c);
    let err = reconcile(Arc::new(current(&env, "c2")), env.ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "invalid-spec", "{err}");
    assert!(
        env.fake.get(np).unwrap()["spec"]["egress"].is_null(),
        "deny-all"
    );
    let c = current(&env, "c2");
    assert_eq!(condition(&c, "EgressReady"), ("False", "InvalidSpec"));
    assert_eq!(condition(&c, "Reconciled"), ("False", "InvalidSpec"));
    assert_eq!(c.status.as_ref().unwrap().observed_generation, Some(1));
}
