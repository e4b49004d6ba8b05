use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_api::{Cluster, ClusterSpec, ClusterStatus, OverrideSpec, PlacementSpec, WorkSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Value, json};

use super::*;

fn cluster(name: &str, labels: &[(&str, &str)], ready: bool) -> Cluster {
    let mut c = Cluster::new(name, ClusterSpec::default());
    c.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    c.status = Some(ClusterStatus {
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            reason: String::new(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }],
        ..Default::default()
    });
    c
}

fn fleet() -> Vec<Arc<Cluster>> {
    vec![
        Arc::new(cluster(
            "eu-1",
            &[("region", "eu"), ("size", "small")],
            true,
        )),
        Arc::new(cluster(
            "eu-2",
            &[("region", "eu"), ("size", "large")],
            true,
        )),
        Arc::new(cluster(
            "us-1",
            &[("region", "us"), ("size", "large")],
            true,
        )),
    ]
}

fn deployment(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "7",
            "generation": 2, "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
        "status": {"replicas": 9}})
}

fn placement() -> PlacementSpec {
    serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}},
        "replicas": {"mode": "Divided", "weights": [
            {"clusters": {"labelSelector": {"matchLabels": {"size": "small"}}}, "weight": 1},
            {"clusters": {"labelSelector": {"matchLabels": {"size": "large"}}}, "weight": 2}]}
    }))
    .unwrap()
}

fn image_override() -> OverrideSpec {
    serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "rules": [{"jsonPatch": [{"op": "replace", "path": "/spec/template/spec/containers/0/image",
            "value": "nginx:${cluster.name}"}]}]
    }))
    .unwrap()
}

fn key() -> PlacementKey {
    PlacementKey {
        namespace: Some("shop".into()),
        name: "web".into(),
    }
}

