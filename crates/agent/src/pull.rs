//! Pull delivery: the agent applies its cluster's Works to the member with the same code
//! as push (`flotilla_delivery::Member`), writes what became of them into the Works'
//! status, and shows it is alive with a Lease.
//!
//! ```text
//!  first: GET its Lease until the hub lets it in (401/403 just after registration, while
//!     the registrar records the certificate and grants the access: again after 50 ms,
//!     doubling up to 1 s, for at most 10 s)
//!  watch Works in flotilla-cluster-NAME (its certificate: nothing else is readable;
//!     after a failure tried again in 0.5 s, doubling to 10 s, each pause with a random
//!     part up to its length, so agents meeting a hub's outage do not return in step)
//!     Apply ─► generation or deletion changed, or resync due? ─► Member::sync(spec,
//!              generation, provenance, the status the hub holds: unchanged objects are
//!              not applied again) ─► works/status (only if it changed; a new
//!              generation's held until the member's rollout reports back, at most
//!              SETTLING: one write per change, as push)
//!     Delete ─► Member::remove(what its last status lists, its deletion policy); a
//!        release that fails is tried again every retry period (below) until it works or
//!        the Work comes back
//!     after either: the kinds the Works deliver ─► start / stop member-side watches
//!  member-side watches: one per kind delivered (Member::changes, selecting this hub's
//!     provenance labels: every Work's objects of the kind in one watch; the objects
//!     kept as JSON serve the syncs, so a sync that finds nothing changed asks the
//!     member nothing and writes nothing)
//!     object added, changed, deleted ─► the Work its annotation names
//!     (re)listed ─► every Work             ─► Member::sync again at once (changes that
//!        came meanwhile taken together): drift Correct re-applies, Report reports,
//!        status (e.g. a Deployment now available) ─► works/status
//!  every resync period: every Work synced again (a safety net; the watches do the work);
//!     a failed apply or status write: again after at most 10 s
//!  a Work event with a status that is not the one last written ─► synced, written again
//!  every heartbeat period: Lease flotilla-agent renewed (leaseDurationSeconds = 4 periods):
//!     an update of the Lease as last written, read again only on 409 or 404
//!  every 6 periods: Member::probe ─► clusters/status (version, allocatable, properties),
//!                   when they changed or 30 periods after they were last reported
//!  any 401 ─► asked again with the current certificate (a renewal may have replaced the
//!     one it used), 3 times 1 s apart ─► still 401: Error::Revoked, the agent stops
//!     (its tasks and watches end), nothing more is applied
//! ```
//!
//! Memory: a simulator runs a thousand agents, each with four long-lived tasks. A task's
//! future is as large as the largest state it may be in, so the tasks await each sync,
//! removal, renewal and report boxed: the big states (a sync's applies) exist only while
//! they run, and an idle agent's tasks stay small.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};

use flotilla_api::agent::HEARTBEAT_LEASE;
use flotilla_api::{Cluster, Work, WorkStatus};
use flotilla_delivery::{Change, Member, Provenance};
use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::utils::StreamBackoff;
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use tokio::sync::{Mutex, mpsc};
use tokio::task::AbortHandle;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::{Error, is_unauthorized};

/// The prefix of a cluster's Works namespace on the hub.
pub const WORK_NAMESPACE_PREFIX: &str = "flotilla-cluster-";

/// Heartbeat periods a Lease lasts: the hub marks the cluster Ready=Unknown after as
/// many missed renewals.
pub const MISSED_HEARTBEATS: u32 = 4;

/// How soon a Work whose apply or status write failed is synced again (at most).
const RETRY: Duration = Duration::from_secs(10);

/// Heartbeat periods between two looks at the member's facts.
const FACTS_EVERY: u32 = 6;

/// Heartbeat periods after which facts unchanged since they were reported are reported
/// again (5 minutes at the default period), as the kubelet reports an unchanged node status
/// every `nodeStatusReportFrequency`; changed facts are reported at the next look. A hub
/// with 10,000 agents writes 33 Cluster statuses a second, not 167.
const FACTS_AGAIN_EVERY: u32 = 30;

