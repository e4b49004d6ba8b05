//! Tenancy at work: the watches of ClusterSetBindings and ClusterSets, which re-plan the
//! placements whose reach they change, and the bindings controller, which says on each
//! binding whether it binds anything (`Bound`: its ClusterSet exists).
//!
//! ```text
//!  ClusterSetBinding changed (set, deleting) ─► inputs epoch + the Placements of its
//!                                               namespace look again
//!  ClusterSet created / deleted ──────────────► inputs epoch + every placement, and the
//!                                               bindings of that set, look again
//!  bindings controller: Bound = the set exists ─► ClusterSetBinding.status
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::{ClusterSet, ClusterSetBinding, ClusterSetBindingStatus, condition};
use futures_util::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PatchParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tracing::{Instrument, info_span, warn};

use super::{Error, Fleet, spawn_reflector, status_patch};
use crate::tenancy;

/// Follows the bindings into the shared cache: a change of what a binding binds (its set,
/// or its going) makes the Placements of its namespace plan again.
pub(super) fn watch(
    fleet: &Arc<Fleet>,
    api: Api<ClusterSetBinding>,
    writer: reflector::store::Writer<ClusterSetBinding>,
) {
    let weak = Arc::downgrade(fleet);
    // What each binding binds, and whether it is going: its status changes nothing.
    let mut seen: HashMap<(String, String), (String, bool)> = HashMap::new();
    spawn_reflector("clustersetbindings", api, writer, move |event| {
        let Some(fleet) = weak.upgrade() else { return };
        let id = |b: &ClusterSetBinding| {
            (
                b.metadata.namespace.clone().unwrap_or_default(),
                b.name_any(),
            )
        };
        let (changed, namespace) = match event {
            watcher::Event::Apply(b) | watcher::Event::InitApply(b) => {
                let facts = (
                    b.spec.cluster_set.clone(),
                    b.metadata.deletion_timestamp.is_some(),
                );
                let id = id(b);
                let namespace = id.0.clone();
                (
                    seen.insert(id, facts.clone()) != Some(facts),
                    Some(namespace),
                )
            }
            watcher::Event::Delete(b) => {
                let id = id(b);
                let namespace = id.0.clone();
                (seen.remove(&id).is_some(), Some(namespace))
            }
            watcher::Event::InitDone => (true, None),
            watcher::Event::Init => (false, None),
        };
        if !changed {
            return;
        }
        fleet.placement.inputs_changed();
        match (event, namespace) {
            (watcher::Event::InitApply(_), _) => {}
            (_, Some(namespace)) => fleet.poke_namespace(&namespace),
            (_, None) => fleet.poke_all(),
        }
    });
}

/// Follows the ClusterSets: one created or deleted changes what the bindings to it bind,
/// so every placement plans again and those bindings' `Bound` is written again.
pub(super) fn watch_sets(
    fleet: &Arc<Fleet>,
    api: Api<ClusterSet>,
    writer: reflector::store::Writer<ClusterSet>,
) {
    let weak = Arc::downgrade(fleet);
    let mut seen: HashMap<String, bool> = HashMap::new();
    spawn_reflector("clustersets", api, writer, move |event| {
        let Some(fleet) = weak.upgrade() else { return };
        let (changed, set) = match event {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                let going = s.metadata.deletion_timestamp.is_some();
                (seen.insert(s.name_any(), going) != Some(going), Some(s))
            }
            watcher::Event::Delete(s) => (seen.remove(&s.name_any()).is_some(), Some(s)),
            watcher::Event::InitDone => (true, None),
            watcher::Event::Init => (false, None),
        };
        if !changed || matches!(event, watcher::Event::InitApply(_)) {
            if changed {
                fleet.placement.inputs_changed();
            }
            return;
        }
        fleet.placement.inputs_changed();
        fleet.poke_all();
        if let Some(set) = set {
            fleet.poke_bindings_of(&set.name_any());
        }
    });
}

/// Runs the bindings controller until the process ends; `pokes` are extra requests (a
/// set's bindings when it comes or goes).
pub(super) async fn run(
    fleet: Arc<Fleet>,
    changed: impl Stream<Item = Arc<ClusterSetBinding>> + Send + 'static,
    pokes: impl Stream<Item = ObjectRef<ClusterSetBinding>> + Send + 'static,
) {
    Controller::for_shared_stream(changed, fleet.caches.bindings.clone())
        .reconcile_on(pokes)
        .run(reconcile, error_policy, fleet)
        .for_each(|_| async {})
        .await;
}

fn error_policy(binding: Arc<ClusterSetBinding>, error: &Error, _: Arc<Fleet>) -> Action {
    warn!(binding = %binding.name_any(), %error, "binding not reconciled; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(binding: Arc<ClusterSetBinding>, fleet: Arc<Fleet>) -> Result<Action, Error> {
    let namespace = binding.metadata.namespace.clone().unwrap_or_default();
    let span = info_span!("binding", namespace = %namespace, binding = %binding.name_any());
    async {
        let sets = fleet.caches.cluster_sets.state();
        let set = &binding.spec.cluster_set;
        let exists = tenancy::set_exists(set, sets.iter().map(|s| &**s));
        let previous = binding
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let status = bound_status(
            set,
            &namespace,
            exists,
            binding.metadata.generation,
            previous,
        );
        if binding.status.as_ref() == Some(&status) {
            return Ok(Action::await_change());
        }
        let api: Api<ClusterSetBinding> = Api::namespaced(fleet.client.clone(), &namespace);
        match api
            .patch_status(
                &binding.name_any(),
                &PatchParams::default(),
                &status_patch(&status),
            )
            .await
        {
            Ok(_) => Ok(Action::await_change()),
            // Deleted meanwhile: nothing to say.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
            Err(e) => Err(e.into()),
        }
    }
    .instrument(span)
    .await
}

/// A binding's status: `Bound` is `True` while its ClusterSet exists. The transition time
/// is kept from `previous` while the status holds.
fn bound_status(
    set: &str,
    namespace: &str,
    exists: bool,
    generation: Option<i64>,
    previous: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> ClusterSetBindingStatus {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let (status, reason, message) = if exists {
        (
            "True",
            "ClusterSetFound",
            format!(
                "the clusters of ClusterSet {set} are within reach of the Placements of \
                 namespace {namespace}"
            ),
        )
    } else {
        (
            "False",
            "ClusterSetNotFound",
            format!("ClusterSet {set} does not exist: this binding binds no cluster"),
        )
    };
    ClusterSetBindingStatus {
        conditions: vec![condition::keep_time(
            condition::BOUND,
            status,
            reason,
            message,
            generation,
            previous,
            &now,
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_is_bound_while_its_set_exists_and_keeps_its_time() {
        let bound = bound_status("eu", "shop", true, Some(1), &[]);
        let condition = &bound.conditions[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            ("Bound", "True")
        );
        assert_eq!(condition.reason, "ClusterSetFound");
        // Recomputed over an unchanged world: equal, so nothing is written.
        let again = bound_status("eu", "shop", true, Some(1), &bound.conditions);
        assert_eq!(again, bound);
        let missing = bound_status("eu", "shop", false, Some(1), &bound.conditions);
        assert_eq!(missing.conditions[0].status, "False");
        assert_eq!(
            missing.conditions[0].message,
            "ClusterSet eu does not exist: this binding binds no cluster"
        );
    }
}
