//! Pull delivery: the agent applies its cluster's Works to the member with the same code
//! as push (`flotilla_delivery::Member`), writes what became of them into the Works'
//! status, and shows it is alive with a Lease.
//!
//! ```text
//!  watch Works in flotilla-cluster-NAME (its certificate: nothing else is readable)
//!     Apply ─► generation or deletion changed, or resync due? ─► Member::sync(spec,
//!              generation, provenance, the status the hub holds: unchanged objects are
//!              not applied again) ─► works/status (only if it changed)
//!     Delete ─► Member::remove(what its last status lists, its deletion policy)
//!  every heartbeat period: Lease flotilla-agent renewed (leaseDurationSeconds = 4 periods)
//!  every 6 periods: Member::probe ─► clusters/status (version, allocatable, properties)
//!  any 401 ─► asked again with the current certificate (a renewal may have replaced the
//!     one it used), 3 times 1 s apart ─► still 401: Error::Revoked, the agent stops,
//!     nothing more is applied
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::agent::HEARTBEAT_LEASE;
use flotilla_api::{Cluster, Work, WorkStatus};
use flotilla_delivery::{Member, Provenance};
use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use tokio::sync::Mutex;
use tracing::{Instrument as _, info, info_span, warn};

use crate::{Error, is_unauthorized};

/// The prefix of a cluster's Works namespace on the hub.
pub const WORK_NAMESPACE_PREFIX: &str = "flotilla-cluster-";

/// Heartbeat periods a Lease lasts: the hub marks the cluster Ready=Unknown after as
/// many missed renewals.
pub const MISSED_HEARTBEATS: u32 = 4;

/// Heartbeat periods between two reports of the member's facts.
const FACTS_EVERY: u32 = 6;

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster's name on the hub.
    pub cluster: String,
    /// The hub's name, as delivered objects' provenance names it.
    pub hub_name: String,
    /// How often the Lease is renewed.
    pub heartbeat_period: Duration,
    /// How often every Work is applied again (drift is corrected then).
    pub resync_period: Duration,
}

/// What the agent last did with a Work.
struct Synced {
    uid: String,
    generation: Option<i64>,
    at: Instant,
    work: Work,
}

/// The agent: a client of the hub (its certificate) and of the member.
pub struct Agent {
    hub: kube::Client,
    member: Member,
    config: Config,
    synced: Mutex<HashMap<String, Synced>>,
    /// Held through each sync and removal: the watch's and the resync's never interleave,
    /// so a resync cannot apply its older copy of a Work over the newer generation the
    /// watch applied meanwhile (a member's objects would go back a revision).
    syncing: Mutex<()>,
}

impl Agent {
    /// An agent of `config.cluster`.
    pub fn new(hub: kube::Client, member: kube::Client, config: Config) -> Self {
        Agent {
            hub,
            member: Member::new(member),
            config,
            synced: Mutex::default(),
            syncing: Mutex::default(),
        }
    }

    fn namespace(&self) -> String {
        format!("{WORK_NAMESPACE_PREFIX}{}", self.config.cluster)
    }

    /// Runs until the hub revokes the agent (an error) or a fatal error.
    pub async fn run(self) -> Result<(), Error> {
        let agent = Arc::new(self);
        let heartbeat = tokio::spawn(agent.clone().heartbeat());
        let works = tokio::spawn(agent.clone().works());
        let resync = tokio::spawn(agent.clone().resync());
        let outcome = tokio::select! {
            r = heartbeat => r,
            r = works => r,
            r = resync => r,
        };
        outcome.unwrap_or_else(|e| Err(Error::Hub(format!("a task of the agent ended: {e}"))))
    }

