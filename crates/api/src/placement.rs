//! Which resources go to which clusters: [`Placement`] (namespaced, for resources of its
//! namespace) and [`ClusterPlacement`] (cluster-scoped, for resources anywhere), both
//! with a [`PlacementSpec`].
//!
//! The fleet's scheduler reads the leaves of `spec.clusters` and `spec.replicas` as they
//! are ([`PropertyRequirement`], [`PropertyOperator`], [`Toleration`],
//! [`TolerationOperator`], [`ReplicaMode`], [`Dynamic`]: one definition each); the terms
//! holding a Kubernetes label selector or a count (`ClusterAffinity`, `ClusterTerm`,
//! `SpreadConstraint`, `ReplicaPolicy`, `WeightTerm`, `Bounds`) are converted into its
//! domain model by `flotilla_fleet::model` (selectors parsed, counts unsigned).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which resources go to which clusters, how replicas divide among them, how a change
/// rolls out and how the copies on the members are kept.
///
/// The spec of both [`Placement`] and [`ClusterPlacement`]; a Placement's resource
/// selectors name no namespace (its own is implied).
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "Placement",
    namespaced,
    status = "PlacementStatus",
    category = "flotilla",
    shortname = "pl",
    derive = "Default",
    derive = "PartialEq",
    doc = "Places resources of its namespace on member clusters.",
    validation = Rule::new("!self.spec.resourceSelectors.exists(s, has(s.__namespace__))")
        .message("spec.resourceSelectors[].namespace is only allowed in a ClusterPlacement: a Placement selects resources of its own namespace")
        .field_path(".spec.resourceSelectors"),
    validation = Rule::new("!has(self.spec.revisionHistoryLimit) || self.spec.revisionHistoryLimit >= 0")
        .message("spec.revisionHistoryLimit must not be negative")
        .field_path(".spec.revisionHistoryLimit"),
    printcolumn(
        name = "Scheduled",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Scheduled")].status"#,
        description = "Whether clusters have been chosen"
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Applied")].status"#,
        description = "Whether the resources are applied on every chosen cluster",
        priority = 1
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Available")].status"#,
        description = "Whether the resources are available on every chosen cluster"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.rollout.revision",
        description = "The revision being rolled out (or rolled out last)"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.rollout.updated",
        description = "How many chosen clusters run that revision"
    ),
    printcolumn(
        name = "Progressing",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Progressing")].status"#,
        description = "Whether a rollout is moving clusters (False: halted or waiting for an approval)"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// The resources placed: every resource any selector matches.
    pub resource_selectors: Vec<ResourceSelector>,
    /// Which clusters; every term given must hold. Empty: every cluster.
    #[serde(default)]
    pub clusters: ClusterAffinity,
    /// How the replicas of kinds that have them go to the chosen clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaPolicy>,
    /// How a change reaches the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// How the copies on the members are applied and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<ApplyPolicy>,
    /// How many old revisions are kept (besides the ones rolled out or running). Default
    /// 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
}

/// The spec of a [`ClusterPlacement`]: a [`PlacementSpec`] whose resource selectors may
/// name namespaces (and select cluster-scoped resources).
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "ClusterPlacement",
    status = "ClusterPlacementStatus",
    category = "flotilla",
    shortname = "cpl",
    derive = "Default",
    derive = "PartialEq",
    doc = "Places resources of any namespace, and cluster-scoped resources, on member clusters.",
    validation = Rule::new("!has(self.spec.revisionHistoryLimit) || self.spec.revisionHistoryLimit >= 0")
        .message("spec.revisionHistoryLimit must not be negative")
        .field_path(".spec.revisionHistoryLimit"),
    printcolumn(
        name = "Scheduled",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Scheduled")].status"#,
        description = "Whether clusters have been chosen"
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Applied")].status"#,
        description = "Whether the resources are applied on every chosen cluster",
        priority = 1
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Available")].status"#,
        description = "Whether the resources are available on every chosen cluster"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.rollout.revision",
        description = "The revision being rolled out (or rolled out last)"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.rollout.updated",
        description = "How many chosen clusters run that revision"
    ),
    printcolumn(
        name = "Progressing",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Progressing")].status"#,
        description = "Whether a rollout is moving clusters (False: halted or waiting for an approval)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ClusterPlacementSpec {
    /// The placement itself.
    #[serde(flatten)]
    pub placement: PlacementSpec,
}

