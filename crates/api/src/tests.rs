//! The CRDs' shape (structural schemas, names, columns, rules) and their CEL rules at
//! work, evaluated by kube-cel as the API server does.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

fn by_name(name: &str) -> Value {
    let crd = crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"));
    serde_json::to_value(crd).unwrap()
}

fn schema_of(name: &str) -> Value {
    by_name(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Every way a schema node breaks the rules our server (and Kubernetes) hold CRD schemas
/// to: each node typed (or explicitly free-form), no references or combinators, and
/// objects say what they hold.
fn structural_problems(schema: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(map) = schema.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    for key in [
        "$ref",
        "$schema",
        "$defs",
        "definitions",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
    ] {
        if map.contains_key(key) {
            problems.push(format!("{path}: has {key}"));
        }
    }
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    match schema["type"].as_str() {
        None if !preserve && !int_or_string => problems.push(format!("{path}: no type")),
        None => {}
        Some("object") => {
            let props = map.get("properties").and_then(Value::as_object);
            let additional = map.get("additionalProperties");
            if props.is_none() && additional.is_none() && !preserve && !path.is_empty() {
                problems.push(format!("{path}: an object with no properties"));
            }
            for (key, child) in props.into_iter().flatten() {
                structural_problems(child, &format!("{path}.{key}"), problems);
            }
            match additional {
                Some(Value::Object(_)) => structural_problems(
                    &schema["additionalProperties"],
                    &format!("{path}{{}}"),
                    problems,
                ),
                Some(Value::Bool(true)) => {
                    problems.push(format!("{path}: additionalProperties: true"))
                }
                _ => {}
            }
            if props.is_some() && additional.is_some() {
                problems.push(format!("{path}: both properties and additionalProperties"));
            }
        }
        Some("array") => match map.get("items") {
            Some(items) => structural_problems(items, &format!("{path}[]"), problems),
            None => problems.push(format!("{path}: an array without items")),
        },
        Some("string" | "integer" | "number" | "boolean") => {}
        Some(other) => problems.push(format!("{path}: type {other}")),
    }
}

#[test]
fn every_schema_is_structural() {
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap();
        let crd = serde_json::to_value(crd).unwrap();
        let versions = crd["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{name}");
        let schema = &versions[0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["type"], "object", "{name}");
        let mut problems = Vec::new();
        structural_problems(schema, "", &mut problems);
        assert!(problems.is_empty(), "{name}: {problems:#?}");
        assert!(!crd.to_string().contains("$ref"), "{name}");
    }
}

#[test]
fn every_cel_rule_compiles() {
    fn count(compiled: &kube_cel::CompiledSchema, name: &str) -> usize {
        let errors = compiled.compilation_errors();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        compiled.validations.len()
            + compiled
                .properties
                .values()
                .map(|c| count(c, name))
                .sum::<usize>()
            + compiled.items.as_deref().map_or(0, |c| count(c, name))
            + compiled
                .additional_properties
                .as_deref()
                .map_or(0, |c| count(c, name))
    }
    let mut total = 0;
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap();
        total += count(&kube_cel::compile_schema(&schema_of(&name)), &name);
    }
    assert!(total >= 20, "only {total} rules");
}

