//! Every file in `examples/` applied to a real `flotilla hub` with simulated members, and
//! its effect checked on the members as the file's comment says. The fleet is the one
//! `examples/README.md` describes (the walkthrough's three clusters and two bigger ones,
//! one tainted), made by the `flotilla sim` and `flotilla join` commands of the two READMEs.
//! One hub and two simulators serve every example, side by side in their own namespaces.

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use support::{Hub, Sim, eventually, image, join_with, repo_root, sh_blocks};

/// The example files this test applies (paths under `examples/`).
const APPLIED: [&str; 7] = [
    "divided.yaml",
    "property-selector.yaml",
    "tolerations.yaml",
    "override-variables.yaml",
    "drift-report.yaml",
    "crd/crd.yaml",
    "crd/instances.yaml",
];

/// The example files the README's walkthrough applies (`readme_walkthrough.rs` runs it).
const WALKTHROUGH: [&str; 4] = [
    "web/namespace.yaml",
    "web/deployment.yaml",
    "web/placement.yaml",
    "web/override.yaml",
];

/// The example folders with a test of their own (`platform.rs` runs `platform/`'s
/// walkthrough), left out here.
const OWN_TESTS: [&str; 1] = ["platform"];

/// Every `.yaml` file under `dir`, as paths relative to `root` (but [`OWN_TESTS`]).
fn yaml_files(root: &Path, dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && OWN_TESTS.iter().any(|d| path == root.join(d)) {
            continue;
        }
        if path.is_dir() {
            yaml_files(root, &path, found);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let relative = path.strip_prefix(root).unwrap();
            found.insert(relative.to_str().unwrap().to_owned());
        }
    }
}

/// The `flotilla sim` and `flotilla join` commands of the ```sh blocks under `heading` in
/// `markdown`, each as its words up to a redirection or `&`.
fn fleet_commands(markdown: &str, heading: &str) -> Vec<Vec<String>> {
    sh_blocks(markdown, heading)
        .iter()
        .flat_map(|block| block.lines())
        .filter(|l| l.starts_with("flotilla sim ") || l.starts_with("flotilla join "))
        .map(|l| {
            l.split_whitespace()
                .take_while(|w| !w.starts_with('>') && *w != "&" && !w.starts_with('#'))
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// The value of `--flag` in `words`.
fn flag<'a>(words: &'a [String], flag: &str) -> &'a str {
    let at = words.iter().position(|w| w == flag);
    at.and_then(|i| words.get(i + 1))
        .unwrap_or_else(|| panic!("no {flag} in {words:?}"))
}

/// `words` without the flags `drop` and their values.
fn without(words: &[String], drop: &[&str]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if drop.contains(&word.as_str()) {
            words.next();
        } else {
            kept.push(word.clone());
        }
    }
    kept
}

/// The examples' fleet, made by the commands of the README's walkthrough and of
/// examples/README.md (their own data directories and free ports instead of `--data-dir`
/// and `--listen`; the simulators make workloads ready in 200 ms, the hub probes every
/// second).
struct Fleet {
    hub: Hub,
    /// Each simulator with its `--data-dir` in the commands.
    sims: Vec<(String, Sim)>,
    /// Each joined cluster and its simulator's index in `sims`, in the order joined.
    clusters: Vec<(String, usize)>,
}

impl Fleet {
    fn start(commands: &[Vec<String>]) -> Fleet {
        let hub = Hub::start_with(&["--health-period", "1s"]);
        let mut fleet = Fleet {
            hub,
            sims: Vec::new(),
            clusters: Vec::new(),
        };
        for words in commands {
            if words[1] == "sim" {
                let dir = flag(words, "--data-dir").to_owned();
                let mut args = without(&words[2..], &["--data-dir", "--listen"]);
                args.extend(["--ready-delay".into(), "200ms".into()]);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                fleet.sims.push((dir, Sim::start(&args)));
            } else {
                let name = words[2].clone();
                let kubeconfig = flag(words, "--kubeconfig");
                let sim = fleet
                    .sims
                    .iter()
                    .position(|(dir, _)| kubeconfig.starts_with(&format!("{dir}/")))
                    .unwrap_or_else(|| panic!("no simulator serves {kubeconfig}"));
                let more = without(&words[3..], &["--kubeconfig"]);
                let more: Vec<&str> = more.iter().map(String::as_str).collect();
                join_with(&fleet.hub, &fleet.sims[sim].1, &name, &more);
                fleet.clusters.push((name, sim));
            }
        }
        fleet
    }

