use std::collections::BTreeMap;

use flotilla_api::{Drift, ManifestStatus, WorkStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

use super::*;
use crate::Selection;

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap())
}

fn cond(kind: &str, ok: bool) -> Condition {
    Condition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: "R".into(),
        message: format!("{kind} message"),
        observed_generation: None,
        last_transition_time: now(),
    }
}

fn work(applied: bool, available: bool, ready: i64) -> WorkStatus {
    WorkStatus {
        observed_generation: Some(1),
        conditions: vec![cond("Applied", applied), cond("Available", available)],
        manifests: vec![ManifestStatus {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
            status_feedback: Some(
                json!({"replicas": 3, "readyReplicas": ready,
                "availableReplicas": ready, "updatedReplicas": 3,
                "conditions": [{"type": "Available", "status": if available {"True"} else {"False"},
                    "reason": "MinimumReplicasUnavailable", "message": "not yet"}]})
                .into(),
            ),
            drift: vec![Drift {
                path: "/spec/replicas".into(),
                hub: Some("3".into()),
                member: Some("5".into()),
            }],
            ..Default::default()
        }],
    }
}

/// What was observed: `works`, every cluster Ready, every selector matching.
fn seen<'a>(works: &'a BTreeMap<String, WorkView<'a>>) -> Observed<'a> {
    static NONE: BTreeMap<String, Time> = BTreeMap::new();
    Observed {
        works,
        not_ready: &NONE,
        unmatched: &[],
        outside: &[],
    }
}

fn plan(chosen: &[&str]) -> Plan {
    Plan {
        selection: Selection {
            chosen: chosen.iter().map(|c| c.to_string()).collect(),
            excluded: vec![],
        },
        replicas: chosen.iter().map(|c| (c.to_string(), 3)).collect(),
        scheduled: Ok(()),
        ..Plan::default()
    }
}

#[test]
fn the_placement_status_counts_clusters_and_carries_drift() {
    let (a, b) = (work(true, true, 3), work(true, false, 1));
    let works = BTreeMap::from([
        (
            "a".to_owned(),
            WorkView {
                generation: Some(1),
                status: Some(&a),
            },
        ),
        (
            "b".to_owned(),
            WorkView {
                generation: Some(1),
                status: Some(&b),
            },
        ),
    ]);
    let status = placement_status(&plan(&["a", "b"]), &seen(&works), Some(4), None, &now());
    let get = |kind: &str| status.conditions.iter().find(|c| c.type_ == kind).unwrap();
    assert_eq!(get("Scheduled").status, "True");
    assert_eq!(get("Applied").status, "True");
    assert_eq!(get("Available").status, "False");
    assert_eq!(get("Available").message, "1/2 clusters");
    assert_eq!(status.observed_generation, Some(4));
    assert_eq!(status.clusters.len(), 2);
    assert_eq!(status.clusters[0].replicas, Some(3));
    assert_eq!(
        status.clusters[1].drift[0].path,
        "Deployment/web/spec/replicas"
    );
    assert_eq!(status.clusters[1].drift[0].member.as_deref(), Some("5"));

    // A Work whose status is about an older generation counts as pending.
    let stale = BTreeMap::from([(
        "a".to_owned(),
        WorkView {
            generation: Some(2),
            status: Some(&a),
        },
    )]);
    let status = placement_status(&plan(&["a"]), &seen(&stale), Some(4), None, &now());
    assert_eq!(status.clusters[0].conditions[0].reason, "Pending");

    // Recomputing over an unchanged world gives an equal status (times kept).
    let first = placement_status(&plan(&["a", "b"]), &seen(&works), Some(4), None, &now());
    let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_000_000).unwrap());
    let second = placement_status(
        &plan(&["a", "b"]),
        &seen(&works),
        Some(4),
        Some(&first),
        &later,
    );
    assert_eq!(first, second);
}

