//! The real kubectl against a real `flotilla hub` process.
//!
//! kubectl validates with the server (`fieldValidation=Strict`, learnt from `/openapi/v3`).

use std::io::{BufRead, BufReader};
use std::process::Stdio;

mod support;

use support::{Hub, kubectl_command};

fn configmap(name: &str, namespace: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"{namespace}","labels":{{"app":"web"}}}},"data":{{"k":"v"}}}}"#
    )
}

#[test]
fn initial_namespaces_and_a_token_that_is_checked() {
    let hub = Hub::start();
    let names = hub.ok(&["get", "ns", "-o", "name"]);
    for ns in ["default", "kube-system", "kube-public"] {
        assert!(names.contains(&format!("namespace/{ns}")), "{names}");
    }
    // The same kubeconfig with another token is refused.
    let text = std::fs::read_to_string(hub.kubeconfig()).unwrap();
    let token = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["users"][0]["user"]["token"].as_str().map(str::to_owned))
        .expect("a JSON kubeconfig with a token");
    let wrong = hub.dir.path().join("wrong.kubeconfig");
    std::fs::write(&wrong, text.replace(&token, "not-the-token")).unwrap();
    let out = kubectl_command(&wrong)
        .args(["get", "ns"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn api_resources_and_version() {
    let hub = Hub::start();
    let resources = hub.ok(&["api-resources", "-o", "name"]);
    for r in [
        "configmaps",
        "namespaces",
        "deployments.apps",
        "customresourcedefinitions.apiextensions.k8s.io",
        "leases.coordination.k8s.io",
    ] {
        assert!(
            resources.lines().any(|l| l == r),
            "{r} missing from {resources}"
        );
    }
    let wide = hub.ok(&["api-resources"]);
    assert!(
        wide.lines().any(|l| l.starts_with("deployments")
            && l.contains("deploy")
            && l.contains("apps/v1")
            && l.contains("true")
            && l.contains("Deployment")),
        "{wide}"
    );
    let version = hub.ok(&["version", "-o", "json"]);
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["serverVersion"]["minor"], "32");
}

#[test]
fn create_get_label_annotate_patch_replace_delete() {
    let hub = Hub::start();
    assert!(
        hub.create(&configmap("web", "default"))
            .contains("configmap/web created")
    );
    let cm = hub.json(&["get", "cm", "web"]);
    assert_eq!(cm["data"]["k"], "v");
    for field in ["uid", "resourceVersion", "creationTimestamp"] {
        assert!(
            cm["metadata"][field]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{field}: {cm}"
        );
    }
    let yaml = hub.ok(&["get", "cm", "web", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: ConfigMap") && yaml.contains("k: v"),
        "{yaml}"
    );

    hub.ok(&["label", "cm", "web", "tier=front"]);
    hub.ok(&["annotate", "cm", "web", "note=hello"]);
    hub.ok(&[
        "patch",
        "cm",
        "web",
        "--type=merge",
        "-p",
        r#"{"data":{"m":"merged"}}"#,
    ]);
    hub.ok(&[
        "patch",
        "cm",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/j","value":"json"}]"#,
    ]);
    let cm2 = hub.json(&["get", "cm", "web"]);
    assert_eq!(cm2["metadata"]["labels"]["tier"], "front");
    assert_eq!(cm2["metadata"]["annotations"]["note"], "hello");
    assert_eq!(
        cm2["data"],
        serde_json::json!({"k": "v", "m": "merged", "j": "json"})
    );
    assert_eq!(cm2["metadata"]["uid"], cm["metadata"]["uid"]);
    assert!(
        cm2["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > cm["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
    );

    // Replace with the stale resourceVersion of the first read: a conflict.
    let stale = cm.to_string();
    let out = hub.kubectl_with(&["replace", "-f", "-"], Some(&stale));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the object has been modified"), "{err}");

    let deleted = hub.ok(&["delete", "cm", "web", "--wait=true"]);
    assert!(deleted.contains("configmap \"web\" deleted"), "{deleted}");
    let err = hub.fails(&["get", "cm", "web"]);
    assert!(err.contains("configmaps \"web\" not found"), "{err}");
}

#[test]
fn writing_into_a_missing_namespace_is_not_found_and_dry_run_writes_nothing() {
    let hub = Hub::start();
    let out = hub.kubectl_with(&["create", "-f", "-"], Some(&configmap("x", "nowhere")));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("namespaces \"nowhere\" not found"), "{err}");

    let out = hub.kubectl_with(
        &["create", "--dry-run=server", "-f", "-"],
        Some(&configmap("dry", "default")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = hub.fails(&["get", "cm", "dry"]);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn chunked_lists_and_label_selectors() {
    let hub = Hub::start();
    for i in 0..12 {
        hub.create(&configmap(&format!("cm-{i:02}"), "default").replace(
            "\"app\":\"web\"",
            &format!("\"app\":\"{}\"", if i % 3 == 0 { "db" } else { "web" }),
        ));
    }
    let names = hub.ok(&["get", "cm", "--chunk-size=5", "-o", "name"]);
    assert_eq!(names.lines().count(), 12, "{names}");
    let db = hub.ok(&["get", "cm", "-l", "app=db", "-o", "name"]);
    assert_eq!(
        db.lines().collect::<Vec<_>>(),
        [
            "configmap/cm-00",
            "configmap/cm-03",
            "configmap/cm-06",
            "configmap/cm-09"
        ]
    );
    let all = hub.ok(&[
        "get",
        "cm",
        "-A",
        "--field-selector",
        "metadata.namespace=default",
        "-o",
        "name",
    ]);
    assert_eq!(all.lines().count(), 12);
    let err = hub.fails(&["get", "cm", "-l", "app in db"]);
    assert!(err.contains("unable to parse"), "{err}");
}

#[test]
fn get_watch_observes_a_change() {
    let hub = Hub::start();
    hub.create(&configmap("watched", "default"));
    let mut watch = kubectl_command(&hub.kubeconfig())
        .args([
            "get",
            "cm",
            "watched",
            "-w",
            "--output-watch-events",
            "-o",
            "custom-columns=EVENT:.type,V:.object.data.k",
            "--no-headers",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.starts_with("ADDED") && first.ends_with("v"),
        "{first}"
    );
    hub.ok(&[
        "patch",
        "cm",
        "watched",
        "--type=merge",
        "-p",
        r#"{"data":{"k":"changed"}}"#,
    ]);
    let second = lines.next().unwrap().unwrap();
    assert!(
        second.starts_with("MODIFIED") && second.ends_with("changed"),
        "{second}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn deleting_a_namespace_removes_its_objects() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.create(&configmap("a", "shop"));
    hub.create(&configmap("b", "shop"));
    hub.ok(&[
        "delete",
        "namespace",
        "shop",
        "--wait=true",
        "--timeout=30s",
    ]);
    let err = hub.fails(&["get", "ns", "shop"]);
    assert!(err.contains("not found"), "{err}");
    let left = hub.ok(&["get", "cm", "-A", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
}

#[test]
fn objects_and_credentials_survive_a_restart() {
    let hub = Hub::start();
    hub.create(&configmap("kept", "default"));
    let before = hub.json(&["get", "cm", "kept"]);
    let kubeconfig = std::fs::read(hub.kubeconfig()).unwrap();
    let dir = hub.stop();
    let hub = Hub::start_in(dir, &[]);
    let after = hub.json(&["get", "cm", "kept"]);
    assert_eq!(before, after);
    // The CA and token are the same: the old kubeconfig (server port aside) still works.
    let old: serde_json::Value = serde_json::from_slice(&kubeconfig).unwrap();
    let new: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hub.kubeconfig()).unwrap()).unwrap();
    assert_eq!(old["users"], new["users"]);
    assert_eq!(
        old["clusters"][0]["cluster"]["certificate-authority-data"],
        new["clusters"][0]["cluster"]["certificate-authority-data"]
    );
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let mut hub = Hub::start();
    hub.create(&configmap("kept", "default"));
    hub.ok(&["label", "cm", "kept", "round=1"]);
    let before = hub.json(&["get", "cm", "kept"]);
    let kubeconfig = std::fs::read(hub.kubeconfig()).unwrap();
    hub.restart(true);
    // Same object, same resourceVersion; the old kubeconfig (same CA, token, port) works.
    assert_eq!(hub.json(&["get", "cm", "kept"]), before);
    assert_eq!(std::fs::read(hub.kubeconfig()).unwrap(), kubeconfig);
    // Writing goes on from where it was: revisions only grow.
    hub.ok(&["label", "cm", "kept", "round=2", "--overwrite"]);
    let after = hub.json(&["get", "cm", "kept"]);
    let rv = |v: &serde_json::Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&after) > rv(&before));
}

#[test]
fn unknown_fields_fail_under_strict_validation_and_warn_otherwise() {
    let hub = Hub::start();
    let bad = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"odd","namespace":"default"},"data":{"k":"v"},"colour":"blue"}"#;
    // kubectl's default, --validate=strict, lets the server reject the field.
    let out = hub.kubectl_with(&["create", "-f", "-"], Some(bad));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"strict decoding error: unknown field "colour""#),
        "{err}"
    );
    assert!(hub.fails(&["get", "cm", "odd"]).contains("not found"));
    // --validate=warn: created without the field, and kubectl prints the server's warning.
    let out = hub.kubectl_with(&["create", "--validate=warn", "-f", "-"], Some(bad));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"Warning: unknown field "colour""#), "{err}");
    let cm = hub.json(&["get", "cm", "odd"]);
    assert!(cm.get("colour").is_none(), "{cm}");
    assert_eq!(cm["data"]["k"], "v");
    // Nested fields are named by their path.
    let deploy = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},
        "spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},
        "spec":{"containers":[{"name":"web","image":"nginx","imagePullPolicy":"Always","colour":"red"}]}}}}"#;
    let out = hub.kubectl_with(&["create", "-f", "-"], Some(deploy));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"unknown field "spec.template.spec.containers[0].colour""#),
        "{err}"
    );
}

