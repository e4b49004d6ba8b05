//! Replica division: how a template's replicas are shared among the chosen clusters,
//! exactly and stably.
//!
//! ```text
//!  weights w_i (terms | equal | available capacity; 0 if not ready)
//!      │ water-filling: q_i = clamp(λ·w_i, min, max) with Σ q_i = total (exact rationals)
//!      ▼
//!  quotas q_i ── r_i ∈ {⌊q_i⌋, ⌈q_i⌉}, Σ r_i = total; round up first where the previous
//!      │         division had more, then by larger remainder, then by name
//!      ▼
//!  replicas per cluster (fewest moved from `previous`; Hamilton's method when it is empty)
//! ```
//!
//! Arithmetic is on integers (`u128` numerators over one common denominator), so results are
//! exact and the same on every platform.

use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;

use crate::{ClusterTerm, ClusterView, Dynamic, ReplicaMode};

/// How a template's replicas go to the chosen clusters.
///
/// The domain form of [`flotilla_api::ReplicaPolicy`] (weights unsigned, bounds wide),
/// made by `TryFrom` in [`model`](crate::model). With [`Dynamic::AvailableCapacity`] a
/// cluster's weight is its `available_replicas` (none reported, or negative: 0; above
/// `u32::MAX`: `u32::MAX`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaPolicy {
    /// Whether every cluster runs all replicas or a share of them.
    pub mode: ReplicaMode,
    /// Static weights in `Divided` mode: a cluster's weight is that of the first term it
    /// matches, 0 if it matches none. No terms: equal weights.
    pub weights: Vec<WeightTerm>,
    /// Weights read from the clusters instead; when set, `weights` is ignored.
    pub dynamic: Option<Dynamic>,
    /// Bounds on each weighted cluster's replicas in `Divided` mode.
    pub per_cluster: Option<Bounds>,
}

/// A static weight for the clusters a [`ClusterTerm`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightTerm {
    /// The clusters this weight is for.
    pub clusters: ClusterTerm,
    /// Their weight.
    pub weight: u32,
}

/// Bounds on the replicas of each weighted cluster (clusters of weight 0 always get 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// The fewest replicas a weighted cluster gets.
    pub min: Option<i64>,
    /// The most replicas a cluster gets.
    pub max: Option<i64>,
}

/// Why replicas cannot be divided as the policy asks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DivisionError {
    /// The replica count is negative.
    #[error("cannot divide {total} replicas: the replica count must not be negative")]
    NegativeTotal {
        /// The replica count.
        total: i64,
    },
    /// `perCluster.min` or `perCluster.max` is negative.
    #[error("perCluster.{bound} is {value}: it must not be negative")]
    NegativeBound {
        /// `min` or `max`.
        bound: &'static str,
        /// The bound's value.
        value: i64,
    },
    /// `perCluster.min` is above `perCluster.max`.
    #[error(
        "perCluster.min ({min}) is greater than perCluster.max ({max}): lower min or raise max"
    )]
    MinAboveMax {
        /// The minimum.
        min: i64,
        /// The maximum.
        max: i64,
    },
    /// There are replicas to divide but no chosen cluster.
    #[error(
        "no cluster was chosen to run the {total} replicas: check the placement's cluster affinity"
    )]
    NoClusters {
        /// The replica count.
        total: i64,
    },
    /// There are replicas to divide but every chosen cluster has weight 0.
    #[error(
        "no cluster can take the {total} replicas: all {clusters} chosen clusters have weight 0 \
         (not ready, no available capacity, or matched by no weight term)"
    )]
    AllWeightsZero {
        /// The replica count.
        total: i64,
        /// How many clusters were chosen.
        clusters: usize,
    },
    /// The minimums of the weighted clusters add up to more than the replica count.
    #[error(
        "perCluster.min {min} on {clusters} clusters needs {needed} replicas but only {total} \
         are to be divided: lower perCluster.min or raise the replicas"
    )]
    MinimumsExceedTotal {
        /// The minimum per cluster.
        min: i64,
        /// How many clusters have a positive weight.
        clusters: usize,
        /// `min × clusters`.
        needed: i128,
        /// The replica count.
        total: i64,
    },
    /// The maximums of the weighted clusters add up to less than the replica count.
    #[error(
        "perCluster.max {max} on {clusters} clusters allows {allowed} replicas but {total} are \
         to be divided: raise perCluster.max, add clusters or lower the replicas"
    )]
    MaximumsBelowTotal {
        /// The maximum per cluster.
        max: i64,
        /// How many clusters have a positive weight.
        clusters: usize,
        /// `max × clusters`.
        allowed: i128,
        /// The replica count.
        total: i64,
    },
}

