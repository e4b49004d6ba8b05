//! Garbage collection across scopes: a cluster-scoped owner's namespaced dependents go
//! with it, wherever they are; objects that merely mention its uid stay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Method;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::Client;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use serde_json::{Value, json};

async fn create(client: &Client, path: &str, body: Value) -> Value {
    let reply = client.request(Method::POST, path).json(&body).send().await;
    let object = reply.json();
    assert_eq!(reply.code(), 201, "{path}: {object}");
    object
}

fn configmap(name: &str, owner_uid: Option<&str>, data: Value) -> Value {
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": data});
    if let Some(uid) = owner_uid {
        object["metadata"]["ownerReferences"] = json!([{"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "name": "owner", "uid": uid}]);
    }
    object
}

#[tokio::test]
async fn a_cluster_scoped_owner_takes_its_dependents_in_every_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db")).await.unwrap());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1:6443");
    api.bootstrap().await.unwrap();
    let client = Client::new(api);
    for ns in ["a", "b"] {
        create(
            &client,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    let owner = create(
        &client,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "owner"}, "rules": []}),
    )
    .await;
    let uid = owner["metadata"]["uid"].as_str().unwrap();
    let cms = |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps");
    create(&client, &cms("a"), configmap("dep-1", Some(uid), json!({}))).await;
    create(&client, &cms("b"), configmap("dep-2", Some(uid), json!({}))).await;
    create(
        &client,
        &cms("a"),
        configmap("other", Some("someone-else"), json!({})),
    )
    .await;
    // Names the owner's uid in its data, not among its owners.
    create(
        &client,
        &cms("b"),
        configmap("mentions", None, json!({"owner": uid})),
    )
    .await;

    let deleted = client
        .request(
            Method::DELETE,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/owner",
        )
        .send()
        .await;
    assert_eq!(deleted.code(), 200, "{}", deleted.json());

    let deadline = Instant::now() + Duration::from_secs(10);
    for (ns, name) in [("a", "dep-1"), ("b", "dep-2")] {
        loop {
            let path = format!("{}/{name}", cms(ns));
            let reply = client.request(Method::GET, &path).send().await;
            if reply.code() == 404 {
                break;
            }
            assert!(Instant::now() < deadline, "{ns}/{name} is still there");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for (ns, name) in [("a", "other"), ("b", "mentions")] {
        let path = format!("{}/{name}", cms(ns));
        let reply = client.request(Method::GET, &path).send().await;
        assert_eq!(
            reply.code(),
            200,
            "{ns}/{name} was collected: {}",
            reply.json()
        );
    }
}
