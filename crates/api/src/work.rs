//! [`Work`]: the rendered manifests for one cluster, in the namespace
//! `flotilla-cluster-<name>`, and what became of each on the member.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{ApplyPolicy, Drift};

/// The manifests one placement puts on one cluster, overrides applied.
// kube's `printcolumn(...)` repeats `type_ = "string"`, which clippy reads as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "Work",
    namespaced,
    status = "WorkStatus",
    category = "flotilla",
    derive = "Default",
    derive = "PartialEq",
    doc = "The rendered manifests of one placement for one cluster, and their status there.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.cluster",
        description = "The member cluster"
    ),
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placement.name",
        description = "The placement it renders",
        priority = 1
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Applied")].status"#,
        description = "Whether every manifest is applied"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Available")].status"#,
        description = "Whether every manifest is available"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The placement this Work renders (a ClusterPlacement has no namespace).
    pub placement: PlacementReference,
    /// The member cluster the manifests go to.
    pub cluster: String,
    /// The objects to apply, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::embedded_resources")]
    pub manifests: Vec<Manifest>,
    /// How the manifests are applied and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<ApplyPolicy>,
}

/// One object a Work applies, whole (see [`Json`]).
pub type Manifest = Json;

/// A JSON value kept as its text with the keys in order: a few hundred bytes, where its
/// decoded maps take kilobytes, for the hundreds of thousands of Works a hub holds (their
/// manifests, and what each reports back); decoded where it is used. Two are equal when
/// their values are.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Json(Arc<str>);

impl Json {
    /// The value.
    pub fn value(&self) -> Value {
        // Always the text of a JSON value: it is only ever made from one.
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// The value's JSON, keys in order.
    pub fn json(&self) -> &str {
        &self.0
    }
}

impl From<&Value> for Json {
    fn from(value: &Value) -> Self {
        // `Value`'s maps are ordered, so equal values give equal text.
        Json(value.to_string().into())
    }
}

impl From<Value> for Json {
    fn from(value: Value) -> Self {
        Json::from(&value)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a `Value`, so that the keys come out in order whatever the input's.
        Value::deserialize(deserializer).map(Json::from)
    }
}

/// A Placement (namespace and name) or a ClusterPlacement (name only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementReference {
    /// The Placement's namespace; not set for a ClusterPlacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// What became of the manifests on the member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// The `metadata.generation` this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Applied` and `Available`, over every manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<ManifestStatus>,
}

/// The state of one manifest on the member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    /// The object's API version.
    pub api_version: String,
    /// The object's kind.
    pub kind: String,
    /// The object's namespace (not set for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// `Applied` and `Available`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Selected fields of the object's status on the member (such as `readyReplicas`),
    /// as the object has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_object")]
    pub status_feedback: Option<Json>,
    /// Fields whose value on the member differs from the manifest's: at most
    /// [`DriftBound::MANIFEST`](crate::DriftBound::MANIFEST)'s count, values shortened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// How many drifted fields `drift` leaves out (unset: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlisted_drift: Option<i32>,
}