/// The status of a [`ClusterPlacement`]: that of a [`Placement`].
pub type ClusterPlacementStatus = PlacementStatus;

/// Resources of one kind: by name, by labels, or all of them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.name) && has(self.labelSelector))")
    .message("name and labelSelector are exclusive: a selector picks one object by name or several by labels"))]
pub struct ResourceSelector {
    /// The resources' API version (`apps/v1`, `v1`).
    pub api_version: String,
    /// The resources' kind (`Deployment`).
    pub kind: String,
    /// The one resource of this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The resources whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Only resources of this namespace (ClusterPlacement only; a Placement selects in
    /// its own namespace). Not set: every namespace, and cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Which clusters a placement wants: every term given must hold (they are ANDed); an
/// empty affinity selects every cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Cluster names; empty means any name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Cluster sets; empty means any set (or none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_sets: Vec<String>,
    /// A selector on the clusters' labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Requirements on the clusters' properties (`status.properties` and
    /// `status.allocatable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub property_selector: Vec<PropertyRequirement>,
    /// The cluster taints tolerated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Pick this many of the matching clusters; not set: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("clusters.count must be at least 1"))]
    pub count: Option<i32>,
    /// How the clusters `count` picks spread over topologies (cluster labels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadConstraint>,
}

/// A requirement on one cluster property: `properties[name] <operator> value`. Numbers
/// and quantities compare by value; `Gt`, `Ge`, `Lt` and `Le` hold for numbers only.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PropertyRequirement {
    /// The property's name (such as `allocatable-cpu`).
    pub name: String,
    /// The comparison.
    pub operator: PropertyOperator,
    /// The value compared with.
    pub value: String,
}

/// The comparison of a [`PropertyRequirement`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PropertyOperator {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
}

impl std::fmt::Display for PropertyOperator {
    /// The operator as a symbol (`=`, `!=`, `>`, `>=`, `<`, `<=`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PropertyOperator::Eq => "=",
            PropertyOperator::Ne => "!=",
            PropertyOperator::Gt => ">",
            PropertyOperator::Ge => ">=",
            PropertyOperator::Lt => "<",
            PropertyOperator::Le => "<=",
        })
    }
}

/// A toleration of cluster taints, with Kubernetes' matching rules: an empty key with
/// `Exists` tolerates every taint, and no effect tolerates every effect.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.operator != 'Exists' || !has(self.value) || self.value == ''")
    .message("a toleration with operator Exists has no value"))]
pub struct Toleration {
    /// The taint key tolerated; empty means every key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// How the value is compared.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// The value tolerated, for `Equal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// The effect tolerated; not set means every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<crate::TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, taint: &crate::Taint) -> bool {
        self.effect.is_none_or(|effect| effect == taint.effect)
            && (self.key.is_empty() || self.key == taint.key)
            && match self.operator {
                TolerationOperator::Equal => self.value == taint.value,
                TolerationOperator::Exists => true,
            }
    }
}

/// How a [`Toleration`] compares a taint's value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum TolerationOperator {
    /// The taint's value equals the toleration's value.
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// Spread the clusters `count` picks over the values of one cluster label: the most- and
/// the least-picked values differ by at most `maxSkew` clusters where possible.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// The cluster label whose values are the topologies (such as
    /// `topology.kubernetes.io/region`).
    pub topology_key: String,
    /// The largest allowed difference.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("spread.maxSkew must be at least 1"))]
    pub max_skew: i32,
}

