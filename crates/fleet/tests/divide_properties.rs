//! Property tests of `divide` against oracles written independently of it: water-filled
//! quotas with exact rationals (by iteratively fixing violators, not by walking breakpoints),
//! and a brute-force enumeration of every valid division for small cases.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use flotilla_fleet::{
    Bounds, ClusterTerm, ClusterView, DivisionError, Dynamic, ReplicaMode, ReplicaPolicy,
    WeightTerm, divide,
};
use proptest::prelude::*;

/// An exact rational `num / den`, `den > 0`, kept reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rational {
    num: i128,
    den: i128,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 { a.abs() } else { gcd(b, a % b) }
}

impl Rational {
    fn new(num: i128, den: i128) -> Self {
        assert!(den != 0);
        let sign = if den < 0 { -1 } else { 1 };
        let g = gcd(num, den).max(1);
        Rational {
            num: sign * num / g,
            den: sign * den / g,
        }
    }
    fn int(value: i128) -> Self {
        Rational::new(value, 1)
    }
    fn add(self, other: Self) -> Self {
        Rational::new(
            self.num * other.den + other.num * self.den,
            self.den * other.den,
        )
    }
    fn sub(self, other: Self) -> Self {
        self.add(Rational::new(-other.num, other.den))
    }
    fn mul(self, other: Self) -> Self {
        Rational::new(self.num * other.num, self.den * other.den)
    }
    fn div(self, other: Self) -> Self {
        Rational::new(self.num * other.den, self.den * other.num)
    }
    fn floor(self) -> i128 {
        self.num.div_euclid(self.den)
    }
    fn ceil(self) -> i128 {
        -(-self.num).div_euclid(self.den)
    }
    fn fraction(self) -> Rational {
        self.sub(Rational::int(self.floor()))
    }
}

impl PartialOrd for Rational {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rational {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.num * other.den).cmp(&(other.num * self.den))
    }
}

/// One generated call of `divide`.
#[derive(Debug, Clone)]
struct Case {
    total: i64,
    policy: ReplicaPolicy,
    clusters: Vec<ClusterView>,
    previous: BTreeMap<String, i64>,
}

const NAMES: [&str; 12] = [
    "eu-2", "us-1", "ap-1", "eu-1", "b", "a", "zz", "us-10", "us-2", "m", "c", "x",
];

/// How the generated policy gives weights.
#[derive(Debug, Clone, Copy)]
enum Weighting {
    Equal,
    Terms,
    Capacity,
}

fn case(max_clusters: usize, max_total: i64) -> impl Strategy<Value = Case> {
    let cluster = (
        0u32..=6,
        prop::bool::weighted(0.85),
        prop::option::of(-2i64..=20),
    );
    (
        prop::collection::vec(cluster, 0..=max_clusters),
        prop_oneof![
            Just(Weighting::Equal),
            Just(Weighting::Terms),
            Just(Weighting::Capacity)
        ],
        prop::option::of((prop::option::of(0i64..=3), prop::option::of(0i64..=14))),
        0..=max_total,
        prop::collection::vec(prop::option::of(0i64..=max_total), max_clusters),
    )
        .prop_map(|(specs, weighting, bounds, total, previous)| {
            let clusters: Vec<ClusterView> = specs
                .iter()
                .enumerate()
                .map(|(i, &(_, ready, available))| ClusterView {
                    name: NAMES[i].into(),
                    ready,
                    available_replicas: available,
                    ..ClusterView::default()
                })
                .collect();
            let weights = match weighting {
                Weighting::Terms => specs
                    .iter()
                    .enumerate()
                    .map(|(i, &(weight, _, _))| WeightTerm {
                        clusters: ClusterTerm {
                            names: vec![NAMES[i].into()],
                            label_selector: None,
                        },
                        weight,
                    })
                    .collect(),
                _ => vec![],
            };
            let policy = ReplicaPolicy {
                mode: ReplicaMode::Divided,
                weights,
                dynamic: matches!(weighting, Weighting::Capacity)
                    .then_some(Dynamic::AvailableCapacity),
                per_cluster: bounds.map(|(min, max)| Bounds { min, max }),
            };
            // Previous entries for some clusters, and one for a cluster that has left.
            let mut previous: BTreeMap<String, i64> = previous
                .iter()
                .enumerate()
                .filter_map(|(i, r)| Some((NAMES[i].to_string(), (*r)?)))
                .collect();
            previous.insert("gone".into(), 3);
            Case {
                total,
                policy,
                clusters,
                previous,
            }
        })
}

