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
    let status = placement_status(&plan(&["a", "b"]), &works, Some(4), None, &now());
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
    let status = placement_status(&plan(&["a"]), &stale, Some(4), None, &now());
    assert_eq!(status.clusters[0].conditions[0].reason, "Pending");

    // Recomputing over an unchanged world gives an equal status (times kept).
    let first = placement_status(&plan(&["a", "b"]), &works, Some(4), None, &now());
    let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_000_000).unwrap());
    let second = placement_status(&plan(&["a", "b"]), &works, Some(4), Some(&first), &later);
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
    let feedback = feedback(&id, [&a, &b]);
    assert_eq!(feedback.len(), 2);
    let status = aggregate(
        "apps/v1",
        "Deployment",
        Some(7),
        &feedback,
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
    let partial = aggregate("apps/v1", "Deployment", Some(8), &feedback, false, &status).unwrap();
    assert_eq!(partial["observedGeneration"], 7);
    assert!(aggregate("v1", "ConfigMap", Some(1), &feedback, true, &json!(null)).is_none());
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

    let status = placement_status(&many, &works, Some(1), None, &now());
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
        placement_status(&many, &works, Some(1), Some(&status), &later),
        status
    );

    // A fleet within the limit is listed whole, in the chosen order.
    let few = placement_status(
        &plan(&names[..MAX_LISTED_CLUSTERS]),
        &works,
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
    let placed = placement_status(&plan(&["a"]), &works, Some(1), None, &now());
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
