//! Garbage collection across scopes: a cluster-scoped owner's namespaced dependents go
//! with it, wherever they are; objects that merely mention its uid stay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, Method, header};
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use serde_json::{Value, json};

async fn call(api: &Api, method: Method, path: &str, body: Value) -> (u16, Value) {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let response = api.serve(method, path, None, &headers, body).await;
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn create(api: &Api, path: &str, body: Value) -> Value {
    let (code, object) = call(api, Method::POST, path, body).await;
    assert_eq!(code, 201, "{path}: {object}");
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
    for ns in ["a", "b"] {
        create(
            &api,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    let owner = create(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "owner"}, "rules": []}),
    )
    .await;
    let uid = owner["metadata"]["uid"].as_str().unwrap();
    let cms = |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps");
    create(&api, &cms("a"), configmap("dep-1", Some(uid), json!({}))).await;
    create(&api, &cms("b"), configmap("dep-2", Some(uid), json!({}))).await;
    create(
        &api,
        &cms("a"),
        configmap("other", Some("someone-else"), json!({})),
    )
    .await;
    // Names the owner's uid in its data, not among its owners.
    create(
        &api,
        &cms("b"),
        configmap("mentions", None, json!({"owner": uid})),
    )
    .await;

    let (code, deleted) = call(
        &api,
        Method::DELETE,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/owner",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{deleted}");

    let deadline = Instant::now() + Duration::from_secs(10);
    for (ns, name) in [("a", "dep-1"), ("b", "dep-2")] {
        loop {
            let (code, _) = call(
                &api,
                Method::GET,
                &format!("{}/{name}", cms(ns)),
                Value::Null,
            )
            .await;
            if code == 404 {
                break;
            }
            assert!(Instant::now() < deadline, "{ns}/{name} is still there");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for (ns, name) in [("a", "other"), ("b", "mentions")] {
        let (code, object) = call(
            &api,
            Method::GET,
            &format!("{}/{name}", cms(ns)),
            Value::Null,
        )
        .await;
        assert_eq!(code, 200, "{ns}/{name} was collected: {object}");
    }
}
