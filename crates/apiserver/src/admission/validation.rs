//! Field errors as Kubernetes words them, and the checks the admission configurations
//! share (rules, selectors, match conditions, failure and match policies).

use serde_json::Value;

use super::cel::{Declarations, Expression};
use crate::http::error::Cause;
use crate::registry::selector::LabelSelector;

/// The causes of a 422, gathered as a configuration is checked.
#[derive(Default)]
pub(crate) struct Causes(pub(crate) Vec<Cause>);

impl Causes {
    fn push(&mut self, reason: &str, field: &str, message: String) {
        self.0.push(Cause {
            reason: reason.into(),
            message,
            field: field.into(),
        });
    }

    /// `Required value`.
    pub(crate) fn required(&mut self, field: &str, detail: &str) {
        let message = match detail {
            "" => "Required value".to_owned(),
            detail => format!("Required value: {detail}"),
        };
        self.push("FieldValueRequired", field, message);
    }

    /// `Invalid value: VALUE: DETAIL`.
    pub(crate) fn invalid(&mut self, field: &str, value: &Value, detail: &str) {
        self.push(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {value}: {detail}"),
        );
    }

    /// `Unsupported value: "VALUE": supported values: "A", "B"`.
    pub(crate) fn unsupported(&mut self, field: &str, value: &Value, supported: &[&str]) {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.push(
            "FieldValueNotSupported",
            field,
            format!(
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        );
    }

    /// `Duplicate value: VALUE`.
    pub(crate) fn duplicate(&mut self, field: &str, value: &Value) {
        self.push(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {value}"),
        );
    }

    /// `Forbidden: DETAIL`.
    pub(crate) fn forbidden(&mut self, field: &str, detail: &str) {
        self.push("FieldValueForbidden", field, format!("Forbidden: {detail}"));
    }

    /// `Too long: DETAIL`.
    pub(crate) fn push_too_long(&mut self, field: &str, detail: &str) {
        self.push("FieldValueTooLong", field, format!("Too long: {detail}"));
    }

    /// `Not found: VALUE`.
    pub(crate) fn not_found(&mut self, field: &str, value: &Value) {
        self.push("FieldValueNotFound", field, format!("Not found: {value}"));
    }

    /// `Too many: N: must have at most MAX items`.
    pub(crate) fn too_many(&mut self, field: &str, count: usize, max: usize) {
        self.push(
            "FieldValueTooMany",
            field,
            format!("Too many: {count}: must have at most {max} items"),
        );
    }
}

/// A string field's text, `""` when absent or not a string.
pub(crate) fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// A list field's items (none when absent).
pub(crate) fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// Sets `field` of `object` to `value` when it is absent (or null).
pub(crate) fn default_field(object: &mut Value, field: &str, value: Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    // One search of the map (defaulting mostly meets absent fields, whose key is made
    // anyway).
    match map.entry(field) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
        }
        serde_json::map::Entry::Occupied(mut slot) if slot.get().is_null() => {
            slot.insert(value);
        }
        serde_json::map::Entry::Occupied(_) => {}
    }
}

