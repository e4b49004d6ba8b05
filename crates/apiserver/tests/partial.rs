//! Metadata-only requests (`Accept: …;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`, as
//! client-go's metadata informers and kube-rs's `Api<PartialObjectMeta<K>>` send them): a
//! GET, a LIST and a watch answer with each object's metadata alone.

use std::sync::Arc;

use axum::http::Method;
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::Client;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use serde_json::{Value, json};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "web"}}, "data": {"secret-ish": "x"}})
}

/// Checks `object` is the metadata-only form of ConfigMap `name`.
fn assert_partial(object: &Value, name: &str) {
    assert_eq!(object["kind"], "PartialObjectMetadata", "{object}");
    assert_eq!(object["apiVersion"], "meta.k8s.io/v1", "{object}");
    assert_eq!(object["metadata"]["name"], name, "{object}");
    assert_eq!(object["metadata"]["labels"]["app"], "web", "{object}");
    assert!(
        object["metadata"]["resourceVersion"].is_string(),
        "{object}"
    );
    assert!(object.get("data").is_none(), "{object}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_requests_get_the_metadata_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db")).await.unwrap());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1:6443");
    api.bootstrap().await.unwrap();
    let client = Client::new(api);
    let json = "application/json";
    let create = |name: &str| {
        client
            .request(Method::POST, CONFIGMAPS)
            .accept(json)
            .json(&configmap(name))
            .result()
    };
    let get = |name: &str, accept: &str| {
        client
            .request(Method::GET, format!("{CONFIGMAPS}/{name}"))
            .accept(accept)
            .result()
    };
    for name in ["a", "b"] {
        create(name).await.unwrap();
    }
    let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    let many = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

    assert_partial(&get("a", one).await.unwrap(), "a");

    let list = client
        .request(Method::GET, CONFIGMAPS)
        .accept(many)
        .result()
        .await
        .unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList", "{list}");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1", "{list}");
    let revision = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    assert_partial(&items[0], "a");
    assert_partial(&items[1], "b");

    // A watch: the initial state, and a change after it, both metadata alone.
    let initial = client
        .request(Method::GET, CONFIGMAPS)
        .query("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=3")
        .accept(one)
        .response()
        .await;
    let after = client
        .request(Method::GET, CONFIGMAPS)
        .query(&format!(
            "watch=1&resourceVersion={revision}&timeoutSeconds=3"
        ))
        .accept(one)
        .response()
        .await;
    // Both streams are read while the change arrives, well before their timeouts.
    let (initial, after, created) = tokio::join!(
        axum::body::to_bytes(initial.into_body(), usize::MAX),
        axum::body::to_bytes(after.into_body(), usize::MAX),
        create("c"),
    );
    created.unwrap();
    let events = |body: Bytes| -> Vec<Value> {
        body.split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).unwrap())
            .collect()
    };
    let initial = events(initial.unwrap());
    // The two objects, the end of the initial events, then the third one.
    let kinds: Vec<(&str, &str)> = initial
        .iter()
        .map(|e| {
            let name = e["object"]["metadata"]["name"].as_str().unwrap_or("");
            (e["type"].as_str().unwrap(), name)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("BOOKMARK", ""),
            ("ADDED", "c")
        ],
        "{initial:?}"
    );
    assert_partial(&initial[0]["object"], "a");
    assert_partial(&initial[3]["object"], "c");
    let after = events(after.unwrap());
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["type"], "ADDED");
    assert_partial(&after[0]["object"], "c");

    // Without the asking, whole objects, as before.
    let whole = get("a", json).await.unwrap();
    assert_eq!(whole["kind"], "ConfigMap");
    assert_eq!(whole["data"]["secret-ish"], "x");
}
