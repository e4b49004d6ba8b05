//! Rendering: a template object from the hub, turned into the manifest for one member
//! cluster. Pure: JSON in, JSON out.
//!
//! ```text
//!  template (hub object, serde_json::Value)
//!      │
//!      ▼
//!  clean ──────────── drops status, server-managed metadata, last-applied annotation
//!      │
//!      ▼
//!  replicas ───────── Some(n) on an apps/v1 Deployment, StatefulSet or ReplicaSet:
//!      │              spec.replicas = n
//!      ▼
//!  each override, in order          ClusterFacts (name, labels, properties)
//!   └ each rule, in order                │ ${cluster.name}, ${cluster.labels['k']},
//!      │                                 ▼ ${cluster.properties['p']} in its strings
//!      ├─ jsonPatch ops (RFC 6902, json-patch), then: apiVersion, kind, name and
//!      │  namespace still the template's?
//!      ├─ image ─── every container and initContainer of the pod template:
//!      │            [registry[:port]/]repository[:tag][@digest], parts replaced
//!      ├─ labels, then annotations ─── set; an empty value removes one
//!      │
//!      ▼
//!  manifest for the cluster, or RenderError (override, rule, op, what failed)
//! ```
//!
//! Rendering is deterministic: the same inputs give the same manifest.

use std::collections::BTreeMap;
use std::fmt;

use flotilla_api::{ImageOverride, JsonPatchOp, OverrideRule};
use serde_json::{Map, Value};

mod image;
mod patch;
mod variables;

use variables::VariableError;

/// What a rule may refer to about the cluster: `${cluster.name}`,
/// `${cluster.labels['k']}`, `${cluster.properties['p']}`.
#[derive(Debug, Clone, Copy)]
pub struct ClusterFacts<'a> {
    /// The cluster's name.
    pub name: &'a str,
    /// The cluster's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The cluster's properties.
    pub properties: &'a BTreeMap<String, String>,
}

/// One override's rules, in order, with the override's name for error messages
/// (`shop/web-image` or `global-registry`).
#[derive(Debug, Clone, Copy)]
pub struct OverrideRules<'a> {
    /// The override's name (`namespace/name` for an Override, `name` for a ClusterOverride).
    pub name: &'a str,
    /// Its rules, applied in order.
    pub rules: &'a [OverrideRule],
}

/// Where a rule failed: the override, the rule's index and, for a JSON patch, the
/// operation's index. Displayed as `override shop/web rule 0, jsonPatch op 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulePosition {
    /// The override's name.
    pub override_name: String,
    /// The rule's index in the override.
    pub rule: usize,
    /// The JSON patch operation's index in the rule, when one failed.
    pub op: Option<usize>,
}

impl fmt::Display for RulePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "override {} rule {}", self.override_name, self.rule)?;
        if let Some(op) = self.op {
            write!(f, ", jsonPatch op {op}")?;
        }
        Ok(())
    }
}