    /// Renews the Lease every period and reports the member's facts every few.
    async fn heartbeat(self: Arc<Self>) -> Result<(), Error> {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &self.namespace());
        let clusters: Api<Cluster> = Api::all(self.hub.clone());
        let mut beats = 0u32;
        let mut ticker = tokio::time::interval(self.config.heartbeat_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.renew(&leases).await {
                Ok(()) => {}
                Err(e) if is_unauthorized(&e) => {
                    if self.confirmed_revoked().await {
                        return Err(Error::Revoked);
                    }
                }
                Err(e) => warn!(error = %e, "heartbeat not renewed; retrying next period"),
            }
            if beats.is_multiple_of(FACTS_EVERY) {
                match self.member.probe().await {
                    Ok(health) => {
                        let patch = serde_json::json!({"status": {
                            "kubernetesVersion": health.kubernetes_version,
                            "allocatable": health.allocatable,
                            "properties": health.properties,
                        }});
                        match clusters
                            .patch_status(
                                &self.config.cluster,
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await
                        {
                            Ok(_) => {}
                            Err(e) if is_unauthorized(&e) => {
                                if self.confirmed_revoked().await {
                                    return Err(Error::Revoked);
                                }
                            }
                            Err(e) => warn!(error = %e, "the member's facts not reported"),
                        }
                    }
                    Err(e) => warn!(error = %e, "the member does not answer"),
                }
            }
            beats = beats.wrapping_add(1);
        }
    }

    async fn renew(&self, leases: &Api<Lease>) -> Result<(), kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration = self.config.heartbeat_period.as_secs().max(1) * u64::from(MISSED_HEARTBEATS);
        let spec = LeaseSpec {
            holder_identity: Some(flotilla_api::agent::cluster_user(&self.config.cluster)),
            lease_duration_seconds: Some(i32::try_from(duration).unwrap_or(i32::MAX)),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        match leases.get_opt(HEARTBEAT_LEASE).await? {
            Some(mut lease) => {
                let acquire = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
                lease.spec = Some(LeaseSpec {
                    acquire_time: acquire,
                    ..spec
                });
                leases
                    .replace(HEARTBEAT_LEASE, &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(HEARTBEAT_LEASE.to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: spec.renew_time.clone(),
                        ..spec
                    }),
                };
                match leases.create(&PostParams::default(), &lease).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Whether a 401 the hub answered means the agent is revoked: the hub is asked again
    /// with the current certificate (a renewal may have replaced the one the refused
    /// request used, or the hub may not have recorded the new one yet), up to 3 times 1 s
    /// apart. Revoked only if every answer is 401.
    async fn confirmed_revoked(&self) -> bool {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &self.namespace());
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match leases.get_opt(HEARTBEAT_LEASE).await {
                Ok(_) => {
                    info!("a 401 was the certificate just replaced: not revoked");
                    return false;
                }
                Err(e) if is_unauthorized(&e) => {}
                Err(e) => {
                    warn!(error = %e, "the hub does not answer: not taken for a revocation");
                    return false;
                }
            }
        }
        true
    }

    /// Follows the cluster's Works.
    async fn works(self: Arc<Self>) -> Result<(), Error> {
        let api: Api<Work> = Api::namespaced(self.hub.clone(), &self.namespace());
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(work) | watcher::Event::InitApply(work)) => {
                    self.sync(work).await?;
                }
                Ok(watcher::Event::Delete(work)) => self.remove(&work).await,
                Ok(_) => {}
                Err(e) => {
                    let revoked = match &e {
                        watcher::Error::InitialListFailed(e)
                        | watcher::Error::WatchStartFailed(e)
                        | watcher::Error::WatchFailed(e) => is_unauthorized(e),
                        watcher::Error::WatchError(s) => s.code == 401,
                        _ => false,
                    };
                    if revoked && self.confirmed_revoked().await {
                        return Err(Error::Revoked);
                    }
                    warn!(error = %e, "watch of Works failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        Ok(())
    }

    /// Applies every Work again once its resync is due (the newest copy the agent holds
    /// when its turn comes, not the one it held when the tick came).
    async fn resync(self: Arc<Self>) -> Result<(), Error> {
        let mut ticker =
            tokio::time::interval(self.config.resync_period.max(Duration::from_secs(1)));
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let due: Vec<String> = {
                let synced = self.synced.lock().await;
                synced
                    .iter()
                    .filter(|(_, s)| s.at.elapsed() >= self.config.resync_period)
                    .map(|(name, _)| name.clone())
                    .collect()
            };
            for name in due {
                let _one = self.syncing.lock().await;
                // The copy held now: the watch may have synced a newer one since the
                // tick, or seen the Work deleted (then it is not applied again).
                let work = self.synced.lock().await.get(&name).map(|s| s.work.clone());
                if let Some(work) = work {
                    self.sync_now(work, true).await?;
                }
            }
        }
    }