/// How long a new agent waits at most for the hub to let it in (see [`Agent::admitted`]).
const ADMISSION_WAIT: Duration = Duration::from_secs(10);

/// The first pause after the Works watch fails; each failure in a row doubles it.
const WATCH_RETRY_FIRST: Duration = Duration::from_millis(500);

/// The longest pause between the Works watch's attempts, before its jitter.
const WATCH_RETRY_MOST: Duration = Duration::from_secs(10);

/// The pauses between the Works watch's attempts while it keeps failing (a hub down or
/// restarting): from [`WATCH_RETRY_FIRST`], doubling up to [`WATCH_RETRY_MOST`], each
/// with a random part up to its own length, so that a thousand agents meeting the same
/// outage neither try every second nor come back in step when the hub does. Any event
/// received starts it over.
fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(WATCH_RETRY_FIRST)
        .with_max_delay(WATCH_RETRY_MOST)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// A 401 or a 403: the hub knows of no such identity, or of no such right, yet.
fn refused(e: &kube::Error) -> bool {
    is_unauthorized(e) || matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster's name on the hub.
    pub cluster: String,
    /// The hub's name, as delivered objects' provenance names it.
    pub hub_name: String,
    /// How often the Lease is renewed.
    pub heartbeat_period: Duration,
    /// How often every Work is synced again besides what the member-side watches see.
    pub resync_period: Duration,
}

/// What the agent last did with a Work.
struct Synced {
    uid: String,
    generation: Option<i64>,
    /// When it is synced again unless something happens before: a resync period after
    /// a sync that applied and wrote its status, sooner after a failure, at the end of
    /// the wait while its status is held.
    due: Instant,
    /// The status its last sync gave and until when it is held back, for the member's
    /// rollout to report back (a new generation just applied; see
    /// [`flotilla_delivery::settles_until`]). What it lists is what a removal releases.
    held: Option<(Instant, WorkStatus)>,
    /// The Work with the status the hub holds (as written; the one before while held).
    work: Work,
}

/// An `(apiVersion, kind)` the agent delivers objects of.
type KindKey = (String, String);

/// What a member-side watch asks of the agent.
#[derive(Debug)]
enum Poke {
    /// An object this Work delivered changed on the member: the Work syncs again.
    Work(String),
    /// A watch (re)listed, which may hide changes: every Work syncs again.
    All,
}

/// The agent: a client of the hub (its certificate) and of the member.
pub struct Agent {
    hub: kube::Client,
    member: Member,
    config: Config,
    synced: Mutex<HashMap<String, Synced>>,
    /// Held through each sync and removal: one at a time, each from the newest copy of
    /// its Work (a watch's sync never applies an older spec over a newer one).
    one_at_a_time: Mutex<()>,
    /// One member-side watch per kind the synced Works deliver, by kind.
    watches: std::sync::Mutex<HashMap<KindKey, AbortHandle>>,
    /// Works deleted on the hub whose objects the member did not all let go of (a release
    /// failed), with when to try again: released again by [`Agent::resync`] until they
    /// are, or until the Work comes back.
    unreleased: std::sync::Mutex<HashMap<String, (Work, Instant)>>,
    /// Where the watches send what they saw; [`Agent::changes`] takes the receiver.
    pokes: mpsc::UnboundedSender<Poke>,
    poked: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Poke>>>,
}

impl Agent {
    /// An agent of `config.cluster`.
    pub fn new(hub: kube::Client, member: kube::Client, config: Config) -> Self {
        let (pokes, poked) = mpsc::unbounded_channel();
        Agent {
            hub,
            member: Member::new(member),
            config,
            synced: Mutex::default(),
            one_at_a_time: Mutex::default(),
            watches: std::sync::Mutex::default(),
            unreleased: std::sync::Mutex::default(),
            pokes,
            poked: std::sync::Mutex::new(Some(poked)),
        }
    }

    fn namespace(&self) -> String {
        format!("{WORK_NAMESPACE_PREFIX}{}", self.config.cluster)
    }

