//! Members of the fleet: [`Cluster`] (one per member) and [`ClusterSet`] (a group of them
//! with namespace sameness).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A member cluster. Its labels are the object's labels (`metadata.labels`), which
/// placements select on; the member's agent (or the hub, for push access) reports the
/// status.
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "Cluster",
    status = "ClusterStatus",
    category = "flotilla",
    derive = "Default",
    derive = "PartialEq",
    doc = "A member cluster of the fleet; placements select clusters by their labels, set, properties and taints.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#,
        description = "Whether the cluster is ready"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.kubernetesVersion",
        description = "The cluster's Kubernetes version"
    ),
    printcolumn(
        name = "Set",
        type_ = "string",
        json_path = ".spec.clusterSet",
        description = "The cluster set it belongs to",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Taints keep placements that do not tolerate them off the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// The cluster set the cluster belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_set: Option<String>,
    /// How the hub reaches the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<ClusterAccess>,
}

/// A taint on a cluster: placements that do not tolerate it are kept off.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint's key.
    pub key: String,
    /// The taint's value (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// What the taint does to placements that do not tolerate it.
    pub effect: TaintEffect,
}

/// What a [`Taint`] does to a placement that does not tolerate it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum TaintEffect {
    /// The cluster is not newly selected; a placement already on it stays.
    NoSchedule,
    /// The cluster is not selected, and a placement already on it leaves.
    NoExecute,
}

impl std::fmt::Display for Taint {
    /// `key=value:Effect`, or `key:Effect` when the value is empty (as kubectl writes it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{:?}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{:?}", self.key, self.value, self.effect)
        }
    }
}

/// How the hub reaches a cluster: it pushes with stored credentials, or the cluster's
/// agent pulls. At most one is set; neither means not decided yet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.push) && has(self.pull))")
    .message("at most one of access.push and access.pull may be set"))]
pub struct ClusterAccess {
    /// The hub connects to the cluster with credentials kept in a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushAccess>,
    /// An agent on the cluster connects to the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullAccess>,
}

/// Push access: where the credentials are.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushAccess {
    /// The Secret on the hub holding a kubeconfig for the cluster.
    pub secret_ref: SecretReference,
}

/// Pull access: who the agent is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullAccess {
    /// The identity the agent authenticates as (the subject of its client certificate).
    pub identity: String,
}

/// A Secret by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// The Secret's namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
}

/// What is known about a cluster, as its agent (or the hub) last reported it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Joined` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The Kubernetes version the cluster runs (`v1.33.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Capacity left for workloads, by resource name (`cpu`, `memory`, `pods`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Other properties by name (such as `allocatable-cpu` or
    /// `topology.kubernetes.io/region`), which placements' `propertySelector` compares.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
    /// When the cluster last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
}

/// A group of clusters with namespace sameness: a namespace of a given name means the
/// same thing on every member. Clusters join a set with `spec.clusterSet`; the set's
/// ClusterProfiles live in a namespace labelled `multicluster.x-k8s.io/clusterset=<set>`.
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "ClusterSet",
    status = "ClusterSetStatus",
    category = "flotilla",
    derive = "Default",
    derive = "PartialEq",
    doc = "A group of clusters with namespace sameness.",
    printcolumn(
        name = "Clusters",
        type_ = "integer",
        json_path = ".status.clusters",
        description = "How many clusters are in the set"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyClusters",
        description = "How many of them are ready"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetSpec {
    /// What the set is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The namespace holding the set's ClusterProfiles; the set's name if not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_namespace: Option<String>,
}

/// The set's membership as last counted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetStatus {
    /// Conditions of the set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// How many clusters are in the set.
    #[serde(default)]
    pub clusters: i32,
    /// How many of them are `Ready`.
    #[serde(default)]
    pub ready_clusters: i32,
}

/// The set that clusters joined without `spec.clusterSet` are in, for bindings: a
/// [`ClusterSetBinding`] named `default` reaches them.
pub const DEFAULT_CLUSTER_SET: &str = "default";

impl ClusterSpec {
    /// The set the cluster is in for bindings: its `clusterSet`, or
    /// [`DEFAULT_CLUSTER_SET`].
    pub fn bound_set(&self) -> &str {
        self.cluster_set.as_deref().unwrap_or(DEFAULT_CLUSTER_SET)
    }
}

/// Makes the clusters of one [`ClusterSet`] available to the Placements of a namespace, as
/// OCM's ManagedClusterSetBinding does: once a namespace holds a binding, its Placements
/// choose only clusters of the sets bound there. The binding is named after the set it
/// binds (`metadata.name` = `spec.clusterSet`, so a namespace binds a set at most once);
/// creating or changing one needs the `bind` verb on that ClusterSet.
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "ClusterSetBinding",
    namespaced,
    status = "ClusterSetBindingStatus",
    category = "flotilla",
    derive = "Default",
    derive = "PartialEq",
    doc = "Makes a ClusterSet's clusters available to the Placements of its namespace.",
    validation = Rule::new("self.metadata.name == self.spec.clusterSet")
        .message("metadata.name must equal spec.clusterSet: a binding is named after the ClusterSet it binds")
        .field_path(".spec.clusterSet"),
    printcolumn(
        name = "ClusterSet",
        type_ = "string",
        json_path = ".spec.clusterSet",
        description = "The ClusterSet bound to the namespace"
    ),
    printcolumn(
        name = "Bound",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Bound")].status"#,
        description = "Whether the ClusterSet exists"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetBindingSpec {
    /// The ClusterSet bound; the binding's own name.
    pub cluster_set: String,
}

/// Whether a binding binds anything.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSetBindingStatus {
    /// `Bound`: `True` while the ClusterSet exists (a binding to a missing set binds no
    /// cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