#[test]
fn explain_reads_the_served_openapi() {
    let hub = Hub::start();
    let out = hub.ok(&["explain", "deployment.spec.replicas"]);
    assert!(out.contains("FIELD: replicas <integer>"), "{out}");
    assert!(out.contains("Number of desired pods"), "{out}");
    let out = hub.ok(&["explain", "configmap"]);
    assert!(
        out.contains("KIND:       ConfigMap") && out.contains("binaryData"),
        "{out}"
    );
    // The same schemas as Swagger 2.0 protobuf: kubectl renders them only if it parsed the
    // whole document.
    let out = hub.ok(&[
        "explain",
        "deployment.spec.replicas",
        "--output=plaintext-openapiv2",
    ]);
    assert!(
        out.contains("FIELD:    replicas <integer>") && out.contains("Number of desired pods"),
        "{out}"
    );
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget.
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, description: How big the widget is.}
              mode: {type: string, enum: [fast, slow], default: fast}
          status:
            type: object
            properties:
              ready: {type: boolean}
"#;

fn widget(size: i64) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: default}}\nspec: {{size: {size}}}\n"
    )
}

#[test]
fn custom_resources_come_and_go_with_their_definition() {
    let hub = Hub::start();
    assert!(
        hub.fails(&["get", "widgets"])
            .contains("the server doesn't have a resource type")
    );
    hub.create(WIDGET_CRD);
    hub.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let resources = hub.ok(&["api-resources", "--api-group=example.com"]);
    assert!(
        resources
            .lines()
            .any(|l| l.starts_with("widgets") && l.contains("wd") && l.contains("Widget")),
        "{resources}"
    );
    let crd = hub.json(&["get", "crd", "widgets.example.com"]);
    assert_eq!(crd["status"]["acceptedNames"]["listKind"], "WidgetList");
    assert_eq!(
        crd["metadata"]["finalizers"],
        serde_json::json!(["customresourcecleanup.apiextensions.k8s.io"])
    );

    // Apply (client side: create, then merge patch), defaults filled in.
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(3)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let w = hub.json(&["get", "wd", "w1"]);
    assert_eq!(w["spec"], serde_json::json!({"size": 3, "mode": "fast"}));
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(5)));
    assert!(String::from_utf8_lossy(&out.stdout).contains("widget.example.com/w1 configured"));
    let w = hub.json(&["get", "widgets.example.com", "w1"]);
    assert_eq!(
        (
            w["spec"]["size"].as_i64(),
            w["metadata"]["generation"].as_i64()
        ),
        (Some(5), Some(2))
    );
    assert!(
        hub.ok(&["get", "widgets"])
            .lines()
            .any(|l| l.starts_with("w1 "))
    );

    // The schema is enforced and explained.
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(0)));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.size in body should be greater than or equal to 1"),
        "{err}"
    );
    let explained = hub.ok(&["explain", "widget.spec.size"]);
    assert!(explained.contains("How big the widget is."), "{explained}");

    // Status is written only through its subresource.
    hub.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":true}}"#,
    ]);
    assert!(hub.json(&["get", "wd", "w1"])["status"].is_null());
    hub.ok(&[
        "patch",
        "wd",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":true}}"#,
    ]);
    assert_eq!(hub.json(&["get", "wd", "w1"])["status"]["ready"], true);

    // The CRD survives a restart.
    let hub = Hub::start_in(hub.stop(), &[]);
    assert_eq!(hub.json(&["get", "wd", "w1"])["spec"]["size"], 5);

    // Deleting the CRD deletes its objects and stops serving the resource.
    hub.ok(&["delete", "crd", "widgets.example.com", "--timeout=30s"]);
    let resources = hub.ok(&["api-resources", "-o", "name"]);
    assert!(!resources.contains("widgets"), "{resources}");
    hub.create(WIDGET_CRD);
    hub.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let left = hub.ok(&["get", "widgets", "-A", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
}

#[test]
fn metrics_count_requests_and_watchers() {
    let hub = Hub::start();
    hub.create(&configmap("m", "default"));
    hub.ok(&["get", "cm", "m"]);
    hub.ok(&["get", "cm"]);
    let text = hub.ok(&["get", "--raw", "/metrics"]);
    assert!(
        text.contains(
            r#"apiserver_request_total{verb="POST",group="",resource="configmaps",code="201"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"apiserver_request_total{verb="GET",group="",resource="configmaps",code="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"apiserver_request_duration_seconds_bucket{le="#),
        "{text}"
    );
    assert!(text.contains("flotilla_store_revision "), "{text}");
    // A watcher shows up, served by the one store watch of the cache. The hub's own
    // controllers watch too: kubectl's watch is one more than those.
    let watchers = |text: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(r#"apiserver_registered_watchers{resource=""} "#))
            .and_then(|v| v.trim().parse().ok())
    };
    // Theirs, once they have settled (the same count twice, 300 ms apart).
    let mut before = watchers(&text).unwrap_or(0);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = watchers(&hub.ok(&["get", "--raw", "/metrics"])).unwrap_or(0);
        if now == before {
            break;
        }
        before = now;
    }
    let mut watch = kubectl_command(&hub.kubeconfig())
        .args(["get", "cm", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "configmap/m");
    // kubectl prints the list before its watch request arrives: wait for the watch.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let text = hub.ok(&["get", "--raw", "/metrics"]);
        if watchers(&text) == Some(before + 1) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no watcher registered: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        text.contains("flotilla_watch_cache_store_watches 1"),
        "{text}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn get_prints_the_usual_columns() {
    let hub = Hub::start();
    hub.create(
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},
        "spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},
        "spec":{"containers":[{"name":"web","image":"nginx:1.27"}]}}}}"#,
    );
    let out = hub.ok(&["get", "deploy"]);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert_eq!(lines[1][..4], ["web", "0/3", "0", "0"], "{out}");
    assert!(lines[1][4].ends_with('s'), "an age: {out}");
    let wide = hub.ok(&["get", "deploy", "-o", "wide"]);
    assert!(
        wide.contains("CONTAINERS") && wide.contains("nginx:1.27") && wide.contains("app=web"),
        "{wide}"
    );
    // Status written through the subresource shows in the columns: the fleet-wide view.
    hub.ok(&[
        "patch",
        "deploy",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":3,"readyReplicas":3,"updatedReplicas":3,"availableReplicas":3}}"#,
    ]);
    let out = hub.ok(&["get", "deploy", "web", "--no-headers"]);
    assert_eq!(
        out.split_whitespace().take(4).collect::<Vec<_>>(),
        ["web", "3/3", "3", "3"],
        "{out}"
    );
    // kubectl scale goes through the scale subresource.
    hub.ok(&["scale", "deploy", "web", "--replicas=5"]);
    assert_eq!(hub.json(&["get", "deploy", "web"])["spec"]["replicas"], 5);
    let scale: serde_json::Value = serde_json::from_str(&hub.ok(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
    ]))
    .unwrap();
    assert_eq!(
        (scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(5))
    );
    assert_eq!(scale["status"]["selector"], "app=web");
    // A watch prints table rows too.
    let mut watch = kubectl_command(&hub.kubeconfig())
        .args(["get", "deploy", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header,
        ["EVENT", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    let added = lines.next().unwrap().unwrap();
    assert!(
        added.starts_with("ADDED") && added.contains("3/5"),
        "{added}"
    );
    hub.ok(&["scale", "deploy", "web", "--replicas=4"]);
    let modified = lines.next().unwrap().unwrap();
    assert!(
        modified.starts_with("MODIFIED") && modified.contains("3/4"),
        "{modified}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    let ns = hub.ok(&["get", "ns", "default"]);
    assert!(
        ns.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("default") && l.contains("Active")),
        "{ns}"
    );
    // A custom resource's additionalPrinterColumns.
    hub.create(&WIDGET_CRD.replace(
        "    subresources: {status: {}}\n",
        "    subresources: {status: {}}\n    additionalPrinterColumns:\n    - {name: Size, type: integer, jsonPath: .spec.size}\n    - {name: Mode, type: string, jsonPath: .spec.mode}\n",
    ));
    hub.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(4)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hub.ok(&["get", "widgets"]);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "SIZE", "MODE"], "{out}");
    assert_eq!(lines[1], ["w1", "4", "fast"], "{out}");
}

