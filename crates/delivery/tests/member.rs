//! Delivery against a real member: a Flotilla API server in-process (SQLite in a
//! temporary directory), reached through a kube client over its tower service. It runs
//! no workload controllers, so the tests write workload status themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use flotilla_api::condition::{APPLIED, AVAILABLE};
use flotilla_api::{
    ApplyPolicy, ConflictPolicy, DeletionPolicy, Drift, DriftPolicy, Manifest, ManifestStatus,
    PlacementReference, WorkSpec, WorkStatus,
};
use flotilla_apiserver::Registry;
use flotilla_apiserver::http::server::local_service;
use flotilla_delivery::{Change, Member, Provenance};
use flotilla_store_sqlite::SqliteStore;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tempfile::TempDir;

/// A member cluster: a real API server on SQLite, and delivery's view of it.
struct Cluster {
    _dir: TempDir,
    client: kube::Client,
    member: Member,
}

async fn cluster() -> anyhow::Result<Cluster> {
    Ok(counted_cluster().await?.0)
}

/// A member cluster whose client counts the requests it sends.
async fn counted_cluster() -> anyhow::Result<(Cluster, Arc<AtomicUsize>)> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("member.db")).await?;
    let api =
        flotilla_apiserver::Api::new(Arc::new(store), Arc::new(Registry::builtin()), "member");
    api.bootstrap()
        .await
        .map_err(|e| anyhow::anyhow!("bootstrap: {e}"))?;
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let counted = tower::ServiceBuilder::new()
        .map_request(move |r| {
            counter.fetch_add(1, Ordering::SeqCst);
            r
        })
        .service(local_service(
            api,
            Arc::new(flotilla_apiserver::http::metrics::Metrics::new()),
        ));
    let client = kube::Client::new(counted, "default");
    let cluster = Cluster {
        _dir: dir,
        member: Member::new(client.clone()),
        client,
    };
    Ok((cluster, requests))
}

fn provenance() -> Provenance {
    Provenance {
        hub: "hub-1".into(),
        placement: "shop/web".into(),
        work: "web".into(),
    }
}

fn work(manifests: Vec<Value>, apply: Option<ApplyPolicy>) -> WorkSpec {
    WorkSpec {
        placement: PlacementReference {
            namespace: Some("shop".into()),
            name: "web".into(),
        },
        cluster: "member".into(),
        manifests: manifests.into_iter().map(Manifest::from).collect(),
        apply,
    }
}

fn policy(conflict: ConflictPolicy, drift: DriftPolicy, deletion: DeletionPolicy) -> ApplyPolicy {
    ApplyPolicy {
        conflict,
        drift,
        deletion,
        service_account_name: None,
    }
}

fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
        "data": {"greeting": value}})
}

fn deployment(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}})
}

fn widget() -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "shop"}, "spec": {"size": 2}})
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} in {conditions:?}"))
}

/// The manifest's `Applied` condition: (status, reason, message).
fn applied(status: &ManifestStatus) -> (&str, &str, &str) {
    let c = condition(&status.conditions, APPLIED);
    (&c.status, &c.reason, &c.message)
}

