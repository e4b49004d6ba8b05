//! Flotilla's fleet API: the typed objects users and controllers write, and the
//! CustomResourceDefinitions the hub serves them with. No I/O: the hub installs
//! [`crds`] at start; controllers read and write these types through any client.
//!
//! ```text
//!  flotilla.io/v1alpha1
//!   Cluster ◄── member agent / push credentials     ClusterSet (groups clusters)
//!      │ labels, taints, properties                     ▲ ClusterSetBinding (namespaced:
//!      │                                                │ the sets a namespace may use)
//!      ▼
//!   Placement / ClusterPlacement ── fleet scheduler ──► Work (one per cluster, in
//!      │ resourceSelectors, clusters, replicas            flotilla-cluster-<name>)
//!      │                                                  ▲
//!   Override / ClusterOverride ── patches per cluster ────┘
//!                                                         │
//!   ComputeNamespace (a namespace every member of its ──────┘ (one Work per member)
//!      ClusterSets has the same)
//!
//!  multicluster.x-k8s.io/v1alpha1 (SIG-Multicluster, verbatim)
//!   ClusterProfile (KEP-4322)   PlacementDecision (KEP-5313)   published for consumers
//! ```
//!
//! The scheduler of `flotilla-fleet` uses the leaf types of `clusters` and `replicas`
//! (taints, tolerations, property requirements, replica modes) as they are, and converts
//! the rest explicitly (`flotilla_fleet::model`). Invariants
//! that a schema alone cannot state are CEL rules (`x-kubernetes-validations`), checked
//! by the API server on every write.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub mod access;
pub mod agent;
pub mod cluster;
pub mod compute;
pub mod multicluster;
pub mod overrides;
pub mod placement;
pub mod quantity;
pub mod revision;
mod schema;
pub mod work;

pub use cluster::{
    Cluster, ClusterAccess, ClusterSet, ClusterSetBinding, ClusterSetBindingSpec,
    ClusterSetBindingStatus, ClusterSetSpec, ClusterSetStatus, ClusterSpec, ClusterStatus,
    DEFAULT_CLUSTER_SET, PullAccess, PushAccess, SecretReference, Taint, TaintEffect,
};
pub use compute::{
    ComputeNamespace, ComputeNamespaceSpec, ComputeNamespaceStatus, MemberState, MemberStatus,
    RoleBindingTemplate, RoleTemplate, ServiceAccountTemplate,
};
pub use multicluster::{
    AccessProvider, ClusterDecision, ClusterManager, ClusterProfile, ClusterProfileRef,
    ClusterProfileSpec, ClusterProfileStatus, ClusterVersion, KubeconfigCluster, NamedExtension,
    PlacementDecision, PlacementDecisionFields, Property,
};
pub use overrides::{
    ClusterOverride, ClusterOverrideSpec, ImageOverride, JsonPatch, JsonPatchOp, Override,
    OverrideRule, OverrideSpec,
};
pub use placement::{
    APPROVAL_ANNOTATION_PREFIX, Approval, DEFAULT_PROGRESS_DEADLINE_SECONDS,
    DEFAULT_REVISION_HISTORY_LIMIT, FailedRevision, IMPLICIT_STAGE, RollbackPolicy, RolloutStage,
    RolloutStatus, StageApproval, StageStatus,
};
pub use placement::{
    ApplyPolicy, Bounds, ClusterAffinity, ClusterPlacement, ClusterPlacementSpec,
    ClusterPlacementStatus, ClusterTerm, ConflictPolicy, DeletionPolicy, Drift, DriftBound,
    DriftPolicy, Dynamic, ExcludedCluster, MAX_LISTED_CLUSTERS, PlacedCluster, Placement,
    PlacementSpec, PlacementStatus, PropertyOperator, PropertyRequirement, ReplicaMode,
    ReplicaPolicy, ResourceSelector, RolloutStrategy, SpreadConstraint, StrategyType, Toleration,
    TolerationOperator, WeightTerm,
};
pub use revision::{PlacementRevision, PlacementRevisionSpec, RevisionOverride};
pub use work::{Json, Manifest, ManifestStatus, PlacementReference, Work, WorkSpec, WorkStatus};

/// The API group of Flotilla's own kinds.
pub const GROUP: &str = "flotilla.io";

/// The version of Flotilla's own kinds.
pub const VERSION: &str = "v1alpha1";

/// The category every Flotilla kind is in: `kubectl get flotilla` lists them all.
pub const CATEGORY: &str = "flotilla";

/// The API group of the SIG-Multicluster kinds ([`ClusterProfile`], [`PlacementDecision`]).
pub const MULTICLUSTER_GROUP: &str = "multicluster.x-k8s.io";

/// The version of the SIG-Multicluster kinds served.
pub const MULTICLUSTER_VERSION: &str = "v1alpha1";

/// The condition types this API uses in `status.conditions`.
pub mod condition {
    /// A cluster has registered with the hub (Cluster).
    pub const JOINED: &str = "Joined";
    /// A cluster's API answers and its agent reports in time (Cluster).
    pub const READY: &str = "Ready";
    /// Clusters have been chosen (Placement, ClusterPlacement).
    pub const SCHEDULED: &str = "Scheduled";
    /// The manifests are applied on the member (Placement, Work, per manifest).
    pub const APPLIED: &str = "Applied";
    /// The applied objects are available, as their kind defines it (Placement, Work, per
    /// manifest).
    pub const AVAILABLE: &str = "Available";
    /// Every resource selector of the placement matches a template the hub serves
    /// (Placement, ClusterPlacement); `False` names those that match nothing.
    pub const TEMPLATES_FOUND: &str = "TemplatesFound";
    /// A rollout moves clusters to the placement's latest revision, or has completed it
    /// (Placement, ClusterPlacement); `False` when it halted, is paused or waits for an
    /// approval.
    pub const PROGRESSING: &str = "Progressing";
    /// The ClusterSet a binding names exists, so the binding binds its clusters
    /// (ClusterSetBinding).
    pub const BOUND: &str = "Bound";
    /// The cluster's control plane is healthy (ClusterProfile, KEP-4322).
    pub const CONTROL_PLANE_HEALTHY: &str = "ControlPlaneHealthy";

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    /// A condition whose `lastTransitionTime` is kept from `previous` (the object's last
    /// conditions) when its status has not changed, and is `now` otherwise, so that a
    /// status recomputed over an unchanged world compares equal.
    pub fn keep_time(
        type_: &str,
        status: &str,
        reason: &str,
        message: String,
        generation: Option<i64>,
        previous: &[Condition],
        now: &Time,
    ) -> Condition {
        let last_transition_time = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time,
        }
    }
}

/// Every CustomResourceDefinition of this API: Flotilla's eight kinds, then the two
/// SIG-Multicluster kinds.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Cluster::crd(),
        ClusterSet::crd(),
        ClusterSetBinding::crd(),
        Placement::crd(),
        ClusterPlacement::crd(),
        Override::crd(),
        ClusterOverride::crd(),
        Work::crd(),
        ClusterProfile::crd(),
        PlacementDecision::crd(),
        PlacementRevision::crd(),
        ComputeNamespace::crd(),
    ]
}

#[cfg(test)]
mod tests;
