//! Answers: JSON bodies, the object a write answers with, warnings.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flotilla_store::Revision;
use serde_json::Value;

use crate::registry::object::{self};

pub(crate) fn json_response(code: StatusCode, value: &Value) -> Response {
    json_bytes_response(code, crate::http::json::to_vec(value))
}

/// The object a write answers with.
pub(crate) enum Answer {
    /// An object as it is (not stored, or already carrying its resourceVersion).
    Object(Value),
    /// An object as stored at `revision` (without its resourceVersion) and its stored JSON,
    /// from which the answer is made without serialising the object again.
    Stored {
        object: Value,
        json: Bytes,
        revision: Revision,
    },
}

impl Answer {
    /// The object, with its resourceVersion.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Answer::Object(object) => object,
            Answer::Stored {
                object, revision, ..
            } => object::with_resource_version(object, revision.get()),
        }
    }

    pub(crate) fn response(self, code: StatusCode) -> Response {
        if let Answer::Stored { json, revision, .. } = &self
            && let Some(body) = object::with_resource_version_raw(json, revision.get())
        {
            return json_bytes_response(code, body);
        }
        json_response(code, &self.into_value())
    }
}

pub(crate) fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Adds a `Warning: 299 - "…"` header per warning, as the Kubernetes API server does.
pub(crate) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!(
            "299 - \"{}\"",
            warning.replace('\\', "\\\\").replace('"', "\\\"")
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}
