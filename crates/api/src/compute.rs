//! [`ComputeNamespace`]: a namespace every cluster of some ClusterSets has the same — the
//! namespace with its labels and annotations, ServiceAccounts, a LimitRange, a
//! ResourceQuota, Roles and RoleBindings. It is SIG-Multicluster's namespace sameness made
//! concrete: named after the namespace, delivered to each member of its sets (members
//! that join later too) as one [`Work`](crate::Work) per member, the way placements
//! deliver, and removed (or orphaned) when it goes.
//!
//! ```text
//!  ComputeNamespace team-a ── clusterSets: [eu] ──► Clusters with spec.clusterSet eu
//!     │ render (flotilla_fleet::compute): Namespace, ServiceAccounts, LimitRange,
//!     │ ResourceQuota, Roles, RoleBindings
//!     ▼
//!  Work flotilla-cluster-<c>/computenamespace.team-a  (placement "ComputeNamespace/team-a")
//!     │ push or pull delivery, drift Correct
//!     ▼
//!  status.members[]: Ready / Drifted / Failed (why) / Pending, and a summary
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRangeSpec, ResourceQuotaSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{DeletionPolicy, PlacementReference};

/// The namespace every cluster of the given ClusterSets has the same.
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "ComputeNamespace",
    status = "ComputeNamespaceStatus",
    category = "flotilla",
    shortname = "cns",
    derive = "Default",
    derive = "PartialEq",
    doc = "A namespace (with its ServiceAccounts, LimitRange, ResourceQuota, Roles and RoleBindings) that every cluster of the given ClusterSets has the same; named after the namespace.",
    validation = Rule::new("size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name is the namespace's name: a DNS-1123 label (lower case letters, digits and '-', at most 63)")
        .field_path(".metadata.name"),
    validation = Rule::new("!self.metadata.name.startsWith('kube-') && !self.metadata.name.startsWith('flotilla-') && self.metadata.name != 'default'")
        .message("metadata.name must not be a system namespace (default, kube-*, flotilla-*)")
        .field_path(".metadata.name"),
    validation = Rule::new("size(self.spec.clusterSets) > 0")
        .message("spec.clusterSets must name at least one ClusterSet")
        .field_path(".spec.clusterSets"),
    validation = Rule::new("!has(self.spec.serviceAccounts) || self.spec.serviceAccounts.all(a, self.spec.serviceAccounts.exists_one(b, b.name == a.name))")
        .message("spec.serviceAccounts[].name must be unique")
        .field_path(".spec.serviceAccounts"),
    validation = Rule::new("!has(self.spec.roles) || self.spec.roles.all(a, self.spec.roles.exists_one(b, b.name == a.name))")
        .message("spec.roles[].name must be unique")
        .field_path(".spec.roles"),
    validation = Rule::new("!has(self.spec.roleBindings) || self.spec.roleBindings.all(a, self.spec.roleBindings.exists_one(b, b.name == a.name))")
        .message("spec.roleBindings[].name must be unique")
        .field_path(".spec.roleBindings"),
    printcolumn(
        name = "Clusters",
        type_ = "integer",
        json_path = ".status.clusters",
        description = "How many clusters of its sets it is delivered to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyClusters",
        description = "How many of them have it as the hub has it"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.summary",
        description = "Ready, or what is not (drifted, failed, pending)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ComputeNamespaceSpec {
    /// The ClusterSets whose every member gets the namespace (members joining later too).
    pub cluster_sets: Vec<String>,
    /// The Namespace's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The Namespace's annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// ServiceAccounts made in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<ServiceAccountTemplate>,
    /// The namespace's LimitRange (named after the namespace), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_range: Option<LimitRangeSpec>,
    /// The namespace's ResourceQuota (named after the namespace), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_quota: Option<ResourceQuotaSpec>,
    /// Roles made in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleTemplate>,
    /// RoleBindings made in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub role_bindings: Vec<RoleBindingTemplate>,
    /// What becomes of the members' objects when the ComputeNamespace is deleted (or a
    /// cluster leaves its sets): `Delete` (the default) removes what it created, the
    /// namespace and all it holds with it, and gives back, unmanaged, what a member had
    /// before (a namespace it took over is never deleted); `Orphan` leaves them all, no
    /// longer managed.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// A ServiceAccount of the namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountTemplate {
    /// Its name.
    pub name: String,
    /// Its labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A Role of the namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleTemplate {
    /// Its name.
    pub name: String,
    /// What it allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PolicyRule>,
}

/// A RoleBinding of the namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleBindingTemplate {
    /// Its name.
    pub name: String,
    /// The Role (of the namespace) or ClusterRole it grants.
    pub role_ref: RoleRef,
    /// Who it grants it to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<Subject>,
}

/// Where the namespace stands on the members of its sets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComputeNamespaceStatus {
    /// The `metadata.generation` this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: every member has the namespace as the hub has it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// How many clusters of its sets it is delivered to.
    #[serde(default)]
    pub clusters: i32,
    /// How many of them are [`MemberState::Ready`].
    #[serde(default)]
    pub ready_clusters: i32,
    /// `Ready`, or how many members are in each other state (`1 Drifted, 2 Pending`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// One entry per member (at most [`MAX_LISTED_CLUSTERS`](crate::MAX_LISTED_CLUSTERS),
    /// the others counted only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
}

/// Where the namespace stands on one member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The cluster.
    pub cluster: String,
    /// Its state.
    pub state: MemberState,
    /// Why, when it is not `Ready`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The state of a ComputeNamespace on one member.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum MemberState {
    /// Not delivered yet (or its report is not back for the latest spec).
    #[default]
    Pending,
    /// Every object is applied as the hub has it.
    Ready,
    /// Applied, but some fields on the member differ from the hub's (being put back).
    Drifted,
    /// Some object could not be applied; the message says why.
    Failed,
}

impl std::fmt::Display for MemberState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The prefix of the placement reference a ComputeNamespace's Works carry
/// (`ComputeNamespace/<name>`): upper case and a slash, so that it is no Placement's
/// (`<namespace>/<name>`, lower case) nor ClusterPlacement's name, and delivery's
/// provenance on the members tells them apart.
pub const REFERENCE_PREFIX: &str = "ComputeNamespace/";

/// The name of ComputeNamespace `name`'s Work in each member's namespace.
pub fn work_name(name: &str) -> String {
    format!("computenamespace.{name}")
}

/// The placement reference ComputeNamespace `name`'s Works carry.
pub fn reference(name: &str) -> PlacementReference {
    PlacementReference {
        namespace: None,
        name: format!("{REFERENCE_PREFIX}{name}"),
    }
}

/// The ComputeNamespace a Work's placement reference names, if it is one's.
pub fn referenced(reference: &PlacementReference) -> Option<&str> {
    match reference.namespace {
        Some(_) => None,
        None => reference.name.strip_prefix(REFERENCE_PREFIX),
    }
}