/// Why a template cannot be rendered for a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The template is not a JSON object, or its `spec` is not one where replicas go.
    #[error("cannot render the template: {reason}")]
    InvalidTemplate {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A string of a rule holds a `${…}` that is no known variable.
    #[error(
        "{at}: unknown variable {variable} (known: ${{cluster.name}}, ${{cluster.labels['k']}}, ${{cluster.properties['p']}})"
    )]
    UnknownVariable {
        /// Where.
        at: RulePosition,
        /// The whole `${…}`.
        variable: String,
    },
    /// A string of a rule holds a `${` with no `}` after it.
    #[error("{at}: \"${{\" without a closing \"}}\" in {text:?}")]
    UnterminatedVariable {
        /// Where.
        at: RulePosition,
        /// The string from the `${` on.
        text: String,
    },
    /// A rule refers to a label the cluster does not have.
    #[error("{at}: cluster {cluster} has no label {label:?}")]
    MissingLabel {
        /// Where.
        at: RulePosition,
        /// The cluster's name.
        cluster: String,
        /// The label's key.
        label: String,
    },
    /// A rule refers to a property the cluster does not have.
    #[error("{at}: cluster {cluster} has no property {property:?}")]
    MissingProperty {
        /// Where.
        at: RulePosition,
        /// The cluster's name.
        cluster: String,
        /// The property's name.
        property: String,
    },
    /// A JSON patch operation failed (a missing path, a bad index, not a JSON pointer).
    #[error("{at}: {} {path}: {reason}", op_name(.op))]
    Patch {
        /// Where.
        at: RulePosition,
        /// The operation.
        op: JsonPatchOp,
        /// Its path.
        path: String,
        /// Why it failed.
        reason: String,
    },
    /// An image override on a kind with no pod template.
    #[error("{at}: image override on a {kind}: it has no containers")]
    NoContainers {
        /// Where.
        at: RulePosition,
        /// The object's kind.
        kind: String,
    },
    /// A container's image is missing or not an image reference, before or after the
    /// override.
    #[error("{at}: container {container:?}: {reason}")]
    Image {
        /// Where.
        at: RulePosition,
        /// The container's name (or `containers[i]` if it has none).
        container: String,
        /// What is wrong with the image.
        reason: String,
    },
    /// A rule sets labels or annotations but the map, or `metadata`, is not an object.
    #[error("{at}: {field} is not an object")]
    NotAnObject {
        /// Where.
        at: RulePosition,
        /// `the object`, `metadata`, `metadata.labels` or `metadata.annotations`.
        field: &'static str,
    },
    /// A rule changed the object's apiVersion, kind, name or namespace.
    #[error(
        "{at}: changes {field} from {before} to {after}, but the rendered object must keep the template's apiVersion, kind, name and namespace"
    )]
    IdentityChanged {
        /// `apiVersion`, `kind`, `metadata.name` or `metadata.namespace`.
        field: &'static str,
        /// Where.
        at: RulePosition,
        /// The template's value, as JSON (`nothing` if it had none).
        before: String,
        /// The value after the rule, as JSON (`nothing` if it has none).
        after: String,
    },
}

fn op_name(op: &JsonPatchOp) -> &'static str {
    match op {
        JsonPatchOp::Add => "add",
        JsonPatchOp::Remove => "remove",
        JsonPatchOp::Replace => "replace",
    }
}

/// Metadata the API server manages, dropped by [`clean`].
const SERVER_MANAGED: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "selfLink",
    "finalizers",
    "generateName",
];

/// The annotation `kubectl apply` keeps, dropped by [`clean`].
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields that name an object, which no override may change: (name, JSON pointer).
const IDENTITY: [(&str, &str); 4] = [
    ("apiVersion", "/apiVersion"),
    ("kind", "/kind"),
    ("metadata.name", "/metadata/name"),
    ("metadata.namespace", "/metadata/namespace"),
];

