//! Cluster selection: which member clusters a placement goes to, and why the others not.
//!
//! ```text
//!  clusters (any order) ── sort by name
//!      │ per cluster, first failing term wins the Reason:
//!      │   reach (the sets bound to the namespace) ─► names ─► clusterSets ─► labelSelector
//!      │   ─► propertySelector ─► taints ─► spread labels
//!      ▼
//!  feasible ── rank: previously chosen, more available replicas, name
//!      │ count: take N, spread: the next pick keeps every topology's skew ≤ maxSkew if it can
//!      ▼
//!  Selection { chosen (by name), excluded (by name, with a Reason) }
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::{
    ClusterView, LabelSelector, PropertyOperator, PropertyRequirement, Taint, TaintEffect,
    Toleration,
};
use flotilla_api::DEFAULT_CLUSTER_SET;
use flotilla_api::quantity::Amount;

/// Which clusters a placement wants. Every term given must hold (they are ANDed); an empty
/// affinity selects every cluster.
///
/// The domain form of [`flotilla_api::ClusterAffinity`] (its label selector parsed, its
/// count unsigned), made by `TryFrom` in [`model`](crate::model). A property requirement
/// holds when both sides are numbers or Kubernetes quantities ([`Amount`], read exactly)
/// compared by value; otherwise `Eq` and `Ne` compare the strings, and `Gt`, `Ge`, `Lt`
/// and `Le` do not hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterAffinity {
    /// Cluster names; empty means any name.
    pub names: Vec<String>,
    /// Cluster sets; empty means any set (or none).
    pub cluster_sets: Vec<String>,
    /// A selector on the cluster's labels.
    pub label_selector: Option<LabelSelector>,
    /// Requirements on the cluster's properties.
    pub property_selector: Vec<PropertyRequirement>,
    /// The cluster taints the placement tolerates.
    pub tolerations: Vec<Toleration>,
    /// Pick this many of the feasible clusters; `None` picks them all.
    pub count: Option<u32>,
    /// How the clusters `count` picks spread over topologies (cluster labels).
    pub spread: Vec<SpreadConstraint>,
}

/// Spread the clusters `count` picks over the values of one cluster label: the most- and
/// the least-picked values differ by at most `max_skew` clusters where that is possible.
///
/// The domain form of [`flotilla_api::SpreadConstraint`] (`max_skew` unsigned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadConstraint {
    /// The cluster label whose values are the topologies (such as
    /// `topology.kubernetes.io/region`). Clusters without it are not eligible.
    pub topology_key: String,
    /// The largest allowed difference; 0 is read as 1, as Kubernetes requires at least 1.
    pub max_skew: u32,
}

/// Which clusters a placement may choose from, whatever it asks: the tenancy of its
/// namespace. A namespace that holds ClusterSetBindings reaches the clusters of the sets
/// bound there (clusters joined without a set are in [`DEFAULT_CLUSTER_SET`]); one that
/// holds none reaches every cluster under open tenancy, and none under bound tenancy. A
/// ClusterPlacement reaches every cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Reach {
    /// Every cluster.
    #[default]
    Everywhere,
    /// The clusters of these sets (those bound to `namespace` whose ClusterSet exists;
    /// none if every binding names a missing set).
    Sets {
        /// The placement's namespace.
        namespace: String,
        /// The sets bound to it.
        sets: BTreeSet<String>,
    },
    /// No cluster: `namespace` holds no ClusterSetBinding and tenancy is bound.
    Unbound {
        /// The placement's namespace.
        namespace: String,
    },
}

impl Reach {
    /// Whether a cluster in `cluster_set` (`None`: in no set, so in
    /// [`DEFAULT_CLUSTER_SET`]) is within reach; if not, why.
    fn admits(&self, cluster_set: Option<&str>) -> Result<(), Reason> {
        let set = cluster_set.unwrap_or(DEFAULT_CLUSTER_SET);
        match self {
            Reach::Everywhere => Ok(()),
            Reach::Sets { sets, .. } if sets.contains(set) => Ok(()),
            Reach::Sets { namespace, .. } => Err(Reason::NotBound {
                cluster_set: set.to_owned(),
                namespace: namespace.clone(),
            }),
            Reach::Unbound { namespace } => Err(Reason::NoClusterSetBinding {
                namespace: namespace.clone(),
            }),
        }
    }
}

/// The outcome of [`select`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The names of the chosen clusters, sorted.
    pub chosen: Vec<String>,
    /// Every other cluster, sorted by name, with the reason it was not chosen.
    pub excluded: Vec<(String, Reason)>,
}

