//! Each stage before the registry can refuse a request, and the user travels to the
//! registry.

use std::sync::{Arc, Mutex, PoisonError};

use crate::api::Verdict;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use flotilla_store::Store;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::api::Api;
use crate::http::error::ApiResult;
use crate::registry::resources::Registry;

async fn api(stages: Stages) -> Api {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1").with_stages(stages);
    api.bootstrap().await.unwrap();
    api
}

async fn json_of(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn call(
    api: &Api,
    user: &Arc<UserInfo>,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Value,
) -> (StatusCode, Value) {
    let body = match body {
        Value::Null => Bytes::new(),
        body => Bytes::from(body.to_string()),
    };
    let response = api
        .handle(user.clone(), method, path, None, headers, body)
        .await;
    json_of(response).await
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

/// Denies one verb, allows the rest, and remembers what it was asked.
#[derive(Default)]
struct DenyVerb {
    verb: &'static str,
    asked: Mutex<Vec<String>>,
}

impl Authorizer for DenyVerb {
    fn authorize<'a>(&'a self, a: &'a Attributes<'a>) -> Verdict<'a, Decision> {
        let asked = format!(
            "{} {} {}/{} ns={} name={} sub={}",
            a.user.name, a.verb, a.group, a.resource, a.namespace, a.name, a.subresource
        );
        let mut all = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        all.push(if a.resource_request {
            asked
        } else {
            format!("{} {} {}", a.user.name, a.verb, a.path)
        });
        let decision = match a.verb == self.verb {
            true => Decision::Deny("not today".into()),
            false => Decision::Allow,
        };
        Verdict::Now(decision)
    }
}

#[tokio::test]
async fn an_authorizer_that_denies_a_verb_answers_403_and_changes_nothing() {
    let authorizer = Arc::new(DenyVerb {
        verb: "delete",
        ..DenyVerb::default()
    });
    let api = api(Stages {
        authorizer: authorizer.clone(),
        ..Stages::default()
    })
    .await;
    let jane = Arc::new(UserInfo::new("jane", &[AUTHENTICATED]));
    let none = HeaderMap::new();
    let (code, _) = call(&api, &jane, Method::POST, CONFIGMAPS, &none, configmap("a")).await;
    assert_eq!(code, StatusCode::CREATED);
    let path = format!("{CONFIGMAPS}/a");
    let (code, status) = call(&api, &jane, Method::DELETE, &path, &none, Value::Null).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "configmaps \"a\" is forbidden: User \"jane\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\": not today"
    );
    assert_eq!(status["details"]["name"], "a");
    let (code, _) = call(&api, &jane, Method::GET, &path, &none, Value::Null).await;
    assert_eq!(code, StatusCode::OK, "the denied delete deleted nothing");
    let (code, _) = call(&api, &jane, Method::GET, "/version", &none, Value::Null).await;
    assert_eq!(code, StatusCode::OK);
    let asked = authorizer
        .asked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        asked,
        [
            "jane create /configmaps ns=default name= sub=",
            "jane delete /configmaps ns=default name=a sub=",
            "jane get /configmaps ns=default name=a sub=",
            "jane get /version",
        ]
    );
}

/// Acts as the user `Impersonate-User` names, if the authorizer allows the verb
/// `impersonate` on them; a request without the header acts as its own user.
struct AsHeader;

impl Impersonation for AsHeader {
    fn impersonate<'a>(
        &'a self,
        user: Arc<UserInfo>,
        cluster: &'a str,
        headers: &'a HeaderMap,
        authorizer: &'a dyn Authorizer,
    ) -> Verdict<'a, ApiResult<Arc<UserInfo>>> {
        Verdict::Later(Box::pin(async move {
            let Some(name) = headers
                .get("impersonate-user")
                .and_then(|v| v.to_str().ok())
            else {
                return Ok(user);
            };
            let attributes = Attributes {
                cluster,
                user: &user,
                verb: "impersonate",
                resource_request: true,
                group: "",
                version: "v1",
                resource: "users",
                subresource: "",
                namespace: "",
                name,
                path: "",
            };
            match authorizer.authorize(&attributes).await {
                Decision::Allow => Ok(Arc::new(UserInfo::new(name, &[AUTHENTICATED]))),
                _ => Err(attributes.forbidden("")),
            }
        }))
    }
}

