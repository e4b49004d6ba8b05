//! The cluster controller: each Cluster's Works namespace, its health (the member probed
//! every health period), its ClusterProfile, and its removal when it is unjoined.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::{
    Cluster, ClusterManager, ClusterProfile, ClusterProfileSpec, ClusterProfileStatus,
    ClusterStatus, ClusterVersion, Property, Work, condition, multicluster,
};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event};
use kube::{Api, Resource, ResourceExt};
use tracing::{Instrument, info, info_span, warn};

use super::placement::gone;
use super::spread::Spread;
use super::{Error, FIELD_MANAGER, Fleet, status_patch};
use crate::plan::work_namespace;
use crate::status::condition as make_condition;

/// The finalizer that empties a cluster's Works namespace before the Cluster goes.
pub const FINALIZER: &str = "flotilla.io/cluster";

/// Probes between two listings of a member's Nodes and ClusterProperties, and between two
/// confirmations of what the controller itself keeps (a namespace exists; a profile is as
/// published): a health period confirms reachability, these change seldom.
const RECONFIRM_EVERY: u32 = 6;

/// What the cluster controller confirmed lately, so that a probe does not read it again:
/// namespaces that exist, and for each cluster what its ClusterProfile was published from.
#[derive(Default)]
pub(super) struct Confirmed {
    namespaces: HashMap<String, Instant>,
    profiles: HashMap<String, (u64, Instant)>,
    /// When each cluster was last probed, and its generation then.
    probed: HashMap<String, (Option<i64>, Instant)>,
}

impl Confirmed {
    fn namespace_exists(&self, name: &str, max_age: Duration) -> bool {
        self.namespaces
            .get(name)
            .is_some_and(|at| at.elapsed() < max_age)
    }

    fn profile_published(&self, cluster: &str, inputs: u64, max_age: Duration) -> bool {
        self.profiles
            .get(cluster)
            .is_some_and(|(published, at)| *published == inputs && at.elapsed() < max_age)
    }

    /// How many clusters have a profile published: every joined one after its first
    /// check.
    fn clusters(&self) -> usize {
        self.profiles.len()
    }

    /// How long until `cluster` (at `generation`) is due for its next probe, when it was
    /// probed less than half of `period` ago at the same generation: the controller's
    /// own status write comes back to it as a change of the cluster, and must not probe
    /// the member again. `None`: probe now.
    fn probe_due_in(
        &self,
        cluster: &str,
        generation: Option<i64>,
        period: Duration,
    ) -> Option<Duration> {
        let (at_generation, at) = self.probed.get(cluster)?;
        let since = at.elapsed();
        (*at_generation == generation && since < period / 2).then(|| period - since)
    }

    fn forget_cluster(&mut self, cluster: &str) {
        self.namespaces.remove(&work_namespace(cluster));
        self.profiles.remove(cluster);
        self.probed.remove(cluster);
    }
}

/// What the cluster controller keeps between probes: what it [`Confirmed`] lately, and
/// where each cluster's probes fall ([`Spread`]). Only this controller reads and writes it.
pub(super) struct HealthState {
    confirmed: Mutex<Confirmed>,
    spread: Spread,
}

impl Default for HealthState {
    fn default() -> Self {
        HealthState {
            confirmed: Mutex::default(),
            spread: Spread::new(Instant::now(), RECONFIRM_EVERY),
        }
    }
}

