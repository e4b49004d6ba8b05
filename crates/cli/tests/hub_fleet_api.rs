//! The fleet API (`flotilla-api`) on a real hub: every CRD installed at start and served
//! to kubectl, the CEL rules enforced on writes, and the CRDs installed again, unchanged,
//! when the hub restarts.

mod support;

use support::Hub;

const FLOTILLA: [&str; 10] = [
    "clusters.flotilla.io",
    "clustersets.flotilla.io",
    "clustersetbindings.flotilla.io",
    "placements.flotilla.io",
    "clusterplacements.flotilla.io",
    "overrides.flotilla.io",
    "clusteroverrides.flotilla.io",
    "works.flotilla.io",
    "placementrevisions.flotilla.io",
    "computenamespaces.flotilla.io",
];

const MULTICLUSTER: [&str; 2] = [
    "clusterprofiles.multicluster.x-k8s.io",
    "placementdecisions.multicluster.x-k8s.io",
];

/// A Placement in `default`, its replicas section replaced by `replicas`.
fn placement(name: &str, replicas: &str) -> String {
    format!(
        r#"apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {{name: {name}, namespace: default}}
spec:
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  - {{apiVersion: v1, kind: ConfigMap, labelSelector: {{matchLabels: {{app: web}}}}}}
  clusters:
    clusterSets: [prod]
    labelSelector: {{matchLabels: {{tier: prod}}}}
    propertySelector: [{{name: allocatable-cpu, operator: Gt, value: "16"}}]
    tolerations: [{{key: maintenance, operator: Exists}}]
    count: 3
    spread: [{{topologyKey: topology.kubernetes.io/region, maxSkew: 1}}]
  replicas:
{replicas}
  strategy: {{type: Rolling, maxUnavailable: 1}}
  apply: {{conflict: Abort, drift: Correct, deletion: Delete}}
"#
    )
}

const GOOD_REPLICAS: &str = "    mode: Divided
    weights: [{clusters: {labelSelector: {matchLabels: {region: eu}}}, weight: 2}]
    perCluster: {min: 1, max: 20}";

