//! The fleet API's objects seen as the scheduler's domain model: a `Cluster` object as a
//! [`ClusterView`], a placement's `spec.clusters` as a [`ClusterAffinity`] and its
//! `spec.replicas` as a [`ReplicaPolicy`].
//!
//! ```text
//!  flotilla_api::Cluster ──── view() ────► ClusterView (labels, properties incl.
//!                                           allocatable-<resource>, taints, set, ready)
//!  PlacementSpec.clusters ─── TryFrom ───► ClusterAffinity   (selector parsed, count u32)
//!  PlacementSpec.replicas ─── TryFrom ───► ReplicaPolicy     (weights u32, bounds i64)
//!  Override's spec.clusters ─ TryFrom ───► ClusterTerm
//!  k8s LabelSelector ──────── TryFrom ───► LabelSelector     (operators parsed)
//! ```
//!
//! Taints, tolerations, property requirements, replica modes and dynamic weights are the
//! API's types, read as they are. The conversions here are the only place the two models
//! meet: field for field, the label selectors' operators parsed and the counts made
//! unsigned. Admission (schema and CEL) has already refused what the model cannot hold
//! (negative counts or weights); an operator no selector knows is refused here, in the
//! words serde would use.

use std::collections::BTreeMap;

use flotilla_api::{Cluster, condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::{
    Bounds, ClusterAffinity, ClusterTerm, ClusterView, LabelSelector, LabelSelectorOperator,
    LabelSelectorRequirement, ReplicaPolicy, SpreadConstraint, WeightTerm,
};

/// Why an API object does not map onto the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} cannot be used: {why}")]
pub struct ModelError {
    /// The field that does not map.
    pub what: &'static str,
    /// Why not.
    pub why: String,
}

/// A count the model holds unsigned (admission refuses negative ones).
fn unsigned(value: i32) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("invalid value: integer `{value}`, expected u32"))
}

fn operator(name: &str) -> Result<LabelSelectorOperator, String> {
    Ok(match name {
        "In" => LabelSelectorOperator::In,
        "NotIn" => LabelSelectorOperator::NotIn,
        "Exists" => LabelSelectorOperator::Exists,
        "DoesNotExist" => LabelSelectorOperator::DoesNotExist,
        other => {
            return Err(format!(
                "unknown variant `{other}`, expected one of `In`, `NotIn`, `Exists`, `DoesNotExist`"
            ));
        }
    })
}

fn selector(api: &meta::LabelSelector) -> Result<LabelSelector, String> {
    Ok(LabelSelector {
        match_labels: api.match_labels.clone().unwrap_or_default(),
        match_expressions: api
            .match_expressions
            .iter()
            .flatten()
            .map(|r| {
                Ok(LabelSelectorRequirement {
                    key: r.key.clone(),
                    operator: operator(&r.operator)?,
                    values: r.values.clone().unwrap_or_default(),
                })
            })
            .collect::<Result<_, String>>()?,
    })
}

fn optional_selector(api: Option<&meta::LabelSelector>) -> Result<Option<LabelSelector>, String> {
    api.map(selector).transpose()
}

fn term(api: &flotilla_api::ClusterTerm) -> Result<ClusterTerm, String> {
    Ok(ClusterTerm {
        names: api.names.clone(),
        label_selector: optional_selector(api.label_selector.as_ref())?,
    })
}

fn affinity(api: &flotilla_api::ClusterAffinity) -> Result<ClusterAffinity, String> {
    Ok(ClusterAffinity {
        names: api.names.clone(),
        cluster_sets: api.cluster_sets.clone(),
        label_selector: optional_selector(api.label_selector.as_ref())?,
        property_selector: api.property_selector.clone(),
        tolerations: api.tolerations.clone(),
        count: api.count.map(unsigned).transpose()?,
        spread: api
            .spread
            .iter()
            .map(|s| {
                Ok(SpreadConstraint {
                    topology_key: s.topology_key.clone(),
                    max_skew: unsigned(s.max_skew)?,
                })
            })
            .collect::<Result<_, String>>()?,
    })
}

