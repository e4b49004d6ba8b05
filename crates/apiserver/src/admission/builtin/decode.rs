//! Whether a built-in object decodes into its kind's Go types, as kube-apiserver's JSON
//! decoder reads it: a value of the wrong JSON type (`replicas: "three"`), a fraction or an
//! out-of-range number in an integer field, an int-or-string that is neither, a quantity
//! that does not parse, bytes that are not base64. The answer is a 400 in the decoder's
//! words, naming the field; nothing is written.
//!
//! ```text
//!  object ─► walk(kind schema, value)        types from the generated schemas:
//!              null ─► the Go zero value       integer int32/int64, number, boolean,
//!              mismatch ─► 400 BadRequest      string (byte: base64), array, object,
//!              ok ─► fields, items, maps       int-or-string, Quantity
//! ```

use std::ops::Range;

use serde_json::Value;

use crate::admission::schema::{Facts, Schema, builtin_node, reference, resolve, resolved_facts};
use crate::discovery::openapi;
use crate::http::error::{ApiError, ApiResult};

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const QUANTITY_PATTERN: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Checks that `object` decodes into the built-in kind `kind` of `group`/`version`; the
/// first value that does not is a 400 naming its field.
pub(crate) fn check(group: &str, version: &str, kind: &str, object: &Value) -> ApiResult<()> {
    let Some(definition) = openapi::builtin_definition(group, version, kind) else {
        return Ok(());
    };
    let Some(schema) = openapi::builtin_schema(definition) else {
        return Ok(());
    };
    let mut walk = Walk {
        path: Vec::new(),
        owner: short_name(definition),
    };
    // Kubernetes names the version alone (`in version "v1"`), the group left out.
    walk.value(schema, object).map_err(|problem| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {problem}"
        ))
    })
}

/// [`Schema::prune`] of a built-in kind's schema and then [`check`], in one walk of the
/// object: its unknown fields removed and returned (in the order `prune` finds them), and
/// what `check` answers of the pruned object. The fields `prune` removes are those `check`
/// does not read (no property, no additionalProperties), so checking as the walk prunes
/// finds what checking afterwards finds; after the first problem the walk only prunes.
pub(crate) fn prune_and_check(
    group: &str,
    version: &str,
    kind: &str,
    object: &mut Value,
) -> (Vec<String>, ApiResult<()>) {
    let sequential = |object: &mut Value| {
        let unknown = match openapi::builtin_kind_schema(group, version, kind) {
            Some(root) => Schema::builtin_root(root).prune(object),
            None => Vec::new(),
        };
        (unknown, check(group, version, kind, object))
    };
    let Some(definition) = openapi::builtin_definition(group, version, kind) else {
        return sequential(object);
    };
    let Some(root) = openapi::builtin_schema(definition) else {
        return sequential(object);
    };
    let (_, facts) = resolved_facts(root);
    // The one walk covers the usual root (a struct of a built-in kind, as every kind's is);
    // anything else is walked twice, as before.
    let usual = object.is_object()
        && facts.type_name == Some("object")
        && !facts.int_or_string
        && facts.additional.is_none()
        && reference(root).is_none()
        && openapi::builtin_schema(OBJECT_META).is_some();
    if !usual {
        return sequential(object);
    }
    let mut walk = Fused {
        path: String::new(),
        keys: Vec::new(),
        owner: definition,
        unknown: Vec::new(),
        problem: None,
    };
    walk.root(&facts, object);
    let Fused {
        unknown, problem, ..
    } = walk;
    let result = match problem {
        // Kubernetes names the version alone (`in version "v1"`), the group left out.
        Some(problem) => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {problem}"
        ))),
        None => Ok(()),
    };
    (unknown, result)
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The walk of [`prune_and_check`]: [`Schema::prune`]'s walk, checking each value as
/// [`Walk::value`] does while it has found no problem.
struct Fused<'s> {
    /// The pruned field's path as `prune` names it (`spec.containers[0].name`).
    path: String,
    /// Where the keys are in `path`: the check's path is them joined by `.` (no indices).
    keys: Vec<Range<usize>>,
    /// The definition of the Go struct that holds the field being read, its name made
    /// short ([`Walk::owner`]) only for a problem.
    owner: &'s str,
    unknown: Vec<String>,
    /// The first value that does not decode, in the check's words.
    problem: Option<String>,
}

