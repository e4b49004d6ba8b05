//! Availability: whether an applied object is up, as its kind defines it, and the
//! status fields reported back to the hub.
//!
//! | kind | available when | feedback |
//! |---|---|---|
//! | apps/v1 Deployment | observed, `updatedReplicas` and `availableReplicas` ≥ `spec.replicas` (1) | replica counters |
//! | apps/v1 StatefulSet, ReplicaSet | observed, `readyReplicas` ≥ `spec.replicas` (1) | replica counters |
//! | apps/v1 DaemonSet | observed, `numberAvailable` ≥ `desiredNumberScheduled` | pod counters |
//! | batch/v1 Job | condition `Complete=True` | `active`, `succeeded`, `failed`, `ready` |
//! | v1 Namespace | `status.phase: Active` | `phase` |
//! | apiextensions.k8s.io/v1 CustomResourceDefinition | condition `Established=True` | |
//! | any other | once applied | none |
//!
//! "Observed": `status.observedGeneration` ≥ `metadata.generation`, so a status about an
//! older spec never counts. Feedback also carries `status.conditions` as they are.

use serde_json::{Map, Value};

/// Whether an object is available, why, and with what counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Availability {
    pub available: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Availability {
    fn yes(reason: &'static str, message: impl Into<String>) -> Self {
        Availability {
            available: true,
            reason,
            message: message.into(),
        }
    }

    fn no(reason: &'static str, message: impl Into<String>) -> Self {
        Availability {
            available: false,
            reason,
            message: message.into(),
        }
    }

    fn when(ok: bool, reasons: (&'static str, &'static str), message: String) -> Self {
        if ok {
            Self::yes(reasons.0, message)
        } else {
            Self::no(reasons.1, message)
        }
    }
}

/// The kinds with a rule of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Deployment,
    StatefulSet,
    ReplicaSet,
    DaemonSet,
    Job,
    Namespace,
    Crd,
}

fn rule(api_version: &str, kind: &str) -> Option<Rule> {
    Some(match (api_version, kind) {
        ("apps/v1", "Deployment") => Rule::Deployment,
        ("apps/v1", "StatefulSet") => Rule::StatefulSet,
        ("apps/v1", "ReplicaSet") => Rule::ReplicaSet,
        ("apps/v1", "DaemonSet") => Rule::DaemonSet,
        ("batch/v1", "Job") => Rule::Job,
        ("v1", "Namespace") => Rule::Namespace,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => Rule::Crd,
        _ => return None,
    })
}

/// Whether `live`, an applied object of this kind, is available.
pub(crate) fn availability(api_version: &str, kind: &str, live: &Value) -> Availability {
    let status = &live["status"];
    let count = |field: &str| status[field].as_i64().unwrap_or(0);
    let desired = live["spec"]["replicas"].as_i64().unwrap_or(1);
    let Some(rule) = rule(api_version, kind) else {
        return Availability::yes(
            "Applied",
            "no readiness rule for this kind: available once applied",
        );
    };
    if matches!(
        rule,
        Rule::Deployment | Rule::StatefulSet | Rule::ReplicaSet | Rule::DaemonSet
    ) && let Some(pending) = not_observed(live)
    {
        return pending;
    }
    match rule {
        Rule::Deployment => {
            let (updated, available) = (count("updatedReplicas"), count("availableReplicas"));
            let mut message = format!("{available}/{desired} replicas available");
            if updated < desired {
                message += &format!(", {updated}/{desired} updated");
            }
            Availability::when(
                updated >= desired && available >= desired,
                ("ReplicasAvailable", "ReplicasUnavailable"),
                message,
            )
        }
        Rule::StatefulSet | Rule::ReplicaSet => {
            let ready = count("readyReplicas");
            Availability::when(
                ready >= desired,
                ("ReplicasReady", "ReplicasNotReady"),
                format!("{ready}/{desired} replicas ready"),
            )
        }
        Rule::DaemonSet => {
            let (available, desired) = (count("numberAvailable"), count("desiredNumberScheduled"));
            Availability::when(
                available >= desired,
                ("PodsAvailable", "PodsUnavailable"),
                format!("{available}/{desired} pods available"),
            )
        }
        Rule::Job => {
            let counts = format!(
                "{} active, {} succeeded, {} failed",
                count("active"),
                count("succeeded"),
                count("failed")
            );
            if let Some(done) = condition(status, "Complete") {
                Availability::yes("Complete", text(done, &counts))
            } else if let Some(failed) = condition(status, "Failed") {
                Availability::no("Failed", text(failed, &counts))
            } else {
                Availability::no("Running", counts)
            }
        }
        Rule::Namespace => match status["phase"].as_str() {
            Some("Active") => Availability::yes("Active", "the namespace is active"),
            Some(phase) => Availability::no("NotActive", format!("the namespace is {phase}")),
            None => Availability::no("NotActive", "the namespace has no phase yet"),
        },
        Rule::Crd => match condition(status, "Established") {
            Some(c) => Availability::yes("Established", text(c, "the CRD is established")),
            None => {
                let why = status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["status"] == "False")
                    .map_or("the CRD is not established yet", |c| {
                        text(c, "the CRD is not established yet")
                    });
                Availability::no("NotEstablished", why)
            }
        },
    }
}