#[test]
fn kubectl_typed_commands_send_protobuf_and_it_is_understood() {
    let hub = Hub::start();
    hub.ok(&["create", "namespace", "shop"]);
    hub.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "shop",
        "--from-literal=a=b",
        "--from-literal=c=d",
    ]);
    hub.ok(&[
        "create",
        "secret",
        "generic",
        "pw",
        "-n",
        "shop",
        "--from-literal=password=s3cret",
    ]);
    hub.ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        "shop",
        "--image=nginx:1.27",
        "--replicas=3",
        "--port=80",
    ]);
    hub.ok(&["create", "serviceaccount", "robot", "-n", "shop"]);
    hub.ok(&[
        "create",
        "service",
        "clusterip",
        "web",
        "-n",
        "shop",
        "--tcp=80:8080",
    ]);
    let ns = hub.json(&["get", "ns", "shop"]);
    assert_eq!(ns["status"]["phase"], "Active");
    let cm = hub.json(&["get", "cm", "settings", "-n", "shop"]);
    assert_eq!(cm["data"], serde_json::json!({"a": "b", "c": "d"}));
    let secret = hub.json(&["get", "secret", "pw", "-n", "shop"]);
    assert_eq!(secret["data"], serde_json::json!({"password": "czNjcmV0"}));
    let deploy = hub.json(&["get", "deploy", "web", "-n", "shop"]);
    assert_eq!(
        deploy["spec"],
        // With the defaults a cluster adds.
        serde_json::json!({"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "imagePullPolicy": "IfNotPresent", "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"}],
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler", "securityContext": {},
                    "terminationGracePeriodSeconds": 30}}})
    );
    assert_eq!(
        deploy["metadata"]["labels"],
        serde_json::json!({"app": "web"})
    );
    assert!(
        deploy["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    let mut svc = hub.json(&["get", "svc", "web", "-n", "shop"]);
    // An address of the hub's default service range (10.96.0.0/12), allocated.
    let spec = svc["spec"].as_object_mut().unwrap();
    let ip = spec.remove("clusterIP").unwrap();
    let ip: std::net::Ipv4Addr = ip.as_str().unwrap().parse().unwrap();
    assert_eq!(
        u32::from(ip) >> 20,
        u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)) >> 20,
        "{ip}"
    );
    assert_eq!(
        spec.remove("clusterIPs").unwrap(),
        serde_json::json!([ip.to_string()])
    );
    assert_eq!(
        svc["spec"],
        serde_json::json!({"type": "ClusterIP", "selector": {"app": "web"},
            "ports": [{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]})
    );
    assert_eq!(
        hub.json(&["get", "sa", "robot", "-n", "shop"])["metadata"]["name"],
        "robot"
    );
}