fn one() -> i32 {
    1
}

/// How a template's replicas go to the chosen clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.dynamic) || !has(self.weights) || size(self.weights) == 0")
    .message("replicas.weights and replicas.dynamic are exclusive"))]
pub struct ReplicaPolicy {
    /// Whether every cluster runs all replicas (`Duplicated`) or a share (`Divided`).
    #[serde(default)]
    pub mode: ReplicaMode,
    /// Static weights in `Divided` mode: a cluster's weight is that of the first term it
    /// matches, 0 if none. No terms: equal weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<WeightTerm>,
    /// Weights read from the clusters instead of `weights`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<Dynamic>,
    /// Bounds on each weighted cluster's replicas in `Divided` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_cluster: Option<Bounds>,
}

/// Whether clusters share the replicas.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ReplicaMode {
    /// Every chosen cluster runs the template's replica count.
    #[default]
    Duplicated,
    /// The replicas are divided among the chosen clusters by weight.
    Divided,
}

/// A static weight for the clusters a [`ClusterTerm`] holds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightTerm {
    /// The clusters this weight is for.
    #[serde(default)]
    pub clusters: ClusterTerm,
    /// Their weight.
    #[x_kube(validation = Rule::new("self >= 0").message("replicas.weights[].weight must not be negative"))]
    pub weight: i32,
}

/// Weights read from the clusters' status.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Dynamic {
    /// A cluster's weight is how many more replicas it reports room for.
    AvailableCapacity,
}

/// Bounds on the replicas of each weighted cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.min) || !has(self.max) || self.min <= self.max")
    .message("replicas.perCluster.min must not be greater than replicas.perCluster.max"))]
pub struct Bounds {
    /// The fewest replicas a weighted cluster gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("replicas.perCluster.min must not be negative"))]
    pub min: Option<i32>,
    /// The most replicas a cluster gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("replicas.perCluster.max must not be negative"))]
    pub max: Option<i32>,
}

/// A set of clusters named or selected by labels: a cluster belongs to it when it is one
/// of `names` (if any are given) and matches `labelSelector` (if given). An empty term
/// holds every cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTerm {
    /// Cluster names; empty means any name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// A selector on the clusters' labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// How a change reaches the chosen clusters: each change of what the placement delivers is
/// a new [`PlacementRevision`](crate::PlacementRevision), rolled out to the clusters as
/// `type` says, each cluster running either the old or the new revision of all its
/// manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.type == 'Staged' || !has(self.stages) || size(self.stages) == 0")
        .message("strategy.stages is only allowed with type Staged"),
    validation = Rule::new("self.type != 'Staged' || (has(self.stages) && size(self.stages) > 0)")
        .message("strategy.type Staged needs at least one stage"),
    validation = Rule::new("!has(self.stages) || self.stages.all(a, self.stages.exists_one(b, b.name == a.name))")
        .message("strategy.stages[].name must be unique"),
    validation = Rule::new("!has(self.maxUnavailable) || !has(self.maxSurge) || !(string(self.maxUnavailable) in ['0', '0%']) || !(string(self.maxSurge) in ['0', '0%'])")
        .message("strategy.maxUnavailable and strategy.maxSurge cannot both be 0: no cluster could move"),
)]
pub struct RolloutStrategy {
    /// `All` at once (the default), `Rolling` a few clusters at a time, or `Staged`.
    #[serde(default, rename = "type")]
    pub type_: StrategyType,
    /// With `Rolling`: how many clusters may be between revisions (moved and not yet
    /// available for `minReadySeconds`) at once: a count or a percentage of the chosen
    /// clusters, rounded down (at least 1 unless `maxSurge` allows more). Default 25%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("string(self).matches('^[0-9]+%?$')")
        .message("strategy.maxUnavailable must be a count of at least 0 or a percentage"))]
    pub max_unavailable: Option<IntOrString>,
    /// With `Rolling`: how many clusters may move beyond `maxUnavailable`: a count or a
    /// percentage of the chosen clusters, rounded up. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("string(self).matches('^[0-9]+%?$')")
        .message("strategy.maxSurge must be a count of at least 0 or a percentage"))]
    pub max_surge: Option<IntOrString>,
    /// With `Rolling`: how long a moved cluster must stay available before it counts as
    /// done and frees its place. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("strategy.minReadySeconds must not be negative"))]
    pub min_ready_seconds: Option<i32>,
    /// How long a moved cluster may take to become available before its gate fails and
    /// the rollout halts. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("strategy.progressDeadlineSeconds must be at least 1"))]
    pub progress_deadline_seconds: Option<i32>,
    /// What a failed gate does: `Manual` (the default) halts; `Automatic` also brings
    /// every moved cluster back to the last revision that completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackPolicy>,
    /// With `Staged`: the stages, in order. A stage without `clusters` takes every cluster
    /// no earlier stage took; clusters that no stage takes go in a final implicit stage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<RolloutStage>,
    /// Set: no cluster moves (`flotilla rollout pause`) until it is cleared
    /// (`flotilla rollout resume`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// The default of [`RolloutStrategy::progress_deadline_seconds`].
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// The default of [`PlacementSpec::revision_history_limit`].
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;