/// The reason not to trust a workload's counters yet: its controller has not seen the
/// current spec.
fn not_observed(live: &Value) -> Option<Availability> {
    let generation = live["metadata"]["generation"].as_i64().unwrap_or(1);
    match live["status"]["observedGeneration"].as_i64() {
        Some(observed) if observed >= generation => None,
        Some(observed) => Some(Availability::no(
            "NotObserved",
            format!("generation {generation} is not observed yet (observed: {observed})"),
        )),
        None => Some(Availability::no(
            "NotObserved",
            format!("generation {generation} is not observed yet (no status)"),
        )),
    }
}

/// The condition of this type in `status.conditions`, if it is `True`.
fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
}

/// A condition's message, or `fallback` if it has none.
fn text<'a>(condition: &'a Value, fallback: &'a str) -> &'a str {
    condition["message"]
        .as_str()
        .filter(|m| !m.is_empty())
        .unwrap_or(fallback)
}

/// The status fields reported back for `live`: its kind's counters and
/// `status.conditions`; `None` for kinds without a rule, or when none is set yet.
pub(crate) fn feedback(api_version: &str, kind: &str, live: &Value) -> Option<Value> {
    let fields: &[&str] = match rule(api_version, kind)? {
        Rule::Deployment => &[
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
            "unavailableReplicas",
            "observedGeneration",
        ],
        Rule::StatefulSet => &[
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
            "currentReplicas",
            "observedGeneration",
        ],
        Rule::ReplicaSet => &[
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "fullyLabeledReplicas",
            "observedGeneration",
        ],
        Rule::DaemonSet => &[
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "updatedNumberScheduled",
            "numberReady",
            "numberAvailable",
            "numberUnavailable",
            "numberMisscheduled",
            "observedGeneration",
        ],
        Rule::Job => &["active", "succeeded", "failed", "ready"],
        Rule::Namespace => &["phase"],
        Rule::Crd => &[],
    };
    let status = &live["status"];
    let picked: Map<String, Value> = fields
        .iter()
        .chain(&["conditions"])
        .filter_map(|field| Some((field.to_string(), status.get(*field)?.clone())))
        .filter(|(_, value)| !value.is_null())
        .collect();
    (!picked.is_empty()).then_some(Value::Object(picked))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(replicas: Option<i64>, generation: i64, status: Value) -> Value {
        let mut spec = json!({});
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        json!({"metadata": {"generation": generation}, "spec": spec, "status": status})
    }

    #[test]
    fn deployments_count_updated_and_available_replicas_of_the_current_generation() {
        let check = |live: &Value| availability("apps/v1", "Deployment", live);
        let fresh = check(&deployment(Some(3), 1, json!(null)));
        assert_eq!(fresh.reason, "NotObserved");
        assert!(!fresh.available);

        let stale = deployment(
            Some(3),
            2,
            json!({"observedGeneration": 1, "updatedReplicas": 3, "availableReplicas": 3}),
        );
        assert_eq!(check(&stale).reason, "NotObserved");
        assert!(check(&stale).message.contains("observed: 1"));

        let rolling = deployment(
            Some(3),
            2,
            json!({"observedGeneration": 2, "updatedReplicas": 1, "availableReplicas": 3}),
        );
        assert_eq!(
            check(&rolling),
            Availability::no("ReplicasUnavailable", "3/3 replicas available, 1/3 updated")
        );

        let partial = deployment(
            Some(3),
            2,
            json!({"observedGeneration": 2, "updatedReplicas": 3, "availableReplicas": 2}),
        );
        assert_eq!(
            check(&partial),
            Availability::no("ReplicasUnavailable", "2/3 replicas available")
        );

        let up = deployment(
            Some(3),
            2,
            json!({"observedGeneration": 3, "updatedReplicas": 3, "availableReplicas": 3}),
        );
        assert_eq!(
            check(&up),
            Availability::yes("ReplicasAvailable", "3/3 replicas available")
        );

        // spec.replicas defaults to 1; zero replicas are available at once.
        let one = deployment(
            None,
            1,
            json!({"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1}),
        );
        assert!(check(&one).available);
        assert_eq!(check(&one).message, "1/1 replicas available");
        assert!(check(&deployment(Some(0), 1, json!({"observedGeneration": 1}))).available);
    }

    #[test]
    fn statefulsets_replicasets_and_daemonsets() {
        let sts = deployment(
            Some(2),
            1,
            json!({"observedGeneration": 1, "readyReplicas": 1}),
        );
        let a = availability("apps/v1", "StatefulSet", &sts);
        assert_eq!(
            a,
            Availability::no("ReplicasNotReady", "1/2 replicas ready")
        );
        let rs = deployment(
            Some(2),
            1,
            json!({"observedGeneration": 1, "readyReplicas": 2}),
        );
        assert!(availability("apps/v1", "ReplicaSet", &rs).available);

        let ds = |available: i64| {
            json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
                "desiredNumberScheduled": 3, "numberAvailable": available}})
        };
        let a = availability("apps/v1", "DaemonSet", &ds(2));
        assert_eq!(a, Availability::no("PodsUnavailable", "2/3 pods available"));
        assert!(availability("apps/v1", "DaemonSet", &ds(3)).available);
    }

    #[test]
    fn jobs_namespaces_crds_and_the_rest() {
        let job = |conditions: Value| json!({"status": {"active": 1, "succeeded": 2, "conditions": conditions}});
        let running = availability("batch/v1", "Job", &job(json!([])));
        assert_eq!(
            running,
            Availability::no("Running", "1 active, 2 succeeded, 0 failed")
        );
        let done = job(json!([{"type": "Complete", "status": "True"}]));
        assert_eq!(availability("batch/v1", "Job", &done).reason, "Complete");
        assert!(availability("batch/v1", "Job", &done).available);
        let failed = job(json!([{"type": "Failed", "status": "True", "message": "backoff"}]));
        assert_eq!(
            availability("batch/v1", "Job", &failed),
            Availability::no("Failed", "backoff")
        );

        let ns = |phase: &str| json!({"status": {"phase": phase}});
        assert!(availability("v1", "Namespace", &ns("Active")).available);
        assert_eq!(
            availability("v1", "Namespace", &ns("Terminating")),
            Availability::no("NotActive", "the namespace is Terminating")
        );

        let crd = "apiextensions.k8s.io/v1";
        let established = json!({"status": {"conditions": [
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True", "message": "the initial names have been accepted"}]}});
        assert!(availability(crd, "CustomResourceDefinition", &established).available);
        let refused = json!({"status": {"conditions": [
            {"type": "NamesAccepted", "status": "False", "message": "widgets is taken"}]}});
        assert_eq!(
            availability(crd, "CustomResourceDefinition", &refused),
            Availability::no("NotEstablished", "widgets is taken")
        );

        let cm = availability("v1", "ConfigMap", &json!({}));
        assert!(cm.available);
        assert_eq!(cm.reason, "Applied");
        // The group matters: an apps/v1beta2 Deployment has no rule.
        assert!(availability("apps/v1beta2", "Deployment", &json!({})).available);
    }

    #[test]
    fn feedback_picks_counters_and_conditions() {
        let live = json!({"status": {"replicas": 3, "readyReplicas": 2, "observedGeneration": 4,
            "collisionCount": 1, "conditions": [{"type": "Progressing", "status": "True"}]}});
        assert_eq!(
            feedback("apps/v1", "Deployment", &live),
            Some(
                json!({"replicas": 3, "readyReplicas": 2, "observedGeneration": 4,
                "conditions": [{"type": "Progressing", "status": "True"}]})
            )
        );
        let job = json!({"status": {"succeeded": 1, "startTime": "2025-01-01T00:00:00Z"}});
        assert_eq!(
            feedback("batch/v1", "Job", &job),
            Some(json!({"succeeded": 1}))
        );
        assert_eq!(feedback("apps/v1", "Deployment", &json!({})), None);
        assert_eq!(feedback("v1", "ConfigMap", &live), None);
        assert_eq!(
            feedback("v1", "Namespace", &json!({"status": {"phase": "Active"}})),
            Some(json!({"phase": "Active"}))
        );
    }
}
