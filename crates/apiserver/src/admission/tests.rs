//! An admission plugin can change a write, or refuse it (422) so that nothing is written.

use std::sync::Arc;

use crate::api::Verdict;
use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use flotilla_store::Store;
use serde_json::{Value, json};

use super::*;
use crate::api::Api;
use crate::http::error::{ApiError, Cause};
use crate::registry::resources::Registry;

async fn api(admission: Admission) -> Api {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1").with_admission(admission);
    api.bootstrap().await.unwrap();
    api
}

async fn call(api: &Api, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let mut headers = HeaderMap::new();
    let body = match body {
        Value::Null => Bytes::new(),
        body => Bytes::from(body.to_string()),
    };
    if method == Method::PATCH {
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            "application/merge-patch+json".parse().unwrap(),
        );
    }
    let response = api.serve(method, path, None, &headers, body).await;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"color": value}})
}

/// Refuses ConfigMaps whose `color` is red, and any deletion of one named `keep`.
struct NoRed;

impl Validating for NoRed {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let refused = match attributes.operation {
            Operation::Delete => {
                attributes.name == "keep" && old.is_some_and(|o| o["metadata"]["name"] == "keep")
            }
            _ => object["data"]["color"] == "red",
        };
        let outcome = match refused {
            true => Err(ApiError::invalid(
                "",
                "ConfigMap",
                attributes.name,
                vec![Cause {
                    reason: "FieldValueForbidden".into(),
                    message: "Forbidden: red is not allowed".into(),
                    field: "data.color".into(),
                }],
            )),
            false => Ok(vec![format!("{} checked", attributes.name)]),
        };
        Verdict::Now(outcome)
    }
}

#[tokio::test]
async fn a_validating_plugin_that_refuses_answers_422_and_writes_nothing() {
    let api = api(Admission::builtin().with_validating(Arc::new(NoRed))).await;
    let (code, status) = call(&api, Method::POST, CONFIGMAPS, configmap("a", "red")).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("Invalid"))
    );
    assert_eq!(status["details"]["causes"][0]["field"], "data.color");
    let path = format!("{CONFIGMAPS}/a");
    assert_eq!(
        call(&api, Method::GET, &path, Value::Null).await.0,
        StatusCode::NOT_FOUND
    );

    let (code, _) = call(&api, Method::POST, CONFIGMAPS, configmap("a", "blue")).await;
    assert_eq!(code, StatusCode::CREATED);
    let (code, _) = call(&api, Method::PUT, &path, configmap("a", "red")).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let patch = json!({"data": {"color": "red"}});
    assert_eq!(
        call(&api, Method::PATCH, &path, patch).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let (_, stored) = call(&api, Method::GET, &path, Value::Null).await;
    assert_eq!(
        stored["data"]["color"], "blue",
        "refused updates changed nothing"
    );

    call(&api, Method::POST, CONFIGMAPS, configmap("keep", "green")).await;
    let keep = format!("{CONFIGMAPS}/keep");
    assert_eq!(
        call(&api, Method::DELETE, &keep, Value::Null).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        call(&api, Method::GET, &keep, Value::Null).await.0,
        StatusCode::OK
    );
    assert_eq!(
        call(&api, Method::DELETE, &path, Value::Null).await.0,
        StatusCode::OK
    );
}

/// Labels every object with who wrote it; refuses objects labelled `frozen`.
struct Stamp;

impl Mutating for Stamp {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if attributes.operation == Operation::Delete {
            return Verdict::Now(Ok(Vec::new()));
        }
        if !object["metadata"]["labels"]["frozen"].is_null() {
            let refused = ApiError::invalid("", &attributes.rt.kind, attributes.name, vec![]);
            return Verdict::Now(Err(refused));
        }
        object["metadata"]["labels"]["written-by"] = json!(attributes.user.name.replace(':', "."));
        Verdict::Now(Ok(vec!["stamped".to_owned()]))
    }
}

#[tokio::test]
async fn a_mutating_plugin_changes_what_is_stored_or_refuses_it() {
    let api = api(Admission::builtin().with_mutating(Arc::new(Stamp))).await;
    let (code, created) = call(&api, Method::POST, CONFIGMAPS, configmap("a", "blue")).await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(
        created["metadata"]["labels"]["written-by"],
        "system.apiserver"
    );
    let (_, stored) = call(&api, Method::GET, &format!("{CONFIGMAPS}/a"), Value::Null).await;
    assert_eq!(
        stored["metadata"]["labels"]["written-by"],
        "system.apiserver"
    );

    let mut frozen = configmap("b", "blue");
    frozen["metadata"]["labels"] = json!({"frozen": "yes"});
    let (code, status) = call(&api, Method::POST, CONFIGMAPS, frozen).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(status["reason"], "Invalid");
    let (code, _) = call(&api, Method::GET, &format!("{CONFIGMAPS}/b"), Value::Null).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_builtin_chain_still_prunes_unknown_fields_with_a_warning() {
    let api = api(Admission::builtin()).await;
    let mut object = configmap("a", "blue");
    object["spec"] = json!({"unknown": true});
    let response = api
        .serve(
            Method::POST,
            CONFIGMAPS,
            None,
            &HeaderMap::new(),
            Bytes::from(object.to_string()),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let warning = response.headers()["warning"].to_str().unwrap().to_owned();
    assert!(warning.contains("unknown field \\\"spec\\\""), "{warning}");
}