fn policy(api: &flotilla_api::ReplicaPolicy) -> Result<ReplicaPolicy, String> {
    Ok(ReplicaPolicy {
        mode: api.mode,
        weights: api
            .weights
            .iter()
            .map(|w| {
                Ok(WeightTerm {
                    clusters: term(&w.clusters)?,
                    weight: unsigned(w.weight)?,
                })
            })
            .collect::<Result<_, String>>()?,
        dynamic: api.dynamic,
        per_cluster: api.per_cluster.as_ref().map(Bounds::from),
    })
}

impl TryFrom<&flotilla_api::ClusterAffinity> for ClusterAffinity {
    type Error = ModelError;

    /// A placement's `spec.clusters`.
    fn try_from(api: &flotilla_api::ClusterAffinity) -> Result<Self, ModelError> {
        affinity(api).map_err(|why| ModelError {
            what: "spec.clusters",
            why,
        })
    }
}

impl TryFrom<&flotilla_api::ReplicaPolicy> for ReplicaPolicy {
    type Error = ModelError;

    /// A placement's `spec.replicas` (not set: [`ReplicaPolicy::default`], `Duplicated`).
    fn try_from(api: &flotilla_api::ReplicaPolicy) -> Result<Self, ModelError> {
        policy(api).map_err(|why| ModelError {
            what: "spec.replicas",
            why,
        })
    }
}

impl TryFrom<&flotilla_api::ClusterTerm> for ClusterTerm {
    type Error = ModelError;

    /// An override's `spec.clusters`.
    fn try_from(api: &flotilla_api::ClusterTerm) -> Result<Self, ModelError> {
        term(api).map_err(|why| ModelError {
            what: "spec.clusters",
            why,
        })
    }
}

impl TryFrom<&meta::LabelSelector> for LabelSelector {
    type Error = ModelError;

    /// A Kubernetes label selector.
    fn try_from(api: &meta::LabelSelector) -> Result<Self, ModelError> {
        selector(api).map_err(|why| ModelError {
            what: "labelSelector",
            why,
        })
    }
}

impl From<&flotilla_api::Bounds> for Bounds {
    fn from(api: &flotilla_api::Bounds) -> Self {
        Bounds {
            min: api.min.map(i64::from),
            max: api.max.map(i64::from),
        }
    }
}

/// The prefix under which a cluster's allocatable resources are properties
/// (`allocatable-cpu`), for `propertySelector`.
pub const ALLOCATABLE_PREFIX: &str = "allocatable-";

/// A `Cluster` object as the scheduler sees it: its labels; its reported properties plus
/// `allocatable-<resource>` for each allocatable resource; its taints and set; ready when
/// its `Ready` condition is `True`.
pub fn view(cluster: &Cluster) -> ClusterView {
    let status = cluster.status.clone().unwrap_or_default();
    let mut properties = status.properties.clone();
    for (resource, quantity) in &status.allocatable {
        properties.insert(
            format!("{ALLOCATABLE_PREFIX}{resource}"),
            quantity.0.clone(),
        );
    }
    ClusterView {
        name: cluster.metadata.name.clone().unwrap_or_default(),
        labels: cluster.metadata.labels.clone().unwrap_or_default(),
        properties,
        taints: cluster.spec.taints.clone(),
        cluster_set: cluster.spec.cluster_set.clone(),
        ready: is_true(&status.conditions, condition::READY),
        available_replicas: None,
    }
}

/// Whether `conditions` holds `kind` with status `True`.
pub fn is_true(conditions: &[meta::Condition], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == kind && c.status == "True")
}

