//! Rollouts in the placement controller: a revision made for each change of what a
//! placement delivers, the wave planned ([`crate::rollout`]), the Work each cluster gets,
//! and where the rollout stands.
//!
//! ```text
//!  snapshot of what is delivered ─► ensure(): new hash? PlacementRevision n+1 (owned by the
//!                                    placement); the oldest beyond the history limit go
//!  target = the latest revision (the last completed one when the latest failed)
//!  stable = status.rollout.completedRevision
//!  each chosen cluster: the revision its Work names (rollout.flotilla.io/revision)
//!     ├─ none yet ─────────────► the stable revision (the target if none completed)
//!     ├─ carries the target ───► at the target
//!     └─ else ─► the wave planner: moves now ─► the target's render (a Work already
//!                holding it: only its revision annotation changes); waits ─► kept
//! ```
//!
//! Every cluster's Work is always one revision rendered whole: the old one's (kept as it is,
//! or rendered again from the revision when the cluster changed) or the new one's.
//! Everything the next reconcile needs is in the store: the revisions, the Works'
//! annotations, the placement's status (completed and failed revisions, approvals in its
//! annotations), so a restarted hub goes on where it was.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_api::revision::{MOVED_AT_ANNOTATION, PLACEMENT_LABEL, REVISION_ANNOTATION};
use flotilla_api::{
    Cluster, FailedRevision, IMPLICIT_STAGE, PlacementRevision, PlacementSpec, PlacementStatus,
    RollbackPolicy, RolloutStatus, StageApproval, StageStatus, Work, WorkSpec, condition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use tracing::{debug, info};

use super::placement::{PlacementObject, gone};
use super::{Error, Fleet};
use crate::Reach;
use crate::plan::{self, Inputs, PlacementKey};
use crate::revision::{self, Snapshot};
use crate::rollout::{self, Kind, Member, Strategy, Wave};

/// A Work as a rollout wants it: its spec, and the revision it carries since when.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Desired {
    /// The Work's spec.
    pub spec: WorkSpec,
    /// The revision it carries.
    pub revision: i64,
    /// When it moved to that revision (RFC 3339).
    pub moved_at: String,
}

/// The revision a Work carries, and since when.
pub(super) fn carried(work: &Work) -> (Option<i64>, Option<Timestamp>) {
    let annotations = work.metadata.annotations.as_ref();
    let get = |key: &str| annotations.and_then(|a| a.get(key));
    (
        get(REVISION_ANNOTATION).and_then(|r| r.parse().ok()),
        get(MOVED_AT_ANNOTATION).and_then(|t| t.parse().ok()),
    )
}

/// The placement's revisions, oldest first.
pub(super) fn revisions_of(fleet: &Fleet, key: &PlacementKey) -> Vec<Arc<PlacementRevision>> {
    let reference = key.reference();
    let mut all: Vec<Arc<PlacementRevision>> = fleet
        .caches
        .revisions
        .state()
        .into_iter()
        .filter(|r| r.spec.placement == reference)
        .collect();
    all.sort_by_key(|r| r.spec.revision);
    all
}

/// The namespace of `key`'s revisions.
fn namespace_of(fleet: &Fleet, key: &PlacementKey) -> String {
    key.namespace
        .clone()
        .unwrap_or_else(|| fleet.config.system_namespace.clone())
}

