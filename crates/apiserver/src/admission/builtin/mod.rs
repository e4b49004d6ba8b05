//! Built-in kinds admitted as kube-apiserver admits them: decoded into their kind's types
//! (400), defaulted, and validated (422 with `causes`). Three plugins of the built-in chain,
//! before the custom resources' schema plugins and before dynamic admission.
//!
//! ```text
//!  write of a built-in kind
//!    ─► Decode    (mutating, first after Prune)  a field of the wrong type ─► 400
//!       (PruneAndDecode: Prune and Decode in one walk of the object, as the chain runs them)
//!    ─► Defaults  (mutating)                     Secret stringData, Service, workloads,
//!                                                pod templates, … (`defaults`)
//!    ─► … mutating webhooks
//!    ─► Validate  (validating, first)            labels, names, ports, selectors,
//!                                                immutable fields ─► 422 (`validate`)
//!    ─► … policies, validating webhooks
//!  a custom resource: only its labels and annotations are checked here (its schema
//!  plugins do the rest)
//! ```

pub(crate) mod decode;
pub(crate) mod defaults;
pub(crate) mod validate;

use serde_json::Value;

use super::plugins::writes;
use super::schema::judge;
use super::{Attributes, Mutating, Validating};
use crate::api::Verdict;
use crate::http::error::{ApiError, ApiResult};
use crate::registry::object::meta_str;
use crate::registry::resources::ResourceType;
use crate::registry::strategy::Behaviour;

/// Whether `rt` is a built-in kind (not a custom resource, not a review).
fn builtin(rt: &ResourceType) -> bool {
    rt.schema.is_none() && !matches!(rt.behaviour, Behaviour::CustomResource | Behaviour::Review)
}

/// [`Prune`](super::plugins::Prune), and for a built-in kind also a refusal (400) of an
/// object whose fields do not decode into its kind's types, in one walk of the object
/// ([`decode::prune_and_check`]): an unknown field judged by `fieldValidation` first, then
/// a field of the wrong type. The built-in chain runs it in place of `Prune`.
pub struct PruneAndDecode;

impl Mutating for PruneAndDecode {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let rt = attributes.rt;
        if !writes(attributes) || !builtin(rt) {
            return super::plugins::Prune.admit(attributes, object, old);
        }
        let (unknown, decoded) = decode::prune_and_check(&rt.group, &rt.version, &rt.kind, object);
        let outcome = judge(unknown, attributes.field_validation)
            .and_then(|warnings| decoded.map(|()| warnings));
        Verdict::Now(outcome)
    }
}

/// Fills in a built-in object's defaults, as kube-apiserver does when it decodes one.
pub struct Defaults;

impl Mutating for Defaults {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let rt = attributes.rt;
        if writes(attributes) && builtin(rt) {
            defaults::apply(&rt.group, &rt.kind, object);
        }
        Verdict::Now(Ok(Vec::new()))
    }
}

/// Refuses a built-in object that breaks its kind's rules (422 naming every field); a
/// custom resource's labels and annotations are checked as every object's are.
pub struct Validate;

impl Validating for Validate {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let rt = attributes.rt;
        if !writes(attributes) {
            return Verdict::Now(Ok(Vec::new()));
        }
        let causes = match builtin(rt) {
            true => validate::validate(
                &rt.group,
                &rt.version,
                &rt.kind,
                object,
                old,
                attributes.subresource,
            ),
            false => validate::validate("", "", "", object, None, attributes.subresource),
        };
        if causes.is_empty() {
            return Verdict::Now(Ok(Vec::new()));
        }
        let name = match meta_str(object, "name") {
            "" => meta_str(object, "generateName"),
            name => name,
        };
        Verdict::Now(Err(ApiError::invalid(&rt.group, &rt.kind, name, causes)))
    }
}

#[cfg(test)]
mod tests;