#[test]
fn groups_scopes_and_names() {
    let expected = [
        ("clusters", "flotilla.io", "Cluster", "Cluster", &[][..]),
        ("clustersets", "flotilla.io", "ClusterSet", "Cluster", &[]),
        (
            "clustersetbindings",
            "flotilla.io",
            "ClusterSetBinding",
            "Namespaced",
            &[],
        ),
        (
            "placements",
            "flotilla.io",
            "Placement",
            "Namespaced",
            &["pl"],
        ),
        (
            "clusterplacements",
            "flotilla.io",
            "ClusterPlacement",
            "Cluster",
            &["cpl"],
        ),
        (
            "overrides",
            "flotilla.io",
            "Override",
            "Namespaced",
            &["ov"],
        ),
        (
            "clusteroverrides",
            "flotilla.io",
            "ClusterOverride",
            "Cluster",
            &["cov"],
        ),
        ("works", "flotilla.io", "Work", "Namespaced", &[]),
        (
            "clusterprofiles",
            "multicluster.x-k8s.io",
            "ClusterProfile",
            "Namespaced",
            &[],
        ),
        (
            "placementdecisions",
            "multicluster.x-k8s.io",
            "PlacementDecision",
            "Namespaced",
            &[],
        ),
        (
            "placementrevisions",
            "flotilla.io",
            "PlacementRevision",
            "Namespaced",
            &["plrev"],
        ),
        (
            "computenamespaces",
            "flotilla.io",
            "ComputeNamespace",
            "Cluster",
            &["cns"],
        ),
    ];
    let all = crds();
    assert_eq!(all.len(), expected.len());
    let mut short_names = BTreeSet::new();
    for (crd, (plural, group, kind, scope, shorts)) in all.iter().zip(expected) {
        let crd = serde_json::to_value(crd).unwrap();
        assert_eq!(crd["metadata"]["name"], format!("{plural}.{group}"));
        let spec = &crd["spec"];
        assert_eq!(spec["group"], group);
        assert_eq!(spec["scope"], scope, "{plural}");
        assert_eq!(spec["names"]["plural"], plural);
        assert_eq!(spec["names"]["kind"], kind);
        assert_eq!(spec["names"]["singular"], kind.to_ascii_lowercase());
        let version = &spec["versions"][0];
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], true);
        if group == GROUP {
            assert_eq!(version["name"], VERSION);
            assert_eq!(spec["names"]["categories"], json!([CATEGORY]), "{plural}");
        } else {
            assert_eq!(version["name"], MULTICLUSTER_VERSION);
            assert!(
                spec["names"]["categories"].is_null(),
                "{plural}: verbatim, none"
            );
        }
        let got: Vec<&str> = spec["names"]["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(got, shorts, "{plural}");
        for short in shorts {
            assert!(short_names.insert(*short), "{short} used twice");
            // Not one of the built-in resources' short names.
            assert!(
                ![
                    "cm", "ep", "ev", "limits", "ns", "pvc", "po", "quota", "sa", "svc", "ds",
                    "deploy", "rs", "sts", "cj", "ing", "netpol", "pdb", "hpa", "crd", "crds",
                    "lc", "pv", "pc", "csr", "no", "rc", "sc", "cs"
                ]
                .contains(short),
                "{short} clashes with a built-in"
            );
        }
    }
    // Status is a subresource wherever there is a status.
    for name in [
        "clusters.flotilla.io",
        "clustersets.flotilla.io",
        "clustersetbindings.flotilla.io",
        "placements.flotilla.io",
        "clusterplacements.flotilla.io",
        "works.flotilla.io",
        "clusterprofiles.multicluster.x-k8s.io",
        "computenamespaces.flotilla.io",
    ] {
        assert_eq!(
            by_name(name)["spec"]["versions"][0]["subresources"],
            json!({"status": {}}),
            "{name}"
        );
    }
}

fn columns(name: &str) -> Vec<(String, String)> {
    by_name(name)["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["jsonPath"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn printer_columns() {
    let ready = |t: &str| format!(".status.conditions[?(@.type==\"{t}\")].status");
    let age = ("Age".to_owned(), ".metadata.creationTimestamp".to_owned());
    let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        columns("clusters.flotilla.io"),
        [
            s("Ready", &ready("Ready")),
            s("Version", ".status.kubernetesVersion"),
            s("Set", ".spec.clusterSet"),
            age.clone()
        ]
    );
    for name in ["placements.flotilla.io", "clusterplacements.flotilla.io"] {
        assert_eq!(
            columns(name),
            [
                s("Scheduled", &ready("Scheduled")),
                s("Applied", &ready("Applied")),
                s("Available", &ready("Available")),
                s("Revision", ".status.rollout.revision"),
                s("Updated", ".status.rollout.updated"),
                s("Progressing", &ready("Progressing")),
                age.clone()
            ]
        );
    }
    assert_eq!(
        columns("works.flotilla.io"),
        [
            s("Cluster", ".spec.cluster"),
            s("Placement", ".spec.placement.name"),
            s("Applied", &ready("Applied")),
            s("Available", &ready("Available")),
            age.clone()
        ]
    );
    assert_eq!(
        columns("computenamespaces.flotilla.io"),
        [
            s("Clusters", ".status.clusters"),
            s("Ready", ".status.readyClusters"),
            s("Status", ".status.summary"),
            age.clone()
        ]
    );
    // Every column's path exists in the schema.
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap();
        let schema = schema_of(&name);
        for (column, path) in columns(&name) {
            if path.starts_with(".metadata") {
                continue;
            }
            let path = match path.find("[?(") {
                Some(at) => format!(
                    "{}[]{}",
                    &path[..at],
                    &path[at + path[at..].find(")]").unwrap() + 2..]
                ),
                None => path,
            };
            let mut node = &schema;
            for part in path.trim_start_matches('.').split('.') {
                let field = part.split('[').next().unwrap();
                node = &node["properties"][field];
                if part.contains('[') {
                    node = &node["items"];
                }
                assert!(
                    node.is_object(),
                    "{name}: column {column}: {path} at {part}"
                );
            }
        }
    }
}

/// The messages of every `x-kubernetes-validations` rule under `schema`, with the path of
/// the node that carries it.
fn rules(schema: &Value, path: &str, out: &mut Vec<(String, String)>) {
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push((
            path.to_owned(),
            rule["message"].as_str().unwrap_or("").to_owned(),
        ));
    }
    for (key, child) in schema["properties"].as_object().into_iter().flatten() {
        rules(child, &format!("{path}.{key}"), out);
    }
    if schema["items"].is_object() {
        rules(&schema["items"], &format!("{path}[]"), out);
    }
}

