//! Status back, computed without a server: Work statuses → the placement's status (per
//! cluster and fleet-wide) → the aggregated status of each template.
//!
//! ```text
//!  Work.status (per cluster) ─┬─► PlacementStatus { Scheduled, Applied, Available,
//!  Plan (selection, replicas) ┤                     TemplatesFound, clusters[], excluded[]
//!  clusters not Ready ────────┤                     (each at most MAX_LISTED_CLUSTERS, the
//!  selectors matching nothing ┘                     troubled first) }
//!  ManifestStatus.statusFeedback of one template, per cluster (+ the replicas asked of
//!  it there, + whether the cluster is Ready)
//!                             └─► aggregate(kind) ─► the template's status (counters in
//!                                                    the template's units, conditions merged)
//! ```
//!
//! What a cluster that is not `Ready` last reported is not its current state: it is shown
//! as last reported (per cluster, `Unknown`, with when the cluster stopped being Ready) and
//! counts for nothing, neither in the placement's conditions nor in the template's status.

use std::collections::{BTreeMap, HashMap};

use flotilla_api::{
    Drift, DriftBound, ExcludedCluster, MAX_LISTED_CLUSTERS, ManifestStatus, PlacedCluster,
    PlacementStatus, WorkStatus, condition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Map, Value, json};

use crate::plan::{ManifestId, Plan};

/// One Work as the status computation sees it.
#[derive(Debug, Clone, Copy)]
pub struct WorkView<'a> {
    /// The Work's `metadata.generation`.
    pub generation: Option<i64>,
    /// Its status, if delivery has written one.
    pub status: Option<&'a WorkStatus>,
}

impl WorkView<'_> {
    /// The Work's condition `kind`, if its status is about the current generation.
    fn condition(&self, kind: &str) -> Option<&Condition> {
        let status = self.status?;
        if status.observed_generation != self.generation {
            return None;
        }
        status.conditions.iter().find(|c| c.type_ == kind)
    }
}

/// A condition with `now` as its transition time, unless `previous` has the same status
/// (then its time is kept, so an unchanged status compares equal).
pub fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    condition::keep_time(kind, status, reason, message, generation, previous, now)
}

/// What the placement's status is made from besides its plan.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The placement's Works, by cluster.
    pub works: &'a BTreeMap<String, WorkView<'a>>,
    /// The clusters that are not `Ready`, each with when it stopped being Ready (its
    /// `Ready` condition's last transition): what their Works say was last reported
    /// before then.
    pub not_ready: &'a BTreeMap<String, Time>,
    /// The placement's resource selectors that match no template, each described (such
    /// as `apps/v1 Deployment webb`).
    pub unmatched: &'a [String],
    /// A Placement's resource selectors that can select nothing because they name a
    /// cluster-scoped kind, each described: a Placement delivers only what lives in its
    /// namespace.
    pub outside: &'a [String],
}

/// The most names a condition's message lists.
const NAMED_IN_MESSAGES: usize = 5;

/// `names` joined, at most [`NAMED_IN_MESSAGES`] of them, then how many more.
fn named<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    let mut text = names
        .iter()
        .take(NAMED_IN_MESSAGES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMED_IN_MESSAGES {
        text.push_str(&format!(" and {} more", names.len() - NAMED_IN_MESSAGES));
    }
    text
}

