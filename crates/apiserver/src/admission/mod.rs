//! Admission: what a write passes after it is authorized and before it is stored.
//!
//! ```text
//!  object ─► mutating plugins, in order (each may change it, warn, or refuse)
//!         ─► validating plugins, in order (each may warn or refuse; the first refusal
//!            ends the chain) ─► the registry writes it
//!  built in: mutating  builtin::PruneAndDecode: Prune (fields the schema does not
//!                      know: fieldValidation decides) and, in the same walk, a built-in
//!                      kind's field types (400)
//!                      Defaults (a custom resource's schema defaults)
//!                      builtin::Defaults (a built-in kind's defaults, as kube-apiserver's)
//!            validating builtin::Validate (a built-in kind's rules, labels: 422)
//!                      StructuralSchema (a custom resource's schema: 422)
//!                      Rules (its x-kubernetes-validations, CEL: 422)
//! ```
//!
//! Admission runs on every create, update (patch and apply included) and delete, at the
//! point the object is known; a refusal writes nothing. Dynamic admission is two more
//! implementations of the same traits, configured through the API ([`dynamic`]): mutating
//! webhooks after the built-in mutating plugins, then ValidatingAdmissionPolicies and
//! validating webhooks after the built-in validating ones, as in Kubernetes.

pub mod builtin;
pub(crate) mod cel;
pub mod dynamic;
pub(crate) mod matching;
pub mod plugins;
pub mod policy;
pub(crate) mod review;
pub(crate) mod schema;
pub(crate) mod validation;
pub mod webhook;

pub use schema::FieldValidation;

use std::sync::Arc;

use crate::api::{Api, Verdict};
use flotilla_store::Revision;
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

impl Operation {
    /// The operation as an AdmissionReview and webhook rules spell it (`CREATE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What an admission plugin is told about a write.
#[derive(Clone, Copy)]
pub struct Attributes<'a> {
    /// The API of the logical cluster written to: what a plugin may read beyond the write
    /// itself (namespaces for selectors, parameter objects, the registry, the authorizer).
    pub api: &'a Api,
    /// Who writes.
    pub user: &'a Arc<UserInfo>,
    /// The logical cluster written to (`ROOT_CLUSTER` for the root API).
    pub cluster: &'a str,
    /// What the write does.
    pub operation: Operation,
    /// The resource written.
    pub rt: &'a Arc<ResourceType>,
    /// The namespace, `""` if cluster-scoped.
    pub namespace: &'a str,
    /// The object's name (`""` on a create with `generateName`).
    pub name: &'a str,
    /// The subresource written (`status`, `scale`), or `""`.
    pub subresource: &'a str,
    /// What to do with fields the schema does not know (`fieldValidation`).
    pub field_validation: FieldValidation,
    /// Whether the write is a dry run (nothing will be stored).
    pub dry_run: bool,
    /// The request's `fieldManager` parameter, `""` if it has none.
    pub field_manager: &'a str,
    /// A delete's options (its body), if it sent any.
    pub delete_options: Option<&'a Value>,
}

impl std::fmt::Debug for Attributes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attributes")
            .field("cluster", &self.api.cluster())
            .field("user", &self.user.name)
            .field("operation", &self.operation)
            .field("resource", &self.rt.plural)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("subresource", &self.subresource)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

impl Attributes<'_> {
    /// The logical cluster written to.
    pub fn cluster(&self) -> &str {
        self.api.cluster()
    }
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
    /// Dynamic admission, when the chain runs it: writes of its configurations are
    /// answered once they govern requests.
    dynamic: Option<Arc<dynamic::Dynamic>>,
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
            mutating: vec![
                Arc::new(builtin::PruneAndDecode),
                Arc::new(plugins::Defaults),
                Arc::new(builtin::Defaults),
            ],
            validating: vec![
                Arc::new(builtin::Validate),
                Arc::new(plugins::StructuralSchema),
                Arc::new(plugins::Rules),
            ],
            dynamic: None,
        }
    }

    /// The built-in plugins without those of built-in kinds (`PruneAndDecode`'s field
    /// types, `builtin::Defaults`, `builtin::Validate`): built-in objects stored as sent, as
    /// kube-apiserver's `--disable-admission-plugins` would if these were plugins there.
    /// For measuring what they cost (`flotilla bench --scenario admission`); no server
    /// flag sets it, since a hub without them stores what no cluster would.
    pub fn without_builtin_kinds() -> Self {
        Admission {
            mutating: vec![Arc::new(plugins::Prune), Arc::new(plugins::Defaults)],
            validating: vec![
                Arc::new(plugins::StructuralSchema),
                Arc::new(plugins::Rules),
            ],
            dynamic: None,
        }
    }

    /// Adds dynamic admission (webhooks and ValidatingAdmissionPolicies, configured through
    /// the API) after the plugins already there: mutating webhooks last among the mutating
    /// plugins; policies, then validating webhooks, last among the validating ones.
    pub fn with_dynamic(mut self, dynamic: Arc<dynamic::Dynamic>) -> Self {
        self.mutating
            .push(Arc::new(webhook::MutatingWebhooks(dynamic.clone())));
        self.validating
            .push(Arc::new(policy::Policies(dynamic.clone())));
        self.validating
            .push(Arc::new(webhook::ValidatingWebhooks(dynamic.clone())));
        self.dynamic = Some(dynamic);
        self
    }

    /// Waits until dynamic admission governs requests with every configuration written up
    /// to `revision` (at once when it does not run).
    pub(crate) async fn settled(&self, revision: Revision) {
        if let Some(dynamic) = &self.dynamic {
            dynamic.settled(revision).await;
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