fn run(
    spec: &PlacementSpec,
    templates: &[Value],
    clusters: &[Arc<Cluster>],
    overrides: &[OverrideRef<'_>],
    current: &BTreeMap<String, WorkSpec>,
) -> Plan {
    run_as(
        &key(),
        &Reach::Everywhere,
        spec,
        templates,
        clusters,
        overrides,
        current,
    )
}

/// [`run`] for placement `placement`, within `reach`.
fn run_as(
    placement: &PlacementKey,
    reach: &Reach,
    spec: &PlacementSpec,
    templates: &[Value],
    clusters: &[Arc<Cluster>],
    overrides: &[OverrideRef<'_>],
    current: &BTreeMap<String, WorkSpec>,
) -> Plan {
    let current: BTreeMap<String, &WorkSpec> =
        current.iter().map(|(c, w)| (c.clone(), w)).collect();
    plan(Inputs {
        placement,
        spec,
        templates,
        clusters,
        reach,
        overrides,
        current: &current,
    })
}

fn replicas_in(work: &WorkSpec) -> i64 {
    work.manifests
        .iter()
        .map(Manifest::value)
        .find(|m| m["kind"] == "Deployment")
        .and_then(|m| m["spec"]["replicas"].as_i64())
        .unwrap()
}

#[test]
fn nine_replicas_divide_one_to_two_with_the_image_overridden() {
    let spec = placement();
    let ov = image_override();
    let overrides = [OverrideRef {
        namespace: Some("shop"),
        name: "web-image",
        spec: &ov,
    }];
    let plan = run(
        &spec,
        &[deployment(9)],
        &fleet(),
        &overrides,
        &BTreeMap::new(),
    );
    assert_eq!(plan.scheduled, Ok(()));
    assert_eq!(plan.selection.chosen, ["eu-1", "eu-2"]);
    assert_eq!(plan.selection.excluded[0].0, "us-1");
    assert_eq!(
        plan.replicas,
        BTreeMap::from([("eu-1".into(), 3), ("eu-2".into(), 6)])
    );
    let work = &plan.works["eu-1"];
    assert_eq!(work.cluster, "eu-1");
    assert_eq!(work.placement.name, "web");
    assert_eq!(work.placement.namespace.as_deref(), Some("shop"));
    // The template's namespace comes first, marked shared; then the Deployment, cleaned.
    let namespace = work.manifests[0].value();
    assert_eq!(namespace["kind"], "Namespace");
    assert_eq!(namespace["metadata"]["name"], "shop");
    assert_eq!(
        namespace["metadata"]["annotations"][SHARED_ANNOTATION],
        "true"
    );
    let deployment = &work.manifests[1].value();
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:eu-1"
    );
    assert!(deployment.get("status").is_none());
    assert!(deployment["metadata"].get("uid").is_none());
    assert!(deployment["metadata"].get("resourceVersion").is_none());
    assert_eq!(replicas_in(&plan.works["eu-2"]), 6);
    assert_eq!(
        plan.works["eu-2"].manifests[1].value()["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:eu-2"
    );
    assert_eq!(key().work_name(), "shop.web");
    assert_eq!(work_namespace("eu-1"), "flotilla-cluster-eu-1");
}

#[test]
fn scaling_moves_the_division_and_a_plan_fed_back_is_stable() {
    let spec = placement();
    let first = run(&spec, &[deployment(9)], &fleet(), &[], &BTreeMap::new());
    let again = run(&spec, &[deployment(9)], &fleet(), &[], &first.works);
    assert_eq!(again, first, "nothing changed: the same plan");
    let scaled = run(&spec, &[deployment(12)], &fleet(), &[], &first.works);
    assert_eq!(replicas_in(&scaled.works["eu-1"]), 4);
    assert_eq!(replicas_in(&scaled.works["eu-2"]), 8);
}

#[test]
fn a_cluster_that_is_not_ready_gives_its_share_away_and_gets_it_back() {
    let spec = placement();
    let first = run(&spec, &[deployment(9)], &fleet(), &[], &BTreeMap::new());
    let mut clusters = fleet();
    clusters[1] = Arc::new(cluster(
        "eu-2",
        &[("region", "eu"), ("size", "large")],
        false,
    ));
    let down = run(&spec, &[deployment(9)], &clusters, &[], &first.works);
    assert_eq!(down.selection.chosen, ["eu-1", "eu-2"], "its Work stays");
    assert_eq!(replicas_in(&down.works["eu-1"]), 9);
    assert_eq!(replicas_in(&down.works["eu-2"]), 0);
    let back = run(&spec, &[deployment(9)], &fleet(), &[], &down.works);
    assert_eq!(replicas_in(&back.works["eu-1"]), 3);
    assert_eq!(replicas_in(&back.works["eu-2"]), 6);
}

#[test]
fn an_override_failing_on_one_cluster_keeps_that_clusters_work_whole() {
    let spec = placement();
    let first = run(&spec, &[deployment(9)], &fleet(), &[], &BTreeMap::new());
    let broken: OverrideSpec = serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
        "clusters": {"names": ["eu-2"]},
        "rules": [{"jsonPatch": [{"op": "replace", "path": "/spec/nothing/here", "value": 1}]}]
    }))
    .unwrap();
    let overrides = [OverrideRef {
        namespace: Some("shop"),
        name: "broken",
        spec: &broken,
    }];
    let plan = run(&spec, &[deployment(12)], &fleet(), &overrides, &first.works);
    assert_eq!(plan.scheduled, Ok(()));
    assert_eq!(replicas_in(&plan.works["eu-1"]), 4, "eu-1 moves on");
    assert_eq!(
        plan.works["eu-2"], first.works["eu-2"],
        "eu-2 keeps its Work"
    );
    let why = &plan.failed["eu-2"];
    assert!(why.contains("shop/broken"), "{why}");
    assert!(!plan.failed.contains_key("eu-1"));
}

#[test]
fn a_division_that_cannot_be_made_keeps_every_work() {
    let mut spec = placement();
    for term in &mut spec.replicas.as_mut().unwrap().weights {
        term.weight = 0;
    }
    let current = run(
        &placement(),
        &[deployment(9)],
        &fleet(),
        &[],
        &BTreeMap::new(),
    )
    .works;
    let plan = run(&spec, &[deployment(9)], &fleet(), &[], &current);
    let why = plan.scheduled.clone().unwrap_err();
    assert_eq!(why.reason, Unscheduled::CANNOT_DIVIDE);
    assert!(why.message.contains("weight 0"), "{why}");
    assert_eq!(plan.works, current);
}

