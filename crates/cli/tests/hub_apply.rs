//! How people write Deployments, with each kubectl the machine carries (1.27, 1.32, 1.33):
//! client-side apply, patch, edit and diff; server-side apply between two managers; the
//! columns of `kubectl get`; owners deleting or orphaning their dependents.

mod support;

use serde_json::json;
use support::{Hub, kubectl_version};

fn web_deployment(image: &str, env: &str, ports: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: {image}
        env: [{env}]
        ports: [{ports}]
      - name: sidecar
        image: busybox:1
      volumes:
      - name: data
        emptyDir: {{}}
"#
    )
}

fn apply(hub: &Hub, args: &[&str], manifest: &str) -> String {
    let mut all = vec!["apply", "-f", "-"];
    all.extend(args);
    let out = hub.kubectl_with(&all, Some(manifest));
    assert!(
        out.status.success(),
        "kubectl {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Client-side apply, a hand patch on another container that survives a re-apply, diff
/// before the change, edit with a scripted editor.
fn client_side_apply(hub: &Hub) {
    let first = web_deployment(
        "nginx:1.26",
        "{name: A, value: '1'}",
        "{containerPort: 80}, {containerPort: 443}",
    );
    apply(hub, &[], &first);
    // A field set by hand on another container (default patch type: strategic).
    hub.ok(&["patch", "deploy", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","imagePullPolicy":"Always"}]}}}}"#]);

    let second = web_deployment(
        "nginx:1.27",
        "{name: A, value: '1'}, {name: B, value: '2'}",
        "{containerPort: 80}",
    );
    // kubectl diff shows the change first, and changes nothing.
    let out = hub.kubectl_with(&["diff", "-f", "-"], Some(&second));
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("-        image: nginx:1.26") && diff.contains("+        image: nginx:1.27"),
        "{diff}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        hub.json(&["get", "deploy", "web"])["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.26"
    );

    apply(hub, &[], &second);
    let spec = &hub.json(&["get", "deploy", "web"])["spec"]["template"]["spec"];
    assert_eq!(
        spec["containers"],
        json!([
            // With the defaults a cluster adds.
            {"name": "web", "image": "nginx:1.27", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80, "protocol": "TCP"}], "imagePullPolicy": "IfNotPresent",
             "resources": {}, "terminationMessagePath": "/dev/termination-log",
             "terminationMessagePolicy": "File"},
            {"name": "sidecar", "image": "busybox:1", "imagePullPolicy": "Always", "resources": {},
             "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
        ])
    );
    assert_eq!(spec["volumes"], json!([{"name": "data", "emptyDir": {}}]));

    // kubectl edit, with a scripted editor that changes the replicas.
    let editor = hub.dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/replicas: 2/replicas: 7/' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = hub
        .kubectl_command()
        .args(["edit", "deploy", "web"])
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let web = hub.json(&["get", "deploy", "web", "--show-managed-fields"]);
    assert_eq!(web["spec"]["replicas"], 7);
    // Every writer shows up in managedFields as an Update manager.
    let managers: Vec<(String, String)> = web["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_owned(),
                e["operation"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for manager in ["kubectl-client-side-apply", "kubectl-patch", "kubectl-edit"] {
        assert!(
            managers.contains(&(manager.to_owned(), "Update".to_owned())),
            "{managers:?}"
        );
    }
}

const API: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default, labels: {team: a}}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - {name: api, image: "api:1"}
"#;

/// Server-side apply: a re-apply changes nothing, a second manager conflicts, and
/// `--force-conflicts` takes the field over.
fn server_side_apply(hub: &Hub) {
    assert!(apply(hub, &["--server-side"], API).contains("serverside-applied"));
    let rv = |hub: &Hub| {
        hub.json(&["get", "deploy", "api"])["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = rv(hub);
    apply(hub, &["--server-side"], API);
    assert_eq!(
        rv(hub),
        before,
        "re-applying the same configuration is a no-op"
    );

    // A second manager that cares only for the replicas.
    let scaled = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: default}\nspec: {replicas: 5}\n";
    let out = hub.kubectl_with(
        &["apply", "--server-side", "--field-manager=ops", "-f", "-"],
        Some(scaled),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"kubectl\"")
            && err.contains(".spec.replicas"),
        "{err}"
    );
    assert_eq!(hub.json(&["get", "deploy", "api"])["spec"]["replicas"], 2);
    apply(
        hub,
        &["--server-side", "--field-manager=ops", "--force-conflicts"],
        scaled,
    );
    let api = hub.json(&["get", "deploy", "api", "--show-managed-fields"]);
    assert_eq!(api["spec"]["replicas"], 5);
    let entries = api["metadata"]["managedFields"].as_array().unwrap();
    let owner_of_replicas: Vec<&str> = entries
        .iter()
        .filter(|e| e["fieldsV1"]["f:spec"].get("f:replicas").is_some())
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(owner_of_replicas, ["ops"]);

    // The first manager drops its label and the replicas it lost: the label goes (nobody
    // else owns it), the replicas the other manager owns stay.
    let without_label = API
        .replace(", labels: {team: a}", "")
        .replace("  replicas: 2\n", "");
    apply(hub, &["--server-side"], &without_label);
    let api = hub.json(&["get", "deploy", "api"]);
    assert!(api["metadata"].get("labels").is_none(), "{api}");
    assert_eq!(api["spec"]["replicas"], 5);
}

/// `kubectl get deploy` prints the columns it prints against a cluster.
fn columns(hub: &Hub) {
    let out = hub.ok(&["get", "deploy"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("web ") && l.contains("0/7")),
        "{out}"
    );
}

/// A ReplicaSet owned by the Deployment `web` with `uid`.
fn owned_replicaset(name: &str, owner_uid: &str) -> String {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{{"name":"{name}","namespace":"default",
        "ownerReferences":[{{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"{owner_uid}","controller":true,"blockOwnerDeletion":true}}]}},
        "spec":{{"replicas":1,"selector":{{"matchLabels":{{"app":"web"}}}},"template":{{"metadata":{{"labels":{{"app":"web"}}}},
        "spec":{{"containers":[{{"name":"web","image":"nginx"}}]}}}}}}}}"#
    )
}