/// The placement's revisions, a new one made when `snapshot` differs from the last.
pub(super) async fn ensure<P: PlacementObject>(
    fleet: &Fleet,
    p: &P,
    key: &PlacementKey,
    snapshot: &Snapshot,
) -> Result<Vec<Arc<PlacementRevision>>, Error> {
    let mut revisions = revisions_of(fleet, key);
    let last = revisions.last().cloned();
    if last.as_ref().is_some_and(|r| r.spec.hash == snapshot.hash) {
        return Ok(revisions);
    }
    // The status names a revision the cache has not seen yet: it is on its way.
    let known = last.as_ref().map_or(0, |r| r.spec.revision);
    let noted = p
        .status()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| r.revision)
        .unwrap_or(0);
    if noted > known {
        return Err(Error::Waiting(format!("revision {noted} of {key}")));
    }
    let number = known + 1;
    let mut object = PlacementRevision::new(
        &revision::name(key, number),
        snapshot.revision(key, number, last.as_ref().map(|r| &r.spec)),
    );
    object.metadata.namespace = Some(namespace_of(fleet, key));
    object.metadata.labels = Some(BTreeMap::from([(
        PLACEMENT_LABEL.to_owned(),
        key.name.clone(),
    )]));
    object.metadata.owner_references = Some(vec![OwnerReference {
        api_version: P::api_version(&()).into_owned(),
        kind: P::kind(&()).into_owned(),
        name: key.name.clone(),
        uid: p.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let api: Api<PlacementRevision> =
        Api::namespaced(fleet.client.clone(), &namespace_of(fleet, key));
    let created = match api.create(&PostParams::default(), &object).await {
        Ok(created) => created,
        // Made by an earlier reconcile the cache has not seen yet.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            return Err(Error::Waiting(format!("revision {number} of {key}")));
        }
        Err(e) => return Err(e.into()),
    };
    info!(placement = %key, revision = number, hash = %snapshot.hash, "new revision");
    revisions.push(Arc::new(created));
    Ok(revisions)
}

/// Deletes the oldest revisions beyond the placement's history limit, none in use.
pub(super) async fn prune(
    fleet: &Fleet,
    key: &PlacementKey,
    spec: &PlacementSpec,
    revisions: &[Arc<PlacementRevision>],
    in_use: &BTreeSet<i64>,
) -> Result<(), Error> {
    let limit = spec
        .revision_history_limit
        .unwrap_or(flotilla_api::DEFAULT_REVISION_HISTORY_LIMIT)
        .max(0) as usize;
    let numbers: Vec<i64> = revisions.iter().map(|r| r.spec.revision).collect();
    let api: Api<PlacementRevision> =
        Api::namespaced(fleet.client.clone(), &namespace_of(fleet, key));
    for number in revision::pruned(&numbers, in_use, limit) {
        debug!(placement = %key, revision = number, "old revision pruned");
        api.delete(&revision::name(key, number), &DeleteParams::default())
            .await
            .map(|_| ())
            .or_else(gone)?;
    }
    Ok(())
}

/// What a placement's plan of one revision is made from, besides the revision.
pub(super) struct Live<'a> {
    /// The placement.
    pub key: &'a PlacementKey,
    /// Its spec.
    pub spec: &'a PlacementSpec,
    /// Every Cluster.
    pub clusters: &'a [Arc<Cluster>],
    /// The clusters it may reach.
    pub reach: &'a Reach,
    /// Its current Works' specs, by cluster.
    pub current: &'a BTreeMap<String, &'a WorkSpec>,
    /// The failed revision this hub's last step of the placement rolled back from, if any:
    /// the placement read from the cache may not show the status that says so yet, while
    /// the Works moved back already do (without it, the failed revision would go out
    /// again).
    pub noted_failure: Option<&'a FailedRevision>,
    /// Where the revisions' plans are kept between steps, and the fingerprint of what
    /// they are made from now (`None`: rendered for this step alone).
    pub renders: Option<(&'a Renders, u64)>,
}

/// One placement's kept plans: the fingerprint they were made at, and each by revision
/// (its number and hash).
type KeptRenders = (u64, BTreeMap<(i64, String), Arc<plan::Plan>>);

/// The plans of each placement's revisions (a rendered Work per chosen cluster), kept
/// between its rollout steps while what they are made from does not change: the
/// placement's plan fingerprint (its spec, templates, its Works' generations, the epoch of
/// the clusters and overrides). A step woken by a Work's status alone, the most common
/// during a rollout, renders nothing again. Only the plans of the latest fingerprint are
/// kept, and none once the rollout settles.
///
/// ```text
///  step(fingerprint F) ─► revision r's plan kept at F? ── yes ─► it (an Arc, no copy)
///                                      └─ no ─► plan_of(r) ─► kept at F (older ones dropped)
/// ```
#[derive(Default)]
pub(super) struct Renders(Mutex<HashMap<PlacementKey, KeptRenders>>);

impl Renders {
    /// The plan of `revision` for `live` at `fingerprint`, kept or rendered now (and kept).
    fn plan(
        &self,
        live: &Live<'_>,
        fingerprint: u64,
        revision: &PlacementRevision,
    ) -> Arc<plan::Plan> {
        let id = (revision.spec.revision, revision.spec.hash.clone());
        let kept = self
            .lock()
            .get(live.key)
            .filter(|(at, _)| *at == fingerprint)
            .and_then(|(_, plans)| plans.get(&id).cloned());
        if let Some(plan) = kept {
            return plan;
        }
        // Rendered without the lock: only this placement's reconcile renders its plans.
        let plan = Arc::new(plan_of(live, revision));
        let mut all = self.lock();
        let entry = all.entry(live.key.clone()).or_default();
        if entry.0 != fingerprint {
            *entry = (fingerprint, BTreeMap::new());
        }
        entry.1.insert(id, plan.clone());
        plan
    }

    /// Forgets `key`'s plans (its rollout settled, or it is gone).
    pub(super) fn forget(&self, key: &PlacementKey) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PlacementKey, KeptRenders>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The plan of `revision` for `live`: kept in `live.renders`, or rendered.
fn render(live: &Live<'_>, revision: &PlacementRevision) -> Arc<plan::Plan> {
    match live.renders {
        Some((renders, fingerprint)) => renders.plan(live, fingerprint, revision),
        None => Arc::new(plan_of(live, revision)),
    }
}

/// The plan of `revision` for the clusters as they are now.
pub(super) fn plan_of(live: &Live<'_>, revision: &PlacementRevision) -> plan::Plan {
    let (templates, refs) = revision::inputs(&revision.spec);
    let spec = PlacementSpec {
        replicas: revision.spec.replicas.clone(),
        apply: revision.spec.apply.clone(),
        ..live.spec.clone()
    };
    plan::plan(Inputs {
        placement: live.key,
        spec: &spec,
        templates: &templates,
        clusters: live.clusters,
        reach: live.reach,
        overrides: &refs,
        current: live.current,
    })
}

/// A rollout step: the Works wanted, where the rollout stands, when to look again.
#[derive(Default)]
pub(super) struct Step {
    /// The target revision's plan (selection, replicas: what the status reports), shared
    /// with [`Renders`].
    pub plan: Arc<plan::Plan>,
    /// The Work wanted on each chosen cluster; a chosen cluster not listed keeps its Work.
    pub desired: BTreeMap<String, Desired>,
    /// The revision each chosen cluster runs once `desired` is written.
    pub running: BTreeMap<String, i64>,
    /// The rollout's status.
    pub status: RolloutStatus,
    /// `Progressing`: status, reason, message.
    pub progressing: (&'static str, &'static str, String),
    /// When to look again with nothing else changed.
    pub recheck: Option<Duration>,
    /// The stage the rollout reached with this step, if it is another than before (for an
    /// Event).
    pub stage_entered: Option<String>,
    /// The revisions in use (the target, the stable one, those Works carry).
    pub in_use: BTreeSet<i64>,
    /// The Events this step calls for on the placement: the rollout halted, rolled back,
    /// completed (each once, when `Progressing` comes to it).
    pub events: Vec<Note>,
}

/// An Event a rollout step calls for on its placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Note {
    /// Whether an operator may have to look at it (a Warning).
    pub warning: bool,
    /// Its reason (`RolloutHalted`, `RolledBack`, `RolloutComplete`).
    pub reason: &'static str,
    /// What happened, in words.
    pub note: String,
}

/// The approvals in a placement's annotations.
fn approvals(annotations: &BTreeMap<String, String>) -> Vec<StageApproval> {
    let mut all: Vec<StageApproval> = annotations
        .iter()
        .filter_map(|(k, v)| {
            let stage = k.strip_prefix(flotilla_api::APPROVAL_ANNOTATION_PREFIX)?;
            let mut approval: StageApproval = serde_json::from_str(v).ok()?;
            approval.stage = stage.to_owned();
            Some(approval)
        })
        .collect();
    all.sort_by(|a, b| a.stage.cmp(&b.stage));
    all
}

/// Plans the rollout step of placement `p` with `revisions` (oldest first, never empty).
pub(super) fn step<P: PlacementObject>(
    p: &P,
    live: &Live<'_>,
    works: &BTreeMap<String, Arc<Work>>,
    revisions: &[Arc<PlacementRevision>],
    not_ready: &BTreeMap<String, Time>,
    now: Timestamp,
) -> Step {
    let previous = p
        .status()
        .and_then(|s| s.rollout.clone())
        .unwrap_or_default();
    let spec = live.spec;
    let by_number: BTreeMap<i64, &PlacementRevision> =
        revisions.iter().map(|r| (r.spec.revision, &**r)).collect();
    let latest = revisions.last().expect("a placement has a revision");
    let mut failed_revisions = previous.failed_revisions.clone();
    if failed_revisions.is_empty() {
        failed_revisions.extend(live.noted_failure.cloned());
    }
    // Failed revisions of other content than the latest are history: forgotten.
    failed_revisions.retain(|f| f.hash == latest.spec.hash);
    let stable = previous
        .completed_revision
        .and_then(|n| by_number.get(&n).copied());
    let latest_failed = failed_revisions.first().cloned();
    // The latest revision failed and rolled back: the stable one is the target again.
    let (target, rolling_back) = match (&latest_failed, stable) {
        (Some(_), Some(stable)) => (stable, true),
        _ => (&**latest, false),
    };
    let t = target.spec.revision;
    let strategy = Strategy::from_api(spec.strategy.as_ref());
    let (strategy, invalid) = match strategy {
        Ok(s) => (s, None),
        Err(why) => (
            Strategy {
                kind: Kind::All,
                progress_deadline_seconds: 600,
                paused: true,
            },
            Some(why),
        ),
    };
    let strategy = if rolling_back {
        // Back to a revision that completed: every cluster at once.
        Strategy {
            kind: Kind::All,
            paused: false,
            ..strategy
        }
    } else {
        strategy
    };
    let target_plan = render(live, target);
    let stable_plan = stable
        .filter(|s| s.spec.revision != t)
        .map(|s| render(live, s));

    // Each cluster's labels by name (found once, not by a scan per chosen cluster).
    let labels_of: HashMap<&str, &Option<BTreeMap<String, String>>> = live
        .clusters
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, &c.metadata.labels)))
        .collect();
    let now_text = now.to_string();
    let mut desired = BTreeMap::new();
    let mut running = BTreeMap::new();
    let mut members = Vec::new();
    let mut in_use = BTreeSet::from([t]);
    in_use.extend(stable.map(|s| s.spec.revision));
    for cluster in &target_plan.selection.chosen {
        let Some(wanted) = target_plan.works.get(cluster) else {
            continue;
        };
        let work = works.get(cluster);
        let (carried, moved_at) = work.map(|w| carried(w)).unwrap_or_default();
        in_use.extend(carried);
        let labels = labels_of
            .get(cluster.as_str())
            .and_then(|l| (*l).clone())
            .unwrap_or_default();
        let mut revision = carried;
        let mut moved = moved_at;
        match work {
            None => {
                // A cluster new to the placement starts at the last completed revision.
                let (n, spec) = match (stable, &stable_plan) {
                    (Some(s), Some(plan)) => match plan.works.get(cluster) {
                        Some(w) => (s.spec.revision, w.clone()),
                        None => (t, wanted.clone()),
                    },
                    _ => (t, wanted.clone()),
                };
                desired.insert(
                    cluster.clone(),
                    Desired {
                        spec,
                        revision: n,
                        moved_at: now_text.clone(),
                    },
                );
                revision = Some(n);
                moved = Some(now);
            }
            Some(w) if rollout::runs_target(carried, t, w.spec == *wanted) => {
                // At the target (or a Work from before rollouts holding its render).
                let at = if carried == Some(t) {
                    moved_at.unwrap_or(now)
                } else {
                    now
                };
                desired.insert(
                    cluster.clone(),
                    Desired {
                        spec: wanted.clone(),
                        revision: t,
                        moved_at: at.to_string(),
                    },
                );
                revision = Some(t);
                moved = Some(at);
            }
            Some(_) => {
                // At an old revision, even one whose render is the target's (an undo): it
                // moves when the planner says, through every gate (an approval of the
                // target included); such a move rewrites only the revision the Work
                // carries, not its spec. The stable revision is rendered again for the
                // cluster as it is now; any other is kept as its Work holds it.
                if let (Some(s), Some(plan)) = (stable, &stable_plan)
                    && carried == Some(s.spec.revision)
                    && let Some(w) = plan.works.get(cluster)
                {
                    desired.insert(
                        cluster.clone(),
                        Desired {
                            spec: w.clone(),
                            revision: s.spec.revision,
                            moved_at: moved_at.unwrap_or(now).to_string(),
                        },
                    );
                }
            }
        }
        let (available_since, unavailable) =
            availability(work, revision == Some(t), not_ready.contains_key(cluster));
        members.push(Member {
            name: cluster.clone(),
            labels,
            revision,
            moved_at: moved,
            available_since: available_since.map(|since| match moved {
                Some(m) if m > since => m,
                _ => since,
            }),
            unavailable,
        });
    }
    let approvals = approvals(p.meta().annotations.as_ref().unwrap_or(&BTreeMap::new()));
    let approved: BTreeSet<String> = approvals
        .iter()
        .filter(|a| a.revision == t)
        .map(|a| a.stage.clone())
        .collect();
    let wave: Wave = rollout::plan(rollout::Input {
        members: &members,
        target: t,
        strategy: &strategy,
        approved: &approved,
        now,
    });
    for name in &wave.moves {
        if let Some(w) = target_plan.works.get(name) {
            desired.insert(
                name.clone(),
                Desired {
                    spec: w.clone(),
                    revision: t,
                    moved_at: now_text.clone(),
                },
            );
        }
    }
    for m in &members {
        if let Some(n) = desired.get(&m.name).map(|d| d.revision).or(m.revision) {
            running.insert(m.name.clone(), n);
        }
    }

    // A gate failed: halt; with automatic rollback, every cluster moved goes back now.
    let rollback = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rollback)
        .unwrap_or_default();
    let mut progressing: (&'static str, &'static str, String);
    let mut events = Vec::new();
    let mut completed = previous.completed_revision;
    // A revision that completed stays completed: a cluster failing later is the business
    // of its status, not of a rollout (there is none).
    let settled = previous.completed_revision == Some(t) && running.values().all(|n| *n == t);
    if let Some((cluster, why)) = wave.failed.first().filter(|_| !rolling_back && !settled) {
        let what = format!("revision {t} failed on cluster {cluster}: {why}");
        events.push(Note {
            warning: true,
            reason: "RolloutHalted",
            note: format!("rollout of revision {t} halted: cluster {cluster}: {why}"),
        });
        if rollback == RollbackPolicy::Automatic
            && let (Some(s), Some(plan)) = (stable, &stable_plan)
        {
            failed_revisions = vec![FailedRevision {
                revision: t,
                hash: target.spec.hash.clone(),
                cluster: cluster.clone(),
                reason: why.clone(),
            }];
            let mut back = Vec::new();
            for (name, n) in running.iter_mut() {
                if *n == t
                    && let Some(w) = plan.works.get(name)
                {
                    back.push(name.clone());
                    desired.insert(
                        name.clone(),
                        Desired {
                            spec: w.clone(),
                            revision: s.spec.revision,
                            moved_at: now_text.clone(),
                        },
                    );
                    *n = s.spec.revision;
                }
            }
            events.push(Note {
                warning: false,
                reason: "RolledBack",
                note: format!(
                    "revision {t} rolled back to revision {} on {} {}: {}",
                    s.spec.revision,
                    back.len(),
                    if back.len() == 1 {
                        "cluster"
                    } else {
                        "clusters"
                    },
                    super::events::listed(&back)
                ),
            });
            progressing = (
                "False",
                "ProgressDeadlineExceeded",
                format!("{what}; rolling back to revision {}", s.spec.revision),
            );
        } else {
            progressing = (
                "False",
                "ProgressDeadlineExceeded",
                format!("{what}; halted"),
            );
        }
    } else if wave.complete || settled {
        completed = Some(t);
        progressing = (
            "True",
            "RolloutComplete",
            format!("revision {t} runs on all {} clusters", members.len()),
        );
    } else if let Some(why) = &invalid {
        progressing = ("False", "InvalidStrategy", why.clone());
    } else if strategy.paused {
        progressing = ("Unknown", "Paused", "the rollout is paused".to_owned());
    } else if wave
        .waiting
        .iter()
        .any(|(_, w)| matches!(w, rollout::Wait::Approval { .. }))
        && wave.moves.is_empty()
    {
        progressing = (
            "False",
            "WaitingForApproval",
            wave.message.clone().unwrap_or_default(),
        );
    } else {
        progressing = (
            "True",
            "Progressing",
            format!(
                "revision {t}: {}/{} clusters updated{}",
                wave.updated,
                members.len(),
                wave.stage
                    .as_ref()
                    .map(|s| format!(", stage {s}"))
                    .unwrap_or_default()
            ),
        );
    }
    // Each Event once: when `Progressing` comes to its reason (a restarted hub reads the
    // reason back from the status, and says nothing again).
    let before = p
        .status()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == condition::PROGRESSING)
        })
        .map(|c| c.reason.as_str());
    if before == Some(progressing.1) {
        events.clear();
    } else if progressing.1 == "RolloutComplete" {
        events.push(Note {
            warning: false,
            reason: "RolloutComplete",
            note: format!(
                "revision {t} rolled out to all {} {}",
                members.len(),
                if members.len() == 1 {
                    "cluster"
                } else {
                    "clusters"
                }
            ),
        });
    }
    if let (Some(f), true) = (&latest_failed, rolling_back) {
        let what = format!(
            "revision {} failed on cluster {}: {}; rolled back to revision {t}; not rolled out \
             again until what the placement delivers changes",
            f.revision, f.cluster, f.reason
        );
        progressing = ("False", "RevisionFailed", what);
    }
    let stages: Vec<StageStatus> = wave
        .stages
        .iter()
        .map(|s| StageStatus {
            name: s.name.clone(),
            clusters: s.members.len() as i32,
            updated: s
                .members
                .iter()
                .filter(|m| running.get(*m) == Some(&t))
                .count() as i32,
            message: if s.implicit {
                Some(format!(
                    "{} clusters are in no stage: they go last, in stage {IMPLICIT_STAGE}",
                    s.members.len()
                ))
            } else if let Some((cluster, later)) = s.overlaps.first() {
                Some(format!(
                    "{} clusters also match a later stage's selector (such as {cluster}: {}); \
                     each goes in the first stage that matches",
                    s.overlaps.len(),
                    later.join(", ")
                ))
            } else {
                None
            },
        })
        .collect();
    let updated = running.values().filter(|n| **n == t).count();
    let status = RolloutStatus {
        revision: Some(t),
        completed_revision: completed,
        stage: wave.stage.clone(),
        updated: updated as i32,
        available: wave.available as i32,
        failed: wave.failed.len() as i32,
        waiting: (members.len() - updated) as i32,
        message: wave
            .message
            .clone()
            .or_else(|| wave.waiting.first().map(|(_, w)| w.to_string()))
            .filter(|_| !wave.complete),
        stages,
        approvals,
        failed_revisions,
        live_hash: None,
    };
    let stage_entered = wave
        .stage
        .clone()
        .filter(|s| previous.stage.as_ref() != Some(s));
    let recheck = if wave.complete {
        None
    } else {
        Some(Duration::from_secs(
            wave.recheck_after.unwrap_or(30).clamp(1, 30) as u64,
        ))
    };
    in_use.extend(running.values());
    Step {
        plan: target_plan,
        desired,
        running,
        status,
        progressing,
        recheck,
        stage_entered,
        in_use,
        events,
    }
}

