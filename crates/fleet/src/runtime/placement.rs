//! The placement controller (Placement and ClusterPlacement alike): plan, write the Works,
//! publish the decision, and bring status back to the placement and its templates.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::{
    ClusterDecision, ClusterPlacement, ClusterProfileRef, Placement, PlacementDecision,
    PlacementSpec, PlacementStatus, Work, WorkSpec, multicluster,
};
use futures_util::{FutureExt, Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{Instrument, debug, info_span, warn};

use super::{Error, FIELD_MANAGER, Fleet, patch_only, rollout, status_patch, templates};
use crate::plan::{self, OverrideRef, PlacementKey, work_namespace};
use crate::status::{self, WorkView};

/// The finalizer that removes a placement's Works before it goes.
pub const FINALIZER: &str = "flotilla.io/placement";

/// How many Works one placement writes at once.
const WRITES_AT_ONCE: usize = 64;

/// How many placements are reconciled at once. Each holds its plan (a rendered Work per
/// cluster) and its status while it runs: a thousand at once after a restart held
/// hundreds of megabytes, and two cores gain nothing from more than a few dozen.
const PLACEMENTS_AT_ONCE: u16 = 32;

/// A placement's decision as published: (cluster, its profile's namespace) for each
/// chosen cluster, and when.
type Published = (Vec<(String, String)>, Instant);

/// What the placement controller keeps between reconciles, for each placement: its last
/// plan, its published decision, and the templates it gave a fleet-wide status; and the
/// epoch of what plans are made from. Only this controller reads it; the caches' watches
/// move the epoch ([`PlacementState::inputs_changed`]).
#[derive(Default)]
pub(super) struct PlacementState {
    /// Moved by every change of the clusters as selection sees them and of the overrides:
    /// with the same placement, templates and Works, a plan made at one epoch holds.
    inputs_epoch: AtomicU64,
    /// Each placement's last plan and the fingerprint of what it was made from: a poke for
    /// its Works' status alone does not plan again.
    plans: Mutex<HashMap<PlacementKey, KeptPlan>>,
    /// What each placement last published as its decision (clusters and their profiles'
    /// namespaces), and when.
    decisions: Mutex<HashMap<PlacementKey, Published>>,
    /// The templates each placement last gave a fleet-wide status (this process's).
    delivered: Mutex<HashMap<PlacementKey, BTreeSet<plan::ManifestId>>>,
    /// The failed revision each placement's last rollout step rolled back from (see
    /// [`rollout::Live::noted_failure`]).
    failures: Mutex<HashMap<PlacementKey, flotilla_api::FailedRevision>>,
    /// The plans of each rolling placement's revisions, kept between its steps.
    renders: rollout::Renders,
    /// When each placement's last reconcile ended and how long it took, its Works'
    /// writes aside: what spaces the reconciles its Works' status asks for
    /// ([`PlacementState::status_due`]).
    costs: Mutex<HashMap<PlacementKey, (Instant, Duration)>>,
}

/// How many times its own length a placement's reconcile waits before its Works' status
/// alone makes it run again: status work takes at most a fifth of the time, however
/// many clusters the placement spans (the reconcile and its status are as large as
/// that), and less when the hub is busy (its reconciles take longer).
const STATUS_SPACING: u32 = 4;

/// The longest a placement's Works' status waits for its reconcile
/// ([`STATUS_SPACING`] aside).
const STATUS_WAIT_MAX: Duration = Duration::from_secs(5);

impl PlacementState {
    /// Notes that what plans are made from changed (clusters or overrides).
    pub(super) fn inputs_changed(&self) {
        self.inputs_epoch.fetch_add(1, AtomicOrdering::AcqRel);
    }

    /// The epoch of what plans are made from.
    fn epoch(&self) -> u64 {
        self.inputs_epoch.load(AtomicOrdering::Acquire)
    }

    /// The failed revision `key`'s last rollout step rolled back from.
    fn failure(&self, key: &PlacementKey) -> Option<flotilla_api::FailedRevision> {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Notes the failed revision `key`'s last rollout step rolled back from (`None`: none).
    fn note_failure(&self, key: &PlacementKey, failed: Option<flotilla_api::FailedRevision>) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        match failed {
            Some(f) => failures.insert(key.clone(), f),
            None => failures.remove(key),
        };
    }

    /// The plan kept for `key`, if it was made from inputs of this `fingerprint`.
    fn kept_plan(&self, key: &PlacementKey, fingerprint: u64) -> Option<KeptPlan> {
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .filter(|kept| kept.fingerprint == fingerprint)
            .cloned()
    }

    /// Keeps `plan` as `key`'s (`None`: forgets the one kept).
    fn keep_plan(&self, key: &PlacementKey, plan: Option<KeptPlan>) {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        match plan {
            Some(plan) => plans.insert(key.clone(), plan),
            None => plans.remove(key),
        };
    }

    /// The clusters `key` last published as its decision.
    fn decided(&self, key: &PlacementKey) -> Option<Vec<String>> {
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map(|(decided, _)| decided.iter().map(|(c, _)| c.clone()).collect())
    }

    /// Whether `key` published `decided` less than `max_age` ago.
    fn published_lately(
        &self,
        key: &PlacementKey,
        decided: &[(String, String)],
        max_age: Duration,
    ) -> bool {
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .is_some_and(|(d, at)| *d == decided && at.elapsed() < max_age)
    }

    /// Notes that `key` published `decided` now.
    fn published(&self, key: &PlacementKey, decided: Vec<(String, String)>) {
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), (decided, Instant::now()));
    }

    /// The templates `key` gave a status last time and does not deliver `now`.
    fn no_longer_delivered(
        &self,
        key: &PlacementKey,
        now: &BTreeSet<plan::ManifestId>,
    ) -> Vec<plan::ManifestId> {
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map(|before| before.difference(now).cloned().collect())
            .unwrap_or_default()
    }

    /// Notes the templates `key` gives a status now.
    fn delivers(&self, key: &PlacementKey, templates: BTreeSet<plan::ManifestId>) {
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), templates);
    }

    /// Forgets the templates `key` gave a status, returning them.
    fn take_delivered(&self, key: &PlacementKey) -> BTreeSet<plan::ManifestId> {
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
            .unwrap_or_default()
    }

    /// Notes that a reconcile of `key` ended at `ended` and took `cost`, its Works'
    /// writes aside.
    fn note_cost(&self, key: &PlacementKey, ended: Instant, cost: Duration) {
        self.costs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), (ended, cost));
    }

    /// Whether `key` may be reconciled `now` for its Works' status: its last reconcile
    /// ended at least [`STATUS_SPACING`] times its length ago (at most
    /// [`STATUS_WAIT_MAX`]).
    pub(super) fn status_due(&self, key: &PlacementKey, now: Instant) -> bool {
        self.costs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .is_none_or(|(ended, cost)| {
                now.saturating_duration_since(*ended)
                    >= (*cost * STATUS_SPACING).min(STATUS_WAIT_MAX)
            })
    }

    /// Forgets the plan and decision of `key` (it is going).
    fn forget(&self, key: &PlacementKey) {
        self.costs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.renders.forget(key);
    }
}

