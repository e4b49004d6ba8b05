//! What the scheduler knows of a member cluster: [`ClusterView`], and [`ClusterTerm`], a
//! set of clusters by names and labels. Taints and tolerations are the API's own types
//! ([`flotilla_api::Taint`], [`flotilla_api::Toleration`]), read as they are.

use std::collections::BTreeMap;

use crate::{LabelSelector, Taint};

/// One member cluster as the scheduler sees it, built from a `Cluster` object and its
/// status. Names are unique within one call to [`select`](crate::select) or
/// [`divide`](crate::divide).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// The cluster's name.
    pub name: String,
    /// The cluster's labels.
    pub labels: BTreeMap<String, String>,
    /// Reported properties, by name (values such as `"16"`, `"64Gi"`, `"v1.32.1"`).
    pub properties: BTreeMap<String, String>,
    /// The cluster's taints.
    pub taints: Vec<Taint>,
    /// The cluster set the cluster belongs to, if any.
    pub cluster_set: Option<String>,
    /// Whether the cluster is `Ready`. Not-ready clusters stay selected but take no
    /// replicas in [`Divided`](crate::ReplicaMode::Divided) mode.
    pub ready: bool,
    /// How many more replicas the cluster reports room for (`None`: unknown); the weight
    /// under [`Dynamic::AvailableCapacity`](crate::Dynamic::AvailableCapacity).
    pub available_replicas: Option<i64>,
}

impl ClusterView {
    /// A ready cluster called `name`, with nothing else known about it.
    pub fn ready(name: impl Into<String>) -> Self {
        ClusterView {
            name: name.into(),
            ready: true,
            ..ClusterView::default()
        }
    }
}

/// A set of clusters named or selected by labels: a cluster belongs to it when it is one
/// of `names` (if any are given) and matches `label_selector` (if one is given). An empty
/// term holds every cluster.
///
/// The domain form of [`flotilla_api::ClusterTerm`] (its label selector parsed), made by
/// `TryFrom` in [`model`](crate::model).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterTerm {
    /// Cluster names; empty means any name.
    pub names: Vec<String>,
    /// A selector on the cluster's labels; `None` means any labels.
    pub label_selector: Option<LabelSelector>,
}

impl ClusterTerm {
    /// Whether `cluster` belongs to this set.
    pub fn matches(&self, cluster: &ClusterView) -> bool {
        (self.names.is_empty() || self.names.contains(&cluster.name))
            && self
                .label_selector
                .as_ref()
                .is_none_or(|selector| selector.matches(&cluster.labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_term_ands_names_and_labels() {
        let cluster = ClusterView {
            name: "eu-1".into(),
            labels: BTreeMap::from([("region".to_string(), "eu".to_string())]),
            ..ClusterView::default()
        };
        let eu = Some(LabelSelector {
            match_labels: BTreeMap::from([("region".to_string(), "eu".to_string())]),
            match_expressions: vec![],
        });
        assert!(ClusterTerm::default().matches(&cluster));
        let named = |names: &[&str], label_selector: Option<LabelSelector>| ClusterTerm {
            names: names.iter().map(|n| n.to_string()).collect(),
            label_selector,
        };
        assert!(named(&["eu-1", "eu-2"], None).matches(&cluster));
        assert!(!named(&["eu-2"], None).matches(&cluster));
        assert!(named(&[], eu.clone()).matches(&cluster));
        assert!(named(&["eu-1"], eu.clone()).matches(&cluster));
        assert!(!named(&["eu-2"], eu).matches(&cluster));
    }
}