#[test]
fn deployment_counters_are_summed_and_conditions_merged() {
    let (a, b) = (work(true, true, 3), work(true, false, 1));
    let id: crate::plan::ManifestId = (
        "apps/v1".into(),
        "Deployment".into(),
        "shop".into(),
        "web".into(),
    );
    // Divided: 3 replicas asked of each, 6 in all.
    let reports: Vec<Report> = [("a", &a), ("b", &b)]
        .into_iter()
        .map(|(cluster, status)| Report {
            cluster: cluster.into(),
            feedback: feedback(&id, status),
            desired: Some(3),
            current: true,
        })
        .collect();
    assert!(reports.iter().all(|r| r.feedback.is_some()));
    let status = aggregate(
        "apps/v1",
        "Deployment",
        Some(7),
        Some(6),
        &reports,
        true,
        &json!(null),
    )
    .unwrap();
    assert_eq!(status["replicas"], 6);
    assert_eq!(status["readyReplicas"], 4);
    assert_eq!(status["availableReplicas"], 4);
    assert_eq!(status["updatedReplicas"], 6);
    assert_eq!(status["observedGeneration"], 7);
    let available = &status["conditions"][0];
    assert_eq!(available["type"], "Available");
    assert_eq!(available["status"], "False");
    assert!(
        available["message"]
            .as_str()
            .unwrap()
            .starts_with("1/2 clusters")
    );

    // Not every cluster reported: the observed generation stays where it was.
    let partial = aggregate(
        "apps/v1",
        "Deployment",
        Some(8),
        Some(6),
        &reports,
        false,
        &status,
    )
    .unwrap();
    assert_eq!(partial["observedGeneration"], 7);
    assert!(
        aggregate(
            "v1",
            "ConfigMap",
            Some(1),
            None,
            &reports,
            true,
            &json!(null)
        )
        .is_none()
    );
}

#[test]
fn a_status_lists_at_most_a_thousand_clusters_each_way_the_troubled_first() {
    // 2,500 chosen clusters, all applied and available but c-1700 (not available) and
    // c-2400 (pending: no Work); 1,200 not chosen.
    let names: Vec<String> = (0..2500).map(|i| format!("c-{i:04}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // (`work` reports drift, which would make every cluster troubled: not here.)
    let without_drift = |mut w: WorkStatus| {
        w.manifests[0].drift.clear();
        w
    };
    let fine = without_drift(work(true, true, 3));
    let unavailable = without_drift(work(true, false, 1));
    let works: BTreeMap<String, WorkView<'_>> = names
        .iter()
        .filter(|n| **n != "c-2400")
        .map(|n| {
            let status = if *n == "c-1700" { &unavailable } else { &fine };
            let view = WorkView {
                generation: Some(1),
                status: Some(status),
            };
            (n.to_string(), view)
        })
        .collect();
    let mut many = plan(&names);
    many.selection.excluded = (0..1200)
        .map(|i| (format!("x-{i:04}"), crate::Reason::LabelSelector))
        .collect();

    let status = placement_status(&many, &seen(&works), Some(1), None, &now());
    assert_eq!(status.clusters.len(), MAX_LISTED_CLUSTERS);
    assert_eq!(status.unlisted_clusters, Some(1500));
    let listed: Vec<&str> = status.clusters.iter().map(|c| c.name.as_str()).collect();
    // The troubled first, then the rest in the chosen order.
    assert_eq!(listed[..4], ["c-1700", "c-2400", "c-0000", "c-0001"]);
    assert_eq!(listed[MAX_LISTED_CLUSTERS - 1], "c-0997");
    assert_eq!(status.clusters[1].conditions[0].reason, "Pending");
    // The counts are over every chosen cluster, listed or not.
    let get = |kind: &str| status.conditions.iter().find(|c| c.type_ == kind).unwrap();
    assert_eq!(get("Applied").message, "2499/2500 clusters");
    assert_eq!(get("Available").message, "2498/2500 clusters");
    assert_eq!(status.excluded.len(), MAX_LISTED_CLUSTERS);
    assert_eq!(status.unlisted_excluded, Some(200));
    assert_eq!(status.excluded[0].name, "x-0000");
    // Well under the API's object size limit; and stable when nothing changed.
    let size = serde_json::to_vec(&status).unwrap().len();
    assert!(size < 1 << 20, "{size} bytes");
    let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_000_000).unwrap());
    assert_eq!(
        placement_status(&many, &seen(&works), Some(1), Some(&status), &later),
        status
    );

    // A fleet within the limit is listed whole, in the chosen order.
    let few = placement_status(
        &plan(&names[..MAX_LISTED_CLUSTERS]),
        &seen(&works),
        Some(1),
        None,
        &now(),
    );
    assert_eq!(few.clusters.len(), MAX_LISTED_CLUSTERS);
    assert_eq!(few.clusters[0].name, "c-0000");
    assert_eq!((few.unlisted_clusters, few.unlisted_excluded), (None, None));
}

