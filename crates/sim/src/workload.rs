//! One workload as the simulator sees it, and the status it should report.
//!
//! ```text
//!  Deployment / ReplicaSet / StatefulSet / DaemonSet / Job object
//!     ──► Workload::from_object: generation, pods wanted, each pod's requests,
//!         the first image matching --fail-images, the status it has now
//!     ──► target(fit, nodes): the status it should have when `fit` of its pods have room
//!     ──► with_times(target, current, now): condition and Job times kept where unchanged
//! ```

use regex::Regex;
use serde_json::{Map, Value, json};

use crate::resources::Resources;

/// Why a workload's pods are not ready: an image matches the failing-image pattern.
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";

/// Why a workload's pods are not ready: the cluster has no room left for some of them.
pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";

/// The kinds of workload the simulator brings to readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet: one pod per node.
    DaemonSet,
    /// batch/v1 Job: completes once its pods have run.
    Job,
}

impl Kind {
    /// Every kind simulated.
    pub const ALL: [Kind; 5] = [
        Kind::Deployment,
        Kind::ReplicaSet,
        Kind::StatefulSet,
        Kind::DaemonSet,
        Kind::Job,
    ];

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            Kind::Job => "batch",
            _ => "apps",
        }
    }

    /// The resource (plural), as in URLs and store keys.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Deployment => "deployments",
            Kind::ReplicaSet => "replicasets",
            Kind::StatefulSet => "statefulsets",
            Kind::DaemonSet => "daemonsets",
            Kind::Job => "jobs",
        }
    }

    /// The kind's name, e.g. `Deployment`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
            Kind::Job => "Job",
        }
    }

    /// The `apiVersion` of its objects.
    pub fn api_version(self) -> String {
        format!("{}/v1", self.group())
    }

    /// The time fields of its status conditions.
    fn condition_times(self) -> &'static [&'static str] {
        match self {
            Kind::Deployment => &["lastUpdateTime", "lastTransitionTime"],
            Kind::Job => &["lastProbeTime", "lastTransitionTime"],
            _ => &["lastTransitionTime"],
        }
    }
}

/// A workload: what its spec asks of the cluster, and the status it reports now.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Its kind.
    pub kind: Kind,
    /// `metadata.creationTimestamp`: workloads get room in this order.
    pub created: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The pods it wants (Deployment, ReplicaSet, StatefulSet: `spec.replicas`; Job: as
    /// many as run at once; DaemonSet: unused, it wants one per node).
    pub replicas: u64,
    /// What each of its pods asks for.
    pub each: Resources,
    /// The first of its images that matches the failing-image pattern.
    pub failing_image: Option<String>,
    /// A Job's `spec.completions` (1 if not given).
    pub completions: u64,
    /// A Job's `spec.suspend`.
    pub suspended: bool,
    /// Its `.status` as stored.
    pub status: Value,
}

fn count(value: &Value, default: u64) -> u64 {
    value.as_u64().unwrap_or(default)
}

