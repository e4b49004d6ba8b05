//! Clients of the members the hub pushes to, built from the kubeconfig in each Cluster's
//! credentials Secret and kept while the Secret does not change.
//!
//! A watch of the Secrets' metadata tells which version of each is current, so a client
//! is trusted without asking the hub while its Secret stands still, and rebuilt as soon
//! as it changes. A Secret the watch has not reported is read again once the client is
//! `recheck` old.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::Cluster;
use flotilla_delivery::Member;
use hyper_rustls::HttpsConnector;
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
    /// How long a client is used before its credentials Secret is read again.
    recheck: Duration,
    members: Mutex<HashMap<String, Built>>,
    /// The current resourceVersion of each Secret `(namespace, name)` as the watch last
    /// reported it; `""` for one deleted.
    watched: Mutex<HashMap<(String, String), String>>,
    /// Held while a cluster's Secret is read and its client built.
    building: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pools: Pools,
    turns: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

impl Members {
    pub fn new(hub: Client, timeout: Duration, recheck: Duration) -> Self {
        Members {
            hub,
            timeout,
            recheck,
            members: Mutex::default(),
            watched: Mutex::default(),
            building: Mutex::default(),
            pools: Pools::default(),
            turns: Mutex::default(),
        }
    }

    /// A turn to sync on `cluster`: at most [`MEMBER_CONCURRENCY`] are held at once.
    pub async fn turn(&self, cluster: &str) -> tokio::sync::OwnedSemaphorePermit {
        let turns = self
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(cluster.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(MEMBER_CONCURRENCY)))
            .clone();
        turns.acquire_owned().await.expect("never closed")
    }

    /// The member client of `cluster`, built from its credentials Secret and rebuilt when
    /// the watch reports the Secret changed (a failed probe forgets the client at once).
    pub async fn get(&self, cluster: &Cluster) -> Result<Arc<Member>, Error> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
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
        let secret_key = (reference.namespace.clone(), reference.name.clone());
        if let Some(member) = self.current(&name, &secret_key) {
            return Ok(member);
        }
        // One reader of the Secret at a time per cluster: the others wait, and find the
        // client it built.
        let building = self
            .building
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.clone())
            .or_default()
            .clone();
        let _building = building.lock().await;
        if let Some(member) = self.current(&name, &secret_key) {
            return Ok(member);
        }
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
        if let Some(built) = self
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&name)
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
        let client = self
            .pools
            .client(&bytes, self.timeout)
            .await
            .map_err(fail)?;
        let member = Arc::new(Member::new(client));
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                name,
                Built {
                    version,
                    checked: Instant::now(),
                    member: member.clone(),
                },
            );
        Ok(member)
    }

    /// The client of `cluster`, if it is current: built from the version of `secret`
    /// the watch says is current, or (a Secret the watch has not reported) not yet
    /// `recheck` old.
    fn current(&self, cluster: &str, secret: &(String, String)) -> Option<Arc<Member>> {
        let watched = self
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(secret)
            .cloned();
        let members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        let built = members.get(cluster)?;
        let fresh = match watched {
            Some(version) => version == built.version,
            None => built.checked.elapsed() < self.recheck,
        };
        fresh.then(|| built.member.clone())
    }

    /// The watch saw `secret` (namespace, name) at `version` (`None`: deleted).
    pub fn secret_seen(&self, secret: (String, String), version: Option<String>) {
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(secret, version.unwrap_or_default());
    }

    /// The watch listed the Secrets again, these ones: any other it knew is gone.
    pub fn secrets_listed(&self, listed: &std::collections::HashSet<(String, String)>) {
        for (secret, version) in self
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter_mut()
        {
            if !listed.contains(secret) {
                version.clear();
            }
        }
    }

    /// Forgets the client of `cluster`.
    pub fn forget(&self, cluster: &str) {
        // Its turns stay: syncs in flight hold them.
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(cluster);
        self.building
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(cluster);
    }
}

/// A client for the cluster a kubeconfig describes (its current context), whose calls
/// give up after `timeout`, with a connection pool of its own. The error is one readable
/// line.
pub async fn client_from_kubeconfig(bytes: &[u8], timeout: Duration) -> Result<Client, String> {
    Pools::default().client(bytes, timeout).await
}

/// A hyper client: connections kept per host.
type Pool = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, kube::client::Body>;

/// Connection pools shared by the member clients that trust the same certificates and
/// present no client identity of their own (a bearer token goes in each request's
/// header, not in the connection): one TLS configuration and session cache for them all,
/// instead of one per member (~25 KiB each), and connections per host, so members served
/// by one server (logical clusters) reuse each other's connections.
#[derive(Default)]
pub struct Pools {
    pools: Mutex<HashMap<Vec<u8>, Pool>>,
}

