//! Objects checked against their kind's OpenAPI v3 schema: fields the schema does not know.
//!
//! ```text
//!  request object ─► Schema::for_type(rt) ─► prune(): unknown fields removed, their paths
//!                    (built-in: generated table,         returned ─► fieldValidation:
//!                     custom: the CRD's schema)                       Strict 400 | Warn | Ignore
//! ```
//!
//! A built-in kind's object keeps only the fields of its Go type, as the Kubernetes API
//! server decodes it; a custom resource is pruned to its structural schema. Either way the
//! store never holds a field the schema does not describe, and `fieldValidation` decides
//! whether a request naming one fails, warns or passes silently.

use serde_json::{Map, Value};

use crate::openapi;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// How a request treats unknown fields (the `fieldValidation` query parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    /// Fail the request, naming every unknown field.
    Strict,
    /// Drop unknown fields and warn about each (the default).
    Warn,
    /// Drop unknown fields silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query parameter; absent means `Warn`.
    pub fn parse(value: Option<&str>) -> ApiResult<Self> {
        match value {
            None | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid fieldValidation {other:?}: must be one of Ignore, Warn or Strict"
            ))),
        }
    }
}

/// The schema an object of some kind is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Schema<'a> {
    root: &'a Value,
    /// Built-in schemas describe free-form values (`RawExtension`, `FieldsV1`) as objects
    /// without properties; a structural schema of a custom resource means "no fields".
    builtin: bool,
}

impl<'a> Schema<'a> {
    /// The schema of `rt`'s objects, if the server has one.
    pub fn for_type(rt: &'a ResourceType) -> Option<Schema<'a>> {
        if let Some(schema) = &rt.schema {
            return Some(Schema {
                root: &schema.0,
                builtin: false,
            });
        }
        let name = openapi::builtin_definition(&rt.group, &rt.version, &rt.kind)?;
        Some(Schema {
            root: &openapi::builtin_schemas()[name],
            builtin: true,
        })
    }

    /// Removes the fields of `object` that the schema does not describe and returns their
    /// paths (`spec.template.spec.containers[0].colour`), fields in key order at each level.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        let Some(map) = object.as_object_mut() else {
            return unknown;
        };
        let properties = resolve(self.root)["properties"].as_object();
        let meta = &openapi::builtin_schemas()[OBJECT_META];
        let mut path = String::new();
        map.retain(|key, value| {
            let field = match key.as_str() {
                "apiVersion" | "kind" => return true,
                "metadata" => Some(meta),
                _ => properties.and_then(|p| p.get(key)),
            };
            match field {
                Some(field) => {
                    path.clear();
                    path.push_str(key);
                    // Metadata is ObjectMeta for every kind: a built-in schema.
                    let builtin = self.builtin || key == "metadata";
                    walk(field, value, &mut path, builtin, &mut unknown);
                    true
                }
                None if self.preserves(self.root) => true,
                None => {
                    unknown.push(key.clone());
                    false
                }
            }
        });
        unknown
    }

    fn preserves(&self, schema: &Value) -> bool {
        preserves_unknown(resolve(schema), self.builtin)
    }
}

/// The schema a node stands for: `$ref` and a single `allOf` reference are followed.
fn resolve(schema: &Value) -> &Value {
    let mut schema = schema;
    for _ in 0..8 {
        let target = schema["$ref"]
            .as_str()
            .or_else(|| schema["allOf"][0]["$ref"].as_str())
            .and_then(|r| r.strip_prefix("#/components/schemas/"));
        match target.and_then(|name| openapi::builtin_schemas().get(name)) {
            Some(next) => schema = next,
            None => break,
        }
    }
    schema
}

/// Whether unknown fields under an object node are kept.
fn preserves_unknown(schema: &Value, builtin: bool) -> bool {
    if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true)
        || schema["x-kubernetes-embedded-resource"] == Value::Bool(true)
        || schema["additionalProperties"] == Value::Bool(true)
    {
        return true;
    }
    // A built-in object with neither properties nor additionalProperties is free-form.
    builtin && schema.get("properties").is_none() && schema.get("additionalProperties").is_none()
}

fn walk(
    schema: &Value,
    value: &mut Value,
    path: &mut String,
    builtin: bool,
    unknown: &mut Vec<String>,
) {
    let schema = resolve(schema);
    match value {
        Value::Object(map) => {
            if preserves_unknown(schema, builtin) && schema.get("properties").is_none() {
                return;
            }
            walk_object(schema, map, path, builtin, unknown);
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else {
                return;
            };
            let base = path.len();
            for (i, item) in items.iter_mut().enumerate() {
                path.push_str(&format!("[{i}]"));
                walk(item_schema, item, path, builtin, unknown);
                path.truncate(base);
            }
        }
        _ => {}
    }
}

fn walk_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &mut String,
    builtin: bool,
    unknown: &mut Vec<String>,
) {
    let properties = schema["properties"].as_object();
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let keep_unknown = preserves_unknown(schema, builtin);
    let base = path.len();
    map.retain(|key, value| {
        let field = properties.and_then(|p| p.get(key)).or(additional);
        if let Some(field) = field {
            path.push('.');
            path.push_str(key);
            walk(field, value, path, builtin, unknown);
            path.truncate(base);
            return true;
        }
        if keep_unknown {
            return true;
        }
        unknown.push(if base == 0 {
            key.clone()
        } else {
            format!("{}.{key}", &path[..base])
        });
        false
    });
}