impl Workload {
    /// Reads a workload object; `fail_images` marks the images that never pull.
    pub fn from_object(kind: Kind, object: &Value, fail_images: Option<&Regex>) -> Workload {
        let spec = &object["spec"];
        let template = &spec["template"];
        let pod = &template["spec"];
        let images = ["initContainers", "containers"]
            .into_iter()
            .flat_map(|list| pod[list].as_array().into_iter().flatten())
            .filter_map(|c| c["image"].as_str());
        let failing_image = fail_images
            .and_then(|pattern| images.into_iter().find(|image| pattern.is_match(image)))
            .map(str::to_owned);
        let completions = count(&spec["completions"], 1);
        let replicas = match kind {
            Kind::Job => count(&spec["parallelism"], 1).min(completions),
            _ => count(&spec["replicas"], 1),
        };
        Workload {
            kind,
            created: object["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            generation: object["metadata"]["generation"].as_i64().unwrap_or(1),
            replicas,
            each: Resources::of_pod(template),
            failing_image,
            completions,
            suspended: spec["suspend"] == true,
            status: object["status"].clone(),
        }
    }

    /// Whether it is a Job its status says has completed (it needs no more room).
    pub fn complete(&self) -> bool {
        self.kind == Kind::Job && has_condition(&self.status, "Complete", "True")
    }

    /// The pods it wants on a cluster with `nodes` schedulable nodes.
    pub fn pods_wanted(&self, nodes: u64) -> u64 {
        match self.kind {
            Kind::DaemonSet => nodes,
            Kind::Job if self.suspended || self.complete() => 0,
            _ => self.replicas,
        }
    }

    /// Why not all of `wanted` pods are ready when `fit` have room, if they are not.
    fn shortfall(&self, fit: u64, wanted: u64) -> Option<(&'static str, String)> {
        if wanted == 0 {
            return None;
        }
        if let Some(image) = &self.failing_image {
            let why = format!(
                "image {image:?} cannot be pulled (it matches the simulator's failing-image pattern)"
            );
            return Some((IMAGE_PULL_BACK_OFF, why));
        }
        (fit < wanted).then(|| {
            let why = format!(
                "{fit} of {wanted} pods fit the cluster's free capacity; each asks for {}",
                describe(self.each)
            );
            (INSUFFICIENT_CAPACITY, why)
        })
    }

    /// The status it should report (without times) when `fit` of its pods have room on a
    /// cluster with `nodes` schedulable nodes.
    pub fn target(&self, fit: u64, nodes: u64) -> Value {
        let wanted = self.pods_wanted(nodes);
        let shortfall = self.shortfall(fit, wanted);
        let ready = if self.failing_image.is_some() { 0 } else { fit };
        let generation = self.generation;
        let mut status = match self.kind {
            Kind::Deployment => json!({
                "observedGeneration": generation,
                "replicas": wanted,
                "updatedReplicas": wanted,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "unavailableReplicas": wanted.saturating_sub(ready),
                "conditions": deployment_conditions(shortfall.as_ref()),
            }),
            Kind::ReplicaSet => json!({
                "observedGeneration": generation,
                "replicas": wanted,
                "fullyLabeledReplicas": wanted,
                "readyReplicas": ready,
                "availableReplicas": ready,
            }),
            Kind::StatefulSet => json!({
                "observedGeneration": generation,
                "replicas": wanted,
                "currentReplicas": wanted,
                "updatedReplicas": wanted,
                "readyReplicas": ready,
                "availableReplicas": ready,
            }),
            Kind::DaemonSet => json!({
                "observedGeneration": generation,
                "desiredNumberScheduled": wanted,
                "currentNumberScheduled": fit,
                "updatedNumberScheduled": fit,
                "numberMisscheduled": 0,
                "numberReady": ready,
                "numberAvailable": ready,
                "numberUnavailable": wanted.saturating_sub(ready),
            }),
            Kind::Job => return self.job_target(fit, ready, shortfall.is_none()),
        };
        if self.kind != Kind::Deployment
            && let Some((reason, message)) = shortfall
        {
            status["conditions"] = json!([
                {"type": "ReplicaFailure", "status": "True", "reason": reason, "message": message}
            ]);
        }
        status
    }

    fn job_target(&self, fit: u64, ready: u64, all_fit: bool) -> Value {
        if self.complete() {
            return without_times(&self.status);
        }
        if self.suspended {
            return json!({"active": 0, "ready": 0, "succeeded": 0, "conditions": [
                {"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended"}
            ]});
        }
        if !all_fit {
            return json!({"active": fit, "ready": ready, "succeeded": 0});
        }
        let done = "Reached expected number of succeeded pods";
        json!({"active": 0, "ready": 0, "succeeded": self.completions, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": done},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": done},
        ]})
    }
}

