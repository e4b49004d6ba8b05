//! The fleet controllers at work against the hub's API (any `kube::Client`; the hub uses
//! one over its own in-process service). This is the only place that wires clients,
//! watches and queues; the decisions are made by [`plan`](crate::plan),
//! [`status`](crate::status), the scheduler and the renderer.
//!
//! ```text
//!   Cluster ──► health: probe the member ─► Cluster.status, ClusterProfile,
//!      │                                    namespace flotilla-cluster-<name>
//!      │ (selection facts changed)          ClusterSet ──► bindings: Bound
//!      ▼                                        │          ◄── ClusterSetBinding
//!   Placement / ClusterPlacement ◄── templates (watched per kind), Overrides, Works,
//!      │                             the namespace's reach (bindings, sets, tenancy)
//!      │ placement: plan ─► Works (SSA, field manager flotilla), PlacementDecision,
//!      │                    Placement.status, the template's aggregated status
//!      ▼
//!   Work ──► push: flotilla_delivery::Member::sync on the member ─► Work.status
//!     ▲        ▲ member objects changed (drift)
//!     │ compute: one Work per member of its sets ◄── ComputeNamespace, Clusters
//! ```

#[cfg(test)]
mod access;
mod bindings;
mod caches;
mod compute;
mod events;
mod health;
pub mod leader;
mod members;
mod metrics;
mod placement;
mod push;
mod rollout;
mod spread;
mod templates;

pub use events::Limiter;
pub use members::{KUBECONFIG_KEY, MEMBER_CONCURRENCY, Pools, client_from_kubeconfig};
pub use metrics::Metrics;
pub use push::{PUSH_CONCURRENCY, UNJOIN_ANNOTATION};

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_api::{
    Cluster, ClusterOverride, ClusterPlacement, ClusterSet, ClusterSetBinding, ComputeNamespace,
    Override, Placement, PlacementRevision, Work,
};
use futures_util::{Stream, StreamExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::ClusterView;
use crate::plan::PlacementKey;
use crate::tenancy::Tenancy;

/// The field manager of everything the controllers write on the hub and on members.
pub const FIELD_MANAGER: &str = "flotilla";

/// Settings of the fleet controllers.
#[derive(Debug, Clone)]
pub struct Config {
    /// The hub's name, written on member objects as their provenance.
    pub hub: String,
    /// How often each member is probed (longer in fleets too large for it, see
    /// [`Config::probe_period`]); a member that does not answer within it is
    /// `Ready=False`.
    pub health_period: Duration,
    /// How often each Work is re-applied even when nothing changed (drift correction when
    /// a member's change went unseen).
    pub resync_period: Duration,
    /// The namespace of ClusterProfiles of clusters in no set, of ClusterPlacements'
    /// PlacementDecisions, and of the members' credentials (the only Secrets the
    /// controllers watch).
    pub system_namespace: String,
    /// Whether a namespace without a ClusterSetBinding reaches every cluster (`Open`) or
    /// none (`Bound`).
    pub tenancy: Tenancy,
}

/// The most health probes per second the hub makes across its fleet. With 10 s periods a
/// fleet of 10,000 would take 1,000 a second, each an HTTPS request the hub and the member
/// pay for whether anything changed or not; past `MAX_PROBES_PER_SECOND × health_period`
/// clusters (2,000 at 10 s) each is probed less often instead.
pub const MAX_PROBES_PER_SECOND: u32 = 200;

impl Config {
    /// How often each of `clusters` members is probed: the health period, or longer when
    /// probing so many that often would exceed [`MAX_PROBES_PER_SECOND`].
    pub fn probe_period(&self, clusters: usize) -> Duration {
        let spread = Duration::from_secs_f64(clusters as f64 / f64::from(MAX_PROBES_PER_SECOND));
        self.health_period.max(spread)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hub: "flotilla-hub".into(),
            health_period: Duration::from_secs(10),
            resync_period: Duration::from_secs(300),
            system_namespace: flotilla_api::access::CREDENTIALS_NAMESPACE.into(),
            tenancy: Tenancy::Open,
        }
    }
}