/// Applies `validation` to the unknown fields `prune` found: `Strict` fails the request
/// as Kubernetes does; otherwise the warnings to send (none under `Ignore`).
pub fn judge(unknown: Vec<String>, validation: FieldValidation) -> ApiResult<Vec<String>> {
    if unknown.is_empty() {
        return Ok(unknown);
    }
    let messages = unknown.iter().map(|path| format!("unknown field {path:?}"));
    match validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.collect::<Vec<_>>().join(", ")
        ))),
        FieldValidation::Warn => Ok(messages.collect()),
        FieldValidation::Ignore => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::resources::{Registry, Schema as TypeSchema};

    fn builtin(group: &str, version: &str, plural: &str) -> Arc<ResourceType> {
        Registry::builtin().get(group, version, plural).unwrap()
    }

    #[test]
    fn a_deployment_keeps_its_fields_and_loses_unknown_ones_at_every_depth() {
        let rt = builtin("apps", "v1", "deployments");
        let mut object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}, "colour": "blue",
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 3, "replica": 4,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "a", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP", "nmae": "x"}],
                         "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                        {"name": "b", "image": "busybox", "imagePullPolicy": "Always", "colour": "red"}]}}},
            "extra": true,
        });
        let unknown = Schema::for_type(&rt).unwrap().prune(&mut object);
        assert_eq!(
            unknown,
            [
                "extra",
                "metadata.colour",
                "spec.replica",
                "spec.template.spec.containers[0].ports[0].nmae",
                "spec.template.spec.containers[1].colour",
            ]
        );
        assert_eq!(
            object,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"},
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
                "spec": {"replicas": 3,
                    "selector": {"matchLabels": {"app": "web"}},
                    "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [
                            {"name": "a", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                             "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                            {"name": "b", "image": "busybox", "imagePullPolicy": "Always"}]}}},
            })
        );
    }

    #[test]
    fn maps_of_strings_and_free_form_values_keep_every_key() {
        let rt = builtin("", "v1", "configmaps");
        let mut object = json!({"metadata": {"name": "c", "annotations": {"any.key/x": "1"}},
            "data": {"anything": "goes", "at": "all"}, "binaryData": {"b": "AAE="}, "immutable": false});
        let before = object.clone();
        assert!(Schema::for_type(&rt).unwrap().prune(&mut object).is_empty());
        assert_eq!(object, before);
        // A CRD's schema is a RawExtension-like free-form value inside a built-in kind.
        let crd = builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let mut object = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}});
        let before = object.clone();
        assert_eq!(
            Schema::for_type(&crd).unwrap().prune(&mut object),
            Vec::<String>::new()
        );
        assert_eq!(object, before);
    }

    #[test]
    fn custom_resources_are_pruned_to_their_structural_schema() {
        let mut rt = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        rt.schema = Some(TypeSchema(Arc::new(
            json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "empty": {"type": "object"}}},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}),
        )));
        let mut object = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "bogus": 1},
            "spec": {"size": 3, "colour": "red", "tags": [{"k": "a", "v": "b"}], "labels": {"x": "y"},
                "free": {"deep": {"er": 1}}, "empty": {"gone": 1}},
            "status": {"ready": true, "phase": "x"}, "other": 1});
        let unknown = Schema::for_type(&rt).unwrap().prune(&mut object);
        assert_eq!(
            unknown,
            [
                "metadata.bogus",
                "other",
                "spec.colour",
                "spec.empty.gone",
                "spec.tags[0].v",
                "status.phase"
            ]
        );
        assert_eq!(
            object,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 3, "tags": [{"k": "a"}], "labels": {"x": "y"}, "free": {"deep": {"er": 1}}, "empty": {}},
            "status": {"ready": true}})
        );
    }

    #[test]
    fn a_root_that_preserves_unknown_fields_keeps_them() {
        let mut rt = ResourceType::new("example.com", "v1", "Blob", "blobs", true);
        rt.schema = Some(TypeSchema(Arc::new(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        )));
        let mut object = json!({"metadata": {"name": "b"}, "anything": {"at": "all"}});
        assert!(Schema::for_type(&rt).unwrap().prune(&mut object).is_empty());
        assert_eq!(object["anything"]["at"], "all");
    }

    #[test]
    fn field_validation_modes() {
        assert_eq!(FieldValidation::parse(None).unwrap(), FieldValidation::Warn);
        assert_eq!(
            FieldValidation::parse(Some("Strict")).unwrap(),
            FieldValidation::Strict
        );
        assert_eq!(
            FieldValidation::parse(Some("Ignore")).unwrap(),
            FieldValidation::Ignore
        );
        assert_eq!(
            FieldValidation::parse(Some("strict")).unwrap_err().code,
            400
        );
        let unknown = || vec!["spec.a".to_owned(), "b".to_owned()];
        let err = judge(unknown(), FieldValidation::Strict).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            r#"strict decoding error: unknown field "spec.a", unknown field "b""#
        );
        assert_eq!(
            judge(unknown(), FieldValidation::Warn).unwrap(),
            [r#"unknown field "spec.a""#, r#"unknown field "b""#]
        );
        assert!(
            judge(unknown(), FieldValidation::Ignore)
                .unwrap()
                .is_empty()
        );
        assert!(
            judge(Vec::new(), FieldValidation::Strict)
                .unwrap()
                .is_empty()
        );
    }
}
