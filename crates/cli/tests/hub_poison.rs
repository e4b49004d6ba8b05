//! Poison objects through the real hub and kubectl: an object nested past the limit or
//! over the size limit is refused at the door, and an object damaged in the store file
//! (written before the limits, or by something else) neither breaks its resource's lists
//! nor keeps its namespace or its CRD from being deleted.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Hub;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// Polls `done` until it holds; panics with `what` after a minute.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn widget(namespace: &str, name: &str, spec: Value) -> String {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
    .to_string()
}

/// `{"a": {"a": … "leaf" …}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    let mut value = json!("leaf");
    for _ in 0..levels {
        value = json!({ "a": value });
    }
    value
}

fn stderr_of(hub: &Hub, args: &[&str], stdin: Option<&str>) -> String {
    let out = hub.kubectl_with(args, stdin);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Replaces the newest stored value of the widget `namespace/name` in the hub's SQLite
/// file by JSON cut short, as a damaged or foreign write would leave it.
fn damage(db: &std::path::Path, namespace: &str, name: &str) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let pattern = format!("/example.com/widgets/%/{namespace}/{name}");
    let revision: i64 = conn
        .query_row(
            "SELECT revision FROM log WHERE CAST(key AS TEXT) LIKE ?1 AND deleted = 0 \
             ORDER BY revision DESC LIMIT 1",
            [&pattern],
            |r| r.get(0),
        )
        .unwrap();
    let changed = conn
        .execute(
            "UPDATE data SET value = ?1 WHERE revision = ?2",
            rusqlite::params![
                &b"{\"apiVersion\": \"example.com/v1\", \"kind\": \"Wid"[..],
                revision
            ],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[test]
fn poison_objects_are_refused_and_damaged_ones_neither_break_reads_nor_block_deletion() {
    let hub = Hub::start();
    hub.create("apiVersion: v1\nkind: Namespace\nmetadata: {name: lab}\n");
    hub.create("apiVersion: v1\nkind: Namespace\nmetadata: {name: lab2}\n");
    hub.create(CRD);
    wait_until("the CRD is served", || {
        hub.kubectl(&["get", "widgets", "-n", "lab"])
            .status
            .success()
    });

    // The issue's object: a spec 122 levels deep was accepted, and its managedFields then
    // made the whole resource unreadable. Now it is refused, naming the limit.
    let err = stderr_of(
        &hub,
        &["create", "-f", "-"],
        Some(&widget("lab", "deep", nested(122))),
    );
    assert!(err.contains("the limit is 100 levels"), "{err}");
    // Over the size limit as stored: 413, naming the limit (a free-form custom resource: a
    // ConfigMap's data is refused over 1 MiB by its own validation).
    let big = widget("lab", "big", json!({"blob": "x".repeat(3 << 20)}));
    let err = stderr_of(&hub, &["create", "-f", "-"], Some(&big));
    assert!(err.contains("3145728"), "{err}");
    assert!(
        !hub.kubectl(&["get", "widget", "big", "-n", "lab"])
            .status
            .success()
    );

    for (namespace, name) in [("lab", "w1"), ("lab", "w2"), ("lab", "w3"), ("lab2", "w4")] {
        hub.create(&widget(namespace, name, json!({"size": 1})));
    }
    hub.ok(&["label", "widget", "w3", "-n", "lab", "keep=yes"]);

    // Damage w1, w2 and w4 in the store file while the hub is stopped.
    let dir = hub.stop();
    let db = dir.path().join("hub.db");
    for (namespace, name) in [("lab", "w1"), ("lab", "w2"), ("lab2", "w4")] {
        damage(&db, namespace, name);
    }
    let hub = Hub::start_in(dir, &[]);

    // Lists, Tables and selector lists of the resource still answer, without the damaged.
    let names = hub.ok(&["get", "widgets", "-n", "lab", "-o", "name"]);
    assert_eq!(names.trim(), "widget.example.com/w3", "{names}");
    let table = hub.ok(&["get", "widgets", "-A"]);
    assert!(table.contains("w3") && !table.contains("w1"), "{table}");
    let selected = hub.ok(&[
        "get", "widgets", "-n", "lab", "-l", "keep=yes", "-o", "name",
    ]);
    assert_eq!(selected.trim(), "widget.example.com/w3", "{selected}");
    // The damaged object itself says so, and a delete removes it.
    let err = stderr_of(&hub, &["get", "widget", "w1", "-n", "lab"], None);
    assert!(err.contains("cannot be decoded"), "{err}");
    hub.ok(&["delete", "widget", "w1", "-n", "lab"]);
    let err = stderr_of(&hub, &["get", "widget", "w1", "-n", "lab"], None);
    assert!(err.contains("NotFound"), "{err}");

    // Its namespace finishes deleting (w2 is damaged in it) ...
    hub.ok(&["delete", "namespace", "lab", "--wait=false"]);
    wait_until("namespace lab is deleted", || {
        let out = hub.kubectl(&["get", "namespace", "lab"]);
        String::from_utf8_lossy(&out.stderr).contains("NotFound")
    });
    // ... and so does its CRD (w4 is damaged in lab2).
    hub.ok(&["delete", "crd", "widgets.example.com", "--wait=false"]);
    wait_until("the CRD is deleted", || {
        let out = hub.kubectl(&["get", "crd", "widgets.example.com"]);
        String::from_utf8_lossy(&out.stderr).contains("NotFound")
    });
}