/// Why a controller could not do its work this time (it retries with a backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the hub failed.
    #[error("hub API: {0}")]
    Hub(#[from] kube::Error),
    /// The member could not be reached or configured.
    #[error("cluster {cluster}: {message}")]
    Member {
        /// The cluster.
        cluster: String,
        /// What went wrong.
        message: String,
    },
    /// The hub does not serve a kind a placement selects.
    #[error("{0}")]
    NotServed(String),
    /// Something is still in progress (such as Works being removed); try again later.
    #[error("waiting: {0}")]
    Waiting(String),
    /// A finalizer step failed.
    #[error("{0}")]
    Finalizer(Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// Whether this is a finalizer added from a cached object older than the hub's (the
    /// patch's test failed): the cache catches up at once, so it is retried soon and
    /// quietly.
    fn is_stale_finalizer(&self) -> bool {
        matches!(self, Error::Finalizer(e)
            if matches!(**e, kube::runtime::finalizer::Error::AddFinalizer(_)))
    }
}

/// The queues that make a controller look at an object again (each controller's own
/// stream of changes aside).
struct Pokes {
    placement: mpsc::UnboundedSender<ObjectRef<Placement>>,
    cluster_placement: mpsc::UnboundedSender<ObjectRef<ClusterPlacement>>,
    work: mpsc::UnboundedSender<ObjectRef<Work>>,
    binding: mpsc::UnboundedSender<ObjectRef<ClusterSetBinding>>,
    compute: mpsc::UnboundedSender<ObjectRef<ComputeNamespace>>,
}

impl Pokes {
    /// Makes the placement controller look at placement `key` again.
    fn placement(&self, key: &PlacementKey) {
        // A closed queue means the process is stopping.
        match &key.namespace {
            Some(ns) => {
                let _ = self.placement.send(ObjectRef::new(&key.name).within(ns));
            }
            None => {
                let _ = self.cluster_placement.send(ObjectRef::new(&key.name));
            }
        }
    }

    /// Makes the push controller sync `work` again.
    fn work(&self, work: ObjectRef<Work>) {
        let _ = self.work.send(work);
    }
}

/// The fleet's wiring: the client and settings, the shared caches, the queues between
/// controllers, and each controller's own state (which it alone reads and writes; the
/// few things another controller may ask of it are methods):
///
/// | part | owner | what it holds |
/// |---|---|---|
/// | `caches` | the reflectors of [`run`] | the fleet's objects, the Works' index |
/// | `placement` | placement controller | plans kept, decisions published, templates given a status, the inputs' epoch |
/// | `push` | push controller | drift watches per member, Works settling, backoff per Work |
/// | `health` | cluster controller | namespaces, profiles and probes confirmed lately |
/// | `templates` | the detector | one cache per template kind |
/// | `members` | — (any controller) | member clients, their credentials' versions |
/// | `events`, `metrics` | — (any controller) | Events' rate limits and queue; counters |
pub(crate) struct Fleet {
    client: Client,
    config: Config,
    caches: caches::Caches,
    pokes: Pokes,
    templates: templates::Templates,
    members: members::Members,
    placement: placement::PlacementState,
    push: push::PushState,
    health: health::HealthState,
    metrics: Metrics,
    /// The controllers' Kubernetes Events, rate-limited and aggregated.
    events: events::Recorder,
}

impl Fleet {
    /// Makes the push controller sync every Work of `cluster` now, their backoffs over
    /// (the cluster came back).
    fn poke_works_of(&self, cluster: &str) {
        let namespace = crate::plan::work_namespace(cluster);
        self.push.retry_now(&namespace);
        for w in self.caches.works.in_namespace(&namespace) {
            self.pokes.work(ObjectRef::from_obj(&*w));
        }
    }

    /// Makes the placement controller look at every Placement of `namespace` again (its
    /// reach changed).
    fn poke_namespace(&self, namespace: &str) {
        for p in self.caches.placements.state() {
            if p.metadata.namespace.as_deref() == Some(namespace) {
                let _ = self.pokes.placement.send(ObjectRef::from_obj(&*p));
            }
        }
    }

    /// Makes the bindings controller look at every binding of ClusterSet `set` again.
    fn poke_bindings_of(&self, set: &str) {
        for b in self.caches.bindings.state() {
            if b.spec.cluster_set == set {
                let _ = self.pokes.binding.send(ObjectRef::from_obj(&*b));
            }
        }
    }

    /// Makes the ComputeNamespace controller look at every ComputeNamespace again (a
    /// cluster joined, left or changed sets).
    fn poke_compute_namespaces(&self) {
        for c in self.caches.compute_namespaces.state() {
            let _ = self.pokes.compute.send(ObjectRef::from_obj(&*c));
        }
    }

    /// Makes the controllers look at every placement again.
    fn poke_all(&self) {
        for p in self.caches.placements.state() {
            let _ = self.pokes.placement.send(ObjectRef::from_obj(&*p));
        }
        for p in self.caches.cluster_placements.state() {
            let _ = self.pokes.cluster_placement.send(ObjectRef::from_obj(&*p));
        }
    }
}

/// Patches the object `name` of `K` in `namespace` (its `subresource` if given) and reads
/// nothing back: the answer, a whole object, is not decoded, since the caches see the
/// change through their watches anyway.
async fn patch_only<K, P>(
    client: &Client,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    params: &kube::api::PatchParams,
    patch: &kube::api::Patch<P>,
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = ()>,
    P: serde::Serialize + std::fmt::Debug,
{
    let request = kube::core::Request::new(K::url_path(&(), Some(namespace)));
    let request = match subresource {
        Some(subresource) => request.patch_subresource(subresource, name, params, patch),
        None => request.patch(name, params, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await.map(drop)
}

/// A JSON patch that replaces an object's whole `status` with `status` (a merge patch
/// would keep fields the new status leaves out).
fn status_patch<S: serde::Serialize>(status: &S) -> kube::api::Patch<()> {
    let value = serde_json::to_value(status).unwrap_or_default();
    kube::api::Patch::Json(json_patch::Patch(vec![json_patch::PatchOperation::Add(
        json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/status").expect("a valid pointer"),
            value,
        },
    )]))
}

/// An override (of either kind) changed: plans are made again, and every placement looks
/// again once the caches are filled.
fn override_changed<K>(fleet: &std::sync::Weak<Fleet>, event: &watcher::Event<K>) {
    let Some(fleet) = fleet.upgrade() else { return };
    fleet.placement.inputs_changed();
    if !matches!(event, watcher::Event::InitApply(_) | watcher::Event::Init) {
        fleet.poke_all();
    }
}

/// A stream of what `rx` receives, gathered: from the first item received, for `every`,
/// then each distinct item once (in no particular order).
fn gathered_stream<T>(mut rx: mpsc::UnboundedReceiver<T>, every: Duration) -> impl Stream<Item = T>
where
    T: Eq + std::hash::Hash + Send + 'static,
{
    let (tx, out) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut gathered = std::collections::HashSet::new();
        while let Some(first) = rx.recv().await {
            gathered.insert(first);
            let until = tokio::time::sleep(every);
            tokio::pin!(until);
            let open = loop {
                tokio::select! {
                    () = &mut until => break true,
                    item = rx.recv() => match item {
                        Some(item) => { gathered.insert(item); }
                        None => break false,
                    },
                }
            };
            for item in gathered.drain() {
                if tx.send(item).is_err() {
                    return;
                }
            }
            if !open {
                return;
            }
        }
    });
    receiver_stream(out)
}

/// A stream of what `rx` receives.
fn receiver_stream<T: Send + 'static>(
    rx: mpsc::UnboundedReceiver<T>,
) -> impl Stream<Item = T> + Send {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|t| (t, rx)) })
}