#[test]
fn the_invariants_are_cel_rules() {
    let has = |name: &str, path: &str, message: &str| {
        let mut out = Vec::new();
        rules(&schema_of(name), "", &mut out);
        assert!(
            out.iter().any(|(p, m)| p == path && m.contains(message)),
            "{name}: no rule at {path} saying {message:?}: {out:#?}"
        );
    };
    for name in ["placements.flotilla.io", "clusterplacements.flotilla.io"] {
        has(
            name,
            ".spec.replicas.weights[].weight",
            "must not be negative",
        );
        has(
            name,
            ".spec.replicas.perCluster",
            "min must not be greater than",
        );
        has(
            name,
            ".spec.replicas.perCluster.min",
            "must not be negative",
        );
        has(name, ".spec.clusters.count", "at least 1");
        has(name, ".spec.strategy.maxUnavailable", "count of at least 0");
        has(name, ".spec.strategy", "cannot both be 0");
        has(name, ".spec.strategy", "only allowed with type Staged");
        has(name, ".spec.strategy.stages[].name", "DNS label");
        has(name, ".spec.replicas", "exclusive");
        has(name, ".spec.resourceSelectors[]", "exclusive");
    }
    has(
        "placements.flotilla.io",
        "",
        "only allowed in a ClusterPlacement",
    );
    has(
        "overrides.flotilla.io",
        "",
        "only allowed in a ClusterOverride",
    );
    for name in ["overrides.flotilla.io", "clusteroverrides.flotilla.io"] {
        has(name, ".spec.rules[].jsonPatch[]", "remove takes none");
        has(name, ".spec.rules[].jsonPatch[]", "starting with '/'");
        has(name, ".spec.rules[]", "at least one of");
        has(name, ".spec.rules[].image", "at least one of");
    }
    has(
        "overrides.flotilla.io",
        "",
        "may not change /metadata/namespace",
    );
    has(
        "clustersetbindings.flotilla.io",
        "",
        "metadata.name must equal spec.clusterSet",
    );
    has("clusters.flotilla.io", ".spec.access", "at most one");
    has(
        "clusterprofiles.multicluster.x-k8s.io",
        ".spec.clusterManager",
        "ClusterManager is immutable",
    );
    // Enums are the schema's.
    let placement = schema_of("placements.flotilla.io");
    let replicas = &placement["properties"]["spec"]["properties"]["replicas"]["properties"];
    assert_eq!(replicas["mode"]["enum"], json!(["Duplicated", "Divided"]));
    assert_eq!(replicas["mode"]["default"], "Duplicated");
    let strategy = &placement["properties"]["spec"]["properties"]["strategy"]["properties"];
    assert_eq!(
        strategy["type"]["enum"],
        json!(["All", "Rolling", "Staged"])
    );
    assert_eq!(strategy["rollback"]["enum"], json!(["Manual", "Automatic"]));
    has(
        "placementrevisions.flotilla.io",
        "",
        "a PlacementRevision is immutable",
    );
    let overrides = schema_of("overrides.flotilla.io");
    let op = &overrides["properties"]["spec"]["properties"]["rules"]["items"]["properties"]["jsonPatch"]
        ["items"]["properties"]["op"];
    assert_eq!(op["enum"], json!(["add", "remove", "replace"]));
    let decisions =
        &schema_of("placementdecisions.multicluster.x-k8s.io")["properties"]["decisions"];
    assert_eq!(decisions["maxItems"], multicluster::MAX_DECISIONS);
}

/// The causes (field path, message) the rules of CRD `name` find in `object`.
fn broken(name: &str, object: &Value, old: Option<&Value>) -> Vec<(String, String)> {
    match kube_cel::Validator::new().validate(&schema_of(name), object, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| (e.field_path, e.message))
            .collect(),
    }
}

fn placement(spec: Value) -> Value {
    json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "namespace": "shop"}, "spec": spec})
}