    /// Runs until the hub revokes the agent (an error) or a fatal error.
    pub async fn run(self) -> Result<(), Error> {
        self.admitted().await;
        let agent = Arc::new(self);
        let heartbeat = tokio::spawn(agent.clone().heartbeat());
        let works = tokio::spawn(agent.clone().works());
        let resync = tokio::spawn(agent.clone().resync());
        let changes = tokio::spawn(agent.clone().changes());
        let aborts = [
            heartbeat.abort_handle(),
            works.abort_handle(),
            resync.abort_handle(),
            changes.abort_handle(),
        ];
        let outcome = tokio::select! {
            r = heartbeat => r,
            r = works => r,
            r = resync => r,
            r = changes => r,
        };
        // Revoked or failed: nothing of this agent goes on (no watch, no sync).
        for task in aborts {
            task.abort();
        }
        agent.stop_watches();
        outcome.unwrap_or_else(|e| Err(Error::Hub(format!("a task of the agent ended: {e}"))))
    }

    /// Waits until the hub lets this agent in. Just after registration the hub may not
    /// yet have recorded the new certificate (401) or granted the cluster's access (403):
    /// the registrar writes both as the certificate is issued, within moments. Asked again
    /// after 50 ms, doubling up to 1 s, for at most [`ADMISSION_WAIT`]; any other answer
    /// goes on to the tasks, which deal with it (a hub down, a revocation confirmed), as
    /// does a refusal that lasts.
    async fn admitted(&self) {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &self.namespace());
        let deadline = Instant::now() + ADMISSION_WAIT;
        let mut pause = Duration::from_millis(50);
        loop {
            match Box::pin(leases.get_opt(HEARTBEAT_LEASE)).await {
                Err(e) if refused(&e) && Instant::now() + pause < deadline => {
                    debug!(error = %e, "not let in yet; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                _ => return,
            }
        }
    }

    /// Ends every member-side watch.
    fn stop_watches(&self) {
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, watch) in watches.drain() {
            watch.abort();
        }
    }

    /// Starts a member-side watch for each kind the synced Works deliver that has none,
    /// and stops those of kinds no Work delivers any more. The watches select this hub's
    /// objects by label (every Work's at once): one watch per kind, whatever the number
    /// of Works. Each holds only a [`Weak`] reference: an agent that ends stops them.
    async fn follow_kinds(self: &Arc<Self>) {
        let wanted: BTreeSet<KindKey> = {
            let synced = self.synced.lock().await;
            synced
                .values()
                .flat_map(|s| s.work.spec.manifests.iter())
                .filter_map(|m| flotilla_delivery::provenance::owned_kind(m.json()))
                .collect()
        };
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        watches.retain(|kind, watch| {
            let keep = wanted.contains(kind);
            if !keep {
                info!(api_version = %kind.0, kind = %kind.1, "no Work delivers this kind any more: its watch stopped");
                watch.abort();
            }
            keep
        });
        for kind in wanted {
            if watches.contains_key(&kind) {
                continue;
            }
            info!(api_version = %kind.0, kind = %kind.1, "watching the delivered objects of this kind on the member");
            let selector = Provenance {
                hub: self.config.hub_name.clone(),
                placement: String::new(),
                work: String::new(),
            };
            let stream = self.member.changes(std::slice::from_ref(&kind), &selector);
            let agent = Arc::downgrade(self);
            let task = tokio::spawn(forward(stream, agent));
            watches.insert(kind, task.abort_handle());
        }
    }