/// What the controller needs of a Placement or a ClusterPlacement.
pub(super) trait PlacementObject:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    fn spec(&self) -> &PlacementSpec;
    fn status(&self) -> Option<&PlacementStatus>;
    fn api(fleet: &Fleet, namespace: Option<&str>) -> Api<Self>;
    fn store(fleet: &Fleet) -> kube::runtime::reflector::Store<Self>;
}

impl PlacementObject for Placement {
    fn spec(&self) -> &PlacementSpec {
        &self.spec
    }
    fn status(&self) -> Option<&PlacementStatus> {
        self.status.as_ref()
    }
    fn store(fleet: &Fleet) -> kube::runtime::reflector::Store<Self> {
        fleet.caches.placements.clone()
    }
    fn api(fleet: &Fleet, namespace: Option<&str>) -> Api<Self> {
        match namespace {
            Some(ns) => Api::namespaced(fleet.client.clone(), ns),
            None => Api::all(fleet.client.clone()),
        }
    }
}

impl PlacementObject for ClusterPlacement {
    fn spec(&self) -> &PlacementSpec {
        &self.spec.placement
    }
    fn status(&self) -> Option<&PlacementStatus> {
        self.status.as_ref()
    }
    fn store(fleet: &Fleet) -> kube::runtime::reflector::Store<Self> {
        fleet.caches.cluster_placements.clone()
    }
    fn api(fleet: &Fleet, _: Option<&str>) -> Api<Self> {
        Api::all(fleet.client.clone())
    }
}

fn key_of<P: PlacementObject>(p: &P) -> PlacementKey {
    PlacementKey {
        namespace: p.meta().namespace.clone(),
        name: p.name_any(),
    }
}

/// Runs the controller of `P` until the process ends; `pokes` are extra requests.
pub(super) async fn run<P: PlacementObject>(
    fleet: Arc<Fleet>,
    changed: impl Stream<Item = Arc<P>> + Send + 'static,
    pokes: impl Stream<Item = ObjectRef<P>> + Send + 'static,
) {
    Controller::for_shared_stream(acted_on(changed), P::store(&fleet))
        .with_config(kube::runtime::controller::Config::default().concurrency(PLACEMENTS_AT_ONCE))
        .reconcile_on(pokes)
        .run(reconcile::<P>, error_policy::<P>, fleet)
        .for_each(|_| async {})
        .await;
}

/// What of a placement its reconcile acts on, hashed: its identity, spec (by
/// generation), annotations (undo, approvals), labels, finalizers and whether it is
/// being deleted — all but its status.
fn acted_on_stamp<P: PlacementObject>(p: &P) -> u64 {
    use std::hash::{Hash, Hasher};
    let meta = p.meta();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &meta.uid,
        meta.generation,
        &meta.annotations,
        &meta.labels,
        &meta.finalizers,
        meta.deletion_timestamp.is_some(),
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// The placements of `changed` that changed in what the reconcile acts on: a change of
/// status alone (the controller's own status write, coming back through the watch) does
/// not reconcile again. Its Works' status pokes it ([`PlacementState::status_due`]); its
/// reconcile reads the placement from the cache, status and all.
fn acted_on<P: PlacementObject>(
    changed: impl Stream<Item = Arc<P>> + Send + 'static,
) -> impl Stream<Item = Arc<P>> + Send + 'static {
    let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
    changed.filter(move |p| {
        let key = (p.meta().namespace.clone(), p.name_any());
        let gone = p.meta().deletion_timestamp.is_some()
            && p.meta().finalizers.as_ref().is_none_or(Vec::is_empty);
        let moved = if gone {
            seen.remove(&key);
            true
        } else {
            let stamp = acted_on_stamp(&**p);
            seen.insert(key, stamp) != Some(stamp)
        };
        std::future::ready(moved)
    })
}