#[test]
fn a_placement_that_selects_no_cluster_says_why_and_wants_no_work() {
    let mut spec = placement();
    spec.clusters =
        serde_json::from_value(json!({"labelSelector": {"matchLabels": {"region": "mars"}}}))
            .unwrap();
    let current = run(
        &placement(),
        &[deployment(9)],
        &fleet(),
        &[],
        &BTreeMap::new(),
    )
    .works;
    let plan = run(&spec, &[deployment(9)], &fleet(), &[], &current);
    let why = plan.scheduled.clone().unwrap_err();
    assert_eq!(why.reason, Unscheduled::NO_CLUSTERS);
    assert!(
        why.message.contains("no cluster matches") && why.message.contains("eu-1"),
        "{why}"
    );
    assert!(plan.works.is_empty());
    let nobody = run(&spec, &[deployment(9)], &[], &[], &BTreeMap::new());
    assert_eq!(
        nobody.scheduled,
        Err(Unscheduled {
            reason: Unscheduled::NO_CLUSTERS,
            message: "no cluster has joined the fleet".into()
        })
    );
}

#[test]
fn cluster_overrides_apply_before_overrides_and_selectors_pick_templates() {
    let label = |value: &str| -> OverrideSpec {
        serde_json::from_value(json!({
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "rules": [{"labels": {"tier": value}}]
        }))
        .unwrap()
    };
    let (a, b) = (label("from-namespace"), label("from-cluster"));
    let other_namespace = label("elsewhere");
    let overrides = [
        OverrideRef {
            namespace: Some("shop"),
            name: "a",
            spec: &a,
        },
        OverrideRef {
            namespace: None,
            name: "z",
            spec: &b,
        },
        OverrideRef {
            namespace: Some("other"),
            name: "b",
            spec: &other_namespace,
        },
    ];
    let mut spec = placement();
    spec.replicas = None;
    let plan = run(
        &spec,
        &[deployment(2)],
        &fleet(),
        &overrides,
        &BTreeMap::new(),
    );
    let labels = &plan.works["eu-1"].manifests[1].value()["metadata"]["labels"];
    assert_eq!(labels["tier"], "from-namespace");
    assert_eq!(replicas_in(&plan.works["eu-1"]), 2, "Duplicated");

    let object = deployment(1);
    assert!(selects(&spec, Some("shop"), &object));
    assert!(!selects(&spec, Some("other"), &object));
    let by_label: PlacementSpec = serde_json::from_value(json!({"resourceSelectors": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"app": "web"}}}]}))
    .unwrap();
    assert!(
        selects(&by_label, None, &object),
        "a ClusterPlacement, any namespace"
    );
    let wrong_kind: PlacementSpec = serde_json::from_value(json!({"resourceSelectors": [
        {"apiVersion": "apps/v1", "kind": "StatefulSet"}]}))
    .unwrap();
    assert!(!selects(&wrong_kind, Some("shop"), &object));
}

#[test]
fn the_replicas_each_cluster_is_asked_for_are_kept_per_template_overrides_included() {
    // Divided 1:2, then an override that sets eu-2's replicas to 5.
    let spec = placement();
    let five: OverrideSpec = serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "clusters": {"names": ["eu-2"]},
        "rules": [{"jsonPatch": [{"op": "replace", "path": "/spec/replicas", "value": 5}]}]
    }))
    .unwrap();
    let overrides = [OverrideRef {
        namespace: Some("shop"),
        name: "five",
        spec: &five,
    }];
    let plan = run(
        &spec,
        &[deployment(9)],
        &fleet(),
        &overrides,
        &BTreeMap::new(),
    );
    let id = manifest_id(&deployment(9));
    assert_eq!(
        plan.template_replicas[&id],
        BTreeMap::from([("eu-1".into(), 3), ("eu-2".into(), 5)])
    );
    assert_eq!(replicas_in(&plan.works["eu-2"]), 5);
    // A template without replicas has none.
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {}});
    let mut spec = placement();
    spec.resource_selectors[0].kind = "ConfigMap".into();
    spec.resource_selectors[0].api_version = "v1".into();
    let plan = run(&spec, &[config], &fleet(), &[], &BTreeMap::new());
    assert!(plan.template_replicas.is_empty());
}