/// Since when `work` is available at the revision it carries (`None`: it is not), and
/// why not. A cluster not Ready counts as not available.
fn availability(
    work: Option<&Arc<Work>>,
    at_target: bool,
    not_ready: bool,
) -> (Option<Timestamp>, Option<String>) {
    let Some(work) = work else {
        return (None, Some("no Work yet".to_owned()));
    };
    if !at_target {
        return (None, None);
    }
    if not_ready {
        return (None, Some("cluster not Ready".to_owned()));
    }
    let Some(status) = work.status.as_ref() else {
        return (None, Some("no status reported yet".to_owned()));
    };
    if status.observed_generation != work.metadata.generation {
        return (None, Some("not applied yet".to_owned()));
    }
    match status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::AVAILABLE)
    {
        Some(c) if c.status == "True" => (Some(c.last_transition_time.0), None),
        Some(c) => (
            None,
            Some(member_reason(status).unwrap_or_else(|| format!("{}: {}", c.reason, c.message))),
        ),
        None => (None, Some("availability not reported yet".to_owned())),
    }
}

/// What the member itself says of the first manifest not available: its kind and name and
/// its own `Available` condition (such as `ImagePullBackOff`), as status feedback brings
/// it back.
fn member_reason(status: &flotilla_api::WorkStatus) -> Option<String> {
    status.manifests.iter().find_map(|m| {
        let feedback = m.status_feedback.as_ref()?.value();
        let condition = feedback["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Available" && c["status"] == "False")?
            .clone();
        Some(format!(
            "{} {}: {}: {}",
            m.kind,
            m.name,
            condition["reason"].as_str().unwrap_or_default(),
            condition["message"].as_str().unwrap_or_default()
        ))
    })
}

