//! No poison objects: nothing the server accepts can fail to decode later (one nesting
//! limit, one size limit, both on the object as stored), and a stored object that cannot
//! be decoded anyway (written before the limits, or by something else) is left out of
//! every read with a warning, never failing it, and can always be deleted, so that its
//! namespace and its CRD can finish deleting.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, header};
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::{Client, Request};
use flotilla_apiserver::registry::object::{MAX_DEPTH, MAX_OBJECT_BYTES};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::Server;

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

impl Server {
    /// Sends `request`; its code, warnings and JSON body.
    async fn answer(&self, request: Request<'_>) -> Answer {
        let reply = request.send().await;
        Answer {
            code: reply.code(),
            warnings: reply.warnings(),
            body: reply.json(),
        }
    }

    async fn json(&self, method: Method, path: &str, query: Option<&str>, body: &Value) -> Answer {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        self.answer(
            self.client
                .request(method, path)
                .query(query.unwrap_or_default())
                .body(body, "application/json")
                .accept("application/json"),
        )
        .await
    }

    async fn ok(&self, method: Method, path: &str, body: &Value) -> Value {
        let answer = self.json(method.clone(), path, None, body).await;
        assert!(
            (200..300).contains(&answer.code),
            "{method} {path}: {} {}",
            answer.code,
            answer.body
        );
        answer.body
    }

    /// The stored JSON under `key`.
    async fn stored(&self, key: &str) -> Option<Bytes> {
        self.store
            .get(key.as_bytes(), None)
            .await
            .unwrap()
            .map(|kv| kv.value)
    }

    /// Writes `value` straight into the store under `key`, as something other than the API
    /// (or the API before its limits) would have.
    async fn poison(&self, key: &str, value: &[u8]) {
        self.store
            .create(key.as_bytes(), Bytes::copy_from_slice(value))
            .await
            .unwrap();
    }

    /// Defines `widgets.example.com`: a free-form (`x-kubernetes-preserve-unknown-fields`)
    /// spec and status, with the status subresource.
    async fn define_widgets(&self) {
        let free = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "properties": {"spec": free, "status": free}}}}]
            }
        });
        self.ok(Method::POST, CRDS, &crd).await;
    }
}

/// `{"a": {"a": … 1}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels {
        value = json!({ "a": value });
    }
    value
}