/// The kinds of [`RolloutStrategy`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum StrategyType {
    /// Every cluster at once.
    #[default]
    All,
    /// A few clusters at a time, the next ones once these are available.
    Rolling,
    /// Stage after stage, each gated on the health of the one before (and its approval).
    Staged,
}

/// [`RolloutStrategy::rollback`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RollbackPolicy {
    /// Halt, leaving every cluster where it is.
    #[default]
    Manual,
    /// Halt, and bring every cluster moved back to the last completed revision; the failed
    /// revision is not rolled out again until what the placement delivers changes.
    Automatic,
}

/// One stage of a `Staged` rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStage {
    /// The stage's name (what `flotilla rollout approve --stage` names).
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("strategy.stages[].name must be a DNS label"))]
    pub name: String,
    /// The clusters of this stage (those no earlier stage took). Not set: every cluster no
    /// earlier stage took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterTerm>,
    /// How many of the stage's clusters move at once: a count or a percentage of the
    /// stage's clusters (rounded down, at least 1). Default: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("string(self).matches('^[0-9]+%?$') && !(string(self) in ['0', '0%'])")
        .message("strategy.stages[].maxConcurrency must be a count of at least 1 or a percentage"))]
    pub max_concurrency: Option<IntOrString>,
    /// How long every cluster of the stage must have been available before the next stage
    /// starts. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("strategy.stages[].soakSeconds must not be negative"))]
    pub soak_seconds: Option<i32>,
    /// `Required`: the stage starts only once approved for the revision being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// [`RolloutStage::approval`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Approval {
    /// The stage starts without an approval.
    #[default]
    NotRequired,
    /// The stage waits for `flotilla rollout approve`.
    Required,
}

/// How the copies on the members are applied and kept.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyPolicy {
    /// What to do when the object on the member is owned by someone else.
    #[serde(default)]
    pub conflict: ConflictPolicy,
    /// What to do when the object on the member drifts from the hub's.
    #[serde(default)]
    pub drift: DriftPolicy,
    /// What happens on the member when the object leaves the placement.
    #[serde(default)]
    pub deletion: DeletionPolicy,
    /// The member's service account the objects are applied as (`NAME`, in the
    /// placement's own namespace on the member, or `NAMESPACE/NAME`; a ClusterPlacement
    /// has no namespace and needs the second form). Delivery, push and pull alike,
    /// impersonates `system:serviceaccount:NAMESPACE:NAME` for every request about the
    /// placement's objects, so the member's RBAC decides what the placement may create
    /// there; an object it refuses is reported as `Forbidden` in the Work's status. None:
    /// delivery's own identity on the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 317),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub service_account_name: Option<String>,
}

