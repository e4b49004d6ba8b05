//! The simulator against a real in-process API over the in-memory store, in paused time:
//! members set up (twice: nothing is duplicated), workloads in several logical clusters
//! brought to ready through the status subresource.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::Client;
use flotilla_sim::{Config, NodeShape, Simulator, provision};
use flotilla_store::Store;
use flotilla_store_memory::MemoryStore;
use serde_json::{Value, json};

fn deployment(name: &str, replicas: u32, cpu: &str, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "c", "image": image, "resources": {"requests": {"cpu": cpu}}}]}}}})
}

/// Polls `path` until `done` holds for it (or fails after a minute of paused time).
async fn wait_for(client: &Client, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let reply = client.request(Method::GET, path).send().await;
        let object = reply.json();
        if reply.code() == 200 && done(&object) {
            return object;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never got there: {object}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn members_are_set_up_and_their_workloads_get_ready() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let api = Api::new(
        store.clone(),
        Arc::new(Registry::builtin()),
        "127.0.0.1:7443",
    );
    api.bootstrap().await.unwrap();
    let members = ["m1".to_owned(), "m2".to_owned()];
    let shape = NodeShape {
        count: 2,
        cpu: "2".into(),
        memory: "8Gi".into(),
        pods: 10,
    };
    provision(&api, &members, &shape).await.unwrap();
    provision(&api, &members, &shape).await.unwrap();
    let client = Client::new(api.clone());

    let reply = client
        .request(Method::GET, "/clusters/m2/api/v1/nodes")
        .send()
        .await;
    assert_eq!(reply.code(), 200);
    let nodes = reply.json();
    let names: Vec<&str> = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["m2-node-1", "m2-node-2"]);
    assert_eq!(nodes["items"][0]["status"]["allocatable"]["cpu"], "2");
    let reply = client
        .request(
            Method::GET,
            "/clusters/m1/apis/about.k8s.io/v1alpha1/clusterproperties/cluster.clusterset.k8s.io",
        )
        .send()
        .await;
    assert_eq!(
        (reply.code(), &reply.json()["spec"]["value"]),
        (200, &json!("m1"))
    );

    let config = Config {
        ready_delay: Duration::from_millis(500),
        fail_images: None,
    };
    let simulator = tokio::spawn(Simulator::new(api.clone(), store.clone(), config).run());

    // 4 CPUs per member: in m2, 1 of the 5 one-CPU replicas of big fits after web's 3.
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    for (cluster, name, replicas) in [("m1", "web", 3), ("m2", "web", 3), ("m2", "big", 5)] {
        let path = format!("/clusters/{cluster}{deployments}");
        let body = deployment(name, replicas, "1", "nginx");
        let reply = client.request(Method::POST, &path).json(&body).send().await;
        assert_eq!(reply.code(), 201);
    }
    let ready = |n: u64| move |d: &Value| d["status"]["readyReplicas"] == n;
    let web = wait_for(&client, &format!("/clusters/m1{deployments}/web"), ready(3)).await;
    assert_eq!(web["status"]["observedGeneration"], 1);
    let managers: Vec<(&str, &str)> = web["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap(),
                m["subresource"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        managers.contains(&("flotilla-sim", "status")),
        "{managers:?}"
    );
    let big = wait_for(&client, &format!("/clusters/m2{deployments}/big"), |d| {
        d["status"]["conditions"][0]["reason"] == "InsufficientCapacity"
    })
    .await;
    assert_eq!(big["status"]["readyReplicas"], 1);

    // Deleting the first frees its room for the second.
    let path = format!("/clusters/m2{deployments}/web");
    let reply = client.request(Method::DELETE, &path).send().await;
    assert_eq!(reply.code(), 200);
    wait_for(&client, &format!("/clusters/m2{deployments}/big"), ready(4)).await;

    // The root cluster is the simulator's own: nothing there is simulated.
    let body = deployment("root-web", 1, "1", "nginx");
    let reply = client
        .request(Method::POST, deployments)
        .json(&body)
        .send()
        .await;
    assert_eq!(reply.code(), 201);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let path = format!("{deployments}/root-web");
    let root = client.request(Method::GET, &path).send().await.json();
    assert!(root["status"].is_null(), "{root}");
    simulator.abort();
}