fn error_policy<P: PlacementObject>(p: Arc<P>, error: &Error, _: Arc<Fleet>) -> Action {
    if error.is_stale_finalizer() {
        debug!(placement = %key_of(&*p), "finalizer added from an older cache; retrying");
        return Action::requeue(Duration::from_millis(200));
    }
    warn!(placement = %key_of(&*p), %error, "placement not reconciled; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile<P: PlacementObject>(p: Arc<P>, fleet: Arc<Fleet>) -> Result<Action, Error> {
    let key = key_of(&*p);
    let span = info_span!("placement", placement = %key);
    let api = P::api(&fleet, key.namespace.as_deref());
    finalizer::finalizer(&api, FINALIZER, p, |event| async {
        match event {
            Event::Apply(p) => place(&fleet, &*p, &key).await,
            Event::Cleanup(p) => unplace(&fleet, &*p, &key).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// What a placement's plan is made from, hashed: the placement (its identity, spec's
/// generation and an undo asked for), its templates as placements see them (not their status nor their version),
/// its current Works (identity and generation: their spec, not their status) and the
/// epoch of the clusters and overrides.
fn plan_fingerprint<P: PlacementObject>(
    p: &P,
    templates: &[Value],
    works: &BTreeMap<String, Arc<Work>>,
    epoch: u64,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let undo = p
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(flotilla_api::revision::UNDO_ANNOTATION));
    (&p.meta().uid, p.meta().generation, epoch, undo).hash(&mut hasher);
    for template in templates {
        hash_template(template, &mut hasher);
    }
    for (cluster, w) in works {
        (cluster, &w.metadata.uid, w.metadata.generation).hash(&mut hasher);
    }
    hasher.finish()
}

/// Hashes a template as placements see it: all of it but its status, its version and its
/// managed fields.
fn hash_template(template: &Value, hasher: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    fn value(v: &Value, hasher: &mut impl std::hash::Hasher, skip: &[&str]) {
        match v {
            Value::Null => 0u8.hash(hasher),
            Value::Bool(b) => (1u8, b).hash(hasher),
            Value::Number(n) => (2u8, n.to_string()).hash(hasher),
            Value::String(s) => (3u8, s).hash(hasher),
            Value::Array(items) => {
                (4u8, items.len()).hash(hasher);
                items.iter().for_each(|i| value(i, hasher, &[]));
            }
            Value::Object(map) => {
                5u8.hash(hasher);
                for (k, v) in map.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
                    k.hash(hasher);
                    let nested: &[&str] = if k == "metadata" {
                        &["resourceVersion", "managedFields"]
                    } else {
                        &[]
                    };
                    value(v, hasher, nested);
                }
            }
        }
    }
    value(template, hasher, &["status"]);
}

/// The placement's current Works, by cluster.
fn current_works(fleet: &Fleet, key: &PlacementKey) -> BTreeMap<String, Arc<Work>> {
    fleet
        .caches
        .works
        .of(key)
        .into_iter()
        .map(|w| (w.spec.cluster.clone(), w))
        .collect()
}

async fn place<P: PlacementObject>(
    fleet: &Arc<Fleet>,
    p: &P,
    key: &PlacementKey,
) -> Result<Action, Error> {
    let started = Instant::now();
    // The time spent writing its Works, which its cost leaves out.
    let mut writing = Duration::ZERO;
    let spec = p.spec();
    // Read before the inputs: a change after this makes the next reconcile plan again.
    let epoch = fleet.placement.epoch();
    // A kind the hub does not serve (or whose cache is not filled) plans nothing: the
    // current Works stay as they are.
    let templates::Selected {
        objects: templates,
        unmatched,
        outside,
    } = match templates::selected(fleet, spec, key.namespace.as_deref()).await {
        Ok(selected) => selected,
        Err(e) => {
            write_status(fleet, p, key, unscheduled(p, &e)).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    };
    // A cluster being unjoined takes no new Works.
    let clusters = fleet
        .caches
        .clusters
        .state_filter(|c| c.metadata.deletion_timestamp.is_none());
    let reach = crate::tenancy::reach(
        fleet.config.tenancy,
        key.namespace.as_deref(),
        fleet.caches.bindings.state().iter().map(|b| &**b),
        fleet.caches.cluster_sets.state().iter().map(|s| &**s),
    );
    let overrides = fleet.caches.overrides.state();
    let cluster_overrides = fleet.caches.cluster_overrides.state();
    let mut refs: Vec<OverrideRef<'_>> = cluster_overrides
        .iter()
        .map(|o| OverrideRef {
            namespace: None,
            name: o.metadata.name.as_deref().unwrap_or_default(),
            spec: &o.spec.spec,
        })
        .collect();
    refs.extend(overrides.iter().map(|o| OverrideRef {
        namespace: o.metadata.namespace.as_deref(),
        name: o.metadata.name.as_deref().unwrap_or_default(),
        spec: &o.spec,
    }));
    let works = current_works(fleet, key);
    let current: BTreeMap<String, &WorkSpec> = works
        .iter()
        .map(|(cluster, w)| (cluster.clone(), &w.spec))
        .collect();
    let mut snapshot = crate::revision::snapshot(&templates, &refs, spec);
    let live_hash = snapshot.hash.clone();
    // `flotilla rollout undo`: an old revision's content, while the live one is unchanged.
    let undo = crate::revision::undo_to(
        p.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(flotilla_api::revision::UNDO_ANNOTATION))
            .map(String::as_str),
        &snapshot.hash,
    );
    if let Some(old) = undo.and_then(|n| {
        rollout::revisions_of(fleet, key)
            .into_iter()
            .find(|r| r.spec.revision == n)
    }) {
        snapshot = crate::revision::Snapshot::of(&old.spec);
    }
    let fingerprint = plan_fingerprint(p, &templates, &works, epoch);
    let kept = fleet.placement.kept_plan(key, fingerprint);
    let all_names: Vec<String> = clusters
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let not_ready = not_ready(fleet, &all_names);
    // The rollout step, and the clusters whose current Work is the one it wants.
    let (step, as_planned) = match kept {
        // Every Work it wants is written as planned, the rollout complete, and nothing
        // changed since.
        Some(kept) => (kept.step, kept.clusters),
        None => {
            let revisions = rollout::ensure(fleet, p, key, &snapshot).await?;
            let noted_failure = fleet.placement.failure(key);
            let live = rollout::Live {
                key,
                spec,
                clusters: &clusters,
                reach: &reach,
                current: &current,
                noted_failure: noted_failure.as_ref(),
                renders: Some((&fleet.placement.renders, fingerprint)),
            };
            let now = k8s_openapi::jiff::Timestamp::now();
            // The step's own time (planning, comparing) apart from the time it awaits the
            // store (the Works' writes, pruning), each in its histogram.
            let timer = Instant::now();
            let mut step = rollout::step(p, &live, &works, &revisions, &not_ready, now);
            let (as_planned, writes) = work_writes(fleet, key, &step.desired, &step.plan, &works);
            let compute = timer.elapsed();
            let timer = Instant::now();
            let as_planned = Arc::new(as_planned);
            run_writes(writes).await?;
            rollout::prune(fleet, key, spec, &revisions, &step.in_use).await?;
            writing = timer.elapsed();
            fleet.metrics.rollout_step(super::metrics::StepTime {
                compute: compute.as_secs_f64(),
                writes: writing.as_secs_f64(),
            });
            fleet
                .placement
                .note_failure(key, step.status.failed_revisions.first().cloned());
            if let Some(stage) = &step.stage_entered {
                super::events::stage_started(
                    &fleet.events,
                    &p.object_ref(&()),
                    stage,
                    &step.status,
                );
            }
            for e in &step.events {
                super::events::rollout(
                    &fleet.events,
                    &p.object_ref(&()),
                    e.warning,
                    e.reason,
                    &e.note,
                );
            }
            // Kept once every Work is as planned, none is left over and the rollout is
            // complete (until then, the Works' writes change the fingerprint anyway);
            // without the Works' specs, which the Works hold.
            let settled = as_planned.len() == step.desired.len()
                && works.keys().all(|c| step.desired.contains_key(c))
                && step.recheck.is_none()
                && step.progressing.1 == "RolloutComplete";
            step.desired.clear();
            if settled {
                // Settled: the revisions' plans are kept no more, and the plan kept with
                // the step holds no Works.
                fleet.placement.renders.forget(key);
                let mut slim = Arc::try_unwrap(std::mem::take(&mut step.plan))
                    .unwrap_or_else(|shared| (*shared).clone());
                slim.works.clear();
                step.plan = Arc::new(slim);
            }
            let step = Arc::new(step);
            fleet.placement.keep_plan(
                key,
                settled.then(|| KeptPlan {
                    fingerprint,
                    step: step.clone(),
                    clusters: as_planned.clone(),
                }),
            );
            (step, as_planned)
        }
    };
    let plan = &step.plan;

    let before = fleet.placement.decided(key);
    publish_decision(fleet, key, &plan.selection.chosen).await?;
    super::events::scheduled(
        &fleet.events,
        &p.object_ref(&()),
        before.as_deref(),
        &plan.selection.chosen,
    );

    // Status back: the placement's, then each template's.
    let views: BTreeMap<String, WorkView<'_>> = works
        .iter()
        .map(|(cluster, w)| {
            (
                cluster.clone(),
                WorkView {
                    generation: w.metadata.generation,
                    status: w.status.as_ref(),
                },
            )
        })
        .collect();
    let not_ready: BTreeMap<String, Time> = not_ready
        .into_iter()
        .filter(|(c, _)| plan.selection.chosen.binary_search(c).is_ok())
        .collect();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let observed = status::Observed {
        works: &views,
        not_ready: &not_ready,
        unmatched: &unmatched,
        outside: &outside,
    };
    let placement_status =
        status::placement_status(plan, &observed, p.meta().generation, p.status(), &now);
    let previous_conditions = p
        .status()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let placement_status = rollout::with_rollout(
        placement_status,
        &step,
        &live_hash,
        p.meta().generation,
        previous_conditions,
        &now,
    );
    write_status(fleet, p, key, placement_status).await?;
    let complete = plan.scheduled.is_ok()
        && plan.selection.chosen.iter().all(|c| {
            as_planned.contains(c)
                && works.get(c).is_some_and(|w| {
                    w.status.as_ref().and_then(|s| s.observed_generation) == w.metadata.generation
                })
        });
    for template in &templates {
        aggregate_template(fleet, template, plan, &works, &not_ready, complete).await?;
    }
    // Templates it no longer selects lose the status it gave them, unless another
    // placement delivers them.
    let now_delivered: BTreeSet<plan::ManifestId> =
        templates.iter().map(plan::manifest_id).collect();
    let dropped = fleet.placement.no_longer_delivered(key, &now_delivered);
    for id in dropped {
        forget_template(fleet, &id, key).await?;
    }
    // Noted once each dropped one is done (a failure tries them again).
    fleet.placement.delivers(key, now_delivered);
    let ended = Instant::now();
    fleet.placement.note_cost(
        key,
        ended,
        ended.duration_since(started).saturating_sub(writing),
    );
    Ok(Action::requeue(
        step.recheck.unwrap_or(Duration::from_secs(300)),
    ))
}

/// The clusters of `chosen` whose `Ready` condition is not `True`, each with when it
/// stopped being Ready. (A cluster not probed yet has no `Ready` condition: its Work has
/// no status to count either.)
fn not_ready(fleet: &Fleet, chosen: &[String]) -> BTreeMap<String, Time> {
    chosen
        .iter()
        .filter_map(|name| {
            let cluster = fleet.caches.clusters.get(&ObjectRef::new(name))?;
            let ready = cluster
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == flotilla_api::condition::READY)?;
            (ready.status != "True").then(|| (name.clone(), ready.last_transition_time.clone()))
        })
        .collect()
}

/// A placement's last plan, kept while what it was made from is unchanged and every Work
/// it wants is written as planned: a poke for its Works' status alone does not plan again.
#[derive(Clone)]
pub(super) struct KeptPlan {
    /// The [`plan_fingerprint`] of its inputs.
    fingerprint: u64,
    /// The rollout step, without the Works' specs (the Works hold them).
    step: Arc<rollout::Step>,
    /// The clusters that have a Work.
    clusters: Arc<BTreeSet<String>>,
}

/// A write (or delete) of one Work, not started yet.
type WorkWrite = futures_util::future::BoxFuture<'static, Result<(), kube::Error>>;

/// The writes of each `desired` Work that differs from the current one (its spec, or the
/// revision it carries and since when) and the deletes of the Works no cluster wants any
/// more (neither desired nor kept by `plan`), not started; and the clusters whose Work is
/// already as desired.
fn work_writes(
    fleet: &Arc<Fleet>,
    key: &PlacementKey,
    desired: &BTreeMap<String, rollout::Desired>,
    plan: &plan::Plan,
    works: &BTreeMap<String, Arc<Work>>,
) -> (BTreeSet<String>, Vec<WorkWrite>) {
    use flotilla_api::revision::{MOVED_AT_ANNOTATION, REVISION_ANNOTATION};
    let name = key.work_name();
    let mut as_planned = BTreeSet::new();
    let mut writes = Vec::new();
    for (cluster, wanted) in desired {
        if let Some(work) = works.get(cluster)
            && work.spec == wanted.spec
            && rollout::carried(work) == (Some(wanted.revision), wanted.moved_at.parse().ok())
        {
            as_planned.insert(cluster.clone());
            continue;
        }
        let namespace = work_namespace(cluster);
        let taken = fleet.caches.works.get(&namespace, &name);
        if let Some(other) = taken.filter(|w| w.spec.placement != key.reference()) {
            warn!(%cluster, work = %name, other = ?other.spec.placement, "a Work of this name belongs to another placement");
            continue;
        }
        let mut work = Work::new(&name, wanted.spec.clone());
        work.metadata.namespace = Some(namespace.clone());
        work.metadata.annotations = Some(BTreeMap::from([
            (REVISION_ANNOTATION.to_owned(), wanted.revision.to_string()),
            (MOVED_AT_ANNOTATION.to_owned(), wanted.moved_at.clone()),
        ]));
        let (client, name) = (fleet.client.clone(), name.clone());
        writes.push(
            async move {
                debug!(work = %name, namespace = %namespace, "writing Work");
                patch_only::<Work, _>(
                    &client,
                    &namespace,
                    &name,
                    None,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&work),
                )
                .await
            }
            .boxed(),
        );
    }
    for cluster in works.keys() {
        if !plan.works.contains_key(cluster) && !desired.contains_key(cluster) {
            let api: Api<Work> = Api::namespaced(fleet.client.clone(), &work_namespace(cluster));
            let name = name.clone();
            writes.push(
                async move {
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ())
                        .or_else(gone)
                }
                .boxed(),
            );
        }
    }
    (as_planned, writes)
}

