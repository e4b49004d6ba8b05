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

use serde_json::Value;

use crate::admission::schema::{Facts, builtin_node, reference, resolve};
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
