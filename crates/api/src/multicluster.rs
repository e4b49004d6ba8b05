//! The SIG-Multicluster kinds, served verbatim (`multicluster.x-k8s.io/v1alpha1`, as in
//! `sigs.k8s.io/cluster-inventory-api`): [`ClusterProfile`] (KEP-4322, the cluster
//! inventory) and [`PlacementDecision`] (KEP-5313, a scheduler's output). Flotilla
//! publishes them for consumers such as Argo CD or Kueue.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The label naming the cluster manager a ClusterProfile belongs to.
pub const LABEL_CLUSTER_MANAGER: &str = "x-k8s.io/cluster-manager";

/// The label on a namespace naming the cluster set whose ClusterProfiles it holds.
pub const LABEL_CLUSTER_SET: &str = "multicluster.x-k8s.io/clusterset";

/// The label linking the PlacementDecision slices of one decision.
pub const LABEL_DECISION_KEY: &str = "multicluster.x-k8s.io/decision-key";

/// The label giving a slice's position (from 0) when the order of clusters matters.
pub const LABEL_DECISION_INDEX: &str = "multicluster.x-k8s.io/decision-index";

/// The label linking a decision to the workload it places, when it places one.
pub const LABEL_PLACEMENT_KEY: &str = "multicluster.x-k8s.io/placement-key";

/// The most decisions one PlacementDecision (slice) holds.
pub const MAX_DECISIONS: usize = 100;

/// ClusterProfileSpec defines the desired state of ClusterProfile.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ClusterProfile",
    namespaced,
    status = "ClusterProfileStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "ClusterProfile represents a single cluster in a multi-cluster deployment."
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileSpec {
    /// DisplayName defines a human-readable name of the ClusterProfile
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// ClusterManager defines which cluster manager owns this ClusterProfile resource
    pub cluster_manager: ClusterManager,
}

/// ClusterManager defines which cluster manager owns this ClusterProfile resource (such
/// as Open Cluster Management, KubeFleet, Karmada or Flotilla). This field is immutable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("ClusterManager is immutable"))]
pub struct ClusterManager {
    /// Name defines the name of the cluster manager
    pub name: String,
}

/// ClusterProfileStatus defines the observed state of ClusterProfile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileStatus {
    /// Conditions contains the different condition statuses for this cluster
    /// (`ControlPlaneHealthy`, `Joined`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Version defines the version information of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<ClusterVersion>,
    /// Properties defines cluster characteristics through a list of Property objects:
    /// ClusterProperty resources (KEP-2149) or custom information from cluster managers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    /// CredentialProviders is a list of cluster access providers that can provide access
    /// information for clusters. Deprecated: use AccessProviders instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential_providers: Vec<AccessProvider>,
    /// AccessProviders is a list of cluster access providers that can provide access
    /// information for clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_providers: Vec<AccessProvider>,
}

/// ClusterVersion represents version information about the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVersion {
    /// Kubernetes is the kubernetes version of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
}

/// Property defines the data structure to represent a property of a cluster: a
/// name/value pair and the last observed time of the property on the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Property {
    /// Name is the name of a property resource on cluster. It's a well-known or
    /// customized name to identify the property.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Value is a property-dependent string
    #[schemars(length(min = 1, max = 1024))]
    pub value: String,
    /// LastObservedTime is the last time the property was observed on the corresponding
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<Time>,
}

/// AccessProvider defines how to access the cluster: the provider's name (such as
/// `kubeconfig` or `oidc`) and the cluster connection details. No secrets inside.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessProvider {
    /// The provider's name.
    pub name: String,
    /// Cluster contains information about how to communicate with a kubernetes cluster
    /// (a kubeconfig `cluster` entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeconfigCluster>,
}

/// A kubeconfig `cluster` entry (`k8s.io/client-go/tools/clientcmd/api/v1.Cluster`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct KubeconfigCluster {
    /// Server is the address of the kubernetes cluster (https://hostname:port).
    pub server: String,
    /// TLSServerName is used to check server certificate. If empty, the hostname used to
    /// contact the server is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// InsecureSkipTLSVerify skips the validity check for the server's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// CertificateAuthority is the path to a cert file for the certificate authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<String>,
    /// CertificateAuthorityData contains PEM-encoded certificate authority certificates
    /// (base64 in JSON). Overrides CertificateAuthority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub certificate_authority_data: Option<String>,
    /// ProxyURL is the URL to the proxy to be used for all requests made by this client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
    /// DisableCompression allows client to opt-out of response compression for all
    /// requests to the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_compression: Option<bool>,
    /// Extensions holds additional information.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<NamedExtension>,
}

/// NamedExtension relates nicknames to extension information.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedExtension {
    /// Name is the nickname for this Extension
    pub name: String,
    /// Extension holds the extension information
    #[schemars(schema_with = "crate::schema::free_object")]
    pub extension: serde_json::Value,
}

/// The fields of a [`PlacementDecision`], which sit at the top level of the object (it has
/// no `spec`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "PlacementDecision",
    namespaced,
    no_spec,
    derive = "Default",
    derive = "PartialEq",
    doc = "PlacementDecision publishes the set of clusters chosen by a scheduler at a point in time. A single scheduling decision can fan out to N PlacementDecision slices, each limited to 100 clusters, labelled with the same multicluster.x-k8s.io/decision-key."
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecisionFields {
    /// Decisions is the list of clusters chosen for this placement decision. Up to 100
    /// ClusterDecisions per object (slice) to stay well below the etcd limit.
    #[schemars(length(max = 100))]
    pub decisions: Vec<ClusterDecision>,
    /// SchedulerName is the name of the scheduler that created this decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
}

/// ClusterDecision references a target ClusterProfile to apply workloads to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    /// ClusterProfileRef is a reference to the target ClusterProfile.
    pub cluster_profile_ref: ClusterProfileRef,
    /// Reason is an optional explanation of why this cluster was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A ClusterProfile by name and namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileRef {
    /// Name is the name of the ClusterProfile.
    pub name: String,
    /// Namespace is the namespace of the ClusterProfile. If empty, the
    /// PlacementDecision's namespace is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