/// A kind the controllers cache: every object of it, from one watch.
trait Cached:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Cached for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A cache of every object of `K`: the store, its writer, and the API it watches.
fn reflect<K: Cached>(client: &Client) -> (Store<K>, reflector::store::Writer<K>, Api<K>) {
    let (store, writer) = reflector::store();
    (store, writer, Api::all(client.clone()))
}

/// How often the Works' changes are brought back to their placements' status.
const STATUS_EVERY: Duration = Duration::from_millis(250);

/// How long a member's changes are gathered before the Works that delivered them sync
/// again: a rollout's status updates on a member cost one sync and status write per Work,
/// not one each, and they wait behind the deliveries a template change started.
const FEEDBACK_EVERY: Duration = Duration::from_secs(1);

/// How many changes a shared cache holds for its controller before its watch waits.
const SHARED_BUFFER: usize = 1024;

/// A cache of every object of `K` that a controller also reads (one copy of each object,
/// not two): the store, its writer, the API it watches, and the controller's stream of
/// changed objects.
type SharedCache<K> = (
    Store<K>,
    reflector::store::Writer<K>,
    Api<K>,
    reflector::ReflectHandle<K>,
);

fn reflect_shared<K: Cached>(client: &Client) -> SharedCache<K> {
    let (store, writer) = reflector::store_shared(SHARED_BUFFER);
    let changed = writer.subscribe().expect("a shared store has subscribers");
    (store, writer, Api::all(client.clone()), changed)
}