/// How deep `value` nests objects and arrays (the test's own count).
fn depth(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// A refusal: the code, a `Status` with the reason, and a message naming `names`.
fn assert_refused(answer: &Answer, code: u16, reason: &str, names: &[&str]) {
    let status = &answer.body;
    assert_eq!(answer.code, code, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["reason"], reason, "{status}");
    let message = status["message"].as_str().unwrap();
    for name in names {
        assert!(message.contains(name), "{message:?} should name {name:?}");
    }
}

#[tokio::test]
async fn objects_nested_past_the_limit_as_stored_are_refused_on_every_write() {
    let s = Server::new().await;
    s.define_widgets().await;
    // The object: a spec nested 122 levels, accepted before (its managedFields then
    // went past the JSON parser's limit, and every list of the resource failed).
    let answer = s
        .json(Method::POST, WIDGETS, None, &widget("issue", nested(122)))
        .await;
    assert_refused(&answer, 422, "Invalid", &["nested more than 100 levels"]);

    // managedFields nest 5 levels deeper than the object: a spec of 94 (an object of 95)
    // levels is stored exactly 100 deep, one of 95 would be 101.
    let key = "/example.com/widgets/root/default/";
    s.ok(Method::POST, WIDGETS, &widget("deepest", nested(94)))
        .await;
    let stored: Value =
        serde_json::from_slice(&s.stored(&format!("{key}deepest")).await.unwrap()).unwrap();
    assert_eq!(depth(&stored), MAX_DEPTH);
    assert_eq!(depth(&stored["spec"]), 94);
    let answer = s
        .json(Method::POST, WIDGETS, None, &widget("over", nested(95)))
        .await;
    assert_refused(
        &answer,
        422,
        "Invalid",
        &["more than 100 levels", "managedFields"],
    );
    let cause = &answer.body["details"]["causes"][0];
    assert_eq!(cause["field"], "metadata.managedFields", "{cause}");
    assert!(s.stored(&format!("{key}over")).await.is_none());
    // So is a dry run.
    let answer = s
        .json(
            Method::POST,
            WIDGETS,
            Some("dryRun=All"),
            &widget("over", nested(95)),
        )
        .await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);

    // The deepest object is read back whole, in a list and as a Table with the object.
    let list = s.ok(Method::GET, WIDGETS, &Value::Null).await;
    assert_eq!(list["items"][0]["metadata"]["name"], "deepest", "{list}");
    let table = s
        .answer(
            s.client
                .request(Method::GET, WIDGETS)
                .query("includeObject=Object")
                .body(Bytes::new(), "application/json")
                .accept("application/json;as=Table;v=v1;g=meta.k8s.io"),
        )
        .await;
    assert_eq!(table.code, 200, "{}", table.body);
    assert_eq!(
        table.body["rows"][0]["object"]["metadata"]["name"],
        "deepest"
    );

    // Every other write that would store it deeper: replace, merge and JSON patch, apply,
    // the status subresource.
    let path = format!("{WIDGETS}/deepest");
    let mut replaced = s.ok(Method::GET, &path, &Value::Null).await;
    replaced["spec"] = nested(95);
    let answer = s.json(Method::PUT, &path, None, &replaced).await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);
    let patch = json!({"spec": {"b": nested(94)}});
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, &path)
                .body(patch.to_string(), "application/merge-patch+json")
                .accept("application/json"),
        )
        .await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);
    let ops = json!([{"op": "add", "path": "/spec/b", "value": nested(94)}]);
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, &path)
                .body(ops.to_string(), "application/json-patch+json")
                .accept("application/json"),
        )
        .await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, format!("{WIDGETS}/applied"))
                .query("fieldManager=tester")
                .body(
                    Bytes::copy_from_slice(widget("applied", nested(95)).to_string().as_bytes()),
                    "application/apply-patch+yaml",
                )
                .accept("application/json"),
        )
        .await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);
    let mut status = s.ok(Method::GET, &path, &Value::Null).await;
    status["status"] = nested(95);
    let answer = s
        .json(Method::PUT, &format!("{path}/status"), None, &status)
        .await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);
    // Nothing of that was stored; a shallower status is.
    let stored: Value =
        serde_json::from_slice(&s.stored(&format!("{key}deepest")).await.unwrap()).unwrap();
    assert_eq!(depth(&stored), MAX_DEPTH);
    status["status"] = nested(3);
    s.ok(Method::PUT, &format!("{path}/status"), &status).await;

    // Built-in kinds too: a CRD whose schema nests too deep.
    let mut schema = json!({"type": "string"});
    for _ in 0..50 {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]}
    });
    let answer = s.json(Method::POST, CRDS, None, &crd).await;
    assert_refused(&answer, 422, "Invalid", &["100 levels"]);
}

/// Calibrates a write against the size limit: `write(n)` stores an object whose one
/// variable field is `n` bytes long. Returns the `n` that stores exactly
/// `MAX_OBJECT_BYTES`, measured from a first write of `small` bytes stored under `key`.
async fn at_the_limit(s: &Server, key: &str, small: usize) -> usize {
    let stored = s.stored(key).await.unwrap().len();
    small + (MAX_OBJECT_BYTES - stored)
}