/// The placement's status from its plan and what was observed.
pub fn placement_status(
    plan: &Plan,
    observed: &Observed<'_>,
    generation: Option<i64>,
    previous: Option<&PlacementStatus>,
    now: &Time,
) -> PlacementStatus {
    let works = observed.works;
    let previous_conditions = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let listed_before: HashMap<&str, &[Condition]> = previous
        .map(|p| {
            p.clusters
                .iter()
                .map(|c| (c.name.as_str(), c.conditions.as_slice()))
                .collect()
        })
        .unwrap_or_default();
    let mut clusters = Vec::new();
    let (mut applied, mut available) = (0, 0);
    let mut not_ready: Vec<&str> = Vec::new();
    for name in &plan.selection.chosen {
        let work = works.get(name);
        let old = listed_before
            .get(name.as_str())
            .copied()
            .unwrap_or_default();
        let stale_since = observed.not_ready.get(name);
        if stale_since.is_some() {
            not_ready.push(name);
        }
        let mut conditions = Vec::new();
        if let Some(why) = plan.failed.get(name) {
            conditions.push(condition(
                "Rendered",
                false,
                "OverrideFailed",
                why.clone(),
                generation,
                old,
                now,
            ));
        }
        for kind in [condition::APPLIED, condition::AVAILABLE] {
            let found = work.and_then(|w| w.condition(kind));
            if let Some(since) = stale_since {
                // Last reported before the cluster stopped being Ready: shown as such,
                // not counted.
                let last = match found {
                    Some(c) => format!("{kind}={} ({}: {})", c.status, c.reason, c.message),
                    None => "nothing".to_owned(),
                };
                let message = format!("cluster not Ready since {}; last reported {last}", since.0);
                conditions.push(condition::keep_time(
                    kind,
                    "Unknown",
                    "ClusterNotReady",
                    message,
                    generation,
                    old,
                    now,
                ));
                continue;
            }
            let (ok, reason, message) = match found {
                Some(c) => (c.status == "True", c.reason.clone(), c.message.clone()),
                None => (
                    false,
                    "Pending".to_owned(),
                    "waiting for the member".to_owned(),
                ),
            };
            if ok && kind == condition::APPLIED {
                applied += 1;
            }
            if ok && kind == condition::AVAILABLE {
                available += 1;
            }
            conditions.push(condition(kind, ok, &reason, message, generation, old, now));
        }
        let (drift, unlisted_drift) = work
            .and_then(|w| w.status)
            .map(|s| drift_of(&s.manifests))
            .unwrap_or_default();
        clusters.push(PlacedCluster {
            name: name.clone(),
            replicas: plan.replicas.get(name).map(|&n| n as i32),
            conditions,
            drift,
            unlisted_drift,
            revision: None,
            not_ready_since: stale_since.cloned(),
        });
    }
    let chosen = plan.selection.chosen.len();
    let scheduled = match &plan.scheduled {
        Ok(()) => condition(
            condition::SCHEDULED,
            true,
            "Scheduled",
            format!("{chosen} clusters chosen"),
            generation,
            previous_conditions,
            now,
        ),
        Err(why) => condition(
            condition::SCHEDULED,
            false,
            why.reason,
            why.message.clone(),
            generation,
            previous_conditions,
            now,
        ),
    };
    let count = |kind: &str, done: usize, templates_found: bool| {
        let ok = chosen > 0 && done == chosen && plan.failed.is_empty() && templates_found;
        let mut message = format!("{done}/{chosen} clusters");
        let reason = if ok {
            "AllClusters"
        } else if !templates_found {
            message.push_str(&format!(
                "; no template for {}",
                named(
                    observed
                        .unmatched
                        .iter()
                        .chain(observed.outside)
                        .map(String::as_str)
                )
            ));
            "TemplatesNotFound"
        } else if !not_ready.is_empty() {
            message.push_str(&format!(
                "; not Ready: {}",
                named(not_ready.iter().copied())
            ));
            "ClustersNotReady"
        } else {
            "SomeClusters"
        };
        condition(
            kind,
            ok,
            reason,
            message,
            generation,
            previous_conditions,
            now,
        )
    };
    let found = observed.unmatched.is_empty() && observed.outside.is_empty();
    let (reason, message) = if found {
        (
            "Found",
            "every resource selector matches a template".to_owned(),
        )
    } else if observed.outside.is_empty() {
        (
            "NotFound",
            format!(
                "no template matches {}",
                named(observed.unmatched.iter().map(String::as_str))
            ),
        )
    } else {
        let mut message = format!(
            "a Placement places only resources of its own namespace, so these select \
             nothing (cluster-scoped kinds are a ClusterPlacement's): {}",
            named(observed.outside.iter().map(String::as_str))
        );
        if !observed.unmatched.is_empty() {
            message.push_str(&format!(
                "; no template matches {}",
                named(observed.unmatched.iter().map(String::as_str))
            ));
        }
        ("OutsideNamespace", message)
    };
    let templates_found = condition(
        condition::TEMPLATES_FOUND,
        found,
        reason,
        message,
        generation,
        previous_conditions,
        now,
    );
    let unlisted_clusters = keep_listed(&mut clusters, troubled);
    let excluded: Vec<ExcludedCluster> = plan
        .selection
        .excluded
        .iter()
        .take(MAX_LISTED_CLUSTERS)
        .map(|(name, reason)| ExcludedCluster {
            name: name.clone(),
            reason: reason.to_string(),
        })
        .collect();
    let unlisted_excluded = unlisted(plan.selection.excluded.len(), excluded.len());
    PlacementStatus {
        observed_generation: generation,
        conditions: vec![
            scheduled,
            count(condition::APPLIED, applied, true),
            count(condition::AVAILABLE, available, found),
            templates_found,
        ],
        clusters,
        unlisted_clusters,
        excluded,
        unlisted_excluded,
        rollout: None,
    }
}

