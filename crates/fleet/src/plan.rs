//! What one placement wants on the fleet, computed without a server: the templates it
//! selects (the detector's rule), the clusters chosen, the replicas each gets, and one
//! rendered [`WorkSpec`] per chosen cluster.
//!
//! ```text
//!  templates ──selects()──► placed templates ─┐
//!  Cluster objects ──view()──► select_within(reach, affinity) ─► chosen ─┐
//!  current Works ──► previous replicas per template ──► divide() per template
//!                                              │           │
//!  ClusterOverrides (by name), then Overrides ─┴─► render() per (template, cluster)
//!                                                          ▼
//!        Plan { selection, works: cluster → WorkSpec, replicas (per cluster, and per
//!               template and cluster as rendered), scheduled, failed }
//! ```
//!
//! A cluster whose rendering fails keeps its current Work untouched (`failed` says why):
//! a Work is always whole. A rule that changes a template's apiVersion, kind, name or
//! namespace is such a failure: what a Placement delivers stays in its namespace. A division that cannot be made (all weights zero, min above
//! max) leaves every current Work as it is and says why in `scheduled`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_api::{
    Cluster, Manifest, OverrideSpec, PlacementReference, PlacementSpec, ResourceSelector, WorkSpec,
};
use serde_json::{Value, json};

use crate::model::{self, ModelError};
use crate::render::{self, ClusterFacts, OverrideRules};
use crate::{
    ClusterAffinity, ClusterTerm, ClusterView, LabelSelector, Reach, ReplicaPolicy, Selection,
};

/// A Placement (namespace and name) or a ClusterPlacement (name only).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacementKey {
    /// The Placement's namespace; `None` for a ClusterPlacement.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl PlacementKey {
    /// The name of this placement's Work in each cluster's namespace: `<namespace>.<name>`
    /// for a Placement (namespaces hold no dots), `<name>` for a ClusterPlacement.
    pub fn work_name(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{namespace}.{}", self.name),
            None => self.name.clone(),
        }
    }

    /// The reference a Work carries.
    pub fn reference(&self) -> PlacementReference {
        PlacementReference {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl std::fmt::Display for PlacementKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{namespace}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The namespace of the Works of cluster `cluster`.
pub fn work_namespace(cluster: &str) -> String {
    format!("{WORK_NAMESPACE_PREFIX}{cluster}")
}

/// The prefix of the namespaces that hold each cluster's Works.
pub const WORK_NAMESPACE_PREFIX: &str = "flotilla-cluster-";

/// The annotation marking a manifest shared by several placements (a namespace the
/// hub adds for namespaced templates): delivery neither claims it nor deletes it.
pub use flotilla_delivery::provenance::ANNOTATION_SHARED as SHARED_ANNOTATION;

/// Whether a placement in `namespace` (`None`: a ClusterPlacement) selects `object`.
pub fn selects(spec: &PlacementSpec, namespace: Option<&str>, object: &Value) -> bool {
    spec.resource_selectors
        .iter()
        .any(|selector| selector_matches(selector, namespace, object))
}

/// Whether one resource selector of a placement or override in `namespace` (`None`:
/// cluster-scoped) matches `object`.
pub fn selector_matches(
    selector: &ResourceSelector,
    namespace: Option<&str>,
    object: &Value,
) -> bool {
    let metadata = &object["metadata"];
    let object_namespace = metadata["namespace"].as_str();
    let namespace_ok = match namespace {
        Some(own) => object_namespace == Some(own),
        None => selector
            .namespace
            .as_deref()
            .is_none_or(|wanted| object_namespace == Some(wanted)),
    };
    namespace_ok
        && object["apiVersion"] == selector.api_version.as_str()
        && object["kind"] == selector.kind.as_str()
        && selector
            .name
            .as_deref()
            .is_none_or(|name| metadata["name"] == name)
        && selector.label_selector.as_ref().is_none_or(|s| {
            LabelSelector::try_from(s).is_ok_and(|s| s.matches(&model::labels_of(object)))
        })
}

/// An Override (namespace set) or ClusterOverride, as the planner needs it.
#[derive(Debug, Clone, Copy)]
pub struct OverrideRef<'a> {
    /// The Override's namespace; `None` for a ClusterOverride.
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a OverrideSpec,
}

/// Everything a plan is made from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The placement.
    pub placement: &'a PlacementKey,
    /// Its spec.
    pub spec: &'a PlacementSpec,
    /// The objects it selects (see [`selects`]).
    pub templates: &'a [Value],
    /// Every Cluster.
    pub clusters: &'a [Arc<Cluster>],
    /// The clusters the placement may reach ([`crate::tenancy::reach`]).
    pub reach: &'a Reach,
    /// Every Override and ClusterOverride (those not matching are skipped).
    pub overrides: &'a [OverrideRef<'a>],
    /// The placement's current Works, by cluster.
    pub current: &'a BTreeMap<String, &'a WorkSpec>,
}

