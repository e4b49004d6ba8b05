//! The `scale` subresource's view of an object: an `autoscaling/v1` Scale.
//!
//! ```text
//!  object ─► view(): {metadata, spec.replicas ← specReplicasPath,
//!                     status.replicas ← statusReplicasPath, status.selector}
//!  Scale  ─► set(): specReplicasPath ← spec.replicas ─► an update of the object
//! ```

use serde_json::{Value, json};

use crate::http::error::{ApiError, ApiResult};
use crate::registry::resources::ScalePaths;

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
}

fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path).try_fold(object, |v, s| v.get(s))
}

/// Sets the value at a simple path (`.spec.replicas`), creating objects on the way.
pub fn set(object: &mut Value, path: &str, value: Value) -> ApiResult<()> {
    let parts: Vec<&str> = segments(path).collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err(ApiError::internal(format!(
            "the scale path {path:?} is empty"
        )));
    };
    let mut at = object;
    for part in parents {
        if !at[*part].is_object() {
            at[*part] = json!({});
        }
        at = &mut at[*part];
    }
    at[*last] = value;
    Ok(())
}

/// A label selector as a string (`app=web,tier in (a,b)`), from a `LabelSelector` object.
fn selector_string(selector: &Value) -> String {
    let mut terms: Vec<String> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or("");
        let values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match expression["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            _ => format!("!{key}"),
        });
    }
    terms.join(",")
}

/// The Scale of an object.
pub fn view(object: &Value, paths: &ScalePaths) -> Value {
    let meta = &object["metadata"];
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = meta.get(field) {
            metadata.insert(field.into(), value.clone());
        }
    }
    let number = |path: &str| lookup(object, path).and_then(Value::as_i64).unwrap_or(0);
    let selector = match &paths.label_selector {
        Some(path) => lookup(object, path)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        None => selector_string(&object["spec"]["selector"]),
    };
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata,
        "spec": {"replicas": number(&paths.spec_replicas)},
        "status": {"replicas": number(&paths.status_replicas), "selector": selector}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_seen_and_set_through_its_scale() {
        let mut deployment = json!({"metadata": {"name": "web", "namespace": "a", "uid": "u", "resourceVersion": "7", "labels": {"x": "y"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "canary", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 2}});
        let paths = ScalePaths::default();
        assert_eq!(
            view(&deployment, &paths),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "web", "namespace": "a", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=web,tier in (a,b),!canary"}})
        );
        set(&mut deployment, &paths.spec_replicas, json!(5)).unwrap();
        assert_eq!(deployment["spec"]["replicas"], 5);
    }

    #[test]
    fn custom_paths_and_missing_values() {
        let paths = ScalePaths {
            spec_replicas: ".spec.instances".into(),
            status_replicas: ".status.ready".into(),
            label_selector: Some(".status.selector".into()),
        };
        let mut object = json!({"metadata": {"name": "db"}, "status": {"selector": "app=db"}});
        assert_eq!(view(&object, &paths)["spec"]["replicas"], 0);
        assert_eq!(view(&object, &paths)["status"]["selector"], "app=db");
        set(&mut object, ".spec.instances", json!(2)).unwrap();
        assert_eq!(object["spec"]["instances"], 2);
        assert!(set(&mut object, "", json!(1)).is_err());
    }
}
