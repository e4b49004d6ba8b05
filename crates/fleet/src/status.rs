//! Status back, computed without a server: Work statuses → the placement's status (per
//! cluster and fleet-wide) → the aggregated status of each template.
//!
//! ```text
//!  Work.status (per cluster) ─┬─► PlacementStatus { Scheduled, Applied, Available,
//!  Plan (selection, replicas) ┘                     clusters[], excluded[] (each at most
//!                                                   MAX_LISTED_CLUSTERS, the troubled first) }
//!  ManifestStatus.statusFeedback of one template, per cluster
//!                             └─► aggregate(kind) ─► the template's status (counters
//!                                                    summed, conditions merged)
//! ```

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

/// The placement's status from its plan and its Works (by cluster).
pub fn placement_status(
    plan: &Plan,
    works: &BTreeMap<String, WorkView<'_>>,
    generation: Option<i64>,
    previous: Option<&PlacementStatus>,
    now: &Time,
) -> PlacementStatus {
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
    for name in &plan.selection.chosen {
        let work = works.get(name);
        let old = listed_before
            .get(name.as_str())
            .copied()
            .unwrap_or_default();
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
            if chosen == 0 {
                "NoClusters"
            } else {
                "CannotDivide"
            },
            why.clone(),
            generation,
            previous_conditions,
            now,
        ),
    };
    let count = |kind: &str, done: usize| {
        let ok = chosen > 0 && done == chosen && plan.failed.is_empty();
        condition(
            kind,
            ok,
            if ok { "AllClusters" } else { "SomeClusters" },
            format!("{done}/{chosen} clusters"),
            generation,
            previous_conditions,
            now,
        )
    };
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
            count(condition::APPLIED, applied),
            count(condition::AVAILABLE, available),
        ],
        clusters,
        unlisted_clusters,
        excluded,
        unlisted_excluded,
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

/// The status feedback of one template on each cluster, from the Works' statuses.
pub fn feedback<'a>(
    id: &ManifestId,
    works: impl IntoIterator<Item = &'a WorkStatus>,
) -> Vec<Value> {
    works
        .into_iter()
        .filter_map(|status| {
            status.manifests.iter().find(|m| {
                m.api_version == id.0
                    && m.kind == id.1
                    && m.namespace.as_deref().unwrap_or_default() == id.2
                    && m.name == id.3
            })
        })
        .filter_map(|m| m.status_feedback.as_ref().map(|f| f.value()))
        .collect()
}

/// The counters summed for each kind with replicas.
fn counters(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (api_version, kind) {
        ("apps/v1", "Deployment") => &[
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
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

/// The fleet-wide status of a template of `api_version`/`kind` at `generation`, from its
/// status on each cluster (`feedback`) when `complete` (every chosen cluster reported
/// the current Work): the counters summed, each condition type `True` only when it is
/// `True` everywhere. `None` for kinds without counters.
pub fn aggregate(
    api_version: &str,
    kind: &str,
    generation: Option<i64>,
    feedback: &[Value],
    complete: bool,
    previous: &Value,
) -> Option<Value> {
    let counters = counters(api_version, kind)?;
    let mut status = Map::new();
    if complete {
        if let Some(generation) = generation {
            status.insert("observedGeneration".into(), json!(generation));
        }
    } else if let Some(observed) = previous.get("observedGeneration") {
        status.insert("observedGeneration".into(), observed.clone());
    }
    for counter in counters {
        let sum: i64 = feedback.iter().filter_map(|f| f[*counter].as_i64()).sum();
        if sum != 0 || feedback.iter().any(|f| f.get(*counter).is_some()) {
            status.insert((*counter).into(), json!(sum));
        }
    }
    // Conditions merged by type: True only where every cluster says True; the message of
    // the first that does not.
    let mut merged: BTreeMap<String, (usize, usize, Option<Value>)> = BTreeMap::new();
    for f in feedback {
        for c in f["conditions"].as_array().into_iter().flatten() {
            let Some(kind) = c["type"].as_str() else {
                continue;
            };
            let entry = merged.entry(kind.to_owned()).or_insert((0, 0, None));
            entry.0 += 1;
            if c["status"] == "True" {
                entry.1 += 1;
            } else if entry.2.is_none() {
                entry.2 = Some(c.clone());
            }
        }
    }
    if !merged.is_empty() {
        let previous_conditions = previous["conditions"].as_array();
        let conditions: Vec<Value> = merged
            .into_iter()
            .map(|(kind, (seen, true_count, first_false))| {
                let ok = seen == feedback.len() && true_count == seen;
                let status = if ok { "True" } else { "False" };
                let (reason, message) = match &first_false {
                    Some(c) if !ok => (
                        c["reason"].as_str().unwrap_or("SomeClusters").to_owned(),
                        format!(
                            "{true_count}/{} clusters: {}",
                            feedback.len(),
                            c["message"].as_str().unwrap_or_default()
                        ),
                    ),
                    _ => (
                        "AllClusters".to_owned(),
                        format!("{true_count}/{} clusters", feedback.len()),
                    ),
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