/// [`ApplyPolicy::conflict`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConflictPolicy {
    /// Leave the object alone and report the conflict.
    #[default]
    Abort,
    /// Take the object over.
    Overwrite,
}

/// [`ApplyPolicy::drift`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DriftPolicy {
    /// Put the hub's values back.
    #[default]
    Correct,
    /// Report the drift and leave it.
    Report,
}

/// [`ApplyPolicy::deletion`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the object from the member, whoever created it (an object taken over with
    /// `conflict: Overwrite` included).
    #[default]
    Delete,
    /// Leave the object on the member, no longer managed.
    Orphan,
    /// Delete the object if delivery created it; one that was on the member before and
    /// was taken over (`conflict: Overwrite`) is given back as `Orphan` leaves it: what
    /// the hub did not create, it does not delete.
    DeleteCreated,
}

/// Where a placement stands, fleet-wide and per cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// The `metadata.generation` this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Scheduled`, `Applied`, `Available` and `TemplatesFound`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The chosen clusters and their state: every one up to [`MAX_LISTED_CLUSTERS`];
    /// beyond that those not applied, not available or drifted come first. (The
    /// PlacementDecisions name every chosen cluster, and each cluster's Work holds its
    /// whole state.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<PlacedCluster>,
    /// How many chosen clusters `clusters` leaves out (unset: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlisted_clusters: Option<i32>,
    /// The clusters not chosen, and why: at most [`MAX_LISTED_CLUSTERS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<ExcludedCluster>,
    /// How many clusters not chosen `excluded` leaves out (unset: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlisted_excluded: Option<i32>,
    /// Where the rollout of the placement's latest revision stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// Where a placement's rollout stands ([`PlacementStatus::rollout`]). All the rollout's
/// state is here and in the Works (each names the revision it carries), none only in a
/// controller's memory: a restarted hub resumes where it was.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision being rolled out, or rolled out last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The last revision every chosen cluster ran and was available with: where new
    /// clusters start and where an automatic rollback goes back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_revision: Option<i64>,
    /// The stage being rolled out (`Staged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Chosen clusters that run `revision`.
    #[serde(default)]
    pub updated: i32,
    /// Of those, the ones available (for `minReadySeconds`).
    #[serde(default)]
    pub available: i32,
    /// Chosen clusters whose gate failed.
    #[serde(default)]
    pub failed: i32,
    /// Chosen clusters not yet moved to `revision`.
    #[serde(default)]
    pub waiting: i32,
    /// Why the rollout waits or halted, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The stages in order, the implicit last one included, with their clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStatus>,
    /// The approvals given (`flotilla rollout approve`), each for one stage and revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<StageApproval>,
    /// Revisions whose rollout failed: not rolled out again until what the placement
    /// delivers changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_revisions: Vec<FailedRevision>,
    /// The hash of what the placement's templates, overrides and spec deliver now (an
    /// undo names it: it counts while that content is unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_hash: Option<String>,
}

/// One stage in [`RolloutStatus::stages`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageStatus {
    /// The stage's name (the implicit last stage: [`IMPLICIT_STAGE`]).
    pub name: String,
    /// Its chosen clusters.
    #[serde(default)]
    pub clusters: i32,
    /// Of those, the ones that run the revision rolled out.
    #[serde(default)]
    pub updated: i32,
    /// Set for the implicit stage: why it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The name of the stage holding the clusters no declared stage takes.
pub const IMPLICIT_STAGE: &str = "(unstaged)";

/// An approval of one stage for one revision ([`RolloutStatus::approvals`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageApproval {
    /// The stage approved.
    pub stage: String,
    /// The revision it is approved for.
    pub revision: i64,
    /// Who approved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// When.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,
}