fn web_spec() -> Value {
    json!({
        "resourceSelectors": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            {"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"app": "web"}}},
        ],
        "clusters": {
            "clusterSets": ["prod"],
            "labelSelector": {"matchLabels": {"tier": "prod"}},
            "propertySelector": [{"name": "allocatable-cpu", "operator": "Gt", "value": "16"}],
            "tolerations": [{"key": "maintenance", "operator": "Exists"}],
            "count": 3,
            "spread": [{"topologyKey": "topology.kubernetes.io/region", "maxSkew": 1}],
        },
        "replicas": {
            "mode": "Divided",
            "weights": [{"clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}}, "weight": 2}],
            "perCluster": {"min": 1, "max": 20},
        },
        "strategy": {"type": "Rolling", "maxUnavailable": 1},
        "apply": {"conflict": "Abort", "drift": "Correct", "deletion": "Delete"},
    })
}

#[test]
fn a_valid_placement_passes_and_reads_back() {
    let object = placement(web_spec());
    assert_eq!(broken("placements.flotilla.io", &object, None), []);
    let typed: Placement = serde_json::from_value(object.clone()).unwrap();
    let replicas = typed.spec.replicas.as_ref().unwrap();
    assert_eq!(replicas.mode, ReplicaMode::Divided);
    assert_eq!(replicas.weights[0].weight, 2);
    assert_eq!(
        replicas.per_cluster,
        Some(Bounds {
            min: Some(1),
            max: Some(20)
        })
    );
    assert_eq!(typed.spec.clusters.count, Some(3));
    assert_eq!(typed.spec.clusters.cluster_sets, ["prod"]);
    assert_eq!(
        typed.spec.strategy.as_ref().unwrap().type_,
        StrategyType::Rolling
    );
    assert_eq!(serde_json::to_value(&typed).unwrap(), object);
    // The same spec is a valid ClusterPlacement.
    let mut cluster = object.clone();
    cluster["kind"] = json!("ClusterPlacement");
    cluster["metadata"] = json!({"name": "web"});
    assert_eq!(broken("clusterplacements.flotilla.io", &cluster, None), []);
    let typed: ClusterPlacement = serde_json::from_value(cluster.clone()).unwrap();
    assert_eq!(typed.spec.placement.clusters.count, Some(3));
    assert_eq!(serde_json::to_value(&typed).unwrap(), cluster);
}

#[test]
fn broken_placements_name_the_rule_and_field() {
    let check = |patch: &dyn Fn(&mut Value), field: &str, message: &str| {
        let mut spec = web_spec();
        patch(&mut spec);
        for name in ["placements.flotilla.io", "clusterplacements.flotilla.io"] {
            let found = broken(name, &placement(spec.clone()), None);
            assert!(
                found.iter().any(|(f, m)| f == field && m.contains(message)),
                "{name}: expected {field}: {message:?}, got {found:?}"
            );
        }
    };
    check(
        &|s| s["replicas"]["perCluster"] = json!({"min": 5, "max": 2}),
        "spec.replicas.perCluster",
        "min must not be greater than replicas.perCluster.max",
    );
    check(
        &|s| s["replicas"]["weights"][0]["weight"] = json!(-1),
        "spec.replicas.weights[0].weight",
        "weight must not be negative",
    );
    check(
        &|s| s["replicas"]["perCluster"]["min"] = json!(-1),
        "spec.replicas.perCluster.min",
        "must not be negative",
    );
    check(
        &|s| s["clusters"]["count"] = json!(0),
        "spec.clusters.count",
        "at least 1",
    );
    check(
        &|s| s["strategy"]["maxUnavailable"] = json!(-1),
        "spec.strategy.maxUnavailable",
        "count of at least 0 or a percentage",
    );
    check(
        &|s| s["strategy"]["maxUnavailable"] = json!("x%"),
        "spec.strategy.maxUnavailable",
        "count of at least 0 or a percentage",
    );
    check(
        &|s| s["strategy"] = json!({"type": "Rolling", "maxUnavailable": 0, "maxSurge": "0%"}),
        "spec.strategy",
        "cannot both be 0",
    );
    check(
        &|s| s["strategy"] = json!({"type": "Rolling", "stages": [{"name": "a"}]}),
        "spec.strategy",
        "only allowed with type Staged",
    );
    check(
        &|s| s["strategy"] = json!({"type": "Staged"}),
        "spec.strategy",
        "needs at least one stage",
    );
    check(
        &|s| s["strategy"] = json!({"type": "Staged", "stages": [{"name": "a"}, {"name": "a"}]}),
        "spec.strategy",
        "must be unique",
    );
    check(
        &|s| {
            s["strategy"] =
                json!({"type": "Staged", "stages": [{"name": "a", "maxConcurrency": 0}]})
        },
        "spec.strategy.stages[0].maxConcurrency",
        "at least 1",
    );
    check(
        &|s| s["revisionHistoryLimit"] = json!(-1),
        ".spec.revisionHistoryLimit",
        "must not be negative",
    );
    // The issue's shapes are valid.
    for strategy in [
        json!({"type": "Rolling", "maxUnavailable": 2, "maxSurge": 0, "minReadySeconds": 5}),
        json!({"type": "Rolling", "maxUnavailable": "25%"}),
        json!({"type": "Staged", "progressDeadlineSeconds": 120, "rollback": "Automatic",
            "stages": [
                {"name": "canary", "clusters": {"labelSelector": {"matchLabels": {"ring": "canary"}}}},
                {"name": "eu", "clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}},
                 "maxConcurrency": 2, "soakSeconds": 30, "approval": "Required"},
                {"name": "rest"}]}),
    ] {
        let mut spec = web_spec();
        spec["strategy"] = strategy.clone();
        assert_eq!(
            broken("placements.flotilla.io", &placement(spec), None),
            [],
            "{strategy}"
        );
    }
    check(
        &|s| s["replicas"]["dynamic"] = json!("AvailableCapacity"),
        "spec.replicas",
        "exclusive",
    );
    check(
        &|s| s["resourceSelectors"][0]["labelSelector"] = json!({}),
        "spec.resourceSelectors[0]",
        "exclusive",
    );
    check(
        &|s| s["clusters"]["tolerations"][0]["value"] = json!("x"),
        "spec.clusters.tolerations[0]",
        "no value",
    );
    // A namespace in a selector: a ClusterPlacement's business only.
    let mut spec = web_spec();
    spec["resourceSelectors"][0]["namespace"] = json!("other");
    let found = broken("placements.flotilla.io", &placement(spec.clone()), None);
    assert!(
        found
            .iter()
            .any(|(_, m)| m.contains("only allowed in a ClusterPlacement")),
        "{found:?}"
    );
    assert_eq!(
        broken("clusterplacements.flotilla.io", &placement(spec), None),
        []
    );
}

#[test]
fn override_rules() {
    let object = |rules: Value| {
        json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Override",
        "metadata": {"name": "eu", "namespace": "shop"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}},
            "rules": rules,
        }})
    };
    let good = object(json!([
        {"jsonPatch": [
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/metadata/annotations/cluster", "value": "${cluster.name}"},
            {"op": "remove", "path": "/spec/paused"},
        ]},
        {"image": {"registry": "eu.registry.example.com"}},
        {"labels": {"region": "${cluster.labels['region']}"}, "annotations": {"a": "b"}},
    ]));
    assert_eq!(broken("overrides.flotilla.io", &good, None), []);
    let typed: Override = serde_json::from_value(good.clone()).unwrap();
    assert_eq!(typed.spec.rules[0].json_patch[0].op, JsonPatchOp::Replace);
    assert_eq!(typed.spec.rules[0].json_patch[0].value, Some(json!(3)));
    assert_eq!(serde_json::to_value(&typed).unwrap(), good);
    let messages = |rules: Value| -> Vec<String> {
        broken("overrides.flotilla.io", &object(rules), None)
            .into_iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect()
    };
    let found = messages(json!([{"jsonPatch": [{"op": "remove", "path": "/a", "value": 1}]}]));
    assert!(
        found.iter().any(|m| m.contains("remove takes none")),
        "{found:?}"
    );
    let found = messages(json!([{"jsonPatch": [{"op": "add", "path": "/a"}]}]));
    assert!(
        found.iter().any(|m| m.contains("remove takes none")),
        "{found:?}"
    );
    let found = messages(json!([{"jsonPatch": [{"op": "add", "path": "a", "value": 1}]}]));
    assert!(
        found.iter().any(|m| m.contains("starting with '/'")),
        "{found:?}"
    );
    let found = messages(json!([{}]));
    assert!(
        found
            .iter()
            .any(|m| m.starts_with("spec.rules[0]: a rule sets")),
        "{found:?}"
    );
    let found = messages(json!([{"image": {}}]));
    assert!(
        found.iter().any(|m| m.contains("image sets at least one")),
        "{found:?}"
    );
    // A namespace in a selector: a ClusterOverride's business only.
    let mut scoped = good.clone();
    scoped["spec"]["resourceSelectors"][0]["namespace"] = json!("other");
    let found = broken("overrides.flotilla.io", &scoped, None);
    assert!(
        found
            .iter()
            .any(|(_, m)| m.contains("only allowed in a ClusterOverride")),
        "{found:?}"
    );
    scoped["kind"] = json!("ClusterOverride");
    assert_eq!(broken("clusteroverrides.flotilla.io", &scoped, None), []);
}