    /// Syncs again the Works whose objects the member-side watches saw change: the
    /// watches' store serves each sync, so one that finds everything as wanted asks the
    /// member nothing and writes nothing. Changes that came meanwhile are taken together
    /// (a rollout changes a Deployment many times in a row).
    async fn changes(self: Arc<Self>) -> Result<(), Error> {
        let taken = self
            .poked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut poked) = taken else {
            return Ok(());
        };
        while let Some(first) = poked.recv().await {
            let mut names = BTreeSet::new();
            let mut all = false;
            let mut take = |poke| match poke {
                Poke::Work(name) => {
                    names.insert(name);
                }
                Poke::All => all = true,
            };
            take(first);
            while let Ok(poke) = poked.try_recv() {
                take(poke);
            }
            let works: Vec<String> = {
                let synced = self.synced.lock().await;
                synced
                    .keys()
                    .filter(|name| all || names.contains(*name))
                    .cloned()
                    .collect()
            };
            for name in works {
                Box::pin(self.sync_again(&name)).await?;
            }
        }
        Ok(())
    }

    /// Renews the Lease every period and reports the member's facts every few.
    async fn heartbeat(self: Arc<Self>) -> Result<(), Error> {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &self.namespace());
        let clusters: Api<Cluster> = Api::all(self.hub.clone());
        let mut beats = 0u32;
        let mut last = None;
        // The facts last reported, and the beat they were reported at.
        let mut reported: Option<(serde_json::Value, u32)> = None;
        let mut ticker = tokio::time::interval(self.config.heartbeat_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match Box::pin(self.renew(&leases, &mut last)).await {
                Ok(()) => {}
                Err(e) if is_unauthorized(&e) => {
                    if self.confirmed_revoked().await {
                        return Err(Error::Revoked);
                    }
                }
                Err(e) => warn!(error = %e, "heartbeat not renewed; retrying next period"),
            }
            if beats.is_multiple_of(FACTS_EVERY) {
                match Box::pin(self.member.probe()).await {
                    Ok(health) => {
                        let facts = serde_json::json!({"status": {
                            "kubernetesVersion": health.kubernetes_version,
                            "allocatable": health.allocatable,
                            "properties": health.properties,
                        }});
                        let unchanged = reported.as_ref().is_some_and(|(was, at)| {
                            *was == facts && beats.wrapping_sub(*at) < FACTS_AGAIN_EVERY
                        });
                        if !unchanged {
                            match Box::pin(clusters.patch_status(
                                &self.config.cluster,
                                &PatchParams::default(),
                                &Patch::Merge(&facts),
                            ))
                            .await
                            {
                                Ok(_) => reported = Some((facts, beats)),
                                Err(e) if is_unauthorized(&e) => {
                                    if self.confirmed_revoked().await {
                                        return Err(Error::Revoked);
                                    }
                                }
                                Err(e) => warn!(error = %e, "the member's facts not reported"),
                            }
                        }
                    }
                    Err(e) => warn!(error = %e, "the member does not answer"),
                }
            }
            beats = beats.wrapping_add(1);
        }
    }

    /// Renews the heartbeat Lease as the kubelet renews its node's: an update of the
    /// Lease as this agent last wrote it, with no read before it. The Lease is read only
    /// when the agent has none yet, or when the update finds it changed (409: someone
    /// else wrote it) or gone (404); it is created if absent. A hub with 10,000 agents
    /// then answers 1,000 writes a second at a 10 s period, not as many reads besides.
    /// The Lease is kept without its managed fields (an update without them keeps the
    /// hub's), so that a thousand agents in a simulator hold little for it.
    async fn renew(
        &self,
        leases: &Api<Lease>,
        last: &mut Option<Lease>,
    ) -> Result<(), kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration = self.config.heartbeat_period.as_secs().max(1) * u64::from(MISSED_HEARTBEATS);
        let spec = LeaseSpec {
            holder_identity: Some(flotilla_api::agent::cluster_user(&self.config.cluster)),
            lease_duration_seconds: Some(i32::try_from(duration).unwrap_or(i32::MAX)),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        let renewed = |mut lease: Lease| {
            let acquire = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
            lease.spec = Some(LeaseSpec {
                acquire_time: acquire,
                ..spec.clone()
            });
            lease
        };
        let kept = |mut lease: Lease| {
            lease.metadata.managed_fields = None;
            lease
        };
        if let Some(lease) = last.take() {
            let lease = renewed(lease);
            match leases
                .replace(HEARTBEAT_LEASE, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    *last = Some(kept(written));
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    debug!(
                        code = s.code,
                        "heartbeat Lease changed on the hub; read again"
                    );
                }
                Err(e) => {
                    // Its metadata is as last written (the next update sets the spec
                    // again). Perhaps written: then that update conflicts and reads it.
                    *last = Some(lease);
                    return Err(e);
                }
            }
        }
        match leases.get_opt(HEARTBEAT_LEASE).await? {
            Some(lease) => {
                let written = leases
                    .replace(HEARTBEAT_LEASE, &PostParams::default(), &renewed(lease))
                    .await?;
                *last = Some(kept(written));
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
                    Ok(created) => *last = Some(kept(created)),
                    // Created meanwhile by another writer: read at the next period.
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Whether a 401 the hub answered means the agent is revoked: the hub is asked again
    /// with the current certificate (a renewal may have replaced the one the refused
    /// request used), up to 3 times 1 s apart. Revoked only if every answer is 401.
    async fn confirmed_revoked(&self) -> bool {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &self.namespace());
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match Box::pin(leases.get_opt(HEARTBEAT_LEASE)).await {
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
        let mut events = std::pin::pin!(StreamBackoff::new(
            watcher(api, watcher::Config::default()),
            watch_backoff()
        ));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(work) | watcher::Event::InitApply(work)) => {
                    Box::pin(self.sync(work, false)).await?;
                }
                Ok(watcher::Event::Delete(work)) => Box::pin(self.remove(&work)).await,
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
                }
            }
        }
        Ok(())
    }

    /// Syncs every Work again once it is due: a resync period after its last sync, or
    /// sooner after a failed apply or status write.
    async fn resync(self: Arc<Self>) -> Result<(), Error> {
        let every = self.retry_after().min(Duration::from_secs(2));
        let mut ticker = tokio::time::interval(every.max(Duration::from_millis(100)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let now = Instant::now();
            let due: Vec<String> = {
                let synced = self.synced.lock().await;
                synced
                    .iter()
                    .filter(|(_, s)| s.due <= now)
                    .map(|(name, _)| name.clone())
                    .collect()
            };
            for name in due {
                Box::pin(self.sync_again(&name)).await?;
            }
            let unreleased: Vec<Work> = self
                .unreleased
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .filter(|(_, due)| *due <= now)
                .map(|(work, _)| work.clone())
                .collect();
            for work in unreleased {
                Box::pin(self.remove(&work)).await;
            }
        }
    }

    /// How soon a failed Work is synced again.
    fn retry_after(&self) -> Duration {
        self.config.resync_period.min(RETRY)
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

    /// Syncs Work `name` again from its newest copy, if the agent still has it.
    async fn sync_again(self: &Arc<Self>, name: &str) -> Result<(), Error> {
        let _one = self.one_at_a_time.lock().await;
        let work = self.synced.lock().await.get(name).map(|s| s.work.clone());
        match work {
            Some(work) => self.sync_one(work, true).await,
            None => Ok(()),
        }
    }

    /// Applies `work` if it changed since it was last applied (or `again`), and writes its
    /// status if that changed.
    async fn sync(self: &Arc<Self>, work: Work, again: bool) -> Result<(), Error> {
        let _one = self.one_at_a_time.lock().await;
        self.sync_one(work, again).await
    }

    /// [`Agent::sync`], its caller holding `one_at_a_time`.
    async fn sync_one(self: &Arc<Self>, work: Work, again: bool) -> Result<(), Error> {
        let name = work.name_any();
        // Back on the hub: what it delivers is synced, not released.
        self.unreleased
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&name);
        let uid = work.uid().unwrap_or_default();
        let generation = work.metadata.generation;
        // The wait for this generation's rollout already under way, if any.
        let waiting;
        {
            let mut synced = self.synced.lock().await;
            let same = synced
                .get_mut(&name)
                .filter(|s| s.uid == uid && s.generation == generation);
            waiting = same
                .as_ref()
                .and_then(|s| s.held.as_ref().map(|(until, _)| *until));
            if let Some(s) = same
                && !again
            {
                // A change of its status or metadata: keep the newest copy. A status that
                // is not the last one written (a write that failed, or another writer's)
                // is written again by a sync now.
                let stale = s.work.status != work.status;
                s.work = work.clone();
                if !stale {
                    return Ok(());
                }
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
        // A new generation rolling out: its status is written once the member's rollout
        // reports back (a member-side watch pokes this Work) or the wait is over, not now
        // and again then (as push does).
        let now = Instant::now();
        let settling =
            flotilla_delivery::settles_until(work.status.as_ref(), &status, applied, waiting, now);
        let written = settling.is_none()
            && (work.status.as_ref() == Some(&status) || self.write_status(&work, &status).await?);
        if !again {
            info!(work = %name, ?generation, applied, held = settling.is_some(), "Work synced");
        }
        let mut synced = self.synced.lock().await;
        let mut work = work;
        let due = match settling {
            Some(until) => until,
            None if applied && written => now + self.config.resync_period,
            None => now + self.retry_after(),
        };
        let held = match settling {
            Some(until) => Some((until, status)),
            None => {
                work.status = Some(status);
                None
            }
        };
        let new = synced
            .insert(
                name,
                Synced {
                    uid: uid.clone(),
                    generation,
                    due,
                    held,
                    work,
                },
            )
            .is_none_or(|old| old.generation != generation || old.uid != uid);
        drop(synced);
        // A new Work or a new generation may deliver another kind.
        if new {
            self.follow_kinds().await;
        }
        Ok(())
    }

    /// Writes `status` into `work`'s status; whether it was written (a Work gone needs
    /// none).
    async fn write_status(&self, work: &Work, status: &WorkStatus) -> Result<bool, Error> {
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
            Ok(_) => Ok(true),
            Err(e) if is_unauthorized(&e) => match self.confirmed_revoked().await {
                true => Err(Error::Revoked),
                false => Ok(false),
            },
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
            Err(e) => {
                warn!(work = %work.name_any(), error = %e, "status not written; tried again shortly");
                Ok(false)
            }
        }
    }

    /// A Work deleted on the hub: what it applied is released as its policy says.
    async fn remove(self: &Arc<Self>, work: &Work) {
        let _one = self.one_at_a_time.lock().await;
        let name = work.name_any();
        let known = self.synced.lock().await.remove(&name);
        self.follow_kinds().await;
        // What the last sync applied: its status, written or still held (a release tried
        // again later keeps it).
        let work = match known {
            Some(Synced {
                mut work,
                held: Some((_, status)),
                ..
            }) => {
                work.status = Some(status);
                work
            }
            Some(s) => s.work,
            None => work.clone(),
        };
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
            Ok(()) => {
                self.unreleased
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&name);
                info!(work = %name, "Work removed");
            }
            Err(e) => {
                let again = Instant::now() + self.retry_after();
                self.unreleased
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.clone(), (work, again));
                warn!(work = %name, error = %e, "Work not fully removed; trying again later");
            }
        }
    }
}

