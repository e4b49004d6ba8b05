//! ComputeNamespace end to end: a real `flotilla hub`, real `flotilla sim` members joined
//! into ClusterSet `eu` with `flotilla join`, and the real kubectl. ComputeNamespace
//! `team-a` on `eu` gives each member the namespace, its ServiceAccount, LimitRange,
//! ResourceQuota and RoleBinding (and not the member outside `eu`); a member joining `eu`
//! later gets them too; a member-side edit of the quota is put back; the status says
//! where it stands per cluster; deleting the ComputeNamespace removes them.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Hub, Sim, eventually_every, join_with};

/// [`support::eventually`], polling every 200 ms.
fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(200), probe)
}

/// The issue's ComputeNamespace, as written there.
const TEAM_A: &str = r#"
apiVersion: flotilla.io/v1alpha1
kind: ComputeNamespace
metadata: {name: team-a}
spec:
  clusterSets: [eu]
  labels: {team: a}
  serviceAccounts: [{name: deployer}]
  limitRange: {limits: [{type: Container, default: {cpu: 500m}}]}
  resourceQuota: {hard: {pods: "10"}}
  roleBindings:
  - {name: team-a-edit, roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}, subjects: [{kind: Group, name: team-a}]}
"#;

/// `flotilla join` of `sim`'s member `cluster` into `set`.
fn join(hub: &Hub, sim: &Sim, cluster: &str, set: &str) {
    let stdout = join_with(hub, sim, cluster, &["--clusterset", set]);
    assert!(
        stdout.contains(&format!("cluster {cluster} joined")),
        "{stdout}"
    );
}

