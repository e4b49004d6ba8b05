//! The fleet end to end: a real `flotilla hub`, real `flotilla sim` members joined with
//! `flotilla join`, and the real kubectl. A plain Deployment and a Placement go in; the
//! members run it divided and specialised; status comes back to the hub; drift is
//! corrected or reported; a member that stops answering gives its share away and gets it
//! back; deleting the Placement removes (or orphans) what it placed.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::fleet_scenario::{self, Members, wait_member};
use support::{Hub, Sim, condition, eventually_every, flotilla, join_labelled, signal};

/// [`support::eventually`], polling every 150 ms.
fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(150), probe)
}

/// `flotilla join` of `sim`'s member `cluster` with `labels`; panics unless it succeeds
/// and says so.
fn join(hub: &Hub, sim: &Sim, cluster: &str, labels: &str) {
    let stdout = join_labelled(hub, sim, cluster, labels);
    assert!(
        stdout.contains(&format!("cluster {cluster} joined")),
        "{stdout}"
    );
}

/// The hub's count of requests whose `apiserver_request_total` labels start with
/// `labels` (its controllers' own requests included), summed over the rest.
fn requests(hub: &Hub, labels: &str) -> f64 {
    let metrics = hub.ok(&["get", "--raw", "/metrics"]);
    let prefix = format!("apiserver_request_total{{{labels}");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_deployment_is_divided_specialised_kept_and_reported_across_the_fleet() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    // One simulator process per member, so that one can stop answering on its own.
    let small = Sim::start(&[
        "--clusters",
        "1",
        "--prefix",
        "small-",
        "--ready-delay",
        "200ms",
    ]);
    let large = Sim::start(&[
        "--clusters",
        "1",
        "--prefix",
        "large-",
        "--ready-delay",
        "200ms",
    ]);
    let us = Sim::start(&[
        "--clusters",
        "1",
        "--prefix",
        "us-",
        "--ready-delay",
        "200ms",
    ]);
    join(&hub, &small, "small-1", "region=eu,size=small");
    join(&hub, &large, "large-1", "region=eu,size=large");
    join(&hub, &us, "us-1", "region=us,size=large");
    // us-1 joins again, now in cluster set `americas`: its profile moves to the set's
    // namespace, labelled with the set.
    let out = flotilla(&[
        "join",
        "us-1",
        "--kubeconfig",
        us.kubeconfig("us-1").to_str().unwrap(),
        "--labels",
        "region=us,size=large",
        "--clusterset",
        "americas",
        "--hub-kubeconfig",
        hub.kubeconfig().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = eventually("us-1's profile is in its set's namespace", || {
        let out = hub.kubectl(&[
            "get",
            "clusterprofile",
            "us-1",
            "-n",
            "americas",
            "-o",
            "json",
        ]);
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap())
            .ok_or_else(String::new)
    });
    assert_eq!(
        profile["metadata"]["labels"]["multicluster.x-k8s.io/clusterset"],
        "americas"
    );
    assert_eq!(profile["spec"]["clusterManager"]["name"], "flotilla");
    // Owned by its Cluster: the hub's garbage collector takes it away with a Cluster that
    // is deleted without its finalizer, so a cluster re-created elsewhere leaves none behind.
    let cluster = hub.json(&["get", "cluster", "us-1"]);
    let owners = profile["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{profile}");
    assert_eq!(
        (&owners[0]["kind"], &owners[0]["name"], &owners[0]["uid"]),
        (
            &Value::from("Cluster"),
            &Value::from("us-1"),
            &cluster["metadata"]["uid"]
        ),
        "{profile}"
    );
    eventually("the profile outside the set is gone", || {
        let out = hub.kubectl(&["get", "clusterprofile", "us-1", "-n", "flotilla-system"]);
        (!out.status.success())
            .then_some(())
            .ok_or_else(String::new)
    });
    // Only the move looked for a profile across namespaces (a LIST of them all): the three
    // joins had none anywhere to look for.
    let lists = requests(
        &hub,
        r#"verb="LIST",group="multicluster.x-k8s.io",resource="clusterprofiles","#,
    );
    assert_eq!(lists, 1.0);
    let joined = Instant::now();
    let set = hub.json(&["get", "namespace", "americas"]);
    assert_eq!(
        set["metadata"]["labels"]["multicluster.x-k8s.io/clusterset"],
        "americas"
    );
    // The printer columns read the conditions (JSONPath filters).
    let clusters = hub.ok(&["get", "clusters"]);
    let row = clusters.lines().find(|l| l.starts_with("small-1")).unwrap();
    assert_eq!(row.split_whitespace().nth(1), Some("True"), "{clusters}");
    assert!(
        clusters.contains("small-1") && clusters.contains("us-1"),
        "{clusters}"
    );
    let profiles = hub.ok(&["get", "clusterprofiles", "-A"]);
    assert!(profiles.contains("large-1"), "{profiles}");

    let members = Members {
        small: &small,
        large: &large,
        us: &us,
    };
    fleet_scenario::deliver(&hub, &members);

    // Member clients are trusted while their credentials Secrets stand still (a watch of
    // the Secrets says when one changes). Past a recheck period (six health periods: 6 s
    // here), each Secret was still read once only, when its client was built.
    std::thread::sleep(Duration::from_secs(7).saturating_sub(joined.elapsed()));
    // Besides, each of the four `flotilla join`s above looked its Secret up once (to know
    // whether a failed join must remove it): 3 client builds + 4 lookups.
    let reads = requests(&hub, r#"verb="GET",group="",resource="secrets","#);
    assert_eq!(reads, 3.0 + 4.0);
    // A Secret that changes is read again, once: its client is rebuilt from it. (Sent as
    // a PUT of the whole object: `kubectl patch` and `annotate` read the Secret first.)
    let path = "/api/v1/namespaces/flotilla-system/secrets/cluster-small-1-kubeconfig";
    let mut secret: Value = serde_json::from_str(&hub.ok(&["get", "--raw", path])).unwrap();
    secret["metadata"]["annotations"] = serde_json::json!({"rotated": "1"});
    let file = hub.dir.path().join("rotated.json");
    std::fs::write(&file, secret.to_string()).unwrap();
    let before = requests(&hub, r#"verb="GET",group="",resource="secrets","#);
    hub.ok(&["replace", "--raw", path, "-f", file.to_str().unwrap()]);
    eventually("the changed Secret is read", || {
        let reads = requests(&hub, r#"verb="GET",group="",resource="secrets","#);
        (reads == before + 1.0)
            .then_some(())
            .ok_or_else(|| reads.to_string())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        requests(&hub, r#"verb="GET",group="",resource="secrets","#),
        before + 1.0
    );

    // A member that stops answering is not Ready; its share moves; it comes back.
    let frozen = large.pid();
    signal(frozen, "STOP");
    eventually("large-1 is not Ready", || {
        let c = hub.json(&["get", "cluster", "large-1"]);
        condition(&c, "Ready")
            .filter(|r| r["status"] == "False")
            .map(|_| ())
            .ok_or_else(|| c["status"].to_string())
    });
    wait_member(&small, "small-1", 12, "nginx:1.28");
    signal(frozen, "CONT");
    eventually("large-1 is Ready again", || {
        let c = hub.json(&["get", "cluster", "large-1"]);
        condition(&c, "Ready")
            .filter(|r| r["status"] == "True")
            .map(|_| ())
            .ok_or_else(|| c["status"].to_string())
    });
    wait_member(&small, "small-1", 4, "nginx:1.28");
    wait_member(&large, "large-1", 8, "nginx:1.28");

    fleet_scenario::release(&hub, &members);
}

#[test]
fn orphaned_objects_stay_bad_input_is_named_and_unjoin_cleans_up() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "2", "--ready-delay", "100ms"]);
    join(&hub, &sim, "member-1", "env=dev");
    join(&hub, &sim, "member-2", "env=dev");

    // A kubeconfig that does not work is refused at join, in one line.
    let bad = hub.dir.path().join("bad.kubeconfig");
    std::fs::write(&bad, "apiVersion: v1\nkind: Config\nclusters: []\n").unwrap();
    let out = flotilla(&[
        "join",
        "broken",
        "--kubeconfig",
        bad.to_str().unwrap(),
        "--hub-kubeconfig",
        hub.kubeconfig().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the kubeconfig of broken does not work"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!hub.ok(&["get", "clusters"]).contains("broken"));

    // Admission refuses what CEL can catch.
    let out = hub.kubectl_with(
        &["create", "-f", "-"],
        Some(r#"{"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"resourceSelectors": [], "replicas": {"mode": "Divided", "perCluster": {"min": 5, "max": 1}}}}"#),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("min must not be greater"),
        "{stderr}"
    );

    hub.create(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: default}
data: {mode: fast}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: "api:1"}]
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: zero, namespace: default}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: api}]
  replicas:
    mode: Divided
    weights: [{clusters: {names: [member-1]}, weight: 0}]
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: nowhere, namespace: default}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: settings}]
  clusters: {labelSelector: {matchLabels: {env: prod}}}
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: settings, namespace: default}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: settings}]
  apply: {deletion: Orphan}
