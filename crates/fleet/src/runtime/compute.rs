//! The ComputeNamespace controller: each ComputeNamespace becomes one Work per member of
//! its ClusterSets (what [`crate::compute`] renders), delivered by the push controller or
//! a pull agent like any placement's, and its status is read back from those Works.
//!
//! ```text
//!  ComputeNamespace ─┐                      ┌─► hub Namespace <name> (for the team's
//!  Clusters (sets) ──┼─► reconcile ─────────┤   Placements; created, never deleted)
//!  its Works ────────┘   (finalizer)        ├─► Work flotilla-cluster-<c>/computenamespace.<name>
//!    ▲ a Work's change pokes its            │   per member (SSA where it differs); the
//!    │ ComputeNamespace; a cluster's        │   Works of clusters no longer members deleted
//!    │ change pokes them all                └─► status: per member, summary, Ready
//!  deletion: every Work deleted, the finalizer kept until they are gone (the push
//!  controller's own finalizer removes their objects from the members, or orphans them)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::compute::{self, ComputeNamespace};
use flotilla_api::{ComputeNamespaceStatus, Work};
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::{Instrument, debug, info_span, warn};

use super::{Error, FIELD_MANAGER, Fleet, patch_only, status_patch};
use crate::plan::{PlacementKey, work_namespace};

/// The finalizer that removes a ComputeNamespace's Works (and so, by its deletion
/// policy, its objects on the members) before it goes.
pub const FINALIZER: &str = "flotilla.io/compute-namespace";

/// How often a ComputeNamespace is looked at again when nothing changed (its Works'
/// changes and the clusters' poke it sooner).
const RECHECK: Duration = Duration::from_secs(300);

/// Runs the ComputeNamespace controller until the process ends; `pokes` are extra
/// requests (a Work or a cluster changed).
pub(super) async fn run(
    fleet: Arc<Fleet>,
    changed: impl Stream<Item = Arc<ComputeNamespace>> + Send + 'static,
    pokes: impl Stream<Item = ObjectRef<ComputeNamespace>> + Send + 'static,
) {
    let store = fleet.caches.compute_namespaces.clone();
    Controller::for_shared_stream(changed, store)
        .reconcile_on(pokes)
        .run(reconcile, error_policy, fleet)
        .for_each(|_| async {})
        .await;
}

fn error_policy(cns: Arc<ComputeNamespace>, error: &Error, _: Arc<Fleet>) -> Action {
    if error.is_stale_finalizer() {
        return Action::requeue(Duration::from_millis(200));
    }
    match error {
        Error::Waiting(why) => debug!(compute_namespace = %cns.name_any(), %why, "waiting"),
        _ => {
            warn!(compute_namespace = %cns.name_any(), %error, "ComputeNamespace not reconciled; retrying")
        }
    }
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(cns: Arc<ComputeNamespace>, fleet: Arc<Fleet>) -> Result<Action, Error> {
    let name = cns.name_any();
    let span = info_span!("compute_namespace", name = %name);
    let api: Api<ComputeNamespace> = Api::all(fleet.client.clone());
    finalizer::finalizer(&api, FINALIZER, cns, |event| async {
        match event {
            Event::Apply(cns) => apply(&fleet, &cns).await,
            Event::Cleanup(cns) => remove(&fleet, &cns).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The key under which the Works' index finds ComputeNamespace `name`'s Works.
fn key(name: &str) -> PlacementKey {
    let reference = compute::reference(name);
    PlacementKey {
        namespace: reference.namespace,
        name: reference.name,
    }
}

/// Its Works, by cluster.
fn works_of(fleet: &Fleet, name: &str) -> BTreeMap<String, Arc<Work>> {
    fleet
        .caches
        .works
        .of(&key(name))
        .into_iter()
        .map(|w| (w.spec.cluster.clone(), w))
        .collect()
}

async fn apply(fleet: &Arc<Fleet>, cns: &ComputeNamespace) -> Result<Action, Error> {
    let name = cns.name_any();
    hub_namespace(fleet, &name).await?;
    let members = crate::compute::members(cns, fleet.caches.clusters.state().iter().map(|c| &**c));
    let manifests = crate::compute::manifests(cns);
    let current = works_of(fleet, &name);
    let work_name = compute::work_name(&name);
    let reference = compute::reference(&name);
    for cluster in &members {
        let spec = crate::compute::work(cns, &manifests, cluster);
        if current.get(cluster).is_some_and(|w| w.spec == spec) {
            continue;
        }
        let namespace = work_namespace(cluster);
        if let Some(other) = fleet
            .caches
            .works
            .get(&namespace, &work_name)
            .filter(|w| w.spec.placement != reference)
        {
            warn!(%cluster, work = %work_name, other = ?other.spec.placement, "a Work of this name belongs to a placement");
            continue;
        }
        let mut work = Work::new(&work_name, spec);
        work.metadata.namespace = Some(namespace.clone());
        debug!(%cluster, "writing Work");
        patch_only::<Work, _>(
            &fleet.client,
            &namespace,
            &work_name,
            None,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&work),
        )
        .await?;
    }
    for cluster in current.keys().filter(|c| !members.contains(*c)) {
        let api: Api<Work> = Api::namespaced(fleet.client.clone(), &work_namespace(cluster));
        match api.delete(&work_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let works: BTreeMap<String, &Work> = current.iter().map(|(c, w)| (c.clone(), &**w)).collect();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = crate::compute::status(cns, &members, &works, &now);
    write_status(fleet, cns, &status).await?;
    Ok(Action::requeue(RECHECK))
}

/// Writes `status` when it differs from the one `cns` has.
async fn write_status(
    fleet: &Fleet,
    cns: &ComputeNamespace,
    status: &ComputeNamespaceStatus,
) -> Result<(), Error> {
    if cns.status.as_ref() == Some(status) {
        return Ok(());
    }
    let request =
        kube::core::Request::new(<ComputeNamespace as kube::Resource>::url_path(&(), None));
    let request = request
        .patch_subresource(
            "status",
            &cns.name_any(),
            &PatchParams::default(),
            &status_patch(status),
        )
        .map_err(kube::Error::BuildRequest)?;
    fleet.client.request_text(request).await?;
    Ok(())
}

/// Makes sure the hub has namespace `name`, where the team's Placements live.
async fn hub_namespace(fleet: &Fleet, name: &str) -> Result<(), Error> {
    let api: Api<Namespace> = Api::all(fleet.client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                crate::compute::LABEL.to_owned(),
                name.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes every Work of `cns`; done once they are all gone (their objects removed from
/// the members, or orphaned, by the push controller or the agents).
async fn remove(fleet: &Arc<Fleet>, cns: &ComputeNamespace) -> Result<Action, Error> {
    let name = cns.name_any();
    let current = works_of(fleet, &name);
    if current.is_empty() {
        return Ok(Action::await_change());
    }
    let work_name = compute::work_name(&name);
    let mut left = BTreeSet::new();
    for (cluster, work) in &current {
        left.insert(cluster.clone());
        if work.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let api: Api<Work> = Api::namespaced(fleet.client.clone(), &work_namespace(cluster));
        match api.delete(&work_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Waiting(format!(
        "the Works on {} are being removed",
        left.into_iter().collect::<Vec<_>>().join(", ")
    )))
}
