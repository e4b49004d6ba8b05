//! The fleet API's objects seen as the scheduler's domain model: a `Cluster` object as a
//! [`ClusterView`], a placement's `spec.clusters` as a [`ClusterAffinity`] and its
//! `spec.replicas` as a [`ReplicaPolicy`].
//!
//! ```text
//!  flotilla_api::Cluster ──── view() ────► ClusterView (labels, properties incl.
//!                                           allocatable-<resource>, taints, set, ready)
//!  PlacementSpec.clusters ─── affinity() ─► ClusterAffinity   (field for field, by serde)
//!  PlacementSpec.replicas ─── policy() ───► ReplicaPolicy
//!  k8s LabelSelector ──────── selector() ─► LabelSelector
//! ```
//!
//! The API types and the model share their JSON form field for field, so the mapping goes
//! through `serde_json`; admission (schema and CEL) has already refused what the model
//! cannot hold (negative counts or weights).

use std::collections::BTreeMap;

use flotilla_api::{Cluster, condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ClusterAffinity, ClusterTerm, ClusterView, LabelSelector, ReplicaPolicy};

/// Why an API object does not map onto the model.
#[derive(Debug, thiserror::Error)]
#[error("{what} cannot be used: {source}")]
pub struct ModelError {
    /// The field that does not map.
    pub what: &'static str,
    /// What serde said.
    #[source]
    pub source: serde_json::Error,
}

fn convert<A: Serialize, M: DeserializeOwned>(
    what: &'static str,
    api: &A,
) -> Result<M, ModelError> {
    serde_json::to_value(api)
        .and_then(serde_json::from_value)
        .map_err(|source| ModelError { what, source })
}

/// `spec.clusters` of a placement.
pub fn affinity(api: &flotilla_api::ClusterAffinity) -> Result<ClusterAffinity, ModelError> {
    convert("spec.clusters", api)
}

/// `spec.replicas` of a placement (not set: `Duplicated`).
pub fn policy(api: Option<&flotilla_api::ReplicaPolicy>) -> Result<ReplicaPolicy, ModelError> {
    api.map_or_else(
        || Ok(ReplicaPolicy::default()),
        |p| convert("spec.replicas", p),
    )
}

/// An override's `spec.clusters`.
pub fn term(api: &flotilla_api::ClusterTerm) -> Result<ClusterTerm, ModelError> {
    convert("spec.clusters", api)
}

/// A Kubernetes label selector.
pub fn selector(api: &meta::LabelSelector) -> Result<LabelSelector, ModelError> {
    convert("labelSelector", api)
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
        taints: cluster
            .spec
            .taints
            .iter()
            .filter_map(|t| convert("spec.taints", t).ok())
            .collect(),
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
        let model = affinity(&api).unwrap();
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
        let model = policy(Some(&api)).unwrap();
        assert_eq!(model.mode, crate::ReplicaMode::Divided);
        assert_eq!(model.weights[0].weight, 2);
        assert_eq!(model.per_cluster.unwrap().max, Some(5));
        assert_eq!(policy(None).unwrap(), ReplicaPolicy::default());
    }
}