/// Why a cluster was not chosen; its `Display` form is meant for `Placement.status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The cluster's set is not bound to the placement's namespace.
    NotBound {
        /// The cluster's set ([`DEFAULT_CLUSTER_SET`] for a cluster in none).
        cluster_set: String,
        /// The placement's namespace.
        namespace: String,
    },
    /// The placement's namespace holds no ClusterSetBinding, and tenancy is bound.
    NoClusterSetBinding {
        /// The placement's namespace.
        namespace: String,
    },
    /// The affinity lists names and this cluster is not one of them.
    NotNamed,
    /// The affinity lists cluster sets and this cluster is in none of them.
    NotInClusterSet {
        /// The cluster's set, if it has one.
        cluster_set: Option<String>,
        /// The sets the affinity lists.
        wanted: Vec<String>,
    },
    /// The label selector does not match the cluster's labels.
    LabelSelector,
    /// A property requirement names a property the cluster does not report.
    PropertyNotSet {
        /// The property's name.
        name: String,
    },
    /// A property requirement does not hold.
    PropertyMismatch {
        /// The property's name.
        name: String,
        /// The cluster's value.
        actual: String,
        /// The comparison.
        operator: PropertyOperator,
        /// The value compared with.
        value: String,
    },
    /// An ordering requirement (`Gt`, `Ge`, `Lt`, `Le`) where a side is not a number.
    PropertyNotComparable {
        /// The property's name.
        name: String,
        /// The cluster's value.
        actual: String,
        /// The comparison.
        operator: PropertyOperator,
        /// The value compared with.
        value: String,
    },
    /// The cluster has a taint the placement does not tolerate.
    UntoleratedTaint(Taint),
    /// A spread constraint names a label the cluster does not have.
    MissingTopologyLabel {
        /// The spread constraint's topology key.
        key: String,
    },
    /// The cluster was feasible but `count` clusters ranked before it.
    CountReached {
        /// The affinity's count.
        count: u32,
    },
}

/// Chooses the clusters for `affinity` among `clusters`, given the names chosen last time
/// (`previous`, for stability: they keep their place under `count` and stay despite new
/// `NoSchedule` taints).
///
/// Not-ready clusters are not filtered out (their Works stay); they only receive no
/// replicas in [`Divided`](crate::ReplicaMode::Divided) mode. The result does not depend
/// on the order of `clusters` or `previous`; cluster names must be unique.
///
/// ```
/// use flotilla_fleet::{select, ClusterAffinity, ClusterView};
///
/// let cluster = |name: &str| ClusterView { name: name.into(), ready: true, ..Default::default() };
/// let affinity = ClusterAffinity { count: Some(2), ..Default::default() };
/// let selection = select(&affinity, &[cluster("c"), cluster("b"), cluster("a")], &["c".into()]);
/// assert_eq!(selection.chosen, ["a", "c"]);
/// assert_eq!(selection.excluded[0].1.to_string(), "not picked: count 2 reached");
/// ```
pub fn select(
    affinity: &ClusterAffinity,
    clusters: &[ClusterView],
    previous: &[String],
) -> Selection {
    select_within(&Reach::Everywhere, affinity, clusters, previous)
}

/// [`select`] among the clusters within `reach` only: a cluster out of reach is excluded
/// first, with [`Reason::NotBound`] or [`Reason::NoClusterSetBinding`], whatever the
/// affinity asks (its own `clusterSets` term narrows the reach further, never widens it).
///
/// ```
/// use flotilla_fleet::{select_within, ClusterAffinity, ClusterView, Reach};
///
/// let cluster = |name: &str, set: Option<&str>| ClusterView {
///     cluster_set: set.map(str::to_owned),
///     ..ClusterView::ready(name)
/// };
/// let clusters = [cluster("a", Some("eu")), cluster("b", Some("us")), cluster("c", None)];
/// let reach = Reach::Sets { namespace: "shop".into(), sets: ["eu".into(), "default".into()].into() };
/// let selection = select_within(&reach, &ClusterAffinity::default(), &clusters, &[]);
/// assert_eq!(selection.chosen, ["a", "c"]);
/// assert_eq!(selection.excluded[0].1.to_string(), "cluster set us is not bound to namespace shop");
/// ```
pub fn select_within(
    reach: &Reach,
    affinity: &ClusterAffinity,
    clusters: &[ClusterView],
    previous: &[String],
) -> Selection {
    let previous: BTreeSet<&str> = previous.iter().map(String::as_str).collect();
    let mut sorted: Vec<&ClusterView> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));

    let mut excluded = Vec::new();
    let mut feasible = Vec::new();
    for cluster in sorted {
        match reach
            .admits(cluster.cluster_set.as_deref())
            .and_then(|()| feasibility(affinity, cluster, &previous))
        {
            Ok(()) => feasible.push(cluster),
            Err(reason) => excluded.push((cluster.name.clone(), reason)),
        }
    }

    let mut chosen: Vec<String> = match affinity.count {
        None => feasible.iter().map(|c| c.name.clone()).collect(),
        Some(count) => {
            let (picked, left) = pick(count, &affinity.spread, feasible, &previous);
            excluded.extend(
                left.into_iter()
                    .map(|c| (c.name.clone(), Reason::CountReached { count })),
            );
            picked.into_iter().map(|c| c.name.clone()).collect()
        }
    };
    chosen.sort();
    excluded.sort_by(|a, b| a.0.cmp(&b.0));
    Selection { chosen, excluded }
}

