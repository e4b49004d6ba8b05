//! The in-process client: requests to an [`Api`] from inside the process (the hub's CRD
//! installer, the simulator's provisioning and status writes, tests), through the same
//! routing, admission and watch paths as any client, as the server's own user.
//!
//! ```text
//!  Client::request(method, path) ─► .query / .header / .json / .body ─► .send() ─► Reply
//!                                                   (status, headers, body) ─► .result()
//!  Client::get / create / replace / merge_patch / apply / delete ─► Result<Value, ApiError>
//! ```
//!
//! A failed request's `Status` comes back as the [`ApiError`] it was made from (code,
//! [`Reason`], message, details), so callers decide on `Reason::NotFound`, not on 404 or
//! a string. The fleet controllers use `kube::Client` over
//! [`crate::http::server::local_service`] instead: they are written for any cluster's
//! API, the hub's being one of them.

use axum::http::header::{self, HeaderName};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::Api;
use crate::http::error::{ApiError, ApiResult, Cause, Details, Reason};

/// The content type of JSON bodies.
const JSON: &str = "application/json";

/// A typed client of one [`Api`] (one logical cluster's view; `/clusters/<name>/…` paths
/// reach the others from the root's). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    api: Api,
    field_manager: Option<String>,
}

impl Client {
    /// A client of `api` that names no field manager.
    pub fn new(api: Api) -> Self {
        Client {
            api,
            field_manager: None,
        }
    }

    /// Sends `fieldManager=<manager>` with every request that does not name one itself:
    /// what it writes is owned by `manager` in `managedFields`. `manager` is sent as is
    /// (a plain name: letters, digits, `-`, `.`, `_`).
    pub fn with_field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Some(manager.into());
        self
    }

    /// The API this client calls.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// A request to build and send.
    pub fn request(&self, method: Method, path: impl Into<String>) -> Request<'_> {
        Request {
            client: self,
            method,
            path: path.into(),
            query: String::new(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// GET an object or a list.
    pub async fn get(&self, path: &str) -> ApiResult<Value> {
        self.request(Method::GET, path).result().await
    }

    /// POST `object` to the collection at `path`; the object as created.
    pub async fn create(&self, path: &str, object: &Value) -> ApiResult<Value> {
        self.request(Method::POST, path).json(object).result().await
    }

    /// PUT `object` at `path` (a resourceVersion in it makes the write conditional).
    pub async fn replace(&self, path: &str, object: &Value) -> ApiResult<Value> {
        self.request(Method::PUT, path).json(object).result().await
    }

    /// PATCH `path` with a JSON merge patch.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> ApiResult<Value> {
        let body = Bytes::from(patch.to_string());
        self.request(Method::PATCH, path)
            .body(body, "application/merge-patch+json")
            .result()
            .await
    }

    /// Server-side apply of `object` at `path` as this client's field manager, taking
    /// fields another manager owns if `force`.
    pub async fn apply(&self, path: &str, object: &Value, force: bool) -> ApiResult<Value> {
        let body = Bytes::from(object.to_string());
        let mut request = self
            .request(Method::PATCH, path)
            .body(body, "application/apply-patch+yaml");
        if force {
            request = request.query("force=true");
        }
        request.result().await
    }

    /// DELETE `path`: the object as marked (finalizers pending) or a success `Status`.
    pub async fn delete(&self, path: &str) -> ApiResult<Value> {
        self.request(Method::DELETE, path).result().await
    }
}

