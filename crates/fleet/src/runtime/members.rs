//! Clients of the members the hub pushes to, built from the kubeconfig in each Cluster's
//! credentials Secret and kept while the Secret does not change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_api::Cluster;
use flotilla_delivery::Member;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Secret;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

use super::Error;

/// The key in a credentials Secret that holds the member's kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// A member client, the Secret version it was built from and when that was checked.
struct Built {
    version: String,
    checked: Instant,
    member: Arc<Member>,
}

/// How many syncs run at once on one member (the rest wait their turn).
pub const MEMBER_CONCURRENCY: usize = 8;

/// Member clients by cluster name, with the Secret version they were built from.
pub(super) struct Members {
    hub: Client,
    timeout: Duration,
    members: Mutex<HashMap<String, Built>>,
    turns: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

impl Members {
    pub fn new(hub: Client, timeout: Duration) -> Self {
        Members {
            hub,
            timeout,
            members: Mutex::default(),
            turns: Mutex::default(),
        }
    }

    /// A turn to sync on `cluster`: at most [`MEMBER_CONCURRENCY`] are held at once.
    pub async fn turn(&self, cluster: &str) -> tokio::sync::OwnedSemaphorePermit {
        let turns = self
            .turns
            .lock()
            .expect("lock")
            .entry(cluster.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(MEMBER_CONCURRENCY)))
            .clone();
        turns.acquire_owned().await.expect("never closed")
    }

    /// The member client of `cluster`; its credentials Secret is read again at most once
    /// per health period.
    pub async fn get(&self, cluster: &Cluster) -> Result<Arc<Member>, Error> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        if let Some(built) = self.members.lock().expect("lock").get(&name)
            && built.checked.elapsed() < self.timeout
        {
            return Ok(built.member.clone());
        }
        let fail = |message: String| Error::Member {
            cluster: name.clone(),
            message,
        };
        let reference = cluster
            .spec
            .access
            .as_ref()
            .and_then(|a| a.push.as_ref())
            .map(|p| p.secret_ref.clone())
            .ok_or_else(|| fail("no push access: spec.access.push is not set".into()))?;
        let secret = Api::<Secret>::namespaced(self.hub.clone(), &reference.namespace)
            .get_opt(&reference.name)
            .await?
            .ok_or_else(|| {
                fail(format!(
                    "its credentials Secret {}/{} does not exist",
                    reference.namespace, reference.name
                ))
            })?;
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        if let Some(built) = self.members.lock().expect("lock").get_mut(&name)
            && built.version == version
        {
            built.checked = Instant::now();
            return Ok(built.member.clone());
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_KEY))
            .map(|b| b.0.clone())
            .ok_or_else(|| fail(format!("its Secret has no {KUBECONFIG_KEY:?} key")))?;
        let client = client_from_kubeconfig(&bytes, self.timeout)
            .await
            .map_err(fail)?;
        let member = Arc::new(Member::new(client));
        self.members.lock().expect("lock").insert(
            name,
            Built {
                version,
                checked: Instant::now(),
                member: member.clone(),
            },
        );
        Ok(member)
    }

    /// Forgets the client of `cluster`.
    pub fn forget(&self, cluster: &str) {
        // Its turns stay: syncs in flight hold them.
        self.members.lock().expect("lock").remove(cluster);
    }
}

/// A client for the cluster a kubeconfig describes (its current context), whose calls
/// give up after `timeout`. The error is one readable line.
pub async fn client_from_kubeconfig(bytes: &[u8], timeout: Duration) -> Result<Client, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the kubeconfig is not UTF-8".to_owned())?;
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|e| format!("the kubeconfig does not parse: {e}"))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| format!("the kubeconfig cannot be used: {e}"))?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = None;
    config.write_timeout = Some(timeout);
    let cannot = |e: kube::Error| format!("cannot make a client from the kubeconfig: {e}");
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // A request's head and body leave at once, not the body after the peer's delayed ack
    // (Nagle: ~40 ms on every request with a body).
    http.set_nodelay(true);
    http.set_connect_timeout(Some(timeout));
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(cannot)?;
    let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(MEMBER_CONCURRENCY)
        .build::<_, kube::client::Body>(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(cannot)?)
        .map_err(tower::BoxError::from)
        .service(pool);
    Ok(Client::new(service, config.default_namespace))
}