#[test]
fn a_clusters_drift_in_the_placement_status_is_bounded_and_counts_what_it_leaves_out() {
    let entry = |i: usize| Drift {
        path: format!("/data/k{i}"),
        hub: Some(format!("\"{}\"", "h".repeat(100))),
        member: Some("\"m\"".into()),
    };
    let mut status = work(true, true, 3);
    let first = status.manifests[0].clone();
    // Two manifests: three drifted fields listed in one, five in the other, which left
    // two more out of its own list.
    status.manifests = vec![
        ManifestStatus {
            drift: (0..3).map(entry).collect(),
            ..first.clone()
        },
        ManifestStatus {
            name: "settings".into(),
            kind: "ConfigMap".into(),
            drift: (0..5).map(entry).collect(),
            unlisted_drift: Some(2),
            ..first
        },
    ];
    let works = BTreeMap::from([(
        "a".to_owned(),
        WorkView {
            generation: Some(1),
            status: Some(&status),
        },
    )]);
    let placed = placement_status(&plan(&["a"]), &seen(&works), Some(1), None, &now());
    let cluster = &placed.clusters[0];
    let paths: Vec<&str> = cluster.drift.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "Deployment/web/data/k0",
            "Deployment/web/data/k1",
            "Deployment/web/data/k2",
            "ConfigMap/settings/data/k0"
        ]
    );
    // 8 listed by the Work, 4 here: 4 + the 2 the Work left out.
    assert_eq!(cluster.unlisted_drift, Some(6));
    let hub = cluster.drift[0].hub.as_deref().unwrap();
    assert_eq!(hub.len(), DriftBound::PLACED_CLUSTER.value_bytes);
    assert!(hub.ends_with('…'), "{hub}");
    assert_eq!(cluster.drift[0].member.as_deref(), Some("\"m\""));
}

fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
}

#[test]
fn a_cluster_not_ready_is_shown_as_last_reported_and_counts_for_nothing() {
    let fine = work(true, true, 3);
    let works: BTreeMap<String, WorkView<'_>> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let view = WorkView {
                generation: Some(1),
                status: Some(&fine),
            };
            (n.to_string(), view)
        })
        .collect();
    // Every Work says Applied and Available; b and c stopped being Ready.
    let not_ready = BTreeMap::from([
        ("b".to_owned(), at(1_700_000_000)),
        ("c".to_owned(), at(1_700_000_100)),
    ]);
    let observed = Observed {
        works: &works,
        not_ready: &not_ready,
        unmatched: &[],
        outside: &[],
    };
    let status = placement_status(&plan(&["a", "b", "c"]), &observed, Some(1), None, &now());
    let get = |kind: &str| status.conditions.iter().find(|c| c.type_ == kind).unwrap();
    assert_eq!(get("Available").status, "False");
    assert_eq!(get("Available").reason, "ClustersNotReady");
    assert_eq!(get("Available").message, "1/3 clusters; not Ready: b, c");
    assert_eq!(get("Applied").status, "False");
    assert_eq!(get("Applied").message, "1/3 clusters; not Ready: b, c");
    // Each shown as last reported, with since when it is not Ready.
    let b = status.clusters.iter().find(|c| c.name == "b").unwrap();
    assert_eq!(b.not_ready_since, Some(at(1_700_000_000)));
    let available = b
        .conditions
        .iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("Unknown", "ClusterNotReady")
    );
    assert_eq!(
        available.message,
        "cluster not Ready since 2023-11-14T22:13:20Z; last reported Available=True (R: Available message)"
    );
    let a = status.clusters.iter().find(|c| c.name == "a").unwrap();
    assert_eq!(a.not_ready_since, None);
    // Ready again: counted again.
    let none = BTreeMap::new();
    let observed = Observed {
        not_ready: &none,
        ..observed
    };
    let status = placement_status(
        &plan(&["a", "b", "c"]),
        &observed,
        Some(1),
        Some(&status),
        &now(),
    );
    let available = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(
        (available.status.as_str(), available.message.as_str()),
        ("True", "3/3 clusters")
    );
    assert!(status.clusters.iter().all(|c| c.not_ready_since.is_none()));
}