/// `status` with the rollout's part: the revision of each listed cluster, the rollout and
/// the `Progressing` condition.
pub(super) fn with_rollout(
    mut status: PlacementStatus,
    step: &Step,
    live_hash: &str,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> PlacementStatus {
    for cluster in &mut status.clusters {
        cluster.revision = step.running.get(&cluster.name).copied();
    }
    let (state, reason, message) = &step.progressing;
    status.conditions.push(flotilla_api::condition::keep_time(
        condition::PROGRESSING,
        state,
        reason,
        message.clone(),
        generation,
        previous,
        now,
    ));
    status.rollout = Some(RolloutStatus {
        live_hash: Some(live_hash.to_owned()),
        ..step.status.clone()
    });
    status
}

#[cfg(test)]
mod tests {
    use flotilla_api::{ManifestStatus, WorkStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    use super::*;

    fn available(status: &str, reason: &str) -> Condition {
        Condition {
            type_: condition::AVAILABLE.into(),
            status: status.into(),
            reason: reason.into(),
            message: "1/2 manifests available".into(),
            last_transition_time: Time(Timestamp::from_second(100).unwrap()),
            observed_generation: None,
        }
    }

    fn work(generation: i64, observed: i64, condition: Condition) -> Arc<Work> {
        let mut work = Work::new("shop.web", WorkSpec::default());
        work.metadata.generation = Some(generation);
        work.metadata.annotations = Some(BTreeMap::from([
            (REVISION_ANNOTATION.to_owned(), "3".to_owned()),
            (
                MOVED_AT_ANNOTATION.to_owned(),
                "1970-01-01T00:01:00Z".to_owned(),
            ),
        ]));
        work.status = Some(WorkStatus {
            observed_generation: Some(observed),
            conditions: vec![condition],
            manifests: vec![ManifestStatus {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
                status_feedback: Some(
                    (&json!({"conditions": [{"type": "Available", "status": "False",
                        "reason": "ImagePullBackOff", "message": "image \"bad:1\" cannot be pulled"}]}))
                        .into(),
                ),
                ..ManifestStatus::default()
            }],
        });
        Arc::new(work)
    }

    #[test]
    fn a_work_says_its_revision_and_whether_and_since_when_it_is_available() {
        let up = work(2, 2, available("True", "Available"));
        assert_eq!(
            carried(&up),
            (Some(3), Some(Timestamp::from_second(60).unwrap()))
        );
        assert_eq!(
            availability(Some(&up), true, false),
            (Some(Timestamp::from_second(100).unwrap()), None)
        );
        // A status about an older spec, a cluster not Ready: not available.
        let stale = work(3, 2, available("True", "Available"));
        assert_eq!(availability(Some(&stale), true, false).0, None);
        assert_eq!(availability(Some(&up), true, true).0, None);
        // Not available: what the member itself says, the kind and name first.
        let down = work(2, 2, available("False", "NotAvailable"));
        let (since, why) = availability(Some(&down), true, false);
        assert_eq!(since, None);
        assert_eq!(
            why.as_deref(),
            Some("Deployment web: ImagePullBackOff: image \"bad:1\" cannot be pulled")
        );
    }

    /// The undo of issue 24's staged test, as one rollout step sees it: revision 4 (a new
    /// image) reached the canary and waits for eu's approval; the undo makes revision 5 with
    /// revision 2's objects, which eu's and the rest's clusters (at revision 2, the last
    /// completed) already hold.
    mod undo {
        use flotilla_api::{ClusterSpec, Placement};

        use super::*;
        use crate::Reach;

        fn key() -> PlacementKey {
            PlacementKey {
                namespace: Some("shop".into()),
                name: "web".into(),
            }
        }

        fn spec() -> PlacementSpec {
            with_rollback(None)
        }

        fn with_rollback(rollback: Option<&str>) -> PlacementSpec {
            let mut spec: PlacementSpec = serde_json::from_value(json!({
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                "strategy": {"type": "Staged", "progressDeadlineSeconds": 60, "stages": [
                    {"name": "canary", "clusters": {"labelSelector": {"matchLabels": {"ring": "canary"}}}},
                    {"name": "eu", "clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}},
                     "approval": "Required"},
                    {"name": "rest"}]}
            }))
            .unwrap();
            if let (Some(strategy), Some(r)) = (spec.strategy.as_mut(), rollback) {
                strategy.rollback = Some(serde_json::from_value(json!(r)).unwrap());
            }
            spec
        }

        fn revision(number: i64, image: &str) -> Arc<PlacementRevision> {
            let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "web", "image": image}]}}}});
            let snapshot = crate::revision::snapshot(&[template], &[], &spec());
            Arc::new(PlacementRevision::new(
                &crate::revision::name(&key(), number),
                snapshot.revision(&key(), number, None),
            ))
        }

        fn clusters() -> Vec<Arc<Cluster>> {
            [
                ("c0", "ring", "canary"),
                ("e1", "region", "eu"),
                ("e2", "region", "eu"),
            ]
            .into_iter()
            .chain([("r1", "region", "us")])
            .map(|(name, k, v)| {
                let mut c = Cluster::new(name, ClusterSpec::default());
                c.metadata.labels = Some(BTreeMap::from([(k.to_owned(), v.to_owned())]));
                Arc::new(c)
            })
            .collect()
        }

        /// A Work holding `spec` at `revision`, moved at second 0 and available since.
        fn work_at(spec: &WorkSpec, revision: i64) -> Arc<Work> {
            work_up(spec, revision, true)
        }

        /// A Work holding `spec` at `revision`, moved at second 0, available or not.
        fn work_up(spec: &WorkSpec, revision: i64, up: bool) -> Arc<Work> {
            let mut work = Work::new("shop.web", spec.clone());
            work.metadata.generation = Some(1);
            work.metadata.annotations = Some(BTreeMap::from([
                (REVISION_ANNOTATION.to_owned(), revision.to_string()),
                (
                    MOVED_AT_ANNOTATION.to_owned(),
                    "1970-01-01T00:00:00Z".to_owned(),
                ),
            ]));
            work.status = Some(flotilla_api::WorkStatus {
                observed_generation: Some(1),
                conditions: vec![if up {
                    available("True", "Available")
                } else {
                    available("False", "ImagePullBackOff")
                }],
                manifests: Vec::new(),
            });
            Arc::new(work)
        }

        fn placement(approved: Option<i64>) -> Placement {
            let mut p = Placement::new("web", spec());
            p.metadata.namespace = Some("shop".into());
            p.metadata.annotations = approved.map(|n| {
                BTreeMap::from([(
                    format!("{}eu", flotilla_api::APPROVAL_ANNOTATION_PREFIX),
                    json!({"stage": "eu", "revision": n, "by": "alice"}).to_string(),
                )])
            });
            p.status = Some(PlacementStatus {
                rollout: Some(RolloutStatus {
                    revision: Some(4),
                    completed_revision: Some(2),
                    stage: Some("eu".into()),
                    ..RolloutStatus::default()
                }),
                ..PlacementStatus::default()
            });
            p
        }

        #[test]
        fn a_halt_a_rollback_and_a_completion_each_call_for_one_event() {
            let key = key();
            let clusters = clusters();
            let revisions = vec![revision(2, "nginx:1.28"), revision(4, "bad:1")];
            let reach = Reach::Everywhere;
            let empty = BTreeMap::new();
            let now = Timestamp::from_second(1000).unwrap();
            for (rollback, reasons) in [
                (None, vec!["RolloutHalted"]),
                (Some("Automatic"), vec!["RolloutHalted", "RolledBack"]),
            ] {
                let spec = with_rollback(rollback);
                let live = Live {
                    key: &key,
                    spec: &spec,
                    clusters: &clusters,
                    reach: &reach,
                    current: &empty,
                    noted_failure: None,
                    renders: None,
                };
                let old = plan_of(&live, &revisions[0]).works;
                let new = plan_of(&live, &revisions[1]).works;
                let mut works: BTreeMap<String, Arc<Work>> = ["e1", "e2", "r1"]
                    .into_iter()
                    .map(|c| (c.to_owned(), work_at(&old[c], 2)))
                    .collect();
                // The canary moved at second 0, not available 1000 s later (deadline 60).
                works.insert("c0".into(), work_up(&new["c0"], 4, false));
                let mut p = placement(None);
                let halted = step(&p, &live, &works, &revisions, &BTreeMap::new(), now);
                let found: Vec<&str> = halted.events.iter().map(|e| e.reason).collect();
                assert_eq!(found, reasons, "{rollback:?}");
                let halt = &halted.events[0];
                assert!(halt.warning);
                assert!(
                    halt.note.contains("revision 4") && halt.note.contains("cluster c0"),
                    "{}",
                    halt.note
                );
                if rollback.is_some() {
                    assert!(!halted.events[1].warning);
                    assert_eq!(
                        halted.events[1].note,
                        "revision 4 rolled back to revision 2 on 1 cluster: c0"
                    );
                    assert_eq!(halted.desired["c0"].revision, 2);
                }
                // The status says it halted: the next step says nothing again.
                let status = p.status.as_mut().unwrap();
                status.conditions = vec![Condition {
                    type_: condition::PROGRESSING.into(),
                    status: "False".into(),
                    reason: halted.progressing.1.into(),
                    message: halted.progressing.2.clone(),
                    last_transition_time: Time(now),
                    observed_generation: None,
                }];
                if rollback.is_none() {
                    let again = step(&p, &live, &works, &revisions, &BTreeMap::new(), now);
                    assert_eq!(again.progressing.1, "ProgressDeadlineExceeded");
                    assert!(again.events.is_empty(), "{:?}", again.events);
                } else {
                    // The canary is back at revision 2, but the placement read does not
                    // show the failed revision yet: what this hub noted keeps revision 4
                    // from going out again.
                    works.insert("c0".into(), work_at(&old["c0"], 2));
                    let stale = placement(None);
                    let noted = halted.status.failed_revisions[0].clone();
                    let without = step(&stale, &live, &works, &revisions, &BTreeMap::new(), now);
                    assert_eq!(without.desired["c0"].revision, 4, "the race this guards");
                    let live = Live {
                        noted_failure: Some(&noted),
                        renders: None,
                        ..live
                    };
                    let with = step(&stale, &live, &works, &revisions, &BTreeMap::new(), now);
                    assert_eq!(with.running["c0"], 2);
                    assert_eq!(with.progressing.1, "RevisionFailed");
                }
            }
            // Every cluster at revision 2 and available: complete, said once.
            let spec = spec();
            let live = Live {
                key: &key,
                spec: &spec,
                clusters: &clusters,
                reach: &reach,
                current: &empty,
                noted_failure: None,
                renders: None,
            };
            let old = plan_of(&live, &revisions[0]).works;
            let works: BTreeMap<String, Arc<Work>> = ["c0", "e1", "e2", "r1"]
                .into_iter()
                .map(|c| (c.to_owned(), work_at(&old[c], 2)))
                .collect();
            let revisions = &revisions[..1];
            let mut p = placement(None);
            p.status
                .as_mut()
                .unwrap()
                .rollout
                .as_mut()
                .unwrap()
                .revision = Some(2);
            let done = step(&p, &live, &works, revisions, &BTreeMap::new(), now);
            assert_eq!(done.progressing.1, "RolloutComplete");
            assert_eq!(
                done.events,
                [Note {
                    warning: false,
                    reason: "RolloutComplete",
                    note: "revision 2 rolled out to all 4 clusters".into()
                }]
            );
        }

        #[test]
        fn stages_that_overlap_or_leave_clusters_out_are_said_in_the_status() {
            let key = key();
            let clusters = clusters();
            // canary also matches eu's selector; r1 (region us) is in no stage.
            let mut spec: PlacementSpec = serde_json::from_value(json!({
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                "strategy": {"type": "Staged", "stages": [
                    {"name": "canary", "clusters": {"names": ["c0", "e1"]}},
                    {"name": "eu", "clusters": {"labelSelector": {"matchLabels": {"region": "eu"}}}}]}
            }))
            .unwrap();
            spec.revision_history_limit = Some(10);
            let revisions = vec![revision(1, "nginx:1.28")];
            let reach = Reach::Everywhere;
            let empty = BTreeMap::new();
            let live = Live {
                key: &key,
                spec: &spec,
                clusters: &clusters,
                reach: &reach,
                current: &empty,
                noted_failure: None,
                renders: None,
            };
            let mut p = placement(None);
            p.spec = spec.clone();
            p.status = None;
            let now = Timestamp::from_second(1000).unwrap();
            let first = step(
                &p,
                &live,
                &BTreeMap::new(),
                &revisions,
                &BTreeMap::new(),
                now,
            );
            let stages: Vec<(&str, i32, Option<&str>)> = first
                .status
                .stages
                .iter()
                .map(|s| (s.name.as_str(), s.clusters, s.message.as_deref()))
                .collect();
            assert_eq!(
                stages,
                [
                    (
                        "canary",
                        2,
                        Some(
                            "1 clusters also match a later stage's selector (such as e1: eu); \
                             each goes in the first stage that matches"
                        )
                    ),
                    ("eu", 1, None),
                    (
                        IMPLICIT_STAGE,
                        1,
                        Some("1 clusters are in no stage: they go last, in stage (unstaged)")
                    ),
                ]
            );
        }

        #[test]
        fn a_cluster_holding_the_targets_objects_at_another_revision_waits_for_its_approval() {
            let (key, spec, clusters) = (key(), spec(), clusters());
            let revisions = vec![
                revision(2, "nginx:1.28"),
                revision(4, "nginx:1.29"),
                revision(5, "nginx:1.28"),
            ];
            assert_eq!(revisions[0].spec.hash, revisions[2].spec.hash);
            let reach = Reach::Everywhere;
            let empty = BTreeMap::new();
            let live = Live {
                key: &key,
                spec: &spec,
                clusters: &clusters,
                reach: &reach,
                current: &empty,
                noted_failure: None,
                renders: None,
            };
            let old = plan_of(&live, &revisions[0]).works;
            let new = plan_of(&live, &revisions[1]).works;
            let mut works: BTreeMap<String, Arc<Work>> = ["e1", "e2", "r1"]
                .into_iter()
                .map(|c| (c.to_owned(), work_at(&old[c], 2)))
                .collect();
            works.insert("c0".into(), work_at(&new["c0"], 4));
            let now = Timestamp::from_second(1000).unwrap();
            // Not approved for revision 5 (only for 2 long ago, and 4): the canary moves,
            // eu and the rest stay at revision 2, whatever they hold.
            for approved in [None, Some(2), Some(4)] {
                let step = step(
                    &placement(approved),
                    &live,
                    &works,
                    &revisions,
                    &BTreeMap::new(),
                    now,
                );
                assert_eq!(step.desired["c0"].revision, 5);
                assert_eq!(step.desired["c0"].spec, old["c0"]);
                for c in ["e1", "e2", "r1"] {
                    assert_eq!(step.running[c], 2, "{c} moved without an approval");
                    assert!(step.desired.get(c).is_none_or(|d| d.revision == 2), "{c}");
                }
                assert_eq!(step.progressing.1, "Progressing");
            }
            // The canary at revision 5 and available: eu waits for its approval of 5.
            works.insert("c0".into(), work_at(&old["c0"], 5));
            let later = Timestamp::from_second(2000).unwrap();
            let waiting = step(
                &placement(Some(4)),
                &live,
                &works,
                &revisions,
                &BTreeMap::new(),
                later,
            );
            assert_eq!(waiting.progressing.1, "WaitingForApproval");
            assert_eq!(waiting.status.stage.as_deref(), Some("eu"));
            assert_eq!((waiting.running["e1"], waiting.running["e2"]), (2, 2));
            // Approved for 5: eu moves by its revision alone — the Work's spec is the one it
            // holds, so the member's objects are not applied again.
            let approved = step(
                &placement(Some(5)),
                &live,
                &works,
                &revisions,
                &BTreeMap::new(),
                later,
            );
            for c in ["e1", "e2"] {
                assert_eq!(approved.desired[c].revision, 5, "{c}");
                assert_eq!(approved.desired[c].spec, works[c].spec, "{c}");
            }
            assert_eq!(approved.running["r1"], 2, "rest waits for eu");
        }
    }

    /// A size bound, not a timing: the placement's status mid-rollout over 10,000 clusters
    /// (a tenth in flight, some failing with the member's own reason, the rest at either
    /// revision) stays under 1 MiB, as the issue's target asks.
    #[test]
    fn the_status_of_a_rollout_over_ten_thousand_clusters_stays_under_a_mebibyte() {
        use flotilla_api::{ClusterSpec, Placement};

        use crate::Reach;
        use crate::status::{self, Observed, WorkView};

        const N: usize = 10_000;
        let key = PlacementKey {
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let spec: PlacementSpec = serde_json::from_value(json!({
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "strategy": {"type": "Rolling", "maxUnavailable": "10%", "minReadySeconds": 1,
                "progressDeadlineSeconds": 600}
        }))
        .unwrap();
        let revision = |number: i64, image: &str| {
            let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [
                    {"name": "web", "image": image}]}}}});
            let snapshot = crate::revision::snapshot(&[template], &[], &spec);
            Arc::new(PlacementRevision::new(
                &crate::revision::name(&key, number),
                snapshot.revision(&key, number, None),
            ))
        };
        let revisions = vec![revision(1, "nginx:1.27"), revision(2, "nginx:1.28")];
        let clusters: Vec<Arc<Cluster>> = (0..N)
            .map(|i| {
                let mut c = Cluster::new(&format!("member-{i:05}"), ClusterSpec::default());
                c.metadata.labels = Some(BTreeMap::from([
                    ("region".to_owned(), format!("region-{}", i % 7)),
                    ("ring".to_owned(), format!("ring-{}", i % 3)),
                ]));
                Arc::new(c)
            })
            .collect();
        let (reach, empty) = (Reach::Everywhere, BTreeMap::new());
        let live = Live {
            key: &key,
            spec: &spec,
            clusters: &clusters,
            reach: &reach,
            current: &empty,
            noted_failure: None,
            renders: None,
        };
        let old = plan_of(&live, &revisions[0]).works;
        let new = plan_of(&live, &revisions[1]).works;
        // 4,000 updated and available, 1,000 in flight (50 of them failing), 5,000 waiting.
        let works: BTreeMap<String, Arc<Work>> = clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c.metadata.name.clone().unwrap();
                let mut w = match i {
                    _ if i < 4000 => work(1, 1, available("True", "Available")),
                    _ if i < 4050 => work(1, 1, available("False", "NotAvailable")),
                    _ if i < 5000 => work(2, 1, available("True", "Available")),
                    _ => work(1, 1, available("True", "Available")),
                };
                let w = Arc::make_mut(&mut w);
                w.spec = if i < 5000 {
                    new[&name].clone()
                } else {
                    old[&name].clone()
                };
                w.metadata.namespace = Some(crate::plan::work_namespace(&name));
                w.metadata.annotations = Some(BTreeMap::from([
                    (
                        REVISION_ANNOTATION.to_owned(),
                        if i < 5000 { "2" } else { "1" }.to_owned(),
                    ),
                    (
                        MOVED_AT_ANNOTATION.to_owned(),
                        "1970-01-01T00:16:00Z".to_owned(),
                    ),
                ]));
                (name, Arc::new(w.clone()))
            })
            .collect();
        let mut p = Placement::new("web", spec.clone());
        p.metadata.namespace = Some("shop".into());
        p.status = Some(PlacementStatus {
            rollout: Some(RolloutStatus {
                revision: Some(2),
                completed_revision: Some(1),
                ..RolloutStatus::default()
            }),
            ..PlacementStatus::default()
        });
        let now = Timestamp::from_second(1000).unwrap();
        let step = step(&p, &live, &works, &revisions, &BTreeMap::new(), now);
        assert_eq!(step.status.updated, 5000);
        let views: BTreeMap<String, WorkView<'_>> = works
            .iter()
            .map(|(c, w)| {
                (
                    c.clone(),
                    WorkView {
                        generation: w.metadata.generation,
                        status: w.status.as_ref(),
                    },
                )
            })
            .collect();
        let observed = Observed {
            works: &views,
            not_ready: &BTreeMap::new(),
            unmatched: &[],
            outside: &[],
        };
        let time = Time(now);
        let placed = status::placement_status(&step.plan, &observed, Some(2), None, &time);
        let placed = with_rollout(placed, &step, "abcdef0123", Some(2), &[], &time);
        p.status = Some(placed);
        let bytes = serde_json::to_vec(&p).unwrap().len();
        assert!(bytes < 1 << 20, "the placement is {bytes} bytes");
        // The status lists at most MAX_LISTED_CLUSTERS clusters, and says how many more.
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.clusters.len(), flotilla_api::MAX_LISTED_CLUSTERS);
        assert!(status.unlisted_clusters.is_some_and(|n| n > 0));
    }

    #[test]
    fn approvals_are_read_from_the_annotations_by_stage() {
        let annotations = BTreeMap::from([
            (
                format!("{}eu", flotilla_api::APPROVAL_ANNOTATION_PREFIX),
                r#"{"stage":"ignored","revision":4,"by":"alice"}"#.to_owned(),
            ),
            (
                format!("{}rest", flotilla_api::APPROVAL_ANNOTATION_PREFIX),
                "not json".to_owned(),
            ),
            ("other".to_owned(), "{}".to_owned()),
        ]);
        let found = approvals(&annotations);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (
                found[0].stage.as_str(),
                found[0].revision,
                found[0].by.as_str()
            ),
            ("eu", 4, "alice")
        );
    }
}