#[test]
fn an_override_cannot_move_an_object_out_of_its_namespace() {
    let object = |kind: &str, patch: Value| {
        json!({"apiVersion": "flotilla.io/v1alpha1", "kind": kind,
        "metadata": {"name": "move", "namespace": "shop"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "rules": [{"labels": {"a": "b"}}, {"jsonPatch": [
                {"op": "replace", "path": "/spec/replicas", "value": 3}, patch]}],
        }})
    };
    let refused = "may not change /metadata/namespace";
    for patch in [
        json!({"op": "replace", "path": "/metadata/namespace", "value": "other"}),
        json!({"op": "add", "path": "/metadata/namespace", "value": "other"}),
        json!({"op": "remove", "path": "/metadata/namespace"}),
        json!({"op": "replace", "path": "/metadata", "value": {"name": "web", "namespace": "other"}}),
        json!({"op": "replace", "path": "/kind", "value": "ClusterRole"}),
        json!({"op": "replace", "path": "/apiVersion", "value": "v2"}),
    ] {
        let found = broken(
            "overrides.flotilla.io",
            &object("Override", patch.clone()),
            None,
        );
        assert!(
            found
                .iter()
                .any(|(f, m)| f == ".spec.rules" && m.contains(refused)),
            "{patch}: {found:?}"
        );
        // A ClusterOverride is the fleet admins': no such rule (the renderer still keeps
        // a Placement's objects in its namespace).
        let cluster = object("ClusterOverride", patch.clone());
        assert_eq!(
            broken("clusteroverrides.flotilla.io", &cluster, None),
            [],
            "{patch}"
        );
    }
    // Other metadata stays open to patches.
    for path in [
        "/metadata/labels/tier",
        "/metadata/annotations/ns",
        "/spec/namespace",
    ] {
        let patch = json!({"op": "add", "path": path, "value": "x"});
        assert_eq!(
            broken("overrides.flotilla.io", &object("Override", patch), None),
            [],
            "{path}"
        );
    }
}

