//! Requests without preconditions never fail because another write raced with them.

use std::sync::Arc;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use serde_json::{Value, json};

async fn call(api: &Api, method: Method, path: &str, body: Value) -> (u16, Value) {
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let response = api.serve(method, path, None, &HeaderMap::new(), body).await;
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconditional_replaces_and_deletes_retry_their_races() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db")).await.unwrap());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1:6443");
    api.bootstrap().await.unwrap();
    let path = "/api/v1/namespaces/default/configmaps/raced";
    let object = |writer: usize, n: usize| json!({"metadata": {"name": "raced", "finalizers": ["example.com/keep"]}, "data": {format!("w{writer}"): n.to_string()}});
    let (code, _) = call(
        &api,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        object(0, 0),
    )
    .await;
    assert_eq!(code, 201);
    // Four writers replace the object at once, without resourceVersions.
    let mut writers = Vec::new();
    for writer in 0..4 {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            for n in 0..100 {
                let (code, status) = call(&api, Method::PUT, path, object(writer, n)).await;
                assert_eq!(code, 200, "an unconditional replace failed: {status}");
            }
        }));
    }
    // A delete in the middle of it marks the object (it has a finalizer) without a conflict.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let (code, status) = call(&api, Method::DELETE, path, Value::Null).await;
    assert_eq!(code, 200, "an unconditional delete failed: {status}");
    for writer in writers {
        writer.await.unwrap();
    }
    let (_, current) = call(&api, Method::GET, path, Value::Null).await;
    assert!(
        current["metadata"]["deletionTimestamp"].is_string(),
        "{current}"
    );
    // A delete with a stale precondition is the client's conflict to handle.
    let stale = json!({"preconditions": {"resourceVersion": "1"}});
    let (code, _) = call(&api, Method::DELETE, path, stale).await;
    assert_eq!(code, 409);
}