impl Fused<'static> {
    /// The object's own fields: apiVersion and kind kept (and checked), metadata as
    /// ObjectMeta, the rest by the kind's properties; unknown ones pruned.
    fn root(&mut self, facts: &Facts<'static>, object: &mut Value) {
        let Some(map) = object.as_object_mut() else {
            return;
        };
        let properties = facts.properties;
        let preserves = facts.preserves_unknown(true);
        let meta = openapi::builtin_schema(OBJECT_META).unwrap_or(&Value::Null);
        map.retain(|key, value| {
            let declared = properties.and_then(|p| p.get(key));
            self.path.clear();
            self.path.push_str(key);
            self.keys.clear();
            self.keys.push(0..key.len());
            match (key.as_str(), declared) {
                ("apiVersion" | "kind", declared) => {
                    if let Some(schema) = declared {
                        self.check_whole(schema, value);
                    }
                    true
                }
                ("metadata", declared) => {
                    // Pruned as ObjectMeta; checked as the kind's property (the same node,
                    // reached through its reference, which names the Go struct).
                    let definition = declared.map(|d| match builtin_node(d) {
                        Some(node) => node.reference,
                        None => reference(d),
                    });
                    self.value(meta, value, declared.is_some(), definition);
                    true
                }
                (_, Some(schema)) => {
                    self.value(schema, value, true, None);
                    true
                }
                (_, None) if preserves => true,
                (_, None) => {
                    self.unknown.push(key.clone());
                    false
                }
            }
        });
    }

    /// Walks `value` of `schema`: checks it (if `checking` and nothing was found yet), then
    /// prunes under it as `prune`'s walk does. `definition` stands in for the node's own
    /// reference (metadata's).
    fn value(
        &mut self,
        schema: &'static Value,
        value: &mut Value,
        checking: bool,
        definition: Option<Option<&'static str>>,
    ) {
        let (own, facts) = match builtin_node(schema) {
            Some(node) => (node.reference, node.facts),
            None => (reference(schema), Facts::of(resolve(schema))),
        };
        let definition = definition.unwrap_or(own);
        let mut check_below = false;
        if checking && self.problem.is_none() {
            match self.check_here(definition, &facts, value) {
                Ok(below) => check_below = below,
                Err(problem) => self.problem = Some(problem),
            }
        }
        match value {
            Value::Object(map) => {
                if facts.preserves_unknown(true) && !facts.has_properties {
                    // Not pruned under; checked under as the check alone would.
                    if check_below {
                        self.check_whole(schema, value);
                    }
                    return;
                }
                let properties = facts.properties;
                let additional = facts.additional;
                let keep_unknown = facts.preserves_unknown(true);
                let owner = definition.unwrap_or(self.owner);
                let outer = self.owner;
                let base = self.path.len();
                map.retain(|key, child| {
                    let declared = properties.and_then(|p| p.get(key));
                    if let Some(field) = declared.or(additional) {
                        self.path.push('.');
                        self.path.push_str(key);
                        self.keys.push(base + 1..self.path.len());
                        if declared.is_some() {
                            self.owner = owner;
                        }
                        self.value(field, child, check_below, None);
                        self.owner = outer;
                        self.keys.pop();
                        self.path.truncate(base);
                        return true;
                    }
                    if keep_unknown {
                        return true;
                    }
                    self.unknown.push(format!("{}.{key}", &self.path[..base]));
                    false
                });
            }
            Value::Array(items) => {
                let Some(item_schema) = facts.items else {
                    return;
                };
                let base = self.path.len();
                for (i, item) in items.iter_mut().enumerate() {
                    let _ = std::fmt::Write::write_fmt(&mut self.path, format_args!("[{i}]"));
                    self.value(item_schema, item, check_below, None);
                    self.path.truncate(base);
                }
            }
            _ => {}
        }
    }

    /// The check of one value, without what is under it (as [`Walk::value`] reads it):
    /// whether the values under it are checked too, or the problem. The field's path is
    /// put together only for a problem.
    fn check_here(
        &self,
        definition: Option<&'static str>,
        facts: &Facts<'static>,
        value: &Value,
    ) -> Result<bool, String> {
        let pathless = Walk {
            path: Vec::new(),
            owner: self.owner,
        };
        check_one(&pathless, definition, facts, value)
            .or_else(|_| check_one(&self.walk(), definition, facts, value))
    }

    /// The check alone of `value` and everything under it (where the prune walk does not
    /// go, or keeps without walking).
    fn check_whole(&mut self, schema: &'static Value, value: &Value) {
        if self.problem.is_some() {
            return;
        }
        // Without the field's path first (nothing to allocate), again with it for a problem.
        let mut pathless = Walk {
            path: Vec::new(),
            owner: short_name(self.owner),
        };
        if pathless.value(schema, value).is_err()
            && let Err(problem) = self.walk().value(schema, value)
        {
            self.problem = Some(problem);
        }
    }

    /// A [`Walk`] at this walk's field.
    fn walk(&self) -> Walk<'static, '_> {
        Walk {
            path: self.keys.iter().map(|k| &self.path[k.clone()]).collect(),
            owner: short_name(self.owner),
        }
    }
}

