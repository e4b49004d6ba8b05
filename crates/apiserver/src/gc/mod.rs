//! Garbage collection by ownerReferences: what a deletion does to an object's dependents.
//!
//! ```text
//!  DELETE owner ─ propagationPolicy ─┬─ Background: owner goes now; then its dependents
//!                                    ├─ Foreground: owner keeps the `foregroundDeletion`
//!                                    │   finalizer until its dependents are gone
//!                                    └─ Orphan: owner keeps the `orphan` finalizer until
//!                                        its dependents no longer point at it
//! ```
//!
//! The passes themselves run in the API server's cleanup tasks (`api.rs`); this module
//! holds the rules.

pub(crate) mod collector;
pub mod compaction;
pub mod events;

use serde_json::Value;

use crate::http::error::{ApiError, ApiResult};

/// The finalizer of an owner whose dependents are being orphaned.
pub const ORPHAN: &str = "orphan";

/// The finalizer of an owner whose dependents are deleted first.
pub const FOREGROUND: &str = "foregroundDeletion";

/// What happens to an object's dependents when it is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// The owner goes at once; its dependents are deleted afterwards (the default).
    Background,
    /// The dependents are deleted first; the owner waits for them.
    Foreground,
    /// The dependents stay, without their reference to the owner.
    Orphan,
}

impl Propagation {
    /// From the delete options (`propagationPolicy`, or the older `orphanDependents`) or
    /// the query parameter of the same name.
    pub fn from_request(options: &Value, query: Option<&str>) -> ApiResult<Self> {
        let policy = options["propagationPolicy"].as_str().or(query);
        match policy {
            Some("Background") => Ok(Propagation::Background),
            Some("Foreground") => Ok(Propagation::Foreground),
            Some("Orphan") => Ok(Propagation::Orphan),
            None if options["orphanDependents"] == Value::Bool(true) => Ok(Propagation::Orphan),
            None => Ok(Propagation::Background),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid propagationPolicy {other:?}: must be Background, Foreground or Orphan"
            ))),
        }
    }

    /// The finalizer that holds the owner back, if any.
    pub fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Background => None,
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Orphan => Some(ORPHAN),
        }
    }
}

/// Whether `object` names the owner with `uid` among its ownerReferences.
pub fn owned_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
}

/// Removes the references to the owner with `uid` (the whole list if none is left).
pub fn disown(object: &mut Value, uid: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let left = match meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    {
        Some(refs) => {
            refs.retain(|r| r["uid"] != uid);
            refs.len()
        }
        None => return,
    };
    if left == 0 {
        meta.remove("ownerReferences");
    }
}

/// Removes one finalizer; true if none is left.
pub fn drop_finalizer(object: &mut Value, finalizer: &str) -> bool {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return true;
    };
    if let Some(list) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
        list.retain(|f| f != finalizer);
        if !list.is_empty() {
            return false;
        }
    }
    meta.remove("finalizers");
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_policy_comes_from_the_options_or_the_query() {
        let from = |o: Value, q| Propagation::from_request(&o, q);
        assert_eq!(from(json!({}), None).unwrap(), Propagation::Background);
        assert_eq!(
            from(json!({"propagationPolicy": "Foreground"}), None).unwrap(),
            Propagation::Foreground
        );
        assert_eq!(
            from(json!({}), Some("Orphan")).unwrap(),
            Propagation::Orphan
        );
        assert_eq!(
            from(json!({"orphanDependents": true}), None).unwrap(),
            Propagation::Orphan
        );
        assert_eq!(
            from(json!({"propagationPolicy": "Sideways"}), None)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(Propagation::Orphan.finalizer(), Some("orphan"));
        assert_eq!(Propagation::Background.finalizer(), None);
    }

    #[test]
    fn references_and_finalizers_are_removed_one_at_a_time() {
        let mut object = json!({"metadata": {"name": "rs", "finalizers": ["orphan", "example.com/x"],
            "ownerReferences": [{"uid": "a", "name": "one"}, {"uid": "b", "name": "two"}]}});
        assert!(owned_by(&object, "a") && owned_by(&object, "b") && !owned_by(&object, "c"));
        disown(&mut object, "a");
        assert_eq!(
            object["metadata"]["ownerReferences"],
            json!([{"uid": "b", "name": "two"}])
        );
        disown(&mut object, "b");
        assert!(object["metadata"].get("ownerReferences").is_none());
        assert!(!drop_finalizer(&mut object, "orphan"));
        assert_eq!(object["metadata"]["finalizers"], json!(["example.com/x"]));
        assert!(drop_finalizer(&mut object, "example.com/x"));
        assert!(object["metadata"].get("finalizers").is_none());
    }
}