#[tokio::test]
async fn objects_over_the_size_limit_as_stored_are_refused_with_413_on_every_write() {
    let s = Server::new().await;
    // Events: a built-in kind with a string field of no bound of its own (a ConfigMap's
    // data is refused over 1 MiB by its validation).
    let configmaps = "/api/v1/namespaces/default/events";
    let key = "/core/events/root/default/";
    let configmap = |name: &str, n: usize| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "x".repeat(n)})
    };
    // Created: names of the same length store the same bytes but for the data.
    s.ok(Method::POST, configmaps, &configmap("c-0", 10)).await;
    let n = at_the_limit(&s, &format!("{key}c-0"), 10).await;
    s.ok(Method::POST, configmaps, &configmap("c-1", n)).await;
    assert_eq!(
        s.stored(&format!("{key}c-1")).await.unwrap().len(),
        MAX_OBJECT_BYTES
    );
    let over = configmap("c-2", n + 1);
    // The body itself is under the limit: it is the object as stored that is over it.
    assert!(over.to_string().len() < MAX_OBJECT_BYTES);
    let answer = s.json(Method::POST, configmaps, None, &over).await;
    let size = (MAX_OBJECT_BYTES + 1).to_string();
    let limit = MAX_OBJECT_BYTES.to_string();
    assert_refused(
        &answer,
        413,
        "RequestEntityTooLarge",
        &[&size, &limit, "c-2"],
    );
    assert!(s.stored(&format!("{key}c-2")).await.is_none());
    let answer = s
        .json(Method::POST, configmaps, Some("dryRun=All"), &over)
        .await;
    assert_refused(&answer, 413, "RequestEntityTooLarge", &[&size]);

    // Replaced: the same length fits (a new generation is as long), one byte more does not.
    let path = format!("{configmaps}/c-1");
    let mut current = s.ok(Method::GET, &path, &Value::Null).await;
    current["message"] = json!("y".repeat(n));
    let current = s.ok(Method::PUT, &path, &current).await;
    assert_eq!(
        s.stored(&format!("{key}c-1")).await.unwrap().len(),
        MAX_OBJECT_BYTES
    );
    let mut longer = current.clone();
    longer["message"] = json!("y".repeat(n + 1));
    let answer = s.json(Method::PUT, &path, None, &longer).await;
    assert_refused(&answer, 413, "RequestEntityTooLarge", &[&size, &limit]);

    // Patched: by merge, JSON and strategic patch.
    for (content_type, patch) in [
        (
            "application/merge-patch+json",
            json!({"message": "z".repeat(n + 1)}),
        ),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/message", "value": "z".repeat(n + 1)}]),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"message": "z".repeat(n + 1)}),
        ),
    ] {
        let answer = s
            .answer(
                s.client
                    .request(Method::PATCH, &path)
                    .body(patch.to_string(), content_type)
                    .accept("application/json"),
            )
            .await;
        assert_refused(&answer, 413, "RequestEntityTooLarge", &[&size]);
    }
    let patch = json!({"message": "z".repeat(n)});
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, &path)
                .body(patch.to_string(), "application/merge-patch+json")
                .accept("application/json"),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);

    // Applied (managedFields of an apply differ from an update's: calibrated apart).
    let server = &s;
    let apply = |name: &str, n: usize| {
        let path = format!("{configmaps}/{name}");
        let body = configmap(name, n).to_string();
        async move {
            server
                .answer(
                    server
                        .client
                        .request(Method::PATCH, &path)
                        .query("fieldManager=tester")
                        .body(
                            Bytes::copy_from_slice(body.as_bytes()),
                            "application/apply-patch+yaml",
                        )
                        .accept("application/json"),
                )
                .await
        }
    };
    assert_eq!(apply("a-0", 10).await.code, 201);
    let m = at_the_limit(&s, &format!("{key}a-0"), 10).await;
    assert_eq!(apply("a-1", m).await.code, 201);
    assert_eq!(
        s.stored(&format!("{key}a-1")).await.unwrap().len(),
        MAX_OBJECT_BYTES
    );
    assert_refused(
        &apply("a-2", m + 1).await,
        413,
        "RequestEntityTooLarge",
        &[&size],
    );
    assert_refused(
        &apply("a-1", m + 1).await,
        413,
        "RequestEntityTooLarge",
        &[&size],
    );

    // The status subresource.
    s.define_widgets().await;
    let wkey = "/example.com/widgets/root/default/w";
    s.ok(Method::POST, WIDGETS, &widget("w", json!({}))).await;
    let status_path = format!("{WIDGETS}/w/status");
    let mut object = s
        .ok(Method::GET, &format!("{WIDGETS}/w"), &Value::Null)
        .await;
    object["status"] = json!({"note": "x".repeat(10)});
    let mut object = s.ok(Method::PUT, &status_path, &object).await;
    let n = at_the_limit(&s, wkey, 10).await;
    object["status"] = json!({"note": "y".repeat(n)});
    let mut object = s.ok(Method::PUT, &status_path, &object).await;
    assert_eq!(s.stored(wkey).await.unwrap().len(), MAX_OBJECT_BYTES);
    object["status"] = json!({"note": "z".repeat(n + 1)});
    let answer = s.json(Method::PUT, &status_path, None, &object).await;
    assert_refused(&answer, 413, "RequestEntityTooLarge", &[&size]);

    // The scale subresource: a Deployment at the limit cannot take a digit more (annotations
    // are bound at 256 KiB: the bytes are in an environment variable).
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let dkey = "/apps/deployments/root/default/";
    let deployment = |name: &str, n: usize| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}},
                    "spec": {"containers": [{"name": "a", "image": "a",
                        "env": [{"name": "K", "value": "x".repeat(n)}]}]}}}})
    };
    s.ok(Method::POST, deployments, &deployment("d-0", 10))
        .await;
    let n = at_the_limit(&s, &format!("{dkey}d-0"), 10).await;
    s.ok(Method::POST, deployments, &deployment("d-1", n)).await;
    assert_eq!(
        s.stored(&format!("{dkey}d-1")).await.unwrap().len(),
        MAX_OBJECT_BYTES
    );
    let scale = json!({"spec": {"replicas": 10}});
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, format!("{deployments}/d-1/scale"))
                .body(scale.to_string(), "application/merge-patch+json")
                .accept("application/json"),
        )
        .await;
    assert_refused(&answer, 413, "RequestEntityTooLarge", &[&size, &limit]);
    // One under the limit takes it.
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, format!("{deployments}/d-0/scale"))
                .body(scale.to_string(), "application/merge-patch+json")
                .accept("application/json"),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
}

