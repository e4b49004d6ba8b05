//! RBAC: Kubernetes' role-based authorizer, fed from the store.
//!
//! ```text
//!  store ── list /rbac.authorization.k8s.io/ at R, then watch from R ──► Index (RwLock)
//!            (a watch that fails lists again; requests never see half an index)
//!                                                        │ applied revision ──► writes of
//!                                                        │   RBAC objects are answered
//!                                                        │   once applied (Rbac::settled)
//!  request ─► Union: PrivilegedGroup(system:masters) ─► Rbac::authorize ─► Index::allows
//!  reviews, escalation check ─► Rbac::rules ─► Index::rules
//!  ClusterRoles changed in cluster C ─► aggregation controller ─► rules of C's aggregated
//!                                         ClusterRoles, written through the API
//!  each logical cluster's view at start ─► bootstrap: the default roles and bindings
//! ```
//!
//! Decisions are made under the index's read lock from what it holds; a change is applied
//! under its write lock as soon as the watch delivers it, so a revoked binding stops
//! allowing from that moment. The index is per logical cluster, named by the store key, so
//! each logical cluster's own roles and bindings govern requests there.

pub(crate) mod aggregation;
pub mod bootstrap;
pub(crate) mod decisions;
pub(crate) mod index;
pub mod rule;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use flotilla_store::{EventKind, Revision, Store, WatchEvent};
use futures_util::StreamExt;
use serde_json::Value;
use tracing::Instrument;

use super::{Attributes, Authorizer, Decision, Rules, UserInfo};
use crate::api::Verdict;
use crate::registry::keys;
use decisions::Decisions;
use index::Index;
pub use index::Kind;
pub use rule::Rule;

/// The API group of roles and bindings.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// The annotation that lets reconciliation at start change a default role or binding
/// (`"false"`: it is left as it is).
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// How long a write of a role or binding waits for the index to apply it before it is
/// answered anyway (with a warning in the log).
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// Why RBAC could not start.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// The roles and bindings could not be read.
    #[error("cannot read the RBAC roles and bindings: {0}")]
    Store(#[from] flotilla_store::Error),
}

/// The RBAC authorizer: an index of every logical cluster's roles and bindings, kept by a
/// watch of the store, and the default roles each cluster gets.
pub struct Rbac {
    index: RwLock<Index>,
    /// The decisions made from the index as it is; emptied whenever it changes.
    decisions: Decisions,
    /// The store revision whose changes the index has applied.
    applied: tokio::sync::watch::Sender<Revision>,
    /// The logical clusters whose ClusterRoles changed since the aggregation controller
    /// last looked.
    changed: Mutex<HashSet<Arc<str>>>,
    wake: tokio::sync::Notify,
    /// The roles and bindings each logical cluster starts with.
    bootstrap: Vec<Value>,
    /// Whether the aggregation controller runs.
    aggregating: AtomicBool,
}

impl Rbac {
    /// Reads every role and binding of every logical cluster at one revision, then follows
    /// their changes from there in a task of its own. Each logical cluster gets
    /// Kubernetes' default roles ([`bootstrap::kubernetes`]) and `extra` (the hub's own:
    /// ClusterRoles, ClusterRoleBindings, Roles or RoleBindings as JSON objects), created
    /// or reconciled when its view starts ([`crate::Api::bootstrap_rbac`]).
    pub async fn start(store: Arc<dyn Store>, extra: Vec<Value>) -> Result<Arc<Rbac>, RbacError> {
        let mut index = Index::default();
        let revision = load(&*store, &mut index).await?;
        let clusters = index.clusters();
        let mut bootstrap = bootstrap::kubernetes();
        bootstrap.extend(extra);
        let rbac = Arc::new(Rbac {
            index: RwLock::new(index),
            decisions: Decisions::default(),
            applied: tokio::sync::watch::Sender::new(revision),
            changed: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            bootstrap,
            aggregating: AtomicBool::new(false),
        });
        rbac.roles_changed(clusters);
        tracing::info!(%revision, "RBAC roles and bindings loaded");
        let span = tracing::info_span!("rbac_watch");
        tokio::spawn(follow(Arc::downgrade(&rbac), store, revision).instrument(span));
        Ok(rbac)
    }

    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The roles and bindings each logical cluster starts with.
    pub fn bootstrap(&self) -> &[Value] {
        &self.bootstrap
    }

    /// Waits until the index has applied every change up to `revision` (a write of a role
    /// or binding is answered once it governs requests), at most [`SETTLE_LIMIT`].
    pub async fn settled(&self, revision: Revision) {
        let mut applied = self.applied.subscribe();
        let reached = applied.wait_for(|applied| *applied >= revision);
        if tokio::time::timeout(SETTLE_LIMIT, reached).await.is_err() {
            tracing::warn!(%revision, "the RBAC index has not applied a write of a role or binding yet");
        }
    }

    /// Marks `clusters` for the aggregation controller.
    fn roles_changed(&self, clusters: impl IntoIterator<Item = Arc<str>>) {
        let mut changed = self.changed.lock().unwrap_or_else(PoisonError::into_inner);
        let before = changed.len();
        changed.extend(clusters);
        if changed.len() > before {
            self.wake.notify_one();
        }
    }

