//! Push delivery: each Work is applied to its member by the hub
//! ([`flotilla_delivery::Member::sync`]) and its status written back; a change of a
//! delivered object on the member makes the cluster's Works sync again (drift).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::{DeletionPolicy, Work, WorkStatus};
use flotilla_delivery::{Change, Provenance, settles_until};
use futures_util::{Stream, StreamExt};
use kube::api::PatchParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::{Instrument, info, info_span, warn};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use super::events::Type;
use super::{Error, Fleet, patch_only, status_patch};
use crate::model;
use crate::plan::WORK_NAMESPACE_PREFIX;

/// The finalizer that removes a Work's objects from its member before the Work goes.
pub const FINALIZER: &str = "flotilla.io/delivery";

/// The longest a Work's sync (or removal) may take on its member.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// How many Works are synced to their members at once, over all members (and at most
/// [`MEMBER_CONCURRENCY`](super::MEMBER_CONCURRENCY) on one member).
pub const PUSH_CONCURRENCY: usize = 1024;

/// The first wait before a failed apply (or a sync that failed on the way) is tried
/// again; each further failure in a row doubles it, up to [`RETRY_MAX`], and a success
/// starts over. A member that is down is not asked every second for long, and one that
/// comes back is asked again soon, not at the next resync.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a Work that keeps failing (its cluster turning
/// Ready again tries it at once anyway).
pub const RETRY_MAX: Duration = Duration::from_secs(120);

/// Failures in a row of each Work (`namespace/name`) that is failing, for its backoff.
#[derive(Default)]
pub(super) struct Retries {
    failures: std::collections::HashMap<String, u32>,
}

impl Retries {
    /// Notes one more failure of `work`; how long until it is tried again: [`RETRY_FIRST`]
    /// doubled for each failure before, at most [`RETRY_MAX`], and up to a tenth more
    /// drawn at random, so that the Works of a member that went down together do not all
    /// come back in the same instant.
    pub(super) fn failed(&mut self, work: &str) -> Duration {
        let failures = self.failures.entry(work.to_owned()).or_default();
        *failures = failures.saturating_add(1);
        let wait = retry_after(*failures);
        wait + wait.mul_f64(jitter() / 10.0)
    }

    /// `work` succeeded (or is gone): its next failure waits [`RETRY_FIRST`] again.
    pub(super) fn reset(&mut self, work: &str) {
        self.failures.remove(work);
    }

    /// Forgets the failures of every Work in `namespace` (a cluster's): its cluster came
    /// back, they are tried now and start over.
    pub(super) fn reset_namespace(&mut self, namespace: &str) {
        self.failures
            .retain(|work, _| work.split_once('/').is_none_or(|(ns, _)| ns != namespace));
    }
}

/// The wait before the next try after `failures` failures in a row (at least one).
fn retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// A number in [0, 1) drawn at random.
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    // A new `RandomState` has new random keys: hashing nothing with it draws a number.
    let drawn = std::collections::hash_map::RandomState::new().hash_one(());
    (drawn % 1000) as f64 / 1000.0
}

/// The annotation on a Cluster saying what its unjoining does to the objects the hub
/// placed there: `Orphan` leaves them.
pub const UNJOIN_ANNOTATION: &str = "flotilla.io/unjoin";

/// The watch of one member's delivered objects, for the kinds its Works hold.
pub(super) struct DriftWatch {
    kinds: BTreeSet<(String, String)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DriftWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the push controller keeps between syncs: the watch of each member's delivered
/// objects, the Works whose status waits for their rollout, and the failures in a row of
/// each failing Work. Only this controller reads it; the cluster controller may ask it to
/// try a cluster's Works at once ([`PushState::retry_now`]) or drop a cluster's watch
/// ([`PushState::forget_cluster`]).
#[derive(Default)]
pub(super) struct PushState {
    /// The drift watch of each member, by cluster name.
    drift_watches: Mutex<HashMap<String, DriftWatch>>,
    /// Works (namespace/name) whose status write waits for their member's rollout to
    /// report back: the generation it waits for, and until when.
    settling: Mutex<HashMap<String, (i64, Instant)>>,
    /// Failures in a row of the Works that are failing, for their backoff.
    retries: Mutex<Retries>,
}

impl PushState {
    /// Forgets the failures of every Work in `namespace` (a cluster's, which came back):
    /// they are tried now and start over.
    pub(super) fn retry_now(&self, namespace: &str) {
        self.retries().reset_namespace(namespace);
    }