#[test]
fn a_selector_that_matches_nothing_is_named_and_nothing_is_available() {
    let fine = work(true, true, 3);
    let works = BTreeMap::from([(
        "a".to_owned(),
        WorkView {
            generation: Some(1),
            status: Some(&fine),
        },
    )]);
    let found = placement_status(&plan(&["a"]), &seen(&works), Some(1), None, &now());
    let get = |s: &PlacementStatus, kind: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == kind)
            .cloned()
            .unwrap()
    };
    assert_eq!(get(&found, "TemplatesFound").status, "True");
    assert_eq!(get(&found, "Available").status, "True");

    let unmatched = ["apps/v1 Deployment webb".to_owned()];
    let observed = Observed {
        unmatched: &unmatched,
        ..seen(&works)
    };
    let missing = placement_status(&plan(&["a"]), &observed, Some(1), None, &now());
    let templates = get(&missing, "TemplatesFound");
    assert_eq!(
        (templates.status.as_str(), templates.reason.as_str()),
        ("False", "NotFound")
    );
    assert_eq!(
        templates.message,
        "no template matches apps/v1 Deployment webb"
    );
    let available = get(&missing, "Available");
    assert_eq!(available.status, "False");
    assert_eq!(available.reason, "TemplatesNotFound");
    assert_eq!(
        available.message,
        "1/1 clusters; no template for apps/v1 Deployment webb"
    );
    // What was found is applied all the same.
    assert_eq!(get(&missing, "Applied").status, "True");

    // A Placement selecting a cluster-scoped kind: it selects nothing, and says why.
    let outside = ["v1 Namespace tenants".to_owned()];
    let observed = Observed {
        outside: &outside,
        ..seen(&works)
    };
    let confined = placement_status(&plan(&["a"]), &observed, Some(1), None, &now());
    let templates = get(&confined, "TemplatesFound");
    assert_eq!(
        (templates.status.as_str(), templates.reason.as_str()),
        ("False", "OutsideNamespace")
    );
    assert_eq!(
        templates.message,
        "a Placement places only resources of its own namespace, so these select nothing \
         (cluster-scoped kinds are a ClusterPlacement's): v1 Namespace tenants"
    );
    let available = get(&confined, "Available");
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("False", "TemplatesNotFound")
    );
}

#[test]
fn the_scheduled_condition_carries_the_plans_reason() {
    let works = BTreeMap::new();
    let mut unbound = plan(&[]);
    unbound.scheduled = Err(crate::plan::Unscheduled {
        reason: crate::plan::Unscheduled::NO_CLUSTER_SET_BINDING,
        message: "namespace shop has no ClusterSetBinding".into(),
    });
    let status = placement_status(&unbound, &seen(&works), Some(1), None, &now());
    let scheduled = &status.conditions[0];
    assert_eq!(
        (
            scheduled.type_.as_str(),
            scheduled.status.as_str(),
            scheduled.reason.as_str()
        ),
        ("Scheduled", "False", "NoClusterSetBinding")
    );
    assert_eq!(scheduled.message, "namespace shop has no ClusterSetBinding");
}

/// A cluster's report of a Deployment: `replicas`, `ready` (and as many available and
/// updated), `Available` as said.
fn report(cluster: &str, desired: i64, replicas: i64, ready: i64, current: bool) -> Report {
    Report {
        cluster: cluster.into(),
        feedback: Some(json!({"replicas": replicas, "readyReplicas": ready,
            "availableReplicas": ready, "updatedReplicas": replicas,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                "message": "ok"}]})),
        desired: Some(desired),
        current,
    }
}

fn deployment_status(spec: i64, reports: &[Report]) -> Value {
    aggregate(
        "apps/v1",
        "Deployment",
        Some(1),
        Some(spec),
        reports,
        true,
        &json!(null),
    )
    .unwrap()
}