/// A revision whose rollout failed ([`RolloutStatus::failed_revisions`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedRevision {
    /// The revision.
    pub revision: i64,
    /// Its content hash.
    pub hash: String,
    /// The cluster whose gate failed first.
    pub cluster: String,
    /// Why.
    pub reason: String,
}

/// The annotation prefix of a placement's approvals: `approve.rollout.flotilla.io/<stage>`,
/// its value the JSON of a [`StageApproval`] (`flotilla rollout approve` writes it).
pub const APPROVAL_ANNOTATION_PREFIX: &str = "approve.rollout.flotilla.io/";

/// The most clusters [`PlacementStatus::clusters`] and [`PlacementStatus::excluded`] each
/// list, so that a placement's status stays far below the API's object size limit (3 MiB;
/// etcd's default is 1.5 MiB) however many clusters the fleet has: about 400 bytes per
/// listed cluster.
pub const MAX_LISTED_CLUSTERS: usize = 1000;

/// One chosen cluster in [`PlacementStatus::clusters`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacedCluster {
    /// The cluster's name.
    pub name: String,
    /// The replicas it runs, for kinds that have replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `Applied` and `Available` on this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Fields whose value on the member differs from the hub's, across the cluster's
    /// manifests: at most [`DriftBound::PLACED_CLUSTER`]'s count, values shortened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// How many drifted fields `drift` leaves out (unset: none); the cluster's Work lists
    /// more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlisted_drift: Option<i32>,
    /// The revision of the placement this cluster runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Set while the cluster is not `Ready`: since when. Its conditions are then `Unknown`
    /// and say what it last reported before that time, which counts for nothing in the
    /// placement's conditions nor in its templates' status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_since: Option<Time>,
}

/// How much drift a status lists, so that a status stays far below the API's object size
/// limit however many fields drift and however long their values are. A shortened value
/// ends with `…`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriftBound {
    /// The most entries listed.
    pub fields: usize,
    /// The most bytes of each value shown.
    pub value_bytes: usize,
}

impl DriftBound {
    /// For one manifest in a Work's status ([`crate::ManifestStatus::drift`]).
    pub const MANIFEST: DriftBound = DriftBound {
        fields: 8,
        value_bytes: 128,
    };
    /// For one chosen cluster in a placement's status ([`PlacedCluster::drift`]), which
    /// lists up to [`MAX_LISTED_CLUSTERS`] clusters.
    pub const PLACED_CLUSTER: DriftBound = DriftBound {
        fields: 4,
        value_bytes: 64,
    };

    /// The first entries of `drift` within the bound, and how many it left out (`None`
    /// for none).
    pub fn apply(self, mut drift: Vec<Drift>) -> (Vec<Drift>, Option<i32>) {
        let all = drift.len();
        drift.truncate(self.fields);
        for entry in &mut drift {
            for value in [&mut entry.hub, &mut entry.member].into_iter().flatten() {
                shorten(value, self.value_bytes);
            }
        }
        let left_out =
            (all > drift.len()).then(|| i32::try_from(all - drift.len()).unwrap_or(i32::MAX));
        (drift, left_out)
    }
}

/// Cuts `value` to at most `bytes` bytes (at a character boundary), the last one `…`.
fn shorten(value: &mut String, bytes: usize) {
    const MARK: &str = "…";
    if value.len() <= bytes {
        return;
    }
    let mut end = bytes.saturating_sub(MARK.len());
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value.truncate(end);
    value.push_str(MARK);
}

/// A field whose value on a member differs from the hub's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// The field, as a JSON pointer into the object (`/spec/replicas`).
    pub path: String,
    /// The hub's value, as JSON; not set: the hub does not set the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// The member's value, as JSON; not set: the field is absent on the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// A cluster not chosen, in [`PlacementStatus::excluded`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExcludedCluster {
    /// The cluster's name.
    pub name: String,
    /// Why it was not chosen (such as `label selector does not match`).
    pub reason: String,
}
