//! Errors as Kubernetes `Status` objects: every failure the API returns is one.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What a `Status` says about the object involved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    /// The object's name.
    pub name: Option<String>,
    /// Its API group.
    pub group: Option<String>,
    /// Its resource (plural) or kind.
    pub kind: Option<String>,
    /// Field-level causes.
    pub causes: Vec<Cause>,
    /// When the client should try again (`retryAfterSeconds`, and the `Retry-After`
    /// header of the answer).
    pub retry_after_seconds: Option<u32>,
}

/// One cause of a failure, usually a field.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// A machine-readable reason (`FieldValueInvalid`, `FieldValueRequired`, …).
    pub reason: String,
    /// What is wrong.
    pub message: String,
    /// The field, as a path (`metadata.name`).
    pub field: String,
}

/// Why a request failed: a `Status`'s `reason`, as Kubernetes names them
/// (`metav1.StatusReason`). Code decides on these, never on the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// 400: the request itself is malformed.
    BadRequest,
    /// 401: no valid credentials.
    Unauthorized,
    /// 403: the user may not do this, or the object may not be changed so.
    Forbidden,
    /// 404: no such object or path.
    NotFound,
    /// 405: the verb is not served on this resource.
    MethodNotAllowed,
    /// 409: the object already exists.
    AlreadyExists,
    /// 409: a stale resourceVersion, or another writer's field.
    Conflict,
    /// 410: a resourceVersion or continue token too old to serve.
    Expired,
    /// 413: the request or the object is too large.
    RequestEntityTooLarge,
    /// 415: the body's content type is not accepted.
    UnsupportedMediaType,
    /// 422: the object fails validation.
    Invalid,
    /// 408 or 504: the request or the server ran out of time.
    Timeout,
    /// 500: the server failed.
    InternalError,
    /// 503: the store cannot be reached now; retry later.
    ServiceUnavailable,
    /// 507: the store is full.
    InsufficientStorage,
}

impl Reason {
    /// The reason as a `Status` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::NotFound => "NotFound",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Expired => "Expired",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::Invalid => "Invalid",
            Reason::Timeout => "Timeout",
            Reason::InternalError => "InternalError",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::InsufficientStorage => "InsufficientStorage",
        }
    }
}

impl Reason {
    /// Every reason, in the order of their codes.
    pub const ALL: [Reason; 15] = [
        Reason::BadRequest,
        Reason::Unauthorized,
        Reason::Forbidden,
        Reason::NotFound,
        Reason::MethodNotAllowed,
        Reason::AlreadyExists,
        Reason::Conflict,
        Reason::Expired,
        Reason::RequestEntityTooLarge,
        Reason::UnsupportedMediaType,
        Reason::Invalid,
        Reason::Timeout,
        Reason::InternalError,
        Reason::ServiceUnavailable,
        Reason::InsufficientStorage,
    ];

    /// The reason a `Status` spells `text`, if it is one of these.
    pub fn parse(text: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed API request: becomes a `Status` with its HTTP code.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// The `Status` reason.
    pub reason: Reason,
    /// A human-readable message naming the problem.
    pub message: String,
    /// The object and causes, when known (boxed: errors stay small on the happy path).
    pub details: Option<Box<Details>>,
}

/// The result of an API operation.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// Any error, with no details.
    pub fn new(code: u16, reason: Reason, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// Adds the object's identity to the details.
    pub fn on(mut self, group: &str, kind: &str, name: &str) -> Self {
        let details = self.details.get_or_insert_with(Box::default);
        details.group = Some(group.to_owned());
        details.kind = Some(kind.to_owned());
        if !name.is_empty() {
            details.name = Some(name.to_owned());
        }
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, Reason::BadRequest, message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, Reason::Unauthorized, "Unauthorized")
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, Reason::Forbidden, message)
    }

    /// 404 NotFound for an object: `resource "name" not found` as Kubernetes words it.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let what = qualified(group, resource);
        Self::new(
            404,
            Reason::NotFound,
            format!("{what} \"{name}\" not found"),
        )
        .on(group, resource, name)
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            Reason::NotFound,
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str, what: &str) -> Self {
        Self::new(
            405,
            Reason::MethodNotAllowed,
            format!("{method} is not supported on {what}"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let what = qualified(group, resource);
        Self::new(
            409,
            Reason::AlreadyExists,
            format!("{what} \"{name}\" already exists"),
        )
        .on(group, resource, name)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        let what = qualified(group, resource);
        Self::new(
            409,
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on {what} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        )
        .on(group, resource, name)
    }

    /// 410 Expired: a resourceVersion or continue token too old to serve.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, Reason::Expired, message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, Reason::RequestEntityTooLarge, message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, Reason::UnsupportedMediaType, message)
    }

    /// 422 Invalid, with field causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let list: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let mut error = Self::new(
            422,
            Reason::Invalid,
            format!("{kind} \"{name}\" is invalid: {}", list.join(", ")),
        )
        .on(group, kind, name);
        if let Some(details) = &mut error.details {
            details.causes = causes;
        }
        error
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, Reason::InternalError, message)
    }

    /// 503 ServiceUnavailable: the store cannot be reached now; the client is asked to
    /// retry after `seconds` (kube-apiserver answers so while etcd is down).
    pub fn unavailable(message: impl Into<String>, seconds: u32) -> Self {
        let mut error = Self::new(503, Reason::ServiceUnavailable, message);
        error.details = Some(Box::new(Details {
            retry_after_seconds: Some(seconds),
            ..Details::default()
        }));
        error
    }

    /// 504 Timeout for a resourceVersion ahead of the server.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut error = Self::new(
            504,
            Reason::Timeout,
            format!("Too large resource version: {requested}, current: {current}"),
        );
        error.details = Some(Box::new(Details {
            causes: vec![Cause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            ..Details::default()
        }));
        error
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code,
        });
        if let Some(details) = &self.details {
            let mut d = serde_json::Map::new();
            if let Some(name) = &details.name {
                d.insert("name".into(), json!(name));
            }
            if let Some(group) = &details.group {
                d.insert("group".into(), json!(group));
            }
            if let Some(kind) = &details.kind {
                d.insert("kind".into(), json!(kind));
            }
            if !details.causes.is_empty() {
                // Empty fields are left out, as Kubernetes leaves them out.
                let causes: Vec<Value> = details
                    .causes
                    .iter()
                    .map(|c| {
                        let mut cause = serde_json::Map::new();
                        for (key, value) in [
                            ("reason", &c.reason),
                            ("message", &c.message),
                            ("field", &c.field),
                        ] {
                            if !value.is_empty() {
                                cause.insert(key.into(), json!(value));
                            }
                        }
                        Value::Object(cause)
                    })
                    .collect();
                d.insert("causes".into(), Value::Array(causes));
            }
            if let Some(seconds) = details.retry_after_seconds {
                d.insert("retryAfterSeconds".into(), json!(seconds));
            }
            status["details"] = Value::Object(d);
        }
        status
    }
}

