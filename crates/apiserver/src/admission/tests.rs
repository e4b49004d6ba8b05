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

/// Allows `bind` on the ClusterSet `eu` to alice, `create` on `clustersets/bind` (OCM's
/// form) on any set to ocm, and nothing else it is asked; remembers what it was asked.
#[derive(Default)]
struct Binders {
    asked: std::sync::Mutex<Vec<String>>,
}

impl crate::auth::Authorizer for Binders {
    fn authorize<'a>(
        &'a self,
        a: &'a crate::auth::Attributes<'a>,
    ) -> Verdict<'a, crate::auth::Decision> {
        use crate::auth::Decision;
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!(
                "{} {} {}/{}/{} ns={:?} name={}",
                a.user.name, a.verb, a.group, a.resource, a.subresource, a.namespace, a.name
            ));
        let allowed = match (a.user.name.as_str(), a.verb, a.resource, a.subresource) {
            ("alice", "bind", "clustersets", "") => a.name == "eu",
            ("ocm", "create", "clustersets", "bind") => true,
            _ => false,
        };
        Verdict::Now(if allowed {
            Decision::Allow
        } else {
            Decision::Deny("no".into())
        })
    }
}

/// Writing a ConfigMap in `default` needs `bind` on the ClusterSet its `data.set` names,
/// or `create` on `clustersets/bind`.
fn binding_plugin(authorizer: Arc<Binders>) -> Arc<plugins::RequirePermission> {
    Arc::new(plugins::RequirePermission::new(
        authorizer,
        "",
        "configmaps",
        "/data/set",
        vec![
            plugins::Permission::cluster_scoped("bind", "flotilla.io", "clustersets"),
            plugins::Permission::cluster_scoped("create", "flotilla.io", "clustersets/bind"),
        ],
    ))
}

async fn call_as(
    api: &Api,
    user: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let body = match body {
        Value::Null => Bytes::new(),
        body => Bytes::from(body.to_string()),
    };
    let user = Arc::new(crate::auth::UserInfo::new(user, &["system:authenticated"]));
    let response = api
        .handle(user, method, path, None, &HeaderMap::new(), body)
        .await;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn bound(name: &str, set: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"set": set}})
}

#[tokio::test]
async fn a_write_needing_a_permission_on_the_named_object_is_refused_without_it() {
    let binders = Arc::new(Binders::default());
    let api = api(Admission::builtin().with_validating(binding_plugin(binders.clone()))).await;
    // Allowed: alice may bind eu; ocm may create clustersets/bind on any set.
    let (code, _) = call_as(&api, "alice", Method::POST, CONFIGMAPS, bound("eu", "eu")).await;
    assert_eq!(code, StatusCode::CREATED);
    let (code, _) = call_as(&api, "ocm", Method::POST, CONFIGMAPS, bound("us", "us")).await;
    assert_eq!(code, StatusCode::CREATED);
    let asked = std::mem::take(&mut *binders.asked.lock().unwrap());
    assert_eq!(
        asked,
        [
            "alice bind flotilla.io/clustersets/ ns=\"\" name=eu",
            "ocm bind flotilla.io/clustersets/ ns=\"\" name=us",
            "ocm create flotilla.io/clustersets/bind ns=\"\" name=us",
        ]
    );

    // Refused: a 403 in Kubernetes' words naming the permission, and nothing written.
    let (code, status) = call_as(&api, "alice", Method::POST, CONFIGMAPS, bound("b", "us")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "clustersets.flotilla.io \"us\" is forbidden: User \"alice\" cannot bind resource \
         \"clustersets\" in API group \"flotilla.io\" at the cluster scope: it is needed to \
         write configmaps \"b\" in the namespace \"default\""
    );
    assert_eq!(status["details"]["name"], "b");
    assert_eq!(status["details"]["kind"], "configmaps");
    let (code, _) = call(&api, Method::GET, &format!("{CONFIGMAPS}/b"), Value::Null).await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // An update and a deletion of ocm's binding of us: alice may not, and it stays.
    let us = format!("{CONFIGMAPS}/us");
    let (code, _) = call_as(&api, "alice", Method::PUT, &us, bound("us", "us")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (code, _) = call_as(&api, "alice", Method::DELETE, &us, Value::Null).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (code, _) = call(&api, Method::GET, &us, Value::Null).await;
    assert_eq!(code, StatusCode::OK);
    // Moving her own binding of eu onto us is refused too (the new name counts).
    let eu = format!("{CONFIGMAPS}/eu");
    let (code, _) = call_as(&api, "alice", Method::PUT, &eu, bound("eu", "us")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (_, stored) = call(&api, Method::GET, &eu, Value::Null).await;
    assert_eq!(stored["data"]["set"], "eu");
    let (code, _) = call_as(&api, "alice", Method::DELETE, &eu, Value::Null).await;
    assert_eq!(code, StatusCode::OK);

    // No field naming the target: 422, nothing written.
    let unnamed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let (code, status) = call_as(&api, "ocm", Method::POST, CONFIGMAPS, unnamed).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(status["details"]["causes"][0]["field"], "data.set");
    // Other resources are not this plugin's.
    binders.asked.lock().unwrap().clear();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, _) = call_as(&api, "alice", Method::POST, secrets, secret).await;
    assert_eq!(code, StatusCode::CREATED);
    assert!(binders.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn status_writes_need_no_such_permission() {
    let binders = Arc::new(Binders::default());
    let plugin = Arc::new(plugins::RequirePermission::new(
        binders.clone(),
        "apps",
        "deployments",
        "/metadata/labels/set",
        vec![plugins::Permission::cluster_scoped(
            "bind",
            "flotilla.io",
            "clustersets",
        )],
    ));
    let api = api(Admission::builtin().with_validating(plugin)).await;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"set": "eu"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let (code, _) = call_as(&api, "alice", Method::POST, deployments, deployment).await;
    assert_eq!(code, StatusCode::CREATED);
    // ocm may not bind eu: a write of the deployment is refused, one of its status is not.
    let web = format!("{deployments}/web");
    let mut changed = call(&api, Method::GET, &web, Value::Null).await.1;
    changed["spec"]["replicas"] = json!(3);
    let (code, _) = call_as(&api, "ocm", Method::PUT, &web, changed.clone()).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    changed["status"] = json!({"observedGeneration": 1, "replicas": 1});
    let (code, written) =
        call_as(&api, "ocm", Method::PUT, &format!("{web}/status"), changed).await;
    assert_eq!(code, StatusCode::OK, "{written}");
    assert_eq!(written["status"]["replicas"], 1);
    assert_ne!(
        written["spec"]["replicas"], 3,
        "a status write changes no spec"
    );
}