/// [`Fused::check_here`] with `walk` naming the field.
fn check_one(
    walk: &Walk<'_, '_>,
    definition: Option<&str>,
    facts: &Facts<'_>,
    value: &Value,
) -> Result<bool, String> {
    if value.is_null() {
        return Ok(false);
    }
    if definition == Some(QUANTITY) {
        return walk.quantity(value).map(|()| false);
    }
    if facts.int_or_string {
        return match value {
            Value::String(_) => Ok(false),
            Value::Number(n) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => Ok(false),
            Value::Number(n) => Err(walk.mismatch(&format!("number {n}"), "int32")),
            other => Err(walk.mismatch(json_type(other), "intstr.IntOrString")),
        };
    }
    match (facts.type_name, value) {
        (Some("array"), Value::Array(_)) => Ok(facts.items.is_some_and(|i| !i.is_null())),
        (Some("object"), Value::Object(_)) => Ok(true),
        (Some("object"), other) => {
            let name = definition.map_or("map", short_name);
            Err(walk.mismatch(json_type(other), name))
        }
        // Scalars (and a mismatched array) as the check alone answers them.
        (Some(_), _) => walk.scalar(facts, value).map(|()| false),
        // No type: free-form (RawExtension, JSON).
        (None, _) => Ok(false),
    }
}

/// The Go type's name of a definition (`io.k8s.api.apps.v1.DeploymentSpec` →
/// `DeploymentSpec`).
fn short_name(definition: &str) -> &str {
    definition.rsplit('.').next().unwrap_or(definition)
}

struct Walk<'s, 'v> {
    /// The field's path without list indices, as Go's decoder names it (`spec.replicas`):
    /// its keys, joined only for an error.
    path: Vec<&'v str>,
    /// The Go struct that holds the field being read.
    owner: &'s str,
}