/// `kubectl get … -o json` on member `cluster`, or kubectl's complaint.
fn member_get(sim: &Sim, cluster: &str, args: &[&str]) -> Result<Value, String> {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let out = sim.kubectl(cluster, &all, None);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Member `cluster`'s quota of pods in `team-a`.
fn quota_pods(sim: &Sim, cluster: &str) -> Result<String, String> {
    let quota = member_get(sim, cluster, &["resourcequota", "team-a", "-n", "team-a"])?;
    Ok(quota["spec"]["hard"]["pods"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Waits until member `cluster` has every object of `team-a` as the hub has them.
fn wait_delivered(sim: &Sim, cluster: &str) {
    eventually(&format!("{cluster} has team-a"), || {
        let ns = member_get(sim, cluster, &["namespace", "team-a"])?;
        if ns["metadata"]["labels"]["team"] != "a" {
            return Err(format!("namespace labels: {}", ns["metadata"]["labels"]));
        }
        member_get(
            sim,
            cluster,
            &["serviceaccount", "deployer", "-n", "team-a"],
        )?;
        let limits = member_get(sim, cluster, &["limitrange", "team-a", "-n", "team-a"])?;
        let default = &limits["spec"]["limits"][0]["default"]["cpu"];
        if default != "500m" {
            return Err(format!("LimitRange default cpu: {default}"));
        }
        let pods = quota_pods(sim, cluster)?;
        if pods != "10" {
            return Err(format!("quota pods: {pods}"));
        }
        let binding = member_get(
            sim,
            cluster,
            &["rolebinding", "team-a-edit", "-n", "team-a"],
        )?;
        if binding["roleRef"]["name"] != "edit" || binding["subjects"][0]["name"] != "team-a" {
            return Err(format!("RoleBinding: {binding}"));
        }
        Ok(())
    });
}

/// The hub's ComputeNamespace `team-a` once its status is about its generation and says
/// `clusters` clusters, all ready.
fn wait_ready(hub: &Hub, clusters: i64) -> Value {
    eventually(&format!("team-a ready on {clusters} clusters"), || {
        let cns = hub.json(&["get", "computenamespace", "team-a"]);
        let status = &cns["status"];
        if status["observedGeneration"] == cns["metadata"]["generation"]
            && status["clusters"] == clusters
            && status["readyClusters"] == clusters
            && status["summary"] == "Ready"
        {
            Ok(cns)
        } else {
            Err(status.to_string())
        }
    })
}

#[test]
fn a_compute_namespace_is_the_same_on_every_member_of_its_set() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "5", "--prefix", "m-"]);
    for cluster in ["m-1", "m-2", "m-3"] {
        join(&hub, &sim, cluster, "eu");
    }
    join(&hub, &sim, "m-5", "us");
    hub.create(TEAM_A);

    // Each member of eu gets it; the member in us does not.
    for cluster in ["m-1", "m-2", "m-3"] {
        wait_delivered(&sim, cluster);
    }
    let cns = wait_ready(&hub, 3);
    let members: Vec<&str> = cns["status"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["m-1", "m-2", "m-3"]);
    assert!(
        member_get(&sim, "m-5", &["namespace", "team-a"])
            .unwrap_err()
            .contains("NotFound")
    );
    // The hub has the namespace too, for the team's Placements.
    hub.ok(&["get", "namespace", "team-a"]);
    // kubectl's table: clusters, ready, the summary.
    let table = hub.ok(&["get", "computenamespaces"]);
    let row = table.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..4], ["team-a", "3", "3", "Ready"], "{table}");

    // A fourth member joining eu gets it too.
    join(&hub, &sim, "m-4", "eu");
    wait_delivered(&sim, "m-4");
    wait_ready(&hub, 4);

    // A member-side edit of the quota is put back.
    sim.ok(
        "m-2",
        &[
            "patch",
            "resourcequota",
            "team-a",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"spec":{"hard":{"pods":"20"}}}"#,
        ],
    );
    eventually("m-2's quota put back", || {
        match quota_pods(&sim, "m-2")?.as_str() {
            "10" => Ok(()),
            other => Err(format!("pods: {other}")),
        }
    });
    wait_ready(&hub, 4);

    // A change on the hub reaches every member.
    hub.ok(&[
        "patch",
        "computenamespace",
        "team-a",
        "--type=merge",
        "-p",
        r#"{"spec":{"resourceQuota":{"hard":{"pods":"12"}}}}"#,
    ]);
    for cluster in ["m-1", "m-2", "m-3", "m-4"] {
        eventually(&format!("{cluster}'s quota is 12"), || {
            match quota_pods(&sim, cluster)?.as_str() {
                "12" => Ok(()),
                other => Err(format!("pods: {other}")),
            }
        });
    }

    // Deleting it removes it from every member (the finalizer waits for that).
    hub.ok(&["delete", "computenamespace", "team-a", "--timeout=120s"]);
    for cluster in ["m-1", "m-2", "m-3", "m-4"] {
        eventually(
            &format!("{cluster} no longer has team-a"),
            || match member_get(&sim, cluster, &["namespace", "team-a"]) {
                Err(e) if e.contains("NotFound") => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
    }
    let works = hub.ok(&["get", "works", "-A", "-o", "name"]);
    assert!(!works.contains("computenamespace.team-a"), "{works}");
}

#[test]
fn an_orphaned_compute_namespace_stays_on_the_members_and_bad_ones_are_refused() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--prefix", "m-"]);
    join(&hub, &sim, "m-1", "eu");
    hub.create(&format!("{TEAM_A}  deletionPolicy: Orphan\n"));
    wait_delivered(&sim, "m-1");
    wait_ready(&hub, 1);
    hub.ok(&["delete", "computenamespace", "team-a", "--timeout=120s"]);
    let works = hub.ok(&["get", "works", "-A", "-o", "name"]);
    assert!(!works.contains("computenamespace.team-a"), "{works}");
    // Left on the member, no longer managed by the hub.
    let quota = member_get(&sim, "m-1", &["resourcequota", "team-a", "-n", "team-a"]).unwrap();
    assert_eq!(quota["spec"]["hard"]["pods"], "10");
    assert!(
        quota["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null(),
        "{quota}"
    );

    // Refused with the rule's message, nothing written.
    let out = hub.kubectl_with(
        &["create", "-f", "-"],
        Some(
            "apiVersion: flotilla.io/v1alpha1\nkind: ComputeNamespace\n\
             metadata: {name: kube-team}\nspec: {clusterSets: [eu]}\n",
        ),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("must not be a system namespace"),
        "{stderr}"
    );
    let out = hub.kubectl(&["get", "computenamespace", "kube-team"]);
    assert!(!out.status.success());
}