    /// Stops watching `cluster`'s delivered objects (it is unjoined).
    pub(super) fn forget_cluster(&self, cluster: &str) {
        self.drift_watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(cluster);
    }

    /// Forgets what is kept of Work `key` (it is going).
    fn forget_work(&self, key: &str) {
        self.settling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.retries().reset(key);
    }

    fn retries(&self) -> MutexGuard<'_, Retries> {
        self.retries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Until when the status of Work `key` (whose sync gave `status`) is left unwritten,
    /// for its rollout to report back; see [`settles_until`].
    fn settling(
        &self,
        key: &str,
        work: &Work,
        status: &WorkStatus,
        applied: bool,
        now: Instant,
    ) -> Option<Instant> {
        let generation = status.observed_generation.unwrap_or_default();
        let mut settling = self.settling.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = settling
            .remove(key)
            .filter(|(waited_for, _)| *waited_for == generation)
            .map(|(_, until)| until);
        let until = settles_until(work.status.as_ref(), status, applied, waiting, now);
        if let Some(until) = until {
            settling.insert(key.to_owned(), (generation, until));
        }
        until
    }
}

/// Runs the Work controller until the process ends; `pokes` are extra requests.
pub(super) async fn run(
    fleet: Arc<Fleet>,
    changed: impl Stream<Item = Arc<Work>> + Send + 'static,
    pokes: impl Stream<Item = ObjectRef<Work>> + Send + 'static,
) {
    let works = fleet.caches.works.store().clone();
    let changed = needing_sync(changed, works.clone());
    Controller::for_shared_stream(changed, works)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(u16::try_from(PUSH_CONCURRENCY).unwrap_or(u16::MAX)),
        )
        .reconcile_on(pokes)
        .run(reconcile, error_policy, fleet)
        .for_each(|_| async {})
        .await;
}

/// What of a Work a sync depends on, hashed: its identity, spec (generation), deletion,
/// finalizers, labels and annotations. Not its status, which the sync itself writes.
fn sync_hash(work: &Work) -> u64 {
    use std::hash::{Hash, Hasher};
    let meta = &work.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &meta.uid,
        meta.generation,
        meta.deletion_timestamp.is_some(),
        &meta.finalizers,
        &meta.labels,
        &meta.annotations,
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// The Works of `changed` that may need a sync: a change of their status alone (the push
/// controller's own status writes, one per sync) starts none. Member changes and the
/// periodic resync reach the controller by other ways.
fn needing_sync(
    changed: impl Stream<Item = Arc<Work>> + Send + 'static,
    works: kube::runtime::reflector::Store<Work>,
) -> impl Stream<Item = Arc<Work>> + Send + 'static {
    // By namespace and name alone: an `ObjectRef` carries the version and uid too, 2–3
    // times the memory for each of a hundred thousand Works.
    let mut seen: std::collections::HashMap<(Box<str>, Box<str>), u64> = Default::default();
    changed.filter(move |work| {
        // Works gone leave their entries: dropped once they are as many as the Works.
        if seen.len() > 2 * works.len() + 1024 {
            seen.retain(|(namespace, name), _| {
                works.get(&ObjectRef::new(name).within(namespace)).is_some()
            });
        }
        let (meta, hash) = (&work.metadata, sync_hash(work));
        let key = (
            meta.namespace.as_deref().unwrap_or_default().into(),
            meta.name.as_deref().unwrap_or_default().into(),
        );
        futures_util::future::ready(seen.insert(key, hash) != Some(hash))
    })
}