/// The labels of an object as a map (none: empty).
pub fn labels_of(object: &serde_json::Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use flotilla_api::{ClusterSpec, ClusterStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    #[test]
    fn a_cluster_object_becomes_a_view() {
        let mut cluster = Cluster::new(
            "eu-1",
            ClusterSpec {
                taints: vec![flotilla_api::Taint {
                    key: "maintenance".into(),
                    value: String::new(),
                    effect: flotilla_api::TaintEffect::NoSchedule,
                }],
                cluster_set: Some("prod".into()),
                access: None,
            },
        );
        cluster.metadata.labels = Some(BTreeMap::from([("region".into(), "eu".into())]));
        cluster.status = Some(ClusterStatus {
            conditions: vec![meta::Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: String::new(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            }],
            allocatable: BTreeMap::from([("cpu".into(), Quantity("24".into()))]),
            properties: BTreeMap::from([("zone".into(), "a".into())]),
            ..Default::default()
        });
        let view = view(&cluster);
        assert_eq!(view.name, "eu-1");
        assert!(view.ready);
        assert_eq!(view.labels["region"], "eu");
        assert_eq!(view.properties["allocatable-cpu"], "24");
        assert_eq!(view.properties["zone"], "a");
        assert_eq!(view.taints.len(), 1);
        assert_eq!(view.cluster_set.as_deref(), Some("prod"));

        cluster.status.as_mut().unwrap().conditions[0].status = "False".into();
        assert!(!super::view(&cluster).ready);
    }

    #[test]
    fn placement_fields_map_onto_the_model() {
        let api: flotilla_api::ClusterAffinity = serde_json::from_value(serde_json::json!({
            "labelSelector": {"matchLabels": {"region": "eu"},
                "matchExpressions": [{"key": "size", "operator": "In", "values": ["large"]}]},
            "propertySelector": [{"name": "allocatable-cpu", "operator": "Gt", "value": "16"}],
            "tolerations": [{"key": "maintenance", "operator": "Exists"}],
            "count": 2,
            "spread": [{"topologyKey": "zone", "maxSkew": 1}]
        }))
        .unwrap();
        let model = ClusterAffinity::try_from(&api).unwrap();
        assert_eq!(model.count, Some(2));
        assert_eq!(model.property_selector.len(), 1);
        let selector = model.label_selector.unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(selector.matches(&labels(&[("region", "eu"), ("size", "large")])));
        assert!(!selector.matches(&labels(&[("region", "eu"), ("size", "small")])));

        let api: flotilla_api::ReplicaPolicy = serde_json::from_value(serde_json::json!({
            "mode": "Divided",
            "weights": [{"clusters": {"names": ["a"]}, "weight": 2}],
            "perCluster": {"min": 1, "max": 5}
        }))
        .unwrap();
        let model = ReplicaPolicy::try_from(&api).unwrap();
        assert_eq!(model.mode, crate::ReplicaMode::Divided);
        assert_eq!(model.weights[0].weight, 2);
        assert_eq!(model.per_cluster.unwrap().max, Some(5));
        // A placement without spec.replicas: Duplicated.
        assert_eq!(
            ReplicaPolicy::default().mode,
            crate::ReplicaMode::Duplicated
        );
    }

    #[test]
    fn every_field_converts_and_the_leaves_are_the_apis_own() {
        let api: flotilla_api::ClusterAffinity = serde_json::from_value(serde_json::json!({
            "names": ["a", "b"],
            "clusterSets": ["prod"],
            "labelSelector": {"matchLabels": {"tier": "web"},
                "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
            "propertySelector": [{"name": "zone", "operator": "Ne", "value": "x"}],
            "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}],
            "count": 3,
            "spread": [{"topologyKey": "zone", "maxSkew": 2}]
        }))
        .unwrap();
        let model = ClusterAffinity::try_from(&api).unwrap();
        assert_eq!(model.names, ["a", "b"]);
        assert_eq!(model.cluster_sets, ["prod"]);
        assert_eq!(
            model.label_selector,
            Some(LabelSelector {
                match_labels: BTreeMap::from([("tier".into(), "web".into())]),
                match_expressions: vec![LabelSelectorRequirement {
                    key: "gpu".into(),
                    operator: LabelSelectorOperator::DoesNotExist,
                    values: vec![],
                }],
            })
        );
        assert_eq!(model.property_selector, api.property_selector);
        assert_eq!(model.tolerations, api.tolerations);
        assert_eq!(model.count, Some(3));
        assert_eq!(
            model.spread,
            [SpreadConstraint {
                topology_key: "zone".into(),
                max_skew: 2
            }]
        );
        assert_eq!(
            ClusterAffinity::try_from(&flotilla_api::ClusterAffinity::default()).unwrap(),
            ClusterAffinity::default()
        );

        let api: flotilla_api::ReplicaPolicy = serde_json::from_value(serde_json::json!({
            "mode": "Divided",
            "weights": [{"clusters": {"names": ["a"],
                "labelSelector": {"matchExpressions":
                    [{"key": "region", "operator": "In", "values": ["eu"]}]}}, "weight": 0}],
            "dynamic": "AvailableCapacity",
            "perCluster": {"min": 1}
        }))
        .unwrap();
        let model = ReplicaPolicy::try_from(&api).unwrap();
        assert_eq!(
            model,
            ReplicaPolicy {
                mode: crate::ReplicaMode::Divided,
                weights: vec![WeightTerm {
                    clusters: ClusterTerm {
                        names: vec!["a".into()],
                        label_selector: Some(LabelSelector {
                            match_labels: BTreeMap::new(),
                            match_expressions: vec![LabelSelectorRequirement {
                                key: "region".into(),
                                operator: LabelSelectorOperator::In,
                                values: vec!["eu".into()],
                            }],
                        }),
                    },
                    weight: 0,
                }],
                dynamic: Some(crate::Dynamic::AvailableCapacity),
                per_cluster: Some(Bounds {
                    min: Some(1),
                    max: None
                }),
            }
        );
        let api = flotilla_api::ClusterTerm {
            names: vec!["x".into()],
            label_selector: None,
        };
        assert_eq!(
            ClusterTerm::try_from(&api).unwrap(),
            ClusterTerm {
                names: vec!["x".into()],
                label_selector: None
            }
        );
    }

    #[test]
    fn what_the_model_cannot_hold_is_refused_in_serdes_words() {
        // The words the JSON round trip this replaced gave, kept for the placement's status.
        let unknown = meta::LabelSelector {
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: "region".into(),
                operator: "Near".into(),
                values: None,
            }]),
            match_labels: None,
        };
        let error = LabelSelector::try_from(&unknown).unwrap_err();
        assert_eq!(
            error.to_string(),
            "labelSelector cannot be used: unknown variant `Near`, expected one of `In`, \
             `NotIn`, `Exists`, `DoesNotExist`"
        );
        let affinity = flotilla_api::ClusterAffinity {
            label_selector: Some(unknown.clone()),
            ..Default::default()
        };
        assert_eq!(
            ClusterAffinity::try_from(&affinity).unwrap_err().what,
            "spec.clusters"
        );
        let term = flotilla_api::ClusterTerm {
            names: vec![],
            label_selector: Some(unknown),
        };
        assert!(ClusterTerm::try_from(&term).is_err());

        let negative = flotilla_api::ClusterAffinity {
            count: Some(-1),
            ..Default::default()
        };
        let serde_said = serde_json::from_value::<u32>(serde_json::json!(-1))
            .unwrap_err()
            .to_string();
        assert_eq!(
            ClusterAffinity::try_from(&negative).unwrap_err(),
            ModelError {
                what: "spec.clusters",
                why: serde_said
            }
        );
        let negative = flotilla_api::ReplicaPolicy {
            weights: vec![flotilla_api::WeightTerm {
                clusters: Default::default(),
                weight: -2,
            }],
            ..Default::default()
        };
        assert_eq!(
            ReplicaPolicy::try_from(&negative).unwrap_err().to_string(),
            "spec.replicas cannot be used: invalid value: integer `-2`, expected u32"
        );
    }
}