/// The weight the policy gives `cluster`, computed from the case's own description.
fn oracle_weight(policy: &ReplicaPolicy, cluster: &ClusterView) -> i128 {
    if !cluster.ready {
        0
    } else if policy.dynamic.is_some() {
        i128::from(cluster.available_replicas.unwrap_or(0).max(0))
    } else if policy.weights.is_empty() {
        1
    } else {
        policy
            .weights
            .iter()
            .find(|t| t.clusters.names.contains(&cluster.name))
            .map_or(0, |t| i128::from(t.weight))
    }
}

/// Water-filled quotas by fixing violators: while some free share breaks a bound, hold the
/// side that is further out (the upper violators if they exceed by more than the lower ones
/// fall short, and conversely) at its bound and redivide the rest.
fn oracle_quotas(total: i128, weights: &[i128], lo: i128, hi: Option<i128>) -> Vec<Rational> {
    let mut quota: Vec<Option<Rational>> = weights
        .iter()
        .map(|&w| (w == 0).then_some(Rational::int(0)))
        .collect();
    loop {
        let free: Vec<usize> = (0..weights.len()).filter(|&i| quota[i].is_none()).collect();
        if free.is_empty() {
            break;
        }
        let fixed = quota
            .iter()
            .flatten()
            .fold(Rational::int(0), |sum, q| sum.add(*q));
        let remaining = Rational::int(total).sub(fixed);
        let weight_sum: i128 = free.iter().map(|&i| weights[i]).sum();
        let share = |i: usize| remaining.mul(Rational::new(weights[i], weight_sum));
        let lower: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&i| share(i) < Rational::int(lo))
            .collect();
        let upper: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&i| hi.is_some_and(|hi| share(i) > Rational::int(hi)))
            .collect();
        if lower.is_empty() && upper.is_empty() {
            for i in free {
                quota[i] = Some(share(i));
            }
            break;
        }
        let deficit = lower.iter().fold(Rational::int(0), |sum, &i| {
            sum.add(Rational::int(lo).sub(share(i)))
        });
        let excess = upper.iter().fold(Rational::int(0), |sum, &i| {
            sum.add(share(i).sub(Rational::int(hi.unwrap_or(0))))
        });
        if excess >= deficit {
            for &i in &upper {
                quota[i] = Some(Rational::int(hi.unwrap_or(0)));
            }
        }
        if deficit >= excess {
            for &i in &lower {
                quota[i] = Some(Rational::int(lo));
            }
        }
    }
    let quota: Vec<Rational> = quota.into_iter().map(|q| q.expect("all fixed")).collect();
    check_water_filling(total, weights, lo, hi, &quota);
    quota
}

/// Checks the oracle itself: Σ q = total, and q_i = clamp(λ·w_i, lo, hi) for one λ.
fn check_water_filling(total: i128, weights: &[i128], lo: i128, hi: Option<i128>, q: &[Rational]) {
    let sum = q.iter().fold(Rational::int(0), |s, x| s.add(*x));
    assert_eq!(sum, Rational::int(total), "quotas {q:?}");
    let (mut least, mut most): (Option<Rational>, Option<Rational>) = (None, None);
    for (i, &w) in weights.iter().enumerate().filter(|(_, w)| **w > 0) {
        let (at_lo, at_hi) = (
            q[i] == Rational::int(lo),
            Some(q[i]) == hi.map(Rational::int),
        );
        assert!(q[i] >= Rational::int(lo) && hi.is_none_or(|hi| q[i] <= Rational::int(hi)));
        let ratio = q[i].div(Rational::int(w));
        if !at_lo {
            least = least.max(Some(ratio)); // λ·w_i ≥ q_i: free, or held at hi
        }
        if !at_hi {
            most = Some(most.map_or(ratio, |m| m.min(ratio))); // λ·w_i ≤ q_i: free, or held at lo
        }
    }
    if let (Some(least), Some(most)) = (least, most) {
        assert!(least <= most, "no common λ for quotas {q:?}");
    }
}

