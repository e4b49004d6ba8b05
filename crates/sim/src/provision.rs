//! Setting up member clusters through the API: each a logical cluster with its nodes and
//! the About API. Idempotent: what exists is kept, only what is missing is created.
//!
//! ```text
//!  for each member (many at once):
//!    root: LogicalCluster <name> ─► /clusters/<name>: Nodes <name>-node-1..K (then their
//!    status: capacity, allocatable, Ready) ─► CRD clusterproperties.about.k8s.io ─►
//!    ClusterProperty cluster.clusterset.k8s.io = <name>
//! ```

use std::collections::HashMap;

use flotilla_apiserver::client::Client;
use flotilla_apiserver::{Api, ApiError, Reason, discovery, registry::tenancy};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tracing::{Instrument, debug, info_span};

use crate::Error;
use crate::about;

/// The field manager of everything the simulator writes.
pub const FIELD_MANAGER: &str = "flotilla-sim";

/// How many members are set up at once (their writes share the store's commits).
const PARALLEL: usize = 32;

/// The nodes each member has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeShape {
    /// How many.
    pub count: u32,
    /// Each node's CPU (a quantity, e.g. `8`).
    pub cpu: String,
    /// Each node's memory (a quantity, e.g. `32Gi`).
    pub memory: String,
    /// How many pods each node takes.
    pub pods: u32,
}

/// What a failed request says: its `Status`'s message, else its code.
pub(crate) fn message(e: &ApiError) -> String {
    if e.message.is_empty() {
        format!("HTTP {}", e.code)
    } else {
        e.message.clone()
    }
}

/// Creates every member cluster, or what is missing of it.
pub async fn provision(api: &Api, members: &[String], nodes: &NodeShape) -> Result<(), Error> {
    let client = Client::new(api.clone()).with_field_manager(FIELD_MANAGER);
    let client = &client;
    let mut pending = futures_util::stream::iter(members)
        .map(|name| member(client, name, nodes).instrument(info_span!("member", cluster = %name)))
        .buffer_unordered(PARALLEL);
    while let Some(done) = pending.next().await {
        done?;
    }
    Ok(())
}

async fn member(client: &Client, name: &str, shape: &NodeShape) -> Result<(), Error> {
    let failed = |action: &str, e: ApiError| Error::Provision {
        cluster: name.to_owned(),
        action: action.to_owned(),
        message: message(&e),
    };
    let create = |path: String, object: Value| async move {
        match client.create(&path, &object).await {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.reason, Reason::AlreadyExists | Reason::Conflict) => Ok(false),
            Err(e) => Err(e),
        }
    };
    let cluster = json!({"apiVersion": format!("{}/{}", tenancy::GROUP, tenancy::VERSION),
        "kind": "LogicalCluster", "metadata": {"name": name}});
    let path = format!(
        "/apis/{}/{}/{}",
        tenancy::GROUP,
        tenancy::VERSION,
        tenancy::PLURAL
    );
    if create(path, cluster)
        .await
        .map_err(|r| failed("create the logical cluster", r))?
    {
        debug!("logical cluster created");
    }
    let base = format!("/clusters/{name}");

    let listed = client
        .get(&format!("{base}/api/v1/nodes"))
        .await
        .map_err(|e| failed("list the nodes", e))?;
    let have: HashMap<&str, bool> = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let name = n["metadata"]["name"].as_str().unwrap_or("");
            (name, n["status"]["conditions"].is_array())
        })
        .collect();
    for index in 1..=shape.count {
        let node = format!("{name}-node-{index}");
        let has_status = match have.get(node.as_str()) {
            Some(has_status) => *has_status,
            None => {
                let object = json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node, "labels": labels(&node)}, "spec": {}});
                create(format!("{base}/api/v1/nodes"), object)
                    .await
                    .map_err(|r| failed("create a node", r))?;
                false
            }
        };
        if !has_status {
            let path = format!("{base}/api/v1/nodes/{node}/status");
            let status = node_status(&node, index, shape);
            client
                .replace(&path, &status)
                .await
                .map_err(|e| failed("set a node's status", e))?;
        }
    }

    let crds = format!("{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions");
    create(crds, about::definition())
        .await
        .map_err(|r| failed("install the About API", r))?;
    let properties = format!(
        "{base}/apis/{}/{}/{}",
        about::GROUP,
        about::VERSION,
        about::PLURAL
    );
    create(properties, about::property(about::CLUSTER_ID, name))
        .await
        .map_err(|r| failed("create its ClusterProperty", r))?;
    Ok(())
}

fn labels(node: &str) -> Value {
    json!({
        "kubernetes.io/hostname": node,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "flotilla-sim",
    })
}

/// A Ready node's status: `shape`'s capacity, all of it allocatable.
fn node_status(node: &str, index: u32, shape: &NodeShape) -> Value {
    let now = flotilla_apiserver::registry::object::now();
    let resources =
        json!({"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods.to_string()});
    let [_, a, b, c] = index.to_be_bytes();
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "simulated kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP", "address": format!("10.{a}.{b}.{c}")},
            {"type": "Hostname", "address": node}],
        "nodeInfo": {"kubeletVersion": discovery::GIT_VERSION, "kubeProxyVersion": discovery::GIT_VERSION,
            "osImage": "Flotilla simulated node", "kernelVersion": "simulated",
            "containerRuntimeVersion": "simulated://1", "operatingSystem": "linux",
            "architecture": "amd64", "machineID": "", "systemUUID": "", "bootID": ""},
    }})
}
