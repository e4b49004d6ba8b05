//! Per-cluster specialisation of placed resources: [`Override`] (namespaced, for
//! resources of its namespace) and [`ClusterOverride`] (cluster-scoped), both with an
//! [`OverrideSpec`].
//!
//! Values in JSON patches may hold variables, replaced per cluster when a Work is
//! rendered: `${cluster.name}`, `${cluster.labels['k']}`, `${cluster.properties['p']}`.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ClusterTerm, ResourceSelector};

/// Changes made to the selected resources on the selected clusters: the rules, in order.
///
/// The spec of both [`Override`] and [`ClusterOverride`]; an Override's resource
/// selectors name no namespace (its own is implied).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "Override",
    namespaced,
    category = "flotilla",
    shortname = "ov",
    derive = "Default",
    derive = "PartialEq",
    doc = "Specialises resources of its namespace per cluster.",
    validation = Rule::new("!self.spec.resourceSelectors.exists(s, has(s.__namespace__))")
        .message("spec.resourceSelectors[].namespace is only allowed in a ClusterOverride: an Override selects resources of its own namespace")
        .field_path(".spec.resourceSelectors"),
    validation = Rule::new(CONFINED_PATCHES)
        .message("an Override's jsonPatch may not change /metadata/namespace (nor replace /metadata, /kind or /apiVersion): what it changes stays in its namespace, as what it is")
        .field_path(".spec.rules"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSpec {
    /// The resources changed: every resource any selector matches.
    pub resource_selectors: Vec<ResourceSelector>,
    /// The clusters on which they are changed. Not set: every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterTerm>,
    /// The changes, applied in order.
    pub rules: Vec<OverrideRule>,
}

/// The CEL rule that keeps an [`Override`]'s JSON patches inside its namespace: no patch
/// may write `/metadata/namespace` (moving the object to another namespace, or making it
/// look cluster-scoped by removing it), replace the whole `/metadata` (which holds the
/// namespace), nor change `/kind` or `/apiVersion` (which could make it a cluster-scoped
/// kind). Labels, annotations and images cannot name a namespace. What no rule can see
/// (a ClusterOverride's patches, applied to a Placement's templates too) the renderer
/// checks on the rendered manifest.
const CONFINED_PATCHES: &str = "self.spec.rules.all(r, !has(r.jsonPatch) || r.jsonPatch.all(p, \
    !(p.path in ['/metadata', '/metadata/namespace', '/kind', '/apiVersion'] \
    || p.path.startsWith('/metadata/namespace/'))))";

/// The spec of a [`ClusterOverride`]: an [`OverrideSpec`] whose resource selectors may
/// name namespaces (and select cluster-scoped resources).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "ClusterOverride",
    category = "flotilla",
    shortname = "cov",
    derive = "Default",
    derive = "PartialEq",
    doc = "Specialises resources of any namespace, and cluster-scoped resources, per cluster.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ClusterOverrideSpec {
    /// The override itself.
    #[serde(flatten)]
    pub spec: OverrideSpec,
}

/// One change. A rule sets one or more of its fields; they apply in the order listed
/// here (JSON patch, image, labels, annotations).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.jsonPatch) || has(self.image) || has(self.labels) || has(self.annotations)")
    .message("a rule sets at least one of jsonPatch, image, labels and annotations"))]
pub struct OverrideRule {
    /// RFC 6902 operations, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_patch: Vec<JsonPatch>,
    /// Changes to the images of every container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageOverride>,
    /// Labels set on the object (an empty value removes the label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations set on the object (an empty value removes the annotation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One RFC 6902 operation. String values may hold `${cluster.…}` variables.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.op == 'remove' ? !has(self.value) : has(self.value)")
        .message("jsonPatch: add and replace take a value, remove takes none"),
    validation = Rule::new("self.path.startsWith('/')")
        .message("jsonPatch path must be a JSON pointer starting with '/'")
)]
pub struct JsonPatch {
    /// The operation.
    pub op: JsonPatchOp,
    /// The JSON pointer to the field (`/spec/replicas`).
    pub path: String,
    /// The value for `add` and `replace`: any JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_value")]
    pub value: Option<serde_json::Value>,
}

/// The operations a [`JsonPatch`] may use.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JsonPatchOp {
    /// Add a field or list item (or replace a field).
    Add,
    /// Remove a field or list item.
    Remove,
    /// Replace a field that exists.
    Replace,
}

/// Changes to container images (`registry/repository:tag`): each part given replaces
/// that part of every container's image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.registry) || has(self.repository) || has(self.tag)")
    .message("image sets at least one of registry, repository and tag"))]
pub struct ImageOverride {
    /// The registry (`registry.example.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// The repository (`team/web`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The tag (`1.2.3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}