#[test]
fn duplicated_counters_read_in_the_templates_units_and_never_exceed_its_replicas() {
    // 12 on each of 3 clusters: 36 ready read 12 of 12.
    let all: Vec<Report> = ["a", "b", "c"]
        .iter()
        .map(|c| report(c, 12, 12, 12, true))
        .collect();
    let status = deployment_status(12, &all);
    assert_eq!(
        (
            &status["replicas"],
            &status["readyReplicas"],
            &status["availableReplicas"],
            &status["updatedReplicas"]
        ),
        (&json!(12), &json!(12), &json!(12), &json!(12))
    );
    assert!(status.get("unavailableReplicas").is_none());
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["observedGeneration"], 1);

    // c not Ready: its 12 count for nothing; 24 of 36 asked read 8 of 12.
    let mut one_down = all.clone();
    one_down[2].current = false;
    let status = deployment_status(12, &one_down);
    assert_eq!(status["readyReplicas"], 8);
    assert_eq!(status["availableReplicas"], 8);
    assert_eq!(status["unavailableReplicas"], 4);
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "ClustersNotReady");
    assert_eq!(
        status["conditions"][0]["message"],
        "2/3 clusters; not Ready: c"
    );
    // Not every cluster's report is current: the generation is not observed.
    assert!(status.get("observedGeneration").is_none());

    // Every cluster down: nothing ready.
    let down: Vec<Report> = all
        .iter()
        .cloned()
        .map(|r| Report {
            current: false,
            ..r
        })
        .collect();
    let status = deployment_status(12, &down);
    assert_eq!(status["readyReplicas"], 0);
    assert_eq!(status["availableReplicas"], 0);
    assert_eq!(status["unavailableReplicas"], 12);
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(
        status["conditions"][0]["message"],
        "0/3 clusters; not Ready: a, b, c"
    );

    // Surplus on a cluster (a rollout's surge, a drifted scale) never lifts the count
    // above what the template asks.
    let surplus: Vec<Report> = ["a", "b", "c"]
        .iter()
        .map(|c| report(c, 12, 15, 15, true))
        .collect();
    let status = deployment_status(12, &surplus);
    assert_eq!(
        (&status["replicas"], &status["readyReplicas"]),
        (&json!(12), &json!(12))
    );
}

#[test]
fn divided_counters_are_sums_each_cluster_counted_up_to_its_share() {
    // 12 divided 4 + 8; the 8 all ready, 3 of the 4.
    let status = deployment_status(
        12,
        &[report("a", 4, 4, 3, true), report("b", 8, 8, 8, true)],
    );
    assert_eq!(
        (&status["replicas"], &status["readyReplicas"]),
        (&json!(12), &json!(11))
    );
    assert_eq!(status["unavailableReplicas"], 1);
    // b not Ready, its share moved to a (12 asked there, 4 ready so far; b asked for none).
    let status = deployment_status(
        12,
        &[report("a", 12, 12, 4, true), report("b", 0, 8, 8, false)],
    );
    assert_eq!(
        (&status["replicas"], &status["readyReplicas"]),
        (&json!(12), &json!(4))
    );
    // Drift reported, not corrected: the member scaled to 9 where the hub asks for 2
    // counts for 2.
    let status = deployment_status(2, &[report("a", 2, 9, 9, true)]);
    assert_eq!(
        (
            &status["replicas"],
            &status["readyReplicas"],
            &status["availableReplicas"]
        ),
        (&json!(2), &json!(2), &json!(2))
    );
}

#[test]
fn daemon_sets_sum_the_ready_clusters_only() {
    let ds = |n: i64, current: bool| Report {
        cluster: format!("c{n}"),
        feedback: Some(json!({"desiredNumberScheduled": n, "numberReady": n})),
        desired: None,
        current,
    };
    let status = aggregate(
        "apps/v1",
        "DaemonSet",
        Some(1),
        None,
        &[ds(3, true), ds(5, true), ds(7, false)],
        true,
        &json!(null),
    )
    .unwrap();
    assert_eq!(status["desiredNumberScheduled"], 8);
    assert_eq!(status["numberReady"], 8);
}