/// Watch events, read until `done` says the events so far are enough (or a deadline).
async fn watch_until(
    s: &Server,
    path: &str,
    query: &str,
    mut done: impl FnMut(&[Value]) -> bool,
) -> (Vec<String>, Vec<Value>) {
    let response = s
        .client
        .request(Method::GET, path)
        .query(query)
        .response()
        .await;
    assert_eq!(response.status(), 200);
    let warnings = response
        .headers()
        .get_all(header::WARNING)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let mut body = response.into_body();
    let mut events = Vec::new();
    let mut pending = Vec::new();
    let read = async {
        while !done(&events) {
            let Some(frame) = body.frame().await else {
                break;
            };
            let Ok(data) = frame.unwrap().into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                events.push(serde_json::from_slice(&line).unwrap());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the watch events came");
    (warnings, events)
}

fn names(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            let name = e["object"]["metadata"]["name"].as_str().unwrap_or("");
            (e["type"].as_str().unwrap().to_owned(), name.to_owned())
        })
        .collect()
}

/// Polls until `done` holds (or fails after a deadline).
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_objects_that_cannot_be_decoded_are_left_out_of_reads_and_can_be_deleted() {
    let s = Server::new().await;
    s.ok(
        Method::POST,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "p"}}),
    )
    .await;
    let configmaps = "/api/v1/namespaces/p/configmaps";
    let key = "/core/configmaps/root/p/";
    s.ok(
        Method::POST,
        configmaps,
        &json!({"metadata": {"name": "good", "labels": {"app": "a"}}, "data": {"k": "v"}}),
    )
    .await;
    // Not JSON; and an object past the parser's depth with the fields a raw read looks at
    // first (so that nothing but a check of the whole can tell).
    s.poison(&format!("{key}garbage"), b"not json at all").await;
    let mut deep = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "deep", "namespace": "p", "labels": {"app": "a"}}});
    deep["data"] = nested(130);
    let deep_json = serde_json::to_vec(&deep).unwrap();
    assert!(serde_json::from_slice::<Value>(&deep_json).is_err());
    s.poison(&format!("{key}deep"), &deep_json).await;

    // LIST, with and without selectors, as a Table and as metadata: the good object, and a
    // warning naming each one left out.
    let only_good = |answer: &Answer, items: &str| {
        assert_eq!(answer.code, 200, "{}", answer.body);
        let names: Vec<&str> = answer.body[items]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                i["metadata"]["name"]
                    .as_str()
                    .or(i["object"]["metadata"]["name"].as_str())
                    .unwrap()
            })
            .collect();
        assert_eq!(names, ["good"], "{}", answer.body);
        assert_eq!(answer.warnings.len(), 2, "{:?}", answer.warnings);
        assert!(answer.warnings[0].contains(&format!("{key}deep")));
        assert!(answer.warnings[0].contains("nested more than 124 levels"));
        assert!(answer.warnings[1].contains(&format!("{key}garbage")));
        assert!(answer.warnings[1].contains("cannot be decoded"));
    };
    let get = |query: Option<&'static str>, accept: &'static str| {
        s.answer(
            s.client
                .request(Method::GET, configmaps)
                .query(query.unwrap_or_default())
                .body(Bytes::new(), "")
                .accept(accept),
        )
    };
    let json_accept = "application/json";
    only_good(&get(None, json_accept).await, "items");
    only_good(
        &get(Some("labelSelector=app%3Da"), json_accept).await,
        "items",
    );
    only_good(
        &get(Some("fieldSelector=metadata.namespace%3Dp"), json_accept).await,
        "items",
    );
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    only_good(&get(None, table).await, "rows");
    only_good(&get(Some("labelSelector=app%3Da"), table).await, "rows");
    let metadata = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    only_good(&get(None, metadata).await, "items");
    // Across namespaces too.
    let everywhere = s
        .answer(
            s.client
                .request(Method::GET, "/api/v1/configmaps")
                .body(Bytes::new(), "")
                .accept("application/json"),
        )
        .await;
    assert_eq!(everywhere.code, 200, "{}", everywhere.body);
    assert_eq!(everywhere.warnings.len(), 2, "{:?}", everywhere.warnings);

    // A GET of one: 500, saying so; the others' writes fail the same way, not a delete.
    for name in ["garbage", "deep"] {
        let answer = s
            .answer(
                s.client
                    .request(Method::GET, format!("{configmaps}/{name}"))
                    .body(Bytes::new(), "")
                    .accept("application/json"),
            )
            .await;
        assert_refused(&answer, 500, "InternalError", &["cannot be decoded", name]);
        let patch = json!({"data": {"k": "w"}}).to_string();
        let answer = s
            .answer(
                s.client
                    .request(Method::PATCH, format!("{configmaps}/{name}"))
                    .body(
                        Bytes::copy_from_slice(patch.as_bytes()),
                        "application/merge-patch+json",
                    )
                    .accept("application/json"),
            )
            .await;
        assert_refused(&answer, 500, "InternalError", &["cannot be decoded"]);
    }

    // A watch's initial events leave them out (with the warnings); a change to one later is
    // no event, the next good change is.
    let query =
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let watching = watch_until(&s, configmaps, query, |events| {
        names(events).contains(&("ADDED".into(), "after".into()))
    });
    let writes = async {
        s.poison(&format!("{key}later"), b"{\"cut\": \"short").await;
        s.ok(
            Method::POST,
            configmaps,
            &json!({"metadata": {"name": "after"}}),
        )
        .await;
    };
    let ((warnings, events), ()) = tokio::join!(watching, writes);
    let seen: Vec<(String, String)> = names(&events)
        .into_iter()
        .filter(|(kind, _)| kind != "BOOKMARK")
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED".to_owned(), "good".to_owned()),
            ("ADDED".to_owned(), "after".to_owned())
        ],
        "{events:?}"
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    // So does a watch with a selector, which reads the metadata of such a change alone.
    let list = s.ok(Method::GET, configmaps, &Value::Null).await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let selected = format!("watch=1&resourceVersion={rv}&labelSelector=app%3Da");
    let watching = watch_until(&s, configmaps, &selected, |events| !events.is_empty());
    let writes = async {
        s.poison(&format!("{key}later-2"), &deep_json).await;
        s.ok(
            Method::POST,
            configmaps,
            &json!({"metadata": {"name": "after-2", "labels": {"app": "a"}}}),
        )
        .await;
    };
    let ((_, events), ()) = tokio::join!(watching, writes);
    assert_eq!(
        names(&events),
        [("ADDED".to_owned(), "after-2".to_owned())],
        "{events:?}"
    );

    // DELETE of one works, and removes it.
    let answer = s
        .answer(
            s.client
                .request(Method::DELETE, format!("{configmaps}/garbage"))
                .body(Bytes::new(), "")
                .accept("application/json"),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    assert!(s.stored(&format!("{key}garbage")).await.is_none());
    // deletecollection takes the rest, decodable or not.
    let answer = s
        .answer(
            s.client
                .request(Method::DELETE, configmaps)
                .body(Bytes::new(), "")
                .accept("application/json"),
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    for name in ["good", "deep", "later", "after", "later-2", "after-2"] {
        assert!(s.stored(&format!("{key}{name}")).await.is_none(), "{name}");
    }

    // A namespace holding one finishes deleting.
    s.poison(&format!("{key}again"), b"\x00\x01").await;
    s.ok(Method::DELETE, "/api/v1/namespaces/p", &Value::Null)
        .await;
    eventually("the namespace is deleted", async || {
        s.stored("/core/namespaces/root/p").await.is_none()
    })
    .await;
    assert!(s.stored(&format!("{key}again")).await.is_none());

    // A CRD whose resource holds one finishes deleting.
    s.define_widgets().await;
    s.ok(Method::POST, WIDGETS, &widget("fine", json!({})))
        .await;
    s.poison("/example.com/widgets/root/default/broken", b"{]")
        .await;
    let crd = format!("{CRDS}/widgets.example.com");
    s.ok(Method::DELETE, &crd, &Value::Null).await;
    eventually("the CRD is deleted", async || {
        s.stored("/apiextensions.k8s.io/customresourcedefinitions/root/widgets.example.com")
            .await
            .is_none()
    })
    .await;
    assert!(
        s.stored("/example.com/widgets/root/default/broken")
            .await
            .is_none()
    );

    // A server started over a store with an undecodable CRD starts, and serves the rest.
    s.poison(
        "/apiextensions.k8s.io/customresourcedefinitions/root/broken.example.com",
        b"{",
    )
    .await;
    let again = Api::new(
        s.store.clone(),
        Arc::new(Registry::builtin()),
        "127.0.0.1:6443",
    );
    again.bootstrap().await.unwrap();
    let crds = Client::new(again).request(Method::GET, CRDS).send().await;
    assert_eq!(crds.code(), 200);
}

#[tokio::test]
async fn a_json_patch_cannot_nest_an_object_past_the_limit_one_operation_at_a_time() {
    let s = Server::new().await;
    // A free-form custom resource (a ConfigMap's data holds strings alone).
    s.define_widgets().await;
    let configmaps = WIDGETS;
    s.ok(Method::POST, configmaps, &widget("p", json!({"k": "v"})))
        .await;
    // Each operation adds 120 levels at the deepest point so far: 12,000 levels in all,
    // which would overflow the stack of whatever walks the object next (the process
    // aborts), though every value in the body is within the JSON parser's limit.
    let mut ops = vec![json!({"op": "add", "path": "/spec/x", "value": nested(120)})];
    let mut path = String::from("/spec/x");
    for _ in 0..100 {
        path.push_str(&"/a".repeat(119));
        ops.push(json!({"op": "add", "path": format!("{path}/a"), "value": nested(120)}));
        path.push_str("/a");
    }
    let body = Value::Array(ops).to_string();
    let answer = s
        .answer(
            s.client
                .request(Method::PATCH, format!("{configmaps}/p"))
                .body(
                    Bytes::copy_from_slice(body.as_bytes()),
                    "application/json-patch+json",
                )
                .accept("application/json"),
        )
        .await;
    assert_refused(&answer, 422, "Invalid", &["operation 0", "100 levels"]);
    // Within the limit as stored (its managedFields 5 deeper): taken; a value that would
    // nest the object itself past it: refused at the operation.
    for (levels, code) in [(93, 200), (99, 422)] {
        let ops = json!([{"op": "add", "path": "/spec/y", "value": nested(levels)}]);
        let answer = s
            .answer(
                s.client
                    .request(Method::PATCH, format!("{configmaps}/p"))
                    .query("dryRun=All")
                    .body(ops.to_string(), "application/json-patch+json")
                    .accept("application/json"),
            )
            .await;
        assert_eq!(answer.code, code, "{levels}: {}", answer.body);
        if code == 422 {
            assert_refused(&answer, 422, "Invalid", &["operation 0", "100 levels"]);
        }
    }
}
