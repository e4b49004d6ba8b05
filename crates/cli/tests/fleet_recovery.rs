//! A member that comes back is served at once: a simulator killed (SIGKILL) while the hub
//! changes a template, then started again on its data, gets the change within 30 s of its
//! restart, not at the next resync (five minutes by default). The real hub, simulator and
//! kubectl.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Hub, Sim};

/// Polls `probe` until it gives `Ok`; panics with `what` and the last state once
/// `within` has passed.
fn eventually<T>(what: &str, within: Duration, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match probe() {
            Ok(done) => return done,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}; last: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(150)),
        }
    }
}

fn join(hub: &Hub, sim: &Sim, cluster: &str, labels: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["join", cluster, "--kubeconfig"])
        .arg(sim.kubeconfig(cluster))
        .args(["--labels", labels, "--hub-kubeconfig"])
        .arg(hub.kubeconfig())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run flotilla join");
    assert!(
        out.status.success(),
        "join {cluster}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The image of member `cluster`'s Deployment shop/web, if it has one.
fn member_image(sim: &Sim, cluster: &str) -> Result<String, String> {
    let out = sim.kubectl(
        cluster,
        &["get", "deploy", "web", "-n", "shop", "-o", "json"],
        None,
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let web: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(web["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

const APP: &str = r#"
apiVersion: v1
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
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  clusters: {labelSelector: {matchLabels: {region: eu}}}
"#;

#[test]
fn a_member_killed_during_a_change_gets_it_within_30_s_of_its_restart() {
    // The default resync period (5 minutes): recovery must not wait for it.
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let mut sim = Sim::start(&["--clusters", "2", "--ready-delay", "100ms"]);
    join(&hub, &sim, "member-1", "region=eu");
    join(&hub, &sim, "member-2", "region=eu");
    hub.create(APP);
    for cluster in ["member-1", "member-2"] {
        eventually(
            &format!("{cluster} runs nginx:1.27"),
            Duration::from_secs(120),
            || match member_image(&sim, cluster)? {
                image if image == "nginx:1.27" => Ok(()),
                image => Err(image),
            },
        );
    }

    // The simulator dies at once (no goodbye), and the template changes meanwhile.
    let status = Command::new("kill")
        .args(["-KILL", &sim.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    hub.ok(&["set", "image", "deploy/web", "-n", "shop", "web=nginx:1.28"]);
    // The hub tried the new generation and failed: each Work says so.
    for cluster in ["member-1", "member-2"] {
        let namespace = format!("flotilla-cluster-{cluster}");
        eventually(
            &format!("{cluster}'s Work fails to apply"),
            Duration::from_secs(120),
            || {
                let work = hub.json(&["get", "work", "shop.web", "-n", &namespace]);
                let tried = work["status"]["observedGeneration"] == work["metadata"]["generation"];
                let failed = condition(&work, "Applied").is_some_and(|c| c["status"] == "False");
                (tried && failed)
                    .then_some(())
                    .ok_or_else(|| work["status"].to_string())
            },
        );
    }

    // Back on the same data and port: within 30 s every member runs the new image.
    sim.restart();
    eventually(
        "every member runs nginx:1.28 after the restart",
        Duration::from_secs(30),
        || {
            for cluster in ["member-1", "member-2"] {
                let image = member_image(&sim, cluster)?;
                if image != "nginx:1.28" {
                    return Err(format!("{cluster}: {image}"));
                }
            }
            Ok(())
        },
    );
    // And the hub says so.
    eventually(
        "the Works are applied again",
        Duration::from_secs(30),
        || {
            for cluster in ["member-1", "member-2"] {
                let namespace = format!("flotilla-cluster-{cluster}");
                let work = hub.json(&["get", "work", "shop.web", "-n", &namespace]);
                if !condition(&work, "Applied").is_some_and(|c| c["status"] == "True") {
                    return Err(work["status"].to_string());
                }
            }
            Ok(())
        },
    );
}
