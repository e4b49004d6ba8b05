//! A request's parts as the API reads them: the query string, the body by its content
//! type, the field manager, delete options.

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde_json::Value;

use crate::http::error::{ApiError, ApiResult};

/// The decoded query string.
pub(crate) struct Query(pub(crate) HashMap<String, String>);

impl Query {
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(decode(k), decode(v));
        }
        Query(map)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Whether `key` is set true, as Go's `strconv.ParseBool` reads it (the Python
    /// client sends `watch=True`).
    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(
            self.get(key),
            Some("true" | "1" | "t" | "T" | "TRUE" | "True")
        )
    }

    pub(crate) fn dry_run(&self) -> ApiResult<bool> {
        match self.get("dryRun") {
            None => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}: only \"All\" is supported"
            ))),
        }
    }
}

pub(crate) fn parse_resource_version(text: &str) -> ApiResult<u64> {
    text.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resourceVersion {text:?}: must be a number"
        ))
    })
}

/// The media type of a request body, without parameters (`""` when absent).
pub(crate) fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
}

/// An object sent to create or replace: JSON, YAML (`application/yaml`), or Kubernetes
/// protobuf for the built-in kinds (kubectl's typed commands send it). Anything else gets
/// 415 with a message saying what to send.
pub(crate) fn parse_body(body: &Bytes, headers: &HeaderMap) -> ApiResult<Value> {
    let value: Value = match content_type(headers) {
        "" | "application/json" | "*/*" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?,
        "application/vnd.kubernetes.protobuf" => crate::http::protobuf::decode(body)?,
        "application/yaml" => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the request body is not UTF-8 YAML"))?;
            serde_saphyr::from_str(text).map_err(|e| {
                ApiError::bad_request(format!("the request body is not valid YAML: {e}"))
            })?
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body's content type {other:?} is not supported: send application/json, application/yaml or application/vnd.kubernetes.protobuf"
            )));
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(value)
}

/// The delete options of a request as JSON (typed clients may send them as protobuf).
pub(crate) fn delete_options(body: Bytes, headers: &HeaderMap) -> ApiResult<Bytes> {
    if body.is_empty() || content_type(headers) != "application/vnd.kubernetes.protobuf" {
        return Ok(body);
    }
    Ok(Bytes::from(
        crate::http::protobuf::decode(&body)?.to_string(),
    ))
}

/// Whether a patch leaves `metadata.resourceVersion` alone (then a conflict is retried).
pub(crate) fn patch_keeps_version(patch: &Value) -> bool {
    match patch {
        Value::Object(map) => map
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .is_none(),
        Value::Array(ops) => !ops.iter().any(|op| {
            op["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/metadata/resourceVersion"))
        }),
        _ => true,
    }
}

/// The field manager of a write that is not an apply: `fieldManager`, else the client's
/// User-Agent up to its first `/` (as the Kubernetes API server names it).
pub(crate) fn field_manager(query: &Query, headers: &HeaderMap) -> ApiResult<String> {
    if let Some(manager) = query.get("fieldManager") {
        check_manager(manager)?;
        return Ok(manager.to_owned());
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let prefix: String = agent
        .split('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(128)
        .collect();
    Ok(match prefix.trim() {
        "" => "unknown".to_owned(),
        name => name.to_owned(),
    })
}

/// A field manager's name: at most 128 printable characters.
pub(crate) fn check_manager(manager: &str) -> ApiResult<()> {
    if manager.chars().count() > 128 {
        return Err(invalid_option(
            "fieldManager",
            "FieldValueTooLong",
            "Too long: may not be more than 128 characters",
        ));
    }
    if manager.chars().any(char::is_control) {
        return Err(invalid_option(
            "fieldManager",
            "FieldValueInvalid",
            "Invalid value: may only contain printable characters",
        ));
    }
    Ok(())
}

/// 422 for a bad write option (`PatchOptions` as Kubernetes names them).
pub(crate) fn invalid_option(field: &str, reason: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "meta.k8s.io",
        "PatchOptions",
        "",
        vec![crate::http::error::Cause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        }],
    )
}

/// An apply configuration: YAML (or JSON, which is YAML too), an object.
pub(crate) fn parse_apply_config(body: &Bytes) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the apply configuration is not UTF-8"))?;
    // JSON is YAML, and what kubectl, client-go and kube-rs send: read by the JSON parser,
    // several times faster than the YAML one; anything else by the YAML parser.
    let json = text
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten();
    let config: Value = match json {
        Some(config) => config,
        None => serde_saphyr::from_str(text).map_err(|e| {
            ApiError::bad_request(format!("the apply configuration is not valid YAML: {e}"))
        })?,
    };
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "the apply configuration must be an object",
        ));
    }
    Ok(config)
}

/// Percent-decoding of one query component (`+` is a space).
pub(crate) fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 2;
            }
            (byte, _) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_true_as_go_parses_true() {
        for yes in ["true", "True", "TRUE", "t", "T", "1"] {
            assert!(
                Query::parse(Some(&format!("&watch={yes}"))).flag("watch"),
                "{yes}"
            );
        }
        for no in ["false", "False", "0", "f", "", "yes"] {
            assert!(
                !Query::parse(Some(&format!("watch={no}"))).flag("watch"),
                "{no}"
            );
        }
        assert!(!Query::parse(None).flag("watch"));
    }

    #[test]
    fn an_apply_configuration_reads_the_same_as_json_or_as_yaml() {
        let json = Bytes::from_static(
            br#"  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"n": "1", "big": 12345678901234567890}}"#,
        );
        let yaml = Bytes::from_static(
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  n: \"1\"\n  big: 12345678901234567890\n",
        );
        assert_eq!(
            parse_apply_config(&json).unwrap(),
            parse_apply_config(&yaml).unwrap()
        );
        // YAML in flow style also starts with a brace, and is not JSON.
        let flow = Bytes::from_static(b"{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}");
        assert_eq!(parse_apply_config(&flow).unwrap()["metadata"]["name"], "a");
        // Neither: a readable error; not an object: refused.
        let broken = parse_apply_config(&Bytes::from_static(b"{\"a\": [}")).unwrap_err();
        assert!(
            broken.status().to_string().contains("not valid YAML"),
            "{}",
            broken.status()
        );
        assert!(parse_apply_config(&Bytes::from_static(b"[1, 2]")).is_err());
    }
}
