//! Requests without preconditions never fail because another write raced with them.

use axum::http::Method;
use serde_json::json;

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconditional_replaces_and_deletes_retry_their_races() {
    let server = support::Server::new().await;
    let client = server.client.clone();
    let path = "/api/v1/namespaces/default/configmaps/raced";
    let object = |writer: usize, n: usize| json!({"metadata": {"name": "raced", "finalizers": ["example.com/keep"]}, "data": {format!("w{writer}"): n.to_string()}});
    let created = client
        .request(Method::POST, "/api/v1/namespaces/default/configmaps")
        .json(&object(0, 0))
        .send()
        .await;
    assert_eq!(created.code(), 201);
    // Four writers replace the object at once, without resourceVersions.
    let mut writers = Vec::new();
    for writer in 0..4 {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            for n in 0..100 {
                let reply = client
                    .request(Method::PUT, path)
                    .json(&object(writer, n))
                    .send()
                    .await;
                let status = reply.json();
                assert_eq!(
                    reply.code(),
                    200,
                    "an unconditional replace failed: {status}"
                );
            }
        }));
    }
    // A delete in the middle of it marks the object (it has a finalizer) without a conflict.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let reply = client.request(Method::DELETE, path).send().await;
    let status = reply.json();
    assert_eq!(
        reply.code(),
        200,
        "an unconditional delete failed: {status}"
    );
    for writer in writers {
        writer.await.unwrap();
    }
    let current = client.request(Method::GET, path).send().await.json();
    assert!(
        current["metadata"]["deletionTimestamp"].is_string(),
        "{current}"
    );
    // A delete with a stale precondition is the client's conflict to handle.
    let stale = json!({"preconditions": {"resourceVersion": "1"}});
    let reply = client
        .request(Method::DELETE, path)
        .json(&stale)
        .send()
        .await;
    assert_eq!(reply.code(), 409);
}

/// A delete whose uid precondition still holds goes through however many writes race
/// with it (each try checks the precondition against the object it read), as in
/// Kubernetes' store: an agent releasing an object the member's controllers keep writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_whose_uid_precondition_holds_retries_its_races() {
    let server = support::Server::new().await;
    let client = server.client.clone();
    for round in 0..20 {
        let name = format!("raced-{round}");
        let path = format!("/api/v1/namespaces/default/configmaps/{name}");
        let created = client
            .request(Method::POST, "/api/v1/namespaces/default/configmaps")
            .json(&json!({"metadata": {"name": name}}))
            .send()
            .await;
        assert_eq!(created.code(), 201);
        let uid = created.json()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        // Two writers replace it without resourceVersions until it is gone.
        let writers: Vec<_> = (0..2)
            .map(|writer| {
                let (client, path, name) = (client.clone(), path.clone(), name.clone());
                tokio::spawn(async move {
                    let mut written = 0;
                    for n in 0.. {
                        let reply = client
                            .request(Method::PUT, &path)
                            .json(&json!({"metadata": {"name": name}, "data": {format!("w{writer}"): n.to_string()}}))
                            .send()
                            .await;
                        match reply.code() {
                            200 => written += 1,
                            404 => return written,
                            code => panic!("a replace failed with {code}: {}", reply.json()),
                        }
                    }
                    written
                })
            })
            .collect();
        // The delete waits for the writers' first replaces, so that it races with them.
        let mut seen = 0;
        while seen < 4 {
            let current = client.request(Method::GET, &path).send().await.json();
            seen = current["data"].as_object().map_or(0, |d| {
                d.values()
                    .filter_map(|v| v.as_str()?.parse::<u32>().ok())
                    .sum()
            });
            tokio::task::yield_now().await;
        }
        let reply = client
            .request(Method::DELETE, &path)
            .json(&json!({"preconditions": {"uid": uid}}))
            .send()
            .await;
        assert_eq!(
            reply.code(),
            200,
            "a delete whose uid precondition holds failed: {}",
            reply.json()
        );
        let mut written = 0;
        for writer in writers {
            written += writer.await.unwrap();
        }
        assert!(written >= 4, "{written} replaces raced with the delete");
    }
}