#[test]
fn logical_clusters_are_isolated_from_each_other_and_from_the_root() {
    let mut hub = Hub::start();
    let run = |hub: &Hub, cluster: &str, args: &[&str], stdin: Option<&str>| {
        let out = hub.kubectl_in(cluster, args, stdin);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Not there until created (in the root cluster, with the admin token).
    let (ok, _, _) = run(&hub, "a", &["get", "ns"], None);
    assert!(!ok, "no logical cluster a yet");
    let err = hub.fails(&["get", "--raw", "/clusters/a/api"]);
    assert!(
        err.contains("logical cluster") && err.contains("not found"),
        "{err}"
    );
    for name in ["a", "b"] {
        hub.create(&format!(r#"{{"apiVersion":"tenancy.flotilla.io/v1alpha1","kind":"LogicalCluster","metadata":{{"name":"{name}"}}}}"#));
    }
    assert_eq!(
        hub.ok(&["get", "logicalclusters", "-o", "name"])
            .lines()
            .count(),
        2
    );

    // Each has its own namespaces, objects and CRDs.
    let (ok, out, _) = run(&hub, "a", &["get", "ns", "-o", "name"], None);
    assert!(ok && out.contains("namespace/default"), "{out}");
    assert!(run(&hub, "a", &["create", "namespace", "shop"], None).0);
    assert!(
        run(
            &hub,
            "a",
            &[
                "create",
                "configmap",
                "only-in-a",
                "-n",
                "shop",
                "--from-literal=k=v"
            ],
            None
        )
        .0
    );
    let (ok, _, err) = run(&hub, "a", &["create", "-f", "-"], Some(WIDGET_CRD));
    assert!(ok, "{err}");
    assert!(
        run(
            &hub,
            "a",
            &[
                "wait",
                "--for",
                "condition=established",
                "crd/widgets.example.com",
                "--timeout=30s"
            ],
            None
        )
        .0
    );

    let (_, out, _) = run(&hub, "b", &["get", "ns", "-o", "name"], None);
    assert!(!out.contains("shop"), "{out}");
    let (_, out, _) = run(&hub, "b", &["get", "cm", "-A", "-o", "name"], None);
    assert!(out.trim().is_empty(), "{out}");
    let (ok, _, err) = run(
        &hub,
        "b",
        &["delete", "cm", "only-in-a", "-n", "shop"],
        None,
    );
    assert!(!ok && err.contains("not found"), "{err}");
    let (_, out, _) = run(&hub, "b", &["api-resources", "-o", "name"], None);
    assert!(
        !out.contains("widgets") && !out.contains("logicalclusters"),
        "{out}"
    );
    assert!(hub.fails(&["get", "ns", "shop"]).contains("not found"));
    assert!(hub.ok(&["get", "cm", "-A", "-o", "name"]).trim().is_empty());
    assert!(!hub.ok(&["api-resources", "-o", "name"]).contains("widgets"));

    // A logical cluster's objects and CRDs survive a restart.
    hub.restart(false);
    let (ok, out, err) = run(
        &hub,
        "a",
        &[
            "get",
            "cm",
            "only-in-a",
            "-n",
            "shop",
            "-o",
            "jsonpath={.data.k}",
        ],
        None,
    );
    assert!(ok && out == "v", "{out} {err}");
    let (ok, out, _) = run(&hub, "a", &["api-resources", "-o", "name"], None);
    assert!(ok && out.contains("widgets.example.com"), "{out}");
}

#[test]
fn cel_rules_of_a_crd_are_enforced() {
    let hub = Hub::start();
    let crd = WIDGET_CRD.replace(
        "            required: [size]\n",
        "            required: [size]\n            x-kubernetes-validations:\n            - {rule: \"self.size <= 10\", messageExpression: \"'size ' + string(self.size) + ' is over 10'\"}\n            - {rule: \"self.mode == oldSelf.mode\", message: mode cannot change}\n",
    );
    hub.create(&crd);
    hub.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(11)));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("size 11 is over 10"), "{err}");
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(4)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The transition rule: mode may not change once set.
    let err = hub.fails(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"mode":"slow"}}"#,
    ]);
    assert!(err.contains("mode cannot change"), "{err}");
    hub.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":5}}"#,
    ]);
    assert_eq!(
        hub.json(&["get", "widget", "w1"])["spec"],
        serde_json::json!({"size": 5, "mode": "fast"})
    );
}