/// Follows the versions of the members' credentials Secrets (their metadata only, in the
/// system namespace: the controllers may read no other Secrets), so that member clients
/// are trusted while their credentials stand still and rebuilt when they change. (A
/// Cluster whose credentials are elsewhere is read again each recheck period.)
fn watch_credentials(fleet: &Arc<Fleet>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(fleet);
    let api: Api<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>> =
        Api::namespaced(fleet.client.clone(), &fleet.config.system_namespace);
    tokio::spawn(async move {
        let events = watcher(api, watcher::Config::default()).default_backoff();
        futures_util::pin_mut!(events);
        let mut listed = std::collections::HashSet::new();
        while let Some(event) = events.next().await {
            let Some(fleet) = weak.upgrade() else { return };
            let key = |meta: &kube::api::ObjectMeta| {
                (
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default(),
                )
            };
            match event {
                Ok(watcher::Event::Init) => listed.clear(),
                Ok(watcher::Event::InitApply(secret)) => {
                    listed.insert(key(&secret.metadata));
                    let version = secret.metadata.resource_version.clone();
                    fleet.members.secret_seen(key(&secret.metadata), version);
                }
                Ok(watcher::Event::InitDone) => fleet.members.secrets_listed(&listed),
                Ok(watcher::Event::Apply(secret)) => {
                    let version = secret.metadata.resource_version.clone();
                    fleet.members.secret_seen(key(&secret.metadata), version);
                }
                Ok(watcher::Event::Delete(secret)) => {
                    fleet.members.secret_seen(key(&secret.metadata), None);
                }
                Err(e) => warn!(error = %e, "the watch of credentials failed; retrying"),
            }
        }
    })
}

/// Runs a reflector until its task is aborted, calling `on_event` for each event.
fn spawn_reflector<K>(
    name: impl std::fmt::Display + Send + 'static,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    tokio::spawn(async move {
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            // Who manages which field is never read here: the bulk of an object, not kept.
            .modify(|o| o.managed_fields_mut().clear());
        let stream = reflector::reflector(writer, events);
        futures_util::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => on_event(&event),
                Err(e) => warn!(cache = %name, error = %e, "watch failed; retrying"),
            }
        }
    })
}

