//! ComputeNamespace end to end: a real `flotilla hub`, real `flotilla sim` members joined
//! into ClusterSet `eu` with `flotilla join`, and the real kubectl. ComputeNamespace
//! `team-a` on `eu` gives each member the namespace, its ServiceAccount, LimitRange,
//! ResourceQuota and RoleBinding (and not the member outside `eu`); a member joining `eu`
//! later gets them too; a member-side edit of the quota is put back; the status says
//! where it stands per cluster; deleting the ComputeNamespace removes them. On the hub,
//! its namespace gets its Roles and RoleBindings too (the team's grants for its
//! Placements), kept as its spec says; and only who may grant what it binds may write it.

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

/// Waits until the hub's namespace `team-a` has RoleBinding `name` to ClusterRole `role`,
/// labelled and owned by the ComputeNamespace; returns it.
fn wait_hub_binding(hub: &Hub, name: &str, role: &str) -> Value {
    eventually(&format!("the hub has RoleBinding team-a/{name}"), || {
        let out = hub.kubectl(&["get", "rolebinding", name, "-n", "team-a", "-o", "json"]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let binding: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        let owner = &binding["metadata"]["ownerReferences"][0];
        if binding["roleRef"]["name"] == role
            && binding["metadata"]["labels"]["flotilla.io/compute-namespace"] == "team-a"
            && owner["kind"] == "ComputeNamespace"
            && owner["name"] == "team-a"
        {
            Ok(binding)
        } else {
            Err(binding.to_string())
        }
    })
}

/// Waits until the hub has no `kind` `name` in namespace `team-a`.
fn wait_hub_gone(hub: &Hub, kind: &str, name: &str) {
    eventually(
        &format!("the hub no longer has {kind} team-a/{name}"),
        || {
            let out = hub.kubectl(&["get", kind, name, "-n", "team-a"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.success() {
                false if stderr.contains("NotFound") => Ok(()),
                _ => Err(format!("{}{stderr}", String::from_utf8_lossy(&out.stdout))),
            }
        },
    );
}

/// `kubectl auth can-i VERB RESOURCE -n team-a` on the hub, as user `someone` of group
/// `team-a`: kubectl's `yes` or `no`.
fn team_can(hub: &Hub, verb: &str, resource: &str) -> String {
    let out = hub.kubectl(&[
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        "team-a",
        "--as",
        "someone",
        "--as-group",
        "team-a",
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_compute_namespace_grants_its_team_on_the_hub_and_needs_its_writer_to_hold_them() {
    let hub = Hub::start();
    hub.create(TEAM_A);

    // The hub's team-a has the RoleBinding to edit: the team writes its Placements there.
    let binding = wait_hub_binding(&hub, "team-a-edit", "edit");
    assert_eq!(binding["subjects"][0]["name"], "team-a", "{binding}");
    let listed = hub.ok(&["get", "rolebinding", "-n", "team-a"]);
    assert!(listed.contains("team-a-edit"), "{listed}");
    eventually(
        "team-a may create placements on the hub",
        || match team_can(&hub, "create", "placements.flotilla.io").as_str() {
            "yes" => Ok(()),
            other => Err(other.to_owned()),
        },
    );
    assert_eq!(team_can(&hub, "create", "deployments.apps"), "yes");
    // Nowhere else.
    let out = hub.kubectl(&[
        "auth",
        "can-i",
        "create",
        "placements.flotilla.io",
        "-n",
        "default",
        "--as",
        "someone",
        "--as-group",
        "team-a",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");

    // The spec changed to a Role of its own, bound: the old binding goes, the new ones come.
    hub.ok(&[
        "patch",
        "computenamespace",
        "team-a",
        "--type=merge",
        "-p",
        r#"{"spec":{"roles":[{"name":"reader","rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list"]}]}],
            "roleBindings":[{"name":"team-a-read","roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"reader"},
                             "subjects":[{"kind":"Group","name":"team-a"}]}]}}"#,
    ]);
    wait_hub_binding(&hub, "team-a-read", "reader");
    wait_hub_gone(&hub, "rolebinding", "team-a-edit");
    let role = hub.json(&["get", "role", "reader", "-n", "team-a"]);
    assert_eq!(role["rules"][0]["resources"][0], "pods", "{role}");
    eventually(
        "team-a reads pods and no longer writes placements",
        || match (
            team_can(&hub, "list", "pods").as_str(),
            team_can(&hub, "create", "placements.flotilla.io").as_str(),
        ) {
            ("yes", "no") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // Its bindings removed from the spec: removed from the hub.
    hub.ok(&[
        "patch",
        "computenamespace",
        "team-a",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/roleBindings"}]"#,
    ]);
    wait_hub_gone(&hub, "rolebinding", "team-a-read");
    hub.ok(&["get", "role", "reader", "-n", "team-a"]);

    // A writer of ComputeNamespaces without `bind` is refused one binding cluster-admin
    // (403 naming the role, nothing written); `bind` on view lets it bind view.
    hub.create(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cns-writer}
rules:
- {apiGroups: [flotilla.io], resources: [computenamespaces], verbs: [create, get]}
- {apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind], resourceNames: [view]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cns-writer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cns-writer}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: mallory}]
"#,
    );
    let team_b = |role: &str| {
        format!(
            r#"
apiVersion: flotilla.io/v1alpha1
kind: ComputeNamespace
metadata: {{name: team-b}}
spec:
  clusterSets: [eu]
  roleBindings:
  - {{name: b, roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}, subjects: [{{kind: User, name: mallory}}]}}
"#
        )
    };
    let out = hub.kubectl_with(
        &["create", "-f", "-", "--as", "mallory"],
        Some(&team_b("cluster-admin")),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(Forbidden)")
            && stderr.contains("\"cluster-admin\"")
            && stderr.contains("cannot bind"),
        "{stderr}"
    );
    let out = hub.kubectl(&["get", "computenamespace", "team-b"]);
    assert!(!out.status.success());
    let out = hub.kubectl(&["get", "rolebinding", "b", "-n", "team-b"]);
    assert!(!out.status.success());
    // A Role of its own needs `escalate` too.
    let out = hub.kubectl_with(
        &["create", "-f", "-", "--as", "mallory"],
        Some(
            r#"
apiVersion: flotilla.io/v1alpha1
kind: ComputeNamespace
metadata: {name: team-b}
spec:
  clusterSets: [eu]
  roles: [{name: all, rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]}]
"#,
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("cannot escalate"),
        "{stderr}"
    );
    let out = hub.kubectl_with(
        &["create", "-f", "-", "--as", "mallory"],
        Some(&team_b("view")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Deleting the ComputeNamespace removes its grants from the hub (the namespace stays).
    hub.ok(&["delete", "computenamespace", "team-a", "--timeout=120s"]);
    wait_hub_gone(&hub, "role", "reader");
    hub.ok(&["get", "namespace", "team-a"]);
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
    // The hub has the namespace too, for the team's Placements, with its RoleBinding.
    hub.ok(&["get", "namespace", "team-a"]);
    wait_hub_binding(&hub, "team-a-edit", "edit");
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

#[test]
fn a_namespace_a_member_had_before_outlives_its_compute_namespace() {
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let sim = Sim::start(&["--clusters", "1", "--prefix", "m-"]);
    join(&hub, &sim, "m-1", "eu");
    // The member has team-a already, with someone's data in it.
    sim.ok("m-1", &["create", "namespace", "team-a"]);
    sim.ok(
        "m-1",
        &[
            "create",
            "configmap",
            "keep",
            "-n",
            "team-a",
            "--from-literal=k=v",
        ],
    );

    // Taken over (`Delete` is the default deletion policy) and marked as such.
    hub.create(TEAM_A);
    wait_delivered(&sim, "m-1");
    wait_ready(&hub, 1);
    let ns = member_get(&sim, "m-1", &["namespace", "team-a"]).unwrap();
    assert_eq!(
        ns["metadata"]["annotations"]["flotilla.io/adopted"], "true",
        "{ns}"
    );
    let quota = member_get(&sim, "m-1", &["resourcequota", "team-a", "-n", "team-a"]).unwrap();
    assert!(
        quota["metadata"]["annotations"]["flotilla.io/adopted"].is_null(),
        "{quota}"
    );

    // Deleted: what it made goes; the namespace it found stays, with what it held, given
    // back without the hub's marks.
    hub.ok(&["delete", "computenamespace", "team-a", "--timeout=120s"]);
    eventually("m-1's quota is deleted", || {
        match member_get(&sim, "m-1", &["resourcequota", "team-a", "-n", "team-a"]) {
            Err(e) if e.contains("NotFound") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let ns = member_get(&sim, "m-1", &["namespace", "team-a"]).unwrap();
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");
    assert!(
        ns["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null(),
        "{ns}"
    );
    assert!(
        ns["metadata"]["annotations"]["flotilla.io/adopted"].is_null(),
        "{ns}"
    );
    let kept = member_get(&sim, "m-1", &["configmap", "keep", "-n", "team-a"]).unwrap();
    assert_eq!(kept["data"]["k"], "v");
}