#[test]
fn custom_resources_answer_strategic_merge_patch_with_415() {
    let hub = Hub::start();
    hub.create(WIDGET_CRD);
    hub.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    hub.kubectl_with(&["apply", "-f", "-"], Some(&widget(3)));
    let err = hub.fails(&[
        "patch",
        "widget",
        "w1",
        "--type=strategic",
        "-p",
        r#"{"spec":{"size":4}}"#,
    ]);
    assert!(
        err.contains("strategic merge patch is not supported"),
        "{err}"
    );
    // A merge patch of it works.
    hub.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":4}}"#,
    ]);
    assert_eq!(hub.json(&["get", "widget", "w1"])["spec"]["size"], 4);
}

#[test]
fn a_custom_resource_reads_through_each_served_version() {
    let hub = Hub::start();
    let crd = WIDGET_CRD.replace(
        "  versions:\n",
        "  versions:\n  - name: v1beta1\n    served: true\n    storage: false\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n",
    );
    hub.create(&crd);
    hub.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let old = widget(3).replace("example.com/v1", "example.com/v1beta1");
    hub.create(&old);
    let as_v1 = hub.json(&["get", "widgets.v1.example.com", "w1"]);
    let as_beta = hub.json(&["get", "widgets.v1beta1.example.com", "w1"]);
    assert_eq!(as_v1["apiVersion"], "example.com/v1");
    assert_eq!(as_beta["apiVersion"], "example.com/v1beta1");
    assert_eq!(as_v1["spec"], as_beta["spec"]);
    let list = hub.json(&["get", "widgets.v1.example.com"]);
    assert_eq!(list["items"][0]["apiVersion"], "example.com/v1");
}

#[test]
fn auth_can_i_and_whoami_answer_for_the_admin() {
    let hub = Hub::start();
    assert_eq!(
        hub.ok(&["auth", "can-i", "create", "deployments"]).trim(),
        "yes"
    );
    assert_eq!(
        hub.ok(&["auth", "can-i", "delete", "secrets", "-n", "kube-system"])
            .trim(),
        "yes"
    );
    let whoami = hub.ok(&["auth", "whoami"]);
    assert!(whoami.contains("flotilla:admin"), "{whoami}");
    // Reviews are answered, never stored: there is nothing to list.
    let err = hub.fails(&["get", "selfsubjectaccessreviews"]);
    assert!(
        err.contains("MethodNotAllowed") || err.contains("not supported"),
        "{err}"
    );
}