/// Waits until `kubectl get rs -o name` prints exactly `expected`.
fn wait_for_replicasets(hub: &Hub, expected: &[&str]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let names = hub.ok(&["get", "rs", "-o", "name"]);
        if names.lines().collect::<Vec<_>>() == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replicasets: {names:?}, expected {expected:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Deleting an owner deletes its dependents (background, foreground) or orphans them.
fn owners(hub: &Hub) {
    let manifest = web_deployment("nginx:1.27", "", "{containerPort: 80}");
    for cascade in ["background", "foreground", "orphan"] {
        if !hub.kubectl(&["get", "deploy", "web"]).status.success() {
            apply(hub, &[], &manifest);
        }
        let uid = hub.json(&["get", "deploy", "web"])["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        hub.create(&owned_replicaset("web-1", &uid));
        hub.create(&owned_replicaset("web-2", &uid));
        hub.create(&owned_replicaset("other", "someone-else"));
        hub.ok(&[
            "delete",
            "deploy",
            "web",
            &format!("--cascade={cascade}"),
            "--timeout=30s",
        ]);
        assert!(
            hub.fails(&["get", "deploy", "web"]).contains("not found"),
            "{cascade}"
        );
        if cascade == "orphan" {
            wait_for_replicasets(
                hub,
                &[
                    "replicaset.apps/other",
                    "replicaset.apps/web-1",
                    "replicaset.apps/web-2",
                ],
            );
            let rs = hub.json(&["get", "rs", "web-1"]);
            assert!(
                rs["metadata"].get("ownerReferences").is_none(),
                "orphaned: {rs}"
            );
        } else {
            wait_for_replicasets(hub, &["replicaset.apps/other"]);
        }
        hub.ok(&["delete", "rs", "--all"]);
        wait_for_replicasets(hub, &[]);
    }
}

fn workflow(version: &str) {
    let hub = Hub::start().using(kubectl_version(version));
    client_side_apply(&hub);
    server_side_apply(&hub);
    columns(&hub);
    owners(&hub);
}

#[test]
fn kubectl_1_27_applies_patches_edits_and_cascades() {
    workflow("1.27");
}

#[test]
fn kubectl_1_32_applies_patches_edits_and_cascades() {
    workflow("1.32");
}

#[test]
fn kubectl_1_33_applies_patches_edits_and_cascades() {
    workflow("1.33");
}