#[test]
fn a_cluster_set_binding_is_named_after_its_set() {
    let binding = |name: &str, set: &str| {
        json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "ClusterSetBinding",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"clusterSet": set}})
    };
    assert_eq!(
        broken("clustersetbindings.flotilla.io", &binding("eu", "eu"), None),
        []
    );
    let found = broken("clustersetbindings.flotilla.io", &binding("eu", "us"), None);
    assert_eq!(
        found,
        [(
            ".spec.clusterSet".to_owned(),
            "metadata.name must equal spec.clusterSet: a binding is named after the \
             ClusterSet it binds"
                .to_owned()
        )]
    );
    let typed: ClusterSetBinding = serde_json::from_value(binding("eu", "eu")).unwrap();
    assert_eq!(typed.spec.cluster_set, "eu");
    assert_eq!(
        columns("clustersetbindings.flotilla.io")
            .into_iter()
            .map(|(name, _)| name)
            .collect::<Vec<_>>(),
        ["ClusterSet", "Bound", "Age"]
    );
    // Clusters without a set are in `default`, for bindings.
    let mut spec = ClusterSpec::default();
    assert_eq!(spec.bound_set(), DEFAULT_CLUSTER_SET);
    spec.cluster_set = Some("eu".into());
    assert_eq!(spec.bound_set(), "eu");
}

#[test]
fn clusters_and_profiles() {
    let cluster = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Cluster",
    "metadata": {"name": "eu-1", "labels": {"region": "eu"}},
    "spec": {
        "taints": [{"key": "maintenance", "effect": "NoSchedule"}],
        "clusterSet": "prod",
        "access": {"push": {"secretRef": {"namespace": "flotilla-system", "name": "eu-1"}}},
    },
    "status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "Heartbeat", "message": "",
            "lastTransitionTime": "2026-01-02T03:04:05Z"}],
        "kubernetesVersion": "v1.33.1",
        "allocatable": {"cpu": "16", "memory": "64Gi"},
        "properties": {"topology.kubernetes.io/region": "eu-west"},
        "lastHeartbeatTime": "2026-01-02T03:04:05Z",
    }});
    assert_eq!(broken("clusters.flotilla.io", &cluster, None), []);
    let typed: Cluster = serde_json::from_value(cluster.clone()).unwrap();
    assert_eq!(typed.spec.taints[0].effect, TaintEffect::NoSchedule);
    assert_eq!(serde_json::to_value(&typed).unwrap(), cluster);
    let mut both = cluster.clone();
    both["spec"]["access"]["pull"] = json!({"identity": "agent-eu-1"});
    let found = broken("clusters.flotilla.io", &both, None);
    assert!(
        found
            .iter()
            .any(|(f, m)| f == "spec.access" && m.contains("at most one")),
        "{found:?}"
    );

    let profile = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
        "metadata": {"name": "eu-1", "namespace": "prod", "labels": {"x-k8s.io/cluster-manager": "flotilla"}},
        "spec": {"displayName": "eu-1", "clusterManager": {"name": "flotilla"}},
        "status": {"version": {"kubernetes": "v1.33.1"},
            "properties": [{"name": "clusterset.k8s.io", "value": "prod"}],
            "accessProviders": [{"name": "kubeconfig", "cluster": {"server": "https://eu-1:6443",
                "certificate-authority-data": "Zm9v"}}]}});
    let name = "clusterprofiles.multicluster.x-k8s.io";
    assert_eq!(broken(name, &profile, None), []);
    let typed: ClusterProfile = serde_json::from_value(profile.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), profile);
    let mut moved = profile.clone();
    moved["spec"]["clusterManager"]["name"] = json!("other");
    assert_eq!(
        broken(name, &moved, None),
        [],
        "a new profile may name any manager"
    );
    let found = broken(name, &moved, Some(&profile));
    assert!(
        found
            .iter()
            .any(|(_, m)| m == "ClusterManager is immutable"),
        "{found:?}"
    );
}