impl<'s, 'v> Walk<'s, 'v> {
    fn value(&mut self, schema: &'s Value, value: &'v Value) -> Result<(), String> {
        if value.is_null() {
            return Ok(());
        }
        // A built-in node (every node this walk meets, for a built-in kind) is found by
        // its address with its reference already followed.
        let (definition, facts) = match builtin_node(schema) {
            Some(node) => (node.reference, node.facts),
            None => (reference(schema), Facts::of(resolve(schema))),
        };
        if definition == Some(QUANTITY) {
            return self.quantity(value);
        }
        if facts.int_or_string {
            return match value {
                Value::String(_) => Ok(()),
                Value::Number(n) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => Ok(()),
                Value::Number(n) => Err(self.mismatch(&format!("number {n}"), "int32")),
                other => Err(self.mismatch(json_type(other), "intstr.IntOrString")),
            };
        }
        match facts.type_name {
            Some("integer" | "number" | "boolean" | "string") => self.scalar(&facts, value),
            Some("array") => match value {
                Value::Array(items) => {
                    let Some(item_schema) = facts.items.filter(|i| !i.is_null()) else {
                        return Ok(());
                    };
                    items
                        .iter()
                        .try_for_each(|item| self.value(item_schema, item))
                }
                // `[]byte` reads a base64 string.
                other => Err(self.mismatch(json_type(other), "array")),
            },
            Some("object") => {
                let Value::Object(map) = value else {
                    let name = definition.map_or("map", short_name);
                    return Err(self.mismatch(json_type(value), name));
                };
                let owner = definition.map(short_name).unwrap_or(self.owner);
                let properties = facts.properties;
                let additional = facts.additional;
                let outer = self.owner;
                for (key, field) in map {
                    let field_schema = properties.and_then(|p| p.get(key));
                    let field_schema = match (field_schema, additional) {
                        (Some(s), _) => {
                            self.owner = owner;
                            s
                        }
                        (None, Some(s)) => s,
                        (None, None) => continue,
                    };
                    self.path.push(key);
                    let result = self.value(field_schema, field);
                    self.path.pop();
                    self.owner = outer;
                    result?;
                }
                Ok(())
            }
            // No type: free-form (RawExtension, JSON).
            _ => Ok(()),
        }
    }

    /// A value of a scalar type (`integer`, `number`, `boolean`, `string`), or one of
    /// another type that is not `array` or `object` (it decodes).
    fn scalar(&self, facts: &Facts<'_>, value: &Value) -> Result<(), String> {
        let format = facts.format;
        match facts.type_name {
            Some("integer") => match value {
                Value::Number(n) => {
                    let fits = match format {
                        "int32" => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                        _ => n.as_i64().is_some(),
                    };
                    match fits {
                        true => Ok(()),
                        false => Err(self.mismatch(&format!("number {n}"), go_int(format))),
                    }
                }
                other => Err(self.mismatch(json_type(other), go_int(format))),
            },
            Some("number") => match value {
                Value::Number(_) => Ok(()),
                other => Err(self.mismatch(json_type(other), "float64")),
            },
            Some("boolean") => match value {
                Value::Bool(_) => Ok(()),
                other => Err(self.mismatch(json_type(other), "bool")),
            },
            Some("string") => match value {
                Value::String(text) if format == "byte" => base64_ok(text)
                    .then_some(())
                    .ok_or_else(|| "illegal base64 data".to_owned() + &self.at()),
                Value::String(_) => Ok(()),
                other => Err(self.mismatch(json_type(other), go_string(format))),
            },
            Some("array") => match value {
                Value::Array(_) => Ok(()),
                other => Err(self.mismatch(json_type(other), "array")),
            },
            _ => Ok(()),
        }
    }

    fn quantity(&self, value: &Value) -> Result<(), String> {
        let ok = match value {
            Value::String(text) => is_quantity(text),
            Value::Number(n) => is_quantity(&n.to_string()),
            _ => false,
        };
        match ok {
            true => Ok(()),
            false => Err(format!(
                "quantities must match the regular expression '{QUANTITY_PATTERN}'{}",
                self.at()
            )),
        }
    }

    fn at(&self) -> String {
        format!(" (field {})", self.path.join("."))
    }

    fn mismatch(&self, found: &str, want: &str) -> String {
        if self.path.is_empty() {
            return format!("json: cannot unmarshal {found} into Go value of type {want}");
        }
        format!(
            "json: cannot unmarshal {found} into Go struct field {}.{} of type {want}",
            self.owner,
            self.path.join(".")
        )
    }
}

fn go_int(format: &str) -> &'static str {
    match format {
        "int32" => "int32",
        _ => "int64",
    }
}