fn deployment_conditions(shortfall: Option<&(&'static str, String)>) -> Value {
    match shortfall {
        None => json!([
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                "message": "Deployment has successfully progressed."},
        ]),
        Some((reason, message)) => {
            // An image that never pulls ends the rollout; missing room may still come.
            let progressing = if *reason == IMAGE_PULL_BACK_OFF {
                json!({"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                    "message": format!("Deployment has timed out progressing: {message}")})
            } else {
                json!({"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                    "message": "Deployment is progressing: waiting for room on the cluster."})
            };
            json!([
                {"type": "Available", "status": "False", "reason": reason, "message": message},
                progressing,
            ])
        }
    }
}

/// What a pod asks for, as a person reads it.
fn describe(each: Resources) -> String {
    let memory = match each.memory_bytes {
        0 => "0".to_owned(),
        b if b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        b if b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}Ki", b >> 10),
        b => b.to_string(),
    };
    format!("cpu {}m, memory {memory}", each.cpu_millis)
}

fn has_condition(status: &Value, kind: &str, state: &str) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == state)
}

/// The time fields a status carries (top-level for Jobs; in each condition).
const STATUS_TIMES: [&str; 2] = ["startTime", "completionTime"];
const CONDITION_TIMES: [&str; 3] = ["lastUpdateTime", "lastTransitionTime", "lastProbeTime"];

/// A status without its times, to compare with a target.
pub fn without_times(status: &Value) -> Value {
    let mut status = status.clone();
    if let Some(map) = status.as_object_mut() {
        for field in STATUS_TIMES {
            map.remove(field);
        }
        for condition in map
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(condition) = condition.as_object_mut() {
                for field in CONDITION_TIMES {
                    condition.remove(field);
                }
            }
        }
    }
    status
}

