//! End to end: a real `flotilla sim` process driven by the real kubectl through the
//! kubeconfigs it writes, one per member cluster.

mod support;

use serde_json::{Value, json};
use support::Sim;

fn workload(kind: &str, name: &str, spec: Value, cpu: &str, image: &str) -> String {
    let api_version = if kind == "Job" { "batch/v1" } else { "apps/v1" };
    let mut spec = spec;
    spec["template"] = json!({"metadata": {"labels": {"app": name}}, "spec": {
        "restartPolicy": if kind == "Job" { "Never" } else { "Always" },
        "containers": [{"name": "main", "image": image,
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}});
    if kind != "Job" {
        spec["selector"] = json!({"matchLabels": {"app": name}});
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec})
        .to_string()
}

fn deployment(name: &str, replicas: u32, cpu: &str, image: &str) -> String {
    workload(
        "Deployment",
        name,
        json!({"replicas": replicas}),
        cpu,
        image,
    )
}

fn condition<'a>(object: &'a Value, kind: &str) -> &'a Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn names(sim: &Sim, cluster: &str, args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.extend(["-o", "name"]);
    sim.ok(cluster, &all).lines().map(str::to_owned).collect()
}

#[test]
fn members_have_nodes_properties_and_workloads_that_get_ready() {
    let mut sim = Sim::start(&[
        "--clusters",
        "3",
        "--ready-delay",
        "200ms",
        "--fail-images",
        r"^registry\.invalid/",
    ]);
    for member in ["member-1", "member-2", "member-3"] {
        assert!(sim.kubeconfig(member).exists(), "{member}");
    }
    assert!(!sim.kubeconfig("member-4").exists());

    // Three Ready nodes of 8 CPUs, and the cluster's ID in the About API.
    let nodes = sim.ok("member-2", &["get", "nodes"]);
    let rows: Vec<Vec<&str>> = nodes
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{nodes}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], format!("member-2-node-{}", i + 1), "{nodes}");
        assert_eq!(row[1], "Ready", "{nodes}");
        assert_eq!(row[4], "v1.32.0-flotilla", "{nodes}");
    }
    let node = sim.json("member-2", &["get", "node", "member-2-node-1"]);
    assert_eq!(node["status"]["allocatable"]["cpu"], "8");
    assert_eq!(node["status"]["capacity"]["memory"], "32Gi");
    let properties = sim.ok("member-2", &["get", "clusterproperties"]);
    let row = properties
        .lines()
        .find(|l| l.starts_with("cluster.clusterset.k8s.io "))
        .unwrap_or_else(|| panic!("{properties}"));
    assert!(row.contains(" member-2 "), "{properties}");

    // A Deployment that fits becomes Available.
    sim.create("member-2", &deployment("web", 2, "100m", "nginx:1.27"));
    sim.ok(
        "member-2",
        &[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "--timeout=60s",
        ],
    );
    let web = sim.json("member-2", &["get", "deployment", "web"]);
    assert_eq!(web["status"]["readyReplicas"], 2);
    assert_eq!(web["status"]["observedGeneration"], 1);
    let table = sim.ok("member-2", &["get", "deployment", "web"]);
    assert!(table.lines().nth(1).unwrap().contains(" 2/2 "), "{table}");

    // One whose image fails to pull stays unready, and says why.
    sim.create(
        "member-2",
        &deployment("broken", 1, "100m", "registry.invalid/app:1"),
    );
    let broken = sim.wait_for("member-2", &["get", "deployment", "broken"], |d| {
        !condition(d, "Available").is_null()
    });
    assert_eq!(broken["status"]["readyReplicas"], 0);
    assert_eq!(condition(&broken, "Available")["status"], "False");
    let reason = sim.ok(
        "member-2",
        &[
            "get",
            "deployment",
            "broken",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Available")].reason}"#,
        ],
    );
    assert_eq!(reason, "ImagePullBackOff");

    // One asking for more than the room left gets what fits: 24 CPUs less 0.3 in use
    // leave room for 5 pods of 4 CPUs.
    sim.create("member-2", &deployment("big", 10, "4", "nginx:1.27"));
    let big = sim.wait_for("member-2", &["get", "deployment", "big"], |d| {
        !condition(d, "Available").is_null()
    });
    assert_eq!(big["status"]["readyReplicas"], 5, "{big}");
    assert_eq!(
        condition(&big, "Available")["reason"],
        "InsufficientCapacity"
    );

    // A DaemonSet runs on every node; a Job completes.
    sim.create(
        "member-3",
        &workload("DaemonSet", "agent", json!({}), "10m", "agent:1"),
    );
    sim.create(
        "member-3",
        &workload(
            "Job",
            "once",
            json!({"completions": 2, "parallelism": 2}),
            "100m",
            "busybox",
        ),
    );
    sim.ok(
        "member-3",
        &[
            "wait",
            "--for=condition=Complete",
            "job/once",
            "--timeout=60s",
        ],
    );
    let agent = sim.wait_for("member-3", &["get", "daemonset", "agent"], |d| {
        d["status"]["numberReady"] == 3
    });
    assert_eq!(agent["status"]["desiredNumberScheduled"], 3);

    // Members are isolated from each other.
    assert!(names(&sim, "member-1", &["get", "deployments", "-A"]).is_empty());
    assert!(names(&sim, "member-1", &["get", "jobs", "-A"]).is_empty());
    assert_eq!(
        names(&sim, "member-1", &["get", "nodes"]),
        [
            "node/member-1-node-1",
            "node/member-1-node-2",
            "node/member-1-node-3"
        ]
    );
    let id = sim.json(
        "member-1",
        &["get", "clusterproperty", "cluster.clusterset.k8s.io"],
    );
    assert_eq!(id["spec"]["value"], "member-1");

    // After SIGTERM and a restart on the same data directory, everything is still there
    // (nothing made twice) and the simulator carries on.
    sim.restart();
    assert_eq!(names(&sim, "member-2", &["get", "nodes"]).len(), 3);
    assert_eq!(
        names(&sim, "member-2", &["get", "clusterproperties"]),
        ["clusterproperty.about.k8s.io/cluster.clusterset.k8s.io"]
    );
    assert_eq!(
        names(&sim, "member-2", &["get", "deployments"]),
        [
            "deployment.apps/big",
            "deployment.apps/broken",
            "deployment.apps/web"
        ]
    );
    let web = sim.json("member-2", &["get", "deployment", "web"]);
    assert_eq!(web["status"]["readyReplicas"], 2);
    sim.ok("member-2", &["scale", "deployment", "web", "--replicas=3"]);
    sim.wait_for("member-2", &["get", "deployment", "web"], |d| {
        d["status"]["readyReplicas"] == 3 && d["status"]["observedGeneration"] == 2
    });
}

#[test]
fn bad_flags_are_one_line_and_a_failure() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["sim", "--clusters", "2", "--node-memory", "lots"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid quantity \"lots\""), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let prefix = "p".repeat(62);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["sim", "--clusters", "10", "--prefix", &prefix, "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: --prefix"), "{err}");
}