/// Divides `total` replicas among `clusters` (the chosen ones) under `policy`, moving as
/// few replicas as possible from `previous` (the last division; absent clusters count as
/// 0, and entries for clusters not in `clusters` are ignored).
///
/// In `Duplicated` mode every cluster gets `total`. In `Divided` mode each cluster's quota
/// `q_i` is its weighted share of `total`, kept within `perCluster` by water-filling (a
/// cluster whose share breaks a bound is held at it and the rest re-divided). Each cluster
/// then gets `⌊q_i⌋` or `⌈q_i⌉`, summing exactly to `total`; among those divisions the one
/// with the smallest `Σ |r_i − previous_i|` is returned, ties going to the larger remainder,
/// then to the first name. The result does not depend on the order of `clusters`, and
/// feeding it back as `previous` returns it unchanged. Cluster names must be unique.
///
/// ```
/// use std::collections::BTreeMap;
/// use flotilla_fleet::{divide, ClusterView, ReplicaMode, ReplicaPolicy};
///
/// let cluster = |name: &str| ClusterView { name: name.into(), ready: true, ..Default::default() };
/// let policy = ReplicaPolicy { mode: ReplicaMode::Divided, ..Default::default() };
/// let clusters = [cluster("a"), cluster("b"), cluster("c")];
/// let first = divide(10, &policy, &clusters, &BTreeMap::new()).unwrap();
/// assert_eq!(first, BTreeMap::from([("a".into(), 4), ("b".into(), 3), ("c".into(), 3)]));
/// let previous = BTreeMap::from([("a".into(), 3), ("b".into(), 4), ("c".into(), 3)]);
/// assert_eq!(divide(10, &policy, &clusters, &previous).unwrap(), previous);
/// ```
pub fn divide(
    total: i64,
    policy: &ReplicaPolicy,
    clusters: &[ClusterView],
    previous: &BTreeMap<String, i64>,
) -> Result<BTreeMap<String, i64>, DivisionError> {
    if total < 0 {
        return Err(DivisionError::NegativeTotal { total });
    }
    if policy.mode == ReplicaMode::Duplicated {
        return Ok(clusters.iter().map(|c| (c.name.clone(), total)).collect());
    }
    let Bounds { min, max } = policy.per_cluster.unwrap_or_default();
    for (bound, value) in [("min", min), ("max", max)] {
        if let Some(value) = value
            && value < 0
        {
            return Err(DivisionError::NegativeBound { bound, value });
        }
    }
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        return Err(DivisionError::MinAboveMax { min, max });
    }

    let mut division: BTreeMap<String, i64> =
        clusters.iter().map(|c| (c.name.clone(), 0)).collect();
    let mut weighted: Vec<(&ClusterView, u128)> = clusters
        .iter()
        .map(|c| (c, weight(policy, c)))
        .filter(|(_, w)| *w > 0)
        .collect();
    weighted.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if weighted.is_empty() {
        return match (total, clusters.len()) {
            (0, _) => Ok(division),
            (_, 0) => Err(DivisionError::NoClusters { total }),
            (_, clusters) => Err(DivisionError::AllWeightsZero { total, clusters }),
        };
    }
    let n = weighted.len();
    let count = i128::try_from(n).expect("a slice's length fits in i128");
    let lo = min.unwrap_or(0);
    if i128::from(lo) * count > i128::from(total) {
        return Err(DivisionError::MinimumsExceedTotal {
            min: lo,
            clusters: n,
            needed: i128::from(lo) * count,
            total,
        });
    }
    if let Some(max) = max
        && i128::from(max) * count < i128::from(total)
    {
        return Err(DivisionError::MaximumsBelowTotal {
            max,
            clusters: n,
            allowed: i128::from(max) * count,
            total,
        });
    }

    let unsigned = |v: i64| u128::try_from(v).expect("checked not negative");
    let weights: Vec<u128> = weighted.iter().map(|(_, w)| *w).collect();
    let hi = max.map(|max| unsigned(max.min(total)));
    let (numerators, denominator) = quotas(unsigned(total), unsigned(lo), hi, &weights);

    let mut replicas: Vec<u128> = numerators.iter().map(|q| q / denominator).collect();
    let mut short = unsigned(total) - replicas.iter().sum::<u128>();
    // Round up `short` of the clusters with a fractional quota: first those the previous
    // division gave more than the floor (each saves a move), then larger remainders, then names.
    let mut fractional: Vec<usize> = (0..n)
        .filter(|&i| numerators[i] % denominator != 0)
        .collect();
    fractional.sort_by_key(|&i| {
        let previous = previous.get(&weighted[i].0.name).copied().unwrap_or(0);
        let floor = i128::try_from(replicas[i]).expect("at most the total");
        (
            Reverse(i128::from(previous) > floor),
            Reverse(numerators[i] % denominator),
            &weighted[i].0.name,
        )
    });
    for i in fractional {
        if short == 0 {
            break;
        }
        replicas[i] += 1;
        short -= 1;
    }
    debug_assert_eq!(
        short, 0,
        "the remainders add up to a whole number of replicas"
    );

    for ((cluster, _), r) in weighted.iter().zip(replicas) {
        let r = i64::try_from(r).expect("at most the total");
        division.insert(cluster.name.clone(), r);
    }
    Ok(division)
}