/// Whether `cluster` passes every term of `affinity`; the first term that fails explains
/// why not.
fn feasibility(
    affinity: &ClusterAffinity,
    cluster: &ClusterView,
    previous: &BTreeSet<&str>,
) -> Result<(), Reason> {
    if !affinity.names.is_empty() && !affinity.names.contains(&cluster.name) {
        return Err(Reason::NotNamed);
    }
    if !affinity.cluster_sets.is_empty()
        && !cluster
            .cluster_set
            .as_ref()
            .is_some_and(|set| affinity.cluster_sets.contains(set))
    {
        return Err(Reason::NotInClusterSet {
            cluster_set: cluster.cluster_set.clone(),
            wanted: affinity.cluster_sets.clone(),
        });
    }
    if let Some(selector) = &affinity.label_selector
        && !selector.matches(&cluster.labels)
    {
        return Err(Reason::LabelSelector);
    }
    for requirement in &affinity.property_selector {
        check_property(requirement, &cluster.properties)?;
    }
    let untolerated = |effect: TaintEffect| {
        cluster.taints.iter().find(|taint| {
            taint.effect == effect && !affinity.tolerations.iter().any(|t| t.tolerates(taint))
        })
    };
    if let Some(taint) = untolerated(TaintEffect::NoExecute) {
        return Err(Reason::UntoleratedTaint(taint.clone()));
    }
    if let Some(taint) = untolerated(TaintEffect::NoSchedule)
        && !previous.contains(cluster.name.as_str())
    {
        return Err(Reason::UntoleratedTaint(taint.clone()));
    }
    if let Some(constraint) = affinity
        .spread
        .iter()
        .find(|c| !cluster.labels.contains_key(&c.topology_key))
    {
        return Err(Reason::MissingTopologyLabel {
            key: constraint.topology_key.clone(),
        });
    }
    Ok(())
}

/// Compares two property values: `Some` ordering when both are numbers or quantities read
/// exactly ([`Amount::parse_exact`]), `None` otherwise (a value needing digits finer than
/// 10⁻¹⁸, or too large for 128 bits, is then compared as a string).
fn compare_numbers(left: &str, right: &str) -> Option<Ordering> {
    Some(Amount::parse_exact(left)?.cmp(&Amount::parse_exact(right)?))
}

/// Whether `properties` satisfy `requirement`, and if not, why.
fn check_property(
    requirement: &PropertyRequirement,
    properties: &BTreeMap<String, String>,
) -> Result<(), Reason> {
    let Some(actual) = properties.get(&requirement.name) else {
        return Err(Reason::PropertyNotSet {
            name: requirement.name.clone(),
        });
    };
    let ordering = compare_numbers(actual, &requirement.value);
    let holds = match (requirement.operator, ordering) {
        (PropertyOperator::Eq, Some(o)) => o == Ordering::Equal,
        (PropertyOperator::Ne, Some(o)) => o != Ordering::Equal,
        (PropertyOperator::Eq, None) => *actual == requirement.value,
        (PropertyOperator::Ne, None) => *actual != requirement.value,
        (PropertyOperator::Gt, Some(o)) => o == Ordering::Greater,
        (PropertyOperator::Ge, Some(o)) => o != Ordering::Less,
        (PropertyOperator::Lt, Some(o)) => o == Ordering::Less,
        (PropertyOperator::Le, Some(o)) => o != Ordering::Greater,
        (_, None) => {
            return Err(Reason::PropertyNotComparable {
                name: requirement.name.clone(),
                actual: actual.clone(),
                operator: requirement.operator,
                value: requirement.value.clone(),
            });
        }
    };
    if holds {
        Ok(())
    } else {
        Err(Reason::PropertyMismatch {
            name: requirement.name.clone(),
            actual: actual.clone(),
            operator: requirement.operator,
            value: requirement.value.clone(),
        })
    }
}