/// `resource` or `resource.group`, as Kubernetes names a resource in messages.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut response = (code, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.details.as_ref().and_then(|d| d.retry_after_seconds) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The `Retry-After` of an answer made while the store cannot be reached.
pub const STORE_RETRY_AFTER_SECONDS: u32 = 1;

impl From<flotilla_store::Error> for ApiError {
    fn from(e: flotilla_store::Error) -> Self {
        use flotilla_store::Error as E;
        match e {
            E::Compacted {
                requested,
                compacted,
            } => ApiError::expired(format!(
                "The resourceVersion {requested} is too old; the oldest available is {compacted}"
            )),
            E::FutureRevision { requested, current } => {
                ApiError::too_large_resource_version(requested.get(), current.get())
            }
            E::InvalidArgument(message) => ApiError::bad_request(message),
            E::NoSpace { .. } => ApiError::new(507, Reason::InsufficientStorage, e.to_string()),
            E::Unavailable { .. } => ApiError::unavailable(
                format!("the store is unavailable, retry later: {e}"),
                STORE_RETRY_AFTER_SECONDS,
            ),
            other => ApiError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_reads_like_kubernetes() {
        let status = ApiError::not_found("apps", "deployments", "web").status();
        assert_eq!(status["message"], "deployments.apps \"web\" not found");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["code"], 404);
        assert_eq!(status["details"]["name"], "web");
        assert_eq!(status["details"]["group"], "apps");
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["status"], "Failure");
    }

    #[test]
    fn invalid_lists_its_causes() {
        let cause = Cause {
            reason: "FieldValueInvalid".into(),
            message: "a lowercase RFC 1123 subdomain must consist of …".into(),
            field: "metadata.name".into(),
        };
        let status = ApiError::invalid("", "ConfigMap", "Bad_Name", vec![cause]).status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name:")
        );
    }

    #[test]
    fn every_reason_reads_back_from_its_spelling() {
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(reason));
            // A new variant stops this from compiling: add it here and to `ALL`.
            match reason {
                Reason::BadRequest
                | Reason::Unauthorized
                | Reason::Forbidden
                | Reason::NotFound
                | Reason::MethodNotAllowed
                | Reason::AlreadyExists
                | Reason::Conflict
                | Reason::Expired
                | Reason::RequestEntityTooLarge
                | Reason::UnsupportedMediaType
                | Reason::Invalid
                | Reason::Timeout
                | Reason::InternalError
                | Reason::ServiceUnavailable
                | Reason::InsufficientStorage => {}
            }
        }
        assert_eq!(Reason::parse("conflict"), None);
        assert_eq!(Reason::parse(""), None);
    }

    #[test]
    fn store_errors_map_to_status_codes() {
        let compacted = flotilla_store::Error::Compacted {
            requested: 3.into(),
            compacted: 10.into(),
        };
        assert_eq!(ApiError::from(compacted).code, 410);
        let future = flotilla_store::Error::FutureRevision {
            requested: 30.into(),
            current: 10.into(),
        };
        let e = ApiError::from(future);
        assert_eq!(e.code, 504);
        assert_eq!(
            e.status()["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        let lost = flotilla_store::Error::Unavailable {
            message: "connection to 127.0.0.1:5432 refused".into(),
            source: None,
        };
        let e = ApiError::from(lost);
        assert_eq!((e.code, e.reason), (503, Reason::ServiceUnavailable));
        assert_eq!(e.status()["details"]["retryAfterSeconds"], 1);
        let response = e.into_response();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
