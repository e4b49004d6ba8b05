//! Hub replicas on one PostgreSQL, real processes: exactly one holds the fleet Lease
//! (`flotilla_leader` on `/metrics`, the Lease's holder); both serve the API; the fleet
//! scenario (join, place, status back) runs; kill -9 of the leader → the other takes the
//! Lease within 20 s and the placement converges after a template change, with the
//! members' unchanged objects keeping their resourceVersions; SIGTERM of the leader →
//! the Lease is released at once (no waiting out its 15 s) and taken over.
//!
//! ```text
//!  PostgreSQL ◄── hub A ─┐ flotilla-fleet Lease (flotilla-system): one holder
//!             ◄── hub B ─┘       │ fleet controllers ─► sim members m-1, m-2
//! ```

mod support;

#[path = "../../store-etcd/tests/support/etcd.rs"]
mod etcd;
#[path = "../../store-postgres/tests/support/postgres.rs"]
mod postgres;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Hub, Sim, condition, eventually, eventually_within, join_labelled, signal};

const FLEET_LEASE: &str = "flotilla-fleet";

/// The application: ConfigMap `shop/settings` and Deployment `shop/web` (2 × nginx:1.27)
/// placed on every `region=eu` cluster.
const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {colour: blue}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  - {apiVersion: v1, kind: ConfigMap, name: settings}
  clusters: {labelSelector: {matchLabels: {region: eu}}}
"#;