/// `template` rendered for `cluster`: [`clean`]ed, its replica count set to `replicas`
/// (if given and the kind has one, see [`replicas()`]), then each override's rules
/// applied in order. Within a rule: its JSON patch operations in order, then the
/// image, the labels and the annotations. Variables in a rule's strings are replaced
/// by the cluster's facts first.
///
/// Fails, naming the override, rule and operation, if a variable cannot be replaced,
/// an operation or image override cannot apply, or a rule changes the object's
/// apiVersion, kind, name or namespace.
///
/// ```
/// use std::collections::BTreeMap;
/// use flotilla_api::{ImageOverride, OverrideRule};
/// use flotilla_fleet::render::{ClusterFacts, OverrideRules, render};
/// use serde_json::json;
///
/// let template = json!({
///     "apiVersion": "apps/v1", "kind": "Deployment",
///     "metadata": {"name": "web", "namespace": "shop", "uid": "1234"},
///     "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
/// });
/// let rules = [OverrideRule {
///     image: Some(ImageOverride { tag: Some("${cluster.name}".into()), ..Default::default() }),
///     ..Default::default()
/// }];
/// let none = BTreeMap::new();
/// let cluster = ClusterFacts { name: "eu-1", labels: &none, properties: &none };
/// let overrides = [OverrideRules { name: "shop/web-image", rules: &rules }];
///
/// let manifest = render(&template, Some(3), &cluster, &overrides)?;
/// assert_eq!(manifest["spec"]["replicas"], 3);
/// assert_eq!(manifest["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:eu-1");
/// assert!(manifest["metadata"].get("uid").is_none());
/// # Ok::<(), flotilla_fleet::render::RenderError>(())
/// ```
pub fn render(
    template: &Value,
    replicas: Option<i64>,
    cluster: &ClusterFacts,
    overrides: &[OverrideRules],
) -> Result<Value, RenderError> {
    let mut object = clean(template);
    let Some(fields) = object.as_object_mut() else {
        return Err(RenderError::InvalidTemplate {
            reason: "it is not a JSON object",
        });
    };
    if let Some(count) = replicas.filter(|_| has_replicas(template)) {
        let Value::Object(spec) = fields
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()))
        else {
            return Err(RenderError::InvalidTemplate {
                reason: "its spec is not an object",
            });
        };
        spec.insert("replicas".to_owned(), count.into());
    }
    let identity = IDENTITY.map(|(_, pointer)| object.pointer(pointer).cloned());
    for rules in overrides {
        for (index, rule) in rules.rules.iter().enumerate() {
            let at = RulePosition {
                override_name: rules.name.to_owned(),
                rule: index,
                op: None,
            };
            apply_rule(&mut object, rule, cluster, &at, &identity)?;
        }
    }
    Ok(object)
}

/// The replica count of an apps/v1 Deployment, StatefulSet or ReplicaSet: `spec.replicas`,
/// or 1 (the API server's default) when it is absent or not an integer. `None` for every
/// other kind.
pub fn replicas(template: &Value) -> Option<i64> {
    has_replicas(template).then(|| {
        template
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
    })
}

/// `template` without server-managed state: no `status`; no uid, resourceVersion,
/// generation, timestamps, managedFields, ownerReferences, selfLink, finalizers or
/// generateName in its metadata; no last-applied-configuration annotation (and no
/// annotations map left empty). Everything else is kept. A value that is not an object
/// is returned as it is.
pub fn clean(template: &Value) -> Value {
    let mut object = template.clone();
    let Some(fields) = object.as_object_mut() else {
        return object;
    };
    fields.remove("status");
    if let Some(Value::Object(metadata)) = fields.get_mut("metadata") {
        for field in SERVER_MANAGED {
            metadata.remove(*field);
        }
        if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
    object
}

fn has_replicas(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("apps/v1")
        && matches!(
            object.get("kind").and_then(Value::as_str),
            Some("Deployment" | "StatefulSet" | "ReplicaSet")
        )
}

fn apply_rule(
    object: &mut Value,
    rule: &OverrideRule,
    cluster: &ClusterFacts,
    at: &RulePosition,
    identity: &[Option<Value>; 4],
) -> Result<(), RenderError> {
    for (index, operation) in rule.json_patch.iter().enumerate() {
        let at = RulePosition {
            op: Some(index),
            ..at.clone()
        };
        let value = (operation.value.as_ref())
            .map(|value| variables::substitute_value(value, cluster))
            .transpose()
            .map_err(|error| variable_error(&at, cluster, error))?;
        patch::apply(object, operation.op, &operation.path, value).map_err(|reason| {
            RenderError::Patch {
                at,
                op: operation.op,
                path: operation.path.clone(),
                reason,
            }
        })?;
    }
    for (&(field, pointer), before) in IDENTITY.iter().zip(identity) {
        let after = object.pointer(pointer);
        if after != before.as_ref() {
            let show = |value: Option<&Value>| value.map_or("nothing".to_owned(), Value::to_string);
            return Err(RenderError::IdentityChanged {
                field,
                at: at.clone(),
                before: show(before.as_ref()),
                after: show(after),
            });
        }
    }
    if let Some(image) = &rule.image {
        override_images(object, image, cluster, at)?;
    }
    set_metadata(object, "labels", &rule.labels, cluster, at)?;
    set_metadata(object, "annotations", &rule.annotations, cluster, at)
}

/// Where the kind keeps its pod spec, as a JSON pointer; `None` for kinds with no pod
/// template.
fn pod_spec(object: &Value) -> Option<&'static str> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    match (group, object.get("kind").and_then(Value::as_str)?) {
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job")
        | ("", "ReplicationController") => Some("/spec/template/spec"),
        ("batch", "CronJob") => Some("/spec/jobTemplate/spec/template/spec"),
        ("", "Pod") => Some("/spec"),
        _ => None,
    }
}