/// `target` with times: a condition keeps its `lastTransitionTime` from `current` while its
/// status is unchanged, and its other times while nothing in it changed; a Job keeps its
/// `startTime` and `completionTime`. Everything new is `now` (RFC 3339).
pub fn with_times(kind: Kind, mut target: Value, current: &Value, now: &str) -> Value {
    let previous: Vec<&Map<String, Value>> = current["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect();
    for condition in target
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        let before = previous
            .iter()
            .find(|p| p.get("type") == condition.get("type"));
        let same = |fields: &[&str]| {
            before.is_some_and(|b| fields.iter().all(|f| b.get(*f) == condition.get(*f)))
        };
        let kept_transition = same(&["status"]);
        let kept_rest = same(&["status", "reason", "message"]);
        for field in kind.condition_times() {
            let keep = if *field == "lastTransitionTime" {
                kept_transition
            } else {
                kept_rest
            };
            let time = before
                .and_then(|b| b.get(*field))
                .filter(|_| keep)
                .cloned()
                .unwrap_or_else(|| json!(now));
            condition.insert((*field).to_owned(), time);
        }
    }
    if kind == Kind::Job {
        let started = count(&target["active"], 0) > 0 || count(&target["succeeded"], 0) > 0;
        if started {
            target["startTime"] = current
                .get("startTime")
                .cloned()
                .unwrap_or_else(|| json!(now));
        }
        if has_condition(&target, "Complete", "True") {
            target["completionTime"] = current
                .get("completionTime")
                .cloned()
                .unwrap_or_else(|| json!(now));
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: u64, cpu: &str, image: &str) -> Value {
        json!({"metadata": {"name": "web", "generation": 3, "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "web", "image": image, "resources": {"requests": {"cpu": cpu}}}]}}}})
    }

    fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn a_deployment_that_fits_is_available() {
        let w = Workload::from_object(Kind::Deployment, &deployment(2, "100m", "nginx"), None);
        assert_eq!(w.each.cpu_millis, 100);
        assert_eq!(w.generation, 3);
        let status = w.target(2, 3);
        assert_eq!(status["observedGeneration"], 3);
        assert_eq!(status["readyReplicas"], 2);
        assert_eq!(status["availableReplicas"], 2);
        assert_eq!(status["unavailableReplicas"], 0);
        assert_eq!(condition(&status, "Available")["status"], "True");
        assert_eq!(
            condition(&status, "Progressing")["reason"],
            "NewReplicaSetAvailable"
        );
    }

    #[test]
    fn missing_room_and_failing_images_have_reasons() {
        let w = Workload::from_object(Kind::Deployment, &deployment(5, "2", "nginx"), None);
        let status = w.target(3, 3);
        assert_eq!(status["readyReplicas"], 3);
        let available = condition(&status, "Available");
        assert_eq!(available["status"], "False");
        assert_eq!(available["reason"], INSUFFICIENT_CAPACITY);
        assert!(
            available["message"]
                .as_str()
                .unwrap()
                .starts_with("3 of 5 pods fit"),
            "{available}"
        );

        let pattern = Regex::new("^broken/").unwrap();
        let object = deployment(2, "100m", "broken/app:1");
        let w = Workload::from_object(Kind::Deployment, &object, Some(&pattern));
        assert_eq!(w.failing_image.as_deref(), Some("broken/app:1"));
        let status = w.target(2, 3);
        assert_eq!(status["readyReplicas"], 0);
        assert_eq!(
            condition(&status, "Available")["reason"],
            IMAGE_PULL_BACK_OFF
        );
        assert_eq!(condition(&status, "Progressing")["status"], "False");

        let rs = Workload::from_object(Kind::ReplicaSet, &object, Some(&pattern));
        let status = rs.target(2, 3);
        assert_eq!(
            condition(&status, "ReplicaFailure")["reason"],
            IMAGE_PULL_BACK_OFF
        );
        let fine = Workload::from_object(Kind::ReplicaSet, &deployment(2, "1", "ok"), None);
        assert!(fine.target(2, 3).get("conditions").is_none());
    }

    #[test]
    fn times_are_kept_while_conditions_hold() {
        let w = Workload::from_object(Kind::Deployment, &deployment(2, "1", "nginx"), None);
        let first = with_times(Kind::Deployment, w.target(1, 3), &Value::Null, "T1");
        assert_eq!(condition(&first, "Available")["lastTransitionTime"], "T1");
        // Still unavailable, for the same reason but another message: only lastUpdateTime moves.
        let second = with_times(Kind::Deployment, w.target(0, 3), &first, "T2");
        let available = condition(&second, "Available");
        assert_eq!(available["lastTransitionTime"], "T1");
        assert_eq!(available["lastUpdateTime"], "T2");
        assert_eq!(
            condition(&second, "Progressing")["lastUpdateTime"],
            "T1",
            "unchanged"
        );
        let third = with_times(Kind::Deployment, w.target(2, 3), &second, "T3");
        assert_eq!(condition(&third, "Available")["lastTransitionTime"], "T3");
        assert_eq!(without_times(&third), w.target(2, 3));
    }

    #[test]
    fn a_job_completes_when_its_pods_fit() {
        let job = json!({"metadata": {"generation": 1}, "spec": {"completions": 4, "parallelism": 2,
            "template": {"spec": {"containers": [{"name": "j", "image": "busybox"}]}}}});
        let w = Workload::from_object(Kind::Job, &job, None);
        assert_eq!(w.pods_wanted(3), 2);
        let waiting = with_times(Kind::Job, w.target(1, 3), &Value::Null, "T1");
        assert_eq!(waiting["active"], 1);
        assert_eq!(waiting["startTime"], "T1");
        assert!(waiting.get("completionTime").is_none());
        let done = with_times(Kind::Job, w.target(2, 3), &waiting, "T2");
        assert_eq!(done["succeeded"], 4);
        assert_eq!(done["startTime"], "T1");
        assert_eq!(done["completionTime"], "T2");
        let mut stored = job.clone();
        stored["status"] = done.clone();
        let w = Workload::from_object(Kind::Job, &stored, None);
        assert!(w.complete());
        assert_eq!(w.pods_wanted(3), 0);
        assert_eq!(w.target(0, 3), without_times(&done), "stays complete");
    }

    #[test]
    fn a_daemonset_wants_one_pod_per_node() {
        let ds = json!({"metadata": {"generation": 2}, "spec": {"template": {"spec": {"containers": [{"name": "d", "image": "agent"}]}}}});
        let w = Workload::from_object(Kind::DaemonSet, &ds, None);
        assert_eq!(w.pods_wanted(3), 3);
        let status = w.target(3, 3);
        assert_eq!(status["desiredNumberScheduled"], 3);
        assert_eq!(status["numberReady"], 3);
        assert_eq!(status["numberUnavailable"], 0);
        assert!(status.get("conditions").is_none());
    }
}
