//! What the scheduler knows of a member cluster: [`ClusterView`], its taints, and the
//! tolerations a placement can carry.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::LabelSelector;

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

/// A taint on a cluster: placements that do not tolerate it are kept off (see
/// [`TaintEffect`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    /// The cluster is not newly selected; a placement already on it stays.
    NoSchedule,
    /// The cluster is not selected, and a placement already on it leaves.
    NoExecute,
}

/// A placement's toleration of taints, with Kubernetes' matching rules: an empty key with
/// `Exists` tolerates every taint, and no effect tolerates every effect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key tolerated; empty means every key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// How the value is compared.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// The value tolerated, for [`TolerationOperator::Equal`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// The effect tolerated; `None` means every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

/// How a [`Toleration`] compares a taint's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// The taint's value equals the toleration's value.
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// A set of clusters named or selected by labels: a cluster belongs to it when it is one
/// of `names` (if any are given) and matches `label_selector` (if one is given). An empty
/// term holds every cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTerm {
    /// Cluster names; empty means any name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// A selector on the cluster's labels; `None` means any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        self.effect.is_none_or(|effect| effect == taint.effect)
            && (self.key.is_empty() || self.key == taint.key)
            && match self.operator {
                TolerationOperator::Equal => self.value == taint.value,
                TolerationOperator::Exists => true,
            }
    }
}

impl fmt::Display for Taint {
    /// `key=value:Effect`, or `key:Effect` when the value is empty (as kubectl writes it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{:?}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{:?}", self.key, self.value, self.effect)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn equal_needs_key_and_value() {
        let toleration = Toleration {
            key: "dedicated".into(),
            value: "gpu".into(),
            ..Toleration::default()
        };
        assert!(toleration.tolerates(&taint("dedicated", "gpu", TaintEffect::NoSchedule)));
        assert!(toleration.tolerates(&taint("dedicated", "gpu", TaintEffect::NoExecute)));
        assert!(!toleration.tolerates(&taint("dedicated", "db", TaintEffect::NoSchedule)));
        assert!(!toleration.tolerates(&taint("other", "gpu", TaintEffect::NoSchedule)));
    }

    #[test]
    fn exists_ignores_the_value_and_an_empty_key_matches_all() {
        let by_key = Toleration {
            key: "maintenance".into(),
            operator: TolerationOperator::Exists,
            ..Toleration::default()
        };
        assert!(by_key.tolerates(&taint("maintenance", "x", TaintEffect::NoExecute)));
        assert!(!by_key.tolerates(&taint("other", "", TaintEffect::NoExecute)));
        let everything = Toleration {
            operator: TolerationOperator::Exists,
            ..Toleration::default()
        };
        assert!(everything.tolerates(&taint("anything", "v", TaintEffect::NoExecute)));
    }

    #[test]
    fn an_effect_limits_what_is_tolerated() {
        let toleration = Toleration {
            key: "maintenance".into(),
            operator: TolerationOperator::Exists,
            effect: Some(TaintEffect::NoSchedule),
            ..Toleration::default()
        };
        assert!(toleration.tolerates(&taint("maintenance", "", TaintEffect::NoSchedule)));
        assert!(!toleration.tolerates(&taint("maintenance", "", TaintEffect::NoExecute)));
    }

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

    #[test]
    fn taints_display_as_kubectl_writes_them() {
        assert_eq!(
            taint("maintenance", "", TaintEffect::NoSchedule).to_string(),
            "maintenance:NoSchedule"
        );
        assert_eq!(
            taint("dedicated", "gpu", TaintEffect::NoExecute).to_string(),
            "dedicated=gpu:NoExecute"
        );
    }
}