/// Whether a chosen cluster needs a look: a condition not true, or drift.
fn troubled(cluster: &PlacedCluster) -> bool {
    !cluster.drift.is_empty() || cluster.conditions.iter().any(|c| c.status != "True")
}

/// Keeps at most [`MAX_LISTED_CLUSTERS`] of `clusters`, those `first` picks ahead of the
/// rest, each group in its order; returns how many were left out (`None` for none).
fn keep_listed(
    clusters: &mut Vec<PlacedCluster>,
    first: impl Fn(&PlacedCluster) -> bool,
) -> Option<i32> {
    let all = clusters.len();
    if all <= MAX_LISTED_CLUSTERS {
        return None;
    }
    // A stable sort: the order within each group is the chosen order, so an unchanged
    // fleet lists the same clusters every time.
    clusters.sort_by_key(|c| !first(c));
    clusters.truncate(MAX_LISTED_CLUSTERS);
    unlisted(all, clusters.len())
}

fn unlisted(all: usize, listed: usize) -> Option<i32> {
    (all > listed).then(|| i32::try_from(all - listed).unwrap_or(i32::MAX))
}

/// Every manifest's drift, each path prefixed with the manifest's `Kind/name`, within
/// [`DriftBound::PLACED_CLUSTER`]; and how many drifted fields that leaves out, those the
/// Work's statuses already left out included.
fn drift_of(manifests: &[ManifestStatus]) -> (Vec<Drift>, Option<i32>) {
    let all = manifests
        .iter()
        .flat_map(|m| {
            m.drift.iter().map(move |d| Drift {
                path: format!("{}/{}{}", m.kind, m.name, d.path),
                hub: d.hub.clone(),
                member: d.member.clone(),
            })
        })
        .collect();
    let (drift, cut) = DriftBound::PLACED_CLUSTER.apply(all);
    let unlisted = manifests
        .iter()
        .filter_map(|m| m.unlisted_drift)
        .chain(cut)
        .fold(0i32, i32::saturating_add);
    (drift, (unlisted > 0).then_some(unlisted))
}

/// The status feedback of one template in a Work's status, if the member reported one.
pub fn feedback(id: &ManifestId, status: &WorkStatus) -> Option<Value> {
    status
        .manifests
        .iter()
        .find(|m| {
            m.api_version == id.0
                && m.kind == id.1
                && m.namespace.as_deref().unwrap_or_default() == id.2
                && m.name == id.3
        })
        .and_then(|m| m.status_feedback.as_ref().map(|f| f.value()))
}

