//! A rollout over pull clusters end to end (issue 24 with issue 22): a real `flotilla hub`,
//! `flotilla sim --agents` (one pull agent per simulated member, registered through the
//! real flow), kubectl, and a watcher of every member's Deployment. The hub never reaches
//! the members: each wave advances only once the agents report the new revision available
//! on their Works, and a bad image (never available) halts the rollout and rolls it back
//! exactly as on push clusters.
//!
//! ```text
//!  hub ── Works ◄── agents pull them, apply, report status (resync 1 s) ── sim members
//!   │                                                                       ▲
//!   └ rollout: next wave once the Works moved report Available              │ watchers
//! ```

mod support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::pull::{pull_sim, wait_ready_pull_clusters};
use support::rollout::{
    APP, Watchers, available, eventually, placement, placement_events, replay, rollout, set_image,
    text, wait_all, wait_progressing,
};
use support::{Hub, condition, image, member_web};

/// Six pull members, Rolling two at a time, rolled back automatically.
const PLACEMENT: &str = r#"
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  clusters: {labelSelector: {matchLabels: {mode: pull}}}
  strategy:
    type: Rolling
    maxUnavailable: 2
    maxSurge: 0
    minReadySeconds: 1
    progressDeadlineSeconds: 15
    rollback: Automatic
"#;