fn go_string(format: &str) -> &'static str {
    match format {
        "byte" => "[]uint8",
        _ => "string",
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn base64_ok(text: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .is_ok()
}

/// Whether `text` is a Kubernetes quantity: a signed decimal number, then a binary suffix
/// (`Ki` … `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M` … `E`) or an exponent (`e3`).
pub(crate) fn is_quantity(text: &str) -> bool {
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let digits_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(digits_end);
    let mut parts = number.split('.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next();
    if parts.next().is_some() || (whole.is_empty() && fraction.is_none_or(str::is_empty)) {
        return false;
    }
    match suffix {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        exponent => exponent
            .strip_prefix(['e', 'E'])
            .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
            .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": spec})
    }

    #[test]
    fn a_string_in_an_integer_field_is_a_decode_error_naming_it() {
        let e = check(
            "apps",
            "v1",
            "Deployment",
            &deployment(json!({"replicas": "three"})),
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        );
    }

    #[test]
    fn types_are_checked_at_every_depth() {
        let bad = [
            json!({"replicas": 1.5}),
            json!({"replicas": 4_294_967_296_i64}),
            json!({"paused": "yes"}),
            json!({"template": {"spec": {"containers": [{"name": "a", "image": 7}]}}}),
            json!({"template": {"spec": {"containers": {"name": "a"}}}}),
            json!({"template": {"metadata": {"labels": {"app": 1}}}}),
            json!({"strategy": {"rollingUpdate": {"maxSurge": true}}}),
            json!({"template": {"spec": {"containers": [{"name": "a",
                "resources": {"limits": {"cpu": "lots"}}}]}}}),
        ];
        for spec in bad {
            let e = check("apps", "v1", "Deployment", &deployment(spec.clone()));
            assert_eq!(e.map_err(|e| e.code), Err(400), "{spec}");
        }
        let good = json!({"replicas": 3, "paused": null,
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "a", "image": "nginx",
                    "resources": {"limits": {"cpu": 2, "memory": "1.5Gi"},
                                  "requests": {"cpu": "250m", "memory": "1e3"}}}]}}});
        check("apps", "v1", "Deployment", &deployment(good)).unwrap();
    }

    #[test]
    fn a_deep_field_is_named_by_its_path_without_indices() {
        let message = |spec: Value| {
            check("apps", "v1", "Deployment", &deployment(spec))
                .unwrap_err()
                .message
        };
        assert_eq!(
            message(json!({"template": {"spec": {"containers": [{"name": "a", "image": 7}]}}})),
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal number into Go struct field Container.spec.template.spec.containers.image of type string"
        );
        assert_eq!(
            message(json!({"template": {"spec": {"containers": [{"name": "a",
                "resources": {"limits": {"cpu": "lots"}}}]}}})),
            format!(
                "Deployment in version \"v1\" cannot be handled as a Deployment: quantities must match the regular expression '{QUANTITY_PATTERN}' (field spec.template.spec.containers.resources.limits.cpu)"
            )
        );
    }

    #[test]
    fn secret_data_must_be_base64() {
        let secret = |data: &str| json!({"metadata": {"name": "s"}, "data": {"k": data}});
        check("", "v1", "Secret", &secret("aGVsbG8=")).unwrap();
        assert_eq!(
            check("", "v1", "Secret", &secret("not base64!")).map_err(|e| e.code),
            Err(400)
        );
    }

    /// Objects to start from: a Deployment with every default written out (every kind of
    /// node: structs, maps, list-type maps, int-or-string, quantities, metadata), a
    /// Service, a Secret and a CronJob.
    fn bases() -> Vec<(&'static str, &'static str, &'static str, Value)> {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"},
                "annotations": {"a": "b"}, "finalizers": ["x"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                    "uid": "u"}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                    "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27.3",
                        "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"cpu": 1}},
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http",
                            "scheme": "HTTP"}, "periodSeconds": 5},
                        "securityContext": {"privileged": false,
                            "capabilities": {"add": ["NET_ADMIN"]}},
                        "volumeMounts": [{"name": "cache", "mountPath": "/c"}]}],
                        "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
                        "securityContext": {}, "dnsPolicy": "ClusterFirst",
                        "terminationGracePeriodSeconds": 30}}},
            "status": {"replicas": 1, "conditions": [{"type": "Available", "status": "True"}]}});
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}],
                "selector": {"app": "web"}, "type": "ClusterIP"}});
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"k": "aGVsbG8="}, "type": "Opaque", "immutable": true});
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "containers": [{"name": "a", "image": "busybox"}],
                "restartPolicy": "Never"}}}}}});
        vec![
            ("apps", "v1", "Deployment", deployment),
            ("", "v1", "Service", service),
            ("", "v1", "Secret", secret),
            ("batch", "v1", "CronJob", cron),
        ]
    }

    /// The paths (keys and indices) of every value under `value`.
    fn paths(value: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
        out.push(at.clone());
        match value {
            Value::Object(map) => map.iter().for_each(|(k, v)| {
                at.push(json!(k));
                paths(v, at, out);
                at.pop();
            }),
            Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| {
                at.push(json!(i));
                paths(v, at, out);
                at.pop();
            }),
            _ => {}
        }
    }

    fn at_path<'a>(value: &'a mut Value, path: &[Value]) -> &'a mut Value {
        path.iter().fold(value, |v, step| match step {
            Value::String(k) => &mut v[k.as_str()],
            other => &mut v[other.as_u64().unwrap_or(0) as usize],
        })
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop_oneof![Just(0i64), Just(80), Just(-1), Just(4_294_967_296)].prop_map(|n| json!(n)),
            Just(json!(1.5)),
            prop::sample::select(vec![
                "",
                "x",
                "25%",
                "100m",
                "lots",
                "aGVsbG8=",
                "not base64!"
            ])
            .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(2, 6, 2, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..2).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["name", "colour", "port", "cpu"]),
                    inner,
                    0..2
                )
                .prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    proptest! {
        #[test]
        fn pruning_and_checking_in_one_walk_answers_as_pruning_then_checking(
            base in 0..4usize,
            edits in prop::collection::vec(
                (any::<prop::sample::Index>(), prop::sample::select(vec!["", "colour", "name",
                    "replicas", "port", "cpu", "spec", "metadata", "kind"]), any_value()),
                0..4,
            ),
        ) {
            let (group, version, kind, mut object) = bases().swap_remove(base);
            // Each edit replaces a value, or sets (adds) a field of an object.
            for (index, field, value) in edits {
                let mut all = Vec::new();
                paths(&object, &mut Vec::new(), &mut all);
                let path = index.get(&all).clone();
                let target = at_path(&mut object, &path);
                match (field, target.as_object_mut()) {
                    ("", _) | (_, None) => *target = value,
                    (field, Some(map)) => {
                        map.insert(field.to_owned(), value);
                    }
                }
            }
            let mut sequential = object.clone();
            let root = openapi::builtin_kind_schema(group, version, kind).unwrap();
            let unknown = crate::admission::schema::Schema::builtin_root(root).prune(&mut sequential);
            let checked = check(group, version, kind, &sequential);
            let mut fused = object.clone();
            let (fused_unknown, fused_checked) = prune_and_check(group, version, kind, &mut fused);
            prop_assert_eq!(&fused, &sequential);
            prop_assert_eq!(fused_unknown, unknown);
            prop_assert_eq!(
                fused_checked.map_err(|e| (e.code, e.message)),
                checked.map_err(|e| (e.code, e.message))
            );
        }
    }

    #[test]
    fn metadata_is_pruned_and_checked_as_object_meta() {
        // The kind's property and the definition prune reads are one node.
        let root = openapi::builtin_kind_schema("apps", "v1", "Deployment").unwrap();
        let meta = openapi::builtin_schema(OBJECT_META).unwrap();
        assert!(std::ptr::eq(resolve(&root["properties"]["metadata"]), meta));
        let mut object = deployment(json!({"replicas": 1}));
        object["metadata"]["labels"] = json!({"a": 1});
        object["metadata"]["colour"] = json!("red");
        let alone = check("apps", "v1", "Deployment", &object).unwrap_err();
        let (unknown, checked) = prune_and_check("apps", "v1", "Deployment", &mut object);
        assert_eq!(unknown, ["metadata.colour"]);
        assert_eq!(object["metadata"].get("colour"), None);
        let message = checked.unwrap_err().message;
        assert_eq!(
            message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels.a of type string"
        );
        assert_eq!(message, alone.message);
    }

    #[test]
    fn quantities_parse_as_kubernetes_parses_them() {
        for ok in [
            "1", "250m", "1.5Gi", "+2", "-1", ".5", "1e3", "1E-3", "100Ki", "5.",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "lots", "1.2.3", "1Kb", "e3", "1e", "Mi", "1 Gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
