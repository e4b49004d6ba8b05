//! Rendering: hand-worked cases, every error's message, and properties.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::image::ImageRef;
use super::*;

/// The cluster every case renders for: `eu-1`, labels region=eu and env=prod, property cpu=64.
struct Cluster {
    labels: BTreeMap<String, String>,
    properties: BTreeMap<String, String>,
}

impl Cluster {
    fn eu1() -> Self {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        Self {
            labels: map(&[("region", "eu"), ("env", "prod")]),
            properties: map(&[("cpu", "64")]),
        }
    }

    fn facts(&self) -> ClusterFacts<'_> {
        ClusterFacts {
            name: "eu-1",
            labels: &self.labels,
            properties: &self.properties,
        }
    }
}

fn rule(rule: Value) -> OverrideRule {
    serde_json::from_value(rule).expect("a valid rule")
}

/// Renders `template` for eu-1 with one override, `shop/web`, of these rules.
fn render_rules(
    template: &Value,
    replicas: Option<i64>,
    rules: &[OverrideRule],
) -> Result<Value, RenderError> {
    let cluster = Cluster::eu1();
    render(
        template,
        replicas,
        &cluster.facts(),
        &[OverrideRules {
            name: "shop/web",
            rules,
        }],
    )
}

/// The message of the error rendering `template` with these rules gives.
fn error(template: &Value, rules: &[Value]) -> String {
    let rules: Vec<_> = rules.iter().cloned().map(rule).collect();
    render_rules(template, None, &rules)
        .expect_err("rendering fails")
        .to_string()
}

fn deployment(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    })
}

/// The image of `deployment(image)` after one image rule.
fn image_after(image: &str, change: Value) -> String {
    let rendered =
        render_rules(&deployment(image), None, &[rule(json!({"image": change}))]).expect("renders");
    rendered["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .expect("an image")
        .to_owned()
}

#[test]
fn a_deployment_gets_its_replicas_and_a_tag_from_the_cluster_name() {
    let mut template = deployment("nginx:1.27");
    template["metadata"]
        .as_object_mut()
        .expect("metadata")
        .extend(serde_json::Map::from_iter([
            ("uid".to_owned(), json!("0a1b")),
            ("resourceVersion".to_owned(), json!("42")),
            ("generation".to_owned(), json!(3)),
            (
                "creationTimestamp".to_owned(),
                json!("2025-01-01T00:00:00Z"),
            ),
            ("managedFields".to_owned(), json!([{"manager": "kubectl"}])),
            ("finalizers".to_owned(), json!(["flotilla.io/work"])),
            (
                "annotations".to_owned(),
                json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
            ),
        ]));
    template["spec"]["replicas"] = json!(10);
    template["status"] = json!({"readyReplicas": 10});

    let rendered = render_rules(
        &template,
        Some(3),
        &[rule(json!({"image": {"tag": "${cluster.name}"}}))],
    );

    let mut expected = deployment("nginx:eu-1");
    expected["spec"]["replicas"] = json!(3);
    assert_eq!(rendered, Ok(expected));
}

#[test]
fn clean_keeps_everything_but_server_managed_state() {
    let template = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings", "namespace": "shop", "generateName": "settings-",
            "selfLink": "/api/v1/namespaces/shop/configmaps/settings",
            "deletionTimestamp": "2025-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30,
            "ownerReferences": [{"kind": "Placement", "name": "web"}],
            "labels": {"app": "web"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "team": "checkout",
            },
        },
        "data": {"mode": "fast"},
        "immutable": true,
        "status": {},
    });
    assert_eq!(
        clean(&template),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings", "namespace": "shop",
                "labels": {"app": "web"}, "annotations": {"team": "checkout"},
            },
            "data": {"mode": "fast"},
            "immutable": true,
        })
    );
    assert_eq!(clean(&json!("not an object")), json!("not an object"));
}

#[test]
fn replicas_of_kinds_that_have_them() {
    let object = |api_version: &str, kind: &str, spec: Value| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec});
    assert_eq!(
        replicas(&object("apps/v1", "Deployment", json!({}))),
        Some(1)
    );
    assert_eq!(
        replicas(&object("apps/v1", "StatefulSet", json!({"replicas": 5}))),
        Some(5)
    );
    assert_eq!(
        replicas(&object("apps/v1", "ReplicaSet", json!({"replicas": 0}))),
        Some(0)
    );
    assert_eq!(replicas(&object("apps/v1", "DaemonSet", json!({}))), None);
    assert_eq!(replicas(&object("v1", "ConfigMap", json!({}))), None);
    assert_eq!(
        replicas(&object(
            "example.com/v1",
            "Deployment",
            json!({"replicas": 2})
        )),
        None
    );

    let config_map = object("v1", "ConfigMap", json!({}));
    assert_eq!(render_rules(&config_map, Some(3), &[]), Ok(config_map));
}