/// Picks `count` of the `feasible` clusters (sorted by name): ranked by previously chosen
/// first, then more available replicas, then name. Under spread constraints each pick is
/// the best-ranked cluster whose topologies stay within their skews, as kube-scheduler
/// places pods one at a time; if none can, the one that exceeds them least. Returns the
/// picked clusters and the rest.
fn pick<'a>(
    count: u32,
    spread: &[SpreadConstraint],
    mut feasible: Vec<&'a ClusterView>,
    previous: &BTreeSet<&str>,
) -> (Vec<&'a ClusterView>, Vec<&'a ClusterView>) {
    feasible.sort_by_key(|c| {
        (
            !previous.contains(c.name.as_str()),
            Reverse(c.available_replicas),
            c.name.as_str(),
        )
    });
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if spread.is_empty() {
        let left = feasible.split_off(count.min(feasible.len()));
        return (feasible, left);
    }

    // Per constraint: how many picked clusters each topology value has (every value of a
    // feasible cluster is a topology, picked or not, as kube-scheduler counts empty domains).
    let topology = |cluster: &ClusterView, key: &str| cluster.labels[key].clone();
    let mut counts: Vec<BTreeMap<String, u64>> = spread
        .iter()
        .map(|c| {
            feasible
                .iter()
                .map(|cluster| (topology(cluster, &c.topology_key), 0))
                .collect()
        })
        .collect();
    let mut picked = Vec::new();
    while picked.len() < count && !feasible.is_empty() {
        let least: Vec<u64> = counts
            .iter()
            .map(|values| values.values().copied().min().unwrap_or(0))
            .collect();
        let excess = |cluster: &ClusterView| -> u64 {
            spread
                .iter()
                .zip(&counts)
                .zip(&least)
                .map(|((constraint, values), least)| {
                    let after = values[&topology(cluster, &constraint.topology_key)] + 1;
                    after.saturating_sub(least + u64::from(constraint.max_skew.max(1)))
                })
                .sum()
        };
        let (index, _) = feasible
            .iter()
            .enumerate()
            .min_by_key(|(rank, cluster)| (excess(cluster), *rank))
            .expect("feasible is not empty");
        let cluster = feasible.remove(index);
        for (constraint, values) in spread.iter().zip(&mut counts) {
            *values
                .get_mut(&topology(cluster, &constraint.topology_key))
                .expect("every feasible cluster's topology is counted") += 1;
        }
        picked.push(cluster);
    }
    (picked, feasible)
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotBound {
                cluster_set,
                namespace,
            } => write!(
                f,
                "cluster set {cluster_set} is not bound to namespace {namespace}"
            ),
            Reason::NoClusterSetBinding { namespace } => write!(
                f,
                "namespace {namespace} has no ClusterSetBinding (tenancy is bound)"
            ),
            Reason::NotNamed => f.write_str("not one of the names listed"),
            Reason::NotInClusterSet {
                cluster_set,
                wanted,
            } => match cluster_set {
                Some(set) => write!(f, "cluster set {set} is not one of {}", wanted.join(", ")),
                None => write!(f, "in no cluster set (wanted: {})", wanted.join(", ")),
            },
            Reason::LabelSelector => f.write_str("label selector does not match"),
            Reason::PropertyNotSet { name } => write!(f, "property {name} is not set"),
            Reason::PropertyMismatch {
                name,
                actual,
                operator,
                value,
            } => write!(f, "property {name}: {actual} is not {operator} {value}"),
            Reason::PropertyNotComparable {
                name,
                actual,
                operator,
                value,
            } => write!(
                f,
                "property {name}: {actual} is not {operator} {value}: {operator:?} compares \
                 numbers and quantities only"
            ),
            Reason::UntoleratedTaint(taint) => write!(f, "untolerated taint {taint}"),
            Reason::MissingTopologyLabel { key } => {
                write!(f, "no label {key}, which a spread constraint needs")
            }
            Reason::CountReached { count } => write!(f, "not picked: count {count} reached"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LabelSelectorOperator, LabelSelectorRequirement, TolerationOperator};

    fn cluster(name: &str) -> ClusterView {
        ClusterView::ready(name)
    }

    #[test]
    fn compare_numbers_needs_two_numbers() {
        assert_eq!(compare_numbers("8", "16"), Some(Ordering::Less));
        assert_eq!(compare_numbers("1Ki", "1024"), Some(Ordering::Equal));
        assert_eq!(compare_numbers("v1.32.1", "16"), None);
        assert_eq!(compare_numbers("16", "v1"), None);
        assert_eq!(compare_numbers("1e-19", "0"), None);
    }

    fn labelled(name: &str, labels: &[(&str, &str)]) -> ClusterView {
        ClusterView {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..cluster(name)
        }
    }

    fn with_property(name: &str, property: &str, value: &str) -> ClusterView {
        ClusterView {
            properties: BTreeMap::from([(property.to_string(), value.to_string())]),
            ..cluster(name)
        }
    }

    fn tainted(name: &str, key: &str, effect: TaintEffect) -> ClusterView {
        ClusterView {
            taints: vec![Taint {
                key: key.into(),
                value: String::new(),
                effect,
            }],
            ..cluster(name)
        }
    }

    fn with_capacity(name: &str, available: i64) -> ClusterView {
        ClusterView {
            available_replicas: Some(available),
            ..cluster(name)
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    /// The excluded clusters as (name, reason text).
    fn reasons(selection: &Selection) -> Vec<(String, String)> {
        selection
            .excluded
            .iter()
            .map(|(name, reason)| (name.clone(), reason.to_string()))
            .collect()
    }

    fn property(name: &str, operator: PropertyOperator, value: &str) -> ClusterAffinity {
        ClusterAffinity {
            property_selector: vec![PropertyRequirement {
                name: name.into(),
                operator,
                value: value.into(),
            }],
            ..ClusterAffinity::default()
        }
    }

    #[test]
    fn an_empty_affinity_chooses_every_cluster_sorted() {
        let clusters = [cluster("c"), cluster("a"), cluster("b")];
        let selection = select(&ClusterAffinity::default(), &clusters, &[]);
        assert_eq!(selection.chosen, names(&["a", "b", "c"]));
        assert!(selection.excluded.is_empty());
    }

    #[test]
    fn names_sets_and_labels_are_anded() {
        let in_set = |name: &str, set: Option<&str>, tier: &str| ClusterView {
            cluster_set: set.map(str::to_string),
            ..labelled(name, &[("tier", tier)])
        };
        let clusters = [
            in_set("a", Some("prod"), "prod"),
            in_set("b", Some("prod"), "dev"),
            in_set("c", Some("staging"), "prod"),
            in_set("d", None, "prod"),
            in_set("e", Some("prod"), "prod"),
        ];
        let affinity = ClusterAffinity {
            names: names(&["a", "b", "c", "d"]),
            cluster_sets: names(&["prod"]),
            label_selector: Some(LabelSelector {
                match_labels: BTreeMap::new(),
                match_expressions: vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: LabelSelectorOperator::In,
                    values: names(&["prod"]),
                }],
            }),
            ..ClusterAffinity::default()
        };
        let selection = select(&affinity, &clusters, &[]);
        assert_eq!(selection.chosen, names(&["a"]));
        assert_eq!(
            reasons(&selection),
            [
                ("b".into(), "label selector does not match".into()),
                ("c".into(), "cluster set staging is not one of prod".into()),
                ("d".into(), "in no cluster set (wanted: prod)".into()),
                ("e".into(), "not one of the names listed".into()),
            ]
        );
    }

    #[test]
    fn properties_compare_as_numbers_and_quantities() {
        let clusters = [
            with_property("small", "allocatable-cpu", "8"),
            with_property("big", "allocatable-cpu", "64Gi"),
            with_property("exact", "allocatable-cpu", "16"),
            cluster("unknown"),
        ];
        let selection = select(
            &property("allocatable-cpu", PropertyOperator::Gt, "16"),
            &clusters,
            &[],
        );
        assert_eq!(selection.chosen, names(&["big"]));
        assert_eq!(
            reasons(&selection),
            [
                (
                    "exact".into(),
                    "property allocatable-cpu: 16 is not > 16".into()
                ),
                (
                    "small".into(),
                    "property allocatable-cpu: 8 is not > 16".into()
                ),
                (
                    "unknown".into(),
                    "property allocatable-cpu is not set".into()
                ),
            ]
        );
        let selection = select(
            &property("allocatable-cpu", PropertyOperator::Ge, "16"),
            &clusters,
            &[],
        );
        assert_eq!(selection.chosen, names(&["big", "exact"]));
    }

    #[test]
    fn every_operator_on_quantities() {
        use PropertyOperator::*;
        let cases = [
            ("500m", Lt, "1", true),
            ("500m", Ge, "1", false),
            ("1Gi", Gt, "1000Mi", true),
            ("1Gi", Le, "1000Mi", false),
            ("1Ki", Eq, "1024", true),
            ("1Ki", Ne, "1024", false),
            ("1Ki", Le, "1024", true),
            ("16", Ne, "16.5", true),
            ("64Gi", Lt, "16", false),
        ];
        for (actual, operator, value, expected) in cases {
            let requirement = PropertyRequirement {
                name: "p".into(),
                operator,
                value: value.into(),
            };
            let properties = BTreeMap::from([("p".to_string(), actual.to_string())]);
            assert_eq!(
                check_property(&requirement, &properties).is_ok(),
                expected,
                "{actual} {operator} {value}"
            );
        }
    }

    #[test]
    fn strings_compare_only_for_equality() {
        let clusters = [
            with_property("new", "kubernetes-version", "v1.33.0"),
            with_property("old", "kubernetes-version", "v1.32.1"),
        ];
        let eq = select(
            &property("kubernetes-version", PropertyOperator::Eq, "v1.32.1"),
            &clusters,
            &[],
        );
        assert_eq!(eq.chosen, names(&["old"]));
        assert_eq!(
            reasons(&eq),
            [(
                "new".into(),
                "property kubernetes-version: v1.33.0 is not = v1.32.1".into()
            )]
        );
        let ne = select(
            &property("kubernetes-version", PropertyOperator::Ne, "v1.32.1"),
            &clusters,
            &[],
        );
        assert_eq!(ne.chosen, names(&["new"]));
        let gt = select(
            &property("kubernetes-version", PropertyOperator::Gt, "v1.30"),
            &clusters,
            &[],
        );
        assert!(gt.chosen.is_empty());
        assert_eq!(
            gt.excluded[0].1.to_string(),
            "property kubernetes-version: v1.33.0 is not > v1.30: Gt compares numbers and \
             quantities only"
        );
    }

    #[test]
    fn no_schedule_keeps_a_cluster_already_chosen() {
        let clusters = [
            tainted("new", "maintenance", TaintEffect::NoSchedule),
            tainted("old", "maintenance", TaintEffect::NoSchedule),
        ];
        let selection = select(&ClusterAffinity::default(), &clusters, &names(&["old"]));
        assert_eq!(selection.chosen, names(&["old"]));
        assert_eq!(
            reasons(&selection),
            [(
                "new".into(),
                "untolerated taint maintenance:NoSchedule".into()
            )]
        );
    }

    #[test]
    fn no_execute_removes_even_a_cluster_already_chosen() {
        let clusters = [
            tainted("old", "evacuate", TaintEffect::NoExecute),
            cluster("other"),
        ];
        let selection = select(&ClusterAffinity::default(), &clusters, &names(&["old"]));
        assert_eq!(selection.chosen, names(&["other"]));
        assert_eq!(
            reasons(&selection),
            [("old".into(), "untolerated taint evacuate:NoExecute".into())]
        );
    }

    #[test]
    fn tolerated_taints_do_not_exclude() {
        let clusters = [
            tainted("a", "maintenance", TaintEffect::NoSchedule),
            tainted("b", "maintenance", TaintEffect::NoExecute),
            tainted("c", "gpu", TaintEffect::NoSchedule),
        ];
        let affinity = ClusterAffinity {
            tolerations: vec![Toleration {
                key: "maintenance".into(),
                operator: TolerationOperator::Exists,
                ..Toleration::default()
            }],
            ..ClusterAffinity::default()
        };
        let selection = select(&affinity, &clusters, &[]);
        assert_eq!(selection.chosen, names(&["a", "b"]));
        assert_eq!(
            reasons(&selection),
            [("c".into(), "untolerated taint gpu:NoSchedule".into())]
        );
    }

    #[test]
    fn not_ready_clusters_stay_selected() {
        let mut down = cluster("down");
        down.ready = false;
        let selection = select(&ClusterAffinity::default(), &[down, cluster("up")], &[]);
        assert_eq!(selection.chosen, names(&["down", "up"]));
    }

    #[test]
    fn count_ranks_by_capacity_then_name() {
        let clusters = [
            with_capacity("a", 5),
            with_capacity("b", 50),
            cluster("c"), // unknown capacity ranks last
            with_capacity("d", 5),
        ];
        let affinity = ClusterAffinity {
            count: Some(3),
            ..ClusterAffinity::default()
        };
        let selection = select(&affinity, &clusters, &[]);
        assert_eq!(selection.chosen, names(&["a", "b", "d"]));
        assert_eq!(
            reasons(&selection),
            [("c".into(), "not picked: count 3 reached".into())]
        );
        let affinity = ClusterAffinity {
            count: Some(2),
            ..affinity
        };
        assert_eq!(select(&affinity, &clusters, &[]).chosen, names(&["a", "b"]));
    }

    #[test]
    fn count_keeps_the_previous_choice() {
        let clusters = [
            with_capacity("a", 1),
            with_capacity("b", 100),
            with_capacity("c", 50),
            with_capacity("d", 2),
        ];
        let affinity = ClusterAffinity {
            count: Some(2),
            ..ClusterAffinity::default()
        };
        let first = select(&affinity, &clusters, &[]);
        assert_eq!(first.chosen, names(&["b", "c"]));
        // Capacity changes; the choice does not.
        let mut later = clusters.clone();
        later[0].available_replicas = Some(1000);
        assert_eq!(
            select(&affinity, &later, &first.chosen).chosen,
            first.chosen
        );
        // A previous cluster that is no longer feasible is replaced by the next in rank.
        let mut later = clusters.clone();
        later[1].taints = vec![Taint {
            key: "evacuate".into(),
            value: String::new(),
            effect: TaintEffect::NoExecute,
        }];
        assert_eq!(
            select(&affinity, &later, &first.chosen).chosen,
            names(&["c", "d"])
        );
        // A larger count keeps the previous clusters and adds the best of the rest.
        let affinity = ClusterAffinity {
            count: Some(3),
            ..affinity
        };
        assert_eq!(
            select(&affinity, &clusters, &names(&["a", "d"])).chosen,
            names(&["a", "b", "d"])
        );
    }

    fn region(name: &str, region: &str, available: i64) -> ClusterView {
        ClusterView {
            available_replicas: Some(available),
            ..labelled(name, &[("region", region)])
        }
    }

    fn spread_over_regions(count: u32, max_skew: u32) -> ClusterAffinity {
        ClusterAffinity {
            count: Some(count),
            spread: vec![SpreadConstraint {
                topology_key: "region".into(),
                max_skew,
            }],
            ..ClusterAffinity::default()
        }
    }

    #[test]
    fn spread_balances_the_picks_over_topologies() {
        let clusters = [
            region("eu-1", "eu", 90),
            region("eu-2", "eu", 80),
            region("eu-3", "eu", 70),
            region("us-1", "us", 20),
            region("ap-1", "ap", 10),
            region("ap-2", "ap", 5),
            cluster("nowhere"),
        ];
        // Without spread the three largest (all eu) win.
        let plain = ClusterAffinity {
            count: Some(3),
            ..ClusterAffinity::default()
        };
        assert_eq!(
            select(&plain, &clusters, &[]).chosen,
            names(&["eu-1", "eu-2", "eu-3"])
        );
        // With maxSkew 1: one per region, the best-ranked in each.
        let selection = select(&spread_over_regions(3, 1), &clusters, &[]);
        assert_eq!(selection.chosen, names(&["ap-1", "eu-1", "us-1"]));
        assert!(selection.excluded.contains(&(
            "nowhere".into(),
            Reason::MissingTopologyLabel {
                key: "region".into()
            }
        )));
        // Five with maxSkew 1: us has one cluster, so no region may exceed 2.
        let selection = select(&spread_over_regions(5, 1), &clusters, &[]);
        assert_eq!(
            selection.chosen,
            names(&["ap-1", "ap-2", "eu-1", "eu-2", "us-1"])
        );
        // maxSkew 2 lets eu take a second cluster before ap gets one, but not a third.
        let selection = select(&spread_over_regions(3, 2), &clusters, &[]);
        assert_eq!(selection.chosen, names(&["eu-1", "eu-2", "us-1"]));
        let selection = select(&spread_over_regions(4, 2), &clusters, &[]);
        assert_eq!(selection.chosen, names(&["ap-1", "eu-1", "eu-2", "us-1"]));
        // maxSkew 0 is read as 1.
        assert_eq!(
            select(&spread_over_regions(3, 0), &clusters, &[]).chosen,
            names(&["ap-1", "eu-1", "us-1"])
        );
    }

    fn in_set(name: &str, set: Option<&str>) -> ClusterView {
        ClusterView {
            cluster_set: set.map(str::to_owned),
            ..cluster(name)
        }
    }

    fn bound_to(sets: &[&str]) -> Reach {
        Reach::Sets {
            namespace: "shop".into(),
            sets: sets.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// eu-1 and eu-2 in `eu`, us-1 in `us`, solo in no set (so in `default`).
    fn tenants() -> [ClusterView; 4] {
        [
            in_set("eu-1", Some("eu")),
            in_set("eu-2", Some("eu")),
            in_set("us-1", Some("us")),
            in_set("solo", None),
        ]
    }

    #[test]
    fn bindings_limit_the_reach_to_the_bound_sets() {
        let any = ClusterAffinity::default();
        // Everywhere (a ClusterPlacement, or an open namespace without bindings): all.
        let everywhere = select_within(&Reach::Everywhere, &any, &tenants(), &[]);
        assert_eq!(everywhere, select(&any, &tenants(), &[]));
        assert_eq!(everywhere.chosen.len(), 4);
        // A namespace bound to eu reaches the eu clusters only, each other one saying why.
        let selection = select_within(&bound_to(&["eu"]), &any, &tenants(), &[]);
        assert_eq!(selection.chosen, names(&["eu-1", "eu-2"]));
        assert_eq!(
            reasons(&selection),
            [
                (
                    "solo".into(),
                    "cluster set default is not bound to namespace shop".into()
                ),
                (
                    "us-1".into(),
                    "cluster set us is not bound to namespace shop".into()
                ),
            ]
        );
        // Clusters in no set are in `default`.
        let selection = select_within(&bound_to(&["default", "us"]), &any, &tenants(), &[]);
        assert_eq!(selection.chosen, names(&["solo", "us-1"]));
        // Bindings whose sets are all missing reach nothing.
        assert!(
            select_within(&bound_to(&[]), &any, &tenants(), &[])
                .chosen
                .is_empty()
        );
        // Bound tenancy, no binding: nothing, and every cluster says so.
        let unbound = Reach::Unbound {
            namespace: "shop".into(),
        };
        let selection = select_within(&unbound, &any, &tenants(), &[]);
        assert!(selection.chosen.is_empty());
        assert_eq!(selection.excluded.len(), 4);
        assert!(
            selection.excluded.iter().all(|(_, r)| r.to_string()
                == "namespace shop has no ClusterSetBinding (tenancy is bound)")
        );
    }

    #[test]
    fn the_placements_own_terms_narrow_the_reach_and_never_widen_it() {
        // It asks for us and eu; only eu is bound: eu.
        let sets = ClusterAffinity {
            cluster_sets: names(&["us", "eu"]),
            ..ClusterAffinity::default()
        };
        let selection = select_within(&bound_to(&["eu"]), &sets, &tenants(), &[]);
        assert_eq!(selection.chosen, names(&["eu-1", "eu-2"]));
        // It asks for us only; only eu is bound: nothing, the reach named first.
        let us = ClusterAffinity {
            cluster_sets: names(&["us"]),
            ..ClusterAffinity::default()
        };
        let selection = select_within(&bound_to(&["eu"]), &us, &tenants(), &[]);
        assert!(selection.chosen.is_empty());
        assert_eq!(
            reasons(&selection)[3],
            (
                "us-1".into(),
                "cluster set us is not bound to namespace shop".into()
            )
        );
        assert_eq!(
            reasons(&selection)[0],
            ("eu-1".into(), "cluster set eu is not one of us".into())
        );
        // Names and counts apply within the reach: a named cluster out of reach stays out.
        let named = ClusterAffinity {
            names: names(&["us-1", "eu-2"]),
            ..ClusterAffinity::default()
        };
        let selection = select_within(&bound_to(&["eu"]), &named, &tenants(), &[]);
        assert_eq!(selection.chosen, names(&["eu-2"]));
        let two = ClusterAffinity {
            count: Some(2),
            ..ClusterAffinity::default()
        };
        let selection = select_within(&bound_to(&["eu", "us"]), &two, &tenants(), &["us-1".into()]);
        assert_eq!(selection.chosen, names(&["eu-1", "us-1"]));
        // A cluster chosen before but now out of reach is not kept (unlike NoSchedule).
        let selection = select_within(&bound_to(&["eu"]), &two, &tenants(), &["us-1".into()]);
        assert_eq!(selection.chosen, names(&["eu-1", "eu-2"]));
    }

    #[test]
    fn spread_fills_the_count_when_the_skew_cannot_hold() {
        let clusters = [
            region("eu-1", "eu", 9),
            region("eu-2", "eu", 8),
            region("eu-3", "eu", 7),
            region("us-1", "us", 1),
        ];
        // eu 3, us 1 is skew 2 > 1: not possible with four clusters, so count wins.
        let selection = select(&spread_over_regions(4, 1), &clusters, &[]);
        assert_eq!(selection.chosen.len(), 4);
        // Three can hold it: eu 2, us 1.
        let selection = select(&spread_over_regions(3, 1), &clusters, &[]);
        assert_eq!(selection.chosen, names(&["eu-1", "eu-2", "us-1"]));
        assert_eq!(
            reasons(&selection),
            [("eu-3".into(), "not picked: count 3 reached".into())]
        );
    }

    #[test]
    fn spread_prefers_the_previous_choice_within_the_skew() {
        let clusters = [
            region("eu-1", "eu", 90),
            region("eu-2", "eu", 80),
            region("us-1", "us", 70),
            region("us-2", "us", 60),
        ];
        let affinity = spread_over_regions(2, 1);
        assert_eq!(
            select(&affinity, &clusters, &[]).chosen,
            names(&["eu-1", "us-1"])
        );
        // eu-2 and us-2 chosen before: kept. eu-1 and eu-2 before: only one may stay.
        assert_eq!(
            select(&affinity, &clusters, &names(&["eu-2", "us-2"])).chosen,
            names(&["eu-2", "us-2"])
        );
        assert_eq!(
            select(&affinity, &clusters, &names(&["eu-1", "eu-2"])).chosen,
            names(&["eu-1", "us-1"])
        );
    }

    #[test]
    fn spread_over_two_keys() {
        let zone = |name: &str, region: &str, zone: &str, available: i64| ClusterView {
            available_replicas: Some(available),
            ..labelled(name, &[("region", region), ("zone", zone)])
        };
        let clusters = [
            zone("eu-a1", "eu", "eu-a", 100),
            zone("eu-a2", "eu", "eu-a", 90),
            zone("eu-b1", "eu", "eu-b", 10),
            zone("us-a1", "us", "us-a", 50),
            zone("us-b1", "us", "us-b", 40),
        ];
        let mut affinity = spread_over_regions(4, 1);
        affinity.spread.push(SpreadConstraint {
            topology_key: "zone".into(),
            max_skew: 1,
        });
        let selection = select(&affinity, &clusters, &[]);
        assert_eq!(
            selection.chosen,
            names(&["eu-a1", "eu-b1", "us-a1", "us-b1"])
        );
    }

    #[test]
    fn the_input_order_does_not_matter() {
        let mut clusters = vec![
            region("eu-1", "eu", 5),
            region("eu-2", "eu", 5),
            region("us-1", "us", 5),
            tainted("t", "x", TaintEffect::NoSchedule),
        ];
        let affinity = spread_over_regions(2, 1);
        let forward = select(&affinity, &clusters, &names(&["us-1"]));
        clusters.reverse();
        assert_eq!(select(&affinity, &clusters, &names(&["us-1"])), forward);
        assert_eq!(forward.chosen, names(&["eu-1", "us-1"]));
    }
}