/// What a placement wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The clusters chosen and why the others were not.
    pub selection: Selection,
    /// The Work wanted on each chosen cluster (a cluster whose rendering failed keeps its
    /// current Work, if it has one).
    pub works: BTreeMap<String, WorkSpec>,
    /// The replicas each chosen cluster runs (summed over the templates that have
    /// replicas); empty when no template has any.
    pub replicas: BTreeMap<String, i64>,
    /// The replicas of each template with replicas on each chosen cluster, as its Work
    /// asks for them (the division, then the overrides): what the cluster's reports of
    /// the template are measured against.
    pub template_replicas: BTreeMap<ManifestId, BTreeMap<String, i64>>,
    /// Whether the scheduling could be done; `Err` says why not (every current Work is
    /// then kept as it is, unless no cluster was chosen: then none is wanted).
    pub scheduled: Result<(), Unscheduled>,
    /// Clusters whose Work could not be rendered, and why.
    pub failed: BTreeMap<String, String>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            selection: Selection::default(),
            works: BTreeMap::new(),
            replicas: BTreeMap::new(),
            template_replicas: BTreeMap::new(),
            scheduled: Ok(()),
            failed: BTreeMap::new(),
        }
    }
}

/// Why a placement is not scheduled: the reason of its `Scheduled=False` condition, and
/// the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unscheduled {
    /// The condition's reason (one of the constants of this type).
    pub reason: &'static str,
    /// What went wrong, in words.
    pub message: String,
}

