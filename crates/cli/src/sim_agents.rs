//! `flotilla sim --agents`: one pull agent per simulated member, inside the simulator's
//! process, each registered through the real flow with its own key, certificate and
//! identity, so that pull mode is tested and measured at fleet scale.
//!
//! ```text
//!  --token T, or a new --auto-approve token made through --hub-kubeconfig
//!  the hub's URL and CA pin from --hub-kubeconfig (as `flotilla token create` prints them)
//!  per member NAME: one tokio task
//!     ─► registration (at most REGISTERING at once: the hub is not flooded)
//!          register::credentials: DATA/agents/NAME/{agent.key,agent.crt,hub-ca.crt}
//!          (a restart of the simulator registers nothing again)
//!     ─► pull::Agent: its certificate's own HTTPS client to the hub (a TLS client
//!          certificate is per connection: no pool can be shared between identities);
//!          the member through the in-process API (/clusters/NAME/…: no socket, no TLS)
//!     ─► revoked (a 401): that agent ends, the others go on (a new certificate is
//!          accepted from the moment it is issued: its request is named on the Cluster)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_agent::register::Registration;
use flotilla_agent::token::BootstrapToken;
use flotilla_apiserver::Api;
use flotilla_apiserver::auth::UserInfo;
use flotilla_apiserver::http::metrics::Metrics;
use tokio::sync::Semaphore;
use tracing::{Instrument as _, info, info_span, warn};

use crate::join::HubAccess;

/// How many agents register at once: each waits for its certificate request's approval,
/// and the hub's registrar approves them one after the other.
pub const REGISTERING: usize = 16;

/// How long an agent waits before it tries again after a failure that may pass (the hub
/// unreachable, a watch ended).
const RETRY: Duration = Duration::from_secs(1);

/// The token made when none is given lasts this long: enough to register the simulated
/// fleet, restarts included.
const TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// How the simulator's agents run.
#[derive(Clone, Debug)]
pub struct AgentsConfig {
    /// The hub's kubeconfig: its URL and CA (and, without a token, who makes one).
    pub hub_kubeconfig: PathBuf,
    /// A bootstrap token; none: an auto-approve one is made through the hub kubeconfig.
    pub token: Option<BootstrapToken>,
    /// Every agent's cluster labels.
    pub labels: BTreeMap<String, String>,
    /// Every agent's cluster set.
    pub cluster_set: Option<String>,
    /// How often each agent renews its Lease.
    pub heartbeat_period: Duration,
    /// How often each agent applies every Work again.
    pub resync_period: Duration,
    /// The hub's name (its `--name`).
    pub hub_name: String,
}

/// A client of member `cluster` of the simulator's API, in-process: its requests go to
/// `/clusters/<cluster>/…` of the root API as the server itself (the member's admin, as
/// the kubeconfig the simulator writes), with no socket.
pub fn member_client(api: &Api, metrics: &Arc<Metrics>, cluster: &str) -> kube::Client {
    let prefix = format!("/clusters/{cluster}");
    let service = flotilla_apiserver::http::server::local_service_as(
        api.clone(),
        metrics.clone(),
        UserInfo::loopback(),
    );
    let service = tower::ServiceExt::map_request(
        service,
        move |mut request: axum::http::Request<kube::client::Body>| {
            let path_and_query = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            let uri = format!("{prefix}{path_and_query}");
            if let Ok(uri) = uri.parse() {
                *request.uri_mut() = uri;
            }
            request
        },
    );
    kube::Client::new(service, "default")
}

/// Where agent `cluster` keeps its key and certificate.
pub fn agent_dir(data_dir: &Path, cluster: &str) -> PathBuf {
    data_dir.join("agents").join(cluster)
}

/// Starts one agent per member in `members`: returns once each has its task (they
/// register in the background, at most [`REGISTERING`] at once).
pub async fn start(
    config: AgentsConfig,
    data_dir: &Path,
    members: &[String],
    api: &Api,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<()> {
    let hub = HubAccess {
        hub_kubeconfig: Some(config.hub_kubeconfig.clone()),
        timeout: Duration::from_secs(60),
    };
    let (url, ca_hash, token) = match &config.token {
        Some(token) => {
            let (url, ca_hash) = crate::pull::hub_pin(&hub).await?;
            (url, ca_hash, token.clone())
        }
        None => {
            let made =
                crate::pull::make_token(&hub, TOKEN_TTL, true, config.cluster_set.as_deref())
                    .await
                    .context("cannot make a bootstrap token for the agents")?;
            info!(token = %made.token.id, "an auto-approve bootstrap token made for the agents");
            (made.url, made.ca_hash, made.token)
        }
    };
    info!(agents = members.len(), hub = %url, "starting the agents");
    let registering = Arc::new(Semaphore::new(REGISTERING));
    for cluster in members {
        let registration = Registration {
            hub: url.clone(),
            token: Some(token.clone()),
            ca_hash: ca_hash.clone(),
            cluster: cluster.clone(),
            labels: config.labels.clone(),
            cluster_set: config.cluster_set.clone(),
            data_dir: agent_dir(data_dir, cluster),
        };
        let agent = flotilla_agent::pull::Config {
            cluster: cluster.clone(),
            hub_name: config.hub_name.clone(),
            heartbeat_period: config.heartbeat_period,
            resync_period: config.resync_period,
        };
        let member = member_client(api, metrics, cluster);
        let span = info_span!("agent", cluster = %cluster);
        tokio::spawn(run(registration, member, agent, registering.clone()).instrument(span));
    }
    Ok(())
}

/// One agent: registers (one of [`REGISTERING`] at a time), then pulls until revoked.
async fn run(
    registration: Registration,
    member: kube::Client,
    config: flotilla_agent::pull::Config,
    registering: Arc<Semaphore>,
) {
    use flotilla_agent::Error;
    loop {
        let credentials = {
            let Ok(_permit) = registering.acquire().await else {
                return;
            };
            // Boxed, as the agent's run below: this task lives as long as the agent, and
            // an unboxed future would keep the largest of their states for good.
            Box::pin(flotilla_agent::register::credentials(&registration)).await
        };
        let outcome = match credentials {
            Ok(credentials) => {
                match Box::pin(flotilla_agent::hub_client(
                    &registration.hub,
                    &credentials.ca_pem,
                    flotilla_agent::HubAuth::Certificate {
                        cert_pem: &credentials.cert_pem,
                        key_pem: &credentials.key_pem,
                    },
                ))
                .await
                {
                    Ok(hub) => {
                        Box::pin(
                            flotilla_agent::pull::Agent::new(hub, member.clone(), config.clone())
                                .run(),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => return,
            // Final: a person (or a new token) has to act.
            Err(
                e @ (Error::Revoked
                | Error::TokenRefused
                | Error::NotApproved { .. }
                | Error::CaHash { .. }
                | Error::Input(_)
                | Error::File { .. }),
            ) => {
                warn!(error = %e, "agent stopped");
                return;
            }
            Err(e) => {
                warn!(error = %e, "agent failed; trying again");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}