/// One request being built; nothing is sent before [`Request::send`] (or
/// [`Request::result`], [`Request::response`]).
#[must_use = "a request does nothing until it is sent"]
pub struct Request<'a> {
    client: &'a Client,
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Request<'_> {
    /// Adds query parameters (`name=value&…`, encoded as they are to be sent).
    pub fn query(mut self, query: &str) -> Self {
        if !query.is_empty() {
            if !self.query.is_empty() {
                self.query.push('&');
            }
            self.query.push_str(query);
        }
        self
    }

    /// Adds a header. Panics if `value` cannot be a header value (a caller's mistake).
    pub fn header(mut self, name: HeaderName, value: &str) -> Self {
        let value = HeaderValue::from_str(value)
            .unwrap_or_else(|_| panic!("{value:?} is not a valid value of header {name}"));
        self.headers.append(name, value);
        self
    }

    /// Asks for the reply in `media_type` (`Accept`).
    pub fn accept(self, media_type: &str) -> Self {
        self.header(header::ACCEPT, media_type)
    }

    /// Sends `value` as a JSON body. `Value::Null` sends no body (and no content type).
    pub fn json(self, value: &Value) -> Self {
        if value.is_null() {
            return self;
        }
        self.body(Bytes::from(value.to_string()), JSON)
    }

    /// Sends `body` as `content_type`.
    pub fn body(mut self, body: impl Into<Bytes>, content_type: &str) -> Self {
        self = self.header(header::CONTENT_TYPE, content_type);
        self.body = body.into();
        self
    }

    /// Sends `body` with no content type.
    pub fn raw_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends the request; the reply as it comes, its body still streaming (watches).
    pub async fn response(self) -> Response {
        let mut query = self.query;
        if let Some(manager) = &self.client.field_manager {
            let named = query
                .split('&')
                .any(|pair| pair.split('=').next() == Some("fieldManager"));
            if !named {
                if !query.is_empty() {
                    query.push('&');
                }
                query.push_str("fieldManager=");
                query.push_str(manager);
            }
        }
        let query = (!query.is_empty()).then_some(query.as_str());
        self.client
            .api
            .serve(self.method, &self.path, query, &self.headers, self.body)
            .await
    }

    /// Sends the request; the whole reply.
    pub async fn send(self) -> Reply {
        let (parts, body) = self.response().await.into_parts();
        // In-process bodies fail only if the server's stream does, which it reports as
        // the end of the body; what arrived is the reply.
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// Sends the request; its JSON reply, or the error its `Status` describes.
    pub async fn result(self) -> ApiResult<Value> {
        self.send().await.result()
    }
}

/// A whole reply.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Its HTTP status.
    pub status: StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

impl Reply {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.status.as_u16()
    }

    /// The body as JSON; `Value::Null` if it is empty or not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The `Warning` headers' values, in order.
    pub fn warnings(&self) -> Vec<String> {
        self.headers
            .get_all(header::WARNING)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    }

    /// The JSON body of a success (`Value::Null` if empty); the [`ApiError`] of any
    /// other status, read from its `Status` body.
    pub fn result(self) -> ApiResult<Value> {
        if !self.status.is_success() {
            return Err(error_of(self.status, &self.body));
        }
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            ApiError::internal(format!("the reply ({}) is not JSON: {e}", self.status))
        })
    }
}

/// The error a failed reply describes: its `Status`'s reason, message and details, else
/// (no `Status` in the body) the reason its code stands for and the body as the message.
fn error_of(status: StatusCode, body: &[u8]) -> ApiError {
    let code = status.as_u16();
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if value["kind"] != "Status" {
        let text = String::from_utf8_lossy(body);
        let message = match text.trim() {
            "" => status.to_string(),
            text => text.to_owned(),
        };
        return ApiError::new(code, reason_of_code(code), message);
    }
    let reason = value["reason"]
        .as_str()
        .and_then(Reason::parse)
        .unwrap_or_else(|| reason_of_code(code));
    let message = value["message"].as_str().unwrap_or_default();
    let mut error = ApiError::new(code, reason, message);
    if let Some(details) = value["details"].as_object() {
        let text = |field: &str| {
            details
                .get(field)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let causes = details
            .get("causes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|cause| {
                let text = |field: &str| cause[field].as_str().unwrap_or_default().to_owned();
                Cause {
                    reason: text("reason"),
                    message: text("message"),
                    field: text("field"),
                }
            })
            .collect();
        error.details = Some(Box::new(Details {
            name: text("name"),
            group: text("group"),
            kind: text("kind"),
            causes,
            retry_after_seconds: details
                .get("retryAfterSeconds")
                .and_then(Value::as_u64)
                .and_then(|s| u32::try_from(s).ok()),
        }));
    }
    error
}