fn error_policy(work: Arc<Work>, error: &Error, fleet: Arc<Fleet>) -> Action {
    fleet.metrics.failed(&key(&work));
    if error.is_stale_finalizer() {
        return Action::requeue(Duration::from_millis(200));
    }
    let wait = fleet.push.retries().failed(&key(&work));
    fleet.events.emit(
        &work.object_ref(&()),
        Some(&placement_ref(&work)),
        Type::Warning,
        "SyncFailed",
        "Applying",
        &format!("on cluster {}: {error}", work.spec.cluster),
    );
    warn!(work = %work.name_any(), cluster = %work.spec.cluster, %error, ?wait, "Work not delivered; retrying");
    Action::requeue(wait)
}

/// The Work's `namespace/name`, as the metrics know it.
fn key(work: &Work) -> String {
    format!(
        "{}/{}",
        work.namespace().unwrap_or_default(),
        work.name_any()
    )
}

fn provenance(fleet: &Fleet, work: &Work) -> Provenance {
    let placement = &work.spec.placement;
    Provenance {
        hub: fleet.config.hub.clone(),
        placement: match &placement.namespace {
            Some(ns) => format!("{ns}/{}", placement.name),
            None => placement.name.clone(),
        },
        work: work.name_any(),
    }
}

async fn reconcile(work: Arc<Work>, fleet: Arc<Fleet>) -> Result<Action, Error> {
    let namespace = work.namespace().unwrap_or_default();
    if !namespace.starts_with(WORK_NAMESPACE_PREFIX) {
        return Ok(Action::await_change());
    }
    // A pull cluster's agent applies its Works itself: no finalizer, no delivery here.
    if cluster_of(&fleet, &work.spec.cluster).is_some_and(|c| is_pull(&c))
        && !work.finalizers().iter().any(|f| f == FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let span = info_span!("deliver", work = %work.name_any(), cluster = %work.spec.cluster);
    let api: Api<Work> = Api::namespaced(fleet.client.clone(), &namespace);
    finalizer::finalizer(&api, FINALIZER, work, |event| async {
        match event {
            Event::Apply(work) => deliver(&fleet, &work).await,
            Event::Cleanup(work) => withdraw(&fleet, &work).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Whether `cluster` is reached by its agent (pull access), not by the hub.
fn is_pull(cluster: &flotilla_api::Cluster) -> bool {
    cluster
        .spec
        .access
        .as_ref()
        .is_some_and(|a| a.pull.is_some())
}

fn cluster_of(fleet: &Fleet, name: &str) -> Option<Arc<flotilla_api::Cluster>> {
    // Clusters are cluster-scoped: found by name, not by a scan of them all.
    fleet.caches.clusters.get(&ObjectRef::new(name))
}

async fn deliver(fleet: &Arc<Fleet>, work: &Work) -> Result<Action, Error> {
    let name = &work.spec.cluster;
    let Some(cluster) = cluster_of(fleet, name) else {
        return Err(Error::Waiting(format!("cluster {name} is not known")));
    };
    if is_pull(&cluster) {
        // Finalized before the cluster was known as a pull cluster: its agent delivers.
        return Ok(Action::await_change());
    }
    let member = fleet.members.get(&cluster).await?;
    let turn = fleet.members.turn(name).await;
    let previous = work
        .status
        .as_ref()
        .map(|s| s.manifests.as_slice())
        .unwrap_or_default();
    let status = member
        .sync(
            &work.spec,
            work.metadata.generation,
            &provenance(fleet, work),
            previous,
        )
        .await;
    let corrected = member.take_corrections(&work.name_any());
    let applied = status.observed_generation == work.metadata.generation
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == flotilla_api::condition::APPLIED && c.status == "True");
    drop(turn);
    fleet.metrics.synced(&key(work), applied);
    // A new generation just applied and not yet available: the member's rollout reports
    // back within moments (its changes reach this Work after FEEDBACK_EVERY), so the status
    // is written once then, with its availability, not now and again then; a report of
    // the rollout still under way (its first counters) is waited past too. At the latest
    // it is written by the first sync [`SETTLING`] after the apply.
    let key = key(work);
    let now = Instant::now();
    let waiting = fleet.push.settling(&key, work, &status, applied, now);
    if let Some(until) = waiting {
        watch_drift(fleet, name, &member, work);
        return Ok(Action::requeue(until - now));
    }
    record(fleet, work, &status, applied, &corrected);
    if work.status.as_ref() != Some(&status) {
        patch_only::<Work, _>(
            &fleet.client,
            &work.namespace().unwrap_or_default(),
            &work.name_any(),
            Some("status"),
            &PatchParams::default(),
            &status_patch(&status),
        )
        .await?;
    }
    watch_drift(fleet, name, &member, work);
    // A failed apply is tried again with backoff, not only at the next resync.
    let mut retries = fleet.push.retries();
    if applied {
        retries.reset(&key);
        Ok(Action::requeue(fleet.config.resync_period))
    } else {
        Ok(Action::requeue(retries.failed(&key)))
    }
}

/// The placement that made `work`.
fn placement_ref(work: &Work) -> ObjectReference {
    let placement = &work.spec.placement;
    ObjectReference {
        api_version: Some(format!("{}/{}", flotilla_api::GROUP, flotilla_api::VERSION)),
        kind: Some(
            if placement.namespace.is_some() {
                "Placement"
            } else {
                "ClusterPlacement"
            }
            .into(),
        ),
        namespace: placement.namespace.clone(),
        name: Some(placement.name.clone()),
        ..ObjectReference::default()
    }
}

/// The Events of a sync whose new `status` is about to be written over the Work's: the
/// Work applied (again) or failing (each failed try, aggregated), drift found or gone,
/// drift `corrected` (the objects and fields the sync put back).
fn record(fleet: &Fleet, work: &Work, status: &WorkStatus, applied: bool, corrected: &[String]) {
    let previous = work.status.as_ref();
    let cluster = &work.spec.cluster;
    let (regarding, placement) = (work.object_ref(&()), placement_ref(work));
    let emit = |type_, reason, action, note: &str| {
        fleet
            .events
            .emit(&regarding, Some(&placement), type_, reason, action, note);
    };
    let was_applied = previous.is_some_and(|p| {
        p.observed_generation == status.observed_generation
            && model::is_true(&p.conditions, flotilla_api::condition::APPLIED)
    });
    let generation = status.observed_generation.unwrap_or_default();
    if applied && !was_applied {
        emit(
            Type::Normal,
            "Applied",
            "Applying",
            &format!("generation {generation} applied on cluster {cluster}"),
        );
    } else if !applied {
        let why = status
            .conditions
            .iter()
            .find(|c| c.type_ == flotilla_api::condition::APPLIED)
            .map(|c| c.message.as_str())
            .unwrap_or_default();
        emit(
            Type::Warning,
            "ApplyFailed",
            "Applying",
            &format!("generation {generation} not applied on cluster {cluster}: {why}"),
        );
    }
    let drift = |s: &WorkStatus| -> Vec<String> {
        s.manifests
            .iter()
            .flat_map(|m| {
                m.drift
                    .iter()
                    .map(move |d| format!("{}/{}{}", m.kind, m.name, d.path))
            })
            .collect()
    };
    if !corrected.is_empty() {
        emit(
            Type::Normal,
            "DriftCorrected",
            "Correcting",
            &format!(
                "on cluster {cluster}, put back as the hub has them: {}",
                super::events::listed(corrected)
            ),
        );
    }
    let (before, now) = (previous.map(drift).unwrap_or_default(), drift(status));
    if before.is_empty() && !now.is_empty() {
        emit(
            Type::Warning,
            "DriftFound",
            "Comparing",
            &format!(
                "on cluster {cluster}, fields differ from the hub's: {}",
                super::events::listed(&now)
            ),
        );
    } else if !before.is_empty() && now.is_empty() {
        emit(
            Type::Normal,
            "DriftResolved",
            "Comparing",
            &format!("on cluster {cluster}, the objects are as the hub has them again"),
        );
    }
}

/// Makes sure a watch of `cluster`'s delivered objects covers every kind its Works hold
/// (a kind no Work holds any more stays watched until the watch is next rebuilt).
fn watch_drift(
    fleet: &Arc<Fleet>,
    cluster: &str,
    member: &Arc<flotilla_delivery::Member>,
    work: &Work,
) {
    // The kinds a Work's manifests hold; shared namespaces are not a placement's to
    // correct.
    fn kinds_of<'a>(works: impl Iterator<Item = &'a Work>) -> BTreeSet<(String, String)> {
        works
            .flat_map(|w| w.spec.manifests.iter())
            .filter_map(|m| flotilla_delivery::provenance::owned_kind(m.json()))
            .collect()
    }
    let wanted = kinds_of(std::iter::once(work));
    let mut watches = fleet
        .push
        .drift_watches
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    // Most syncs add no kind: the watch stays and the cluster's other Works are not read.
    if watches
        .get(cluster)
        .is_some_and(|w| wanted.is_subset(&w.kinds))
    {
        return;
    }
    let works = fleet
        .caches
        .works
        .in_namespace(&format!("{WORK_NAMESPACE_PREFIX}{cluster}"));
    let mut kinds = kinds_of(works.iter().map(|w| &**w));
    kinds.extend(wanted);
    let list: Vec<(String, String)> = kinds.iter().cloned().collect();
    let changes = member.changes(&list, &provenance(fleet, work));
    let weak = Arc::downgrade(fleet);
    let cluster_name = cluster.to_owned();
    let task = tokio::spawn(async move {
        futures_util::pin_mut!(changes);
        let namespace = format!("{WORK_NAMESPACE_PREFIX}{cluster_name}");
        while let Some(change) = changes.next().await {
            let Some(fleet) = weak.upgrade() else { return };
            match change {
                // The Work that delivered the object syncs again (if it is still there).
                Change::Object { work: Some(work) } => {
                    fleet.pokes.work(ObjectRef::new(&work).within(&namespace));
                }
                // A list may hide changes: every Work of the cluster syncs again, from
                // what the watches now hold.
                Change::Object { work: None } | Change::Listed => {
                    for w in fleet.caches.works.in_namespace(&namespace) {
                        fleet.pokes.work(ObjectRef::from_obj(&*w));
                    }
                }
            }
        }
    });
    watches.insert(cluster.to_owned(), DriftWatch { kinds, task });
}

/// What a Work going may have put on its member: every manifest its status lists, then
/// those of its spec the status does not list yet (a Work deleted between its apply and
/// the status write, such as one a placement no longer wants right after delivering it).
/// Removal looks at each object on the member first and leaves alone what this placement
/// does not own, so listing one never applied costs a read and nothing else.
fn to_remove(work: &Work) -> Vec<flotilla_api::ManifestStatus> {
    let mut objects: Vec<flotilla_api::ManifestStatus> = work
        .status
        .as_ref()
        .map(|s| s.manifests.clone())
        .unwrap_or_default();
    let identity = |m: &flotilla_api::ManifestStatus| {
        (
            m.api_version.clone(),
            m.kind.clone(),
            m.namespace.clone(),
            m.name.clone(),
        )
    };
    let listed: BTreeSet<_> = objects.iter().map(identity).collect();
    for manifest in &work.spec.manifests {
        let value = manifest.value();
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let object = flotilla_api::ManifestStatus {
            api_version: text(&value["apiVersion"]),
            kind: text(&value["kind"]),
            namespace: value["metadata"]["namespace"].as_str().map(str::to_owned),
            name: text(&value["metadata"]["name"]),
            ..flotilla_api::ManifestStatus::default()
        };
        if !listed.contains(&identity(&object)) {
            objects.push(object);
        }
    }
    objects
}

/// The Work is going: what it put on the member goes too (or stays, orphaned). A cluster
/// that is gone, or being unjoined while it does not answer, is not waited for.
async fn withdraw(fleet: &Arc<Fleet>, work: &Work) -> Result<Action, Error> {
    fleet.metrics.forget(&key(work));
    fleet.push.forget_work(&key(work));
    let name = &work.spec.cluster;
    let Some(cluster) = cluster_of(fleet, name) else {
        info!("cluster gone: nothing to remove");
        return Ok(Action::await_change());
    };
    let unjoining = cluster.metadata.deletion_timestamp.is_some();
    let orphan = unjoining
        && cluster
            .annotations()
            .get(UNJOIN_ANNOTATION)
            .is_some_and(|v| v == "Orphan");
    let policy = if orphan {
        DeletionPolicy::Orphan
    } else {
        work.spec
            .apply
            .as_ref()
            .map(|a| a.deletion)
            .unwrap_or_default()
    };
    let ready = cluster
        .status
        .as_ref()
        .is_some_and(|s| model::is_true(&s.conditions, flotilla_api::condition::READY));
    if unjoining && !ready {
        warn!("cluster unjoined while not ready: its objects are left on it");
        return Ok(Action::await_change());
    }
    if is_pull(&cluster) {
        // Its agent releases what it applied when it sees the Work go.
        return Ok(Action::await_change());
    }
    let applied = to_remove(work);
    let member = fleet.members.get(&cluster).await?;
    tokio::time::timeout(
        SYNC_TIMEOUT,
        member.remove_as(
            &applied,
            policy,
            &provenance(fleet, work),
            work.spec
                .apply
                .as_ref()
                .and_then(|a| a.service_account_name.as_deref()),
        ),
    )
    .await
    .map_err(|_| Error::Member {
        cluster: name.clone(),
        message: format!("no answer within {SYNC_TIMEOUT:?}"),
    })?
    .map_err(|e| Error::Member {
        cluster: name.clone(),
        message: e.to_string(),
    })?;
    info!(?policy, objects = applied.len(), "removed from the member");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use flotilla_api::WorkSpec;
    use flotilla_delivery::SETTLING;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn a_work_going_removes_what_its_spec_holds_even_before_its_status_lists_it() {
        let manifest = |kind: &str, namespace: Option<&str>, name: &str| {
            let mut object = serde_json::json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name}});
            if let Some(ns) = namespace {
                object["metadata"]["namespace"] = ns.into();
            }
            flotilla_api::Manifest::from(&object)
        };
        let mut work = Work::new(
            "shop.web",
            WorkSpec {
                manifests: vec![
                    manifest("Namespace", None, "shop"),
                    manifest("ConfigMap", Some("shop"), "web"),
                ],
                ..WorkSpec::default()
            },
        );
        let names = |work: &Work| -> Vec<String> {
            to_remove(work)
                .iter()
                .map(|m| format!("{}/{}", m.kind, m.name))
                .collect()
        };
        // Not reported yet: the spec's manifests.
        assert_eq!(names(&work), ["Namespace/shop", "ConfigMap/web"]);
        // Reported: the status's first (as applied), then what it does not list, once.
        work.status = Some(WorkStatus {
            manifests: vec![
                flotilla_api::ManifestStatus {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("shop".into()),
                    name: "old".into(),
                    ..Default::default()
                },
                flotilla_api::ManifestStatus {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    name: "shop".into(),
                    ..Default::default()
                },
            ],
            ..WorkStatus::default()
        });
        assert_eq!(
            names(&work),
            ["ConfigMap/old", "Namespace/shop", "ConfigMap/web"]
        );
    }

    #[tokio::test]
    async fn a_change_of_a_works_status_alone_starts_no_sync() {
        let (works, _writer) = kube::runtime::reflector::store::<Work>();
        let mut work = Work::new("web", WorkSpec::default());
        work.metadata.namespace = Some("flotilla-member-a".into());
        work.metadata.generation = Some(1);
        // Each version is told by its resourceVersion, which a sync does not depend on.
        let mut versions = Vec::new();
        let mut push = |work: &mut Work, name: &str| {
            work.metadata.resource_version = Some(name.into());
            versions.push(Arc::new(work.clone()));
        };
        push(&mut work, "created");
        work.status = Some(WorkStatus {
            observed_generation: Some(1),
            ..WorkStatus::default()
        });
        push(&mut work, "status written");
        work.metadata.generation = Some(2);
        push(&mut work, "spec changed");
        work.metadata.finalizers = Some(vec![FINALIZER.into()]);
        push(&mut work, "finalizer added");
        work.metadata.deletion_timestamp = Some(Time(Default::default()));
        push(&mut work, "deleting");
        let passed: Vec<String> = needing_sync(futures_util::stream::iter(versions), works)
            .map(|w| w.metadata.resource_version.clone().unwrap_or_default())
            .collect()
            .await;
        assert_eq!(
            passed,
            ["created", "spec changed", "finalizer added", "deleting"]
        );
    }

    #[test]
    fn failures_in_a_row_back_off_from_a_second_to_the_cap_and_start_over_on_success() {
        assert_eq!(retry_after(1), Duration::from_secs(1));
        assert_eq!(retry_after(2), Duration::from_secs(2));
        assert_eq!(retry_after(5), Duration::from_secs(16));
        assert_eq!(retry_after(8), RETRY_MAX);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
        let mut retries = Retries::default();
        let waits: Vec<Duration> = (0..10)
            .map(|_| retries.failed("flotilla-cluster-a/shop.web"))
            .collect();
        for (failures, wait) in (1..).zip(&waits) {
            let least = retry_after(failures);
            // Never less than the backoff, at most a tenth more (the jitter).
            assert!(
                *wait >= least && *wait <= least + least / 10,
                "{failures}: {wait:?}"
            );
        }
        assert!(*waits.last().unwrap() <= RETRY_MAX + RETRY_MAX / 10);
        // Another Work's failures are its own.
        assert!(retries.failed("flotilla-cluster-b/shop.web") < Duration::from_secs(2));
        // A success starts over.
        retries.reset("flotilla-cluster-a/shop.web");
        assert!(retries.failed("flotilla-cluster-a/shop.web") < Duration::from_secs(2));
        // So does the cluster coming back, for its Works alone.
        retries.failed("flotilla-cluster-b/shop.web");
        retries.reset_namespace("flotilla-cluster-a");
        assert!(retries.failed("flotilla-cluster-a/shop.web") < Duration::from_secs(2));
        assert!(retries.failed("flotilla-cluster-b/shop.web") >= Duration::from_secs(4));
    }

    #[test]
    fn the_push_controllers_state_is_kept_per_work_and_cluster() {
        let state = PushState::default();
        let condition = |type_: &str, status: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: Time(Default::default()),
            observed_generation: None,
        };
        let rolling_out = WorkStatus {
            observed_generation: Some(2),
            conditions: vec![
                condition(flotilla_api::condition::APPLIED, "True"),
                condition(flotilla_api::condition::AVAILABLE, "False"),
            ],
            ..WorkStatus::default()
        };
        let mut work = Work::new("shop.web", WorkSpec::default());
        work.status = Some(WorkStatus {
            observed_generation: Some(1),
            ..WorkStatus::default()
        });
        let key = "flotilla-cluster-a/shop.web";
        let now = Instant::now();
        // The first sync of the rollout starts the wait; later ones keep its end.
        let until = state.settling(key, &work, &rolling_out, true, now);
        assert_eq!(until, Some(now + SETTLING));
        let later = now + SETTLING / 2;
        assert_eq!(state.settling(key, &work, &rolling_out, true, later), until);
        // Another Work waits on its own.
        let other = "flotilla-cluster-b/shop.web";
        assert_eq!(
            state.settling(other, &work, &rolling_out, true, later),
            Some(later + SETTLING)
        );
        // A Work going forgets its wait and its failures.
        state.retries().failed(key);
        state.retries().failed(key);
        state.forget_work(key);
        assert_eq!(
            state.settling(key, &work, &rolling_out, true, later),
            Some(later + SETTLING)
        );
        assert!(state.retries().failed(key) < Duration::from_secs(2));
        // Its cluster coming back tries its Works at once, not the other cluster's.
        state.retries().failed(other);
        state.retries().failed(key);
        state.retry_now("flotilla-cluster-a");
        assert!(state.retries().failed(key) < Duration::from_secs(2));
        // (its second failure in a row)
        assert!(state.retries().failed(other) >= Duration::from_secs(2));
    }
}