impl Unscheduled {
    /// No cluster is chosen (none joined, none matches, none within reach).
    pub const NO_CLUSTERS: &'static str = "NoClusters";
    /// The namespace holds no ClusterSetBinding and tenancy is bound.
    pub const NO_CLUSTER_SET_BINDING: &'static str = "NoClusterSetBinding";
    /// The replicas cannot be divided among the chosen clusters.
    pub const CANNOT_DIVIDE: &'static str = "CannotDivide";
    /// The spec does not map onto the scheduler's model.
    pub const INVALID: &'static str = "InvalidPlacement";

    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Unscheduled {
            reason,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Unscheduled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Identity of a manifest: apiVersion, kind, namespace, name.
pub type ManifestId = (String, String, String, String);

/// The identity of an object.
pub fn manifest_id(object: &Value) -> ManifestId {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

/// Plans a placement.
pub fn plan(inputs: Inputs<'_>) -> Plan {
    match try_plan(inputs) {
        Ok(plan) => plan,
        Err(why) => Plan {
            works: inputs
                .current
                .iter()
                .map(|(cluster, work)| (cluster.clone(), (*work).clone()))
                .collect(),
            scheduled: Err(why),
            ..Plan::default()
        },
    }
}

fn try_plan(inputs: Inputs<'_>) -> Result<Plan, Unscheduled> {
    let model_error = |e: ModelError| Unscheduled::new(Unscheduled::INVALID, e.to_string());
    let views: Vec<ClusterView> = inputs.clusters.iter().map(|c| model::view(c)).collect();
    let affinity = ClusterAffinity::try_from(&inputs.spec.clusters).map_err(model_error)?;
    let policy = inputs
        .spec
        .replicas
        .as_ref()
        .map(ReplicaPolicy::try_from)
        .transpose()
        .map_err(model_error)?
        .unwrap_or_default();
    let previous: Vec<String> = inputs.current.keys().cloned().collect();
    let selection = crate::select_within(inputs.reach, &affinity, &views, &previous);
    if let Reach::Unbound { namespace } = inputs.reach {
        // Nothing chosen is a decision: the current Works go.
        let why = format!(
            "namespace {namespace} has no ClusterSetBinding: under bound tenancy its \
             Placements choose no cluster until a ClusterSet is bound to it"
        );
        return Ok(Plan {
            selection,
            scheduled: Err(Unscheduled::new(Unscheduled::NO_CLUSTER_SET_BINDING, why)),
            ..Plan::default()
        });
    }
    if selection.chosen.is_empty() {
        let reasons: Vec<String> = selection
            .excluded
            .iter()
            .take(5)
            .map(|(name, reason)| format!("{name}: {reason}"))
            .collect();
        let why = if views.is_empty() {
            "no cluster has joined the fleet".to_owned()
        } else {
            format!(
                "no cluster matches the placement ({}{})",
                reasons.join("; "),
                if selection.excluded.len() > 5 {
                    "; …"
                } else {
                    ""
                }
            )
        };
        // Nothing chosen is a decision: the current Works go.
        return Ok(Plan {
            selection,
            scheduled: Err(Unscheduled::new(Unscheduled::NO_CLUSTERS, why)),
            ..Plan::default()
        });
    }
    let chosen: Vec<&ClusterView> = views
        .iter()
        .filter(|v| selection.chosen.binary_search(&v.name).is_ok())
        .collect();
    let chosen_views: Vec<ClusterView> = chosen.iter().map(|v| (*v).clone()).collect();

    // Replicas per template, divided among the chosen clusters.
    let mut divisions: BTreeMap<ManifestId, BTreeMap<String, i64>> = BTreeMap::new();
    let mut replicas: BTreeMap<String, i64> = BTreeMap::new();
    for template in inputs.templates {
        let Some(total) = render::replicas(template) else {
            continue;
        };
        let id = manifest_id(template);
        let previous: BTreeMap<String, i64> = inputs
            .current
            .iter()
            .filter_map(|(cluster, work)| {
                let manifest = work
                    .manifests
                    .iter()
                    .map(Manifest::value)
                    .find(|m| manifest_id(m) == id)?;
                Some((cluster.clone(), manifest["spec"]["replicas"].as_i64()?))
            })
            .collect();
        let division = crate::divide(total, &policy, &chosen_views, &previous).map_err(|e| {
            Unscheduled::new(
                Unscheduled::CANNOT_DIVIDE,
                format!("cannot divide the replicas of {} {}: {e}", id.1, id.3),
            )
        })?;
        for (cluster, n) in &division {
            *replicas.entry(cluster.clone()).or_default() += n;
        }
        divisions.insert(id, division);
    }

    let mut templates: Vec<&Value> = inputs.templates.iter().collect();
    templates.sort_by_key(|t| (order(t), manifest_id(t)));
    let mut namespaces: BTreeSet<&str> = templates
        .iter()
        .filter_map(|t| t["metadata"]["namespace"].as_str())
        .collect();
    for template in &templates {
        if template["kind"] == "Namespace" && template["apiVersion"] == "v1" {
            namespaces.remove(template["metadata"]["name"].as_str().unwrap_or_default());
        }
    }

    let mut plan = Plan {
        selection: selection.clone(),
        replicas,
        scheduled: Ok(()),
        ..Plan::default()
    };
    let cluster_objects: BTreeMap<&str, &Cluster> = inputs
        .clusters
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, &**c)))
        .collect();
    for view in chosen {
        let Some(cluster) = cluster_objects.get(view.name.as_str()) else {
            continue;
        };
        let properties = cluster
            .status
            .as_ref()
            .map(|s| s.properties.clone())
            .unwrap_or_default();
        let facts = ClusterFacts {
            name: &view.name,
            labels: &view.labels,
            properties: &properties,
        };
        let mut manifests: Vec<Value> = namespaces
            .iter()
            .map(|ns| {
                json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": ns, "annotations": {SHARED_ANNOTATION: "true"}}})
            })
            .collect();
        let rendered: Result<Vec<Value>, String> = templates
            .iter()
            .map(|template| {
                let id = manifest_id(template);
                let replicas = divisions.get(&id).and_then(|d| d.get(&view.name)).copied();
                let rules = overrides_for(inputs.overrides, template, view);
                let rules: Vec<OverrideRules<'_>> = rules
                    .iter()
                    .map(|(name, spec)| OverrideRules {
                        name,
                        rules: &spec.rules,
                    })
                    .collect();
                render::render(template, replicas, &facts, &rules).map_err(|e| e.to_string())
            })
            .collect();
        match rendered {
            Ok(rendered) => {
                for (template, manifest) in templates.iter().zip(&rendered) {
                    let id = manifest_id(template);
                    if divisions.contains_key(&id) {
                        let n = render::replicas(manifest).unwrap_or_default();
                        plan.template_replicas
                            .entry(id)
                            .or_default()
                            .insert(view.name.clone(), n);
                    }
                }
                manifests.extend(rendered);
                plan.works.insert(
                    view.name.clone(),
                    WorkSpec {
                        placement: inputs.placement.reference(),
                        cluster: view.name.clone(),
                        manifests: manifests.iter().map(Manifest::from).collect(),
                        apply: inputs.spec.apply.clone(),
                    },
                );
            }
            Err(why) => {
                // The current Work is kept as it is: what it asks for is what counts.
                let kept: Vec<Value> = inputs
                    .current
                    .get(&view.name)
                    .map(|w| w.manifests.iter().map(Manifest::value).collect())
                    .unwrap_or_default();
                for id in divisions.keys() {
                    if let Some(n) = kept
                        .iter()
                        .find(|m| manifest_id(m) == *id)
                        .and_then(render::replicas)
                    {
                        plan.template_replicas
                            .entry(id.clone())
                            .or_default()
                            .insert(view.name.clone(), n);
                    }
                }
                if let Some(current) = inputs.current.get(&view.name) {
                    plan.works.insert(view.name.clone(), (*current).clone());
                }
                plan.failed.insert(view.name.clone(), why);
            }
        }
    }
    Ok(plan)
}