fn resources(hub: &Hub, group: &str) -> Vec<String> {
    hub.ok(&[
        "api-resources",
        &format!("--api-group={group}"),
        "-o",
        "name",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// kubectl's stderr when it refuses `manifest`.
fn rejected(hub: &Hub, manifest: &str) -> String {
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(manifest));
    assert!(
        !out.status.success(),
        "accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn the_fleet_kinds_are_served_and_their_rules_enforced() {
    let hub = Hub::start();
    let mut flotilla = resources(&hub, "flotilla.io");
    flotilla.sort();
    let mut expected = FLOTILLA.map(str::to_owned).to_vec();
    expected.sort();
    assert_eq!(flotilla, expected);
    let mut multicluster = resources(&hub, "multicluster.x-k8s.io");
    multicluster.sort();
    assert_eq!(multicluster, MULTICLUSTER);
    let wide = hub.ok(&["api-resources", "--api-group=flotilla.io"]);
    let row = wide
        .lines()
        .find(|l| l.starts_with("placements "))
        .unwrap_or_else(|| panic!("{wide}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "placements",
            "pl",
            "flotilla.io/v1alpha1",
            "true",
            "Placement"
        ]
    );

    // A valid Placement, shown with its printer columns.
    let out = hub.kubectl_with(
        &["apply", "-f", "-"],
        Some(&placement("web", GOOD_REPLICAS)),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = hub.ok(&["get", "placements", "-n", "default"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SCHEDULED",
            "AVAILABLE",
            "REVISION",
            "UPDATED",
            "PROGRESSING",
            "AGE"
        ],
        "{table}"
    );
    assert!(table.lines().nth(1).unwrap().starts_with("web "), "{table}");
    let wide = hub.ok(&["get", "pl", "-n", "default", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SCHEDULED",
            "APPLIED",
            "AVAILABLE",
            "REVISION",
            "UPDATED",
            "PROGRESSING",
            "AGE"
        ],
        "{wide}"
    );
    // Defaults filled in by the schema.
    let stored = hub.json(&["get", "placement", "web", "-n", "default"]);
    assert_eq!(stored["spec"]["replicas"]["mode"], "Divided");
    assert_eq!(stored["spec"]["clusters"]["count"], 3);
    let names = hub.ok(&["get", "flotilla", "-A", "-o", "name"]);
    assert!(
        names.contains("placement.flotilla.io/web"),
        "category flotilla: {names}"
    );

    // perCluster.min above max, a negative weight: refused by the CEL rules, which name
    // the field.
    let err = rejected(
        &hub,
        &placement(
            "bounds",
            "    mode: Divided\n    perCluster: {min: 5, max: 2}",
        ),
    );
    assert!(
        err.contains("spec.replicas.perCluster")
            && err.contains(
                "replicas.perCluster.min must not be greater than replicas.perCluster.max"
            ),
        "{err}"
    );
    let err = rejected(
        &hub,
        &placement(
            "weights",
            "    mode: Divided\n    weights: [{clusters: {names: [eu-1]}, weight: -1}]",
        ),
    );
    assert!(
        err.contains("spec.replicas.weights[0].weight")
            && err.contains("replicas.weights[].weight must not be negative"),
        "{err}"
    );
    // A rolling strategy that could never move a cluster, and stages of another type.
    let err = rejected(
        &hub,
        &placement("frozen", GOOD_REPLICAS).replace(
            "{type: Rolling, maxUnavailable: 1}",
            "{type: Rolling, maxUnavailable: 0, maxSurge: '0%'}",
        ),
    );
    assert!(
        err.contains("spec.strategy") && err.contains("cannot both be 0"),
        "{err}"
    );
    let err = rejected(
        &hub,
        &placement("staged", GOOD_REPLICAS).replace(
            "{type: Rolling, maxUnavailable: 1}",
            "{type: Staged, stages: [{name: a}, {name: a}]}",
        ),
    );
    assert!(err.contains("stages[].name must be unique"), "{err}");
    let err = rejected(&hub, &placement("mode", "    mode: Halved"));
    assert!(err.contains("spec.replicas.mode"), "{err}");
    assert!(
        !hub.kubectl(&["get", "placement", "bounds", "-n", "default"])
            .status
            .success(),
        "a refused placement was stored"
    );

    // A Work and a Cluster show their columns too (a Work of no placement, written by
    // hand: no controller claims it).
    hub.create(
        r#"{"apiVersion":"flotilla.io/v1alpha1","kind":"Cluster","metadata":{"name":"eu-1","labels":{"region":"eu"}},
            "spec":{"clusterSet":"prod","access":{"push":{"secretRef":{"namespace":"flotilla-system","name":"eu-1"}}}}}"#,
    );
    let table = hub.ok(&["get", "clusters"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "VERSION", "AGE"], "{table}");
    // The hub makes each Cluster's Works namespace.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !hub
        .kubectl(&["get", "namespace", "flotilla-cluster-eu-1"])
        .status
        .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no Works namespace for eu-1"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    hub.create(
        r#"{"apiVersion":"flotilla.io/v1alpha1","kind":"Work","metadata":{"name":"default.by-hand","namespace":"flotilla-cluster-eu-1"},
            "spec":{"placement":{"namespace":"default","name":"by-hand"},"cluster":"eu-1",
            "manifests":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"default"},"data":{"k":"v"}}]}}"#,
    );
    let table = hub.ok(&["get", "works", "-A"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "CLUSTER",
            "APPLIED",
            "AVAILABLE",
            "AGE"
        ],
        "{table}"
    );
    assert!(table.contains(" eu-1 "), "{table}");
    let work = hub.json(&[
        "get",
        "work",
        "default.by-hand",
        "-n",
        "flotilla-cluster-eu-1",
    ]);
    assert_eq!(work["spec"]["manifests"][0]["data"]["k"], "v");

    // A PlacementDecision holds at most 100 decisions.
    let decisions: Vec<String> = (0..101)
        .map(|i| format!(r#"{{"clusterProfileRef":{{"name":"c{i}"}}}}"#))
        .collect();
    let err = rejected(
        &hub,
        &format!(
            r#"{{"apiVersion":"multicluster.x-k8s.io/v1alpha1","kind":"PlacementDecision","metadata":{{"name":"web","namespace":"default"}},"decisions":[{}]}}"#,
            decisions.join(",")
        ),
    );
    assert!(err.contains("decisions") && err.contains("100"), "{err}");
}

#[test]
fn a_restarted_hub_keeps_unchanged_crds_and_restores_edited_ones() {
    let mut hub = Hub::start();
    let versions = |hub: &Hub| -> Vec<String> {
        FLOTILLA
            .iter()
            .chain(MULTICLUSTER.iter())
            .map(|name| {
                let crd = hub.json(&["get", "crd", name]);
                crd["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let before = versions(&hub);
    let out = hub.kubectl_with(
        &["apply", "-f", "-"],
        Some(&placement("web", GOOD_REPLICAS)),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Someone edits one of them: the restart puts it back.
    hub.ok(&[
        "patch",
        "crd",
        "works.flotilla.io",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/versions/0/additionalPrinterColumns/0"}]"#,
    ]);
    let edited = hub.json(&["get", "crd", "works.flotilla.io"]);
    assert_eq!(
        edited["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"],
        "Placement"
    );
    hub.restart(false);
    let after = versions(&hub);
    let works = FLOTILLA
        .iter()
        .position(|n| *n == "works.flotilla.io")
        .unwrap();
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        if i == works {
            assert_ne!(a, b, "the edited CRD was not updated");
        } else {
            assert_eq!(a, b, "an unchanged CRD was written again");
        }
    }
    let restored = hub.json(&["get", "crd", "works.flotilla.io"]);
    assert_eq!(
        restored["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"],
        "Cluster"
    );
    assert_eq!(resources(&hub, "flotilla.io").len(), FLOTILLA.len());
    assert_eq!(
        resources(&hub, "multicluster.x-k8s.io").len(),
        MULTICLUSTER.len()
    );
    let placement = hub.json(&["get", "placement", "web", "-n", "default"]);
    assert_eq!(placement["spec"]["replicas"]["perCluster"]["max"], 20);
    // Still validated after the restart.
    let err = rejected(
        &hub,
        &self::placement(
            "bounds",
            "    mode: Divided\n    perCluster: {min: 5, max: 2}",
        ),
    );
    assert!(err.contains("spec.replicas.perCluster"), "{err}");
}

#[test]
fn a_crd_that_cannot_be_served_stops_the_hub_with_one_line() {
    let hub = Hub::start();
    // Another CRD takes the kind `Cluster` once the fleet API's is gone.
    hub.create(
        r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
            "metadata":{"name":"fleetclusters.flotilla.io"},
            "spec":{"group":"flotilla.io","scope":"Cluster","names":{"plural":"fleetclusters","kind":"Cluster"},
            "versions":[{"name":"v1alpha1","served":true,"storage":true,
            "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#,
    );
    hub.ok(&["delete", "crd", "clusters.flotilla.io", "--timeout=30s"]);
    let dir = hub.stop();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["hub", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the hub started despite the clash");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        errors,
        [
            "error: cannot install the fleet API: CRD clusters.flotilla.io: not served: \"Cluster\" is already in use by resource \"fleetclusters\""
        ],
        "{stderr}"
    );
}
