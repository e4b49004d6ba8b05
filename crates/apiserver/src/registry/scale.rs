//! The `scale` subresource's view of an object: an `autoscaling/v1` Scale.
//!
//! ```text
//!  object ─► view(): {metadata, spec.replicas ← specReplicasPath,
//!                     status.replicas ← statusReplicasPath, status.selector}
//!  Scale  ─► set(): specReplicasPath ← spec.replicas ─► an update of the object
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::http::error::{ApiError, ApiResult};
use crate::patch;
use crate::registry::object::{self, meta_str};

use crate::api::Api;
use crate::http::request::{
    Query, content_type, field_manager, parse_body, parse_resource_version,
};
use crate::http::response::json_response;
use crate::http::route::Target;
use crate::registry::store::{FieldOwner, conflicted, retrying};

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

impl Api {
    /// The `scale` subresource: an `autoscaling/v1` Scale view of the object's replicas;
    /// writing it (PUT, or a merge or JSON patch of the view) sets the desired replicas.
    pub(crate) async fn scale(
        &self,
        target: &Target,
        name: &str,
        method: Method,
        query: &Query,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> ApiResult<Response> {
        let rt = &target.rt;
        let paths = rt.scale.clone().unwrap_or_default();
        let namespace = target.namespace.clone().unwrap_or_default();
        let parent = Target {
            user: target.user.clone(),
            rt: rt.clone(),
            namespace: target.namespace.clone(),
            name: Some(name.to_owned()),
            sub: None,
        };
        let conditional = AtomicBool::new(false);
        let raced = |e: &ApiError| conflicted(e) && !conditional.load(Ordering::Relaxed);
        let (method, paths, namespace, parent) = (&method, &paths, &namespace, &parent);
        let conditional = &conditional;
        retrying(raced, || async move {
            let (current, revision) = self.get(rt, namespace, name).await?;
            let shown = view(&current, paths);
            let wanted = match *method {
                Method::GET => return Ok(json_response(StatusCode::OK, &shown)),
                Method::PUT => parse_body(body, headers)?,
                Method::PATCH => {
                    let patch: Value = serde_json::from_slice(body).map_err(|e| {
                        ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                    })?;
                    match content_type(headers) {
                        "application/merge-patch+json" => patch::merge(&shown, &patch),
                        "application/json-patch+json" => patch::json_patch(&shown, &patch)?,
                        // A Scale has no lists: its strategic merge is a merge patch with
                        // the directives (`$patch`, `$retainKeys`) read. Built-in kinds only,
                        // as for their objects.
                        crate::discovery::openapi::STRATEGIC if rt.schema.is_none() => {
                            crate::patch::strategic::apply(&shown, &patch, &Value::Null)?
                        }
                        other => {
                            return Err(ApiError::unsupported_media_type(format!(
                                "the patch type {other:?} is not supported on scale; use application/merge-patch+json, application/json-patch+json or (built-in kinds) application/strategic-merge-patch+json"
                            )));
                        }
                    }
                }
                ref other => return Err(ApiError::method_not_allowed(other.as_str(), "scale")),
            };
            let given = match meta_str(&wanted, "resourceVersion") {
                "" => false,
                rv if parse_resource_version(rv)? != revision.get() => {
                    conditional.store(true, Ordering::Relaxed);
                    return Err(ApiError::conflict(&rt.group, &rt.plural, name));
                }
                _ => true,
            };
            let replicas = wanted["spec"]["replicas"].as_i64().ok_or_else(|| {
                ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![crate::http::error::Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value: an integer".into(),
                        field: "spec.replicas".into(),
                    }],
                )
            })?;
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![crate::http::error::Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!(
                            "Invalid value: {replicas}: must be greater than or equal to 0"
                        ),
                        field: "spec.replicas".into(),
                    }],
                ));
            }
            let mut updated = current.clone();
            set(&mut updated, &paths.spec_replicas, json!(replicas))?;
            object::metadata_mut(&mut updated)?
                .insert("resourceVersion".into(), json!(revision.get().to_string()));
            let manager = field_manager(query, headers)?;
            conditional.store(given, Ordering::Relaxed);
            let owner = FieldOwner::Update(&manager);
            let (object, _, _) = self.update(parent, name, query, updated, owner).await?;
            Ok(json_response(StatusCode::OK, &view(&object.into_value(), paths)))
        })
        .await
    }
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
