//! Pull at scale end to end (issue 22): a real `flotilla hub`, and `flotilla sim --agents`
//! running one pull agent per simulated member inside its own process, each registered
//! through the real flow (an auto-approve bootstrap token the simulator makes through the
//! hub kubeconfig, a CSR, the hub's approval), with kubectl. The Clusters become Ready
//! with pull access, a Placement reaches every member, status comes back; the fleet
//! scenario (`support::fleet_scenario`, as `fleet.rs` runs it on push members) passes on
//! pull members.

mod support;

use serde_json::Value;
use std::collections::BTreeSet;
use support::fleet_scenario::{self, Members};
use support::pull::{pull_sim, wait_ready_pull_clusters};
use support::{Hub, condition, eventually};

const WORKLOAD: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx:1.27}]}
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  clusters: {labelSelector: {matchLabels: {mode: pull}}}
";

#[test]
fn sim_agents_register_through_the_real_flow_and_deliver_a_placement() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    // An hour between resyncs: what happens on a member (status, edits, deletions)
    // reaches the hub within this test only through the agents' member-side watches.
    let sim = pull_sim(
        &hub,
        5,
        "edge-",
        &["--labels", "mode=pull", "--resync-period", "1h"],
    );
    let names: BTreeSet<String> = (1..=5).map(|i| format!("edge-{i}")).collect();

    // Five Clusters, each with pull access as its own identity, no push access, and a
    // certificate of its own recorded (the serial the hub authenticates).
    let clusters = wait_ready_pull_clusters(&hub, &names);
    let mut serials = BTreeSet::new();
    for cluster in &clusters {
        let name = cluster["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            cluster["spec"]["access"]["pull"]["identity"],
            format!("system:flotilla:cluster:{name}"),
            "{cluster}"
        );
        assert!(cluster["spec"]["access"]["push"].is_null(), "{cluster}");
        assert_eq!(cluster["metadata"]["labels"]["mode"], "pull", "{cluster}");
        let serial = cluster["metadata"]["annotations"]["flotilla.io/certificate-serial"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!serial.is_empty(), "{cluster}");
        serials.insert(serial);
        // Its key and certificate are its own, readable by the simulator's user alone.
        let dir = sim.dir.path().join("agents").join(name);
        for file in ["agent.key", "agent.crt", "hub-ca.crt"] {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join(file))
                .unwrap_or_else(|e| panic!("{name}/{file}: {e}"))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}/{file}");
        }
        // The hub holds no credentials of the member.
        let out = hub.kubectl(&[
            "get",
            "secret",
            &format!("cluster-{name}-kubeconfig"),
            "-n",
            "flotilla-system",
        ]);
        assert!(!out.status.success(), "{name} has a push Secret");
    }
    assert_eq!(serials.len(), 5, "one certificate per agent: {serials:?}");
    // Registered with the token the simulator made: auto-approved, so nothing is pending.
    let csrs = hub.json(&["get", "csr"]);
    for csr in csrs["items"].as_array().unwrap() {
        assert!(
            condition(csr, "Approved").is_some_and(|c| c["status"] == "True"),
            "{csr}"
        );
    }

    // A Placement reaches all five members through their agents; status comes back (the
    // Deployments become available on the members after the agents applied them: only
    // the member-side watches tell the agents).
    hub.create(WORKLOAD);
    for name in &names {
        let web = sim.wait_for(name, &["get", "deployment", "web", "-n", "shop"], |d| {
            d["status"]["readyReplicas"] == 2
        });
        assert_eq!(
            web["metadata"]["labels"]["app.kubernetes.io/managed-by"], "flotilla",
            "{web}"
        );
        assert_eq!(
            web["metadata"]["annotations"]["flotilla.io/placement"], "shop/web",
            "{web}"
        );
    }
    let status = eventually("the placement is available on all five", || {
        let p = hub.json(&["get", "placement", "web", "-n", "shop"]);
        let listed: BTreeSet<String> = p["status"]["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect();
        (condition(&p, "Available").is_some_and(|c| c["status"] == "True") && listed == names)
            .then(|| p["status"].clone())
            .ok_or_else(|| p["status"].to_string())
    });
    assert_eq!(status["clusters"].as_array().unwrap().len(), 5, "{status}");
    // Duplicated: the template reports its replicas ready on every cluster.
    eventually("the hub's Deployment reports all five clusters", || {
        let web = hub.json(&["get", "deploy", "web", "-n", "shop"]);
        let all = condition(&web, "Available")
            .is_some_and(|c| c["status"] == "True" && c["message"] == "5/5 clusters");
        (all && web["status"]["readyReplicas"] == 2)
            .then_some(())
            .ok_or_else(|| web["status"].to_string())
    });
    // Every Work's status was written by its cluster's agent.
    let works = hub.json(&["get", "works", "-A"]);
    let applied: BTreeSet<String> = works["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| condition(w, "Applied").is_some_and(|c| c["status"] == "True"))
        .filter_map(|w| {
            w["metadata"]["namespace"]
                .as_str()?
                .strip_prefix("flotilla-cluster-")
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(applied, names);

    // A member-side deletion is re-created and a hand edit put back (drift: Correct), each
    // far sooner than the hour-long resync; an untouched member's Deployment keeps its
    // resourceVersion meanwhile (nothing re-applied when nothing changed).
    let settled = |member: &str| {
        sim.wait_for(member, &["get", "deployment", "web", "-n", "shop"], |d| {
            d["spec"]["replicas"] == 2
                && d["status"]["readyReplicas"] == 2
                && d["status"]["observedGeneration"] == d["metadata"]["generation"]
        })
    };
    let untouched = settled("edge-2")["metadata"]["resourceVersion"].clone();
    let before = settled("edge-1");
    sim.ok("edge-1", &["delete", "deployment", "web", "-n", "shop"]);
    let within = std::time::Duration::from_secs(60);
    let every = std::time::Duration::from_millis(200);
    support::eventually_within(
        "the deleted Deployment is re-created",
        within,
        every,
        || {
            let out = sim.kubectl(
                "edge-1",
                &["get", "deployment", "web", "-n", "shop", "-o", "json"],
                None,
            );
            let d: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
            (d["metadata"]["uid"] != before["metadata"]["uid"])
                .then_some(())
                .ok_or_else(|| "the old one".to_owned())
        },
    );
    settled("edge-1");
    sim.ok(
        "edge-1",
        &[
            "scale",
            "deployment",
            "web",
            "-n",
            "shop",
            "--replicas",
            "5",
        ],
    );
    support::eventually_within("the hand edit is put back", within, every, || {
        let d = sim.json("edge-1", &["get", "deployment", "web", "-n", "shop"]);
        let replicas =
            d["metadata"]["generation"].as_i64().unwrap_or(0) > 2 && d["spec"]["replicas"] == 2;
        replicas
            .then_some(())
            .ok_or_else(|| d["spec"]["replicas"].to_string())
    });
    assert_eq!(
        sim.json("edge-2", &["get", "deployment", "web", "-n", "shop"])["metadata"]["resourceVersion"],
        untouched
    );

    // Under drift: Report the edit stays and the Work reports it, through the watch too.
    hub.ok(&[
        "patch",
        "placement",
        "web",
        "-n",
        "shop",
        "--type",
        "merge",
        "-p",
        r#"{"spec": {"apply": {"drift": "Report"}}}"#,
    ]);
    support::eventually_within("the Work has drift: Report", within, every, || {
        let work = hub.json(&["get", "works", "-n", "flotilla-cluster-edge-3"]);
        let work = &work["items"][0];
        (work["spec"]["apply"]["drift"] == "Report"
            && work["status"]["observedGeneration"] == work["metadata"]["generation"])
            .then_some(())
            .ok_or_else(|| work.to_string())
    });
    sim.ok(
        "edge-3",
        &[
            "scale",
            "deployment",
            "web",
            "-n",
            "shop",
            "--replicas",
            "4",
        ],
    );
    let reported = support::eventually_within("the drift is reported", within, every, || {
        let work = hub.json(&["get", "works", "-n", "flotilla-cluster-edge-3"]);
        work["items"][0]["status"]["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|m| m["drift"].as_array().filter(|d| !d.is_empty()).cloned())
            .ok_or_else(|| work["items"][0]["status"].to_string())
    });
    assert_eq!(reported[0]["path"], "/spec/replicas", "{reported:?}");
    assert_eq!(reported[0]["member"], "4", "{reported:?}");
    assert_eq!(
        sim.json("edge-3", &["get", "deployment", "web", "-n", "shop"])["spec"]["replicas"],
        4
    );
}

/// `flotilla token create --auto-approve` on `hub`: the token.
fn auto_approve_token(hub: &Hub) -> String {
    let kubeconfig = hub.kubeconfig();
    let out = support::flotilla(&[
        "token",
        "create",
        "--auto-approve",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout.lines().next().unwrap().to_owned()
}

#[test]
fn the_fleet_scenario_passes_on_pull_clusters() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    // small-1's simulator makes its own token; the others use one made with
    // `flotilla token create --auto-approve`. The resync is an hour away: drift and
    // status reach the hub through the agents' member-side watches.
    let small = pull_sim(
        &hub,
        1,
        "small-",
        &["--labels", "region=eu,size=small", "--resync-period", "1h"],
    );
    let token = auto_approve_token(&hub);
    let large = pull_sim(
        &hub,
        1,
        "large-",
        &[
            "--labels",
            "region=eu,size=large",
            "--resync-period",
            "1h",
            "--token",
            &token,
        ],
    );
    let us = pull_sim(
        &hub,
        1,
        "us-",
        &[
            "--labels",
            "region=us,size=large",
            "--resync-period",
            "1h",
            "--token",
            &token,
        ],
    );
    let names: BTreeSet<String> = ["small-1", "large-1", "us-1"].map(str::to_owned).into();
    wait_ready_pull_clusters(&hub, &names);
    let members = Members {
        small: &small,
        large: &large,
        us: &us,
    };
    fleet_scenario::deliver(&hub, &members);
    fleet_scenario::release(&hub, &members);
}

/// A Work deleted while its agent holds back the new generation's status (the member's
/// rollout has not reported back: here it never does) releases what that generation
/// added, not only what the status the hub holds lists.
#[test]
fn a_work_deleted_while_its_status_is_held_releases_what_the_new_generation_added() {
    let hub = Hub::start();
    let kubeconfig = hub.kubeconfig();
    let sim = support::Sim::start(&[
        "--clusters",
        "1",
        "--prefix",
        "hold-",
        "--ready-delay",
        "1h",
        "--agents",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--heartbeat-period",
        "1s",
        "--labels",
        "mode=pull",
    ]);
    wait_ready_pull_clusters(&hub, &BTreeSet::from(["hold-1".to_owned()]));
    hub.create(WORKLOAD);
    // The first generation's status written (at the end of its wait): it lists the
    // Namespace and the Deployment.
    eventually("the Work's status lists the Deployment", || {
        let works = hub.json(&["get", "works", "-n", "flotilla-cluster-hold-1"]);
        let work = &works["items"][0];
        let kinds: Vec<&str> = work["status"]["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["kind"].as_str())
            .collect();
        (kinds == ["Namespace", "Deployment"])
            .then_some(())
            .ok_or_else(|| work.to_string())
    });
    // A second generation adds a ConfigMap; deleted as soon as the member has it, while
    // its status is held.
    hub.create(
        "apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: shop}
data: {k: v}
",
    );
    hub.ok(&[
        "patch",
        "placement",
        "web",
        "-n",
        "shop",
        "--type",
        "json",
        "-p",
        r#"[{"op": "add", "path": "/spec/resourceSelectors/-",
             "value": {"apiVersion": "v1", "kind": "ConfigMap", "name": "web-config"}}]"#,
    ]);
    sim.wait_for(
        "hold-1",
        &["get", "configmap", "web-config", "-n", "shop"],
        |_| true,
    );
    hub.ok(&["delete", "placement", "web", "-n", "shop", "--wait=false"]);
    eventually("both objects are released", || {
        let mut left = Vec::new();
        for kind in ["deployment/web", "configmap/web-config"] {
            let out = sim.kubectl("hold-1", &["get", kind, "-n", "shop"], None);
            if out.status.success() {
                left.push(kind);
            }
        }
        left.is_empty()
            .then_some(())
            .ok_or_else(|| format!("still there: {left:?}"))
    });
}

/// An agent renews its heartbeat Lease as the kubelet renews its node's: by updating the
/// Lease it last wrote, with no read before each update (read from the hub's audit log:
/// its reads all come before it creates the Lease). When someone else changes the
/// Lease, the agent's next update conflicts (409); it reads the Lease again and goes on
/// renewing it. As the kubelet reports an unchanged node status, it reports its member's
/// unchanged facts seldom.
#[test]
fn an_agent_renews_its_lease_as_the_kubelet_does_and_reports_unchanged_facts_seldom() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("audit.log");
    let hub = Hub::start_with(&["--audit-log-path", log.to_str().unwrap()]);
    let _sim = pull_sim(&hub, 1, "beat-", &[]);
    wait_ready_pull_clusters(&hub, &BTreeSet::from(["beat-1".to_owned()]));
    let namespace = "flotilla-cluster-beat-1";
    // The agent's answered requests on its Lease, in order: (verb, code).
    let lease_requests = || -> Vec<(String, i64)> {
        support::audit::events(&log)
            .iter()
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["user"]["username"] == "system:flotilla:cluster:beat-1"
            })
            .map(support::audit::summary)
            .filter(|(_, resource, ns, name, _)| {
                resource == "leases" && ns == namespace && name == "flotilla-agent"
            })
            .map(|(verb, _, _, _, code)| (verb, code))
            .collect()
    };
    let updates = |requests: &[(String, i64)]| {
        requests
            .iter()
            .filter(|r| *r == &("update".to_owned(), 200))
            .count()
    };
    let renewed = eventually("five renewals of the Lease", || {
        let requests = lease_requests();
        (updates(&requests) >= 5)
            .then_some(requests.clone())
            .ok_or_else(|| format!("{requests:?}"))
    });
    // Read (404) as the agent starts (whether it is let in yet) and before its create;
    // after the create, nothing but updates.
    let created = renewed
        .iter()
        .position(|r| *r == ("create".to_owned(), 201))
        .unwrap_or_else(|| panic!("no create: {renewed:?}"));
    assert!(
        renewed[..created]
            .iter()
            .all(|r| *r == ("get".to_owned(), 404)),
        "{renewed:?}"
    );
    assert!(
        renewed[created + 1..]
            .iter()
            .all(|r| *r == ("update".to_owned(), 200)),
        "renewed without reading: {renewed:?}"
    );

    // Someone else writes the Lease: the agent's next update conflicts, it reads the
    // Lease again, and its updates succeed again.
    hub.ok(&[
        "annotate",
        "lease",
        "flotilla-agent",
        "-n",
        namespace,
        "touched=yes",
    ]);
    let before = renewed.len();
    let after = eventually("a conflict, a read, then renewals again", || {
        let requests = lease_requests();
        let since = requests.get(before..).unwrap_or_default().to_vec();
        let conflict = since.iter().position(|r| *r == ("update".to_owned(), 409));
        match conflict {
            Some(at) if updates(&since[at..]) >= 2 => Ok(since[at..].to_vec()),
            _ => Err(format!("{since:?}")),
        }
    });
    assert_eq!(
        after[1],
        ("get".to_owned(), 200),
        "read after the conflict: {after:?}"
    );
    assert_eq!(
        after.iter().filter(|(verb, _)| verb == "get").count(),
        1,
        "one read for the conflict: {after:?}"
    );
    let lease = hub.json(&["get", "lease", "flotilla-agent", "-n", namespace]);
    assert_eq!(
        lease["metadata"]["annotations"]["touched"], "yes",
        "{lease}"
    );

    // The member's facts are looked at every 6 beats but reported only when they change
    // (or after 30 beats): over 14 beats of a member whose facts stay the same, once.
    eventually("fourteen renewals of the Lease", || {
        let requests = lease_requests();
        (updates(&requests) >= 14)
            .then_some(())
            .ok_or_else(|| format!("{requests:?}"))
    });
    let facts: Vec<_> = support::audit::events(&log)
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == "system:flotilla:cluster:beat-1"
                && e["objectRef"]["resource"] == "clusters"
                && e["objectRef"]["subresource"] == "status"
        })
        .map(support::audit::summary)
        .collect();
    assert_eq!(facts.len(), 1, "the facts reported once: {facts:?}");
}
