//! Safe rollouts end to end (issue 24): a real `flotilla hub`, `flotilla sim` members joined
//! with `flotilla join`, the real kubectl, and a watcher of every member's Deployment that
//! records each version it sees. Rolling with maxUnavailable 2 over ten clusters (the hub
//! killed and restarted mid-rollout); Staged canary → eu (approval) → rest; a bad image
//! rolled back automatically from the canary alone; `flotilla rollout status|history|
//! approve|undo`.

mod support;

use std::collections::BTreeMap;

use support::rollout::{
    APP, Watchers, available, eventually, placement, placement_events, replay, rollout, set_image,
    text, wait_all, wait_progressing,
};
use support::{Hub, Sim, condition, image, join_labelled, member_web};

#[test]
fn rolling_keeps_at_most_max_unavailable_clusters_between_revisions_across_a_hub_restart() {
    let mut hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "11", "--prefix", "m-", "--ready-delay", "1s"]);
    let clusters: Vec<String> = (1..=10).map(|i| format!("m-{i}")).collect();
    for cluster in &clusters {
        join_labelled(&hub, &sim, cluster, "region=eu");
    }
    hub.create(APP);
    hub.create(
        r#"
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  strategy: {type: Rolling, maxUnavailable: 2, maxSurge: 0, minReadySeconds: 1}
"#,
    );
    // The first revision goes everywhere at once: there is nothing older to keep.
    wait_all(&sim, &clusters, "nginx:1.27");
    let done = wait_progressing(&hub, "RolloutComplete");
    assert_eq!(done["status"]["rollout"]["revision"], 1, "{done}");
    assert_eq!(done["status"]["rollout"]["updated"], 10, "{done}");

    let watchers = Watchers::start(&sim, &clusters);
    let mut events = Vec::new();
    // Each watcher has seen the Deployment as it is before the change.
    watchers.wait_started(clusters.len(), &mut events);
    set_image(&hub, "nginx:1.28");
    // Mid-rollout the hub is killed and started again: it goes on where it was.
    eventually("a first wave moved", || {
        let p = placement(&hub);
        let updated = p["status"]["rollout"]["updated"].as_i64().unwrap_or(0);
        (p["status"]["rollout"]["revision"] == 2 && (1..10).contains(&updated))
            .then_some(())
            .ok_or_else(|| p["status"]["rollout"].to_string())
    });
    let mid = placement(&hub);
    assert_eq!(
        condition(&mid, "Progressing").unwrap()["status"],
        "True",
        "{mid}"
    );
    // A cluster joining mid-rollout starts at the last completed revision.
    join_labelled(&hub, &sim, "m-11", "region=eu");
    hub.restart(true);
    wait_all(&sim, &clusters, "nginx:1.28");
    wait_all(&sim, &["m-11".to_owned()], "nginx:1.28");
    // Created with revision 1's objects, then moved once: its Deployment's spec changed
    // once.
    let joined = member_web(&sim, "m-11").unwrap();
    assert_eq!(joined["metadata"]["generation"], 2, "{joined}");
    let done = wait_progressing(&hub, "RolloutComplete");
    assert_eq!(done["status"]["rollout"]["revision"], 2, "{done}");
    assert_eq!(done["status"]["rollout"]["completedRevision"], 2, "{done}");
    assert_eq!(done["status"]["rollout"]["updated"], 11, "{done}");
    for cluster in done["status"]["clusters"].as_array().unwrap() {
        assert_eq!(cluster["revision"], 2, "{cluster}");
    }
    // Let the watchers catch up with the last versions, then replay what they saw.
    eventually("the watchers saw every member available", || {
        watchers.drain(&mut events);
        let (_, images) = replay(&events, "nginx:1.28");
        let last: BTreeMap<&String, bool> = events
            .iter()
            .map(|(c, d)| (c, image(d) == "nginx:1.28" && available(d)))
            .collect();
        (images.len() == 10 && last.values().all(|ok| *ok))
            .then_some(())
            .ok_or_else(|| format!("{last:?}"))
    });
    let (most, images) = replay(&events, "nginx:1.28");
    assert!(
        most <= 2,
        "{most} clusters were between revisions at once: {images:?}"
    );
    assert!(most >= 1, "no member was ever seen between revisions");
    // Each member moved once: no cluster updated twice, none skipped — in what the
    // watchers saw, and in each Deployment's generation (created, then changed once; the
    // restarted hub applied nothing again).
    for (cluster, seen) in &images {
        assert_eq!(seen, &["nginx:1.27", "nginx:1.28"], "{cluster}");
    }
    for cluster in &clusters {
        let web = member_web(&sim, cluster).unwrap();
        assert_eq!(web["metadata"]["generation"], 2, "{cluster}: {web}");
    }
    // Two immutable revisions, owned by the placement; the columns say where it stands.
    let revisions = hub.json(&["get", "placementrevisions", "-n", "shop"]);
    let items = revisions["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{revisions}");
    let uid = done["metadata"]["uid"].clone();
    for r in items {
        assert_eq!(r["metadata"]["ownerReferences"][0]["uid"], uid, "{r}");
    }
    let refused = hub.kubectl(&[
        "patch",
        "placementrevision",
        "web-1",
        "-n",
        "shop",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"hash":"0000000000"}}"#,
    ]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("immutable"),
        "{}",
        text(&refused.stderr)
    );
    let table = hub.ok(&["get", "placements", "-n", "shop"]);
    let header = table.lines().next().unwrap();
    for column in ["REVISION", "UPDATED", "PROGRESSING"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table.lines().nth(1).unwrap();
    assert!(row.split_whitespace().any(|w| w == "2"), "{table}");
    let status = rollout(&hub, "status", &[]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(
        text(&status.stdout).contains("successfully rolled out (revision 2)"),
        "{}",
        text(&status.stdout)
    );
    // Each completion said once in an Event, the restart notwithstanding.
    let complete: Vec<String> = placement_events(&hub)
        .into_iter()
        .filter(|(_, reason, _)| reason == "RolloutComplete")
        .map(|(_, _, note)| note)
        .collect();
    assert_eq!(
        complete,
        [
            "revision 1 rolled out to all 10 clusters",
            "revision 2 rolled out to all 11 clusters"
        ],
        "{complete:?}"
    );

    // No old revision kept any more: an undo to revision 1 is refused and writes nothing.
    hub.ok(&[
        "patch",
        "placement",
        "web",
        "-n",
        "shop",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"revisionHistoryLimit":0}}"#,
    ]);
    eventually("revision 1 pruned", || {
        let revisions = hub.json(&["get", "placementrevisions", "-n", "shop"]);
        let names: Vec<&str> = revisions["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["metadata"]["name"].as_str())
            .collect();
        (names == ["web-2"])
            .then_some(())
            .ok_or_else(|| format!("{names:?}"))
    });
    let gone = rollout(&hub, "undo", &["--to-revision", "1"]);
    assert!(!gone.status.success());
    assert!(
        text(&gone.stderr).contains("revision 1 of placement \"web\" is not kept (kept: 2)"),
        "{}",
        text(&gone.stderr)
    );
    let after = placement(&hub);
    assert!(
        after["metadata"]["annotations"]["rollout.flotilla.io/undo-to"].is_null(),
        "{after}"
    );
}

