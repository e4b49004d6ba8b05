//! Events are one resource through two versions, `core/v1` and `events.k8s.io/v1`: an
//! Event written through either is read, listed, selected, watched and patched through
//! the other, its fields converted (`message` ↔ `note`, `involvedObject` ↔ `regarding`, …).

use std::sync::Arc;

use axum::http::Method;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::Client;
use flotilla_store::Store;
use flotilla_store_memory::MemoryStore;
use serde_json::{Value, json};

const CORE: &str = "/api/v1/namespaces/shop/events";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

struct Server {
    client: Client,
}

impl Server {
    async fn new() -> Server {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1:6443");
        api.bootstrap().await.unwrap();
        let server = Server {
            client: Client::new(api),
        };
        let reply = server
            .client
            .request(Method::POST, "/api/v1/namespaces")
            .json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
            .send()
            .await;
        assert_eq!(reply.code(), 201);
        server
    }

    /// Sends a request expected to succeed; its JSON reply.
    async fn json(&self, method: Method, path: &str, query: Option<&str>, body: Value) -> Value {
        let reply = self
            .client
            .request(method.clone(), path)
            .query(query.unwrap_or_default())
            .json(&body)
            .send()
            .await;
        let (code, value) = (reply.code(), reply.json());
        assert!(
            (200..300).contains(&code),
            "{method} {path}: {code} {value}"
        );
        value
    }

    async fn get(&self, path: &str, query: Option<&str>) -> Value {
        self.json(Method::GET, path, query, Value::Null).await
    }
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn an_event_written_through_either_group_is_read_through_the_other() {
    let server = Server::new().await;
    // Written as core/v1 (as kubectl and older controllers do).
    server
        .json(
            Method::POST,
            CORE,
            None,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "web.1", "namespace": "shop"},
                "involvedObject": {"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
                                   "name": "web", "namespace": "shop", "uid": "u-1"},
                "reason": "Scheduled", "type": "Normal", "message": "scheduled to 2 clusters",
                "source": {"component": "flotilla-fleet", "host": "hub"},
                "reportingComponent": "flotilla.io/fleet", "reportingInstance": "hub",
                "count": 1, "firstTimestamp": "2026-01-01T00:00:00Z",
                "lastTimestamp": "2026-01-01T00:00:00Z"
            }),
        )
        .await;
    // Written as events.k8s.io/v1 (as kube's Recorder and client-go's new API do).
    server
        .json(
            Method::POST,
            EVENTS,
            None,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "c1.1", "namespace": "shop"},
                "regarding": {"apiVersion": "flotilla.io/v1alpha1", "kind": "Cluster", "name": "c1"},
                "reason": "NotReady", "type": "Warning", "note": "does not answer",
                "action": "Probing", "reportingController": "flotilla.io/fleet",
                "reportingInstance": "hub", "eventTime": "2026-01-01T00:00:00.000000Z",
                "series": {"count": 4, "lastObservedTime": "2026-01-01T00:03:00.000000Z"},
                "deprecatedCount": 4
            }),
        )
        .await;

    // Each read through the other group, converted.
    let seen = server.get(&format!("{EVENTS}/web.1"), None).await;
    assert_eq!(seen["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen["regarding"]["name"], "web");
    assert_eq!(seen["note"], "scheduled to 2 clusters");
    assert_eq!(seen["reportingController"], "flotilla.io/fleet");
    assert_eq!(seen["deprecatedSource"]["component"], "flotilla-fleet");
    assert_eq!(seen["deprecatedCount"], 1);
    assert_eq!(seen["deprecatedFirstTimestamp"], "2026-01-01T00:00:00Z");
    assert!(seen.get("message").is_none() && seen.get("involvedObject").is_none());
    let seen = server.get(&format!("{CORE}/c1.1"), None).await;
    assert_eq!(seen["apiVersion"], "v1");
    assert_eq!(seen["involvedObject"]["kind"], "Cluster");
    assert_eq!(seen["message"], "does not answer");
    assert_eq!(seen["reportingComponent"], "flotilla.io/fleet");
    assert_eq!(seen["count"], 4);
    assert_eq!(seen["series"]["count"], 4);
    assert_eq!(seen["action"], "Probing");

    // Listed in both, each item in the list's version.
    let core = server.get(CORE, None).await;
    assert_eq!(names(&core), ["c1.1", "web.1"]);
    assert!(
        core["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["apiVersion"] == "v1"
                && i["involvedObject"].is_object()
                && i["message"].is_string())
    );
    let events = server.get("/apis/events.k8s.io/v1/events", None).await;
    assert_eq!(names(&events), ["c1.1", "web.1"]);
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["apiVersion"] == "events.k8s.io/v1"
                && i["regarding"].is_object()
                && i["note"].is_string())
    );

    // Field selectors of either version find objects written through the other (kubectl
    // describe selects core/v1 Events by involvedObject; a cluster-scoped object has no
    // namespace there).
    let selected = server
        .get(
            "/api/v1/events",
            Some("fieldSelector=involvedObject.name%3Dc1,involvedObject.kind%3DCluster,involvedObject.namespace%3D"),
        )
        .await;
    assert_eq!(names(&selected), ["c1.1"]);
    let selected = server
        .get(
            EVENTS,
            Some("fieldSelector=regarding.name%3Dweb,regarding.uid%3Du-1,reportingController%3Dflotilla.io/fleet"),
        )
        .await;
    assert_eq!(names(&selected), ["web.1"]);
    let selected = server
        .get(CORE, Some("fieldSelector=reportingComponent%3Dother"))
        .await;
    assert_eq!(names(&selected), Vec::<&str>::new());

    // A patch through one group of an Event written through the other: the fields keep
    // their meaning.
    let merge_patch = |patch: Value| {
        server
            .client
            .request(Method::PATCH, format!("{EVENTS}/web.1"))
            .body(patch.to_string(), "application/merge-patch+json")
            .send()
    };
    let reply = merge_patch(json!({"deprecatedCount": 5, "note": "scheduled to 3 clusters"})).await;
    assert_eq!(reply.code(), 200);
    let reply = merge_patch(json!({"deprecatedCount": 6})).await;
    assert_eq!(reply.code(), 200);
    let seen = server.get(&format!("{CORE}/web.1"), None).await;
    assert_eq!(seen["count"], 6);
    assert_eq!(seen["message"], "scheduled to 3 clusters");
    assert_eq!(seen["involvedObject"]["name"], "web");
    assert!(seen.get("note").is_none() && seen.get("deprecatedCount").is_none());

    // A watch of one group with the other's selector shows the objects converted.
    let reply = server
        .client
        .request(Method::GET, CORE)
        .query("watch=true&timeoutSeconds=1&fieldSelector=involvedObject.name%3Dc1")
        .send()
        .await;
    assert_eq!(reply.code(), 200);
    let lines: Vec<Value> = reply
        .body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(lines[0]["object"]["apiVersion"], "v1");
    assert_eq!(lines[0]["object"]["message"], "does not answer");
}