#[test]
fn images_keep_the_parts_not_overridden() {
    let registry = json!({"registry": "mirror.example.com"});
    assert_eq!(
        image_after("nginx", registry.clone()),
        "mirror.example.com/nginx"
    );
    assert_eq!(
        image_after("team/web:1", registry.clone()),
        "mirror.example.com/team/web:1"
    );
    assert_eq!(
        image_after("registry.local:5000/team/web:1.0", json!({"tag": "2.0"})),
        "registry.local:5000/team/web:2.0"
    );
    assert_eq!(
        image_after("nginx:1.27", json!({"registry": "localhost:5000"})),
        "localhost:5000/nginx:1.27"
    );
    assert_eq!(
        image_after(
            "localhost/web",
            json!({"repository": "shop/web", "tag": "3"})
        ),
        "localhost/shop/web:3"
    );
    assert_eq!(
        image_after(
            "docker.io/library/nginx",
            json!({"registry": "${cluster.labels['region']}.example.com"})
        ),
        "eu.example.com/library/nginx"
    );
}

#[test]
fn a_digest_survives_a_registry_change_and_a_new_tag_drops_it() {
    let pinned = "nginx:1.27@sha256:0123abcd";
    assert_eq!(
        image_after(pinned, json!({"registry": "mirror.example.com:443"})),
        "mirror.example.com:443/nginx:1.27@sha256:0123abcd"
    );
    assert_eq!(image_after(pinned, json!({"tag": "1.28"})), "nginx:1.28");
    assert_eq!(
        image_after("nginx@sha256:0123abcd", json!({"repository": "team/nginx"})),
        "team/nginx@sha256:0123abcd"
    );
}