#[test]
fn placement_decisions_have_no_spec() {
    let decision = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "PlacementDecision",
        "metadata": {"name": "web-1", "namespace": "prod",
            "labels": {"multicluster.x-k8s.io/decision-key": "web"}},
        "decisions": [{"clusterProfileRef": {"name": "eu-1"}, "reason": "label selector matches"}],
        "schedulerName": "flotilla"});
    let typed: PlacementDecision = serde_json::from_value(decision.clone()).unwrap();
    assert_eq!(typed.spec.decisions[0].cluster_profile_ref.name, "eu-1");
    assert_eq!(serde_json::to_value(&typed).unwrap(), decision);
    let schema = schema_of("placementdecisions.multicluster.x-k8s.io");
    assert!(schema["properties"]["spec"].is_null());
    assert_eq!(schema["required"], json!(["decisions"]));
}

#[test]
fn works_carry_whole_objects() {
    let work = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Work",
        "metadata": {"name": "shop.web", "namespace": "flotilla-cluster-eu-1"},
        "spec": {"placement": {"namespace": "shop", "name": "web"}, "cluster": "eu-1",
            "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web", "namespace": "shop"}, "data": {"k": "v"}}]},
        "status": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "shop",
            "name": "web", "statusFeedback": {"readyReplicas": 2},
            "drift": [{"path": "/data/k", "hub": "\"v\"", "member": "\"w\""}]}]}});
    assert_eq!(broken("works.flotilla.io", &work, None), []);
    let typed: Work = serde_json::from_value(work.clone()).unwrap();
    assert_eq!(typed.spec.manifests[0].value()["data"]["k"], "v");
    assert_eq!(serde_json::to_value(&typed).unwrap(), work);
    // A manifest is kept as its JSON, keys in order: the same object written in another
    // order is the same manifest.
    let reordered: Manifest = serde_json::from_str(
        r#"{"data": {"k": "v"}, "metadata": {"namespace": "shop", "name": "web"},
            "kind": "ConfigMap", "apiVersion": "v1"}"#,
    )
    .unwrap();
    assert_eq!(reordered, typed.spec.manifests[0]);
    assert_eq!(
        reordered.json(),
        r#"{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"web","namespace":"shop"}}"#
    );
    assert_ne!(
        reordered,
        Manifest::from(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "shop"}, "data": {"k": "w"}}))
    );
    // So is what a manifest reports back.
    let status = typed.status.as_ref().unwrap();
    let feedback = status.manifests[0].status_feedback.as_ref().unwrap();
    assert_eq!(feedback.json(), r#"{"readyReplicas":2}"#);
    assert_eq!(feedback.value()["readyReplicas"], 2);
    let schema = schema_of("works.flotilla.io");
    let feedback = &schema["properties"]["status"]["properties"]["manifests"]["items"]["properties"]
        ["statusFeedback"];
    assert_eq!(feedback["type"], "object");
    assert_eq!(feedback["x-kubernetes-preserve-unknown-fields"], true);
    let items = &schema["properties"]["spec"]["properties"]["manifests"]["items"];
    assert_eq!(items["x-kubernetes-embedded-resource"], true);
    assert_eq!(items["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn drift_is_listed_within_its_bound_values_cut_at_a_character() {
    let entry = |i: usize, value: &str| Drift {
        path: format!("/data/k{i}"),
        hub: Some(value.to_owned()),
        member: None,
    };
    let bound = DriftBound {
        fields: 2,
        value_bytes: 8,
    };
    // Within the bound: as it was.
    let short = vec![entry(0, "\"abc\"")];
    assert_eq!(bound.apply(short.clone()), (short, None));
    // Three entries: two listed, one counted; a long value cut to 8 bytes with its mark,
    // never inside a character ("é" is two bytes: 5 bytes of text fit, not 6).
    let (listed, left_out) = bound.apply(vec![
        entry(0, "\"abcdefghij\""),
        entry(1, "\"aaaéé\""),
        entry(2, "\"x\""),
    ]);
    assert_eq!(left_out, Some(1));
    let values: Vec<&str> = listed.iter().filter_map(|d| d.hub.as_deref()).collect();
    assert_eq!(values, ["\"abcd…", "\"aaa…"]);
    assert!(listed.iter().all(|d| d.member.is_none()));
    // The statuses' bounds keep a full placement's drift far below the object size limit.
    let most = DriftBound::PLACED_CLUSTER.fields * 2 * DriftBound::PLACED_CLUSTER.value_bytes;
    assert!(MAX_LISTED_CLUSTERS * most < 1 << 20);
}

fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.into(),
        effect,
    }
}

#[test]
fn equal_needs_key_and_value() {
    let toleration = Toleration {
        key: "dedicated".into(),
        value: "gpu".into(),
        ..Toleration::default()
    };
    assert!(toleration.tolerates(&taint("dedicated", "gpu", TaintEffect::NoSchedule)));
    assert!(toleration.tolerates(&taint("dedicated", "gpu", TaintEffect::NoExecute)));
    assert!(!toleration.tolerates(&taint("dedicated", "db", TaintEffect::NoSchedule)));
    assert!(!toleration.tolerates(&taint("other", "gpu", TaintEffect::NoSchedule)));
}

