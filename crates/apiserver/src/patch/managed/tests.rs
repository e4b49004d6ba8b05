//! Server-side apply and managed fields, without a server: hand-worked cases and properties.

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::registry::resources::Registry;

fn deployments() -> Arc<ResourceType> {
    Registry::builtin()
        .get("apps", "v1", "deployments")
        .expect("deployments are built in")
}

fn writer(manager: &str) -> Writer<'_> {
    Writer {
        manager,
        subresource: "",
    }
}

/// A Deployment manifest; an empty `labels` or a null `spec` is left out, as in a manifest.
fn deployment(spec: Value, labels: Value) -> Value {
    let mut object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
    });
    if labels.as_object().is_some_and(|l| !l.is_empty()) {
        object["metadata"]["labels"] = labels;
    }
    if !spec.is_null() {
        object["spec"] = spec;
    }
    object
}

fn container(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image})
}

/// The managers and operations of an object, in order.
fn managers(object: &Value) -> Vec<(String, Operation)> {
    entries(object)
        .unwrap()
        .into_iter()
        .map(|e| (e.manager, e.operation))
        .collect()
}

fn owned(object: &Value, manager: &str) -> Vec<String> {
    entries(object)
        .unwrap()
        .into_iter()
        .filter(|e| e.manager == manager)
        .flat_map(|e| e.fields.into_iter().map(|p| fields::display(&p)))
        .collect()
}

fn without_managed(mut object: Value) -> Value {
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    object
}

#[test]
fn applying_creates_the_object_with_one_apply_entry() {
    let rt = deployments();
    let config = deployment(
        json!({"replicas": 2, "template": {"spec": {"containers": [container("web", "nginx")]}}}),
        json!({"app": "web"}),
    );
    let object = apply(None, &config, &rt, writer("alice"), false).unwrap();
    assert_eq!(without_managed(object.clone()), config);
    let managed = &object["metadata"]["managedFields"];
    assert_eq!(managed.as_array().unwrap().len(), 1);
    assert_eq!(managed[0]["manager"], "alice");
    assert_eq!(managed[0]["operation"], "Apply");
    assert_eq!(managed[0]["apiVersion"], "apps/v1");
    assert_eq!(managed[0]["fieldsType"], "FieldsV1");
    assert_eq!(
        managed[0]["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}
                }}}
            }
        })
    );
}

#[test]
fn reapplying_the_same_configuration_changes_nothing() {
    let rt = deployments();
    let config = deployment(json!({"replicas": 2}), json!({"app": "web"}));
    let first = apply(None, &config, &rt, writer("alice"), false).unwrap();
    let second = apply(Some(&first), &config, &rt, writer("alice"), false).unwrap();
    assert_eq!(first, second);
}

#[test]
fn another_manager_changing_an_owned_field_conflicts_unless_forced() {
    let rt = deployments();
    let a = deployment(json!({"replicas": 2}), json!({"app": "web"}));
    let object = apply(None, &a, &rt, writer("alice"), false).unwrap();
    let b = deployment(json!({"replicas": 5}), json!({}));
    let error = apply(Some(&object), &b, &rt, writer("bob"), false).unwrap_err();
    assert_eq!((error.code, error.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        error.message,
        "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
    );
    let causes = &error.details.as_ref().unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".spec.replicas");

    let forced = apply(Some(&object), &b, &rt, writer("bob"), true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 5);
    assert_eq!(owned(&forced, "alice"), [".metadata.labels.app"]);
    assert_eq!(owned(&forced, "bob"), [".spec.replicas"]);
}

#[test]
fn the_same_value_is_shared_and_survives_one_manager_dropping_it() {
    let rt = deployments();
    let a = deployment(
        json!({"replicas": 2}),
        json!({"app": "web", "tier": "front"}),
    );
    let object = apply(None, &a, &rt, writer("alice"), false).unwrap();
    let b = deployment(json!({"replicas": 2}), json!({}));
    let object = apply(Some(&object), &b, &rt, writer("bob"), false).unwrap();
    assert_eq!(owned(&object, "bob"), [".spec.replicas"]);
    // Alice stops applying replicas and the tier label: Bob still owns replicas.
    let a2 = deployment(json!({}), json!({"app": "web"}));
    let object = apply(Some(&object), &a2, &rt, writer("alice"), false).unwrap();
    assert_eq!(object["spec"]["replicas"], 2);
    assert_eq!(object["metadata"]["labels"], json!({"app": "web"}));
    // Bob stops too: now nobody owns replicas and it goes.
    let b2 = deployment(json!({"paused": true}), json!({}));
    let object = apply(Some(&object), &b2, &rt, writer("bob"), false).unwrap();
    assert_eq!(object["spec"], json!({"paused": true}));
    assert_eq!(object["metadata"]["name"], "web");
}

