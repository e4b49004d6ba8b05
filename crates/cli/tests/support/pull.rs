//! Pull members for end-to-end tests (issue 22): `flotilla sim --agents`, one pull agent
//! per simulated member registering with the hub through the real flow, and the wait until
//! the hub lists them Ready.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Hub, Sim, condition, eventually};

/// `flotilla sim --agents` of `clusters` members named `prefix`N, registering with `hub`
/// (`more` added).
pub fn pull_sim(hub: &Hub, clusters: u32, prefix: &str, more: &[&str]) -> Sim {
    let kubeconfig = hub.kubeconfig();
    let clusters = clusters.to_string();
    let mut args = vec![
        "--clusters",
        &clusters,
        "--prefix",
        prefix,
        "--ready-delay",
        "100ms",
        "--agents",
        "--hub-kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--heartbeat-period",
        "1s",
    ];
    args.extend(more);
    Sim::start(&args)
}

/// Whether a Cluster is Ready.
pub fn ready(cluster: &Value) -> bool {
    condition(cluster, "Ready").is_some_and(|c| c["status"] == "True")
}

/// Waits until the hub lists exactly `names` as Ready pull Clusters; returns them.
pub fn wait_ready_pull_clusters(hub: &Hub, names: &BTreeSet<String>) -> Vec<Value> {
    eventually("every simulated agent's Cluster is Ready", || {
        let list = hub.json(&["get", "clusters"]);
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let ready_names: BTreeSet<String> = items
            .iter()
            .filter(|c| ready(c))
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        if &ready_names == names {
            Ok(items)
        } else {
            Err(format!("ready: {ready_names:?}"))
        }
    })
}