/// The hub's Works of placement `web` that report `Available` at the revision they carry,
/// by cluster, with that revision.
fn available_works(hub: &Hub) -> Vec<(String, String)> {
    let works = hub.json(&["get", "works", "-A"]);
    works["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["metadata"]["name"] == "shop.web")
        .filter(|w| {
            w["status"]["observedGeneration"] == w["metadata"]["generation"]
                && condition(w, "Available").is_some_and(|c| c["status"] == "True")
        })
        .filter_map(|w| {
            let cluster = w["spec"]["cluster"].as_str()?.to_owned();
            let revision = w["metadata"]["annotations"]["rollout.flotilla.io/revision"]
                .as_str()?
                .to_owned();
            Some((cluster, revision))
        })
        .collect()
}

#[test]
fn a_rolling_rollout_over_pull_clusters_waits_for_the_agents_and_rolls_back_a_bad_image() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    // The agents report their members' status at their resync: every second here.
    let sim = pull_sim(
        &hub,
        6,
        "edge-",
        &[
            "--labels",
            "mode=pull",
            "--resync-period",
            "1s",
            "--fail-images",
            "^bad:",
        ],
    );
    let clusters: Vec<String> = (1..=6).map(|i| format!("edge-{i}")).collect();
    let names: BTreeSet<String> = clusters.iter().cloned().collect();
    let listed = wait_ready_pull_clusters(&hub, &names);
    for cluster in &listed {
        assert!(
            cluster["spec"]["access"]["push"].is_null(),
            "the hub can reach a member: {cluster}"
        );
    }
    hub.create(APP);
    hub.create(PLACEMENT);
    // The first revision goes everywhere at once; it completes once every agent reported
    // it available.
    wait_all(&sim, &clusters, "nginx:1.27");
    let done = wait_progressing(&hub, "RolloutComplete");
    assert_eq!(done["status"]["rollout"]["revision"], 1, "{done}");
    assert_eq!(done["status"]["rollout"]["updated"], 6, "{done}");
    let reported: BTreeSet<String> = available_works(&hub)
        .into_iter()
        .filter(|(_, revision)| revision == "1")
        .map(|(cluster, _)| cluster)
        .collect();
    assert_eq!(reported, names, "complete before every agent reported");

    // Revision 2, two clusters at a time: the next wave only once the agents report the
    // last one available.
    let watchers = Watchers::start(&sim, &clusters);
    let mut events = Vec::new();
    watchers.wait_started(clusters.len(), &mut events);
    set_image(&hub, "nginx:1.28");
    // While the rollout runs: never more clusters moved to revision 2 than those the
    // agents reported available at it, plus the two allowed in flight.
    let mut checks = 0;
    let done = eventually("revision 2 rolled out", || {
        let p = placement(&hub);
        let moved = p["status"]["rollout"]["updated"].as_i64().unwrap_or(0);
        let up = available_works(&hub)
            .iter()
            .filter(|(_, revision)| revision == "2")
            .count() as i64;
        if p["status"]["rollout"]["revision"] == 2 {
            checks += 1;
            // The status is written after the Works it counts: a count read after the
            // placement can only be higher than the one the controller saw.
            assert!(
                moved <= up + 2,
                "{moved} clusters moved with {up} reported available: {}",
                p["status"]["rollout"]
            );
        }
        let reason = condition(&p, "Progressing").map(|c| c["reason"].clone());
        (reason == Some(Value::from("RolloutComplete")) && p["status"]["rollout"]["revision"] == 2)
            .then(|| p.clone())
            .ok_or_else(|| p["status"]["rollout"].to_string())
    });
    assert!(checks > 0, "the rollout was never seen under way");
    assert_eq!(done["status"]["rollout"]["updated"], 6, "{done}");
    wait_all(&sim, &clusters, "nginx:1.28");
    eventually("the watchers saw every member available", || {
        watchers.drain(&mut events);
        let last: std::collections::BTreeMap<&String, bool> = events
            .iter()
            .map(|(c, d)| (c, image(d) == "nginx:1.28" && available(d)))
            .collect();
        (last.len() == 6 && last.values().all(|ok| *ok))
            .then_some(())
            .ok_or_else(|| format!("{last:?}"))
    });
    let (most, images) = replay(&events, "nginx:1.28");
    assert!(
        most <= 2,
        "{most} clusters were between revisions at once: {images:?}"
    );
    assert!(most >= 1, "no member was ever seen between revisions");
    for (cluster, seen) in &images {
        assert_eq!(seen, &["nginx:1.27", "nginx:1.28"], "{cluster}");
    }
    // At least three waves (of at most two): the Works' move times name as many moments.
    let works = hub.json(&["get", "works", "-A"]);
    let waves: BTreeSet<&str> = works["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["metadata"]["name"] == "shop.web")
        .filter_map(|w| w["metadata"]["annotations"]["rollout.flotilla.io/moved-at"].as_str())
        .collect();
    assert!(waves.len() >= 3, "{waves:?}");
    drop(watchers);

    // Revision 3, a bad image: the first wave (edge-1 and edge-2, in name order) never
    // becomes available; the rollout halts and both go back; no other member sees it.
    let watchers = Watchers::start(&sim, &clusters);
    let mut events = Vec::new();
    watchers.wait_started(clusters.len(), &mut events);
    set_image(&hub, "bad:1");
    let failed = wait_progressing(&hub, "RevisionFailed");
    let message = condition(&failed, "Progressing").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("revision 3 failed on cluster edge-"),
        "{message}"
    );
    assert!(message.contains("ImagePullBackOff"), "{message}");
    assert!(message.contains("rolled back to revision 2"), "{message}");
    assert_eq!(
        failed["status"]["rollout"]["failedRevisions"][0]["revision"], 3,
        "{failed}"
    );
    wait_all(&sim, &clusters, "nginx:1.28");
    let status = rollout(&hub, "status", &["--timeout", "1m"]);
    assert!(!status.status.success(), "{}", text(&status.stdout));
    let why = text(&status.stderr);
    assert!(
        why.contains("edge-") && why.contains("ImagePullBackOff"),
        "{why}"
    );
    let notes = eventually("the halt and the rollback in Events", || {
        let events = placement_events(&hub);
        let has = |reason: &str| events.iter().any(|(_, r, _)| r == reason);
        (has("RolloutHalted") && has("RolledBack"))
            .then(|| events.clone())
            .ok_or_else(|| format!("{events:?}"))
    });
    let (_, _, note) = notes.iter().find(|(_, r, _)| r == "RolledBack").unwrap();
    assert_eq!(
        note,
        "revision 3 rolled back to revision 2 on 2 clusters: edge-1, edge-2"
    );
    eventually("the first wave's watchers saw it back", || {
        watchers.drain(&mut events);
        let (_, images) = replay(&events, "bad:1");
        ["edge-1", "edge-2"]
            .iter()
            .all(|c| {
                images.get(*c).is_some_and(|seen| {
                    seen.len() >= 3 && seen.last().map(String::as_str) == Some("nginx:1.28")
                })
            })
            .then_some(())
            .ok_or_else(|| format!("{images:?}"))
    });
    let (_, images) = replay(&events, "bad:1");
    for (cluster, seen) in &images {
        if cluster == "edge-1" || cluster == "edge-2" {
            assert_eq!(seen, &["nginx:1.28", "bad:1", "nginx:1.28"], "{cluster}");
        } else {
            assert!(!seen.iter().any(|i| i == "bad:1"), "{cluster} saw {seen:?}");
        }
    }
    // Every member back at revision 2, as its agent reports it.
    eventually("every agent reports revision 2 available", || {
        let at: BTreeSet<String> = available_works(&hub)
            .into_iter()
            .filter(|(_, revision)| revision == "2")
            .map(|(cluster, _)| cluster)
            .collect();
        (at == names).then_some(()).ok_or_else(|| format!("{at:?}"))
    });
    for cluster in &clusters {
        assert_eq!(image(&member_web(&sim, cluster).unwrap()), "nginx:1.28");
    }
}
