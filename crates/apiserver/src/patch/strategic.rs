//! Strategic merge patch for the built-in kinds, driven by the patch strategies and merge
//! keys of the generated Kubernetes v1.32 schema (`x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`).
//!
//! ```text
//!  original ─┐
//!  patch ────┼─► merge(): objects merge key by key (null deletes); lists with strategy
//!  schema ───┘   `merge` merge their items by the merge key (or as sets of primitives),
//!                every other list is replaced; directives: $patch (replace | delete |
//!                merge), $setElementOrder/<list>, $deleteFromPrimitiveList/<list>,
//!                $retainKeys
//! ```

use serde_json::{Map, Value};

use crate::admission::schema::resolve;
use crate::http::error::{ApiError, ApiResult};

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(422, crate::http::error::Reason::Invalid, message.into())
}

/// Applies a strategic merge patch to `original` (an object of the kind whose schema is
/// `schema`).
pub fn apply(original: &Value, patch: &Value, schema: &Value) -> ApiResult<Value> {
    if !patch.is_object() {
        return Err(ApiError::bad_request(
            "a strategic merge patch must be a JSON object",
        ));
    }
    Ok(merge_object(original.as_object(), patch, schema)?.unwrap_or(Value::Object(Map::new())))
}

/// Merges `patch` (an object) into `original`; `None` when the patch deletes the object.
fn merge_object(
    original: Option<&Map<String, Value>>,
    patch: &Value,
    schema: &Value,
) -> ApiResult<Option<Value>> {
    let schema = resolve(schema);
    let Some(patch_map) = patch.as_object() else {
        return Ok(Some(patch.clone()));
    };
    match patch_map.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => return Ok(Some(strip_directives(patch))),
        Some("merge") | None => {}
        Some(other) => {
            return Err(invalid(format!(
                "unknown patch directive $patch: {other:?}"
            )));
        }
    }
    let mut result: Map<String, Value> = original.cloned().unwrap_or_default();
    let properties = schema["properties"].as_object();
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    // Primitive deletions and element orders apply after the fields are merged.
    let mut orders = Vec::new();
    for (key, value) in patch_map {
        if key == "$patch" || key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER) {
            orders.push((field.to_owned(), value.clone()));
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_FROM) {
            let removed = value.as_array().cloned().unwrap_or_default();
            if let Some(list) = result.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|item| !removed.contains(item));
            }
            continue;
        }
        if value.is_null() {
            result.remove(key);
            continue;
        }
        let field = properties
            .and_then(|p| p.get(key))
            .or(additional)
            .unwrap_or(&Value::Null);
        let merged = merge_value(result.get(key), value, field)?;
        match merged {
            Some(merged) => {
                result.insert(key.clone(), merged);
            }
            None => {
                result.remove(key);
            }
        }
    }
    for (field, order) in orders {
        let field_schema = properties
            .and_then(|p| p.get(&field))
            .unwrap_or(&Value::Null);
        if let Some(list) = result.get_mut(&field).and_then(Value::as_array_mut) {
            reorder(
                list,
                &order,
                resolve(field_schema)["x-kubernetes-patch-merge-key"].as_str(),
            );
        }
    }
    if let Some(retain) = patch_map.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        result.retain(|key, _| keep.contains(&key.as_str()));
    }
    Ok(Some(Value::Object(result)))
}

/// Merges one field's patch value into its original value.
fn merge_value(
    original: Option<&Value>,
    patch: &Value,
    schema: &Value,
) -> ApiResult<Option<Value>> {
    let schema_node = resolve(schema);
    match patch {
        Value::Object(_) => {
            // A map or struct merges; anything else there is replaced.
            let original = original.and_then(Value::as_object);
            merge_object(original, patch, schema)
        }
        Value::Array(items) => {
            let strategy = schema["x-kubernetes-patch-strategy"]
                .as_str()
                .or_else(|| schema_node["x-kubernetes-patch-strategy"].as_str())
                .unwrap_or("");
            if !strategy.split(',').any(|s| s == "merge") {
                return Ok(Some(Value::Array(
                    items.iter().map(strip_directives).collect(),
                )));
            }
            let key = schema["x-kubernetes-patch-merge-key"]
                .as_str()
                .or_else(|| schema_node["x-kubernetes-patch-merge-key"].as_str());
            let original = original
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            merge_list(original, items, key, &schema_node["items"])
                .map(|list| Some(Value::Array(list)))
        }
        other => Ok(Some(other.clone())),
    }
}