#[test]
fn keyed_list_items_belong_to_their_appliers() {
    let rt = deployments();
    let spec = |containers: Vec<Value>| json!({"template": {"spec": {"containers": containers}}});
    let a = deployment(spec(vec![container("a", "one")]), json!({}));
    let object = apply(None, &a, &rt, writer("alice"), false).unwrap();
    let b = deployment(spec(vec![container("b", "two")]), json!({}));
    let object = apply(Some(&object), &b, &rt, writer("bob"), false).unwrap();
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"],
        json!([container("a", "one"), container("b", "two")])
    );
    let a2 = deployment(Value::Null, json!({}));
    let object = apply(Some(&object), &a2, &rt, writer("alice"), false).unwrap();
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"],
        json!([container("b", "two")])
    );
    assert_eq!(managers(&object), [("bob".to_owned(), Operation::Apply)]);
}

#[test]
fn updates_take_the_fields_they_change_and_apply_then_conflicts_with_them() {
    let rt = deployments();
    let a = deployment(
        json!({"replicas": 2, "template": {"spec": {"containers": [container("web", "v1")]}}}),
        json!({"app": "web"}),
    );
    let object = apply(None, &a, &rt, writer("alice"), false).unwrap();
    let mut edited = object.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("v2");
    edited["metadata"]["labels"]["owner"] = json!("ops");
    record_update(Some(&object), &mut edited, &rt, writer("kubectl-edit")).unwrap();
    assert_eq!(
        managers(&edited),
        [
            ("alice".to_owned(), Operation::Apply),
            ("kubectl-edit".to_owned(), Operation::Update)
        ]
    );
    assert_eq!(
        owned(&edited, "kubectl-edit"),
        [
            ".metadata.labels.owner",
            ".spec.template.spec.containers[name=\"web\"].image"
        ]
    );
    assert!(
        !owned(&edited, "alice")
            .contains(&".spec.template.spec.containers[name=\"web\"].image".to_owned())
    );
    // Alice re-applies her image: the editor owns it now.
    let error = apply(Some(&edited), &a, &rt, writer("alice"), false).unwrap_err();
    assert!(
        error.message.contains("conflict with \"kubectl-edit\""),
        "{}",
        error.message
    );
    // An update that removes a field takes it from its owner.
    let mut trimmed = edited.clone();
    trimmed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("app");
    record_update(Some(&edited), &mut trimmed, &rt, writer("kubectl-edit")).unwrap();
    assert!(!owned(&trimmed, "alice").contains(&".metadata.labels.app".to_owned()));
}

#[test]
fn a_create_is_an_update_owning_every_field_but_the_server_s() {
    let rt = deployments();
    let mut object = deployment(json!({"replicas": 1}), json!({"app": "web"}));
    object["metadata"]["uid"] = json!("1234");
    object["status"] = json!({"replicas": 1});
    record_update(None, &mut object, &rt, writer("kubectl-create")).unwrap();
    assert_eq!(
        owned(&object, "kubectl-create"),
        [".metadata.labels.app", ".spec.replicas"]
    );
    // The status subresource owns status only.
    let mut with_status = object.clone();
    with_status["status"] = json!({"replicas": 3});
    with_status["spec"]["replicas"] = json!(9);
    record_update(
        Some(&object),
        &mut with_status,
        &rt,
        Writer {
            manager: "controller",
            subresource: "status",
        },
    )
    .unwrap();
    assert_eq!(owned(&with_status, "controller"), [".status.replicas"]);
    assert_eq!(
        with_status["metadata"]["managedFields"][1]["subresource"],
        "status"
    );
}