/// The reason Kubernetes gives a code when the `Status` names none it knows.
fn reason_of_code(code: u16) -> Reason {
    match code {
        400 => Reason::BadRequest,
        401 => Reason::Unauthorized,
        403 => Reason::Forbidden,
        404 => Reason::NotFound,
        405 => Reason::MethodNotAllowed,
        409 => Reason::Conflict,
        410 => Reason::Expired,
        413 => Reason::RequestEntityTooLarge,
        415 => Reason::UnsupportedMediaType,
        422 => Reason::Invalid,
        408 | 504 => Reason::Timeout,
        503 => Reason::ServiceUnavailable,
        507 => Reason::InsufficientStorage,
        _ => Reason::InternalError,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flotilla_store::Store;
    use serde_json::json;

    use super::*;
    use crate::Registry;

    const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

    async fn client() -> Client {
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1:6443");
        api.bootstrap().await.unwrap();
        Client::new(api).with_field_manager("tester")
    }

    fn configmap(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"a": "1"}})
    }

    #[tokio::test]
    async fn a_create_answers_201_and_reads_back_owned_by_the_field_manager() {
        let client = client().await;
        let reply = client
            .request(Method::POST, CONFIGMAPS)
            .json(&configmap("web"))
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        assert_eq!(reply.json()["metadata"]["name"], "web");
        let object = client.get(&format!("{CONFIGMAPS}/web")).await.unwrap();
        assert_eq!(object["data"]["a"], "1");
        assert_eq!(object["metadata"]["managedFields"][0]["manager"], "tester");
    }

    #[tokio::test]
    async fn a_failure_is_the_api_error_its_status_describes() {
        let client = client().await;
        let missing = client.get(&format!("{CONFIGMAPS}/nope")).await.unwrap_err();
        assert_eq!(
            missing,
            ApiError::not_found("", "configmaps", "nope"),
            "{missing:?}"
        );

        client.create(CONFIGMAPS, &configmap("web")).await.unwrap();
        let again = client
            .create(CONFIGMAPS, &configmap("web"))
            .await
            .unwrap_err();
        assert_eq!(again, ApiError::already_exists("", "configmaps", "web"));

        let mut stale = configmap("web");
        stale["metadata"]["resourceVersion"] = json!("1");
        let conflict = client
            .replace(&format!("{CONFIGMAPS}/web"), &stale)
            .await
            .unwrap_err();
        assert_eq!(conflict.code, 409);
        assert_eq!(conflict.reason, Reason::Conflict);

        let invalid = client
            .create(CONFIGMAPS, &configmap("Bad_Name"))
            .await
            .unwrap_err();
        assert_eq!(invalid.code, 422);
        assert_eq!(invalid.reason, Reason::Invalid);
        let details = invalid.details.unwrap();
        assert_eq!(details.causes[0].field, "metadata.name");
        assert_eq!(details.name.as_deref(), Some("Bad_Name"));
    }

    #[tokio::test]
    async fn patches_apply_and_delete_go_through() {
        let client = client().await;
        let path = format!("{CONFIGMAPS}/web");
        client.create(CONFIGMAPS, &configmap("web")).await.unwrap();
        let patched = client
            .merge_patch(&path, &json!({"data": {"b": "2"}}))
            .await
            .unwrap();
        assert_eq!(patched["data"], json!({"a": "1", "b": "2"}));
        let applied = client
            .apply(
                &path,
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web"}, "data": {"c": "3"}}),
                false,
            )
            .await
            .unwrap();
        assert_eq!(applied["data"]["c"], "3");
        let managers: Vec<&Value> = applied["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["operation"])
            .collect();
        assert!(managers.contains(&&json!("Apply")), "{applied}");
        client.delete(&path).await.unwrap();
        let gone = client.get(&path).await.unwrap_err();
        assert_eq!(gone.reason, Reason::NotFound);
    }

    #[tokio::test]
    async fn a_query_naming_a_field_manager_keeps_it() {
        let client = client().await;
        client
            .request(Method::POST, CONFIGMAPS)
            .query("fieldManager=other")
            .json(&configmap("web"))
            .result()
            .await
            .unwrap();
        let object = client.get(&format!("{CONFIGMAPS}/web")).await.unwrap();
        assert_eq!(object["metadata"]["managedFields"][0]["manager"], "other");
    }

    #[test]
    fn a_reply_without_a_status_gets_the_reason_of_its_code() {
        let error = error_of(StatusCode::BAD_GATEWAY, b"upstream went away\n");
        assert_eq!(error.code, 502);
        assert_eq!(error.reason, Reason::InternalError);
        assert_eq!(error.message, "upstream went away");
        let error = error_of(StatusCode::NOT_FOUND, b"");
        assert_eq!(error.reason, Reason::NotFound);
        assert_eq!(error.message, "404 Not Found");
        let status = json!({"kind": "Status", "code": 409, "reason": "SomethingNew",
            "message": "m"});
        let error = error_of(StatusCode::CONFLICT, status.to_string().as_bytes());
        assert_eq!(error.reason, Reason::Conflict);
        assert_eq!(error.message, "m");
    }
}