/// Runs `writes`, [`WRITES_AT_ONCE`] at a time; the first error, once all are done.
async fn run_writes(writes: Vec<WorkWrite>) -> Result<(), Error> {
    let results: Vec<Result<(), kube::Error>> = futures_util::stream::iter(writes)
        .buffer_unordered(WRITES_AT_ONCE)
        .collect()
        .await;
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(())
}

/// Writes the template's fleet-wide status when its kind has one and it changed.
async fn aggregate_template(
    fleet: &Arc<Fleet>,
    template: &Value,
    plan: &plan::Plan,
    works: &BTreeMap<String, Arc<Work>>,
    not_ready: &BTreeMap<String, Time>,
    complete: bool,
) -> Result<(), Error> {
    let id = plan::manifest_id(template);
    let desired = plan.template_replicas.get(&id);
    let reports: Vec<status::Report> = plan
        .selection
        .chosen
        .iter()
        .map(|c| status::Report {
            cluster: c.clone(),
            feedback: works
                .get(c)
                .and_then(|w| w.status.as_ref())
                .and_then(|s| status::feedback(&id, s)),
            desired: desired.and_then(|d| d.get(c)).copied(),
            current: !not_ready.contains_key(c),
        })
        .collect();
    let Some(new) = status::aggregate(
        &id.0,
        &id.1,
        template["metadata"]["generation"].as_i64(),
        crate::render::replicas(template),
        &reports,
        complete,
        &template["status"],
    ) else {
        return Ok(());
    };
    if template["status"] == new {
        return Ok(());
    }
    write_template_status(fleet, &id, &new).await
}