#[test]
fn an_unchanged_update_leaves_the_managed_fields_alone() {
    let rt = deployments();
    let mut object = deployment(json!({"replicas": 1}), json!({}));
    record_update(None, &mut object, &rt, writer("a")).unwrap();
    let mut same = object.clone();
    record_update(Some(&object), &mut same, &rt, writer("b")).unwrap();
    assert_eq!(same, object);
}

// Properties. Every manager gives a label or container the same value, so that managers
// compose without conflicts; which fields each one applies is random.

const LABELS: [&str; 4] = ["a", "b", "c", "d"];
const CONTAINERS: [&str; 3] = ["x", "y", "z"];

#[derive(Clone, Debug)]
struct Config {
    labels: BTreeSet<&'static str>,
    containers: BTreeSet<&'static str>,
    replicas: bool,
}

fn config() -> impl Strategy<Value = Config> {
    (
        proptest::sample::subsequence(LABELS.to_vec(), 0..=LABELS.len()),
        proptest::sample::subsequence(CONTAINERS.to_vec(), 0..=CONTAINERS.len()),
        any::<bool>(),
    )
        .prop_map(|(labels, containers, replicas)| Config {
            labels: labels.into_iter().collect(),
            containers: containers.into_iter().collect(),
            replicas,
        })
}

impl Config {
    fn object(&self) -> Value {
        let labels: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .map(|l| ((*l).to_owned(), json!(format!("value-{l}"))))
            .collect();
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| container(c, &format!("image-{c}")))
            .collect();
        let mut spec = serde_json::Map::new();
        if !containers.is_empty() {
            spec.insert(
                "template".into(),
                json!({"spec": {"containers": containers}}),
            );
        }
        if self.replicas {
            spec.insert("replicas".into(), json!(3));
        }
        let spec = match spec.is_empty() {
            true => Value::Null,
            false => Value::Object(spec),
        };
        deployment(spec, Value::Object(labels))
    }
}

fn labels_of(object: &Value) -> BTreeSet<String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn containers_of(object: &Value) -> BTreeSet<String> {
    object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn names<'a>(set: impl IntoIterator<Item = &'a &'static str>) -> BTreeSet<String> {
    set.into_iter().map(|s| (*s).to_owned()).collect()
}

proptest! {
    #[test]
    fn applying_twice_is_a_no_op(first in config(), second in config()) {
        let rt = deployments();
        let object = apply(None, &first.object(), &rt, writer("a"), false).unwrap();
        let once = apply(Some(&object), &second.object(), &rt, writer("a"), false).unwrap();
        let twice = apply(Some(&once), &second.object(), &rt, writer("a"), false).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn two_managers_compose(a in config(), b in config()) {
        let rt = deployments();
        let object = apply(None, &a.object(), &rt, writer("a"), false).unwrap();
        let object = apply(Some(&object), &b.object(), &rt, writer("b"), false).unwrap();
        let wanted_labels: BTreeSet<String> = names(a.labels.union(&b.labels));
        prop_assert_eq!(labels_of(&object), wanted_labels);
        prop_assert_eq!(containers_of(&object), names(a.containers.union(&b.containers)));
        prop_assert_eq!(object["spec"]["replicas"] == json!(3), a.replicas || b.replicas);
        // Re-applying either one changes nothing.
        let again = apply(Some(&object), &a.object(), &rt, writer("a"), false).unwrap();
        prop_assert_eq!(&again, &object);
    }

    #[test]
    fn a_dropped_field_goes_only_if_no_other_manager_owns_it(
        a in config(), b in config(), a2 in config(),
    ) {
        let rt = deployments();
        let object = apply(None, &a.object(), &rt, writer("a"), false).unwrap();
        let object = apply(Some(&object), &b.object(), &rt, writer("b"), false).unwrap();
        let object = apply(Some(&object), &a2.object(), &rt, writer("a"), false).unwrap();
        prop_assert_eq!(labels_of(&object), names(a2.labels.union(&b.labels)));
        prop_assert_eq!(containers_of(&object), names(a2.containers.union(&b.containers)));
        prop_assert_eq!(object["spec"]["replicas"] == json!(3), a2.replicas || b.replicas);
        prop_assert_eq!(&object["metadata"]["name"], "web");
    }
}
