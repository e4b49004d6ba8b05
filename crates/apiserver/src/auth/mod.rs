//! Who asks, and whether they may: the stages of a request before it reaches the registry.
//!
//! ```text
//!  HTTP edge ─► authenticate (authn) ─► audit: RequestReceived ─► impersonate
//!     ─► authorize (authz: user, verb, group, resource, subresource, namespace, name, path)
//!     ─► admission ─► registry ─► store ─► audit: ResponseComplete (a watch:
//!        ResponseStarted, then ResponseComplete when its stream ends)
//! ```
//!
//! Each stage is a trait: a bearer token that authenticates the hub's admin; no audit log
//! by default, or `audit::log::AuditLog` (`audit.k8s.io/v1` Events as JSON lines under an
//! `audit::policy::Policy`); impersonation headers ignored, or honoured as Kubernetes
//! honours them (`impersonation::Headers`); every authenticated request allowed
//! (`AllowAll`), or `system:masters` then RBAC (`rbac::Rbac`, `Api::authorize_with_rbac`).
//! The user a request runs as travels with it to the registry (reviews answer with it,
//! the escalation check of roles and bindings asks what it holds).

pub mod audit;
pub mod authn;
pub mod authz;
pub mod bootstrap;
pub mod impersonation;
pub mod jwt;
pub mod oidc;
pub mod rbac;
pub mod serviceaccount;
pub mod signer;
pub mod x509;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use audit::{
    Audit, AuditEvent, AuditRequest, Level, NoAudit, Recording, RequestInfo, Stage, StageSet,
};
pub use authn::{AdminToken, Authenticator, Chain, Credentials, Presented, Refusal};
pub use authz::{AllowAll, Attributes, Authorizer, Decision, PrivilegedGroup, Rules, Union};
pub use impersonation::{Headers, IgnoreHeaders, Impersonation};

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";

/// The group whose members may do everything.
pub const MASTERS: &str = "system:masters";

/// The name the admin token authenticates as.
pub const ADMIN_USER: &str = "flotilla:admin";

/// The name the server's own in-process requests run as (the hub's controllers, the
/// simulator's provisioning, the CRD installer).
pub const LOOPBACK_USER: &str = "system:apiserver";

/// The name and group of a request made without credentials, where that is allowed.
pub const ANONYMOUS_USER: &str = "system:anonymous";

/// The group of requests made without credentials.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";

/// Who a request runs as: Kubernetes' `user.Info`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user's name (`system:serviceaccount:ns:name`, `jane@example.com`, …).
    pub name: String,
    /// A unique id, when the authenticator knows one.
    pub uid: String,
    /// The groups the user is in.
    pub groups: Vec<String>,
    /// What else the authenticator says about the user.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user in `groups`.
    pub fn new(name: &str, groups: &[&str]) -> Self {
        UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// The hub's admin (what the admin token authenticates as).
    pub fn admin() -> Self {
        Self::new(ADMIN_USER, &[MASTERS, AUTHENTICATED])
    }

    /// The server itself, for its in-process requests.
    pub fn loopback() -> Arc<Self> {
        static LOOPBACK: std::sync::OnceLock<Arc<UserInfo>> = std::sync::OnceLock::new();
        LOOPBACK
            .get_or_init(|| Arc::new(Self::new(LOOPBACK_USER, &[MASTERS, AUTHENTICATED])))
            .clone()
    }

    /// A request without credentials, on a path that allows it.
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS_USER, &[UNAUTHENTICATED])
    }

    /// The user as a `SelfSubjectReview` reports it (`authentication.k8s.io/v1` UserInfo).
    pub fn to_json(&self) -> serde_json::Value {
        let mut info = serde_json::json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = self.uid.clone().into();
        }
        if !self.extra.is_empty() {
            info["extra"] = serde_json::json!(self.extra);
        }
        info
    }
}

/// The stages a request passes after the HTTP edge authenticated it.
#[derive(Clone)]
pub struct Stages {
    /// Records each request as it is received and when it is answered.
    pub audit: Arc<dyn Audit>,
    /// Turns the authenticated user into the one the request acts as.
    pub impersonation: Arc<dyn Impersonation>,
    /// Decides whether the user may do what the request asks.
    pub authorizer: Arc<dyn Authorizer>,
}

impl Default for Stages {
    /// The simulator's server: no audit log, impersonation headers ignored, every
    /// authenticated request allowed.
    fn default() -> Self {
        Stages {
            audit: Arc::new(NoAudit),
            impersonation: Arc::new(IgnoreHeaders),
            authorizer: Arc::new(AllowAll),
        }
    }
}

#[cfg(test)]
mod tests;