/// eu-1 and eu-2 in set eu, us-1 in us.
fn fleet_in_sets() -> Vec<Arc<Cluster>> {
    fleet()
        .into_iter()
        .map(|c| {
            let mut c = (*c).clone();
            let set = c.metadata.labels.as_ref().unwrap()["region"].clone();
            c.spec.cluster_set = Some(set);
            Arc::new(c)
        })
        .collect()
}

fn everywhere() -> PlacementSpec {
    serde_json::from_value(json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
    }))
    .unwrap()
}

#[test]
fn a_binding_takes_the_placement_off_clusters_outside_its_sets() {
    let clusters = fleet_in_sets();
    let open = run(
        &everywhere(),
        &[deployment(3)],
        &clusters,
        &[],
        &BTreeMap::new(),
    );
    assert_eq!(
        open.works.keys().collect::<Vec<_>>(),
        ["eu-1", "eu-2", "us-1"]
    );
    // Bound to eu: us-1 is no longer wanted (its Work goes), and says why.
    let eu = Reach::Sets {
        namespace: "shop".into(),
        sets: ["eu".to_owned()].into(),
    };
    let bound = run_as(
        &key(),
        &eu,
        &everywhere(),
        &[deployment(3)],
        &clusters,
        &[],
        &open.works,
    );
    assert_eq!(bound.scheduled, Ok(()));
    assert_eq!(bound.works.keys().collect::<Vec<_>>(), ["eu-1", "eu-2"]);
    assert_eq!(
        bound
            .selection
            .excluded
            .iter()
            .map(|(c, r)| format!("{c}: {r}"))
            .collect::<Vec<_>>(),
        ["us-1: cluster set us is not bound to namespace shop"]
    );
    // Bound tenancy and no binding: nothing scheduled, every Work goes, and why.
    let unbound = Reach::Unbound {
        namespace: "shop".into(),
    };
    let nothing = run_as(
        &key(),
        &unbound,
        &everywhere(),
        &[deployment(3)],
        &clusters,
        &[],
        &open.works,
    );
    assert!(nothing.works.is_empty());
    let why = nothing.scheduled.unwrap_err();
    assert_eq!(why.reason, Unscheduled::NO_CLUSTER_SET_BINDING);
    assert!(
        why.message
            .starts_with("namespace shop has no ClusterSetBinding"),
        "{why}"
    );
    assert_eq!(nothing.selection.excluded.len(), 3);
}

#[test]
fn an_override_that_moves_a_placements_object_delivers_nothing_there() {
    let patch = |path: &str, value: Value| -> OverrideSpec {
        serde_json::from_value(json!({
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "clusters": {"names": ["us-1"]},
            "rules": [{"jsonPatch": [{"op": "replace", "path": path, "value": value}]}]
        }))
        .unwrap()
    };
    let (moved, rekinded) = (
        patch("/metadata/namespace", json!("bank")),
        patch("/kind", json!("DaemonSet")),
    );
    let clusters = fleet();
    for (spec, escape) in [
        (&moved, r#"metadata.namespace from "shop" to "bank""#),
        (&rekinded, r#"kind from "Deployment" to "DaemonSet""#),
    ] {
        // A ClusterOverride (admission cannot refuse what it does to a Placement's
        // templates): us-1's rendering fails, and it gets no Work.
        let overrides = [OverrideRef {
            namespace: None,
            name: "move",
            spec,
        }];
        let plan = run(
            &everywhere(),
            &[deployment(3)],
            &clusters,
            &overrides,
            &BTreeMap::new(),
        );
        assert_eq!(plan.works.keys().collect::<Vec<_>>(), ["eu-1", "eu-2"]);
        let why = &plan.failed["us-1"];
        assert!(
            why.contains(escape) && why.contains("must keep the template's"),
            "{why}"
        );
        // A Work delivered before is kept as it was: nothing moves.
        let before = run(
            &everywhere(),
            &[deployment(3)],
            &clusters,
            &[],
            &BTreeMap::new(),
        );
        let plan = run(
            &everywhere(),
            &[deployment(3)],
            &clusters,
            &overrides,
            &before.works,
        );
        assert_eq!(plan.works, before.works);
        assert!(plan.failed.contains_key("us-1"));
    }
}