/// What one chosen cluster says of a template.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The cluster's name.
    pub cluster: String,
    /// The template's status there as last reported (see [`feedback`]); `None`: none yet.
    pub feedback: Option<Value>,
    /// The replicas the hub asks of the cluster (kinds with replicas): its Work's.
    pub desired: Option<i64>,
    /// Whether the cluster is `Ready`: the report of one that is not is not current and
    /// counts for nothing.
    pub current: bool,
}

/// The counters of kinds with `spec.replicas`, which the template's status gives in the
/// template's own units (see [`aggregate`]).
fn scaled_counters(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (api_version, kind) {
        ("apps/v1", "Deployment") => &[
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ],
        ("apps/v1", "StatefulSet") => &[
            "replicas",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
            "availableReplicas",
        ],
        ("apps/v1", "ReplicaSet") => &[
            "replicas",
            "fullyLabeledReplicas",
            "readyReplicas",
            "availableReplicas",
        ],
        _ => return None,
    })
}

/// The counters of kinds without `spec.replicas`, summed over the clusters.
fn summed_counters(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (api_version, kind) {
        ("apps/v1", "DaemonSet") => &[
            "currentNumberScheduled",
            "numberMisscheduled",
            "desiredNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberUnavailable",
        ],
        ("batch/v1", "Job") => &["active", "succeeded", "failed", "ready"],
        _ => return None,
    })
}