/// Replaces the whole status of template `id` (counters that went away go).
async fn write_template_status(
    fleet: &Arc<Fleet>,
    id: &plan::ManifestId,
    status: &Value,
) -> Result<(), Error> {
    let kind = fleet
        .templates
        .kind(Arc::downgrade(fleet), &id.0, &id.1)
        .await?;
    let api: Api<DynamicObject> = if kind.namespaced {
        Api::namespaced_with(fleet.client.clone(), &id.2, &kind.resource)
    } else {
        Api::all_with(fleet.client.clone(), &kind.resource)
    };
    api.patch_status(&id.3, &PatchParams::default(), &status_patch(status))
        .await
        .map(|_| ())
        .or_else(gone)
        .map_err(Error::from)
}

/// Takes the fleet-wide status off the templates placement `key` selects that no other
/// placement selects: nothing delivers them any more.
async fn forget_templates<P: PlacementObject>(
    fleet: &Arc<Fleet>,
    p: &P,
    key: &PlacementKey,
) -> Result<(), Error> {
    let selected = match templates::selected(fleet, p.spec(), key.namespace.as_deref()).await {
        Ok(selected) => selected.objects,
        // Nothing of a kind not served had a status from here.
        Err(Error::NotServed(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut ids: BTreeSet<plan::ManifestId> = selected.iter().map(plan::manifest_id).collect();
    ids.extend(fleet.placement.take_delivered(key));
    for id in ids {
        forget_template(fleet, &id, key).await?;
    }
    Ok(())
}

/// Takes the fleet-wide status off template `id` (a kind this fleet aggregates, with a
/// status) unless a placement other than `key` selects it.
async fn forget_template(
    fleet: &Arc<Fleet>,
    id: &plan::ManifestId,
    key: &PlacementKey,
) -> Result<(), Error> {
    if status::aggregate(&id.0, &id.1, None, None, &[], false, &Value::Null).is_none() {
        return Ok(());
    }
    let kind = match fleet
        .templates
        .kind(Arc::downgrade(fleet), &id.0, &id.1)
        .await
    {
        Ok(kind) => kind,
        Err(Error::NotServed(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut reference = ObjectRef::new_with(&id.3, kind.resource.clone());
    reference.namespace = (!id.2.is_empty()).then(|| id.2.clone());
    let Some(object) = kind.store.get(&reference) else {
        return Ok(());
    };
    let template = templates::as_value(&object, &id.0, &id.1);
    if template["status"].as_object().is_none_or(|s| s.is_empty())
        || templates::selecting(fleet, &template)
            .iter()
            .any(|other| other != key)
    {
        return Ok(());
    }
    write_template_status(fleet, id, &serde_json::json!({})).await
}

/// The status of a placement whose templates could not be read: `Scheduled=False`; and
/// when a selected kind is not served, `TemplatesFound=False` naming it and
/// `Available=False` (what it last said of its clusters is kept).
fn unscheduled<P: PlacementObject>(p: &P, error: &Error) -> PlacementStatus {
    use flotilla_api::condition::{AVAILABLE, SCHEDULED, TEMPLATES_FOUND};
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous = p
        .status()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = p.meta().generation;
    let why = error.to_string();
    let mut set = vec![status::condition(
        SCHEDULED,
        false,
        "TemplatesUnavailable",
        why.clone(),
        generation,
        previous,
        &now,
    )];
    if matches!(error, Error::NotServed(_)) {
        set.push(status::condition(
            AVAILABLE,
            false,
            "TemplatesNotFound",
            why.clone(),
            generation,
            previous,
            &now,
        ));
        set.push(status::condition(
            TEMPLATES_FOUND,
            false,
            "KindNotServed",
            why,
            generation,
            previous,
            &now,
        ));
    }
    let mut status = p.status().cloned().unwrap_or_default();
    status.observed_generation = generation;
    status
        .conditions
        .retain(|c| !set.iter().any(|s| s.type_ == c.type_));
    for (i, condition) in set.into_iter().enumerate() {
        if i == 0 {
            status.conditions.insert(0, condition);
        } else {
            status.conditions.push(condition);
        }
    }
    status
}

async fn write_status<P: PlacementObject>(
    fleet: &Fleet,
    p: &P,
    key: &PlacementKey,
    status: PlacementStatus,
) -> Result<(), Error> {
    if p.status() == Some(&status) {
        return Ok(());
    }
    let api = P::api(fleet, key.namespace.as_deref());
    api.patch_status(&key.name, &PatchParams::default(), &status_patch(&status))
        .await?;
    Ok(())
}

/// Publishes the chosen clusters as PlacementDecisions (KEP-5313): slices of at most 100
/// clusters named `<placement>-decision-<i>` in the placement's namespace (the system
/// namespace for a ClusterPlacement); slices no longer needed are deleted.
async fn publish_decision(
    fleet: &Fleet,
    key: &PlacementKey,
    chosen: &[String],
) -> Result<(), Error> {
    let namespace = key
        .namespace
        .clone()
        .unwrap_or_else(|| fleet.config.system_namespace.clone());
    let api: Api<PlacementDecision> = Api::namespaced(fleet.client.clone(), &namespace);
    let placement_label = key.name.clone();
    let profile_namespace = |cluster: &str| {
        fleet
            .caches
            .clusters
            .get(&ObjectRef::new(cluster))
            .and_then(|c| c.spec.cluster_set.clone())
            .unwrap_or_else(|| fleet.config.system_namespace.clone())
    };
    let decided: Vec<(String, String)> = chosen
        .iter()
        .map(|c| (c.clone(), profile_namespace(c)))
        .collect();
    // Published by this process within a resync period: nothing to read or write (past
    // it, the decisions are read again, and put back if someone changed them).
    if fleet
        .placement
        .published_lately(key, &decided, fleet.config.resync_period)
    {
        return Ok(());
    }
    let slices: Vec<&[String]> = if chosen.is_empty() {
        vec![&[]]
    } else {
        chosen.chunks(multicluster::MAX_DECISIONS).collect()
    };
    for (index, slice) in slices.iter().enumerate() {
        let name = format!("{}-decision-{}", key.name, index + 1);
        let mut decision = PlacementDecision::new(
            &name,
            flotilla_api::PlacementDecisionFields {
                decisions: slice
                    .iter()
                    .map(|c| ClusterDecision {
                        cluster_profile_ref: ClusterProfileRef {
                            name: c.clone(),
                            namespace: Some(profile_namespace(c)),
                        },
                        reason: None,
                    })
                    .collect(),
                scheduler_name: Some(FIELD_MANAGER.into()),
            },
        );
        decision.metadata.labels = Some(BTreeMap::from([
            (
                multicluster::LABEL_PLACEMENT_KEY.into(),
                placement_label.clone(),
            ),
            (
                multicluster::LABEL_DECISION_KEY.into(),
                placement_label.clone(),
            ),
            (multicluster::LABEL_DECISION_INDEX.into(), index.to_string()),
        ]));
        let current = api.get_opt(&name).await?;
        if current
            .as_ref()
            .map(|c| (&c.spec.decisions, &c.metadata.labels))
            == Some((&decision.spec.decisions, &decision.metadata.labels))
        {
            continue;
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&decision),
        )
        .await?;
    }
    // Slices past the last one (the decision had more clusters): deleted in order until one
    // is missing, one request when there are none (no list of every decision).
    for index in slices.len() + 1.. {
        let name = format!("{}-decision-{index}", key.name);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => break,
            Err(e) => return Err(e.into()),
        }
    }
    fleet.placement.published(key, decided);
    Ok(())
}

/// The placement is going: its Works go (each one's finalizer removes what it put on its
/// member), and so do its decisions and the fleet-wide status of the templates no other
/// placement delivers.
async fn unplace<P: PlacementObject>(
    fleet: &Arc<Fleet>,
    p: &P,
    key: &PlacementKey,
) -> Result<Action, Error> {
    fleet.placement.forget(key);
    let name = key.work_name();
    let works = current_works(fleet, key);
    for cluster in works.keys() {
        let api: Api<Work> = Api::namespaced(fleet.client.clone(), &work_namespace(cluster));
        api.delete(&name, &DeleteParams::default())
            .await
            .map(|_| ())
            .or_else(gone)?;
    }
    let namespace = key
        .namespace
        .clone()
        .unwrap_or_else(|| fleet.config.system_namespace.clone());
    let api: Api<PlacementDecision> = Api::namespaced(fleet.client.clone(), &namespace);
    let selector = format!("{}={}", multicluster::LABEL_DECISION_KEY, key.name);
    for old in api.list(&ListParams::default().labels(&selector)).await? {
        api.delete(&old.name_any(), &DeleteParams::default())
            .await
            .map(|_| ())
            .or_else(gone)?;
    }
    forget_templates(fleet, p, key).await?;
    Ok(Action::await_change())
}

/// A delete or write of something already gone is done.
pub(super) fn gone(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(status) if status.code == 404 => Ok(()),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::{WorkSpec, WorkStatus};
    use serde_json::json;

    use super::*;

    /// The key of placement `name` in namespace `shop`.
    fn shop(name: &str) -> PlacementKey {
        PlacementKey {
            namespace: Some("shop".into()),
            name: name.into(),
        }
    }

    #[test]
    fn the_placement_controllers_state_is_kept_per_placement_and_forgotten_with_it() {
        let state = PlacementState::default();
        let (web, db) = (shop("web"), shop("db"));
        // The epoch moves with every change of the inputs.
        let epoch = state.epoch();
        state.inputs_changed();
        assert_eq!(state.epoch(), epoch + 1);
        // A plan is kept for the fingerprint it was made from, and for its placement.
        let kept = KeptPlan {
            fingerprint: 7,
            step: Arc::new(rollout::Step::default()),
            clusters: Arc::new(BTreeSet::from(["a".to_owned()])),
        };
        state.keep_plan(&web, Some(kept));
        assert!(
            state
                .kept_plan(&web, 7)
                .is_some_and(|k| k.clusters.contains("a"))
        );
        assert!(state.kept_plan(&web, 8).is_none());
        assert!(state.kept_plan(&db, 7).is_none());
        state.keep_plan(&web, None);
        assert!(state.kept_plan(&web, 7).is_none());
        // A decision published lately is not published again.
        let decided = vec![("a".to_owned(), "flotilla-system".to_owned())];
        assert_eq!(state.decided(&web), None);
        state.published(&web, decided.clone());
        assert_eq!(state.decided(&web), Some(vec!["a".to_owned()]));
        assert!(state.published_lately(&web, &decided, Duration::from_secs(60)));
        assert!(!state.published_lately(&web, &decided, Duration::ZERO));
        assert!(!state.published_lately(&web, &[], Duration::from_secs(60)));
        assert!(!state.published_lately(&db, &decided, Duration::from_secs(60)));
        // The templates given a status: those no longer delivered are told.
        let id = |name: &str| {
            (
                "apps/v1".to_owned(),
                "Deployment".to_owned(),
                "shop".to_owned(),
                name.to_owned(),
            )
        };
        state.delivers(&web, BTreeSet::from([id("web"), id("api")]));
        assert_eq!(
            state.no_longer_delivered(&web, &BTreeSet::from([id("web")])),
            [id("api")]
        );
        assert!(state.no_longer_delivered(&db, &BTreeSet::new()).is_empty());
        // A placement going forgets its plan and decision; its templates are taken once.
        state.keep_plan(
            &web,
            Some(KeptPlan {
                fingerprint: 1,
                step: Arc::new(rollout::Step::default()),
                clusters: Arc::default(),
            }),
        );
        state.forget(&web);
        assert!(state.kept_plan(&web, 1).is_none());
        assert_eq!(state.decided(&web), None);
        assert_eq!(state.take_delivered(&web).len(), 2);
        assert!(state.take_delivered(&web).is_empty());
    }

    #[test]
    fn a_placements_works_status_waits_for_four_times_its_last_reconciles_length() {
        let state = PlacementState::default();
        let (web, db) = (shop("web"), shop("db"));
        let ended = Instant::now();
        // Never reconciled: due at once.
        assert!(state.status_due(&web, ended));
        // A reconcile of 100 ms: due 400 ms after it ended, not before.
        state.note_cost(&web, ended, Duration::from_millis(100));
        assert!(!state.status_due(&web, ended));
        assert!(!state.status_due(&web, ended + Duration::from_millis(399)));
        assert!(state.status_due(&web, ended + Duration::from_millis(400)));
        assert!(state.status_due(&db, ended));
        // However long the reconcile, the status waits at most STATUS_WAIT_MAX.
        state.note_cost(&web, ended, Duration::from_secs(60));
        assert!(!state.status_due(&web, ended + STATUS_WAIT_MAX - Duration::from_millis(1)));
        assert!(state.status_due(&web, ended + STATUS_WAIT_MAX));
        // A placement going forgets its cost.
        state.forget(&web);
        assert!(state.status_due(&web, ended));
    }

    #[tokio::test]
    async fn a_placements_own_status_coming_back_does_not_reconcile_it_again() {
        let mut placement = Placement::new("web", PlacementSpec::default());
        placement.metadata.namespace = Some("shop".into());
        placement.metadata.generation = Some(1);
        placement.metadata.finalizers = Some(vec![FINALIZER.into()]);
        let mut reported = placement.clone();
        reported.status = Some(PlacementStatus {
            observed_generation: Some(1),
            ..PlacementStatus::default()
        });
        let mut respecified = reported.clone();
        respecified.metadata.generation = Some(2);
        let mut undone = respecified.clone();
        undone.metadata.annotations = Some(BTreeMap::from([(
            flotilla_api::revision::UNDO_ANNOTATION.to_owned(),
            "1".to_owned(),
        )]));
        let mut deleting = undone.clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let mut released = deleting.clone();
        released.metadata.finalizers = None;
        // The same placement again in another namespace is another placement.
        let mut elsewhere = placement.clone();
        elsewhere.metadata.namespace = Some("other".into());
        // Each version as the watch brings it, and whether it reconciles the placement.
        let versions = [
            (&placement, true),
            (&reported, false),
            (&respecified, true),
            (&respecified, false),
            (&undone, true),
            (&deleting, true),
            (&released, true),
            (&placement, true),
            (&elsewhere, true),
        ];
        let changed: Vec<Arc<Placement>> = versions
            .iter()
            .map(|(p, _)| Arc::new((*p).clone()))
            .collect();
        let passed: Vec<Placement> = acted_on(futures_util::stream::iter(changed))
            .map(|p| (*p).clone())
            .collect()
            .await;
        let expected: Vec<Placement> = versions
            .iter()
            .filter(|(_, passes)| *passes)
            .map(|(p, _)| (*p).clone())
            .collect();
        assert_eq!(passed, expected);
    }

    #[test]
    fn a_plan_is_made_again_when_its_inputs_change_and_not_for_status() {
        let mut placement = Placement::new("web", PlacementSpec::default());
        placement.metadata.generation = Some(1);
        let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": "5"},
            "spec": {"replicas": 2}, "status": {"readyReplicas": 1}});
        let mut work = Work::new("bench.web", WorkSpec::default());
        work.metadata.generation = Some(3);
        let works = BTreeMap::from([("a".to_owned(), Arc::new(work.clone()))]);
        let base = plan_fingerprint(&placement, std::slice::from_ref(&template), &works, 7);
        // Unchanged, or changed in status and version only: the same plan.
        assert_eq!(
            plan_fingerprint(&placement, std::slice::from_ref(&template), &works, 7),
            base
        );
        let mut reported = template.clone();
        reported["status"]["readyReplicas"] = 2.into();
        reported["metadata"]["resourceVersion"] = "6".into();
        let mut synced = work.clone();
        synced.status = Some(WorkStatus {
            observed_generation: Some(3),
            ..WorkStatus::default()
        });
        let synced = BTreeMap::from([("a".to_owned(), Arc::new(synced))]);
        assert_eq!(plan_fingerprint(&placement, &[reported], &synced, 7), base);
        // Any input changed: another plan.
        let mut edited = template.clone();
        edited["spec"]["replicas"] = 3.into();
        assert_ne!(plan_fingerprint(&placement, &[edited], &works, 7), base);
        assert_ne!(
            plan_fingerprint(&placement, std::slice::from_ref(&template), &works, 8),
            base
        );
        let mut respecified = work.clone();
        respecified.metadata.generation = Some(4);
        let respecified = BTreeMap::from([("a".to_owned(), Arc::new(respecified))]);
        assert_ne!(
            plan_fingerprint(&placement, std::slice::from_ref(&template), &respecified, 7),
            base
        );
        placement.metadata.generation = Some(2);
        assert_ne!(plan_fingerprint(&placement, &[template], &works, 7), base);
    }
}
