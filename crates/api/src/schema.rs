//! Schemas serde types cannot describe on their own: free-form values and embedded
//! Kubernetes objects, in the forms a structural schema allows.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value (object, list or scalar), kept as written.
pub(crate) fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// A JSON object of any shape, kept as written.
pub(crate) fn free_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A list of whole Kubernetes objects (`apiVersion`, `kind`, `metadata` and the rest).
pub(crate) fn embedded_resources(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}