/// Passes what a member-side watch sees to its agent while the agent lives.
async fn forward(stream: impl futures_util::Stream<Item = Change>, agent: Weak<Agent>) {
    let mut stream = std::pin::pin!(stream);
    while let Some(change) = stream.next().await {
        let Some(agent) = agent.upgrade() else { return };
        let poke = match change {
            Change::Object { work: Some(work) } => Poke::Work(work),
            Change::Object { work: None } | Change::Listed => Poke::All,
        };
        if agent.pokes.send(poke).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_works_watch_retries_after_pauses_that_double_to_a_bound_each_with_a_random_part() {
        let mut backoff = watch_backoff();
        let mut base = WATCH_RETRY_FIRST;
        let mut total = Duration::ZERO;
        for attempt in 0..12 {
            let pause = backoff.next().expect("the watch is retried for ever");
            assert!(
                pause >= base && pause < base * 2,
                "attempt {attempt}: {pause:?} not within [{base:?}, {:?})",
                base * 2
            );
            total += pause;
            base = (base * 2).min(WATCH_RETRY_MOST);
        }
        // Twelve attempts in a row span more than a minute (one a second before).
        assert!(total >= Duration::from_secs(60), "{total:?}");
        // Starting over (an event received) begins again at the first pause.
        kube::runtime::utils::Backoff::reset(&mut backoff);
        let pause = backoff.next().unwrap();
        assert!(pause >= WATCH_RETRY_FIRST && pause < WATCH_RETRY_FIRST * 2);
    }
}