#[tokio::test]
async fn impersonation_can_refuse_and_the_user_it_gives_reaches_the_registry() {
    let who_am_i = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let mut as_bob = HeaderMap::new();
    as_bob.insert("impersonate-user", HeaderValue::from_static("bob"));
    let admin = Arc::new(UserInfo::admin());

    let allowed = api(Stages {
        impersonation: Arc::new(AsHeader),
        ..Stages::default()
    })
    .await;
    let (code, answer) = call(
        &allowed,
        &admin,
        Method::POST,
        who_am_i,
        &as_bob,
        review.clone(),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(answer["status"]["userInfo"]["username"], "bob");
    let none = HeaderMap::new();
    let (_, answer) = call(
        &allowed,
        &admin,
        Method::POST,
        who_am_i,
        &none,
        review.clone(),
    )
    .await;
    assert_eq!(answer["status"]["userInfo"]["username"], ADMIN_USER);
    assert_eq!(
        answer["status"]["userInfo"]["groups"],
        json!([MASTERS, AUTHENTICATED])
    );

    let refused = api(Stages {
        impersonation: Arc::new(AsHeader),
        authorizer: Arc::new(DenyVerb {
            verb: "impersonate",
            ..DenyVerb::default()
        }),
        ..Stages::default()
    })
    .await;
    let (code, status) = call(
        &refused,
        &admin,
        Method::POST,
        CONFIGMAPS,
        &as_bob,
        configmap("b"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(status["reason"], "Forbidden");
    let (code, _) = call(
        &refused,
        &admin,
        Method::GET,
        &format!("{CONFIGMAPS}/b"),
        &none,
        Value::Null,
    )
    .await;
    assert_eq!(
        code,
        StatusCode::NOT_FOUND,
        "the refused create wrote nothing"
    );
}

/// Keeps every record.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Audit for Recorder {
    fn record(&self, e: AuditEvent) {
        let line = format!(
            "{:?} {} as {} {} {} {:?}",
            e.stage,
            e.request.user.name,
            e.impersonated.as_ref().map_or("-", |u| u.name.as_str()),
            e.request.method,
            e.request.uri,
            e.code
        );
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }
}

#[tokio::test]
async fn the_audit_hook_sees_each_request_received_and_answered_with_whom_and_its_code() {
    let recorder = Arc::new(Recorder::default());
    let api = api(Stages {
        audit: recorder.clone(),
        impersonation: Arc::new(AsHeader),
        authorizer: Arc::new(DenyVerb {
            verb: "delete",
            ..DenyVerb::default()
        }),
    })
    .await;
    let admin = Arc::new(UserInfo::admin());
    let mut as_bob = HeaderMap::new();
    as_bob.insert("impersonate-user", HeaderValue::from_static("bob"));
    call(
        &api,
        &admin,
        Method::POST,
        CONFIGMAPS,
        &as_bob,
        configmap("c"),
    )
    .await;
    let path = format!("{CONFIGMAPS}/c");
    call(
        &api,
        &admin,
        Method::DELETE,
        &path,
        &HeaderMap::new(),
        Value::Null,
    )
    .await;
    let records = recorder
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        records,
        [
            format!("RequestReceived {ADMIN_USER} as - POST {CONFIGMAPS} None"),
            format!("ResponseComplete {ADMIN_USER} as bob POST {CONFIGMAPS} Some(201)"),
            format!("RequestReceived {ADMIN_USER} as - DELETE {path} None"),
            format!("ResponseComplete {ADMIN_USER} as - DELETE {path} Some(403)"),
        ]
    );
}

#[tokio::test]
async fn the_authenticator_refuses_bad_or_missing_credentials_and_names_the_user() {
    let api = api(Stages::default()).await;
    let app = crate::http::server::router(
        api,
        Arc::new(AdminToken::exactly("s3cret")),
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    let send = |path: &'static str, token: Option<&'static str>, body: Option<Value>| {
        let app = app.clone();
        async move {
            let mut request = Request::builder().uri(path);
            if let Some(token) = token {
                request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
            }
            let request = match body {
                Some(body) => request
                    .method(Method::POST)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string())),
                None => request.body(Body::empty()),
            };
            json_of(app.oneshot(request.unwrap()).await.unwrap()).await
        }
    };
    let (code, status) = send("/api/v1/namespaces", None, None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );
    assert_eq!(
        send("/api/v1/namespaces", Some("wrong"), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send("/version", Some("wrong"), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(send("/version", None, None).await.0, StatusCode::OK);
    assert_eq!(
        send("/api/v1/namespaces", Some("s3cret"), None).await.0,
        StatusCode::OK
    );
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (code, answer) = send(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some("s3cret"),
        Some(review),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(answer["status"]["userInfo"]["username"], ADMIN_USER);
}

#[tokio::test]
async fn metrics_are_authorized_as_a_path() {
    let api = api(Stages {
        authorizer: Arc::new(DenyVerb {
            verb: "get",
            ..DenyVerb::default()
        }),
        ..Stages::default()
    })
    .await;
    let app = crate::http::server::router(
        api,
        Arc::new(AdminToken::exactly("s3cret")),
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    let request = Request::builder()
        .uri("/metrics")
        .header(header::AUTHORIZATION, "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    let (code, status) = json_of(app.oneshot(request).await.unwrap()).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        status["message"],
        format!("forbidden: User \"{ADMIN_USER}\" cannot get path \"/metrics\": not today")
    );
}