/// What `divide` must return for `case`, by brute force: every division with each r_i in
/// {⌊q_i⌋, ⌈q_i⌉} summing to total; the fewest replicas moved; then the set rounded up
/// earliest when ranked by larger fraction, then name. `None` if `divide` must fail.
fn oracle(case: &Case) -> Option<BTreeMap<String, i64>> {
    let Bounds { min, max } = case.policy.per_cluster.unwrap_or_default();
    let mut clusters: Vec<&ClusterView> = case.clusters.iter().collect();
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let weights: Vec<i128> = clusters
        .iter()
        .map(|c| oracle_weight(&case.policy, c))
        .collect();
    let weighted = weights.iter().filter(|w| **w > 0).count() as i128;
    let (total, lo) = (i128::from(case.total), i128::from(min.unwrap_or(0)));
    let hi = max.map(i128::from);
    let feasible = hi.is_none_or(|hi| lo <= hi)
        && (weighted > 0 || total == 0)
        && lo * weighted <= total
        && hi.is_none_or(|hi| hi * weighted >= total);
    if !feasible {
        return None;
    }
    let quotas = oracle_quotas(total, &weights, lo, hi);
    let previous = |name: &str| i128::from(case.previous.get(name).copied().unwrap_or(0));
    // Rank of each fractional cluster: larger fraction first, then name (already sorted).
    let mut fractional: Vec<usize> = (0..clusters.len())
        .filter(|&i| quotas[i].fraction() != Rational::int(0))
        .collect();
    fractional.sort_by(|&a, &b| {
        quotas[b]
            .fraction()
            .cmp(&quotas[a].fraction())
            .then(a.cmp(&b))
    });

    let floors: i128 = quotas.iter().map(|q| q.floor()).sum();
    let mut best: Option<(i128, Vec<usize>, Vec<i128>)> = None;
    for mask in 0u32..(1 << fractional.len()) {
        let up: Vec<usize> = (0..fractional.len())
            .filter(|k| mask & (1 << k) != 0)
            .collect();
        if floors + up.len() as i128 != total {
            continue;
        }
        let replicas: Vec<i128> = (0..clusters.len())
            .map(|i| {
                let rank = fractional.iter().position(|&j| j == i);
                if rank.is_some_and(|r| up.contains(&r)) {
                    quotas[i].ceil()
                } else {
                    quotas[i].floor()
                }
            })
            .collect();
        let moved: i128 = clusters
            .iter()
            .zip(&replicas)
            .map(|(c, r)| (r - previous(&c.name)).abs())
            .sum();
        let better = best
            .as_ref()
            .is_none_or(|(best_moved, best_up, _)| (moved, &up) < (*best_moved, best_up));
        if better {
            best = Some((moved, up, replicas));
        }
    }
    let (_, _, replicas) = best.expect("a valid division exists");
    Some(
        clusters
            .iter()
            .zip(replicas)
            .map(|(c, r)| (c.name.clone(), i64::try_from(r).unwrap()))
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The result is exactly the brute-force optimum; an error only when none exists.
    #[test]
    fn matches_the_brute_force_optimum(case in case(5, 30)) {
        let result = divide(case.total, &case.policy, &case.clusters, &case.previous);
        match (result, oracle(&case)) {
            (Ok(result), Some(expected)) => prop_assert_eq!(result, expected),
            (Err(error), None) => prop_assert!(!error.to_string().is_empty()),
            (result, expected) => prop_assert!(false, "divide {:?}, oracle {:?}", result, expected),
        }
    }

    /// Sum, bounds, floor/ceil of the quota, zero for unweighted clusters, one entry each.
    #[test]
    fn divisions_are_exact_and_within_bounds(case in case(12, 200)) {
        let Ok(result) = divide(case.total, &case.policy, &case.clusters, &case.previous) else {
            return Ok(());
        };
        prop_assert_eq!(result.values().sum::<i64>(), case.total);
        prop_assert_eq!(result.len(), case.clusters.len());
        let Bounds { min, max } = case.policy.per_cluster.unwrap_or_default();
        let mut clusters: Vec<&ClusterView> = case.clusters.iter().collect();
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        let weights: Vec<i128> = clusters.iter().map(|c| oracle_weight(&case.policy, c)).collect();
        let quotas = oracle_quotas(
            i128::from(case.total),
            &weights,
            i128::from(min.unwrap_or(0)),
            max.map(i128::from),
        );
        for ((cluster, weight), quota) in clusters.iter().zip(&weights).zip(&quotas) {
            let r = i128::from(result[&cluster.name]);
            prop_assert!(r == quota.floor() || r == quota.ceil(), "{} {} {:?}", cluster.name, r, quota);
            if *weight == 0 {
                prop_assert_eq!(r, 0);
            } else {
                prop_assert!(r >= i128::from(min.unwrap_or(0)));
                prop_assert!(max.is_none_or(|max| r <= i128::from(max)));
            }
        }
    }

    /// Shuffling the clusters changes nothing, and the result fed back is kept.
    #[test]
    fn order_independent_and_idempotent(
        (case, order) in case(12, 200).prop_flat_map(|case| {
            let n = case.clusters.len();
            (Just(case), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        })
    ) {
        let result = divide(case.total, &case.policy, &case.clusters, &case.previous);
        let shuffled: Vec<ClusterView> = order.iter().map(|&i| case.clusters[i].clone()).collect();
        prop_assert_eq!(&divide(case.total, &case.policy, &shuffled, &case.previous), &result);
        if let Ok(result) = result {
            prop_assert_eq!(divide(case.total, &case.policy, &shuffled, &result), Ok(result));
        }
    }

    /// With no previous division and no bounds this is Hamilton's method: floors, then one
    /// more to the largest remainders (ties to the first name).
    #[test]
    fn empty_previous_is_largest_remainder(
        weights in prop::collection::vec(0u32..=20, 1..=12),
        total in 0i64..=1000,
    ) {
        prop_assume!(weights.iter().any(|w| *w > 0));
        let clusters: Vec<ClusterView> = (0..weights.len())
            .map(|i| ClusterView { name: format!("c{i:02}"), ready: true, ..ClusterView::default() })
            .collect();
        let policy = ReplicaPolicy {
            mode: ReplicaMode::Divided,
            weights: clusters.iter().zip(&weights).map(|(c, &weight)| WeightTerm {
                clusters: ClusterTerm { names: vec![c.name.clone()], label_selector: None },
                weight,
            }).collect(),
            ..ReplicaPolicy::default()
        };
        let result = divide(total, &policy, &clusters, &BTreeMap::new()).unwrap();
        let sum: i128 = weights.iter().map(|w| i128::from(*w)).sum();
        let quota = |i: usize| Rational::new(i128::from(total) * i128::from(weights[i]), sum);
        let mut expected: Vec<i128> = (0..weights.len()).map(|i| quota(i).floor()).collect();
        let mut order: Vec<usize> = (0..weights.len()).collect();
        order.sort_by(|&a, &b| quota(b).fraction().cmp(&quota(a).fraction()).then(a.cmp(&b)));
        let left = i128::from(total) - expected.iter().sum::<i128>();
        for &i in order.iter().take(usize::try_from(left).unwrap()) {
            expected[i] += 1;
        }
        for (i, cluster) in clusters.iter().enumerate() {
            prop_assert_eq!(i128::from(result[&cluster.name]), expected[i]);
        }
    }

    /// Huge totals and weights stay exact: the sum holds and each share is within one of
    /// total·w_i/W.
    #[test]
    fn large_numbers_are_exact(
        weights in prop::collection::vec(1u32..=u32::MAX, 1..=8),
        total in 0i64..=i64::MAX,
    ) {
        let clusters: Vec<ClusterView> = (0..weights.len())
            .map(|i| ClusterView { name: format!("c{i}"), ready: true, ..ClusterView::default() })
            .collect();
        let policy = ReplicaPolicy {
            mode: ReplicaMode::Divided,
            weights: clusters.iter().zip(&weights).map(|(c, &weight)| WeightTerm {
                clusters: ClusterTerm { names: vec![c.name.clone()], label_selector: None },
                weight,
            }).collect(),
            ..ReplicaPolicy::default()
        };
        let result = divide(total, &policy, &clusters, &BTreeMap::new()).unwrap();
        prop_assert_eq!(result.values().map(|r| i128::from(*r)).sum::<i128>(), i128::from(total));
        let sum: i128 = weights.iter().map(|w| i128::from(*w)).sum();
        for (cluster, w) in clusters.iter().zip(&weights) {
            let r = i128::from(result[&cluster.name]);
            prop_assert!((r * sum - i128::from(total) * i128::from(*w)).abs() < sum);
        }
    }
}

#[test]
fn the_oracle_itself_water_fills() {
    // 1:1:8 of 10 with min 2 → 2, 2, 6; 1:4:20 of 25 in [3, 12] → 3, 10, 12.
    let q = oracle_quotas(10, &[1, 1, 8], 2, None);
    assert_eq!(q, [2, 2, 6].map(Rational::int));
    let q = oracle_quotas(25, &[1, 4, 20], 3, Some(12));
    assert_eq!(q, [3, 10, 12].map(Rational::int));
    let q = oracle_quotas(10, &[1, 2, 0], 0, None);
    assert_eq!(
        q,
        [Rational::new(10, 3), Rational::new(20, 3), Rational::int(0)]
    );
}

#[test]
fn errors_match_the_oracle_feasibility() {
    let case = Case {
        total: 7,
        policy: ReplicaPolicy {
            mode: ReplicaMode::Divided,
            per_cluster: Some(Bounds {
                min: None,
                max: Some(3),
            }),
            ..ReplicaPolicy::default()
        },
        clusters: vec![
            ClusterView {
                name: "a".into(),
                ready: true,
                ..ClusterView::default()
            },
            ClusterView {
                name: "b".into(),
                ready: true,
                ..ClusterView::default()
            },
        ],
        previous: BTreeMap::new(),
    };
    assert_eq!(oracle(&case), None);
    assert!(matches!(
        divide(case.total, &case.policy, &case.clusters, &case.previous),
        Err(DivisionError::MaximumsBelowTotal { .. })
    ));
}