#[test]
fn staged_rollout_with_approval_rollback_of_a_bad_image_and_undo() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&[
        "--clusters",
        "7",
        "--prefix",
        "m-",
        "--ready-delay",
        "300ms",
        "--fail-images",
        "^bad:",
    ]);
    let clusters: Vec<String> = (1..=7).map(|i| format!("m-{i}")).collect();
    join_labelled(&hub, &sim, "m-1", "ring=canary,region=us");
    for cluster in &clusters[1..5] {
        join_labelled(&hub, &sim, cluster, "region=eu");
    }
    for cluster in &clusters[5..] {
        join_labelled(&hub, &sim, cluster, "region=us");
    }
    hub.create(APP);
    hub.create(
        r#"
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  strategy:
    type: Staged
    progressDeadlineSeconds: 15
    rollback: Automatic
    stages:
    - name: canary
      clusters: {labelSelector: {matchLabels: {ring: canary}}}
    - name: eu
      clusters: {labelSelector: {matchLabels: {region: eu}}}
      maxConcurrency: 2
      soakSeconds: 2
      approval: Required
    - name: rest
"#,
    );
    wait_all(&sim, &clusters, "nginx:1.27");
    wait_progressing(&hub, "RolloutComplete");

    // Revision 2: the canary first; eu waits for its approval.
    set_image(&hub, "nginx:1.28");
    let waiting = wait_progressing(&hub, "WaitingForApproval");
    let rollout_status = &waiting["status"]["rollout"];
    assert_eq!(rollout_status["revision"], 2, "{waiting}");
    assert_eq!(rollout_status["stage"], "eu", "{waiting}");
    assert_eq!(
        image(&member_web(&sim, "m-1").unwrap()),
        "nginx:1.28",
        "the canary moved first"
    );
    for cluster in &clusters[1..] {
        assert_eq!(
            image(&member_web(&sim, cluster).unwrap()),
            "nginx:1.27",
            "{cluster} moved before its stage"
        );
    }
    let stages: Vec<&str> = rollout_status["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["canary", "eu", "rest"]);
    let following = rollout(&hub, "status", &["--watch=false"]);
    assert!(following.status.success());
    assert!(
        text(&following.stdout).contains("waits for an approval"),
        "{}",
        text(&following.stdout)
    );
    // An approval of a stage that does not exist is refused, and writes nothing.
    let unknown = rollout(&hub, "approve", &["--stage", "asia"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("has no stage \"asia\""),
        "{}",
        text(&unknown.stderr)
    );
    let approved = rollout(&hub, "approve", &["--stage", "eu"]);
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    wait_all(&sim, &clusters, "nginx:1.28");
    let done = wait_progressing(&hub, "RolloutComplete");
    let approvals = &done["status"]["rollout"]["approvals"];
    assert_eq!(approvals[0]["stage"], "eu", "{done}");
    assert_eq!(approvals[0]["revision"], 2, "{done}");
    assert!(
        !approvals[0]["by"].as_str().unwrap_or_default().is_empty(),
        "{done}"
    );
    let status = rollout(&hub, "status", &["--timeout", "2m"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    // An Event on the placement at each stage it reached.
    eventually("an Event for each stage", || {
        let events = hub.json(&[
            "get",
            "events",
            "-n",
            "shop",
            "--field-selector",
            "reason=StageStarted",
        ]);
        let notes: Vec<String> = events["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect();
        ["canary", "eu", "rest"]
            .iter()
            .all(|stage| {
                notes
                    .iter()
                    .any(|n| n.contains(&format!("revision 2 reached stage {stage}")))
            })
            .then_some(())
            .ok_or_else(|| format!("{notes:?}"))
    });

    // Revision 3, a bad image: the canary fails its gate and goes back; no other cluster
    // ever runs it.
    let watchers = Watchers::start(&sim, &clusters);
    let mut events = Vec::new();
    // Each watcher has seen the Deployment as it is before the change.
    watchers.wait_started(clusters.len(), &mut events);
    set_image(&hub, "bad:1");
    let failed = wait_progressing(&hub, "RevisionFailed");
    let message = condition(&failed, "Progressing").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("revision 3 failed on cluster m-1"),
        "{message}"
    );
    assert!(message.contains("ImagePullBackOff"), "{message}");
    assert_eq!(
        failed["status"]["rollout"]["failedRevisions"][0]["revision"],
        3
    );
    wait_all(&sim, &clusters, "nginx:1.28");
    let status = rollout(&hub, "status", &["--timeout", "2m"]);
    assert!(!status.status.success());
    let why = text(&status.stderr);
    assert!(
        why.contains("m-1") && why.contains("ImagePullBackOff"),
        "{why}"
    );
    // The halt and the rollback are said in Events on the placement.
    let notes = eventually("the halt and the rollback in Events", || {
        let events = placement_events(&hub);
        let has = |reason: &str| events.iter().any(|(_, r, _)| r == reason);
        (has("RolloutHalted") && has("RolledBack"))
            .then(|| events.clone())
            .ok_or_else(|| format!("{events:?}"))
    });
    let (kind, _, note) = notes.iter().find(|(_, r, _)| r == "RolloutHalted").unwrap();
    assert_eq!(kind, "Warning");
    assert!(
        note.contains("revision 3")
            && note.contains("cluster m-1")
            && note.contains("ImagePullBackOff"),
        "{note}"
    );
    let (_, _, note) = notes.iter().find(|(_, r, _)| r == "RolledBack").unwrap();
    assert_eq!(
        note,
        "revision 3 rolled back to revision 2 on 1 cluster: m-1"
    );
    // Let the canary's watcher catch up with its way back before replaying what they saw.
    eventually("the canary's watcher saw it back", || {
        watchers.drain(&mut events);
        let (_, images) = replay(&events, "bad:1");
        let canary = images.get("m-1").map(Vec::as_slice).unwrap_or_default();
        (canary.len() >= 3 && canary.last().map(String::as_str) == Some("nginx:1.28"))
            .then_some(())
            .ok_or_else(|| format!("{images:?}"))
    });
    let (_, images) = replay(&events, "bad:1");
    for (cluster, seen) in &images {
        if cluster == "m-1" {
            assert_eq!(seen, &["nginx:1.28", "bad:1", "nginx:1.28"], "the canary");
        } else {
            assert!(!seen.iter().any(|i| i == "bad:1"), "{cluster} saw {seen:?}");
        }
    }
    drop(watchers);

    // Fixing the template starts a new rollout (revision 4), canary first.
    set_image(&hub, "nginx:1.29");
    let waiting = wait_progressing(&hub, "WaitingForApproval");
    assert_eq!(waiting["status"]["rollout"]["revision"], 4, "{waiting}");
    assert!(
        waiting["status"]["rollout"]["failedRevisions"].is_null(),
        "{waiting}"
    );
    assert_eq!(image(&member_web(&sim, "m-1").unwrap()), "nginx:1.29");

    // Undo to revision 2: its objects come back as revision 5, a rollout of its own.
    let gone = rollout(&hub, "undo", &["--to-revision", "42"]);
    assert!(!gone.status.success());
    assert!(
        text(&gone.stderr).contains("not kept"),
        "{}",
        text(&gone.stderr)
    );
    let undo = rollout(&hub, "undo", &["--to-revision", "2"]);
    assert!(undo.status.success(), "{}", text(&undo.stderr));
    let waiting = eventually("revision 5 waits for eu's approval", || {
        let p = placement(&hub);
        let r = &p["status"]["rollout"];
        (r["revision"] == 5 && r["stage"] == "eu")
            .then(|| p.clone())
            .ok_or_else(|| r.to_string())
    });
    assert_eq!(
        image(&member_web(&sim, "m-1").unwrap()),
        "nginx:1.28",
        "{waiting}"
    );
    let approved = rollout(&hub, "approve", &["--stage", "eu"]);
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    wait_all(&sim, &clusters, "nginx:1.28");
    wait_progressing(&hub, "RolloutComplete");
    // Each completion in an Event: revisions 1, 2 and 5 (3 failed, 4 was undone).
    let complete = eventually("an Event for each completion", || {
        let notes: Vec<String> = placement_events(&hub)
            .into_iter()
            .filter(|(_, reason, _)| reason == "RolloutComplete")
            .map(|(_, _, note)| note)
            .collect();
        (notes.len() >= 3)
            .then(|| notes.clone())
            .ok_or_else(|| format!("{notes:?}"))
    });
    assert_eq!(
        complete,
        [
            "revision 1 rolled out to all 7 clusters",
            "revision 2 rolled out to all 7 clusters",
            "revision 5 rolled out to all 7 clusters"
        ]
    );
    let history = rollout(&hub, "history", &[]);
    assert!(history.status.success(), "{}", text(&history.stderr));
    let history = text(&history.stdout);
    let rows: Vec<&str> = history.lines().skip(2).collect();
    assert_eq!(rows.len(), 5, "{history}");
    assert!(rows[0].contains("first revision"), "{history}");
    assert!(rows[1].contains("Deployment shop/web changed"), "{history}");
}
