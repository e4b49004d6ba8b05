//! Identity and access with real credentials, end to end (issue 21's acceptance): a real
//! `flotilla hub`, the real kubectl with kubeconfigs holding a ServiceAccount's token
//! (`kubectl create token`) or a client certificate the hub signed for an approved CSR,
//! kube-rs's `watcher` and the Python client's `Watch` as a ServiceAccount, the
//! ClusterSetBinding `bind` check and the audit log: no impersonation stands in for a
//! user here (that is `rbac.rs`).

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::WatchParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::audit::{events, summary};
use support::identity::{
    CLIENT, assert_forbidden, certificate_kubeconfig, certificate_request, certificate_user,
    csr_manifest, run, run_with, signed_certificate, stderr, text, token, token_kubeconfig,
    unauthorized, whoami,
};
use support::{Hub, condition, eventually, eventually_within};

/// Someone using the hub with credentials of their own (a kubeconfig with a token or a
/// client certificate), by the user name the hub knows them by.
struct User {
    name: String,
    kubeconfig: PathBuf,
}

impl User {
    fn run(&self, args: &[&str]) -> Output {
        run(&self.kubeconfig, args)
    }

    /// Runs kubectl, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{}: kubectl {args:?}: {}",
            self.name,
            text(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl create -f -` of `manifest`, which must succeed.
    fn create(&self, manifest: &str) -> String {
        let out = run_with(&self.kubeconfig, &["create", "-f", "-"], Some(manifest));
        assert!(
            out.status.success(),
            "{}: create {manifest}: {}",
            self.name,
            text(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl, which must be refused with 403 by a Status naming this user; its
    /// stderr.
    fn forbidden(&self, args: &[&str]) -> String {
        self.refused(args, &self.run(args))
    }

    /// `kubectl create -f -` of `manifest`, which must be refused with 403.
    fn forbidden_create(&self, manifest: &str) -> String {
        let args = ["create", "-f", "-"];
        self.refused(&args, &run_with(&self.kubeconfig, &args, Some(manifest)))
    }

    fn refused(&self, args: &[&str], out: &Output) -> String {
        let said = assert_forbidden(args, out);
        assert!(
            said.contains(&format!("User \"{}\"", self.name))
                || said.contains(&format!("user \"{}\"", self.name)),
            "{}: kubectl {args:?}: the refusal names someone else: {said}",
            self.name
        );
        said
    }

    /// Whether `kubectl auth can-i ARGS…` says yes.
    fn can_i(&self, args: &[&str]) -> bool {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        match String::from_utf8_lossy(&out.stdout).trim() {
            "yes" => true,
            "no" => false,
            _ => panic!("{}: kubectl {all:?}: {}", self.name, text(&out)),
        }
    }
}

/// The 403 message's words for `user` refused `verb` on `resource` of `group` in
/// `namespace` (`""`: at the cluster scope), as Kubernetes words them.
fn cannot(user: &str, verb: &str, resource: &str, group: &str, namespace: &str) -> String {
    let scope = match namespace {
        "" => "at the cluster scope".to_owned(),
        ns => format!("in the namespace \"{ns}\""),
    };
    format!(
        "User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"
    )
}

/// Asserts that `said` contains `expected`.
fn says(said: &str, expected: &str) {
    assert!(said.contains(expected), "expected {expected:?} in: {said}");
}

/// ServiceAccount `name` in `namespace` (which must exist), bound to ClusterRole `role`
/// there when one is given; a user with a token of it from `kubectl create token`.
fn service_account(hub: &Hub, namespace: &str, name: &str, role: Option<&str>) -> User {
    hub.ok(&["create", "serviceaccount", name, "-n", namespace]);
    let subject = format!("--serviceaccount={namespace}:{name}");
    if let Some(role) = role {
        let binding = format!("{name}-{role}");
        let clusterrole = format!("--clusterrole={role}");
        hub.ok(&[
            "create",
            "rolebinding",
            &binding,
            &clusterrole,
            &subject,
            "-n",
            namespace,
        ]);
    }
    let issued = token(hub, &[name, "-n", namespace, "--duration", "1h"]);
    User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        kubeconfig: token_kubeconfig(hub, &format!("{namespace}-{name}"), &issued),
    }
}

/// The Deployment, Placement and Override a team writes in `namespace`.
fn team_objects(namespace: &str) -> [(&'static str, &'static str, String); 3] {
    [
        (
            "deployments",
            "apps",
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {namespace}}}\n\
                 spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n\
                 \x20 template:\n    metadata: {{labels: {{app: web}}}}\n\
                 \x20   spec: {{containers: [{{name: web, image: \"nginx:1.27\"}}]}}\n"
            ),
        ),
        (
            "placements",
            "flotilla.io",
            format!(
                "apiVersion: flotilla.io/v1alpha1\nkind: Placement\n\
                 metadata: {{name: web, namespace: {namespace}}}\n\
                 spec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n"
            ),
        ),
        (
            "overrides",
            "flotilla.io",
            format!(
                "apiVersion: flotilla.io/v1alpha1\nkind: Override\n\
                 metadata: {{name: web, namespace: {namespace}}}\n\
                 spec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n\
                 \x20 rules: [{{jsonPatch: [{{op: replace, path: /spec/replicas, value: 3}}]}}]\n"
            ),
        ),
    ]
}

#[test]
fn a_service_account_token_works_in_its_namespace_only_and_stops_when_the_account_goes() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    let ci = service_account(&hub, "shop", "ci", Some("edit"));
    let user = ci.name.as_str();
    assert_eq!(whoami(&ci.kubeconfig).unwrap()["username"], user);

    // In shop: a Deployment, a Placement and an Override.
    for (resource, _, manifest) in team_objects("shop") {
        let created = ci.create(&manifest);
        assert!(created.contains("web created"), "{resource}: {created}");
    }
    let placed = hub.json(&["get", "placement", "web", "-n", "shop"]);
    assert_eq!(placed["metadata"]["name"], "web");
    // The same in default: 403, naming the user, the verb, the resource and the namespace.
    for (resource, group, manifest) in team_objects("default") {
        let refused = ci.forbidden_create(&manifest);
        says(
            &refused,
            &cannot(user, "create", resource, group, "default"),
        );
    }
    // Secrets of kube-system, read or written: 403.
    let refused = ci.forbidden(&["get", "secrets", "-n", "kube-system"]);
    says(
        &refused,
        &format!(
            "secrets is forbidden: {}",
            cannot(user, "list", "secrets", "", "kube-system")
        ),
    );
    let refused = ci.forbidden(&[
        "create",
        "secret",
        "generic",
        "stolen",
        "--from-literal=a=b",
        "-n",
        "kube-system",
    ]);
    says(
        &refused,
        &cannot(user, "create", "secrets", "", "kube-system"),
    );
    // A ClusterRoleBinding (making itself cluster-admin): 403.
    let refused = ci.forbidden(&[
        "create",
        "clusterrolebinding",
        "ci-admin",
        "--clusterrole=cluster-admin",
        "--serviceaccount=shop:ci",
    ]);
    says(
        &refused,
        &format!(
            "clusterrolebindings.rbac.authorization.k8s.io is forbidden: {}",
            cannot(
                user,
                "create",
                "clusterrolebindings",
                "rbac.authorization.k8s.io",
                ""
            )
        ),
    );
    assert!(
        !hub.kubectl(&["get", "clusterrolebinding", "ci-admin"])
            .status
            .success(),
        "nothing was written"
    );

    // What it may do in shop, as kubectl lists it.
    let rules = ci.ok(&["auth", "can-i", "--list", "-n", "shop"]);
    let row = |resource: &str| {
        rules
            .lines()
            .find(|l| l.split_whitespace().next() == Some(resource))
            .unwrap_or_else(|| panic!("no {resource} in\n{rules}"))
            .to_owned()
    };
    for resource in [
        "deployments.apps",
        "placements.flotilla.io",
        "overrides.flotilla.io",
    ] {
        let row = row(resource);
        assert!(row.contains("create") && row.contains("delete"), "{row}");
    }
    assert!(
        !rules.lines().any(|l| l.starts_with("rolebindings.rbac")),
        "edit grants no bindings: {rules}"
    );
    assert!(ci.can_i(&["create", "deployments", "-n", "shop"]));
    assert!(!ci.can_i(&["create", "deployments", "-n", "default"]));

    // Impersonation: refused to ci, which may not impersonate users; the admin may.
    hub.ok(&[
        "create",
        "rolebinding",
        "alice-view",
        "--clusterrole=view",
        "--user=alice",
        "-n",
        "shop",
    ]);
    let refused = ci.forbidden(&["--as", "alice", "get", "pods", "-n", "shop"]);
    says(
        &refused,
        &format!(
            "users \"alice\" is forbidden: {}",
            cannot(user, "impersonate", "users", "", "")
        ),
    );
    let pods = hub.kubectl(&["--as", "alice", "get", "pods", "-n", "shop"]);
    assert!(pods.status.success(), "{}", text(&pods));
    let alice = hub.ok(&["--as", "alice", "auth", "whoami", "-o", "json"]);
    assert!(alice.contains("\"username\": \"alice\""), "{alice}");

    // The account deleted: its token is refused (401) from then on.
    hub.ok(&["delete", "serviceaccount", "ci", "-n", "shop"]);
    eventually_within(
        "ci's token is refused",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match ci.run(&["get", "deployments", "-n", "shop"]) {
            out if stderr(&out).contains("Unauthorized") => Ok(()),
            out => Err(text(&out)),
        },
    );
    assert!(unauthorized(&ci.kubeconfig));
}

#[test]
fn a_certificate_user_in_a_viewing_group_reads_everywhere_and_one_without_bindings_only_discovers()
{
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=colour=blue",
        "-n",
        "shop",
    ]);
    let alice = User {
        name: "alice".into(),
        kubeconfig: certificate_user(&hub, "alice", "team-a"),
    };
    let me = whoami(&alice.kubeconfig).unwrap();
    assert_eq!(me["username"], "alice");
    assert_eq!(me["groups"], json!(["team-a", "system:authenticated"]));
    // No binding yet: nothing to read.
    let refused = alice.forbidden(&["get", "pods", "-n", "shop"]);
    says(&refused, &cannot("alice", "list", "pods", "", "shop"));

    // `view` to her group: she reads pods and configmaps everywhere, writes nothing.
    hub.ok(&[
        "create",
        "clusterrolebinding",
        "team-a-view",
        "--clusterrole=view",
        "--group=team-a",
    ]);
    for namespace in ["shop", "default", "kube-system"] {
        alice.ok(&["get", "pods", "-n", namespace]);
        alice.ok(&["get", "configmaps", "-n", namespace]);
    }
    alice.ok(&["get", "pods", "--all-namespaces"]);
    let all = alice.ok(&["get", "configmaps", "--all-namespaces", "-o", "name"]);
    assert!(all.contains("configmap/settings"), "{all}");
    let read = alice.ok(&["get", "configmap", "settings", "-n", "shop", "-o", "json"]);
    assert!(read.contains("\"colour\": \"blue\""), "{read}");
    for (args, verb, resource, namespace) in [
        (
            &["create", "configmap", "mine", "-n", "shop"][..],
            "create",
            "configmaps",
            "shop",
        ),
        (
            &["delete", "configmap", "settings", "-n", "shop"],
            "delete",
            "configmaps",
            "shop",
        ),
        (
            &["label", "configmap", "settings", "x=y", "-n", "shop"],
            "patch",
            "configmaps",
            "shop",
        ),
        (
            &[
                "create",
                "deployment",
                "web",
                "--image=nginx",
                "-n",
                "default",
            ],
            "create",
            "deployments",
            "default",
        ),
        (&["create", "namespace", "mine"], "create", "namespaces", ""),
    ] {
        let refused = alice.forbidden(args);
        let group = if resource == "deployments" {
            "apps"
        } else {
            ""
        };
        says(&refused, &cannot("alice", verb, resource, group, namespace));
    }
    let settings = hub.json(&["get", "configmap", "settings", "-n", "shop"]);
    assert!(settings["metadata"]["labels"].is_null(), "{settings}");

    // bob's CSR, approved by a ServiceAccount that may update approvals: refused until it
    // may also `approve` on the signer.
    hub.ok(&["create", "namespace", "pki"]);
    let approver = service_account(&hub, "pki", "approver", None);
    hub.create(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: csr-approval}\nrules:\n\
         - {apiGroups: [certificates.k8s.io], resources: [certificatesigningrequests], verbs: [get, list, watch]}\n\
         - {apiGroups: [certificates.k8s.io], resources: [certificatesigningrequests/approval], verbs: [update]}\n",
    );
    hub.ok(&[
        "create",
        "clusterrolebinding",
        "approver-csr-approval",
        "--clusterrole=csr-approval",
        "--serviceaccount=pki:approver",
    ]);
    let (request, key) = certificate_request("bob", "team-b");
    hub.create(&csr_manifest("bob", &request, CLIENT, &["client auth"]));
    assert!(approver.can_i(&[
        "update",
        "certificatesigningrequests",
        "--subresource=approval"
    ]));
    // (Kubernetes' words for this refusal name the signer, not the user.)
    let approve = ["certificate", "approve", "bob"];
    let refused = assert_forbidden(&approve, &approver.run(&approve));
    says(
        &refused,
        "certificatesigningrequests.certificates.k8s.io \"bob\" is forbidden: user not permitted \
         to approve requests with signerName \"kubernetes.io/kube-apiserver-client\"",
    );
    let csr = hub.json(&["get", "csr", "bob"]);
    assert!(condition(&csr, "Approved").is_none(), "{csr}");
    hub.ok(&[
        "create",
        "clusterrolebinding",
        "approver-signer",
        "--clusterrole=system:certificates.k8s.io:kube-apiserver-client-approver",
        "--serviceaccount=pki:approver",
    ]);
    approver.ok(&["certificate", "approve", "bob"]);
    let bob = User {
        name: "bob".into(),
        kubeconfig: certificate_kubeconfig(&hub, "bob", &signed_certificate(&hub, "bob"), &key),
    };

    // bob has no bindings: discovery, /version and questions about himself only.
    assert_eq!(whoami(&bob.kubeconfig).unwrap()["username"], "bob");
    let resources = bob.ok(&["api-resources"]);
    assert!(resources.contains("placements"), "{resources}");
    let version = bob.ok(&["version", "-o", "json"]);
    assert!(version.contains("serverVersion"), "{version}");
    assert!(!bob.can_i(&["get", "pods"]));
    let refused = bob.forbidden(&["get", "pods"]);
    says(&refused, &cannot("bob", "list", "pods", "", "default"));
    for args in [
        &["get", "configmaps", "-n", "shop"][..],
        &["get", "namespaces"],
        &["create", "namespace", "bobs"],
    ] {
        bob.forbidden(args);
    }
}

#[test]
fn an_editor_service_account_binds_admin_only_once_given_bind_on_it() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    let lead = service_account(&hub, "shop", "lead", Some("edit"));
    // Writing bindings in shop (what `edit` alone does not give).
    hub.ok(&[
        "create",
        "role",
        "binder",
        "--verb=create,get,list",
        "--resource=rolebindings",
        "-n",
        "shop",
    ]);
    hub.ok(&[
        "create",
        "rolebinding",
        "lead-binder",
        "--role=binder",
        "--serviceaccount=shop:lead",
        "-n",
        "shop",
    ]);
    let bind = |role: &str| {
        let name = format!("bob-{role}");
        let clusterrole = format!("--clusterrole={role}");
        let args = [
            "create",
            "rolebinding",
            name.as_str(),
            clusterrole.as_str(),
            "--user=bob",
            "-n",
            "shop",
        ];
        (lead.run(&args), args.map(str::to_owned))
    };
    let escalating = |role: &str| {
        let (out, args) = bind(role);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let refused = lead.refused(&args, &out);
        says(
            &refused,
            &format!(
                "rolebindings.rbac.authorization.k8s.io \"bob-{role}\" is forbidden: user \
                 \"{}\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:shop\" \
                 \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:",
                lead.name
            ),
        );
        let written = hub.kubectl(&["get", "rolebinding", &format!("bob-{role}"), "-n", "shop"]);
        assert!(!written.status.success(), "bob-{role} was written");
    };
    escalating("admin");
    escalating("cluster-admin");
    // What it holds it may grant.
    let (out, _) = bind("view");
    assert!(out.status.success(), "{}", text(&out));

    // Given `bind` on ClusterRole admin (by name): admin, and still not cluster-admin.
    hub.ok(&[
        "create",
        "role",
        "bind-admin",
        "--verb=bind",
        "--resource=clusterroles",
        "--resource-name=admin",
        "-n",
        "shop",
    ]);
    hub.ok(&[
        "create",
        "rolebinding",
        "lead-bind-admin",
        "--role=bind-admin",
        "--serviceaccount=shop:lead",
        "-n",
        "shop",
    ]);
    let (out, _) = bind("admin");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        hub.json(&["get", "rolebinding", "bob-admin", "-n", "shop"])["roleRef"]["name"] == "admin"
    );
    escalating("cluster-admin");
    // bob now administers shop (roles included), and nothing beyond it.
    let bob_can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--as", "bob"];
        all.extend_from_slice(args);
        hub.kubectl(&all).stdout.starts_with(b"yes")
    };
    assert!(bob_can(&["create", "roles", "-n", "shop"]));
    assert!(!bob_can(&["create", "roles", "-n", "default"]));
}

/// A client of the hub with `kubeconfig`'s credentials.
async fn client(kubeconfig: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// A change a watcher saw: `apply` or `delete`, the namespace, the name, its `colour`.
type Seen = (String, String, String, String);

fn seen(kind: &str, namespace: &str, name: &str, colour: &str) -> Seen {
    (
        kind.to_owned(),
        namespace.to_owned(),
        name.to_owned(),
        colour.to_owned(),
    )
}

fn seen_configmap(kind: &str, cm: &ConfigMap) -> Seen {
    let colour = cm
        .data
        .as_ref()
        .and_then(|d| d.get("colour"))
        .cloned()
        .unwrap_or_default();
    seen(
        kind,
        &cm.namespace().unwrap_or_default(),
        &cm.name_any(),
        &colour,
    )
}

/// What the Python client does as the ServiceAccount: a watch across namespaces (which
/// must fail), then a list and a watch from it of the ConfigMaps in `shop`, one JSON line
/// per event.
const PYTHON_INFORMER: &str = r#"
import json, sys
from kubernetes import client, config, watch

def say(line):
    print(json.dumps(line), flush=True)

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
try:
    for _ in watch.Watch().stream(v1.list_config_map_for_all_namespaces, timeout_seconds=1):
        pass
    say({"type": "ALL", "status": 200})
except client.exceptions.ApiException as e:
    say({"type": "ALL", "status": e.status, "message": json.loads(e.body)["message"]})
listed = v1.list_namespaced_config_map("shop")
say({"type": "LISTED", "names": [c.metadata.name for c in listed.items]})
w = watch.Watch()
for event in w.stream(v1.list_namespaced_config_map, "shop",
                      resource_version=listed.metadata.resource_version, timeout_seconds=120):
    o = event["object"]
    say({"type": event["type"], "namespace": o.metadata.namespace, "name": o.metadata.name,
         "colour": (o.data or {}).get("colour", "")})
"#;

/// A child process killed (by its id) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Receives from `rx` until `done` holds for everything received (which it returns);
/// panics after 30 s.
fn receive_until<T: std::fmt::Debug>(
    what: &str,
    rx: &mpsc::Receiver<T>,
    got: &mut Vec<T>,
    done: impl Fn(&[T]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(got) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(item) => got.push(item),
            Err(e) => panic!("{what}: {e}; so far: {got:?}"),
        }
    }
}

#[test]
fn a_namespaced_service_accounts_kube_rs_watcher_and_python_informer_see_its_namespace_only() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    let reader = service_account(&hub, "shop", "reader", Some("view"));
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // kube-rs: a cluster-wide watch is refused; a watcher of shop runs.
    let refused = runtime.block_on(async {
        let all: Api<ConfigMap> = Api::all(client(&reader.kubeconfig).await);
        match all.watch(&WatchParams::default(), "0").await {
            Err(kube::Error::Api(status)) => status,
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a cluster-wide watch was allowed"),
        }
    });
    assert_eq!(refused.code, 403, "{refused:?}");
    says(
        &refused.message,
        &cannot(&reader.name, "watch", "configmaps", "", ""),
    );
    let (kube_tx, kube_rx) = mpsc::channel::<Result<Option<Seen>, String>>();
    let shop: Api<ConfigMap> =
        runtime.block_on(async { Api::namespaced(client(&reader.kubeconfig).await, "shop") });
    runtime.spawn(async move {
        let mut events = std::pin::pin!(watcher(shop, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let sent = match event {
                Ok(Event::InitDone) => Ok(None),
                Ok(Event::Init) => continue,
                Ok(Event::InitApply(cm)) => Ok(Some(seen_configmap("init", &cm))),
                Ok(Event::Apply(cm)) => Ok(Some(seen_configmap("apply", &cm))),
                Ok(Event::Delete(cm)) => Ok(Some(seen_configmap("delete", &cm))),
                Err(e) => Err(e.to_string()),
            };
            if kube_tx.send(sent).is_err() {
                return;
            }
        }
    });

    // Python: the same account, Debian's python3-kubernetes.
    let script = hub.dir.path().join("informer.py");
    std::fs::write(&script, PYTHON_INFORMER).unwrap();
    let mut python = Killed(
        Command::new("/usr/bin/python3")
            .arg(&script)
            .arg(&reader.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run /usr/bin/python3 (python3-kubernetes)"),
    );
    let (py_tx, py_rx) = mpsc::channel::<Value>();
    let stdout = python.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let event = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            if py_tx.send(event).is_err() {
                return;
            }
        }
    });

    // Both ready: kube-rs listed (nothing in shop), Python was refused across namespaces
    // and listed.
    let mut from_kube = Vec::new();
    receive_until(
        "the kube-rs watcher lists",
        &kube_rx,
        &mut from_kube,
        |got| got.iter().any(|e| matches!(e, Ok(None))),
    );
    assert_eq!(from_kube, [Ok(None)], "shop starts empty");
    let mut from_python = Vec::new();
    receive_until(
        "the Python informer lists",
        &py_rx,
        &mut from_python,
        |got| got.iter().any(|e| e["type"] == "LISTED"),
    );
    assert_eq!(from_python[0]["type"], "ALL");
    assert_eq!(from_python[0]["status"], 403, "{from_python:?}");
    says(
        from_python[0]["message"].as_str().unwrap(),
        &cannot(&reader.name, "watch", "configmaps", "", ""),
    );
    assert_eq!(from_python[1], json!({"type": "LISTED", "names": []}));

    // The admin's changes, in shop and in default, interleaved; a last one in shop.
    for args in [
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=colour=blue",
            "-n",
            "shop",
        ][..],
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=colour=red",
            "-n",
            "default",
        ],
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "shop",
            "-p",
            r#"{"data":{"colour":"green"}}"#,
        ],
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "default",
            "-p",
            r#"{"data":{"colour":"pink"}}"#,
        ],
        &["delete", "configmap", "settings", "-n", "shop"],
        &["delete", "configmap", "settings", "-n", "default"],
        &[
            "create",
            "configmap",
            "last",
            "--from-literal=colour=grey",
            "-n",
            "shop",
        ],
    ] {
        hub.ok(args);
    }
    let expected = vec![
        seen("apply", "shop", "settings", "blue"),
        seen("apply", "shop", "settings", "green"),
        seen("delete", "shop", "settings", "green"),
        seen("apply", "shop", "last", "grey"),
    ];
    let last = |s: &Seen| s.2 == "last";
    let mut got = Vec::new();
    receive_until(
        "the kube-rs watcher sees the last change",
        &kube_rx,
        &mut got,
        |got| got.iter().any(|e| matches!(e, Ok(Some(s)) if last(s))),
    );
    let got: Vec<Seen> = got
        .into_iter()
        .map(|e| {
            e.unwrap_or_else(|e| panic!("the watcher failed: {e}"))
                .unwrap()
        })
        .collect();
    assert_eq!(got, expected, "kube-rs");
    let mut events = Vec::new();
    receive_until(
        "the Python informer sees the last change",
        &py_rx,
        &mut events,
        |got| got.iter().any(|e| e["name"] == "last"),
    );
    let got: Vec<Seen> = events
        .iter()
        .map(|e| {
            let kind = match e["type"].as_str().unwrap() {
                "ADDED" | "MODIFIED" => "apply",
                "DELETED" => "delete",
                other => panic!("{other}: {e}"),
            };
            let s = |field: &str| e[field].as_str().unwrap_or_default().to_owned();
            seen(kind, &s("namespace"), &s("name"), &s("colour"))
        })
        .collect();
    assert_eq!(got, expected, "Python");
    // The exact types, as the Python client reports them.
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED", "ADDED"]);
    // And nothing later from default either: one more change in shop arrives alone.
    hub.ok(&["delete", "configmap", "last", "-n", "shop"]);
    let next = kube_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(next, Ok(Some(seen("delete", "shop", "last", "grey"))));
    let next = py_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        (&next["type"], &next["name"]),
        (&json!("DELETED"), &json!("last"))
    );
    drop(python);
    runtime.shutdown_background();
}

/// A ClusterSet `name`.
fn cluster_set(name: &str) -> String {
    format!(
        "apiVersion: flotilla.io/v1alpha1\nkind: ClusterSet\nmetadata: {{name: {name}}}\nspec: {{}}\n"
    )
}

/// A ClusterSetBinding of `set` in `namespace`.
fn binding(namespace: &str, set: &str) -> String {
    format!(
        "apiVersion: flotilla.io/v1alpha1\nkind: ClusterSetBinding\n\
         metadata: {{name: {set}, namespace: {namespace}}}\nspec: {{clusterSet: {set}}}\n"
    )
}

#[test]
fn a_team_service_account_binds_only_the_cluster_sets_it_may_bind() {
    let hub = Hub::start();
    // The platform team: the sets, and `bind` on eu for the team.
    hub.create(&cluster_set("eu"));
    hub.create(&cluster_set("us"));
    hub.ok(&["create", "namespace", "shop"]);
    let team = service_account(&hub, "shop", "team", Some("edit"));
    // edit does not write a namespace's ClusterSetBindings: refused before any grant.
    let refused = team.forbidden_create(&binding("shop", "eu"));
    says(
        &refused,
        &cannot(
            &team.name,
            "create",
            "clustersetbindings",
            "flotilla.io",
            "shop",
        ),
    );
    hub.ok(&[
        "create",
        "role",
        "set-bindings",
        "--verb=create,get,list,delete",
        "--resource=clustersetbindings.flotilla.io",
        "-n",
        "shop",
    ]);
    hub.ok(&[
        "create",
        "rolebinding",
        "team-set-bindings",
        "--role=set-bindings",
        "--serviceaccount=shop:team",
        "-n",
        "shop",
    ]);
    // (kubectl's `create clusterrole` takes `bind` for roles alone: a manifest.)
    hub.create(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: bind-eu}\n\
         rules: [{apiGroups: [flotilla.io], resources: [clustersets], resourceNames: [eu], verbs: [bind]}]\n",
    );
    hub.ok(&[
        "create",
        "clusterrolebinding",
        "team-bind-eu",
        "--clusterrole=bind-eu",
        "--serviceaccount=shop:team",
    ]);
    // eu: bound. us: 403, nothing written.
    let created = team.create(&binding("shop", "eu"));
    assert!(
        created.contains("clustersetbinding.flotilla.io/eu created"),
        "{created}"
    );
    let refused = team.forbidden_create(&binding("shop", "us"));
    says(
        &refused,
        &format!(
            "clustersets.flotilla.io \"us\" is forbidden: {}: it is needed to write \
             clustersetbindings.flotilla.io \"us\" in the namespace \"shop\"",
            cannot(&team.name, "bind", "clustersets", "flotilla.io", "")
        ),
    );
    let out = hub.kubectl(&["get", "clustersetbinding", "us", "-n", "shop"]);
    assert!(stderr(&out).contains("NotFound"), "{}", text(&out));
    let names = team.ok(&["get", "clustersetbindings", "-n", "shop", "-o", "name"]);
    assert_eq!(names, "clustersetbinding.flotilla.io/eu\n");
    // Nor may it remove a binding of a set it may not bind: the admin's us binding stays.
    hub.create(&binding("shop", "us"));
    let refused = team.forbidden(&["delete", "clustersetbinding", "us", "-n", "shop"]);
    says(
        &refused,
        &cannot(&team.name, "bind", "clustersets", "flotilla.io", ""),
    );
    hub.ok(&["get", "clustersetbinding", "us", "-n", "shop"]);
    team.ok(&["delete", "clustersetbinding", "eu", "-n", "shop"]);
}

#[test]
fn the_audit_log_names_the_real_users_with_their_verbs_resources_and_codes() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("audit.log");
    let hub = Hub::start_with(&["--audit-log-path", log.to_str().unwrap()]);
    hub.ok(&["create", "namespace", "shop"]);
    let ci = service_account(&hub, "shop", "ci", Some("edit"));
    let alice = User {
        name: "alice".into(),
        kubeconfig: certificate_user(&hub, "alice", "team-a"),
    };
    hub.ok(&[
        "create",
        "clusterrolebinding",
        "team-a-view",
        "--clusterrole=view",
        "--group=team-a",
    ]);
    // The session.
    ci.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=a=1",
        "-n",
        "shop",
    ]);
    ci.ok(&["get", "configmap", "settings", "-n", "shop"]);
    ci.forbidden(&["get", "secrets", "-n", "kube-system"]);
    alice.ok(&["get", "configmaps", "-n", "shop"]);
    alice.forbidden(&["delete", "configmap", "settings", "-n", "shop"]);
    hub.ok(&["delete", "serviceaccount", "ci", "-n", "shop"]);
    eventually("ci is refused", || {
        match ci.run(&["get", "configmap", "settings", "-n", "shop"]) {
            out if stderr(&out).contains("Unauthorized") => Ok(()),
            out => Err(text(&out)),
        }
    });

    let expected = |verb: &str, resource: &str, namespace: &str, name: &str, code: i64| {
        (
            verb.to_owned(),
            resource.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
            code,
        )
    };
    let of_ci = [
        expected("create", "configmaps", "shop", "settings", 201),
        expected("get", "configmaps", "shop", "settings", 200),
        expected("list", "secrets", "kube-system", "", 403),
    ];
    let of_alice = [
        expected("list", "configmaps", "shop", "", 200),
        expected("delete", "configmaps", "shop", "settings", 403),
    ];
    let answered = |events: &[Value], user: &str| -> Vec<_> {
        events
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == user)
            .map(summary)
            .collect()
    };
    let all = eventually("the session is in the audit log", || {
        let all = events(&log);
        let ci_did = answered(&all, &ci.name);
        let alice_did = answered(&all, "alice");
        let revoked = all.iter().any(|e| e["responseStatus"]["code"] == 401);
        match of_ci.iter().all(|s| ci_did.contains(s))
            && of_alice.iter().all(|s| alice_did.contains(s))
            && revoked
        {
            true => Ok(all),
            false => Err(format!(
                "ci: {ci_did:?}; alice: {alice_did:?}; 401: {revoked}"
            )),
        }
    });
    // Each request once, with the user's groups and the Status of a refusal.
    for (user, session) in [(&ci.name, &of_ci[..]), (&"alice".to_owned(), &of_alice[..])] {
        for request in session {
            let found: Vec<&Value> = all
                .iter()
                .filter(|e| {
                    e["stage"] == "ResponseComplete"
                        && e["user"]["username"] == user.as_str()
                        && summary(e) == *request
                })
                .collect();
            assert_eq!(found.len(), 1, "{user} {request:?}: {found:?}");
            let event = found[0];
            let groups = &event["user"]["groups"];
            if user.as_str() == "alice" {
                assert_eq!(groups, &json!(["team-a", "system:authenticated"]));
            } else {
                assert_eq!(
                    groups,
                    &json!([
                        "system:serviceaccounts",
                        "system:serviceaccounts:shop",
                        "system:authenticated"
                    ])
                );
            }
            if request.4 == 403 {
                assert_eq!(event["responseStatus"]["reason"], "Forbidden", "{event}");
            }
        }
    }
    // The revoked token's request: 401, no user, and why in the annotation only.
    let revoked: Vec<&Value> = all
        .iter()
        .filter(|e| {
            e["responseStatus"]["code"] == 401
                && e["requestURI"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("/api/v1/namespaces/shop/configmaps/settings"))
        })
        .collect();
    assert!(!revoked.is_empty(), "no 401 for ci's revoked token");
    for event in revoked {
        assert_eq!(event["user"], json!({}), "{event}");
        let why = event["annotations"]["authentication.flotilla.io/failure-reason"]
            .as_str()
            .unwrap_or_default();
        says(why, "shop/ci");
    }
}
