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

use axum::http::{HeaderMap, HeaderValue, Method, header};
use bytes::Bytes;
use flotilla_apiserver::{Api, discovery, registry::tenancy};
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

/// One request to the in-process API: the status code and the JSON reply.
pub(crate) async fn call(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let query = format!("fieldManager={FIELD_MANAGER}");
    let response = api.serve(method, path, Some(&query), &headers, body).await;
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or_default())
}

/// Creates every member cluster, or what is missing of it.
pub async fn provision(api: &Api, members: &[String], nodes: &NodeShape) -> Result<(), Error> {
    let mut pending = futures_util::stream::iter(members)
        .map(|name| member(api, name, nodes).instrument(info_span!("member", cluster = %name)))
        .buffer_unordered(PARALLEL);
    while let Some(done) = pending.next().await {
        done?;
    }
    Ok(())
}

async fn member(api: &Api, name: &str, shape: &NodeShape) -> Result<(), Error> {
    let failed = |action: &str, (code, reply): (u16, Value)| Error::Provision {
        cluster: name.to_owned(),
        action: action.to_owned(),
        message: reply["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {code}"), str::to_owned),
    };
    let create = |path: String, object: Value| async move {
        let (code, reply) = call(api, Method::POST, &path, Some(&object)).await;
        match code {
            201 => Ok(true),
            409 => Ok(false),
            _ => Err((code, reply)),
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

    let listed = call(api, Method::GET, &format!("{base}/api/v1/nodes"), None).await;
    if listed.0 != 200 {
        return Err(failed("list the nodes", listed));
    }
    let have: HashMap<&str, bool> = listed.1["items"]
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
            let reply = call(api, Method::PUT, &path, Some(&status)).await;
            if reply.0 != 200 {
                return Err(failed("set a node's status", reply));
            }
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