fn override_images(
    object: &mut Value,
    change: &ImageOverride,
    cluster: &ClusterFacts,
    at: &RulePosition,
) -> Result<(), RenderError> {
    let Some(pointer) = pod_spec(object) else {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("(no kind)");
        return Err(RenderError::NoContainers {
            at: at.clone(),
            kind: kind.to_owned(),
        });
    };
    let part = |part: &Option<String>| {
        part.as_deref()
            .map(|text| variables::substitute(text, cluster))
            .transpose()
            .map_err(|error| variable_error(at, cluster, error))
    };
    let (registry, repository, tag) = (
        part(&change.registry)?,
        part(&change.repository)?,
        part(&change.tag)?,
    );
    let Some(pod) = object.pointer_mut(pointer) else {
        return Ok(());
    };
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for (index, container) in containers.iter_mut().enumerate() {
            let name = match container.get("name").and_then(Value::as_str) {
                Some(name) => name.to_owned(),
                None => format!("{list}[{index}]"),
            };
            let failed = |reason: String| RenderError::Image {
                at: at.clone(),
                container: name.clone(),
                reason,
            };
            let Some(Value::String(current)) = container.get_mut("image") else {
                return Err(failed("it has no image".to_owned()));
            };
            *current = image::replace_parts(
                current,
                registry.as_deref(),
                repository.as_deref(),
                tag.as_deref(),
            )
            .map_err(failed)?;
        }
    }
    Ok(())
}

/// Sets `entries` in `metadata.<map>` (an empty value removes the key; a map left empty
/// is removed).
fn set_metadata(
    object: &mut Value,
    map: &'static str,
    entries: &BTreeMap<String, String>,
    cluster: &ClusterFacts,
    at: &RulePosition,
) -> Result<(), RenderError> {
    if entries.is_empty() {
        return Ok(());
    }
    let not_an_object = |field| RenderError::NotAnObject {
        at: at.clone(),
        field,
    };
    let fields = object
        .as_object_mut()
        .ok_or_else(|| not_an_object("the object"))?;
    let Value::Object(metadata) = fields
        .entry("metadata")
        .or_insert_with(|| Map::new().into())
    else {
        return Err(not_an_object("metadata"));
    };
    let Value::Object(values) = metadata.entry(map).or_insert_with(|| Map::new().into()) else {
        return Err(not_an_object(if map == "labels" {
            "metadata.labels"
        } else {
            "metadata.annotations"
        }));
    };
    for (key, value) in entries {
        let value = variables::substitute(value, cluster)
            .map_err(|error| variable_error(at, cluster, error))?;
        if value.is_empty() {
            values.remove(key);
        } else {
            values.insert(key.clone(), value.into());
        }
    }
    if values.is_empty() {
        metadata.remove(map);
    }
    Ok(())
}

fn variable_error(at: &RulePosition, cluster: &ClusterFacts, error: VariableError) -> RenderError {
    let at = at.clone();
    let cluster = cluster.name.to_owned();
    match error {
        VariableError::Unknown(variable) => RenderError::UnknownVariable { at, variable },
        VariableError::Unterminated(text) => RenderError::UnterminatedVariable { at, text },
        VariableError::MissingLabel(label) => RenderError::MissingLabel { at, cluster, label },
        VariableError::MissingProperty(property) => RenderError::MissingProperty {
            at,
            cluster,
            property,
        },
    }
}

#[cfg(test)]
mod tests;