/// The fleet-wide status of a template of `api_version`/`kind` at `generation` whose
/// spec asks for `spec_replicas` (kinds with replicas), from what each chosen cluster
/// reports (`reports`), when `complete` (every chosen cluster reported its current Work).
/// `None` for kinds without counters.
///
/// Only Ready clusters count, each for at most what it is asked for: a cluster that is
/// not Ready adds nothing, and one whose copy drifted (scaled to 9 where the hub asks
/// for 2) adds at most 2.
///
/// Kinds with replicas (Deployment, StatefulSet, ReplicaSet) speak in the template's
/// units, since every reader compares their counters with `spec.replicas` (kubectl's
/// READY column, `kubectl rollout status`): each counter is the share of the replicas
/// asked of the fleet that the clusters report, times `spec.replicas`, rounded down:
/// `⌊Σ min(counter_c, desired_c) × spec.replicas / Σ desired_c⌋`. Divided, the desired
/// replicas add up to `spec.replicas` and the counters are plain sums; Duplicated over 3
/// clusters of 12, 36 ready read 12/12 and one cluster down 8/12. No counter exceeds
/// `spec.replicas`. A Deployment's `unavailableReplicas` is what `availableReplicas`
/// lacks of `spec.replicas`.
///
/// Other kinds (DaemonSet, Job) have their counters summed over the Ready clusters.
/// Each condition type is `True` only when every chosen cluster is Ready and says `True`.
pub fn aggregate(
    api_version: &str,
    kind: &str,
    generation: Option<i64>,
    spec_replicas: Option<i64>,
    reports: &[Report],
    complete: bool,
    previous: &Value,
) -> Option<Value> {
    let scaled = scaled_counters(api_version, kind);
    let summed = summed_counters(api_version, kind);
    if scaled.is_none() && summed.is_none() {
        return None;
    }
    let complete = complete && reports.iter().all(|r| r.current && r.feedback.is_some());
    let mut status = Map::new();
    if complete {
        if let Some(generation) = generation {
            status.insert("observedGeneration".into(), json!(generation));
        }
    } else if let Some(observed) = previous.get("observedGeneration") {
        status.insert("observedGeneration".into(), observed.clone());
    }
    let current: Vec<(&Report, &Value)> = reports
        .iter()
        .filter(|r| r.current)
        .filter_map(|r| Some((r, r.feedback.as_ref()?)))
        .collect();
    // A counter any cluster ever reported is given, 0 when none counts.
    let reported = |counter: &str| {
        reports
            .iter()
            .filter_map(|r| r.feedback.as_ref())
            .any(|f| f.get(counter).is_some())
    };
    if let Some(counters) = scaled {
        let spec = i128::from(spec_replicas.unwrap_or(1).max(0));
        let asked: i128 = reports
            .iter()
            .map(|r| i128::from(r.desired.unwrap_or_default().max(0)))
            .sum();
        for counter in counters {
            let counted: i128 = current
                .iter()
                .map(|(r, f)| {
                    let n = f[*counter].as_i64().unwrap_or_default().max(0);
                    i128::from(r.desired.map_or(n, |d| n.min(d.max(0))))
                })
                .sum();
            let value = if asked == 0 {
                0
            } else {
                i64::try_from(counted * spec / asked).unwrap_or(i64::MAX)
            };
            if value != 0 || reported(counter) {
                status.insert((*counter).into(), json!(value));
            }
        }
        if kind == "Deployment" {
            let available = status
                .get("availableReplicas")
                .and_then(Value::as_i64)
                .unwrap_or_default();
            let lacking = i64::try_from(spec).unwrap_or(i64::MAX) - available;
            if lacking > 0 {
                status.insert("unavailableReplicas".into(), json!(lacking));
            }
        }
    }
    for counter in summed.into_iter().flatten() {
        let sum: i64 = current
            .iter()
            .filter_map(|(_, f)| f[*counter].as_i64())
            .sum();
        if sum != 0 || reported(counter) {
            status.insert((*counter).into(), json!(sum));
        }
    }
    // Conditions merged by type: True only where every chosen cluster is Ready and says
    // True; the message of the first that does not.
    let not_ready: Vec<&str> = reports
        .iter()
        .filter(|r| !r.current)
        .map(|r| r.cluster.as_str())
        .collect();
    // (The types of the clusters not Ready are kept: they are False for want of them.)
    let mut merged: BTreeMap<String, (usize, Option<Value>)> = BTreeMap::new();
    for r in reports {
        let Some(f) = &r.feedback else { continue };
        for c in f["conditions"].as_array().into_iter().flatten() {
            let Some(kind) = c["type"].as_str() else {
                continue;
            };
            let entry = merged.entry(kind.to_owned()).or_insert((0, None));
            if !r.current {
                continue;
            }
            if c["status"] == "True" {
                entry.0 += 1;
            } else if entry.1.is_none() {
                entry.1 = Some(c.clone());
            }
        }
    }
    if !merged.is_empty() {
        let previous_conditions = previous["conditions"].as_array();
        let all = reports.len();
        let conditions: Vec<Value> = merged
            .into_iter()
            .map(|(kind, (true_count, first_false))| {
                let ok = true_count == all;
                let status = if ok { "True" } else { "False" };
                let counted = format!("{true_count}/{all} clusters");
                let (reason, message) = match &first_false {
                    Some(c) if !ok => (
                        c["reason"].as_str().unwrap_or("SomeClusters").to_owned(),
                        format!("{counted}: {}", c["message"].as_str().unwrap_or_default()),
                    ),
                    _ if !not_ready.is_empty() => (
                        "ClustersNotReady".to_owned(),
                        format!("{counted}; not Ready: {}", named(not_ready.iter().copied())),
                    ),
                    _ if !ok => ("SomeClusters".to_owned(), counted),
                    _ => ("AllClusters".to_owned(), counted),
                };
                let time = previous_conditions
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == kind.as_str() && c["status"] == status)
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(jiff_now()));
                json!({"type": kind, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": time.clone(), "lastUpdateTime": time})
            })
            .collect();
        status.insert("conditions".into(), Value::Array(conditions));
    }
    Some(Value::Object(status))
}

fn jiff_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