    fn sim(&self, cluster: &str) -> &Sim {
        let (_, sim) = self
            .clusters
            .iter()
            .find(|(name, _)| name == cluster)
            .unwrap_or_else(|| panic!("{cluster} has not joined"));
        &self.sims[*sim].1
    }

    /// `kubectl get KIND NAME -n NAMESPACE -o json` on `cluster`: the object, or why not.
    fn get(&self, cluster: &str, kind: &str, name: &str, namespace: &str) -> Result<Value, String> {
        let mut args = vec!["get", kind, name, "-o", "json"];
        if !namespace.is_empty() {
            args.extend(["-n", namespace]);
        }
        let out = self.sim(cluster).kubectl(cluster, &args, None);
        if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout).unwrap())
        } else {
            Err(format!(
                "{cluster}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Whether `cluster` has no such object (kubectl says NotFound).
    fn absent(&self, cluster: &str, kind: &str, name: &str, namespace: &str) -> bool {
        matches!(self.get(cluster, kind, name, namespace), Err(e) if e.contains("NotFound"))
    }

    /// Waits until `cluster` has the object and `check` holds for it; returns it.
    fn wait(
        &self,
        cluster: &str,
        (kind, name, namespace): (&str, &str, &str),
        check: impl Fn(&Value) -> Result<(), String>,
    ) -> Value {
        eventually(&format!("{kind} {namespace}/{name} on {cluster}"), || {
            let object = self.get(cluster, kind, name, namespace)?;
            check(&object).map(|()| object)
        })
    }

    /// Waits until `cluster` runs Deployment `namespace/name` with `replicas`.
    fn wait_replicas(&self, cluster: &str, name: &str, namespace: &str, replicas: i64) {
        self.wait(cluster, ("deploy", name, namespace), |d| {
            let got = &d["spec"]["replicas"];
            (*got == replicas)
                .then_some(())
                .ok_or_else(|| format!("replicas {got}"))
        });
    }

    /// `kubectl apply -f examples/FILE` on the hub.
    fn apply(&self, file: &str) {
        let path = repo_root().join("examples").join(file);
        self.hub.ok(&["apply", "-f", path.to_str().unwrap()]);
    }

    /// The placement's status once `ready` holds for it.
    fn placement_status(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually(&format!("{kind} {name}'s status"), || {
            let mut args = vec!["get", kind, name];
            if !namespace.is_empty() {
                args.extend(["-n", namespace]);
            }
            let status = self.hub.json(&args)["status"].clone();
            ready(&status)
                .then_some(status.clone())
                .ok_or_else(|| status.to_string())
        })
    }
}

/// The reason `status` gives for excluding `cluster`, if it does.
fn excluded_reason(status: &Value, cluster: &str) -> Option<String> {
    status["excluded"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == cluster)
        .map(|e| e.to_string())
}

/// The value of environment variable `name` in the first container of a Deployment.
fn env(deployment: &Value, name: &str) -> Option<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

#[test]
fn every_example_does_what_its_comment_says() {
    // Every example file is applied here or by the walkthrough's test: a new example
    // without a test fails this.
    let dir = repo_root().join("examples");
    let mut found = BTreeSet::new();
    yaml_files(&dir, &dir, &mut found);
    let tested: BTreeSet<String> = APPLIED
        .iter()
        .chain(&WALKTHROUGH)
        .map(|f| (*f).to_owned())
        .collect();
    assert_eq!(found, tested, "examples/ and the tests' lists differ");

    // The fleet of examples/README.md: the walkthrough's, and two bigger clusters.
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples = std::fs::read_to_string(root.join("examples/README.md")).unwrap();
    let mut commands = fleet_commands(&readme, "## Walkthrough");
    commands.extend(fleet_commands(&examples, "## The fleet they assume"));
    let fleet = Fleet::start(&commands);
    let joined: Vec<&str> = fleet.clusters.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        joined,
        ["member-1", "member-2", "member-3", "big-1", "big-2"],
        "{commands:?}"
    );

    for file in APPLIED.iter().filter(|f| **f != "crd/instances.yaml") {
        fleet.apply(file);
    }
    // The CRD's instances once the hub serves the kind, as crd.yaml's comment says.
    fleet.hub.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/backups.example.com",
        "--timeout=60s",
    ]);
    fleet.apply("crd/instances.yaml");

    // divided.yaml: 20 replicas, weights 1:3:3:6 bounded to [2, 8]: 2, 5, 5, 8; big-2
    // tainted away.
    for (cluster, replicas) in [
        ("member-1", 2),
        ("member-2", 5),
        ("member-3", 5),
        ("big-1", 8),
    ] {
        fleet.wait_replicas(cluster, "checkout", "checkout", replicas);
    }
    let status = fleet.placement_status("placement", "checkout", "checkout", |s| {
        excluded_reason(s, "big-2").is_some()
    });
    let reason = excluded_reason(&status, "big-2").unwrap();
    assert!(reason.contains("dedicated"), "{reason}");
    assert!(fleet.absent("big-2", "deploy", "checkout", "checkout"));

    // property-selector.yaml: only big-1 has 32 allocatable CPUs or more (and is not
    // tainted).
    fleet.wait_replicas("big-1", "crunch", "analytics", 3);
    let status = fleet.placement_status("placement", "crunch", "analytics", |s| {
        excluded_reason(s, "member-1").is_some()
    });
    let reason = excluded_reason(&status, "member-1").unwrap();
    assert!(reason.contains("allocatable-cpu"), "{reason}");
    let placed: Vec<&str> = status["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(placed, ["big-1"], "{status}");
    for cluster in ["member-1", "member-2", "member-3", "big-2"] {
        assert!(
            fleet.absent(cluster, "deploy", "crunch", "analytics"),
            "{cluster}"
        );
    }

    // tolerations.yaml: the DaemonSet on all five, big-2 included.
    for cluster in ["member-1", "member-2", "member-3", "big-1", "big-2"] {
        fleet.wait(cluster, ("daemonset", "log-agent", "logging"), |_| Ok(()));
    }

    // override-variables.yaml: specialised per cluster.
    let specialised = |cluster: &str, region: &str, wanted_image: &str| {
        fleet.wait(cluster, ("deploy", "inventory", "inventory"), |d| {
            let got = (
                env(d, "CLUSTER"),
                env(d, "REGION"),
                d["metadata"]["labels"]["region"].as_str(),
                d["metadata"]["annotations"]["example.com/cluster-id"].as_str(),
                image(d),
            );
            let wanted = (
                Some(cluster.to_owned()),
                Some(region.to_owned()),
                Some(region),
                Some(cluster),
                wanted_image,
            );
            (got == wanted)
                .then_some(())
                .ok_or_else(|| format!("{got:?}"))
        })
    };
    specialised("member-1", "eu", "docker.io/library/nginx:1.27-alpine");
    specialised("member-2", "eu", "docker.io/library/nginx:1.27");
    specialised("big-1", "us", "docker.io/library/nginx:1.27");

    // drift-report.yaml: a hand edit on member-1 is listed, not overwritten.
    fleet.wait_replicas("member-1", "api", "audit", 2);
    fleet.sim("member-1").ok(
        "member-1",
        &["scale", "deploy", "api", "-n", "audit", "--replicas=5"],
    );
    let status = fleet.placement_status("placement", "api", "audit", |s| {
        s["clusters"][0]["drift"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    });
    let drift = &status["clusters"][0]["drift"][0];
    assert_eq!(status["clusters"][0]["name"], "member-1", "{status}");
    assert_eq!(drift["path"], "Deployment/api/spec/replicas", "{drift}");
    assert_eq!(
        (&drift["hub"], &drift["member"]),
        (&"2".into(), &"5".into())
    );
    let api = fleet.get("member-1", "deploy", "api", "audit").unwrap();
    assert_eq!(api["spec"]["replicas"], 5, "not overwritten");

    // crd/: the CRD and the Backup (with its namespace) on the region=eu clusters only.
    for cluster in ["member-1", "member-2"] {
        fleet.wait(cluster, ("crd", "backups.example.com", ""), |_| Ok(()));
        fleet.wait(cluster, ("backup", "nightly", "backups"), |b| {
            (b["spec"]["keepDays"] == 14)
                .then_some(())
                .ok_or_else(|| b["spec"].to_string())
        });
    }
    let status = fleet.placement_status("clusterplacement", "backups", "", |s| {
        excluded_reason(s, "member-3").is_some()
    });
    assert!(excluded_reason(&status, "big-1").is_some(), "{status}");
    assert!(fleet.absent("member-3", "crd", "backups.example.com", ""));
}
