//! The ComputeNamespace controller: each ComputeNamespace becomes one Work per member of
//! its ClusterSets (what [`crate::compute`] renders), delivered by the push controller or
//! a pull agent like any placement's, and its status is read back from those Works.
//!
//! ```text
//!  ComputeNamespace ─┐                      ┌─► hub Namespace <name> (for the team's
//!  Clusters (sets) ──┼─► reconcile ─────────┤   Placements; created, never deleted)
//!                    │                      ├─► its Roles and RoleBindings in it (SSA,
//!                    │                      │   labelled, owned by it); labelled ones no
//!                    │                      │   longer in its spec deleted
//!  its Works ────────┘   (finalizer)        ├─► Work flotilla-cluster-<c>/computenamespace.<name>
//!    ▲ a Work's change pokes its            │   per member (SSA where it differs); the
//!    │ ComputeNamespace; a cluster's        │   Works of clusters no longer members deleted
//!    │ change pokes them all                └─► status: per member, summary, Ready
//!  deletion: its hub Roles and RoleBindings deleted; every Work deleted, the finalizer
//!  kept until they are gone (the push controller's own finalizer removes their objects
//!  from the members, or orphans them)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::compute::{self, ComputeNamespace};
use flotilla_api::{ComputeNamespaceStatus, Work};
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::Value;
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
    hub_grants(fleet, cns).await?;
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

/// Server-side applies `cns`'s Roles and RoleBindings in its hub namespace
/// ([`crate::compute::hub_grants`]) where they differ from what is there, and deletes
/// those labelled as its that its spec no longer has. A binding whose role changed is
/// deleted and created again (`roleRef` never changes).
async fn hub_grants(fleet: &Fleet, cns: &ComputeNamespace) -> Result<(), Error> {
    let name = cns.name_any();
    let grants = crate::compute::hub_grants(cns);
    let roles: Api<Role> = Api::namespaced(fleet.client.clone(), &name);
    let bindings: Api<RoleBinding> = Api::namespaced(fleet.client.clone(), &name);
    let selector = ListParams::default().labels(&format!("{}={name}", crate::compute::LABEL));
    let current_roles: BTreeMap<String, Value> = roles
        .list(&selector)
        .await?
        .items
        .into_iter()
        .map(|r| (r.name_any(), serde_json::to_value(r).unwrap_or_default()))
        .collect();
    let current_bindings: BTreeMap<String, Value> = bindings
        .list(&selector)
        .await?
        .items
        .into_iter()
        .map(|b| (b.name_any(), serde_json::to_value(b).unwrap_or_default()))
        .collect();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut wanted = (BTreeSet::new(), BTreeSet::new());
    for grant in &grants {
        let object = grant["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (current, fields) = match grant["kind"].as_str() {
            Some("Role") => {
                wanted.0.insert(object.clone());
                (current_roles.get(&object), &["rules"][..])
            }
            _ => {
                wanted.1.insert(object.clone());
                (current_bindings.get(&object), &["roleRef", "subjects"][..])
            }
        };
        if current.is_some_and(|c| same_grant(c, grant, fields)) {
            continue;
        }
        debug!(kind = %grant["kind"], name = %object, "writing hub grant");
        if grant["kind"] == "Role" {
            roles.patch(&object, &params, &Patch::Apply(grant)).await?;
            continue;
        }
        if current.is_some_and(|c| role_of(c) != role_of(grant)) {
            match bindings.delete(&object, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        bindings
            .patch(&object, &params, &Patch::Apply(grant))
            .await?;
    }
    delete_grants::<RoleBinding>(fleet, &name, &wanted.1).await?;
    delete_grants::<Role>(fleet, &name, &wanted.0).await?;
    Ok(())
}

/// The role a binding names: its kind and name (the group is defaulted by the server).
fn role_of(binding: &Value) -> (&Value, &Value) {
    (&binding["roleRef"]["kind"], &binding["roleRef"]["name"])
}

/// Whether `current` (on the hub) already is `grant`: the same `fields`, labels and
/// owners. The groups the server defaults (a role's or a subject's `apiGroup`) are not
/// compared.
fn same_grant(current: &Value, grant: &Value, fields: &[&str]) -> bool {
    let absent_empty = |v: &Value| {
        let mut v = match v {
            Value::Array(a) if a.is_empty() => Value::Null,
            v => v.clone(),
        };
        if let Some(reference) = v.as_object_mut() {
            reference.remove("apiGroup");
        }
        for subject in v.as_array_mut().into_iter().flatten() {
            if let Some(subject) = subject.as_object_mut() {
                subject.remove("apiGroup");
            }
        }
        v
    };
    let labels_kept = grant["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| current["metadata"]["labels"][k] == *v);
    labels_kept
        && current["metadata"]["ownerReferences"] == grant["metadata"]["ownerReferences"]
        && fields
            .iter()
            .all(|f| absent_empty(&current[*f]) == absent_empty(&grant[*f]))
}

/// Deletes the objects of kind `K` in hub namespace `name` labelled as ComputeNamespace
/// `name`'s but for those in `keep`.
async fn delete_grants<K>(fleet: &Fleet, name: &str, keep: &BTreeSet<String>) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(fleet.client.clone(), name);
    let selector = ListParams::default().labels(&format!("{}={name}", crate::compute::LABEL));
    let listed = match api.list(&selector).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for object in listed.iter().map(ResourceExt::name_any) {
        if keep.contains(&object) {
            continue;
        }
        debug!(kind = %K::kind(&Default::default()), name = %object, "deleting hub grant");
        match api.delete(&object, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Deletes every Work of `cns`; done once they are all gone (their objects removed from
/// the members, or orphaned, by the push controller or the agents).
async fn remove(fleet: &Arc<Fleet>, cns: &ComputeNamespace) -> Result<Action, Error> {
    let name = cns.name_any();
    // Its grants on the hub go first (garbage collection would remove them once it is
    // gone; the team loses them as soon as it is being deleted).
    delete_grants::<RoleBinding>(fleet, &name, &BTreeSet::new()).await?;
    delete_grants::<Role>(fleet, &name, &BTreeSet::new()).await?;
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