/// Tasks aborted together when dropped: what [`run`] spawns ends with it.
#[derive(Default)]
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Tasks {
    fn push(&mut self, task: tokio::task::JoinHandle<()>) {
        self.0.push(task);
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Runs the fleet controllers, counting into `metrics`, until the process ends or the
/// future is dropped (the hub's replica lost the fleet Lease): every task it spawned then
/// stops with it.
pub async fn run(client: Client, config: Config, metrics: Metrics) {
    let (clusters, clusters_writer, clusters_api, changed_clusters) =
        reflect_shared::<Cluster>(&client);
    let (overrides, overrides_writer, overrides_api) = reflect::<Override>(&client);
    let (cluster_overrides, cluster_overrides_writer, cluster_overrides_api) =
        reflect::<ClusterOverride>(&client);
    let (works, works_writer, works_api, changed_works) = reflect_shared::<Work>(&client);
    let (placements, placements_writer, placements_api, changed_placements) =
        reflect_shared::<Placement>(&client);
    let (
        cluster_placements,
        cluster_placements_writer,
        cluster_placements_api,
        changed_cluster_placements,
    ) = reflect_shared::<ClusterPlacement>(&client);
    let (poke_placement, placement_rx) = mpsc::unbounded_channel();
    let (poke_cluster_placement, cluster_placement_rx) = mpsc::unbounded_channel();
    let (poke_work, work_rx) = mpsc::unbounded_channel();
    let (poke_binding, binding_rx) = mpsc::unbounded_channel();
    let (bindings, bindings_writer, bindings_api, changed_bindings) =
        reflect_shared::<ClusterSetBinding>(&client);
    let (cluster_sets, cluster_sets_writer, cluster_sets_api) = reflect::<ClusterSet>(&client);
    let (revisions, revisions_writer, revisions_api) = reflect::<PlacementRevision>(&client);
    let (compute_namespaces, compute_writer, compute_api, changed_compute) =
        reflect_shared::<ComputeNamespace>(&client);
    let (poke_compute, compute_rx) = mpsc::unbounded_channel();
    // Every task spawned here ends when this future is dropped (a lost election).
    let mut tasks = Tasks::default();
    let hub_name = config.hub.clone();
    let fleet = Arc::new(Fleet {
        client: client.clone(),
        templates: templates::Templates::new(client.clone()),
        members: members::Members::new(
            client.clone(),
            config.health_period,
            health::reconfirm_after(&config),
        ),
        config,
        caches: caches::Caches {
            clusters,
            overrides,
            cluster_overrides,
            works: caches::Works::new(works),
            placements,
            cluster_placements,
            bindings,
            cluster_sets,
            revisions,
            compute_namespaces,
        },
        pokes: Pokes {
            placement: poke_placement,
            cluster_placement: poke_cluster_placement,
            work: poke_work,
            binding: poke_binding,
            compute: poke_compute,
        },
        placement: placement::PlacementState::default(),
        push: push::PushState::default(),
        health: health::HealthState::default(),
        metrics,
        events: events::Recorder::new(client.clone(), hub_name),
    });

    // Clusters: a change of what selection sees re-plans every placement.
    let weak = Arc::downgrade(&fleet);
    // What selection sees of each cluster, and whether it is leaving.
    let mut seen: HashMap<String, (ClusterView, bool)> = HashMap::new();
    tasks.push(spawn_reflector(
        "clusters",
        clusters_api,
        clusters_writer,
        move |event| {
            let Some(fleet) = weak.upgrade() else { return };
            let changed = match event {
                watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                    let facts = (
                        crate::model::view(c),
                        c.metadata.deletion_timestamp.is_some(),
                    );
                    seen.insert(facts.0.name.clone(), facts.clone()) != Some(facts)
                }
                watcher::Event::Delete(c) => seen
                    .remove(&c.metadata.name.clone().unwrap_or_default())
                    .is_some(),
                watcher::Event::InitDone => true,
                watcher::Event::Init => false,
            };
            if changed {
                fleet.placement.inputs_changed();
            }
            if changed && !matches!(event, watcher::Event::InitApply(_)) {
                fleet.poke_all();
                fleet.poke_compute_namespaces();
            }
        },
    ));
    tasks.push(watch_credentials(&fleet));
    bindings::watch(&fleet, bindings_api, bindings_writer);
    bindings::watch_sets(&fleet, cluster_sets_api, cluster_sets_writer);
    let weak = Arc::downgrade(&fleet);
    tasks.push(spawn_reflector(
        "overrides",
        overrides_api,
        overrides_writer,
        move |event| {
            override_changed(&weak, event);
        },
    ));
    let weak = Arc::downgrade(&fleet);
    tasks.push(spawn_reflector(
        "clusteroverrides",
        cluster_overrides_api,
        cluster_overrides_writer,
        move |event| override_changed(&weak, event),
    ));
    // Works: their status is the placements' status. A Work gone pokes its placement at
    // once (it may be waiting to finish); changes are gathered and poke each placement at
    // most once per STATUS_EVERY, and no sooner than its last reconcile's length allows
    // (`PlacementState::status_due`), so that a thousand Works reporting in one second
    // cost a few plans and status writes, not a thousand, and a placement over thousands
    // of clusters is not planned and its large status written four times a second.
    let weak = Arc::downgrade(&fleet);
    let changed: Arc<Mutex<BTreeSet<PlacementKey>>> = Arc::default();
    let gathered = changed.clone();
    tasks.push(spawn_reflector(
        "works",
        works_api,
        works_writer,
        move |event| {
            let Some(fleet) = weak.upgrade() else { return };
            fleet.caches.works.apply(event);
            let key = |w: &Work| PlacementKey {
                namespace: w.spec.placement.namespace.clone(),
                name: w.spec.placement.name.clone(),
            };
            // A ComputeNamespace's Work: its status (or its going) is that one's.
            if let watcher::Event::Apply(w) | watcher::Event::Delete(w) = event
                && let Some(name) = flotilla_api::compute::referenced(&w.spec.placement)
            {
                let _ = fleet.pokes.compute.send(ObjectRef::new(name));
                return;
            }
            match event {
                watcher::Event::Delete(w) => fleet.pokes.placement(&key(w)),
                watcher::Event::Apply(w) => {
                    gathered
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key(w));
                }
                _ => {}
            }
        },
    ));
    let weak = Arc::downgrade(&fleet);
    tasks.push(tokio::spawn(async move {
        let mut every = tokio::time::interval(STATUS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(fleet) = weak.upgrade() else { return };
            // A placement whose last reconcile was lately waits (the others are poked).
            let now = std::time::Instant::now();
            let due: Vec<PlacementKey> = {
                let mut pending = changed.lock().unwrap_or_else(PoisonError::into_inner);
                let due: Vec<PlacementKey> = pending
                    .iter()
                    .filter(|key| fleet.placement.status_due(key, now))
                    .cloned()
                    .collect();
                for key in &due {
                    pending.remove(key);
                }
                due
            };
            for key in &due {
                fleet.pokes.placement(key);
            }
        }
    }));
    tasks.push(spawn_reflector(
        "placements",
        placements_api,
        placements_writer,
        |_| {},
    ));
    tasks.push(spawn_reflector(
        "computenamespaces",
        compute_api,
        compute_writer,
        |_| {},
    ));
    tasks.push(spawn_reflector(
        "placementrevisions",
        revisions_api,
        revisions_writer,
        |_| {},
    ));
    tasks.push(spawn_reflector(
        "clusterplacements",
        cluster_placements_api,
        cluster_placements_writer,
        |_| {},
    ));
    for (name, ready) in [
        (
            "clusters",
            fleet.caches.clusters.wait_until_ready().await.is_ok(),
        ),
        (
            "overrides",
            fleet.caches.overrides.wait_until_ready().await.is_ok(),
        ),
        (
            "clusteroverrides",
            fleet
                .caches
                .cluster_overrides
                .wait_until_ready()
                .await
                .is_ok(),
        ),
        (
            "works",
            fleet.caches.works.store().wait_until_ready().await.is_ok(),
        ),
        (
            "clustersetbindings",
            fleet.caches.bindings.wait_until_ready().await.is_ok(),
        ),
        (
            "clustersets",
            fleet.caches.cluster_sets.wait_until_ready().await.is_ok(),
        ),
        (
            "placementrevisions",
            fleet.caches.revisions.wait_until_ready().await.is_ok(),
        ),
        (
            "computenamespaces",
            fleet
                .caches
                .compute_namespaces
                .wait_until_ready()
                .await
                .is_ok(),
        ),
    ] {
        if !ready {
            warn!(cache = name, "cache never filled");
        }
    }
    info!(hub = %fleet.config.hub, tenancy = %fleet.config.tenancy, "fleet controllers starting");
    tokio::join!(
        placement::run::<Placement>(
            fleet.clone(),
            changed_placements,
            receiver_stream(placement_rx)
        ),
        placement::run::<ClusterPlacement>(
            fleet.clone(),
            changed_cluster_placements,
            receiver_stream(cluster_placement_rx)
        ),
        push::run(
            fleet.clone(),
            changed_works,
            gathered_stream(work_rx, FEEDBACK_EVERY)
        ),
        health::run(fleet.clone(), changed_clusters),
        bindings::run(fleet.clone(), changed_bindings, receiver_stream(binding_rx)),
        compute::run(fleet.clone(), changed_compute, receiver_stream(compute_rx)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_finalizer_addition_is_a_stale_cache() {
        use kube::runtime::finalizer::Error as Finalizer;
        let stale = Error::Finalizer(Box::new(Finalizer::AddFinalizer(
            kube::Error::LinesCodecMaxLineLengthExceeded,
        )));
        assert!(stale.is_stale_finalizer());
        let removal = Error::Finalizer(Box::new(Finalizer::RemoveFinalizer(
            kube::Error::LinesCodecMaxLineLengthExceeded,
        )));
        assert!(!removal.is_stale_finalizer());
        assert!(!Error::Waiting("a cache".into()).is_stale_finalizer());
    }

    #[tokio::test]
    async fn gathered_items_come_once_each_and_the_stream_ends_with_its_channel() {
        let (tx, rx) = mpsc::unbounded_channel();
        for item in ["a", "b", "a", "a", "c", "b"] {
            tx.send(item).unwrap();
        }
        drop(tx);
        let mut items: Vec<&str> = gathered_stream(rx, Duration::from_secs(3600))
            .collect()
            .await;
        items.sort_unstable();
        assert_eq!(items, ["a", "b", "c"]);
    }
}
