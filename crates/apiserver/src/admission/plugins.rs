//! The built-in admission plugins: a kind's schema, applied to what is written.

use crate::api::Verdict;
use serde_json::Value;

use super::schema::{self, Schema, Structural};
use super::{Attributes, Mutating, Operation, Validating};
use crate::http::error::Cause;
use crate::http::error::{ApiError, ApiResult};
use crate::registry::object::meta_str;

fn ready<'a, T>(value: T) -> Verdict<'a, T> {
    Verdict::Now(value)
}

fn writes(attributes: &Attributes<'_>) -> bool {
    attributes.operation != Operation::Delete
}

/// Drops the fields the kind's schema does not know (a built-in kind's Go type, a custom
/// resource's structural schema); `fieldValidation` makes them a 400, warnings, or nothing.
pub struct Prune;

impl Mutating for Prune {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if !writes(attributes) {
            return ready(Ok(Vec::new()));
        }
        let unknown = match Schema::for_type(attributes.rt) {
            Some(schema) => schema.prune(object),
            None => Vec::new(),
        };
        ready(schema::judge(unknown, attributes.field_validation))
    }
}

/// Fills in a custom resource's schema defaults.
pub struct Defaults;

impl Mutating for Defaults {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if writes(attributes)
            && let Some(structural) = Structural::for_type(attributes.rt)
        {
            structural.default(object);
        }
        ready(Ok(Vec::new()))
    }
}

/// The name a 422 names: the object's, or its `generateName` before it has one.
fn shown_name(object: &Value) -> &str {
    match meta_str(object, "name") {
        "" => meta_str(object, "generateName"),
        name => name,
    }
}

fn refuse(
    attributes: &Attributes<'_>,
    object: &Value,
    causes: Vec<Cause>,
) -> ApiResult<Vec<String>> {
    if causes.is_empty() {
        return Ok(Vec::new());
    }
    let rt = attributes.rt;
    Err(ApiError::invalid(
        &rt.group,
        &rt.kind,
        shown_name(object),
        causes,
    ))
}

/// Refuses a custom resource that breaks its structural schema (422 naming every field).
pub struct StructuralSchema;

impl Validating for StructuralSchema {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let causes = match Structural::for_type(attributes.rt) {
            Some(structural) if writes(attributes) => structural.validate(object),
            _ => Vec::new(),
        };
        ready(refuse(attributes, object, causes))
    }
}

/// Refuses a custom resource that breaks its schema's `x-kubernetes-validations` (CEL
/// rules, with `oldSelf` on an update). Runs only on an object the schema admits.
pub struct Rules;

impl Validating for Rules {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let causes = match Structural::for_type(attributes.rt) {
            Some(structural) if writes(attributes) => structural.rules(object, old),
            _ => Vec::new(),
        };
        ready(refuse(attributes, object, causes))
    }
}
