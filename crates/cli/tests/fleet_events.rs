//! The fleet controllers' Kubernetes Events as an operator reads them with the real
//! kubectl: `describe placement` and `get events` show the placement scheduled, the
//! Works applied per cluster and drift corrected, and `describe cluster` a member that
//! stopped answering.

mod support;

use std::time::Duration;

use support::{EU_WEB, Hub, Sim, eventually_every, join_labelled, signal};

/// [`support::eventually`], polling every 200 ms.
fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(200), probe)
}

/// Polls `kubectl args` until its output has every one of `wanted` on one line; returns
/// that line.
fn shows(hub: &Hub, args: &[&str], wanted: &[&str]) -> String {
    eventually(&format!("kubectl {args:?} shows {wanted:?}"), || {
        let out = hub.kubectl(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find(|line| wanted.iter().all(|w| line.contains(w)))
            .map(str::to_owned)
            .ok_or(text)
    })
}

#[test]
fn describe_and_get_events_show_scheduling_applies_and_a_cluster_not_ready() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "2", "--ready-delay", "100ms"]);
    join_labelled(&hub, &sim, "member-1", "region=eu");
    join_labelled(&hub, &sim, "member-2", "region=eu");
    shows(&hub, &["describe", "cluster", "member-1"], &["Joined"]);
    shows(
        &hub,
        &["describe", "cluster", "member-1"],
        &["Normal", "Ready"],
    );
    hub.create(EU_WEB);

    // The placement's own Events, as `kubectl describe` finds them (core/v1, by
    // involvedObject), naming the clusters.
    shows(
        &hub,
        &["describe", "placement", "web", "-n", "shop"],
        &[
            "Normal",
            "Scheduled",
            "scheduled to 2 clusters: member-1, member-2",
        ],
    );
    shows(
        &hub,
        &["get", "events", "-n", "shop"],
        &["Scheduled", "placement/web", "member-1, member-2"],
    );
    // Each cluster's Work applied, in the cluster's namespace.
    shows(
        &hub,
        &["get", "events", "-n", "flotilla-cluster-member-1"],
        &["Applied", "work/shop.web", "applied on cluster member-1"],
    );

    // Someone scales member-1's copy: the hub puts it back, and says what it put back.
    sim.ok(
        "member-1",
        &["scale", "deploy", "web", "-n", "shop", "--replicas", "5"],
    );
    shows(
        &hub,
        &["get", "events", "-n", "flotilla-cluster-member-1"],
        &[
            "DriftCorrected",
            "work/shop.web",
            "Deployment shop/web: /spec/replicas",
        ],
    );

    // The placement moves: one Event says where to, the first stays.
    hub.ok(&["label", "cluster", "member-2", "region=us", "--overwrite"]);
    shows(
        &hub,
        &["describe", "placement", "web", "-n", "shop"],
        &["Rescheduled", "rescheduled to 1 cluster: member-1"],
    );
    shows(
        &hub,
        &["describe", "placement", "web", "-n", "shop"],
        &["Scheduled", "scheduled to 2 clusters"],
    );

    // The simulator dies: both clusters are NotReady, each saying so once.
    signal(sim.pid(), "KILL");
    shows(
        &hub,
        &["describe", "cluster", "member-1"],
        &["Warning", "NotReady", "does not answer"],
    );
    let events = hub.json(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        "involvedObject.name=member-1,reason=NotReady",
    ]);
    let items = events["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{events}");
    assert_eq!(items[0]["involvedObject"]["kind"], "Cluster");
    assert_eq!(items[0]["source"]["component"], "flotilla-fleet");
}