impl HealthState {
    fn confirmed(&self) -> MutexGuard<'_, Confirmed> {
        self.confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long what [`Confirmed`] holds is trusted, and a member client is used before its
/// credentials are read again if the watch of Secrets has not reported them.
pub(super) fn reconfirm_after(config: &super::Config) -> Duration {
    config.health_period * RECONFIRM_EVERY
}

/// How often each cluster is probed, and how long a confirmation lasts, in a fleet the
/// controller knows `clusters` of: every [`RECONFIRM_EVERY`]th probe still confirms.
fn periods(config: &super::Config, clusters: usize) -> (Duration, Duration) {
    let probe = config.probe_period(clusters);
    (probe, probe * RECONFIRM_EVERY)
}

/// A digest of what a cluster's ClusterProfile is made from: its name, set and status
/// (less the heartbeat, which the profile does not carry).
fn profile_inputs(cluster: &Cluster, status: &ClusterStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let status = ClusterStatus {
        last_heartbeat_time: None,
        ..status.clone()
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        cluster.metadata.name.as_deref(),
        cluster.spec.cluster_set.as_deref(),
        serde_json::to_string(&status).unwrap_or_default(),
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// Runs the cluster controller until the process ends.
pub(super) async fn run(
    fleet: Arc<Fleet>,
    changed: impl futures_util::Stream<Item = Arc<Cluster>> + Send + 'static,
) {
    Controller::for_shared_stream(changed, fleet.caches.clusters.clone())
        .run(reconcile, error_policy, fleet)
        .for_each(|_| async {})
        .await;
}

fn error_policy(cluster: Arc<Cluster>, error: &Error, fleet: Arc<Fleet>) -> Action {
    warn!(cluster = %cluster.name_any(), %error, "cluster not reconciled; retrying");
    Action::requeue(fleet.config.health_period)
}

/// This fleet's probe period and confirmation age (see [`periods`]).
fn fleet_periods(fleet: &Fleet) -> (Duration, Duration) {
    let clusters = fleet.health.confirmed().clusters();
    periods(&fleet.config, clusters)
}

async fn reconcile(cluster: Arc<Cluster>, fleet: Arc<Fleet>) -> Result<Action, Error> {
    let span = info_span!("cluster", cluster = %cluster.name_any());
    let api: Api<Cluster> = Api::all(fleet.client.clone());
    finalizer::finalizer(&api, FINALIZER, cluster, |event| async {
        match event {
            Event::Apply(cluster) => check(&fleet, &cluster).await,
            Event::Cleanup(cluster) => unjoin(&fleet, &cluster).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Creates namespace `name` unless it exists (or was confirmed to within `max_age`).
async fn ensure_namespace(
    fleet: &Fleet,
    name: &str,
    labels: BTreeMap<String, String>,
    max_age: Duration,
) -> Result<(), Error> {
    if fleet.health.confirmed().namespace_exists(name, max_age) {
        return Ok(());
    }
    let confirm = || {
        let mut confirmed = fleet.health.confirmed();
        confirmed.namespaces.insert(name.to_owned(), Instant::now());
    };
    let api: Api<Namespace> = Api::all(fleet.client.clone());
    if api.get_opt(name).await?.is_some() {
        confirm();
        return Ok(());
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    confirm();
    Ok(())
}

/// Whether a ClusterProfile of `cluster` may have been published before, perhaps in another
/// namespace: only once this controller has written the cluster's status (its first
/// reconcile always does). `cluster` is the object as the reconcile received it.
fn may_have_a_profile_elsewhere(cluster: &Cluster) -> bool {
    cluster.status.is_some()
}

/// The namespace of a cluster's ClusterProfile: its set's, else the system namespace.
fn profile_namespace(fleet: &Fleet, cluster: &Cluster) -> String {
    cluster
        .spec
        .cluster_set
        .clone()
        .unwrap_or_else(|| fleet.config.system_namespace.clone())
}

async fn check(fleet: &Arc<Fleet>, cluster: &Cluster) -> Result<Action, Error> {
    let name = cluster.name_any();
    let (probe_period, reconfirm) = fleet_periods(fleet);
    let generation = cluster.metadata.generation;
    let due_in = fleet
        .health
        .confirmed()
        .probe_due_in(&name, generation, probe_period);
    let spread = fleet.health.spread;
    if due_in.is_some() {
        return Ok(Action::requeue(spread.next_probe(
            &name,
            probe_period,
            Instant::now(),
        )));
    }
    // What this probe confirms again, if older than this: in the cluster's own slot of
    // the confirmation period, so that a fleet's confirmations do not all fall together.
    let max_age = spread.max_age(&name, probe_period, reconfirm, Instant::now());
    ensure_namespace(
        fleet,
        &work_namespace(&name),
        BTreeMap::from([("flotilla.io/cluster".into(), name.clone())]),
        max_age,
    )
    .await?;
    if cluster
        .spec
        .access
        .as_ref()
        .is_some_and(|a| a.pull.is_some())
    {
        return check_pull(fleet, cluster, probe_period, max_age).await;
    }
    let probed = match fleet.members.get(cluster).await {
        Ok(member) => {
            let probe = member.probe_within(max_age);
            match tokio::time::timeout(fleet.config.health_period, probe).await {
                Ok(Ok(health)) => Ok(health),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {:?}", fleet.config.health_period)),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    fleet
        .health
        .confirmed()
        .probed
        .insert(name.clone(), (generation, Instant::now()));
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous = cluster.status.clone().unwrap_or_default();
    let mut status = ClusterStatus {
        conditions: vec![make_condition(
            condition::JOINED,
            true,
            "Joined",
            "the hub holds the cluster's credentials".into(),
            generation,
            &previous.conditions,
            &now,
        )],
        ..previous.clone()
    };
    match &probed {
        Ok(health) => {
            status.conditions.push(make_condition(
                condition::READY,
                true,
                "Healthy",
                "the cluster's API answers".into(),
                generation,
                &previous.conditions,
                &now,
            ));
            status.kubernetes_version = Some(health.kubernetes_version.clone());
            status.allocatable = health.allocatable.clone();
            status.properties = health.properties.clone();
        }
        Err(why) => {
            // The next probe starts from a new connection.
            fleet.members.forget(&name);
            status.conditions.push(make_condition(
                condition::READY,
                false,
                "Unreachable",
                why.clone(),
                generation,
                &previous.conditions,
                &now,
            ));
        }
    }
    // The heartbeat alone is written at most once per confirmation period: a minute, and
    // longer in fleets past 2,000 clusters (each write is a change every cache of
    // Clusters decodes), in the cluster's own slot of it.
    let stale = previous
        .last_heartbeat_time
        .as_ref()
        .is_none_or(|t| now.0.duration_since(t.0).as_secs_f64() >= max_age.as_secs_f64());
    let changed = ClusterStatus {
        last_heartbeat_time: None,
        ..status.clone()
    } != ClusterStatus {
        last_heartbeat_time: None,
        ..previous.clone()
    };
    if changed || (stale && probed.is_ok()) {
        if probed.is_ok() {
            status.last_heartbeat_time = Some(now.clone());
        }
        let api: Api<Cluster> = Api::all(fleet.client.clone());
        api.patch_status(&name, &PatchParams::default(), &status_patch(&status))
            .await?;
        if changed {
            info!(ready = probed.is_ok(), "cluster status changed");
        }
        let was_ready = crate::model::is_true(&previous.conditions, condition::READY);
        record(fleet, cluster, &previous, &probed);
        if probed.is_ok() && !was_ready {
            // Back (or new): its Works are synced now, not when their backoff or the
            // resync ends.
            fleet.poke_works_of(&name);
        }
    }
    let inputs = profile_inputs(cluster, &status);
    let published = fleet
        .health
        .confirmed()
        .profile_published(&name, inputs, max_age);
    if !published {
        publish_profile(fleet, cluster, &status).await?;
        let mut confirmed = fleet.health.confirmed();
        confirmed
            .profiles
            .insert(name.clone(), (inputs, Instant::now()));
    }
    Ok(Action::requeue(spread.next_probe(
        &name,
        probe_period,
        Instant::now(),
    )))
}

/// A pull cluster's health, from what its agent shows: `Joined` once its agent's
/// certificate is approved (the Cluster records its serial), `Ready` while its heartbeat
/// Lease is renewed (Unknown once `leaseDurationSeconds`, 4 of the agent's periods, pass
/// without a renewal: the member may be fine, the hub cannot tell). The member's facts
/// are the agent's to report.
async fn check_pull(
    fleet: &Arc<Fleet>,
    cluster: &Cluster,
    probe_period: Duration,
    max_age: Duration,
) -> Result<Action, Error> {
    use k8s_openapi::api::coordination::v1::Lease;
    let name = cluster.name_any();
    let generation = cluster.metadata.generation;
    fleet
        .health
        .confirmed()
        .probed
        .insert(name.clone(), (generation, Instant::now()));
    let approved = cluster
        .annotations()
        .get(flotilla_api::agent::SERIAL_ANNOTATION)
        .is_some_and(|s| !s.is_empty());
    let leases: Api<Lease> = Api::namespaced(fleet.client.clone(), &work_namespace(&name));
    let lease = leases
        .get_opt(flotilla_api::agent::HEARTBEAT_LEASE)
        .await?
        .and_then(|l| l.spec);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let renewed = lease.as_ref().and_then(|l| {
        let at = l.renew_time.as_ref()?.0;
        let lasts = l.lease_duration_seconds.unwrap_or(40);
        Some((at, now.0.duration_since(at).as_secs() < i64::from(lasts)))
    });
    let previous = cluster.status.clone().unwrap_or_default();
    let joined = make_condition(
        condition::JOINED,
        approved,
        if approved {
            "Approved"
        } else {
            "AwaitingApproval"
        },
        if approved {
            "its agent's certificate is approved".into()
        } else {
            "its agent's certificate request awaits approval (flotilla approve)".into()
        },
        generation,
        &previous.conditions,
        &now,
    );
    let alive = approved && renewed.is_some_and(|(_, fresh)| fresh);
    let why = match renewed {
        _ if !approved => "not approved".to_owned(),
        None => "no heartbeat from its agent yet".to_owned(),
        Some((_, true)) => "its agent's heartbeat is renewed".to_owned(),
        Some((at, false)) => format!("its agent's heartbeat is late: last renewed at {at}"),
    };
    // Not alive: Unknown, as kube's node lifecycle controller marks a node whose kubelet
    // stopped posting: the agent, the member or the path between may be down.
    let ready = condition::keep_time(
        condition::READY,
        if alive { "True" } else { "Unknown" },
        if alive {
            "Heartbeat"
        } else {
            "HeartbeatMissing"
        },
        why.clone(),
        generation,
        &previous.conditions,
        &now,
    );
    let mut status = ClusterStatus {
        conditions: vec![joined, ready],
        ..previous.clone()
    };
    // The heartbeat alone is written at most once per confirmation period, in the
    // cluster's own slot of it, as a push cluster's (the Lease has every renewal).
    let stale = previous
        .last_heartbeat_time
        .as_ref()
        .is_none_or(|t| now.0.duration_since(t.0).as_secs_f64() >= max_age.as_secs_f64());
    if status != previous || stale {
        status.last_heartbeat_time = renewed
            .map(|(at, _)| Time(at))
            .or(previous.last_heartbeat_time.clone());
    }
    if status != previous {
        let api: Api<Cluster> = Api::all(fleet.client.clone());
        api.patch_status(&name, &PatchParams::default(), &status_patch(&status))
            .await?;
        let was_ready = crate::model::is_true(&previous.conditions, condition::READY);
        if was_ready != alive {
            info!(ready = alive, %why, "pull cluster's readiness changed");
        }
        if alive && !was_ready {
            fleet.poke_works_of(&name);
        }
    }
    let inputs = profile_inputs(cluster, &status);
    let published = fleet
        .health
        .confirmed()
        .profile_published(&name, inputs, max_age);
    if !published {
        publish_profile(fleet, cluster, &status).await?;
        let mut confirmed = fleet.health.confirmed();
        confirmed
            .profiles
            .insert(name.clone(), (inputs, Instant::now()));
    }
    Ok(Action::requeue(fleet.health.spread.next_probe(
        &name,
        probe_period,
        Instant::now(),
    )))
}

/// The Events of a probe: the cluster joined (its first status), became Ready, or
/// NotReady (and why); nothing while it stays as it was.
fn record<T>(
    fleet: &Fleet,
    cluster: &Cluster,
    previous: &ClusterStatus,
    probed: &Result<T, String>,
) {
    use super::events::Type;
    let regarding = cluster.object_ref(&());
    if cluster.status.is_none() {
        fleet.events.emit(
            &regarding,
            None,
            Type::Normal,
            "Joined",
            "Joining",
            "the hub holds the cluster's credentials",
        );
    }
    let was = previous
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY)
        .map(|c| c.status == "True");
    match probed {
        Ok(_) if was != Some(true) => fleet.events.emit(
            &regarding,
            None,
            Type::Normal,
            "Ready",
            "Probing",
            "the cluster's API answers",
        ),
        Err(why) if was != Some(false) => fleet.events.emit(
            &regarding,
            None,
            Type::Warning,
            "NotReady",
            "Probing",
            &format!("the cluster's API does not answer: {why}"),
        ),
        _ => {}
    }
}

/// Keeps the cluster's ClusterProfile (KEP-4322) in line with its status.
async fn publish_profile(
    fleet: &Fleet,
    cluster: &Cluster,
    status: &ClusterStatus,
) -> Result<(), Error> {
    let name = cluster.name_any();
    let namespace = profile_namespace(fleet, cluster);
    let mut labels = BTreeMap::from([(
        multicluster::LABEL_CLUSTER_MANAGER.to_owned(),
        FIELD_MANAGER.to_owned(),
    )]);
    if let Some(set) = &cluster.spec.cluster_set {
        labels.insert(multicluster::LABEL_CLUSTER_SET.into(), set.clone());
    }
    // A set's profiles live in a namespace labelled with the set (KEP-4322).
    let namespace_labels = cluster
        .spec
        .cluster_set
        .iter()
        .map(|set| (multicluster::LABEL_CLUSTER_SET.to_owned(), set.clone()))
        .collect();
    // Shared by the clusters of a set: confirmed once per period for all of them.
    let (_, reconfirm) = fleet_periods(fleet);
    ensure_namespace(fleet, &namespace, namespace_labels, reconfirm).await?;
    let api: Api<ClusterProfile> = Api::namespaced(fleet.client.clone(), &namespace);
    let current = api.get_opt(&name).await?;
    if current.is_none() && may_have_a_profile_elsewhere(cluster) {
        // A first profile here: one left in another namespace (the cluster changed
        // sets) goes. Finding it means listing every namespace's profiles, so a cluster
        // that has never been reconciled (a join) is spared: it has no profile anywhere.
        let everywhere: Api<ClusterProfile> = Api::all(fleet.client.clone());
        let ours = ListParams::default()
            .labels(&format!(
                "{}={FIELD_MANAGER}",
                multicluster::LABEL_CLUSTER_MANAGER
            ))
            .fields(&format!("metadata.name={name}"));
        for stale in everywhere.list(&ours).await? {
            if let Some(other) = stale
                .metadata
                .namespace
                .as_deref()
                .filter(|ns| *ns != namespace)
            {
                Api::<ClusterProfile>::namespaced(fleet.client.clone(), other)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ())
                    .or_else(gone)?;
            }
        }
    }
    let mut profile = ClusterProfile::new(
        &name,
        ClusterProfileSpec {
            display_name: Some(name.clone()),
            cluster_manager: ClusterManager {
                name: FIELD_MANAGER.into(),
            },
        },
    );
    profile.metadata.labels = Some(labels);
    // Owned by the Cluster, so that the hub's garbage collector removes the profile of a
    // Cluster deleted without its finalizer (whose unjoin never ran).
    profile.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
    let shown = |p: &ClusterProfile| {
        (
            p.spec.clone(),
            p.metadata.labels.clone(),
            p.metadata.owner_references.clone(),
        )
    };
    if current.as_ref().map(shown) != Some(shown(&profile)) {
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&profile),
        )
        .await?;
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous = current.and_then(|c| c.status).unwrap_or_default();
    let copy = |kind: &str, as_kind: &str| {
        status.conditions.iter().find(|c| c.type_ == kind).map(|c| {
            let mut c = c.clone();
            c.type_ = as_kind.to_owned();
            c.observed_generation = None;
            if let Some(old) = previous
                .conditions
                .iter()
                .find(|o| o.type_ == as_kind && o.status == c.status)
            {
                c.last_transition_time = old.last_transition_time.clone();
            }
            c
        })
    };
    let profile_status = ClusterProfileStatus {
        conditions: [
            copy(condition::READY, condition::CONTROL_PLANE_HEALTHY),
            copy(condition::JOINED, condition::JOINED),
        ]
        .into_iter()
        .flatten()
        .collect(),
        version: status.kubernetes_version.as_ref().map(|v| ClusterVersion {
            kubernetes: Some(v.clone()),
        }),
        properties: status
            .properties
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| Property {
                name: k.clone(),
                value: v.clone(),
                last_observed_time: previous
                    .properties
                    .iter()
                    .find(|p| &p.name == k && &p.value == v)
                    .and_then(|p| p.last_observed_time.clone())
                    .or_else(|| Some(now.clone())),
            })
            .collect(),
        ..previous.clone()
    };
    if profile_status != previous {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &status_patch(&profile_status),
        )
        .await?;
    }
    Ok(())
}

/// The cluster is being unjoined: its Works go first (each one's finalizer removes, or
/// orphans, what it put on the member), then its namespace, profile and credentials.
async fn unjoin(fleet: &Arc<Fleet>, cluster: &Cluster) -> Result<Action, Error> {
    let name = cluster.name_any();
    let namespace = work_namespace(&name);
    let works: Api<Work> = Api::namespaced(fleet.client.clone(), &namespace);
    let left = match works.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    if !left.is_empty() {
        for work in &left {
            if work.metadata.deletion_timestamp.is_none() {
                works
                    .delete(&work.name_any(), &DeleteParams::default())
                    .await
                    .map(|_| ())
                    .or_else(gone)?;
            }
        }
        return Err(Error::Waiting(format!(
            "{} Works of cluster {name} are being removed",
            left.len()
        )));
    }
    let namespaces: Api<Namespace> = Api::all(fleet.client.clone());
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .map(|_| ())
        .or_else(gone)?;
    let profiles: Api<ClusterProfile> =
        Api::namespaced(fleet.client.clone(), &profile_namespace(fleet, cluster));
    profiles
        .delete(&name, &DeleteParams::default())
        .await
        .map(|_| ())
        .or_else(gone)?;
    if let Some(push) = cluster.spec.access.as_ref().and_then(|a| a.push.as_ref()) {
        let secrets: Api<Secret> =
            Api::namespaced(fleet.client.clone(), &push.secret_ref.namespace);
        secrets
            .delete(&push.secret_ref.name, &DeleteParams::default())
            .await
            .map(|_| ())
            .or_else(gone)?;
    }
    fleet.members.forget(&name);
    fleet.push.forget_cluster(&name);
    fleet.health.confirmed().forget_cluster(&name);
    fleet.events.emit(
        &cluster.object_ref(&()),
        None,
        super::events::Type::Normal,
        "Unjoined",
        "Unjoining",
        "its Works, namespace, profile and credentials are removed",
    );
    info!("cluster unjoined");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_probed_moments_ago_is_not_probed_again_for_its_own_status_write() {
        let mut confirmed = Confirmed::default();
        let period = Duration::from_secs(10);
        // Never probed: now.
        assert_eq!(confirmed.probe_due_in("a", Some(1), period), None);
        confirmed
            .probed
            .insert("a".into(), (Some(1), Instant::now()));
        // Just probed, same generation (its status write came back): at the next period.
        let due = confirmed.probe_due_in("a", Some(1), period).unwrap();
        assert!(due > period / 2 && due <= period, "{due:?}");
        // Its spec changed (a new set): now.
        assert_eq!(confirmed.probe_due_in("a", Some(2), period), None);
        // Probed over half a period ago: now (a requeue is due anyway).
        confirmed.probed.insert(
            "a".into(),
            (Some(1), Instant::now() - Duration::from_secs(6)),
        );
        assert_eq!(confirmed.probe_due_in("a", Some(1), period), None);
        // Forgotten with its cluster.
        confirmed
            .probed
            .insert("a".into(), (Some(1), Instant::now()));
        confirmed.forget_cluster("a");
        assert_eq!(confirmed.probe_due_in("a", Some(1), period), None);
    }

    #[test]
    fn large_fleets_are_probed_less_often_so_that_probes_stay_under_the_cap() {
        let config = crate::runtime::Config::default();
        let ten = Duration::from_secs(10);
        // Up to 2,000 clusters at 200 probes a second: the health period, unchanged.
        for clusters in [0, 1, 1000, 2000] {
            assert_eq!(periods(&config, clusters), (ten, ten * 6), "{clusters}");
        }
        // 10,000 clusters: every 50 s, confirming every 6th probe (5 minutes).
        let fifty = Duration::from_secs(50);
        assert_eq!(periods(&config, 10_000), (fifty, fifty * 6));
        for clusters in [2001, 5000, 10_000, 100_000] {
            let (probe, _) = periods(&config, clusters);
            let per_second = clusters as f64 / probe.as_secs_f64();
            assert!(per_second <= 200.0 + 1e-9, "{clusters}: {per_second}/s");
        }
        // A longer configured period stays.
        let slow = crate::runtime::Config {
            health_period: Duration::from_secs(120),
            ..crate::runtime::Config::default()
        };
        assert_eq!(periods(&slow, 10_000).0, Duration::from_secs(120));

        // The count is of clusters with a published profile: each joined one once checked.
        let mut confirmed = Confirmed::default();
        confirmed.profiles.insert("a".into(), (1, Instant::now()));
        confirmed.profiles.insert("b".into(), (1, Instant::now()));
        assert_eq!(confirmed.clusters(), 2);
        confirmed.forget_cluster("a");
        assert_eq!(confirmed.clusters(), 1);
    }

    #[test]
    fn what_was_confirmed_is_trusted_for_a_while_and_forgotten_with_its_cluster() {
        let mut confirmed = Confirmed::default();
        let a_while = Duration::from_secs(60);
        assert!(!confirmed.namespace_exists("flotilla-cluster-a", a_while));
        confirmed
            .namespaces
            .insert(work_namespace("a"), Instant::now());
        confirmed
            .namespaces
            .insert("flotilla-system".into(), Instant::now());
        assert!(confirmed.namespace_exists(&work_namespace("a"), a_while));
        // Not once the while is over.
        assert!(!confirmed.namespace_exists(&work_namespace("a"), Duration::ZERO));

        confirmed.profiles.insert("a".into(), (7, Instant::now()));
        assert!(confirmed.profile_published("a", 7, a_while));
        // Other inputs are published again.
        assert!(!confirmed.profile_published("a", 8, a_while));
        assert!(!confirmed.profile_published("b", 7, a_while));

        confirmed.forget_cluster("a");
        assert!(!confirmed.namespace_exists(&work_namespace("a"), a_while));
        assert!(!confirmed.profile_published("a", 7, a_while));
        // A namespace other clusters share stays.
        assert!(confirmed.namespace_exists("flotilla-system", a_while));
    }

    #[test]
    fn a_profile_is_republished_when_what_it_shows_changes_not_for_a_heartbeat() {
        let cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "a"}, "spec": {}
        }))
        .unwrap();
        let status = ClusterStatus {
            kubernetes_version: Some("v1.33.1".into()),
            ..ClusterStatus::default()
        };
        let beat = ClusterStatus {
            last_heartbeat_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            ..status.clone()
        };
        assert_eq!(
            profile_inputs(&cluster, &status),
            profile_inputs(&cluster, &beat)
        );
        let upgraded = ClusterStatus {
            kubernetes_version: Some("v1.34.0".into()),
            ..status.clone()
        };
        assert_ne!(
            profile_inputs(&cluster, &status),
            profile_inputs(&cluster, &upgraded)
        );
        let mut in_a_set = cluster.clone();
        in_a_set.spec.cluster_set = Some("blue".into());
        assert_ne!(
            profile_inputs(&cluster, &status),
            profile_inputs(&in_a_set, &status)
        );
    }
}
