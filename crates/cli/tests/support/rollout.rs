//! What the rollout tests share (issue 24): placement `web` in namespace `shop`, the
//! `flotilla rollout` command against it, a watcher of every member's Deployment and the
//! replay of what it saw, and waits on members' images and on the rollout's progress.
//!
//! ```text
//!  hub ── Placement shop/web ─► Works ─► members (push: sim; pull: sim --agents)
//!                                            │ kubectl get deploy web -w (one per member)
//!                                            ▼
//!                                 Watchers ─► replay(): most in flight, images seen
//! ```

use std::collections::BTreeMap;
use std::io::BufReader;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::{Hub, Sim, condition, eventually_every, flotilla, image, member_web};

/// Namespace `shop` and the template, Deployment `web` (2 replicas of nginx:1.27).
pub const APP: &str = r#"
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
"#;

/// [`super::eventually`], polling every 200 ms.
pub fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(200), probe)
}

/// Placement `web` of namespace `shop` as the hub has it.
pub fn placement(hub: &Hub) -> Value {
    hub.json(&["get", "placement", "web", "-n", "shop"])
}

/// `flotilla rollout ARGS placement/web -n shop` against `hub`.
pub fn rollout(hub: &Hub, verb: &str, more: &[&str]) -> std::process::Output {
    let kubeconfig = hub.kubeconfig();
    let mut args = vec![
        "rollout",
        verb,
        "placement/web",
        "-n",
        "shop",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    args.extend(more);
    flotilla(&args)
}

/// A command's output as text.
pub fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Whether a member's Deployment is available as delivery reads it: its status is about
/// its spec, and every replica is updated and available.
pub fn available(deployment: &Value) -> bool {
    let status = &deployment["status"];
    let wanted = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    status["observedGeneration"].as_i64() >= deployment["metadata"]["generation"].as_i64()
        && status["updatedReplicas"].as_i64().unwrap_or(0) >= wanted
        && status["availableReplicas"].as_i64().unwrap_or(0) >= wanted
}

/// One `kubectl get deploy web -w -o json` per member, every version of the Deployment
/// each sees sent on one channel, in the order they are read.
pub struct Watchers {
    children: Vec<Child>,
    events: mpsc::Receiver<(String, Value)>,
}

impl Watchers {
    pub fn start(sim: &Sim, clusters: &[String]) -> Watchers {
        let (tx, events) = mpsc::channel();
        let mut children = Vec::new();
        for cluster in clusters {
            let mut child = super::kubectl_command(&sim.kubeconfig(cluster))
                .args(["get", "deploy", "web", "-n", "shop", "-w", "-o", "json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("start kubectl watch");
            let stdout = child.stdout.take().unwrap();
            let (tx, cluster) = (tx.clone(), cluster.clone());
            std::thread::spawn(move || {
                let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout))
                    .into_iter::<Value>();
                for object in stream.flatten() {
                    if tx.send((cluster.clone(), object)).is_err() {
                        return;
                    }
                }
            });
            children.push(child);
        }
        Watchers { children, events }
    }

    /// Waits until each of the `clusters` watchers has seen its Deployment as it is (before
    /// a change), the events received kept in `into`.
    pub fn wait_started(&self, clusters: usize, into: &mut Vec<(String, Value)>) {
        eventually("every watcher started", || {
            self.drain(into);
            let seen: std::collections::BTreeSet<&String> = into.iter().map(|(c, _)| c).collect();
            (seen.len() == clusters)
                .then_some(())
                .ok_or_else(|| format!("{} of {clusters}", seen.len()))
        });
    }

    /// Every event received so far.
    pub fn drain(&self, into: &mut Vec<(String, Value)>) {
        into.extend(self.events.try_iter());
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the watchers saw, replayed in order: the most clusters between revisions (running
/// `new` and not available) at any moment, and each cluster's images in the order seen
/// (repeats folded).
pub fn replay(events: &[(String, Value)], new: &str) -> (usize, BTreeMap<String, Vec<String>>) {
    let mut in_flight: BTreeMap<String, bool> = BTreeMap::new();
    let mut images: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut most = 0;
    for (cluster, deployment) in events {
        let seen = images.entry(cluster.clone()).or_default();
        let now = image(deployment).to_owned();
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        in_flight.insert(cluster.clone(), now == new && !available(deployment));
        most = most.max(in_flight.values().filter(|f| **f).count());
    }
    (most, images)
}

/// Sets the image of the hub's Deployment `web` (the template).
pub fn set_image(hub: &Hub, image: &str) {
    hub.ok(&[
        "set",
        "image",
        "deployment/web",
        "-n",
        "shop",
        &format!("web={image}"),
    ]);
}

/// Waits until every one of `clusters` runs `image`, available.
pub fn wait_all(sim: &Sim, clusters: &[String], image_wanted: &str) {
    eventually(&format!("every member runs {image_wanted}"), || {
        for cluster in clusters {
            let web = member_web(sim, cluster)?;
            if image(&web) != image_wanted || !available(&web) {
                return Err(format!(
                    "{cluster}: {} available={}",
                    image(&web),
                    available(&web)
                ));
            }
        }
        Ok(())
    });
}

/// The rollout's status once its Progressing condition has `reason`.
pub fn wait_progressing(hub: &Hub, reason: &str) -> Value {
    eventually(&format!("Progressing is {reason}"), || {
        let p = placement(hub);
        let found = condition(&p, "Progressing").map(|c| c["reason"].clone());
        if found.as_ref().and_then(Value::as_str) == Some(reason) {
            Ok(p)
        } else {
            Err(format!("{found:?}: {}", p["status"]["rollout"]))
        }
    })
}

/// The Events on placement `web` (type, reason, message), oldest first.
pub fn placement_events(hub: &Hub) -> Vec<(String, String, String)> {
    let events = hub.json(&[
        "get",
        "events",
        "-n",
        "shop",
        "--field-selector",
        "involvedObject.name=web",
        "--sort-by",
        ".metadata.creationTimestamp",
    ]);
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "Placement")
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (field("type"), field("reason"), field("message"))
        })
        .collect()
}