#[test]
fn exists_ignores_the_value_and_an_empty_key_matches_all() {
    let by_key = Toleration {
        key: "maintenance".into(),
        operator: TolerationOperator::Exists,
        ..Toleration::default()
    };
    assert!(by_key.tolerates(&taint("maintenance", "x", TaintEffect::NoExecute)));
    assert!(!by_key.tolerates(&taint("other", "", TaintEffect::NoExecute)));
    let everything = Toleration {
        operator: TolerationOperator::Exists,
        ..Toleration::default()
    };
    assert!(everything.tolerates(&taint("anything", "v", TaintEffect::NoExecute)));
}

#[test]
fn an_effect_limits_what_is_tolerated() {
    let toleration = Toleration {
        key: "maintenance".into(),
        operator: TolerationOperator::Exists,
        effect: Some(TaintEffect::NoSchedule),
        ..Toleration::default()
    };
    assert!(toleration.tolerates(&taint("maintenance", "", TaintEffect::NoSchedule)));
    assert!(!toleration.tolerates(&taint("maintenance", "", TaintEffect::NoExecute)));
}

#[test]
fn taints_display_as_kubectl_writes_them() {
    assert_eq!(
        taint("maintenance", "", TaintEffect::NoSchedule).to_string(),
        "maintenance:NoSchedule"
    );
    assert_eq!(
        taint("dedicated", "gpu", TaintEffect::NoExecute).to_string(),
        "dedicated=gpu:NoExecute"
    );
}

fn compute_namespace(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "ComputeNamespace",
        "metadata": {"name": name}, "spec": spec})
}

#[test]
fn a_compute_namespace_is_a_namespace_on_some_sets_with_unique_names() {
    let crd = "computenamespaces.flotilla.io";
    let team_a = compute_namespace(
        "team-a",
        json!({"clusterSets": ["eu"], "labels": {"team": "a"},
            "serviceAccounts": [{"name": "deployer"}],
            "limitRange": {"limits": [{"type": "Container", "default": {"cpu": "500m"}}]},
            "resourceQuota": {"hard": {"pods": "10"}},
            "roleBindings": [{"name": "team-a-edit",
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "Group", "name": "team-a"}]}]}),
    );
    assert_eq!(broken(crd, &team_a, None), []);
    // The issue's shape reads back into the typed object, and the policy defaults.
    let typed: ComputeNamespace = serde_json::from_value(team_a).unwrap();
    assert_eq!(typed.spec.cluster_sets, ["eu"]);
    assert_eq!(typed.spec.deletion_policy, DeletionPolicy::Delete);
    assert_eq!(typed.spec.role_bindings[0].role_ref.name, "edit");
    let quota = typed.spec.resource_quota.unwrap();
    assert_eq!(quota.hard.unwrap()["pods"].0, "10");

    let message = |name: &str, spec: Value| -> Vec<String> {
        broken(crd, &compute_namespace(name, spec), None)
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    };
    let eu = || json!(["eu"]);
    assert!(message("Team_A", json!({"clusterSets": eu()}))[0].contains("DNS-1123 label"));
    for system in ["kube-system", "default", "flotilla-cluster-a"] {
        assert!(
            message(system, json!({"clusterSets": eu()}))
                .iter()
                .any(|m| m.contains("system namespace")),
            "{system}"
        );
    }
    assert!(message("team-a", json!({"clusterSets": []}))[0].contains("at least one ClusterSet"));
    let twice = message(
        "team-a",
        json!({"clusterSets": eu(), "serviceAccounts": [{"name": "ci"}, {"name": "ci"}]}),
    );
    assert!(
        twice[0].contains("serviceAccounts[].name must be unique"),
        "{twice:?}"
    );
    let twice = message(
        "team-a",
        json!({"clusterSets": eu(), "roleBindings": [
            {"name": "b", "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}},
            {"name": "b", "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "s"}}]}),
    );
    assert!(
        twice[0].contains("roleBindings[].name must be unique"),
        "{twice:?}"
    );
}

#[test]
fn a_compute_namespace_s_works_are_told_apart_from_placements() {
    let reference = compute::reference("team-a");
    assert_eq!(compute::referenced(&reference), Some("team-a"));
    assert_eq!(compute::work_name("team-a"), "computenamespace.team-a");
    // No placement's reference is taken for a ComputeNamespace's.
    let placement = PlacementReference {
        namespace: Some("ComputeNamespace".into()),
        name: "team-a".into(),
    };
    assert_eq!(compute::referenced(&placement), None);
    let cluster_placement = PlacementReference {
        namespace: None,
        name: "team-a".into(),
    };
    assert_eq!(compute::referenced(&cluster_placement), None);
}