fn available(status: &ManifestStatus) -> (&str, &str, &str) {
    let c = condition(&status.conditions, AVAILABLE);
    (&c.status, &c.reason, &c.message)
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// An object as the member has it, as JSON; `None` if absent.
async fn live(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<Option<Value>> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    Ok(api
        .get_opt(name)
        .await?
        .map(|o| serde_json::to_value(o).unwrap()))
}

async fn live_cm(client: &kube::Client, name: &str) -> anyhow::Result<Option<Value>> {
    live(
        client,
        &resource("v1", "ConfigMap", "configmaps"),
        Some("shop"),
        name,
    )
    .await
}

fn rv(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Another field manager's edit, as `kubectl edit` would make it.
fn hand() -> PatchParams {
    PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    }
}

fn assert_all_applied(status: &WorkStatus) {
    for m in &status.manifests {
        assert_eq!(applied(m).0, "True", "{m:?}");
    }
    assert_eq!(condition(&status.conditions, APPLIED).status, "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_is_applied_with_provenance_and_a_resync_writes_nothing() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let w = work(
        vec![namespace(), config_map("web", "hello"), deployment(3)],
        None,
    );
    let status = c.member.sync(&w, Some(4), &p, &[]).await;
    assert_all_applied(&status);
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!(status.manifests.len(), 3);
    let applied_all = condition(&status.conditions, APPLIED);
    assert_eq!(applied_all.message, "3/3 manifests applied");
    assert_eq!(applied_all.observed_generation, Some(4));
    let ns = &status.manifests[0];
    assert_eq!(
        (ns.kind.as_str(), ns.namespace.as_deref()),
        ("Namespace", None)
    );
    assert_eq!(available(ns).0, "True");
    assert_eq!(status.manifests[1].namespace.as_deref(), Some("shop"));
    // Nothing runs the Deployment: its controller has not observed it.
    let web = &status.manifests[2];
    assert_eq!(available(web).0, "False");
    assert_eq!(available(web).1, "NotObserved");
    let available_all = condition(&status.conditions, AVAILABLE);
    assert_eq!(available_all.status, "False");
    assert!(
        available_all
            .message
            .starts_with("2/3 manifests available; Deployment shop/web: NotObserved"),
        "{}",
        available_all.message
    );

    let cm = live_cm(&c.client, "web").await?.context("the ConfigMap")?;
    assert_eq!(cm["data"]["greeting"], "hello");
    let labels = &cm["metadata"]["labels"];
    assert_eq!(labels["app"], "web");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "flotilla");
    assert_eq!(labels["flotilla.io/hub"], "hub-1");
    let annotations = &cm["metadata"]["annotations"];
    assert_eq!(annotations["flotilla.io/placement"], "shop/web");
    assert_eq!(annotations["flotilla.io/work"], "web");
    assert_eq!(
        annotations["flotilla.io/manifest-hash"],
        flotilla_delivery::provenance::manifest_hash(&config_map("web", "hello")).as_str()
    );
    let managers: Vec<(&str, &str)> = cm["metadata"]["managedFields"]
        .as_array()
        .context("managedFields")?
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap(),
                e["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(managers, [("flotilla", "Apply")]);

    // Again with nothing new: the same status, and no write on the member.
    let deployments = resource("apps/v1", "Deployment", "deployments");
    let before = (
        rv(&live_cm(&c.client, "web").await?.unwrap()),
        rv(&live(&c.client, &deployments, Some("shop"), "web")
            .await?
            .unwrap()),
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = c.member.sync(&w, Some(4), &p, &status.manifests).await;
    assert_eq!(again, status);
    let after = (
        rv(&live_cm(&c.client, "web").await?.unwrap()),
        rv(&live(&c.client, &deployments, Some("shop"), "web")
            .await?
            .unwrap()),
    );
    assert_eq!(before, after);

    // The workload controller reports progress, then readiness.
    let status_api: Api<Deployment> = Api::namespaced(c.client.clone(), "shop");
    let report = |updated: i64, ready: i64| {
        Patch::Merge(json!({"status": {"observedGeneration": 1, "replicas": 3,
            "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": ready,
            "conditions": [{"type": "Available", "status": if ready == 3 { "True" } else { "False" },
                "reason": "MinimumReplicasAvailable", "message": "m",
                "lastUpdateTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}))
    };
    status_api
        .patch_status("web", &PatchParams::default(), &report(3, 2))
        .await?;
    let partial = c.member.sync(&w, Some(4), &p, &again.manifests).await;
    let web = &partial.manifests[2];
    assert_eq!(
        available(web),
        ("False", "ReplicasUnavailable", "2/3 replicas available")
    );
    // Same status (False), new reason: the transition time holds.
    assert_eq!(
        condition(&web.conditions, AVAILABLE).last_transition_time,
        condition(&again.manifests[2].conditions, AVAILABLE).last_transition_time
    );
    status_api
        .patch_status("web", &PatchParams::default(), &report(3, 3))
        .await?;
    let ready = c.member.sync(&w, Some(4), &p, &partial.manifests).await;
    let web = &ready.manifests[2];
    assert_eq!(
        available(web),
        ("True", "ReplicasAvailable", "3/3 replicas available")
    );
    let feedback = web.status_feedback.as_ref().context("feedback")?.value();
    assert_eq!(feedback["replicas"], 3);
    assert_eq!(feedback["readyReplicas"], 3);
    assert_eq!(feedback["availableReplicas"], 3);
    assert_eq!(feedback["updatedReplicas"], 3);
    assert_eq!(feedback["observedGeneration"], 1);
    assert_eq!(feedback["conditions"][0]["type"], "Available");
    assert_eq!(ready.manifests[1].status_feedback, None);
    let all = condition(&ready.conditions, AVAILABLE);
    assert_eq!(
        (all.status.as_str(), all.message.as_str()),
        ("True", "3/3 manifests available")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_corrected_or_reported() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), "shop");
    let replicas = async || -> anyhow::Result<i32> {
        Ok(deployments
            .get("web")
            .await?
            .spec
            .unwrap()
            .replicas
            .unwrap())
    };
    let edit = Patch::Merge(json!({"spec": {"replicas": 5}}));

    // Correct (the default): the hub's value comes back.
    let correct = work(vec![namespace(), deployment(3)], None);
    let first = c.member.sync(&correct, Some(1), &p, &[]).await;
    assert_all_applied(&first);
    deployments.patch("web", &hand(), &edit).await?;
    assert_eq!(replicas().await?, 5);
    let corrected = c.member.sync(&correct, Some(1), &p, &first.manifests).await;
    assert_eq!(replicas().await?, 3);
    assert_eq!(corrected.manifests[1].drift, []);
    assert_eq!(applied(&corrected.manifests[1]).1, "Applied");

    // Report: the member's value stays, and the difference is reported.
    let report = policy(
        ConflictPolicy::Abort,
        DriftPolicy::Report,
        DeletionPolicy::Delete,
    );
    let reported_work = work(vec![namespace(), deployment(3)], Some(report.clone()));
    let clean = c
        .member
        .sync(&reported_work, Some(2), &p, &corrected.manifests)
        .await;
    assert_eq!(clean.manifests[1].drift, []);
    deployments.patch("web", &hand(), &edit).await?;
    let reported = c
        .member
        .sync(&reported_work, Some(2), &p, &clean.manifests)
        .await;
    assert_eq!(replicas().await?, 5);
    let web = &reported.manifests[1];
    assert_eq!(
        web.drift,
        [Drift {
            path: "/spec/replicas".into(),
            hub: Some("3".into()),
            member: Some("5".into()),
        }]
    );
    assert_eq!(applied(web).0, "True");
    assert_eq!(
        applied(web),
        (
            "True",
            "Drifted",
            "1 field differs on the member; reported, not corrected (drift: Report)"
        )
    );
    // Reporting it again changes nothing.
    let again = c
        .member
        .sync(&reported_work, Some(2), &p, &reported.manifests)
        .await;
    assert_eq!(again, reported);

    // A change on the hub still goes out under Report.
    let changed = work(vec![namespace(), deployment(4)], Some(report));
    let status = c.member.sync(&changed, Some(3), &p, &again.manifests).await;
    assert_eq!(replicas().await?, 4);
    assert_eq!(status.manifests[1].drift, []);
    assert_eq!(applied(&status.manifests[1]).1, "Applied");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_drift_is_bounded_in_fields_and_in_value_length() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    // Twelve keys of 300 bytes, every one edited by hand on the member.
    let data: serde_json::Map<String, Value> = (0..12)
        .map(|i| (format!("k{i:02}"), Value::from("h".repeat(300))))
        .collect();
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "shop"}, "data": data});
    let report = policy(
        ConflictPolicy::Abort,
        DriftPolicy::Report,
        DeletionPolicy::Delete,
    );
    let spec = work(vec![namespace(), big], Some(report));
    let first = c.member.sync(&spec, Some(1), &p, &[]).await;
    assert_all_applied(&first);
    let edited: serde_json::Map<String, Value> = (0..12)
        .map(|i| (format!("k{i:02}"), Value::from("m".repeat(300))))
        .collect();
    let configmaps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "shop");
    configmaps
        .patch("big", &hand(), &Patch::Merge(json!({"data": edited})))
        .await?;
    let reported = c.member.sync(&spec, Some(1), &p, &first.manifests).await;
    let big = &reported.manifests[1];
    // The condition counts every field; the status lists eight, values cut to 128 bytes.
    assert_eq!(
        applied(big),
        (
            "True",
            "Drifted",
            "12 fields differ on the member; reported, not corrected (drift: Report)"
        )
    );
    assert_eq!(big.drift.len(), 8, "{:?}", big.drift);
    assert_eq!(big.unlisted_drift, Some(4));
    for entry in &big.drift {
        for value in [&entry.hub, &entry.member] {
            let value = value.as_deref().unwrap();
            assert_eq!(value.len(), 128, "{value}");
            assert!(value.ends_with('…'), "{value}");
        }
    }
    assert!(big.drift[0].hub.as_deref().unwrap().starts_with("\"hhh"));
    assert!(big.drift[0].member.as_deref().unwrap().starts_with("\"mmm"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn someone_elses_object_is_a_conflict_unless_overwritten() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    c.member
        .sync(&work(vec![namespace()], None), None, &p, &[])
        .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "shop");
    let theirs: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "web"},
        "data": {"greeting": "theirs", "extra": "kept"}}))?;
    let params = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    config_maps.create(&params, &theirs).await?;
    let before = live_cm(&c.client, "web").await?.unwrap();

    let abort = work(vec![namespace(), config_map("web", "ours")], None);
    let status = c.member.sync(&abort, None, &p, &[]).await;
    let cm = &status.manifests[1];
    let (state, reason, message) = applied(cm);
    assert_eq!((state, reason), ("False", "Conflict"));
    assert!(
        message.contains("ConfigMap shop/web exists on the member"),
        "{message}"
    );
    assert!(message.contains("kubectl-create"), "{message}");
    assert_eq!(available(cm).0, "Unknown");
    let all = condition(&status.conditions, APPLIED);
    assert_eq!(all.status, "False");
    assert!(
        all.message
            .starts_with("1/2 manifests applied; ConfigMap shop/web: Conflict")
    );
    assert_eq!(live_cm(&c.client, "web").await?.unwrap(), before);

    // A placement of the same hub is someone else too.
    let other = Provenance {
        placement: "shop/other".into(),
        ..p.clone()
    };
    let overwrite = policy(
        ConflictPolicy::Overwrite,
        DriftPolicy::Correct,
        DeletionPolicy::Delete,
    );
    let taken = work(
        vec![namespace(), config_map("web", "ours")],
        Some(overwrite),
    );
    let status = c.member.sync(&taken, None, &p, &status.manifests).await;
    assert_all_applied(&status);
    let after = live_cm(&c.client, "web").await?.unwrap();
    assert_eq!(after["data"]["greeting"], "ours");
    assert_eq!(after["data"]["extra"], "kept");
    assert_eq!(after["metadata"]["labels"]["flotilla.io/hub"], "hub-1");
    let clash = c
        .member
        .sync(
            &work(vec![config_map("web", "other")], None),
            None,
            &other,
            &[],
        )
        .await;
    let (_, reason, message) = applied(&clash.manifests[0]);
    assert_eq!(reason, "Conflict");
    assert!(
        message.contains("placement shop/web of hub hub-1"),
        "{message}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_the_member_lacks_and_missing_namespaces() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let without_crd = work(vec![namespace(), widget(), config_map("web", "hi")], None);
    let status = c.member.sync(&without_crd, None, &p, &[]).await;
    assert_eq!(
        applied(&status.manifests[1]),
        (
            "False",
            "KindNotServed",
            "the cluster does not serve example.com/v1 Widget"
        )
    );
    assert_eq!(applied(&status.manifests[2]).0, "True");
    assert!(live_cm(&c.client, "web").await?.is_some());

    let with_crd = work(
        vec![namespace(), crd(), widget(), config_map("web", "hi")],
        None,
    );
    let status = c.member.sync(&with_crd, None, &p, &status.manifests).await;
    assert_all_applied(&status);
    assert_eq!(available(&status.manifests[1]).1, "Established");
    assert_eq!(status.manifests[2].namespace.as_deref(), Some("shop"));
    let w = live(
        &c.client,
        &resource("example.com/v1", "Widget", "widgets"),
        Some("shop"),
        "w",
    )
    .await?
    .context("the widget")?;
    assert_eq!(w["spec"]["size"], 2);
    assert_eq!(
        w["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "flotilla"
    );

    let elsewhere = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "nowhere"}, "data": {}});
    let invalid = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    let status = c
        .member
        .sync(&work(vec![elsewhere, invalid], None), None, &p, &[])
        .await;
    let (state, reason, message) = applied(&status.manifests[0]);
    assert_eq!((state, reason), ("False", "NamespaceMissing"), "{message}");
    assert!(message.contains("nowhere"), "{message}");
    assert_eq!(applied(&status.manifests[1]).1, "InvalidManifest");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_leaving_a_work_are_deleted_or_orphaned() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    // Someone else's ConfigMap, listed (as a conflict) and then dropped: never deleted.
    c.member
        .sync(&work(vec![namespace()], None), None, &p, &[])
        .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "shop");
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "theirs"}}))?,
        )
        .await?;
    let all = work(
        vec![
            namespace(),
            config_map("a", "1"),
            config_map("b", "2"),
            config_map("theirs", "3"),
        ],
        None,
    );
    let first = c.member.sync(&all, None, &p, &[]).await;
    assert_eq!(applied(&first.manifests[3]).1, "Conflict");

    let fewer = work(vec![namespace(), config_map("a", "1")], None);
    let second = c.member.sync(&fewer, None, &p, &first.manifests).await;
    assert_eq!(second.manifests.len(), 2);
    assert!(live_cm(&c.client, "b").await?.is_none());
    assert!(live_cm(&c.client, "theirs").await?.is_some());
    assert!(live_cm(&c.client, "a").await?.is_some());

    let orphan = policy(
        ConflictPolicy::Abort,
        DriftPolicy::Correct,
        DeletionPolicy::Orphan,
    );
    let only_ns = work(vec![namespace()], Some(orphan));
    c.member.sync(&only_ns, None, &p, &second.manifests).await;
    let a = live_cm(&c.client, "a")
        .await?
        .context("orphaned, not deleted")?;
    assert_eq!(a["data"]["greeting"], "1");
    assert_eq!(a["metadata"]["labels"], json!({"app": "web"}));
    let annotations = a["metadata"]["annotations"].as_object();
    assert!(
        annotations.is_none_or(|a| a.keys().all(|k| !k.starts_with("flotilla.io/"))),
        "{a}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_deletes_or_orphans_what_a_work_applied() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let w = work(
        vec![namespace(), config_map("a", "1"), config_map("b", "2")],
        None,
    );
    let status = c.member.sync(&w, None, &p, &[]).await;
    assert_all_applied(&status);

    // Orphan the ConfigMaps: they stay, without provenance.
    c.member
        .remove(&status.manifests[1..], DeletionPolicy::Orphan, &p)
        .await?;
    for name in ["a", "b"] {
        let cm = live_cm(&c.client, name).await?.context("kept")?;
        assert!(
            cm["metadata"]["labels"]["flotilla.io/hub"].is_null(),
            "{cm}"
        );
    }
    // Re-adopt them (they are no one's now), then delete everything.
    let overwrite = policy(
        ConflictPolicy::Overwrite,
        DriftPolicy::Correct,
        DeletionPolicy::Delete,
    );
    let status = c
        .member
        .sync(
            &work(
                w.manifests.iter().map(Manifest::value).collect(),
                Some(overwrite),
            ),
            None,
            &p,
            &[],
        )
        .await;
    assert_all_applied(&status);
    c.member
        .remove(&status.manifests, DeletionPolicy::Delete, &p)
        .await?;
    assert!(live_cm(&c.client, "a").await?.is_none());
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    let ns = namespaces.get_opt("shop").await?;
    assert!(
        ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the namespace is deleted or terminating"
    );
    // Already gone is fine.
    c.member
        .remove(&status.manifests, DeletionPolicy::Delete, &p)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_created_gives_back_what_was_taken_over() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    // Someone's ConfigMap, there before any placement.
    c.member
        .sync(&work(vec![namespace()], None), None, &p, &[])
        .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "shop");
    let theirs: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "theirs"},
        "data": {"greeting": "theirs"}}))?;
    config_maps.create(&PostParams::default(), &theirs).await?;

    let apply = policy(
        ConflictPolicy::Overwrite,
        DriftPolicy::Correct,
        DeletionPolicy::DeleteCreated,
    );
    let w = work(
        vec![config_map("theirs", "ours"), config_map("made", "ours")],
        Some(apply.clone()),
    );
    let status = c.member.sync(&w, None, &p, &[]).await;
    assert_all_applied(&status);
    let taken = live_cm(&c.client, "theirs").await?.unwrap();
    assert_eq!(
        taken["metadata"]["annotations"]["flotilla.io/adopted"],
        "true"
    );
    let made = live_cm(&c.client, "made").await?.unwrap();
    assert!(
        made["metadata"]["annotations"]["flotilla.io/adopted"].is_null(),
        "{made}"
    );
    // The mark stays through later applies (a change of the manifest).
    let changed = work(
        vec![
            config_map("theirs", "ours, again"),
            config_map("made", "ours"),
        ],
        Some(apply),
    );
    let status = c.member.sync(&changed, None, &p, &status.manifests).await;
    assert_all_applied(&status);
    let taken = live_cm(&c.client, "theirs").await?.unwrap();
    assert_eq!(taken["data"]["greeting"], "ours, again");
    assert_eq!(
        taken["metadata"]["annotations"]["flotilla.io/adopted"],
        "true"
    );

    c.member
        .remove(&status.manifests, DeletionPolicy::DeleteCreated, &p)
        .await?;
    // What it made is deleted; what it took over is given back, without provenance.
    assert!(live_cm(&c.client, "made").await?.is_none());
    let given_back = live_cm(&c.client, "theirs").await?.unwrap();
    assert_eq!(given_back["data"]["greeting"], "ours, again");
    let annotations = &given_back["metadata"]["annotations"];
    assert!(annotations["flotilla.io/adopted"].is_null(), "{given_back}");
    assert!(
        annotations["flotilla.io/placement"].is_null(),
        "{given_back}"
    );
    assert!(
        given_back["metadata"]["labels"]["flotilla.io/hub"].is_null(),
        "{given_back}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reports_version_capacity_and_properties() -> anyhow::Result<()> {
    let c = cluster().await?;
    let health = c.member.probe().await?;
    assert!(health.kubernetes_version.starts_with('v'), "{health:?}");
    assert!(health.allocatable.is_empty());
    assert!(
        health.properties.is_empty(),
        "ClusterProperty is not served yet"
    );

    let nodes: Api<Node> = Api::all(c.client.clone());
    for (name, cpu, memory) in [("n1", "4", "16Gi"), ("n2", "3500m", "8Gi")] {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
        let status =
            json!({"status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
    }
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusterproperties.about.k8s.io"},
        "spec": {"group": "about.k8s.io", "scope": "Cluster",
            "names": {"plural": "clusterproperties", "singular": "clusterproperty", "kind": "ClusterProperty"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"value": {"type": "string"}}}}}}}]}});
    let crds = resource(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let properties = resource(
        "about.k8s.io/v1alpha1",
        "ClusterProperty",
        "clusterproperties",
    );
    Api::<DynamicObject>::all_with(c.client.clone(), &crds)
        .create(&PostParams::default(), &serde_json::from_value(crd)?)
        .await?;
    let property = json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "member-1"}});
    Api::<DynamicObject>::all_with(c.client.clone(), &properties)
        .create(&PostParams::default(), &serde_json::from_value(property)?)
        .await?;

    // A probe that may reuse its last listing (none yet: the first probe listed) finds
    // neither the Nodes nor the property; a full one finds them, and then a reusing one
    // does too.
    let within = c.member.probe_within(Duration::from_secs(3600)).await?;
    assert!(within.kubernetes_version.starts_with('v'), "{within:?}");
    assert!(within.allocatable.is_empty() && within.properties.is_empty());
    let health = c.member.probe().await?;
    assert_eq!(
        c.member.probe_within(Duration::from_secs(3600)).await?,
        health
    );
    let allocatable: Vec<(&str, &str)> = health
        .allocatable
        .iter()
        .map(|(k, v)| (k.as_str(), v.0.as_str()))
        .collect();
    assert_eq!(
        allocatable,
        [("cpu", "7500m"), ("memory", "24Gi"), ("pods", "220")]
    );
    assert_eq!(
        health.properties.into_iter().collect::<Vec<_>>(),
        [(
            "cluster.clusterset.k8s.io".to_owned(),
            "member-1".to_owned()
        )]
    );

    // A member that does not answer.
    let config = kube::Config::new("http://127.0.0.1:9".parse()?);
    let nowhere = Member::new(kube::Client::try_from(config)?);
    let e = nowhere.probe().await.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot GET /version on the member"),
        "{e}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_yield_after_a_hand_edit() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let w = work(vec![namespace(), config_map("web", "hi")], None);
    c.member.sync(&w, None, &p, &[]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "shop");
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "unrelated"}}))?,
        )
        .await?;

    let kinds = [("v1".to_owned(), "ConfigMap".to_owned())];
    let mut changes = Box::pin(c.member.changes(&kinds, &p));
    let wait = Duration::from_secs(10);
    // The initial list.
    tokio::time::timeout(wait, changes.next())
        .await
        .context("no tick after the initial list")?;
    // Not delivered by this hub: no tick.
    let edit = Patch::Merge(json!({"data": {"greeting": "edited"}}));
    config_maps.patch("unrelated", &hand(), &edit).await?;
    let quiet = tokio::time::timeout(Duration::from_millis(500), changes.next()).await;
    assert!(quiet.is_err(), "a tick for an object of no placement");
    // A hand edit of ours.
    config_maps.patch("web", &hand(), &edit).await?;
    tokio::time::timeout(wait, changes.next())
        .await
        .context("no tick after a hand edit")?
        .context("the stream ended")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_changes_are_watched_a_sync_in_line_sends_no_request() -> anyhow::Result<()> {
    let (c, requests) = counted_cluster().await?;
    let p = provenance();
    let w = work(vec![namespace(), config_map("web", "hi")], None);
    let first = c.member.sync(&w, Some(1), &p, &[]).await;
    assert_all_applied(&first);

    let kinds = [
        ("v1".to_owned(), "Namespace".to_owned()),
        ("v1".to_owned(), "ConfigMap".to_owned()),
    ];
    let mut changes = Box::pin(c.member.changes(&kinds, &p));
    let wait = Duration::from_secs(10);
    for _ in &kinds {
        let listed = tokio::time::timeout(wait, changes.next()).await?;
        assert_eq!(listed, Some(Change::Listed));
    }
    // In line: read from the watch, nothing sent, the same status.
    requests.store(0, Ordering::SeqCst);
    let again = c.member.sync(&w, Some(1), &p, &first.manifests).await;
    assert_eq!(again, first);
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "requests for a sync in line"
    );

    // A hand edit names the Work; the next sync corrects it with one request (the apply).
    let config_maps: Api<ConfigMap> = Api::namespaced(c.client.clone(), "shop");
    let edit = Patch::Merge(json!({"data": {"greeting": "edited"}}));
    config_maps.patch("web", &hand(), &edit).await?;
    let change = tokio::time::timeout(wait, changes.next()).await?;
    assert_eq!(
        change,
        Some(Change::Object {
            work: Some("web".into())
        })
    );
    requests.store(0, Ordering::SeqCst);
    let corrected = c.member.sync(&w, Some(1), &p, &again.manifests).await;
    assert_all_applied(&corrected);
    assert_eq!(requests.load(Ordering::SeqCst), 1, "one apply");
    let live = config_maps.get("web").await?;
    assert_eq!(live.data.unwrap_or_default()["greeting"], "hi");

    // Without the watch, the member is asked again.
    drop(changes);
    requests.store(0, Ordering::SeqCst);
    c.member.sync(&w, Some(1), &p, &corrected.manifests).await;
    assert!(requests.load(Ordering::SeqCst) >= 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_wait_for_a_kind_the_member_serves_later() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let kinds = [("example.com/v1".to_owned(), "Widget".to_owned())];
    let mut changes = Box::pin(c.member.changes(&kinds, &p));
    let early = tokio::time::timeout(Duration::from_millis(300), changes.next()).await;
    assert!(early.is_err(), "a tick for a kind not served");
    let w = work(vec![namespace(), crd(), widget()], None);
    let status = c.member.sync(&w, None, &p, &[]).await;
    assert_all_applied(&status);
    // The kind is found on a later look (backoff from 1s), listed, then edits tick.
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .context("no tick once the kind is served")?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        c.client.clone(),
        "shop",
        &resource("example.com/v1", "Widget", "widgets"),
    );
    widgets
        .patch("w", &hand(), &Patch::Merge(json!({"spec": {"size": 9}})))
        .await?;
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .context("no tick after a hand edit")?;
    // And the next sync puts the hub's size back.
    c.member.sync(&w, None, &p, &status.manifests).await;
    let w = widgets.get("w").await?;
    assert_eq!(w.data["spec"]["size"], 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_namespace_is_never_claimed_nor_deleted() -> anyhow::Result<()> {
    let cluster = cluster().await?;
    let shared = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "default", "annotations": {"flotilla.io/shared": "true"}}});
    let other = Provenance {
        placement: "shop/api".into(),
        work: "api".into(),
        ..provenance()
    };
    // `default` exists already and two placements bring it: neither conflicts.
    for who in [provenance(), other.clone()] {
        let status = cluster
            .member
            .sync(&work(vec![shared.clone()], None), Some(1), &who, &[])
            .await;
        let applied = status.manifests[0]
            .conditions
            .iter()
            .find(|c| c.type_ == APPLIED)
            .context("Applied")?;
        assert_eq!(applied.status, "True", "{applied:?}");
    }
    let live = Api::<Namespace>::all(cluster.client.clone())
        .get("default")
        .await?;
    let labels = live.metadata.labels.unwrap_or_default();
    assert!(
        !labels.contains_key("flotilla.io/hub"),
        "not claimed: {labels:?}"
    );
    // Letting it go leaves it in place, whatever the deletion policy.
    let applied = cluster
        .member
        .sync(
            &work(vec![shared.clone()], None),
            Some(1),
            &provenance(),
            &[],
        )
        .await;
    cluster
        .member
        .remove(&applied.manifests, DeletionPolicy::Delete, &provenance())
        .await?;
    let left = Api::<Namespace>::all(cluster.client.clone())
        .get_opt("default")
        .await?;
    assert!(left.is_some_and(|ns| ns.metadata.deletion_timestamp.is_none()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_namespace_seen_lately_is_not_asked_for_until_an_apply_finds_it_missing()
-> anyhow::Result<()> {
    let (c, requests) = counted_cluster().await?;
    let p = provenance();
    let shared = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "annotations": {"flotilla.io/shared": "true"}}});
    let w = work(vec![shared, config_map("web", "hi")], None);
    let first = c.member.sync(&w, Some(1), &p, &[]).await;
    assert_all_applied(&first);
    // As the hub watches: the kinds it delivers, not the shared ones.
    let kinds = [("v1".to_owned(), "ConfigMap".to_owned())];
    let mut changes = Box::pin(c.member.changes(&kinds, &p));
    let wait = Duration::from_secs(10);
    let listed = tokio::time::timeout(wait, changes.next()).await?;
    assert_eq!(listed, Some(Change::Listed));
    requests.store(0, Ordering::SeqCst);
    let again = c.member.sync(&w, Some(1), &p, &first.manifests).await;
    assert_eq!(again, first);
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "the shared namespace was asked for again"
    );

    // Someone deletes the namespace: the apply into it fails once, then it is made again.
    Api::<Namespace>::all(c.client.clone())
        .delete("shop", &DeleteParams::default())
        .await?;
    let deadline = std::time::Instant::now() + wait;
    while Api::<Namespace>::all(c.client.clone())
        .get_opt("shop")
        .await?
        .is_some()
    {
        anyhow::ensure!(std::time::Instant::now() < deadline, "shop never went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The config map went with it: its watch says so.
    let gone = tokio::time::timeout(wait, changes.next()).await?;
    assert_eq!(
        gone,
        Some(Change::Object {
            work: Some("web".into())
        })
    );
    let mut status = again;
    for _ in 0..3 {
        status = c.member.sync(&w, Some(1), &p, &status.manifests).await;
        if condition(&status.conditions, APPLIED).status == "True" {
            break;
        }
    }
    assert_all_applied(&status);
    assert!(
        Api::<Namespace>::all(c.client.clone())
            .get_opt("shop")
            .await?
            .is_some()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_namespace_deleted_on_the_member_is_created_again_by_the_next_sync()
-> anyhow::Result<()> {
    let c = cluster().await?;
    let p = provenance();
    let shared = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "annotations": {"flotilla.io/shared": "true"}}});
    let spec = work(vec![shared, config_map("web", "hi")], None);
    let first = c.member.sync(&spec, Some(1), &p, &[]).await;
    assert_all_applied(&first);

    // Someone deletes the namespace on the member, and its ConfigMap with it. The hub
    // saw the namespace moments ago and takes it to exist.
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    namespaces.delete("shop", &DeleteParams::default()).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while namespaces.get_opt("shop").await?.is_some() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the namespace is still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The next sync finds it missing, creates it and applies what goes in it.
    let healed = c.member.sync(&spec, Some(1), &p, &first.manifests).await;
    assert_all_applied(&healed);
    assert!(namespaces.get_opt("shop").await?.is_some());
    assert!(live_cm(&c.client, "web").await?.is_some());
    Ok(())
}