/// Whether `hub` says on `/metrics` that it holds Lease `lease` (None: not said yet).
fn leads(hub: &Hub, lease: &str) -> Option<bool> {
    let out = hub.kubectl(&["get", "--raw", "/metrics"]);
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!("flotilla_leader{{lease=\"{lease}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim() == "1")
}

/// The fleet Lease's holder and transitions, as `hub` serves it.
fn lease(hub: &Hub) -> (String, i64) {
    let lease = hub.json(&["get", "lease", FLEET_LEASE, "-n", "flotilla-system"]);
    (
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
    )
}

/// Which of `hubs` holds the fleet Lease, once exactly one says so (and the others say
/// they do not).
fn leader(hubs: &[&Hub], within: Duration) -> usize {
    eventually_within(
        "exactly one replica leads the fleet",
        within,
        Duration::from_millis(200),
        || {
            let said: Vec<Option<bool>> = hubs.iter().map(|h| leads(h, FLEET_LEASE)).collect();
            match said.iter().filter(|s| **s == Some(true)).count() {
                1 if said.iter().all(Option::is_some) => {
                    Ok(said.iter().position(|s| *s == Some(true)).unwrap())
                }
                _ => Err(format!("{said:?}")),
            }
        },
    )
}

/// `shop/NAME` of `kind` on member `cluster`.
fn member_object(sim: &Sim, cluster: &str, kind: &str, name: &str) -> Result<Value, String> {
    let out = sim.kubectl(
        cluster,
        &["get", kind, name, "-n", "shop", "-o", "json"],
        None,
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Waits until every member runs `image`.
fn wait_image(members: &[(&Sim, &str)], image: &str) {
    for (sim, cluster) in members {
        eventually(&format!("{cluster} runs {image}"), || {
            let web = member_object(sim, cluster, "deploy", "web")?;
            let got = web["spec"]["template"]["spec"]["containers"][0]["image"].clone();
            (got == image).then_some(()).ok_or(got.to_string())
        });
    }
}

/// The resourceVersions of `shop/settings` on the members.
fn settings_versions(members: &[(&Sim, &str)]) -> Vec<String> {
    members
        .iter()
        .map(|(sim, cluster)| {
            member_object(sim, cluster, "cm", "settings").unwrap()["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// kubectl writes and reads on `hub`.
fn serves(hub: &Hub, name: &str) {
    hub.create(&format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default"}}}}"#
    ));
    assert_eq!(hub.json(&["get", "cm", name])["metadata"]["name"], name);
    hub.ok(&["get", "--raw", "/readyz"]);
}

#[test]
fn two_replicas_on_postgres_one_leads_and_the_other_takes_over() {
    let pg = postgres::PgServer::start();
    let url = pg.url();
    let flags = ["--store", url.as_str(), "--health-period", "1s"];
    let mut hubs = vec![Hub::start_with(&flags), Hub::start_with(&flags)];
    let first = leader(&hubs.iter().collect::<Vec<_>>(), Duration::from_secs(30));
    let (holder, transitions) = lease(&hubs[0]);
    assert_eq!(lease(&hubs[1]).0, holder, "both replicas read one Lease");
    assert!(
        holder.contains(&format!("_{}_", hubs[first].pid())),
        "{holder}"
    );
    assert_eq!(transitions, 0);
    // Both serve the API, whether they lead or not.
    serves(&hubs[0], "on-a");
    serves(&hubs[1], "on-b");

    // The fleet scenario, whichever replica runs the controllers: members joined through
    // A, the application placed through B.
    let m1 = Sim::start(&["--clusters", "1", "--prefix", "m1-"]);
    let m2 = Sim::start(&["--clusters", "1", "--prefix", "m2-"]);
    join_labelled(&hubs[0], &m1, "m1-1", "region=eu");
    join_labelled(&hubs[0], &m2, "m2-1", "region=eu");
    let members = [(&m1, "m1-1"), (&m2, "m2-1")];
    hubs[1].create(APP);
    wait_image(&members, "nginx:1.27");
    for hub in &hubs {
        eventually("the placement is available", || {
            let p = hub.json(&["get", "placement", "web", "-n", "shop"]);
            condition(&p, "Available")
                .is_some_and(|c| c["status"] == "True")
                .then_some(())
                .ok_or_else(|| p["status"].to_string())
        });
        eventually("the template reports its 2 clusters available", || {
            let web = hub.json(&["get", "deploy", "web", "-n", "shop"]);
            let available = condition(&web, "Available");
            (web["status"]["readyReplicas"] == 2
                && available.is_some_and(|c| c["message"] == "2/2 clusters"))
            .then_some(())
            .ok_or_else(|| web["status"].to_string())
        });
    }
    let versions = settings_versions(&members);

    // kill -9 of the leader: the other takes the Lease within 20 s.
    signal(hubs[first].pid(), "KILL");
    let killed = Instant::now();
    let other = 1 - first;
    eventually_within(
        "the other replica takes the fleet Lease",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || match (leads(&hubs[other], FLEET_LEASE), lease(&hubs[other])) {
            (Some(true), (holder, 1)) => Ok(holder),
            got => Err(format!("{got:?}")),
        },
    );
    eprintln!(
        "fleet Lease taken over {:.1}s after kill -9",
        killed.elapsed().as_secs_f64()
    );
    // The placement converges after a template change; the members' unchanged objects
    // were not applied again (their resourceVersions are the same).
    hubs[other].ok(&["set", "image", "deploy/web", "-n", "shop", "web=nginx:1.28"]);
    wait_image(&members, "nginx:1.28");
    assert_eq!(settings_versions(&members), versions);
    serves(&hubs[other], "after-kill");

    // The killed replica comes back (a candidate); SIGTERM of the leader releases the
    // Lease on its way out, and the returned replica takes it without waiting for it to
    // expire.
    hubs[first].restart(true);
    assert_eq!(leads(&hubs[first], FLEET_LEASE), Some(false));
    let leader_pid = hubs[other].pid();
    let stopped = hubs.remove(other).stop();
    let (holder, transitions) = lease(&hubs[0]);
    assert!(
        !holder.contains(&format!("_{leader_pid}_")),
        "the stopped leader still holds the Lease: {holder}"
    );
    eventually("the returned replica leads", || {
        match (leads(&hubs[0], FLEET_LEASE), lease(&hubs[0])) {
            (Some(true), (holder, 2)) if !holder.is_empty() => Ok(()),
            got => Err(format!("{got:?}")),
        }
    });
    assert!(transitions <= 2);
    hubs[0].ok(&["set", "image", "deploy/web", "-n", "shop", "web=nginx:1.29"]);
    wait_image(&members, "nginx:1.29");
    drop(stopped);
}

#[test]
fn three_replicas_on_a_three_member_etcd_keep_serving_when_a_member_dies() {
    let mut cluster = etcd::EtcdCluster::start(3);
    let url = cluster.url("/flotilla");
    let flags = ["--store", url.as_str()];
    let hubs = [
        Hub::start_with(&flags),
        Hub::start_with(&flags),
        Hub::start_with(&flags),
    ];
    let all: Vec<&Hub> = hubs.iter().collect();
    let first = leader(&all, Duration::from_secs(30));
    let (holder, _) = lease(&hubs[0]);
    assert!(
        holder.contains(&format!("_{}_", hubs[first].pid())),
        "{holder}"
    );
    for (i, hub) in hubs.iter().enumerate() {
        serves(hub, &format!("before-{i}"));
    }

    // One etcd member dies: every replica's store client goes on with the others.
    cluster.kill9(0);
    for (i, hub) in hubs.iter().enumerate() {
        let name = format!("after-{i}");
        eventually(&format!("replica {i} writes and reads"), || {
            let out = hub.kubectl_with(
                &["create", "-f", "-"],
                Some(&format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default"}}}}"#
                )),
            );
            out.status
                .success()
                .then_some(())
                .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
        });
        // Every replica reads what each wrote.
        for other in &hubs {
            assert_eq!(other.json(&["get", "cm", &name])["metadata"]["name"], name);
        }
    }
    // The Lease stayed with its holder: no change of hands.
    assert_eq!(leader(&all, Duration::from_secs(30)), first);
    assert_eq!(lease(&hubs[0]), (holder, 0));
}