impl Pools {
    /// A client for the cluster `kubeconfig` describes (its current context), whose calls
    /// give up after `timeout`. The error is one readable line.
    pub async fn client(&self, kubeconfig: &[u8], timeout: Duration) -> Result<Client, String> {
        let text = std::str::from_utf8(kubeconfig)
            .map_err(|_| "the kubeconfig is not UTF-8".to_owned())?;
        let kubeconfig = Kubeconfig::from_yaml(text)
            .map_err(|e| format!("the kubeconfig does not parse: {e}"))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("the kubeconfig cannot be used: {e}"))?;
        let pool = match sharing_key(&config) {
            Some(key) => {
                let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
                match pools.get(&key) {
                    Some(pool) => pool.clone(),
                    None => {
                        let pool = pool(&config, timeout)?;
                        pools.insert(key, pool.clone());
                        pool
                    }
                }
            }
            None => pool(&config, timeout)?,
        };
        let service = tower::ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer().map_err(cannot)?)
            .map_err(tower::BoxError::from)
            .service(pool);
        Ok(Client::new(service, config.default_namespace))
    }

    /// How many distinct pools are kept.
    pub fn len(&self) -> usize {
        self.pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no pool is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn cannot(e: kube::Error) -> String {
    format!("cannot make a client from the kubeconfig: {e}")
}

/// What connections made for `config` depend on, if they may be shared: everything its
/// TLS configuration is made of, when it presents no client certificate (nor gets one from
/// a command or a provider) and trusts no CA file that may be rotated.
fn sharing_key(config: &kube::Config) -> Option<Vec<u8>> {
    let auth = &config.auth_info;
    if auth.client_certificate.is_some()
        || auth.client_certificate_data.is_some()
        || auth.client_key.is_some()
        || auth.client_key_data.is_some()
        || auth.exec.is_some()
        || auth.auth_provider.is_some()
        || config.root_cert_file.is_some()
    {
        return None;
    }
    let mut key = Vec::new();
    let mut part = |bytes: &[u8]| {
        key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        key.extend_from_slice(bytes);
    };
    for cert in config.root_cert.iter().flatten() {
        part(cert);
    }
    part(&[u8::from(config.accept_invalid_certs)]);
    part(
        config
            .tls_server_name
            .as_deref()
            .unwrap_or_default()
            .as_bytes(),
    );
    part(
        config
            .proxy_url
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
            .as_bytes(),
    );
    Some(key)
}

/// A connection pool for `config`'s server (and any other with the same TLS setup).
fn pool(config: &kube::Config, timeout: Duration) -> Result<Pool, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // A request's head and body leave at once, not the body after the peer's delayed ack
    // (Nagle: ~40 ms on every request with a body).
    http.set_nodelay(true);
    http.set_connect_timeout(Some(timeout));
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(cannot)?;
    // Idle connections kept per host: as many as syncs may run at once, so that members
    // served by one host keep theirs between bursts.
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(super::PUSH_CONCURRENCY)
            .build(https),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(cluster: &str, user: &str, insecure: bool) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:9/clusters/{cluster}', insecure-skip-tls-verify: {insecure}}}}}]\n\
             users: [{{name: u, user: {user}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
        )
    }

    async fn config(text: &str) -> kube::Config {
        let kubeconfig = Kubeconfig::from_yaml(text).unwrap();
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn members_with_the_same_tls_setup_share_one_pool_and_a_client_identity_never_does() {
        let pools = Pools::default();
        for (cluster, token) in [("a", "t1"), ("b", "t2"), ("c", "t3")] {
            let text = kubeconfig(cluster, &format!("{{token: {token}}}"), true);
            pools
                .client(text.as_bytes(), Duration::from_secs(5))
                .await
                .unwrap();
        }
        assert_eq!(pools.len(), 1);
        // Another trust setting: another pool.
        let verified = kubeconfig("d", "{token: t4}", false);
        pools
            .client(verified.as_bytes(), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(pools.len(), 2);
        // A client certificate belongs to its connections: nothing is shared.
        let with_cert = config(&kubeconfig(
            "e",
            "{client-certificate-data: Zm9v, client-key-data: YmFy}",
            true,
        ))
        .await;
        assert_eq!(sharing_key(&with_cert), None);
        let with_token = config(&kubeconfig("e", "{token: t5}", true)).await;
        let same = config(&kubeconfig("f", "{token: t6}", true)).await;
        assert!(sharing_key(&with_token).is_some());
        assert_eq!(sharing_key(&with_token), sharing_key(&same));
    }
}
