//! Admission: what a write passes after it is authorized and before it is stored.
//!
//! ```text
//!  object ─► mutating plugins, in order (each may change it, warn, or refuse)
//!         ─► validating plugins, in order (each may warn or refuse; the first refusal
//!            ends the chain) ─► the registry writes it
//!  built in: mutating  Prune (fields the schema does not know: fieldValidation decides)
//!                      Defaults (a custom resource's schema defaults)
//!            validating StructuralSchema (a custom resource's schema: 422)
//!                      Rules (its x-kubernetes-validations, CEL: 422)
//! ```
//!
//! Admission runs on every create, update (patch and apply included) and delete, at the
//! point the object is known; a refusal writes nothing. Webhooks and policies are later
//! implementations of the same two traits.

pub mod plugins;
pub(crate) mod schema;

pub use schema::FieldValidation;

use std::sync::Arc;

use crate::api::Verdict;
use serde_json::Value;

use crate::auth::UserInfo;
use crate::http::error::ApiResult;
use crate::registry::resources::ResourceType;

/// What a write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change to an object (a replace, patch or apply).
    Update,
    /// A deletion (the object given is the one being deleted).
    Delete,
}

/// What an admission plugin is told about a write.
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    /// Who writes.
    pub user: &'a UserInfo,
    /// The logical cluster written to (`ROOT_CLUSTER` for the root API).
    pub cluster: &'a str,
    /// What the write does.
    pub operation: Operation,
    /// The resource written.
    pub rt: &'a ResourceType,
    /// The namespace, `""` if cluster-scoped.
    pub namespace: &'a str,
    /// The object's name (`""` on a create with `generateName`).
    pub name: &'a str,
    /// The subresource written (`status`, `scale`), or `""`.
    pub subresource: &'a str,
    /// What to do with fields the schema does not know (`fieldValidation`).
    pub field_validation: FieldValidation,
}

/// A plugin that may change the object. Its warnings go back to the client.
pub trait Mutating: Send + Sync {
    /// Admits `object` (its stored form `old` on an update or delete), changing it as
    /// it must, or refuses the write.
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>>;
}

/// A plugin that may refuse the object but not change it.
pub trait Validating: Send + Sync {
    /// Checks `object` (its stored form `old` on an update or delete).
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>>;
}

/// The admission chain a server runs.
#[derive(Clone)]
pub struct Admission {
    mutating: Vec<Arc<dyn Mutating>>,
    validating: Vec<Arc<dyn Validating>>,
}

impl Default for Admission {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Admission {
    /// The built-in plugins ([`plugins`]).
    pub fn builtin() -> Self {
        Admission {
            mutating: vec![Arc::new(plugins::Prune), Arc::new(plugins::Defaults)],
            validating: vec![
                Arc::new(plugins::StructuralSchema),
                Arc::new(plugins::Rules),
            ],
        }
    }

    /// Adds a mutating plugin after those already there.
    pub fn with_mutating(mut self, plugin: Arc<dyn Mutating>) -> Self {
        self.mutating.push(plugin);
        self
    }

    /// Adds a validating plugin after those already there.
    pub fn with_validating(mut self, plugin: Arc<dyn Validating>) -> Self {
        self.validating.push(plugin);
        self
    }

    /// Runs the chain on a write: every mutating plugin, then every validating one. The
    /// first refusal ends it; otherwise the warnings of all.
    pub async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<String>> {
        let mut warnings = Vec::new();
        for plugin in &self.mutating {
            warnings.extend(plugin.admit(attributes, object, old).await?);
        }
        for plugin in &self.validating {
            warnings.extend(plugin.validate(attributes, object, old).await?);
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests;