    /// Takes the clusters whose ClusterRoles changed, waiting for one if there are none.
    async fn next_changed(&self) -> Vec<Arc<str>> {
        loop {
            let taken: Vec<Arc<str>> = self
                .changed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain()
                .collect();
            if !taken.is_empty() {
                return taken;
            }
            self.wake.notified().await;
        }
    }

    /// Applies one change of the store to the index.
    fn apply(&self, event: &WatchEvent) {
        let Some((kind, place)) = locate(&event.kv.key) else {
            return;
        };
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        match event.kind {
            EventKind::Put => put(&mut index, kind, place, &event.kv.key, &event.kv.value),
            EventKind::Delete => index.remove(kind, place.cluster, place.namespace, place.name),
        }
        self.decisions.forget();
        drop(index);
        if kind == Kind::ClusterRole {
            self.roles_changed([Arc::from(place.cluster)]);
        }
    }

    /// Replaces the index with `index`, read at `revision`.
    fn replace(&self, index: Index, revision: Revision) {
        let mut clusters = index.clusters();
        {
            let mut current = self.index.write().unwrap_or_else(PoisonError::into_inner);
            clusters.extend(current.clusters());
            *current = index;
            self.decisions.forget();
        }
        self.roles_changed(clusters);
        self.applied.send_replace(revision);
    }
}

impl Authorizer for Rbac {
    fn authorize<'a>(&'a self, attributes: &'a Attributes<'a>) -> Verdict<'a, Decision> {
        let recalled = self.decisions.recall(attributes);
        let allowed = match recalled.allowed {
            Some(allowed) => allowed,
            None => {
                let allowed = self.read().allows(attributes);
                self.decisions.remember(recalled, allowed);
                allowed
            }
        };
        Verdict::Now(match allowed {
            true => Decision::Allow,
            false => Decision::NoOpinion,
        })
    }

    fn rules<'a>(
        &'a self,
        user: &'a UserInfo,
        cluster: &'a str,
        namespace: &'a str,
    ) -> Verdict<'a, Rules> {
        Verdict::Now(self.read().rules(user, cluster, namespace))
    }
}

/// The kind and place of the object at `key`, if it is a role or binding.
fn locate(key: &[u8]) -> Option<(Kind, keys::Place<'_>)> {
    let resource = keys::resource_of(key)?;
    let kind = Kind::ALL
        .into_iter()
        .find(|k| keys::resource_prefix_of(GROUP, k.plural()) == resource)?;
    Some((kind, keys::place(key, resource)?))
}

/// Records the object stored at `key` as `value`; one that cannot be read is left out
/// (it grants nothing), with a warning.
fn put(index: &mut Index, kind: Kind, place: keys::Place<'_>, key: &[u8], value: &[u8]) {
    match serde_json::from_slice::<Value>(value) {
        Ok(object) => index.put(kind, place.cluster, place.namespace, place.name, &object),
        Err(e) => {
            tracing::warn!(key = %String::from_utf8_lossy(key), error = %e,
                "a stored role or binding cannot be read; it grants nothing");
            index.remove(kind, place.cluster, place.namespace, place.name);
        }
    }
}

/// Reads every role and binding into `index` at one revision; that revision.
async fn load(store: &dyn Store, index: &mut Index) -> Result<Revision, flotilla_store::Error> {
    let prefix = keys::group_prefix(GROUP);
    let (listed, revision) = store.list_all(&prefix).await?;
    for kv in &listed {
        if let Some((kind, place)) = locate(&kv.key) {
            put(index, kind, place, &kv.key, &kv.value);
        }
    }
    Ok(revision)
}

/// Follows the changes of roles and bindings after `revision` for as long as the
/// authorizer lives; when the watch fails (its history compacted, the store unavailable),
/// reads everything again and follows from there.
async fn follow(rbac: Weak<Rbac>, store: Arc<dyn Store>, mut revision: Revision) {
    let prefix = keys::group_prefix(GROUP);
    loop {
        match store.watch(&prefix, revision).await {
            Ok(mut stream) => {
                while let Some(event) = stream.next().await {
                    let Some(rbac) = rbac.upgrade() else {
                        return;
                    };
                    match event {
                        Ok(event) => {
                            rbac.apply(&event);
                            revision = event.revision();
                            rbac.applied.send_replace(revision);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the watch of roles and bindings failed; reading them again");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch roles and bindings; reading them again")
            }
        }
        // Read everything again, retrying while the store fails.
        loop {
            let Some(rbac) = rbac.upgrade() else {
                return;
            };
            let mut index = Index::default();
            match load(&*store, &mut index).await {
                Ok(read_at) => {
                    rbac.replace(index, read_at);
                    revision = read_at;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read roles and bindings; trying again in 1 s");
                    drop(rbac);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

impl Rbac {
    /// Starts the aggregation controller over `api` (the root cluster's), once.
    pub(crate) fn aggregate_through(self: &Arc<Self>, api: &crate::Api) {
        if self.aggregating.swap(true, Ordering::AcqRel) {
            return;
        }
        let span = tracing::info_span!("clusterrole_aggregation");
        tokio::spawn(aggregation::run(Arc::downgrade(self), api.clone()).instrument(span));
    }

    /// The aggregated ClusterRoles of `cluster` whose rules are not yet what they gather.
    pub(crate) fn aggregations(&self, cluster: &str) -> Vec<(Arc<str>, Vec<Rule>)> {
        self.read().aggregations(cluster)
    }
}

#[cfg(test)]
mod tests;