---
apiVersion: flotilla.io/v1alpha1
kind: Override
metadata: {name: broken-on-2, namespace: default}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: settings}]
  clusters: {names: [member-2]}
  rules:
  - jsonPatch: [{op: replace, path: /data/missing/deeper, value: "x"}]
"#,
    );
    let scheduled = |name: &str| {
        eventually(&format!("placement {name} is judged"), || {
            let p = hub.json(&["get", "placement", name]);
            condition(&p, "Scheduled")
                .cloned()
                .ok_or_else(|| p["status"].to_string())
        })
    };
    let zero = scheduled("zero");
    assert_eq!(zero["status"], "False");
    assert!(
        zero["message"].as_str().unwrap().contains("weight 0"),
        "{zero}"
    );
    let nowhere = scheduled("nowhere");
    assert_eq!(nowhere["status"], "False");
    assert!(
        nowhere["message"]
            .as_str()
            .unwrap()
            .contains("no cluster matches"),
        "{nowhere}"
    );

    // The override fails on member-2 only: member-1 gets the ConfigMap; member-2's
    // condition names the override.
    sim.wait_for(
        "member-1",
        &["get", "configmap", "settings", "-n", "default"],
        |c| c["data"]["mode"] == "fast",
    );
    let failed = eventually("member-2 says why", || {
        let p = hub.json(&["get", "placement", "settings"]);
        p["status"]["clusters"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "member-2"))
            .and_then(|c| condition(&serde_json::json!({"status": c}), "Rendered").cloned())
            .ok_or_else(|| p["status"].to_string())
    });
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("default/broken-on-2"),
        "{failed}"
    );

    // deletion: Orphan keeps the member's copy, without the hub's marks.
    hub.ok(&["delete", "placement", "settings", "--wait=true"]);
    eventually("the copy is orphaned", || {
        let c = sim.json("member-1", &["get", "configmap", "settings"]);
        c["metadata"]["labels"]["flotilla.io/hub"]
            .is_null()
            .then_some(())
            .ok_or_else(|| c["metadata"].to_string())
    });

    // A custom resource goes where its CRD is served; the member without it says so and
    // does not hold the other back.
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
"#;
    hub.create(crd);
    sim.create("member-1", crd);
    eventually("the hub serves widgets", || {
        hub.kubectl(&["get", "widgets"])
            .status
            .success()
            .then_some(())
            .ok_or_else(String::new)
    });
    hub.create(
        r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {size: 3}
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: widgets, namespace: default}
spec:
  resourceSelectors: [{apiVersion: example.com/v1, kind: Widget}]
