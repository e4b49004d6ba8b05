//! Drift: the fields a manifest sets whose value on the member differs from it.
//!
//! Only what the manifest says counts: fields the member adds (defaults, status, other
//! managers' fields) are not drift. Metadata counts only for labels and annotations,
//! minus the provenance keys delivery adds itself.

use flotilla_api::Drift;
use serde_json::Value;

use crate::provenance::is_provenance_key;

/// Every field `manifest` sets whose value differs in `live`, as JSON pointers.
pub(crate) fn drift(manifest: &Value, live: &Value) -> Vec<Drift> {
    let mut found = Vec::new();
    let Some(fields) = manifest.as_object() else {
        return found;
    };
    for (key, value) in fields {
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for part in ["labels", "annotations"] {
                    let entries = value[part].as_object().into_iter().flatten();
                    for (name, value) in entries.filter(|(name, _)| !is_provenance_key(name)) {
                        let path = format!("/metadata/{part}/{}", escape(name));
                        walk(value, live["metadata"][part].get(name), path, &mut found);
                    }
                }
            }
            _ => walk(
                value,
                live.get(key),
                format!("/{}", escape(key)),
                &mut found,
            ),
        }
    }
    found
}

/// Compares what the hub sets under `path` with the member's value there.
fn walk(hub: &Value, member: Option<&Value>, path: String, found: &mut Vec<Drift>) {
    let member = member.filter(|m| !m.is_null());
    match (hub, member) {
        // A null in a manifest unsets the field: nothing to hold the member to.
        (Value::Null, _) => {}
        // An empty list is what the member leaves out.
        (Value::Array(h), None) if h.is_empty() => {}
        // Each field of an object counts on its own, even when the whole is missing.
        (Value::Object(h), None | Some(Value::Object(_))) => {
            for (key, value) in h {
                let member = member.and_then(|m| m.get(key));
                walk(value, member, format!("{path}/{}", escape(key)), found);
            }
        }
        (Value::Array(h), Some(Value::Array(m))) if h.len() == m.len() => {
            for (i, (h, m)) in h.iter().zip(m).enumerate() {
                walk(h, Some(m), format!("{path}/{i}"), found);
            }
        }
        (hub, Some(member)) if same_scalar(hub, member) => {}
        (hub, member) => found.push(Drift {
            path,
            hub: Some(hub.to_string()),
            member: member.map(Value::to_string),
        }),
    }
}

/// Equal values, numbers by value (`1` and `1.0` are the same).
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        _ => a == b,
    }
}

/// A key as a JSON pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The paths, sorted (the order of object keys is serde_json's).
    fn paths(drift: &[Drift]) -> Vec<&str> {
        let mut paths: Vec<&str> = drift.iter().map(|d| d.path.as_str()).collect();
        paths.sort();
        paths
    }

    #[test]
    fn only_fields_the_manifest_sets_count() {
        let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1"}]}}}});
        let mut live = manifest.clone();
        live["metadata"]["uid"] = json!("u-1");
        live["metadata"]["resourceVersion"] = json!("17");
        live["metadata"]["labels"]["flotilla.io/hub"] = json!("hub");
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        live["status"] = json!({"replicas": 3});
        assert_eq!(drift(&manifest, &live), []);

        live["spec"]["replicas"] = json!(5);
        assert_eq!(
            drift(&manifest, &live),
            [Drift {
                path: "/spec/replicas".into(),
                hub: Some("3".into()),
                member: Some("5".into()),
            }]
        );
    }

    #[test]
    fn lists_compare_by_index_when_their_lengths_match() {
        let manifest = json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}});
        let live = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 8443}]}});
        let found = drift(&manifest, &live);
        assert_eq!(paths(&found), ["/spec/ports/1/port"]);
        assert_eq!(found[0].member.as_deref(), Some("8443"));

        let live = json!({"spec": {"ports": [{"port": 80}]}});
        let found = drift(&manifest, &live);
        assert_eq!(paths(&found), ["/spec/ports"]);
        assert_eq!(
            found[0].hub.as_deref(),
            Some(r#"[{"port":80},{"port":443}]"#)
        );
        assert_eq!(found[0].member.as_deref(), Some(r#"[{"port":80}]"#));
    }

    #[test]
    fn missing_fields_labels_and_escaping() {
        let manifest = json!({"metadata": {"name": "a", "generation": 4,
                "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/managed-by": "x"},
                "annotations": {"a~b": "1"}},
            "data": {"k": "v", "gone": "x", "unset": null},
            "spec": {"empty": {}, "list": [], "deep": {"x": 1}}});
        let live = json!({"metadata": {"name": "a", "generation": 9,
                "labels": {"app.kubernetes.io/name": "api", "app.kubernetes.io/managed-by": "flotilla"}},
            "data": {"k": "v"}});
        let found = drift(&manifest, &live);
        assert_eq!(
            paths(&found),
            [
                "/data/gone",
                "/metadata/annotations/a~0b",
                "/metadata/labels/app.kubernetes.io~1name",
                "/spec/deep/x",
            ]
        );
        let gone = found.iter().find(|d| d.path == "/data/gone").unwrap();
        assert_eq!(gone.hub.as_deref(), Some(r#""x""#));
        assert_eq!(gone.member, None);
    }

    #[test]
    fn numbers_compare_by_value() {
        assert_eq!(
            drift(&json!({"spec": {"x": 1}}), &json!({"spec": {"x": 1.0}})),
            []
        );
        assert_eq!(
            paths(&drift(
                &json!({"spec": {"x": 1}}),
                &json!({"spec": {"x": "1"}})
            )),
            ["/spec/x"]
        );
    }
}
