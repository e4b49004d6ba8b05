//! Many writers and many watchers through the API over a real SQLite store: every watcher
//! sees every change of its selection exactly once, in revision order, from one store watch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::Client;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use futures_util::StreamExt;
use serde_json::{Value, json};

const NAMESPACES: usize = 4;
const WRITERS: usize = 16;
const OBJECTS_PER_WRITER: usize = 25;
const UPDATES: usize = 3;

/// A watch as the client sees it: every event line, until the sentinel arrives.
async fn watch_until_sentinel(client: Client, path: String, query: String) -> Vec<Value> {
    let response = client
        .request(Method::GET, path)
        .query(&query)
        .response()
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    while let Some(chunk) = body.next().await {
        buffer.extend_from_slice(&chunk.unwrap());
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            let done = event["object"]["metadata"]["name"] == "zz-sentinel";
            events.push(event);
            if done {
                return events;
            }
        }
    }
    panic!(
        "the watch ended before the sentinel: {} events",
        events.len()
    );
}

fn configmap(namespace: &str, name: &str, group: &str, n: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"group": group}},
        "data": {"n": n.to_string()}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_every_change_of_its_selection_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db")).await.unwrap());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1:6443");
    api.bootstrap().await.unwrap();
    let client = Client::new(api.clone());
    for i in 0..NAMESPACES {
        let reply = client
            .request(Method::POST, "/api/v1/namespaces")
            .json(&json!({"metadata": {"name": format!("ns{i}")}}))
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::CREATED);
    }
    let list = client
        .request(Method::GET, "/api/v1/configmaps")
        .send()
        .await
        .json();
    let start = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // Watchers: all namespaces, one namespace, a label selector, and both.
    let selections: Vec<(String, String)> = (0..40)
        .map(|i| match i % 4 {
            0 => ("/api/v1/configmaps".to_owned(), String::new()),
            1 => (
                "/api/v1/namespaces/ns0/configmaps".to_owned(),
                String::new(),
            ),
            2 => (
                "/api/v1/configmaps".to_owned(),
                "&labelSelector=group%3Deven".to_owned(),
            ),
            _ => (
                "/api/v1/namespaces/ns0/configmaps".to_owned(),
                "&labelSelector=group%3Deven".to_owned(),
            ),
        })
        .collect();
    let mut watchers = Vec::new();
    for (path, selector) in &selections {
        let query =
            format!("watch=true&resourceVersion={start}&allowWatchBookmarks=true{selector}");
        watchers.push(tokio::spawn(watch_until_sentinel(
            client.clone(),
            path.clone(),
            query,
        )));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Writers: create, update a few times (the label flips between even and odd, so
    // objects enter and leave the label selection), delete every other object.
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            let mut writes = 0;
            for o in 0..OBJECTS_PER_WRITER {
                let namespace = format!("ns{}", (w + o) % NAMESPACES);
                let name = format!("w{w}-o{o}");
                let collection = format!("/api/v1/namespaces/{namespace}/configmaps");
                let reply = client
                    .request(Method::POST, &collection)
                    .json(&configmap(&namespace, &name, "even", 0))
                    .send()
                    .await;
                assert_eq!(reply.status, StatusCode::CREATED);
                writes += 1;
                for u in 1..=UPDATES {
                    let group = if u % 2 == 0 { "even" } else { "odd" };
                    let reply = client
                        .request(Method::PUT, format!("{collection}/{name}"))
                        .json(&configmap(&namespace, &name, group, u))
                        .send()
                        .await;
                    assert_eq!(reply.status, StatusCode::OK);
                    writes += 1;
                }
                if o % 2 == 0 {
                    let reply = client
                        .request(Method::DELETE, format!("{collection}/{name}"))
                        .send()
                        .await;
                    assert_eq!(reply.status, StatusCode::OK);
                    writes += 1;
                }
            }
            writes
        }));
    }
    let mut writes = 0;
    for writer in writers {
        writes += writer.await.unwrap();
    }
    // The sentinel is seen by every selection.
    let reply = client
        .request(Method::POST, "/api/v1/namespaces/ns0/configmaps")
        .json(&configmap("ns0", "zz-sentinel", "even", 0))
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    writes += 1;
    assert_eq!(
        writes,
        WRITERS * OBJECTS_PER_WRITER * (1 + UPDATES) + WRITERS * OBJECTS_PER_WRITER.div_ceil(2) + 1
    );

    for ((path, selector), watcher) in selections.iter().zip(watchers) {
        let events = tokio::time::timeout(Duration::from_secs(60), watcher)
            .await
            .expect("the watcher finished")
            .unwrap();
        let mut last = start.parse::<u64>().unwrap();
        let mut state: BTreeMap<String, Value> = BTreeMap::new();
        let mut changes = 0;
        for event in &events {
            let rv: u64 = event["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            if event["type"] == "BOOKMARK" {
                assert!(rv >= last, "a bookmark went back: {rv} < {last}");
                last = rv;
                continue;
            }
            assert!(rv > last, "{path}{selector}: revision {rv} after {last}");
            last = rv;
            changes += 1;
            let key = format!(
                "{}/{}",
                event["object"]["metadata"]["namespace"].as_str().unwrap(),
                event["object"]["metadata"]["name"].as_str().unwrap()
            );
            match event["type"].as_str().unwrap() {
                "ADDED" => assert!(
                    state.insert(key, event["object"].clone()).is_none(),
                    "ADDED twice"
                ),
                "MODIFIED" => assert!(
                    state.insert(key, event["object"].clone()).is_some(),
                    "MODIFIED unseen"
                ),
                "DELETED" => assert!(state.remove(&key).is_some(), "DELETED unseen"),
                other => panic!("unexpected event {other}"),
            }
        }
        if selector.is_empty() && path == "/api/v1/configmaps" {
            assert_eq!(
                changes, writes,
                "an all-namespaces watcher sees every write exactly once"
            );
        }
        // Replaying the events gives what a LIST of the same selection returns.
        let list_query = selector.trim_start_matches('&').to_owned();
        let list = client
            .request(Method::GET, path.as_str())
            .query(&list_query)
            .send()
            .await
            .json();
        let listed: BTreeMap<String, Value> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap(),
                        o["metadata"]["name"].as_str().unwrap()
                    ),
                    o.clone(),
                )
            })
            .collect();
        assert_eq!(state, listed, "{path}{selector}");
    }
    assert_eq!(
        api.watch_cache().store_watches(),
        1,
        "one store watch served every watcher"
    );
}