"#,
    );
    sim.wait_for("member-1", &["get", "widget", "w1", "-n", "default"], |w| {
        w["spec"]["size"] == 3
    });
    let missing = eventually("member-2 says the kind is not served", || {
        let p = hub.json(&["get", "placement", "widgets"]);
        p["status"]["clusters"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "member-2"))
            .and_then(|c| condition(&serde_json::json!({"status": c}), "Applied").cloned())
            // Not `Pending` (no sync yet): the sync's answer.
            .filter(|c| c["status"] == "False" && c["reason"] != "Pending")
            .ok_or_else(|| p["status"].to_string())
    });
    let message = missing["message"].as_str().unwrap();
    assert!(
        message.contains("does not serve example.com/v1 Widget"),
        "{missing}"
    );

    // Unjoining with --orphan leaves what the hub placed, without its marks.
    let out = flotilla(&[
        "unjoin",
        "member-1",
        "--orphan",
        "--hub-kubeconfig",
        hub.kubeconfig().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let w1 = sim.json("member-1", &["get", "widget", "w1", "-n", "default"]);
    assert!(
        w1["metadata"]["labels"]["flotilla.io/hub"].is_null(),
        "{w1}"
    );
    assert_eq!(w1["spec"]["size"], 3);

    // Unjoining removes the cluster, its Works namespace and its profile.
    let out = flotilla(&[
        "unjoin",
        "member-2",
        "--hub-kubeconfig",
        hub.kubeconfig().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!hub.ok(&["get", "clusters"]).contains("member-2"));
    assert!(
        !hub.ok(&["get", "ns"])
            .contains("flotilla-cluster-member-2 ")
    );
    let out = flotilla(&[
        "unjoin",
        "member-9",
        "--hub-kubeconfig",
        hub.kubeconfig().to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("has not joined"),
        "{stderr}"
    );
}

/// `flotilla_works_in_sync` on the hub's `/metrics`.
fn works_in_sync(hub: &Hub) -> Result<u64, String> {
    let text = hub.ok(&["get", "--raw", "/metrics"]);
    text.lines()
        .find_map(|l| l.strip_prefix("flotilla_works_in_sync "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .ok_or_else(|| "no flotilla_works_in_sync yet".to_owned())
}

/// Each Work of the placements in `many`, by name: its generation, once every one has
/// both manifests and reports that generation applied.
fn settled_works(hub: &Hub, count: usize) -> Result<Vec<(String, i64)>, String> {
    let works = hub.json(&["get", "works", "-n", "flotilla-cluster-member-1"]);
    let mut settled = Vec::new();
    for w in works["items"].as_array().into_iter().flatten() {
        let name = w["metadata"]["name"].as_str().unwrap_or_default();
        if !name.starts_with("many.") {
            continue;
        }
        let generation = w["metadata"]["generation"].as_i64().unwrap_or_default();
        let manifests = w["spec"]["manifests"].as_array().map_or(0, Vec::len);
        let applied = condition(w, "Applied").is_some_and(|c| c["status"] == "True");
        if manifests != 2
            || !applied
            || w["status"]["observedGeneration"].as_i64() != Some(generation)
        {
            return Err(format!("{name}: {manifests} manifests, {}", w["status"]));
        }
        settled.push((name.to_owned(), generation));
    }
    settled.sort();
    if settled.len() == count {
        Ok(settled)
    } else {
        Err(format!("{} of {count} Works settled", settled.len()))
    }
}

/// The uid of each ConfigMap `cm-*` in `many` on member-1.
fn member_configmaps(sim: &Sim) -> Vec<(String, String)> {
    let list = sim.json("member-1", &["get", "configmaps", "-n", "many"]);
    let mut uids: Vec<(String, String)> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let name = c["metadata"]["name"].as_str()?;
            name.starts_with("cm-").then(|| {
                (
                    name.to_owned(),
                    c["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                )
            })
        })
        .collect();
    uids.sort();
    uids
}

#[test]
fn a_hub_restart_takes_nothing_off_the_works_or_the_members() {
    // Many placements of one kind: when the hub starts again they reconcile at once,
    // while the cache of their templates is being filled.
    const PLACEMENTS: usize = 40;
    let mut hub = Hub::start();
    let sim = Sim::start(&["--clusters", "1", "--ready-delay", "100ms"]);
    join(&hub, &sim, "member-1", "env=dev");
    let mut manifests = String::from("apiVersion: v1\nkind: Namespace\nmetadata: {name: many}\n");
    for i in 0..PLACEMENTS {
        manifests.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: many}}\n\
             data: {{index: \"{i}\"}}\n\
             ---\napiVersion: flotilla.io/v1alpha1\nkind: Placement\n\
             metadata: {{name: p-{i}, namespace: many}}\n\
             spec: {{resourceSelectors: [{{apiVersion: v1, kind: ConfigMap, name: cm-{i}}}]}}\n"
        ));
    }
    hub.create(&manifests);
    let before = eventually("every Work applied", || settled_works(&hub, PLACEMENTS));
    let on_member = member_configmaps(&sim);
    assert_eq!(on_member.len(), PLACEMENTS, "{on_member:?}");
    // A hub on SQLite is the only process on its store: its controllers ran without an
    // election, so no Lease of theirs was ever written and no leader gauge is shown.
    let leases = hub.json(&["get", "leases", "-n", "flotilla-system"]);
    let names: Vec<_> = leases["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["metadata"]["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"flotilla-fleet") && !names.contains(&"flotilla-apiserver-controllers"),
        "{names:?}"
    );
    assert!(
        !hub.ok(&["get", "--raw", "/metrics"])
            .contains("flotilla_leader")
    );

    hub.restart(false);
    eventually("the restarted hub syncs every Work", || {
        let n = works_in_sync(&hub)?;
        if n >= PLACEMENTS as u64 {
            Ok(())
        } else {
            Err(format!("{n} in sync"))
        }
    });
    // Nothing was written to the Works (a generation moves with every change of their
    // manifests), and the members' objects were never deleted and made again.
    let after = eventually("every Work applied again", || {
        settled_works(&hub, PLACEMENTS)
    });
    assert_eq!(after, before);
    assert_eq!(member_configmaps(&sim), on_member);
}