/// Where a kind goes in a Work: Namespaces, then CRDs, then what pods read (service
/// accounts, config maps, secrets), then the rest.
fn order(object: &Value) -> u8 {
    match object["kind"].as_str().unwrap_or_default() {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ServiceAccount" | "ConfigMap" | "Secret" | "PersistentVolumeClaim" => 2,
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => 3,
        _ => 4,
    }
}

/// The overrides that apply to `template` on `cluster`, in the order they apply:
/// ClusterOverrides by name, then the template namespace's Overrides by name. Each is
/// named `namespace/name` (an Override) or `name` (a ClusterOverride).
fn overrides_for<'a>(
    overrides: &[OverrideRef<'a>],
    template: &Value,
    cluster: &ClusterView,
) -> Vec<(String, &'a OverrideSpec)> {
    let template_namespace = template["metadata"]["namespace"].as_str();
    let mut applicable: Vec<(bool, String, &'a OverrideSpec)> = overrides
        .iter()
        .filter(|o| match o.namespace {
            Some(ns) => template_namespace == Some(ns),
            None => true,
        })
        .filter(|o| {
            o.spec
                .resource_selectors
                .iter()
                .any(|s| selector_matches(s, o.namespace, template))
        })
        .filter(|o| {
            o.spec.clusters.as_ref().is_none_or(|term| {
                ClusterTerm::try_from(term).is_ok_and(|term| term.matches(cluster))
            })
        })
        .map(|o| {
            let name = match o.namespace {
                Some(ns) => format!("{ns}/{}", o.name),
                None => o.name.to_owned(),
            };
            (o.namespace.is_some(), name, o.spec)
        })
        .collect();
    applicable.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    applicable
        .into_iter()
        .map(|(_, name, spec)| (name, spec))
        .collect()
}

#[cfg(test)]
mod tests;