/// Merges a patch list into a list whose strategy is `merge`.
fn merge_list(
    mut original: Vec<Value>,
    patch: &[Value],
    key: Option<&str>,
    item_schema: &Value,
) -> ApiResult<Vec<Value>> {
    // `{"$patch": "replace"}` in the list replaces it whole.
    if patch.iter().any(|p| p["$patch"] == "replace") {
        return Ok(patch
            .iter()
            .filter(|p| p["$patch"] != "replace")
            .map(strip_directives)
            .collect());
    }
    let Some(key) = key else {
        // A set of primitives: add what is missing.
        for item in patch {
            if !original.contains(item) {
                original.push(item.clone());
            }
        }
        return Ok(original);
    };
    for item in patch {
        let Some(id) = item.get(key) else {
            return Err(invalid(format!(
                "a list item of the patch has no merge key {key:?}: {item}"
            )));
        };
        let at = original.iter().position(|o| o.get(key) == Some(id));
        match (item["$patch"].as_str(), at) {
            (Some("delete"), Some(at)) => {
                original.remove(at);
            }
            (Some("delete"), None) => {}
            (_, Some(at)) => {
                let merged = merge_object(original[at].as_object(), item, item_schema)?;
                match merged {
                    Some(merged) => original[at] = merged,
                    None => {
                        original.remove(at);
                    }
                }
            }
            (_, None) => {
                if let Some(added) = merge_object(None, item, item_schema)? {
                    original.push(added);
                }
            }
        }
    }
    Ok(original)
}

/// Orders `list` as `order` says (items named there first, in that order; the rest after,
/// in their current order).
fn reorder(list: &mut [Value], order: &Value, key: Option<&str>) {
    let Some(order) = order.as_array() else {
        return;
    };
    let id = |v: &Value| match key {
        Some(key) => v.get(key).cloned(),
        None => Some(v.clone()),
    };
    let position = |v: &Value| {
        let wanted = match key {
            Some(key) => order
                .iter()
                .position(|o| o.get(key).is_some() && o.get(key).cloned() == id(v)),
            None => order.iter().position(|o| Some(o.clone()) == id(v)),
        };
        wanted.unwrap_or(usize::MAX)
    };
    list.sort_by_key(position);
}