/// Whether `name` is a DNS-1123 subdomain.
pub(crate) fn is_subdomain(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `name` is a qualified name (`[prefix/]name`, as label keys and match
/// condition names are).
pub(crate) fn is_qualified_name(name: &str) -> bool {
    let (prefix, name) = match name.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, name),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    name_ok && prefix.is_none_or(is_subdomain)
}

/// Whether `name` may be a CEL variable's name.
pub(crate) fn is_cel_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// One of `allowed`, or the cause saying so; absent values are left to defaulting.
pub(crate) fn check_enum(causes: &mut Causes, field: &str, value: &Value, allowed: &[&str]) {
    if value.is_null() {
        return;
    }
    if !value.as_str().is_some_and(|v| allowed.contains(&v)) {
        causes.unsupported(field, value, allowed);
    }
}

/// A label selector (`metav1.LabelSelector`).
pub(crate) fn check_selector(causes: &mut Causes, field: &str, selector: &Value) {
    if let Err(e) = LabelSelector::from_object(selector) {
        causes.invalid(field, selector, &e);
    }
}

const OPERATIONS: &[&str] = &["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];

/// A rule (`RuleWithOperations`, with `resourceNames` where `named`).
pub(crate) fn check_rule(causes: &mut Causes, field: &str, rule: &Value, named: bool) {
    let operations = items(&rule["operations"]);
    if operations.is_empty() {
        causes.required(&format!("{field}.operations"), "");
    }
    for (i, op) in operations.iter().enumerate() {
        check_enum(causes, &format!("{field}.operations[{i}]"), op, OPERATIONS);
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        causes.invalid(
            &format!("{field}.operations"),
            &rule["operations"],
            "if '*' is present, must not specify other operations",
        );
    }
    for list in ["apiGroups", "apiVersions"] {
        let values = items(&rule[list]);
        if values.is_empty() {
            causes.required(&format!("{field}.{list}"), "");
        }
        if values.len() > 1 && values.iter().any(|v| v == "*") {
            causes.invalid(
                &format!("{field}.{list}"),
                &rule[list],
                "if '*' is present, must not specify other API groups or versions",
            );
        }
        if list == "apiVersions" {
            for (i, v) in values.iter().enumerate() {
                if text(v).is_empty() {
                    causes.required(&format!("{field}.apiVersions[{i}]"), "");
                }
            }
        }
    }
    let resources = items(&rule["resources"]);
    if resources.is_empty() {
        causes.required(&format!("{field}.resources"), "");
    }
    for (i, resource) in resources.iter().enumerate() {
        let r = text(resource);
        let at = format!("{field}.resources[{i}]");
        if r.is_empty() {
            causes.required(&at, "");
        } else if r.contains('/') && r.split('/').count() != 2 {
            causes.invalid(&at, resource, "a resource has at most one '/'");
        }
    }
    check_enum(
        causes,
        &format!("{field}.scope"),
        &rule["scope"],
        &["Cluster", "Namespaced", "*"],
    );
    if !named && !rule["resourceNames"].is_null() {
        causes.forbidden(&format!("{field}.resourceNames"), "not allowed here");
    }
}

/// `matchConditions`: at most 64, named (qualified names, unique), each a bool CEL
/// expression in `declared`.
pub(crate) fn check_match_conditions(
    causes: &mut Causes,
    field: &str,
    conditions: &Value,
    declared: Declarations<'_>,
) {
    let list = items(conditions);
    if list.len() > 64 {
        causes.too_many(field, list.len(), 64);
    }
    let mut names = Vec::new();
    for (i, condition) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let name = text(&condition["name"]);
        if name.is_empty() {
            causes.required(&format!("{at}.name"), "");
        } else if !is_qualified_name(name) {
            causes.invalid(
                &format!("{at}.name"),
                &condition["name"],
                "must be a qualified name (an optional DNS subdomain prefix and '/', then up to 63 alphanumeric characters, '-', '_' or '.')",
            );
        } else if names.contains(&name) {
            causes.duplicate(&format!("{at}.name"), &condition["name"]);
        }
        names.push(name);
        check_expression(
            causes,
            &format!("{at}.expression"),
            &condition["expression"],
            declared,
        );
    }
}

/// A required CEL expression that must compile in `declared`.
pub(crate) fn check_expression(
    causes: &mut Causes,
    field: &str,
    expression: &Value,
    declared: Declarations<'_>,
) {
    let source = text(expression);
    if source.trim().is_empty() {
        causes.required(field, "");
        return;
    }
    if let Err(e) = Expression::compile(source, declared) {
        causes.invalid(field, expression, &format!("compilation failed: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_kubernetes_checks_them() {
        assert!(is_subdomain("webhook.example.com"));
        assert!(!is_subdomain("Webhook.example.com"));
        assert!(!is_subdomain("a..b"));
        assert!(is_qualified_name("example.com/ready"));
        assert!(is_qualified_name("ready"));
        assert!(!is_qualified_name("-ready"));
        assert!(!is_qualified_name("Example.com/x"));
        assert!(is_cel_identifier("replicas_max2"));
        assert!(!is_cel_identifier("2max"));
        assert!(!is_cel_identifier("max-replicas"));
    }
}
