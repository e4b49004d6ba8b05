//! Reading a hub's audit log (`--audit-log-path`: `audit.k8s.io/v1` Events as JSON lines).

use std::path::Path;

use serde_json::Value;

/// Every event in the log so far.
pub fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// An event's verb, resource, namespace, name and code, to compare.
pub fn summary(event: &Value) -> (String, String, String, String, i64) {
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    (
        text(&event["verb"]),
        text(&event["objectRef"]["resource"]),
        text(&event["objectRef"]["namespace"]),
        text(&event["objectRef"]["name"]),
        event["responseStatus"]["code"].as_i64().unwrap_or(0),
    )
}
