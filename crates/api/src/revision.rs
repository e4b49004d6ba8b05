//! [`PlacementRevision`]: one immutable, numbered snapshot of what a placement delivers —
//! its templates as selected, the Overrides and ClusterOverrides that select them, and its
//! own division and apply policy — as a ControllerRevision is of a StatefulSet's template.
//!
//! ```text
//!  templates ─┐
//!  overrides ─┼─► hash ──(new hash)──► PlacementRevision <placement>-<n>  (n = last + 1)
//!  replicas,  │                          owned by the placement (garbage-collected with it),
//!  apply ─────┘                          at most revisionHistoryLimit old ones kept
//!
//!  rendering a revision for a cluster (the fleet's plan) is deterministic: every cluster,
//!  one joining later included, gets the same objects from the same revision
//! ```
//!
//! A Placement's revisions live in its namespace, a ClusterPlacement's in the fleet's
//! system namespace (named `clusterplacement.<name>-<n>`). Each Work names the revision it
//! carries ([`REVISION_ANNOTATION`]).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ApplyPolicy, Manifest, OverrideSpec, PlacementReference, ReplicaPolicy};

/// The snapshot itself: nothing in it changes once written.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "flotilla.io",
    version = "v1alpha1",
    kind = "PlacementRevision",
    namespaced,
    category = "flotilla",
    shortname = "plrev",
    derive = "Default",
    derive = "PartialEq",
    doc = "One immutable, numbered snapshot of what a placement delivers.",
    validation = Rule::new("self.spec == oldSelf.spec")
        .message("a PlacementRevision is immutable: a change of what a placement delivers is a new revision")
        .field_path(".spec"),
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placement.name",
        description = "The placement it is a revision of"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".spec.revision",
        description = "Its number"
    ),
    printcolumn(
        name = "Hash",
        type_ = "string",
        json_path = ".spec.hash",
        description = "The hash of its content"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRevisionSpec {
    /// The placement (a ClusterPlacement has no namespace).
    pub placement: PlacementReference,
    /// The revision's number: 1, then one more for each change.
    pub revision: i64,
    /// A short hash of the content: a revision is made when the content's hash differs
    /// from the last one's.
    pub hash: String,
    /// Why it was made, in words (such as `Deployment shop/web changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_cause: Option<String>,
    /// The templates, as the placement selected them (no status, no server fields).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::schema::embedded_resources")]
    pub templates: Vec<Manifest>,
    /// The Overrides and ClusterOverrides that select any of the templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<RevisionOverride>,
    /// The placement's division of replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaPolicy>,
    /// The placement's apply policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<ApplyPolicy>,
}

/// One Override (namespace set) or ClusterOverride in a [`PlacementRevisionSpec`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionOverride {
    /// The Override's namespace; not set for a ClusterOverride.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its spec.
    pub spec: OverrideSpec,
}

/// The annotation on a Work naming the revision (its number) the Work carries.
pub const REVISION_ANNOTATION: &str = "rollout.flotilla.io/revision";

/// The annotation on a Work saying when it moved to the revision it carries (RFC 3339):
/// where its progress deadline counts from.
pub const MOVED_AT_ANNOTATION: &str = "rollout.flotilla.io/moved-at";

/// The label on a PlacementRevision naming its placement (its name).
pub const PLACEMENT_LABEL: &str = "rollout.flotilla.io/placement";

/// The annotation on a placement asking to roll back to an old revision (`flotilla rollout
/// undo`): `<revision>:<hash>`, the hash being that of the revision rolled out when it was
/// asked. While what the placement delivers still has that hash, the old revision's content
/// is rolled out as a new revision; once it changes, the annotation no longer counts.
pub const UNDO_ANNOTATION: &str = "rollout.flotilla.io/undo-to";