/// A cluster's weight under `policy` in `Divided` mode (0 when not ready).
fn weight(policy: &ReplicaPolicy, cluster: &ClusterView) -> u128 {
    if !cluster.ready {
        return 0;
    }
    match policy.dynamic {
        Some(Dynamic::AvailableCapacity) => {
            let available = cluster.available_replicas.unwrap_or(0);
            u128::try_from(available.clamp(0, i64::from(u32::MAX))).expect("clamped")
        }
        None if policy.weights.is_empty() => 1,
        None => policy
            .weights
            .iter()
            .find(|term| term.clusters.matches(cluster))
            .map_or(0, |term| u128::from(term.weight)),
    }
}

/// The water-filled quotas: `q_i = clamp(λ·w_i, lo, hi)` with `Σ q_i = total`, returned as
/// numerators over one common denominator.
///
/// Needs positive weights (each at most `u32::MAX`), `n·lo ≤ total` and, with `hi`,
/// `lo ≤ hi ≤ total ≤ n·hi`. `f(λ) = Σ clamp(λ·w_i, lo, hi)` is continuous, nondecreasing
/// and piecewise linear with breaks at `lo/w_i` and `hi/w_i`; walking the breaks in order
/// keeps `f = constant + λ·slope` on the current piece until the piece reaching `total`.
fn quotas(total: u128, lo: u128, hi: Option<u128>, weights: &[u128]) -> (Vec<u128>, u128) {
    let n = u128::try_from(weights.len()).expect("a slice's length fits in u128");
    if total == n * lo {
        return (vec![lo; weights.len()], 1);
    }
    if let Some(hi) = hi
        && total == n * hi
    {
        return (vec![hi; weights.len()], 1);
    }

    /// At λ = bound/weight a cluster leaves `lo` (becomes free) or reaches `hi`.
    struct Break {
        bound: u128,
        weight: u128,
        reaches_hi: bool,
    }
    let at = |a: &Break, b: &Break| (a.bound * b.weight).cmp(&(b.bound * a.weight));
    let mut breaks: Vec<Break> = Vec::with_capacity(weights.len() * 2);
    for &weight in weights {
        breaks.push(Break {
            bound: lo,
            weight,
            reaches_hi: false,
        });
        if let Some(hi) = hi {
            breaks.push(Break {
                bound: hi,
                weight,
                reaches_hi: true,
            });
        }
    }
    // At equal λ, clusters leave `lo` before any reaches `hi`, so `slope` never goes negative.
    breaks.sort_by(|a, b| at(a, b).then(a.reaches_hi.cmp(&b.reaches_hi)));

    let (mut constant, mut slope) = (n * lo, 0u128);
    let mut next = 0;
    while next < breaks.len() {
        let here = &breaks[next];
        // f(here) = constant + slope·bound/weight ≥ total: the solution is on this piece.
        if slope > 0 && constant * here.weight + slope * here.bound >= total * here.weight {
            break;
        }
        while next < breaks.len() && at(&breaks[next], here) == Ordering::Equal {
            let b = &breaks[next];
            if b.reaches_hi {
                constant += b.bound;
                slope -= b.weight;
            } else {
                constant -= b.bound;
                slope += b.weight;
            }
            next += 1;
        }
    }
    // λ = (total − constant) / slope; every quota over the denominator `slope`.
    let lambda = total - constant;
    let numerators: Vec<u128> = weights
        .iter()
        .map(|&w| {
            let free = (lambda * w).max(lo * slope);
            hi.map_or(free, |hi| free.min(hi * slope))
        })
        .collect();
    debug_assert_eq!(numerators.iter().sum::<u128>(), total * slope);
    (numerators, slope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LabelSelector;

    fn cluster(name: &str) -> ClusterView {
        ClusterView::ready(name)
    }

    fn divided() -> ReplicaPolicy {
        ReplicaPolicy {
            mode: ReplicaMode::Divided,
            ..ReplicaPolicy::default()
        }
    }

    fn by_name(weights: &[(&str, u32)]) -> ReplicaPolicy {
        ReplicaPolicy {
            weights: weights
                .iter()
                .map(|(name, weight)| WeightTerm {
                    clusters: ClusterTerm {
                        names: vec![name.to_string()],
                        label_selector: None,
                    },
                    weight: *weight,
                })
                .collect(),
            ..divided()
        }
    }

    fn bounded(policy: ReplicaPolicy, min: Option<i64>, max: Option<i64>) -> ReplicaPolicy {
        ReplicaPolicy {
            per_cluster: Some(Bounds { min, max }),
            ..policy
        }
    }

    fn map(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn clusters(names: &[&str]) -> Vec<ClusterView> {
        names.iter().map(|n| cluster(n)).collect()
    }

    fn run(total: i64, policy: &ReplicaPolicy, names: &[&str]) -> BTreeMap<String, i64> {
        divide(total, policy, &clusters(names), &BTreeMap::new()).expect("divides")
    }

    #[test]
    fn weights_one_to_two() {
        let policy = by_name(&[("a", 1), ("b", 2)]);
        assert_eq!(run(9, &policy, &["a", "b"]), map(&[("a", 3), ("b", 6)]));
        assert_eq!(run(12, &policy, &["a", "b"]), map(&[("a", 4), ("b", 8)]));
        // 10·1/3 = 3.33…, 10·2/3 = 6.67…: the larger remainder (b) rounds up.
        assert_eq!(run(10, &policy, &["a", "b"]), map(&[("a", 3), ("b", 7)]));
    }

    #[test]
    fn equal_weights_give_the_extra_replica_to_the_first_name() {
        assert_eq!(
            run(10, &divided(), &["c", "a", "b"]),
            map(&[("a", 4), ("b", 3), ("c", 3)])
        );
        assert_eq!(
            run(11, &divided(), &["c", "b", "a"]),
            map(&[("a", 4), ("b", 4), ("c", 3)])
        );
    }

    #[test]
    fn the_previous_division_is_kept_when_it_is_valid() {
        let policy = by_name(&[("a", 1), ("b", 1), ("c", 1)]);
        let previous = map(&[("a", 3), ("b", 4), ("c", 3)]);
        let result = divide(10, &policy, &clusters(&["a", "b", "c"]), &previous).unwrap();
        assert_eq!(result, previous);
    }

    #[test]
    fn a_cluster_that_leaves_gives_its_replicas_to_the_others() {
        let previous = map(&[("a", 4), ("b", 3), ("c", 3)]);
        let result = divide(10, &divided(), &clusters(&["b", "c"]), &previous).unwrap();
        assert_eq!(result, map(&[("b", 5), ("c", 5)]));
        // A cluster that joins takes only what it must: 10/4 = 2.5 each, so two stay at 3.
        let result = divide(10, &divided(), &clusters(&["a", "b", "c", "d"]), &previous).unwrap();
        assert_eq!(result, map(&[("a", 3), ("b", 3), ("c", 2), ("d", 2)]));
    }

    #[test]
    fn an_invalid_previous_is_moved_as_little_as_possible() {
        // Quotas 10/3: each gets 3 or 4. Previous {a:0, b:10, c:0}: b keeps the most it may.
        let previous = map(&[("b", 10)]);
        let result = divide(10, &divided(), &clusters(&["a", "b", "c"]), &previous).unwrap();
        assert_eq!(result, map(&[("a", 3), ("b", 4), ("c", 3)]));
    }

    #[test]
    fn minimums_lift_small_shares_and_the_rest_is_redivided() {
        // Weights 1:1:8 of 10 → 1, 1, 8; with min 2 → a and b are held at 2, c gets 6.
        let policy = bounded(by_name(&[("a", 1), ("b", 1), ("c", 8)]), Some(2), None);
        assert_eq!(
            run(10, &policy, &["a", "b", "c"]),
            map(&[("a", 2), ("b", 2), ("c", 6)])
        );
    }

    #[test]
    fn maximums_cap_large_shares_and_the_rest_is_redivided() {
        // Weights 1:1:8 of 20 → 2, 2, 16; with max 10 → c held at 10, a and b split 10.
        let policy = bounded(by_name(&[("a", 1), ("b", 1), ("c", 8)]), None, Some(10));
        assert_eq!(
            run(20, &policy, &["a", "b", "c"]),
            map(&[("a", 5), ("b", 5), ("c", 10)])
        );
        // Weights 1:2:7 of 10 with max 4: c → 4; then a:b = 1:2 of 6 → 2, 4.
        let policy = bounded(by_name(&[("a", 1), ("b", 2), ("c", 7)]), None, Some(4));
        assert_eq!(
            run(10, &policy, &["a", "b", "c"]),
            map(&[("a", 2), ("b", 4), ("c", 4)])
        );
    }

    #[test]
    fn minimums_and_maximums_together() {
        // Weights 1:4:20 of 25 → 1, 4, 20; min 3 max 12: a → 3, c → 12, b gets the 10 left.
        let policy = bounded(by_name(&[("a", 1), ("b", 4), ("c", 20)]), Some(3), Some(12));
        assert_eq!(
            run(25, &policy, &["a", "b", "c"]),
            map(&[("a", 3), ("b", 10), ("c", 12)])
        );
        // Equal weights, min = max: everyone exactly at the bound.
        let policy = bounded(divided(), Some(5), Some(5));
        assert_eq!(run(10, &policy, &["a", "b"]), map(&[("a", 5), ("b", 5)]));
    }

    #[test]
    fn a_fractional_quota_inside_the_bounds_still_rounds() {
        // Weights 1:1:1:9 of 13, max 4: d → 4, the rest share 9 → 3 each.
        // Weights 1:1:1:9 of 14, max 4: d → 4, the rest share 10 → 10/3 each: 4, 3, 3.
        let policy = bounded(
            by_name(&[("a", 1), ("b", 1), ("c", 1), ("d", 9)]),
            None,
            Some(4),
        );
        let names = ["a", "b", "c", "d"];
        assert_eq!(
            run(13, &policy, &names),
            map(&[("a", 3), ("b", 3), ("c", 3), ("d", 4)])
        );
        assert_eq!(
            run(14, &policy, &names),
            map(&[("a", 4), ("b", 3), ("c", 3), ("d", 4)])
        );
    }

    #[test]
    fn duplicated_gives_every_cluster_the_total() {
        let policy = ReplicaPolicy {
            per_cluster: Some(Bounds {
                min: None,
                max: Some(1),
            }),
            ..ReplicaPolicy::default()
        };
        let mut down = cluster("b");
        down.ready = false;
        let result = divide(7, &policy, &[cluster("a"), down], &BTreeMap::new()).unwrap();
        assert_eq!(result, map(&[("a", 7), ("b", 7)]));
    }

    #[test]
    fn available_capacity_is_the_weight() {
        let policy = ReplicaPolicy {
            dynamic: Some(Dynamic::AvailableCapacity),
            ..by_name(&[("a", 100)]) // ignored: dynamic wins
        };
        let with = |name: &str, available: Option<i64>| ClusterView {
            available_replicas: available,
            ..cluster(name)
        };
        let clusters = [with("a", Some(6)), with("b", Some(12)), with("c", Some(18))];
        let result = divide(12, &policy, &clusters, &BTreeMap::new()).unwrap();
        assert_eq!(result, map(&[("a", 2), ("b", 4), ("c", 6)]));
        let result = divide(6, &policy, &clusters, &BTreeMap::new()).unwrap();
        assert_eq!(result, map(&[("a", 1), ("b", 2), ("c", 3)]));
        // Unknown or negative capacity weighs 0.
        let clusters = [with("a", None), with("b", Some(-3)), with("c", Some(1))];
        let result = divide(5, &policy, &clusters, &BTreeMap::new()).unwrap();
        assert_eq!(result, map(&[("a", 0), ("b", 0), ("c", 5)]));
    }

    #[test]
    fn a_not_ready_cluster_gets_nothing_and_its_share_moves() {
        let mut down = cluster("b");
        down.ready = false;
        let previous = map(&[("a", 3), ("b", 3), ("c", 3)]);
        let result = divide(
            9,
            &divided(),
            &[cluster("a"), down, cluster("c")],
            &previous,
        );
        assert_eq!(result.unwrap(), map(&[("a", 5), ("b", 0), ("c", 4)]));
        // perCluster.min does not apply to it either.
        let mut down = cluster("b");
        down.ready = false;
        let policy = bounded(divided(), Some(2), None);
        let result = divide(4, &policy, &[cluster("a"), down], &BTreeMap::new());
        assert_eq!(result.unwrap(), map(&[("a", 4), ("b", 0)]));
    }

    #[test]
    fn first_matching_term_gives_the_weight_and_no_match_gives_zero() {
        let eu = LabelSelector {
            match_labels: BTreeMap::from([("region".to_string(), "eu".to_string())]),
            match_expressions: vec![],
        };
        let policy = ReplicaPolicy {
            weights: vec![
                WeightTerm {
                    clusters: ClusterTerm {
                        names: vec!["eu-2".into()],
                        label_selector: None,
                    },
                    weight: 1,
                },
                WeightTerm {
                    clusters: ClusterTerm {
                        names: vec![],
                        label_selector: Some(eu),
                    },
                    weight: 3,
                },
            ],
            ..divided()
        };
        let in_region = |name: &str, region: &str| ClusterView {
            labels: BTreeMap::from([("region".to_string(), region.to_string())]),
            ..cluster(name)
        };
        let clusters = [
            in_region("eu-1", "eu"),
            in_region("eu-2", "eu"),
            in_region("us-1", "us"),
        ];
        let result = divide(8, &policy, &clusters, &BTreeMap::new()).unwrap();
        assert_eq!(result, map(&[("eu-1", 6), ("eu-2", 2), ("us-1", 0)]));
    }

    #[test]
    fn zero_replicas_and_no_clusters() {
        assert_eq!(run(0, &divided(), &["a", "b"]), map(&[("a", 0), ("b", 0)]));
        assert_eq!(run(0, &divided(), &[]), map(&[]));
        assert_eq!(
            divide(3, &divided(), &[], &BTreeMap::new()),
            Err(DivisionError::NoClusters { total: 3 })
        );
    }

    #[test]
    fn every_error_explains_itself() {
        let two = clusters(&["a", "b"]);
        let none = BTreeMap::new();
        let error = divide(-1, &divided(), &two, &none).unwrap_err();
        assert_eq!(error, DivisionError::NegativeTotal { total: -1 });
        assert!(error.to_string().contains("must not be negative"));

        let error = divide(4, &bounded(divided(), Some(3), Some(2)), &two, &none).unwrap_err();
        assert_eq!(error, DivisionError::MinAboveMax { min: 3, max: 2 });
        assert_eq!(
            error.to_string(),
            "perCluster.min (3) is greater than perCluster.max (2): lower min or raise max"
        );

        let error = divide(4, &bounded(divided(), Some(-1), None), &two, &none).unwrap_err();
        assert_eq!(
            error,
            DivisionError::NegativeBound {
                bound: "min",
                value: -1
            }
        );

        let error = divide(4, &by_name(&[("a", 0), ("b", 0)]), &two, &none).unwrap_err();
        assert_eq!(
            error,
            DivisionError::AllWeightsZero {
                total: 4,
                clusters: 2
            }
        );
        assert!(error.to_string().contains("weight 0"));

        let error = divide(5, &bounded(divided(), Some(3), None), &two, &none).unwrap_err();
        assert_eq!(
            error,
            DivisionError::MinimumsExceedTotal {
                min: 3,
                clusters: 2,
                needed: 6,
                total: 5
            }
        );
        assert_eq!(
            error.to_string(),
            "perCluster.min 3 on 2 clusters needs 6 replicas but only 5 are to be divided: \
             lower perCluster.min or raise the replicas"
        );
        let error = divide(0, &bounded(divided(), Some(1), None), &two, &none).unwrap_err();
        assert!(matches!(error, DivisionError::MinimumsExceedTotal { .. }));

        let error = divide(7, &bounded(divided(), None, Some(3)), &two, &none).unwrap_err();
        assert_eq!(
            error,
            DivisionError::MaximumsBelowTotal {
                max: 3,
                clusters: 2,
                allowed: 6,
                total: 7
            }
        );
        assert!(error.to_string().contains("raise perCluster.max"));
    }

    #[test]
    fn weights_of_zero_do_not_count_towards_the_bounds() {
        // Only a is weighted: max 3 over one cluster cannot hold 4, even with b present.
        let policy = bounded(by_name(&[("a", 1), ("b", 0)]), None, Some(3));
        let error = divide(4, &policy, &clusters(&["a", "b"]), &BTreeMap::new()).unwrap_err();
        assert!(matches!(
            error,
            DivisionError::MaximumsBelowTotal { clusters: 1, .. }
        ));
    }

    #[test]
    fn large_totals_and_weights_are_exact() {
        let policy = by_name(&[("a", u32::MAX), ("b", 1)]);
        let result = run(i64::MAX, &policy, &["a", "b"]);
        assert_eq!(result.values().sum::<i64>(), i64::MAX);
        // b's quota is i64::MAX / (2^32) = 2147483647.99999999976…: it rounds up.
        assert_eq!(result["b"], 2_147_483_648);
    }

    #[test]
    fn quotas_walk_the_breaks() {
        // 1:1:8 of 10 with min 2: a, b at 2 and c free at 6 (denominator = c's weight).
        let (numerators, denominator) = quotas(10, 2, None, &[1, 1, 8]);
        assert_eq!(
            numerators
                .iter()
                .map(|n| (n / denominator, n % denominator))
                .collect::<Vec<_>>(),
            [(2, 0), (2, 0), (6, 0)]
        );
        // 1:2 of 10: 10/3 and 20/3.
        let (numerators, denominator) = quotas(10, 0, None, &[1, 2]);
        assert_eq!((numerators, denominator), (vec![10, 20], 3));
    }
}