/// A patch value without its directives (what remains is plain data).
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::discovery::openapi;

    fn schema(name: &str) -> &'static Value {
        &openapi::builtin_schemas()[name]
    }

    const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";
    const POD: &str = "io.k8s.api.core.v1.Pod";
    const CONFIGMAP: &str = "io.k8s.api.core.v1.ConfigMap";
    const SERVICE: &str = "io.k8s.api.core.v1.Service";

    /// A pod spec inside a Deployment.
    fn deploy(spec: Value) -> Value {
        json!({"spec": {"template": {"spec": spec}}})
    }

    /// (what, kind, original, patch, expected) — the expected results are written from the
    /// documented semantics of strategic merge patch, not produced by this code.
    fn cases() -> Vec<(&'static str, &'static str, Value, Value, Value)> {
        vec![
            (
                "a scalar is replaced",
                DEPLOYMENT,
                json!({"spec": {"replicas": 1}}),
                json!({"spec": {"replicas": 3}}),
                json!({"spec": {"replicas": 3}}),
            ),
            (
                "a field is added",
                DEPLOYMENT,
                json!({}),
                json!({"spec": {"replicas": 2}}),
                json!({"spec": {"replicas": 2}}),
            ),
            (
                "null deletes a field",
                DEPLOYMENT,
                json!({"spec": {"replicas": 1, "paused": true}}),
                json!({"spec": {"paused": null}}),
                json!({"spec": {"replicas": 1}}),
            ),
            (
                "maps merge",
                DEPLOYMENT,
                json!({"metadata": {"labels": {"a": "1"}}}),
                json!({"metadata": {"labels": {"b": "2"}}}),
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            ),
            (
                "null deletes a map key",
                DEPLOYMENT,
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
                json!({"metadata": {"labels": {"b": null}}}),
                json!({"metadata": {"labels": {"a": "1"}}}),
            ),
            (
                "containers merge by name",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}),
                ),
                deploy(json!({"containers": [{"name": "b", "image": "b:2"}]})),
                deploy(
                    json!({"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]}),
                ),
            ),
            (
                "a new container is appended",
                DEPLOYMENT,
                deploy(json!({"containers": [{"name": "a", "image": "a:1"}]})),
                deploy(json!({"containers": [{"name": "c", "image": "c:1"}]})),
                deploy(
                    json!({"containers": [{"name": "a", "image": "a:1"}, {"name": "c", "image": "c:1"}]}),
                ),
            ),
            (
                "$patch delete removes a container",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}),
                ),
                deploy(json!({"containers": [{"name": "a", "$patch": "delete"}]})),
                deploy(json!({"containers": [{"name": "b", "image": "b:1"}]})),
            ),
            (
                "$patch delete of a missing container changes nothing",
                DEPLOYMENT,
                deploy(json!({"containers": [{"name": "a", "image": "a:1"}]})),
                deploy(json!({"containers": [{"name": "z", "$patch": "delete"}]})),
                deploy(json!({"containers": [{"name": "a", "image": "a:1"}]})),
            ),
            (
                "env merges by name inside a merged container",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "Y", "value": "3"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}]}]}),
                ),
            ),
            (
                "an env var is added",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "Z", "value": "9"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Z", "value": "9"}]}]}),
                ),
            ),
            (
                "an env var is deleted",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "$patch": "delete"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}]}),
                ),
            ),
            (
                "container ports merge by containerPort",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}]}]}),
                ),
            ),
            (
                "a port is removed",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 443}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 443, "$patch": "delete"}]}]}),
                ),
                deploy(json!({"containers": [{"name": "a", "ports": [{"containerPort": 80}]}]})),
            ),
            (
                "args are atomic: replaced",
                DEPLOYMENT,
                deploy(json!({"containers": [{"name": "a", "args": ["x", "y"]}]})),
                deploy(json!({"containers": [{"name": "a", "args": ["z"]}]})),
                deploy(json!({"containers": [{"name": "a", "args": ["z"]}]})),
            ),
            (
                "command is atomic: replaced",
                DEPLOYMENT,
                deploy(json!({"containers": [{"name": "a", "command": ["sh"]}]})),
                deploy(json!({"containers": [{"name": "a", "command": ["bash", "-c"]}]})),
                deploy(json!({"containers": [{"name": "a", "command": ["bash", "-c"]}]})),
            ),
            (
                "volumes merge by name",
                DEPLOYMENT,
                deploy(
                    json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}),
                ),
                deploy(json!({"volumes": [{"name": "c", "emptyDir": {}}]})),
                deploy(
                    json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}, {"name": "c", "emptyDir": {}}]}),
                ),
            ),
            (
                "$retainKeys switches a volume's source",
                DEPLOYMENT,
                deploy(json!({"volumes": [{"name": "a", "emptyDir": {}}]})),
                deploy(
                    json!({"volumes": [{"name": "a", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}]}),
                ),
                deploy(json!({"volumes": [{"name": "a", "configMap": {"name": "cm"}}]})),
            ),
            (
                "volume mounts merge by mountPath",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "volumeMounts": [{"mountPath": "/a", "name": "a"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "volumeMounts": [{"mountPath": "/b", "name": "b"}]}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "volumeMounts": [{"mountPath": "/a", "name": "a"}, {"mountPath": "/b", "name": "b"}]}]}),
                ),
            ),
            (
                "resource limits merge as a map",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}}}]}),
                ),
                deploy(
                    json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}),
                ),
            ),
            (
                "init containers merge by name",
                DEPLOYMENT,
                deploy(json!({"initContainers": [{"name": "i", "image": "i:1"}]})),
                deploy(json!({"initContainers": [{"name": "i", "image": "i:2"}]})),
                deploy(json!({"initContainers": [{"name": "i", "image": "i:2"}]})),
            ),
            (
                "image pull secrets merge by name",
                DEPLOYMENT,
                deploy(json!({"imagePullSecrets": [{"name": "a"}]})),
                deploy(json!({"imagePullSecrets": [{"name": "b"}]})),
                deploy(json!({"imagePullSecrets": [{"name": "a"}, {"name": "b"}]})),
            ),
            (
                "tolerations have no strategy: replaced",
                DEPLOYMENT,
                deploy(json!({"tolerations": [{"key": "a", "operator": "Exists"}]})),
                deploy(json!({"tolerations": [{"key": "b", "operator": "Exists"}]})),
                deploy(json!({"tolerations": [{"key": "b", "operator": "Exists"}]})),
            ),
            (
                "template labels merge",
                DEPLOYMENT,
                json!({"spec": {"template": {"metadata": {"labels": {"app": "web"}}}}}),
                json!({"spec": {"template": {"metadata": {"labels": {"tier": "front"}}}}}),
                json!({"spec": {"template": {"metadata": {"labels": {"app": "web", "tier": "front"}}}}}),
            ),
            (
                "selector matchLabels merge",
                DEPLOYMENT,
                json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}}),
                json!({"spec": {"selector": {"matchLabels": {"tier": "front"}}}}),
                json!({"spec": {"selector": {"matchLabels": {"app": "web", "tier": "front"}}}}),
            ),
            (
                "finalizers merge as a set",
                DEPLOYMENT,
                json!({"metadata": {"finalizers": ["a", "b"]}}),
                json!({"metadata": {"finalizers": ["b", "c"]}}),
                json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            ),
            (
                "$deleteFromPrimitiveList removes finalizers",
                DEPLOYMENT,
                json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
                json!({"metadata": {"finalizers": ["a", "c"]}}),
            ),
            (
                "$setElementOrder orders containers",
                DEPLOYMENT,
                deploy(json!({"containers": [{"name": "a"}, {"name": "b"}]})),
                deploy(
                    json!({"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "a", "image": "a:2"}]}),
                ),
                deploy(json!({"containers": [{"name": "b"}, {"name": "a", "image": "a:2"}]})),
            ),
            (
                "$setElementOrder orders finalizers",
                DEPLOYMENT,
                json!({"metadata": {"finalizers": ["a", "b"]}}),
                json!({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}}),
                json!({"metadata": {"finalizers": ["b", "a"]}}),
            ),
            (
                "$patch replace replaces an object",
                DEPLOYMENT,
                json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
                json!({"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}}),
                json!({"spec": {"strategy": {"type": "Recreate"}}}),
            ),
            (
                "$patch replace in a list replaces it",
                DEPLOYMENT,
                deploy(json!({"containers": [{"name": "a"}, {"name": "b"}]})),
                deploy(json!({"containers": [{"name": "c"}, {"$patch": "replace"}]})),
                deploy(json!({"containers": [{"name": "c"}]})),
            ),
            (
                "$patch delete removes a map",
                DEPLOYMENT,
                json!({"metadata": {"name": "x", "annotations": {"a": "1"}}}),
                json!({"metadata": {"annotations": {"$patch": "delete"}}}),
                json!({"metadata": {"name": "x"}}),
            ),
            (
                "$patch merge is the default",
                DEPLOYMENT,
                json!({"metadata": {"labels": {"a": "1"}}}),
                json!({"metadata": {"labels": {"$patch": "merge", "b": "2"}}}),
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            ),
            (
                "owner references merge by uid",
                DEPLOYMENT,
                json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}),
                json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "renamed"}, {"uid": "2", "name": "b"}]}}),
                json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "renamed"}, {"uid": "2", "name": "b"}]}}),
            ),
            (
                "a list missing from the original is created",
                DEPLOYMENT,
                deploy(json!({})),
                deploy(json!({"containers": [{"name": "a", "image": "a:1"}]})),
                deploy(json!({"containers": [{"name": "a", "image": "a:1"}]})),
            ),
            (
                "an empty patch changes nothing",
                DEPLOYMENT,
                json!({"spec": {"replicas": 1}}),
                json!({}),
                json!({"spec": {"replicas": 1}}),
            ),
            (
                "configmap data merges and deletes keys",
                CONFIGMAP,
                json!({"data": {"a": "1", "b": "2"}}),
                json!({"data": {"b": null, "c": "3"}}),
                json!({"data": {"a": "1", "c": "3"}}),
            ),
            (
                "service ports merge by port",
                SERVICE,
                json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}),
                json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
                json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}}),
            ),
            (
                "pod containers merge by name",
                POD,
                json!({"spec": {"containers": [{"name": "a", "image": "a:1"}]}}),
                json!({"spec": {"containers": [{"name": "a", "imagePullPolicy": "Always"}]}}),
                json!({"spec": {"containers": [{"name": "a", "image": "a:1", "imagePullPolicy": "Always"}]}}),
            ),
            (
                "fields unknown to the schema merge as maps",
                POD,
                json!({"spec": {"extra": {"a": 1}}}),
                json!({"spec": {"extra": {"b": 2}}}),
                json!({"spec": {"extra": {"a": 1, "b": 2}}}),
            ),
            (
                "a merged container's nested object merges",
                DEPLOYMENT,
                deploy(
                    json!({"containers": [{"name": "a", "securityContext": {"runAsUser": 1, "privileged": false}}]}),
                ),
                deploy(json!({"containers": [{"name": "a", "securityContext": {"runAsUser": 2}}]})),
                deploy(
                    json!({"containers": [{"name": "a", "securityContext": {"runAsUser": 2, "privileged": false}}]}),
                ),
            ),
        ]
    }

    #[test]
    fn strategic_merge_patch_cases() {
        let cases = cases();
        assert!(cases.len() >= 40, "{} cases", cases.len());
        for (what, kind, original, patch, expected) in cases {
            let got =
                apply(&original, &patch, schema(kind)).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn bad_patches_are_refused() {
        let original = deploy(json!({"containers": [{"name": "a"}]}));
        let no_key = deploy(json!({"containers": [{"image": "x"}]}));
        assert_eq!(
            apply(&original, &no_key, schema(DEPLOYMENT))
                .unwrap_err()
                .code,
            422
        );
        let unknown = json!({"spec": {"$patch": "explode"}});
        assert_eq!(
            apply(&original, &unknown, schema(DEPLOYMENT))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            apply(&original, &json!([1]), schema(DEPLOYMENT))
                .unwrap_err()
                .code,
            400
        );
    }
}