    fn provenance(&self, work: &Work) -> Provenance {
        let placement = &work.spec.placement;
        Provenance {
            hub: self.config.hub_name.clone(),
            placement: match &placement.namespace {
                Some(ns) => format!("{ns}/{}", placement.name),
                None => placement.name.clone(),
            },
            work: work.name_any(),
        }
    }

    /// Applies `work` if it changed since it was last applied, and writes its status if
    /// that changed; one sync at a time.
    async fn sync(&self, work: Work) -> Result<(), Error> {
        let _one = self.syncing.lock().await;
        self.sync_now(work, false).await
    }

    /// [`Agent::sync`] (`again`: even if it did not change), the caller holding `syncing`.
    async fn sync_now(&self, work: Work, again: bool) -> Result<(), Error> {
        let name = work.name_any();
        let uid = work.uid().unwrap_or_default();
        let generation = work.metadata.generation;
        {
            let mut synced = self.synced.lock().await;
            let same = synced
                .get(&name)
                .is_some_and(|s| s.uid == uid && s.generation == generation);
            if same && !again {
                // A change of its status (ours) or metadata: keep the newest copy.
                if let Some(s) = synced.get_mut(&name) {
                    s.work = work;
                }
                return Ok(());
            }
        }
        if work.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let span = info_span!("deliver", work = %name, cluster = %self.config.cluster);
        let status = async {
            let previous = work
                .status
                .as_ref()
                .map(|s| s.manifests.as_slice())
                .unwrap_or_default();
            self.member
                .sync(&work.spec, generation, &self.provenance(&work), previous)
                .await
        }
        .instrument(span)
        .await;
        let applied = status
            .conditions
            .iter()
            .any(|c| c.type_ == flotilla_api::condition::APPLIED && c.status == "True");
        if work.status.as_ref() != Some(&status) {
            self.write_status(&work, &status).await?;
        }
        if !again {
            info!(work = %name, ?generation, applied, "Work synced");
        }
        let mut synced = self.synced.lock().await;
        let mut work = work;
        work.status = Some(status);
        synced.insert(
            name,
            Synced {
                uid,
                generation,
                // A failed apply is tried again at the next resync tick.
                at: if applied {
                    Instant::now()
                } else {
                    Instant::now() - self.config.resync_period
                },
                work,
            },
        );
        Ok(())
    }

    async fn write_status(&self, work: &Work, status: &WorkStatus) -> Result<(), Error> {
        let api: Api<Work> = Api::namespaced(self.hub.clone(), &self.namespace());
        let patch = Patch::Json::<()>(json_patch::Patch(vec![json_patch::PatchOperation::Add(
            json_patch::AddOperation {
                path: json_patch::jsonptr::PointerBuf::parse("/status")
                    .map_err(|e| Error::Hub(e.to_string()))?,
                value: serde_json::to_value(status).unwrap_or_default(),
            },
        )]));
        match api
            .patch_status(&work.name_any(), &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_unauthorized(&e) => match self.confirmed_revoked().await {
                true => Err(Error::Revoked),
                false => Ok(()),
            },
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => {
                warn!(work = %work.name_any(), error = %e, "status not written; retried at the next resync");
                Ok(())
            }
        }
    }

    /// A Work deleted on the hub: what it applied is released as its policy says.
    async fn remove(&self, work: &Work) {
        let _one = self.syncing.lock().await;
        let name = work.name_any();
        let known = self.synced.lock().await.remove(&name);
        let work = known.map(|s| s.work).unwrap_or_else(|| work.clone());
        let applied = work
            .status
            .as_ref()
            .map(|s| s.manifests.clone())
            .unwrap_or_default();
        let apply = work.spec.apply.clone().unwrap_or_default();
        match self
            .member
            .remove_as(
                &applied,
                apply.deletion,
                &self.provenance(&work),
                apply.service_account_name.as_deref(),
            )
            .await
        {
            Ok(()) => info!(work = %name, "Work removed"),
            Err(e) => warn!(work = %name, error = %e, "Work not fully removed"),
        }
    }
}
