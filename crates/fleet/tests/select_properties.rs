//! Property tests of `select`: a partition of the clusters, independent of input order,
//! stable when its decision is fed back, honouring `count`, and keeping a spread
//! constraint's skew whenever a brute-force search shows it can be kept.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_fleet::{
    ClusterAffinity, ClusterView, LabelSelector, Reason, SpreadConstraint, Taint, TaintEffect,
    Toleration, TolerationOperator, select,
};
use proptest::prelude::*;

const NAMES: [&str; 8] = ["eu-2", "us-1", "ap-1", "eu-1", "b", "a", "zz", "m"];

fn cluster() -> impl Strategy<Value = (Option<&'static str>, bool, Option<TaintEffect>, Option<i64>)>
{
    (
        prop::option::weighted(0.9, prop::sample::select(vec!["eu", "us", "ap"])),
        any::<bool>(),
        prop::option::weighted(
            0.2,
            prop_oneof![Just(TaintEffect::NoSchedule), Just(TaintEffect::NoExecute)],
        ),
        prop::option::of(0i64..=5),
    )
}

fn clusters() -> impl Strategy<Value = Vec<ClusterView>> {
    prop::collection::vec(cluster(), 0..=NAMES.len()).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (region, prod, taint, available))| {
                let mut labels = BTreeMap::from([(
                    "tier".to_string(),
                    if prod { "prod" } else { "dev" }.to_string(),
                )]);
                if let Some(region) = region {
                    labels.insert("region".into(), region.into());
                }
                ClusterView {
                    name: NAMES[i].into(),
                    labels,
                    taints: taint
                        .map(|effect| Taint {
                            key: "maintenance".into(),
                            value: String::new(),
                            effect,
                        })
                        .into_iter()
                        .collect(),
                    ready: i % 3 != 0,
                    available_replicas: available,
                    ..ClusterView::default()
                }
            })
            .collect()
    })
}

fn affinity() -> impl Strategy<Value = ClusterAffinity> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::option::of(0u32..=6),
        prop::option::of(0u32..=2),
    )
        .prop_map(|(only_prod, tolerate, count, max_skew)| ClusterAffinity {
            label_selector: only_prod.then(|| LabelSelector {
                match_labels: BTreeMap::from([("tier".to_string(), "prod".to_string())]),
                match_expressions: vec![],
            }),
            tolerations: tolerate
                .then(|| Toleration {
                    key: "maintenance".into(),
                    operator: TolerationOperator::Exists,
                    effect: Some(TaintEffect::NoSchedule),
                    ..Toleration::default()
                })
                .into_iter()
                .collect(),
            count,
            spread: max_skew
                .map(|max_skew| SpreadConstraint {
                    topology_key: "region".into(),
                    max_skew,
                })
                .into_iter()
                .collect(),
            ..ClusterAffinity::default()
        })
}

fn previous() -> impl Strategy<Value = Vec<String>> {
    prop::sample::subsequence(NAMES.to_vec(), 0..=4)
        .prop_map(|names| names.into_iter().map(String::from).collect())
}

/// max − min of the picked counts over every region a feasible cluster has.
fn skew(chosen: &[&ClusterView], feasible: &[&ClusterView]) -> u64 {
    let mut counts: BTreeMap<&str, u64> = feasible
        .iter()
        .map(|c| (c.labels["region"].as_str(), 0))
        .collect();
    for c in chosen {
        *counts.get_mut(c.labels["region"].as_str()).unwrap() += 1;
    }
    let most = counts.values().max().copied().unwrap_or(0);
    most - counts.values().min().copied().unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn selection_properties(
        (clusters, order) in clusters().prop_flat_map(|clusters| {
            let n = clusters.len();
            (Just(clusters), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        }),
        affinity in affinity(),
        previous in previous(),
    ) {
        let selection = select(&affinity, &clusters, &previous);

        // A partition of the clusters, both halves sorted by name.
        let chosen: BTreeSet<&str> = selection.chosen.iter().map(String::as_str).collect();
        let excluded: BTreeSet<&str> = selection.excluded.iter().map(|(n, _)| n.as_str()).collect();
        prop_assert!(chosen.is_disjoint(&excluded));
        let all: BTreeSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        prop_assert_eq!(chosen.union(&excluded).copied().collect::<BTreeSet<_>>(), all);
        prop_assert!(selection.chosen.is_sorted());
        prop_assert!(selection.excluded.iter().map(|(n, _)| n).is_sorted());

        // Input order does not matter.
        let shuffled: Vec<ClusterView> = order.iter().map(|&i| clusters[i].clone()).collect();
        let mut reversed = previous.clone();
        reversed.reverse();
        prop_assert_eq!(&select(&affinity, &shuffled, &reversed), &selection);

        // Fed back, the decision stays.
        prop_assert_eq!(&select(&affinity, &clusters, &selection.chosen).chosen, &selection.chosen);

        // Count: exactly min(count, feasible); only count-reached clusters are feasible.
        let feasible: Vec<&ClusterView> = clusters
            .iter()
            .filter(|c| {
                chosen.contains(c.name.as_str())
                    || selection.excluded.iter().any(|(n, r)| {
                        *n == c.name && matches!(r, Reason::CountReached { .. })
                    })
            })
            .collect();
        match affinity.count {
            None => prop_assert_eq!(chosen.len(), feasible.len()),
            Some(count) => prop_assert_eq!(chosen.len(), feasible.len().min(count as usize)),
        }

        // Stability: without spread, a feasible cluster chosen last time is only left out
        // when `count` is filled by clusters chosen last time.
        if affinity.spread.is_empty() {
            let was_chosen = |name: &str| previous.iter().any(|p| p == name);
            let dropped = feasible
                .iter()
                .any(|c| was_chosen(&c.name) && !chosen.contains(c.name.as_str()));
            if dropped {
                prop_assert!(chosen.iter().all(|c| was_chosen(c)), "chosen {:?}", chosen);
            }
        }

        // Spread: whenever some subset of that size keeps the skew, the chosen one does.
        if let (Some(constraint), Some(_)) = (affinity.spread.first(), affinity.count) {
            let picked: Vec<&ClusterView> = feasible
                .iter()
                .copied()
                .filter(|c| chosen.contains(c.name.as_str()))
                .collect();
            let allowed = u64::from(constraint.max_skew.max(1));
            let possible = (0u32..1 << feasible.len()).any(|mask| {
                let subset: Vec<&ClusterView> = (0..feasible.len())
                    .filter(|k| mask & (1 << k) != 0)
                    .map(|k| feasible[k])
                    .collect();
                subset.len() == picked.len() && skew(&subset, &feasible) <= allowed
            });
            if possible {
                prop_assert!(skew(&picked, &feasible) <= allowed, "picked {:?}", selection.chosen);
            }
        }
    }
}