#[test]
fn image_references_are_taken_apart_as_docker_does() {
    let parts = |image: &str| {
        let image = ImageRef::parse(image).expect("a reference");
        (image.registry, image.repository, image.tag, image.digest)
    };
    let some = |text: &str| Some(text.to_owned());
    assert_eq!(parts("nginx"), (None, "nginx".to_owned(), None, None));
    assert_eq!(
        parts("team/web:1"),
        (None, "team/web".to_owned(), some("1"), None)
    );
    assert_eq!(
        parts("localhost/web"),
        (some("localhost"), "web".to_owned(), None, None)
    );
    assert_eq!(
        parts("registry:5000/web@sha256:ff"),
        (
            some("registry:5000"),
            "web".to_owned(),
            None,
            some("sha256:ff")
        )
    );
    assert_eq!(
        parts("ghcr.io/a/b/c:v1@sha256:ff"),
        (
            some("ghcr.io"),
            "a/b/c".to_owned(),
            some("v1"),
            some("sha256:ff")
        )
    );
    for bad in [
        "",
        "nginx:",
        "nginx@",
        "nginx@sha256",
        "a//b",
        "/web",
        ":5000/web",
        "reg.io/a:b/c",
    ] {
        assert!(ImageRef::parse(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn every_pod_template_has_its_images_overridden() {
    let containers = json!({
        "initContainers": [{"name": "migrate", "image": "tools:1"}],
        "containers": [{"name": "web", "image": "web:1"}, {"name": "log", "image": "log:1"}],
    });
    let tag = [rule(json!({"image": {"tag": "2"}}))];
    let expected = json!({
        "initContainers": [{"name": "migrate", "image": "tools:2"}],
        "containers": [{"name": "web", "image": "web:2"}, {"name": "log", "image": "log:2"}],
    });
    let cases = [
        (
            "apps/v1",
            "DaemonSet",
            json!({"template": {"spec": containers}}),
            "/spec/template/spec",
        ),
        (
            "batch/v1",
            "Job",
            json!({"template": {"spec": containers}}),
            "/spec/template/spec",
        ),
        (
            "batch/v1",
            "CronJob",
            json!({"jobTemplate": {"spec": {"template": {"spec": containers}}}}),
            "/spec/jobTemplate/spec/template/spec",
        ),
        ("v1", "Pod", containers.clone(), "/spec"),
    ];
    for (api_version, kind, spec, pod) in cases {
        let template = json!({
            "apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec,
        });
        let rendered = render_rules(&template, None, &tag).expect("renders");
        assert_eq!(rendered.pointer(pod), Some(&expected), "{kind}");
    }
}

#[test]
fn labels_and_annotations_are_set_and_removed() {
    let mut template = deployment("nginx");
    template["metadata"]["annotations"] = json!({"team": "checkout"});
    let rendered = render_rules(
        &template,
        None,
        &[rule(json!({
            "labels": {
                "app": "",
                "region": "${cluster.labels['region']}",
                "cpu": "${cluster.properties[\"cpu\"]}",
            },
            "annotations": {"team": "", "cost": "$$5 on ${cluster.name}"},
        }))],
    )
    .expect("renders");
    assert_eq!(
        rendered["metadata"]["labels"],
        json!({"region": "eu", "cpu": "64"})
    );
    assert_eq!(
        rendered["metadata"]["annotations"],
        json!({"cost": "$$5 on eu-1"})
    );

    let emptied =
        render_rules(&template, None, &[rule(json!({"labels": {"app": ""}}))]).expect("renders");
    assert_eq!(emptied["metadata"].get("labels"), None);
}

#[test]
fn json_patches_apply_in_order_with_variables_in_nested_values() {
    let rendered = render_rules(
        &deployment("nginx"),
        None,
        &[rule(json!({"jsonPatch": [
            {"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [
                {"name": "CLUSTER", "value": "${cluster.name}"},
                {"name": "CPU", "value": "${cluster.properties['cpu']}"},
            ]},
            {"op": "replace", "path": "/spec/template/spec/containers/0/env/1/value", "value": "32"},
            {"op": "remove", "path": "/spec/selector"},
            {"op": "add", "path": "/spec/minReadySeconds", "value": 5},
        ]}))],
    )
    .expect("renders");
    assert_eq!(
        rendered["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "CLUSTER", "value": "eu-1"}, {"name": "CPU", "value": "32"}])
    );
    assert_eq!(rendered["spec"].get("selector"), None);
    assert_eq!(rendered["spec"]["minReadySeconds"], json!(5));
}

#[test]
fn overrides_apply_in_order_and_a_rule_applies_patch_image_labels_annotations() {
    let cluster = Cluster::eu1();
    let first = [rule(json!({
        "jsonPatch": [{"op": "add", "path": "/metadata/labels/tier", "value": "patched"}],
        "image": {"tag": "1"},
        "labels": {"tier": "labelled"},
    }))];
    let second = [rule(json!({"image": {"tag": "2"}}))];
    let rendered = render(
        &deployment("nginx"),
        None,
        &cluster.facts(),
        &[
            OverrideRules {
                name: "global-registry",
                rules: &first,
            },
            OverrideRules {
                name: "shop/web",
                rules: &second,
            },
        ],
    )
    .expect("renders");
    assert_eq!(rendered["metadata"]["labels"]["tier"], "labelled");
    assert_eq!(
        rendered["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
}

#[test]
fn variable_errors_name_the_override_rule_and_variable() {
    let web = deployment("nginx");
    assert_eq!(
        error(
            &web,
            &[json!({"labels": {"zone": "${cluster.labels['zone']}"}})]
        ),
        r#"override shop/web rule 0: cluster eu-1 has no label "zone""#
    );
    assert_eq!(
        error(
            &web,
            &[
                json!({"labels": {"a": "b"}}),
                json!({"image": {"tag": "${cluster.properties[\"gpu\"]}"}})
            ]
        ),
        r#"override shop/web rule 1: cluster eu-1 has no property "gpu""#
    );
    assert_eq!(
        error(&web, &[json!({"annotations": {"a": "${cluster.zone}"}})]),
        "override shop/web rule 0: unknown variable ${cluster.zone} (known: ${cluster.name}, \
         ${cluster.labels['k']}, ${cluster.properties['p']})"
    );
    assert_eq!(
        error(
            &web,
            &[json!({"annotations": {"a": "${cluster.labels['k\"]}"}})]
        ),
        "override shop/web rule 0: unknown variable ${cluster.labels['k\"]} (known: ${cluster.name}, \
         ${cluster.labels['k']}, ${cluster.properties['p']})"
    );
    assert_eq!(
        error(&web, &[json!({"labels": {"a": "x-${cluster.name"}})]),
        r#"override shop/web rule 0: "${" without a closing "}" in "${cluster.name""#
    );
    assert_eq!(
        error(
            &web,
            &[json!({"jsonPatch": [
                {"op": "add", "path": "/metadata/labels/a", "value": "a"},
                {"op": "add", "path": "/spec/x", "value": {"list": [1, "${cluster.labels['zone']}"]}},
            ]})]
        ),
        r#"override shop/web rule 0, jsonPatch op 1: cluster eu-1 has no label "zone""#
    );
}

#[test]
fn failing_patch_operations_name_the_op_its_path_and_why() {
    let web = deployment("nginx");
    let patch = |op: &str, path: &str| {
        let operation = if op == "remove" {
            json!({"op": op, "path": path})
        } else {
            json!({"op": op, "path": path, "value": 1})
        };
        error(&web, &[json!({"jsonPatch": [operation]})])
    };
    let at = "override shop/web rule 0, jsonPatch op 0";
    assert_eq!(
        patch("replace", "/spec/paused"),
        format!(r#"{at}: replace /spec/paused: "/spec" has no field "paused""#)
    );
    assert_eq!(
        patch("remove", "/metadata/annotations/a~1b"),
        format!(
            r#"{at}: remove /metadata/annotations/a~1b: "/metadata" has no field "annotations""#
        )
    );
    assert_eq!(
        patch("add", "/spec/template/spec/containers/2"),
        format!(
            r#"{at}: add /spec/template/spec/containers/2: index 2 is out of range: "/spec/template/spec/containers" has 1 items"#
        )
    );
    assert_eq!(
        patch("replace", "/spec/template/spec/containers/first/image"),
        format!(
            r#"{at}: replace /spec/template/spec/containers/first/image: "first" is not an index of "/spec/template/spec/containers", a list"#
        )
    );
    assert_eq!(
        patch("remove", "/spec/template/spec/containers/-"),
        format!(
            r#"{at}: remove /spec/template/spec/containers/-: "-" names no item of "/spec/template/spec/containers""#
        )
    );
    assert_eq!(
        patch("add", "/metadata/name/x"),
        format!(
            r#"{at}: add /metadata/name/x: "/metadata/name" is a string, not an object or a list"#
        )
    );
    assert_eq!(
        patch("add", "/nowhere/x"),
        format!(r#"{at}: add /nowhere/x: the object has no field "nowhere""#)
    );
    assert_eq!(
        patch("remove", ""),
        format!("{at}: remove : the whole object cannot be removed")
    );
    assert_eq!(
        patch("add", "spec"),
        format!(
            "{at}: add spec: not a JSON pointer: it must start with '/', and '~' must be followed by 0 or 1"
        )
    );
    assert_eq!(
        error(
            &web,
            &[json!({"jsonPatch": [{"op": "add", "path": "/spec/x"}]})]
        ),
        format!("{at}: add /spec/x: add and replace take a value")
    );
}

#[test]
fn image_errors_name_the_container() {
    assert_eq!(
        error(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
            &[json!({"image": {"tag": "1"}})]
        ),
        "override shop/web rule 0: image override on a ConfigMap: it has no containers"
    );
    assert_eq!(
        error(&deployment("nginx:"), &[json!({"image": {"tag": "1"}})]),
        r#"override shop/web rule 0: container "web": image "nginx:" is not an image reference: "" is not a tag"#
    );
    assert_eq!(
        error(
            &deployment("nginx"),
            &[json!({"image": {"registry": "mirror"}})]
        ),
        r#"override shop/web rule 0: container "web": the override makes "mirror/nginx", which reads back as registry none, repository "mirror/nginx", tag none"#
    );
    assert_eq!(
        error(
            &deployment("nginx"),
            &[json!({"image": {"tag": "${cluster.labels['env']}/x"}})]
        ),
        r#"override shop/web rule 0: container "web": the override makes "nginx:prod/x", which reads back as registry "nginx:prod", repository "x", tag none"#
    );
    assert_eq!(
        error(&deployment("nginx"), &[json!({"image": {"tag": ""}})]),
        r#"override shop/web rule 0: container "web": the override makes "nginx:", which is not an image reference: "" is not a tag"#
    );
    let mut no_image = deployment("nginx");
    no_image["spec"]["template"]["spec"]["containers"] = json!([{"image": "a"}, {"name": "b"}]);
    assert_eq!(
        error(&no_image, &[json!({"image": {"tag": "1"}})]),
        r#"override shop/web rule 0: container "b": it has no image"#
    );
}

#[test]
fn changing_the_identity_is_an_error() {
    let web = deployment("nginx");
    let replace = |path: &str, value: Value| {
        error(
            &web,
            &[json!({"jsonPatch": [{"op": "replace", "path": path, "value": value}]})],
        )
    };
    let rule = "must keep the template's apiVersion, kind, name and namespace";
    assert_eq!(
        replace("/metadata/name", json!("api")),
        format!(
            r#"override shop/web rule 0: changes metadata.name from "web" to "api", but the rendered object {rule}"#
        )
    );
    assert_eq!(
        replace("/kind", json!("StatefulSet")),
        format!(
            r#"override shop/web rule 0: changes kind from "Deployment" to "StatefulSet", but the rendered object {rule}"#
        )
    );
    assert_eq!(
        replace("/apiVersion", json!("apps/v1beta2")),
        format!(
            r#"override shop/web rule 0: changes apiVersion from "apps/v1" to "apps/v1beta2", but the rendered object {rule}"#
        )
    );
    assert_eq!(
        error(
            &web,
            &[json!({"jsonPatch": [{"op": "remove", "path": "/metadata/namespace"}]})]
        ),
        format!(
            r#"override shop/web rule 0: changes metadata.namespace from "shop" to nothing, but the rendered object {rule}"#
        )
    );
    // Taken away and put back within one rule is no change.
    let rendered = render_rules(
        &web,
        None,
        &[self::rule(json!({"jsonPatch": [
            {"op": "remove", "path": "/metadata/name"},
            {"op": "add", "path": "/metadata/name", "value": "web"},
        ]}))],
    );
    assert_eq!(rendered, Ok(web));
}

#[test]
fn malformed_objects_are_errors() {
    assert_eq!(
        render_rules(&json!([1]), None, &[]).map_err(|e| e.to_string()),
        Err("cannot render the template: it is not a JSON object".to_owned())
    );
    let mut bad_spec = deployment("nginx");
    bad_spec["spec"] = json!("none");
    assert_eq!(
        render_rules(&bad_spec, Some(2), &[]).map_err(|e| e.to_string()),
        Err("cannot render the template: its spec is not an object".to_owned())
    );
    assert_eq!(
        error(
            &deployment("nginx"),
            &[json!({
                "jsonPatch": [{"op": "replace", "path": "/metadata/labels", "value": "x"}],
                "labels": {"a": "b"},
            })]
        ),
        "override shop/web rule 0: metadata.labels is not an object"
    );
}

// Properties.

fn registry() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}\\.[a-z]{2,3}",
        "[a-z]{1,6}(\\.[a-z]{2,3})?:[0-9]{2,5}",
        Just("localhost".to_owned()),
    ]
}

fn image_ref() -> impl Strategy<Value = ImageRef> {
    (
        option::of(registry()),
        "[a-z0-9]{1,6}(/[a-z0-9][a-z0-9_.-]{0,5}){0,2}",
        option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,8}"),
        option::of("sha256:[0-9a-f]{8}"),
    )
        .prop_map(|(registry, repository, tag, digest)| ImageRef {
            registry,
            repository,
            tag,
            digest,
        })
}

/// A template of a few kinds, with or without server-managed state, replicas and
/// labels; workloads have containers with generated images.
fn template() -> impl Strategy<Value = Value> {
    let kinds = prop::sample::select(vec![
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("batch/v1", "CronJob"),
        ("v1", "Pod"),
        ("v1", "ConfigMap"),
    ]);
    (
        kinds,
        "[a-z]{1,8}",
        option::of("[a-z]{1,8}"),
        btree_map("[a-z]{1,5}", "[a-z0-9]{1,5}", 0..3),
        option::of(0i64..10),
        any::<[bool; 3]>(),
        vec(image_ref(), 1..3),
    )
        .prop_map(
            |(
                (api_version, kind),
                name,
                namespace,
                labels,
                replicas,
                [status, managed, applied],
                images,
            )| {
                let mut metadata = json!({"name": name, "labels": labels});
                if let Some(namespace) = namespace {
                    metadata["namespace"] = json!(namespace);
                }
                if managed {
                    metadata["uid"] = json!("0a1b");
                    metadata["resourceVersion"] = json!("7");
                    metadata["managedFields"] = json!([{"manager": "kubectl"}]);
                }
                if applied {
                    metadata["annotations"] =
                        json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"});
                }
                let containers: Vec<Value> = images
                    .iter()
                    .enumerate()
                    .map(|(i, image)| json!({"name": format!("c{i}"), "image": image.to_string()}))
                    .collect();
                let pod = json!({"containers": containers});
                let mut object =
                    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata});
                match kind {
                    "ConfigMap" => object["data"] = json!({"k": "v"}),
                    "Pod" => object["spec"] = pod,
                    "CronJob" => {
                        object["spec"] =
                            json!({"jobTemplate": {"spec": {"template": {"spec": pod}}}})
                    }
                    _ => object["spec"] = json!({"template": {"spec": pod}}),
                }
                if let Some(replicas) = replicas {
                    object["spec"]["replicas"] = json!(replicas);
                }
                if status {
                    object["status"] = json!({"observedGeneration": 1});
                }
                object
            },
        )
}

/// Label maps: some values empty (removals), some with variables.
fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    btree_map(
        "[a-z]{1,3}",
        prop_oneof![
            Just(String::new()),
            "[a-z]{1,4}",
            Just("${cluster.name}".to_owned()),
            Just("${cluster.labels['region']}".to_owned()),
        ],
        1..4,
    )
}

/// Rules mixing every field; some fail (missing paths, identity changes, images on a ConfigMap).
fn rules() -> impl Strategy<Value = Vec<OverrideRule>> {
    let path = prop::sample::select(vec![
        "",
        "/kind",
        "/apiVersion",
        "/metadata",
        "/metadata/name",
        "/metadata/namespace",
        "/metadata/labels/x",
        "/spec/replicas",
        "/spec/template/spec/containers/0/image",
        "/spec/template/spec/containers/-",
    ]);
    let op = prop::sample::select(vec![
        JsonPatchOp::Add,
        JsonPatchOp::Remove,
        JsonPatchOp::Replace,
    ]);
    let value = prop_oneof![
        Just(json!("${cluster.name}")),
        Just(json!({"name": "web"})),
        Just(json!(2))
    ];
    let operation = (op, path, value).prop_map(|(op, path, value)| flotilla_api::JsonPatch {
        op,
        path: path.to_owned(),
        value: (op != JsonPatchOp::Remove).then_some(value),
    });
    let image = option::of(
        (
            option::of(registry()),
            option::of("[a-z]{1,4}".prop_map(String::from)),
            option::of("[a-z0-9]{1,4}"),
        )
            .prop_map(|(registry, repository, tag)| ImageOverride {
                registry,
                repository,
                tag,
            }),
    );
    let rule = (
        vec(operation, 0..3),
        image,
        labels(),
        btree_map("[a-z]{1,3}", "[a-z]{0,3}", 0..2),
    )
        .prop_map(|(json_patch, image, labels, annotations)| OverrideRule {
            json_patch,
            image,
            labels,
            annotations,
        });
    vec(rule, 0..3)
}

fn identity(object: &Value) -> Vec<Option<&Value>> {
    IDENTITY
        .iter()
        .map(|(_, pointer)| object.pointer(pointer))
        .collect()
}

proptest! {
    #[test]
    fn rendering_is_deterministic(template in template(), replicas in option::of(0i64..20), rules in rules()) {
        prop_assert_eq!(render_rules(&template, replicas, &rules), render_rules(&template, replicas, &rules));
    }

    #[test]
    fn without_overrides_rendering_is_clean_and_replicas(template in template(), replicas in option::of(0i64..20)) {
        let mut expected = clean(&template);
        if let (Some(count), Some(_)) = (replicas, super::replicas(&template)) {
            expected["spec"]["replicas"] = json!(count);
        }
        let rendered = render_rules(&template, replicas, &[]);
        prop_assert_eq!(rendered.as_ref(), Ok(&expected));
        let wanted = super::replicas(&template).map(|current| replicas.unwrap_or(current));
        prop_assert_eq!(super::replicas(&expected), wanted);
    }

    #[test]
    fn clean_is_idempotent(template in template()) {
        let once = clean(&template);
        prop_assert_eq!(clean(&once), once);
    }

    #[test]
    fn image_references_round_trip(image in image_ref()) {
        prop_assert_eq!(ImageRef::parse(&image.to_string()), Ok(image));
    }

    #[test]
    fn a_labels_rule_twice_is_once(template in template(), labels in labels()) {
        let rule = OverrideRule { labels, ..OverrideRule::default() };
        prop_assert_eq!(
            render_rules(&template, None, &[rule.clone(), rule.clone()]),
            render_rules(&template, None, &[rule])
        );
    }

    #[test]
    fn the_result_keeps_its_identity_or_is_an_error(template in template(), rules in rules()) {
        if let Ok(rendered) = render_rules(&template, None, &rules) {
            prop_assert_eq!(identity(&rendered), identity(&template));
        }
    }
}
