//! Dynamic admission: the ValidatingAdmissionPolicies, their bindings and the webhook
//! configurations of every logical cluster, held in memory, fed by one store watch.
//!
//! ```text
//!  store ── list /admissionregistration.k8s.io/ at R, then watch from R ──► per logical
//!     cluster: policies, bindings, validating and mutating configurations, each compiled
//!     once per change (CEL programs, selectors, HTTPS clients)
//!        └─► Snapshot (Arc, rebuilt on each change): policies with their bindings by
//!            name; webhooks by configuration name, then by position
//!  a write ─► Dynamic::snapshot(cluster) (one Arc clone) ─► policy::Policies,
//!             webhook::{MutatingWebhooks, ValidatingWebhooks}
//!  applied revision ─► writes of these objects are answered once they govern requests
//!  a policy whose generation is not yet observed ─► type checking ─► its status
//! ```
//!
//! A watch that fails lists everything again; requests never see half a cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use flotilla_store::{EventKind, Revision, Store, WatchEvent};
use futures_util::StreamExt;
use serde_json::Value;
use tracing::Instrument;

use super::policy::model::{Binding, Policy};
use super::webhook::model::{self as hooks, ServiceAddresses, Webhook};
use crate::api::Api;
use crate::registry::keys;

/// The API group of admission configurations.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// How long a write of a configuration waits for dynamic admission to apply it before it
/// is answered anyway (with a warning in the log).
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// The four kinds of configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `ValidatingAdmissionPolicy`.
    Policy,
    /// `ValidatingAdmissionPolicyBinding`.
    Binding,
    /// `ValidatingWebhookConfiguration`.
    Validating,
    /// `MutatingWebhookConfiguration`.
    Mutating,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [
        Kind::Policy,
        Kind::Binding,
        Kind::Validating,
        Kind::Mutating,
    ];

    /// The resource (plural) of the kind.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Policy => "validatingadmissionpolicies",
            Kind::Binding => "validatingadmissionpolicybindings",
            Kind::Validating => "validatingwebhookconfigurations",
            Kind::Mutating => "mutatingwebhookconfigurations",
        }
    }

    /// The kind whose resource is `plural`.
    pub fn of_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }
}

/// Fills what the API defaults on a configuration of `kind` and says why it cannot be
/// stored (422 causes; none: it can). `old`: the stored one, on an update.
pub(crate) fn default_and_validate(
    kind: Kind,
    object: &mut Value,
    old: Option<&Value>,
) -> Vec<crate::http::error::Cause> {
    use super::policy::model;
    match kind {
        Kind::Policy => {
            model::default_policy(object);
            model::validate_policy(object)
        }
        Kind::Binding => {
            model::default_binding(object);
            model::validate_binding(object)
        }
        Kind::Validating => {
            hooks::default(object, false);
            hooks::validate(object, old, false)
        }
        Kind::Mutating => {
            hooks::default(object, true);
            hooks::validate(object, old, true)
        }
    }
}

/// Why dynamic admission could not start.
#[derive(Debug, thiserror::Error)]
pub enum DynamicError {
    /// The configurations could not be read.
    #[error("cannot read the admission configurations: {0}")]
    Store(#[from] flotilla_store::Error),
}

/// A policy and the bindings that name it, by name.
pub(crate) struct Hook {
    pub(crate) policy: Arc<Policy>,
    pub(crate) bindings: Vec<Arc<Binding>>,
}

/// What governs the writes of one logical cluster, as of one change.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Policies that have at least one binding, by name.
    pub(crate) policies: Vec<Hook>,
    /// Validating webhooks, by configuration name, then position.
    pub(crate) validating: Vec<Arc<Webhook>>,
    /// Mutating webhooks, likewise.
    pub(crate) mutating: Vec<Arc<Webhook>>,
}

/// The configurations of one logical cluster.
#[derive(Default)]
struct Cluster {
    policies: BTreeMap<String, Arc<Policy>>,
    bindings: BTreeMap<String, Arc<Binding>>,
    validating: BTreeMap<String, Vec<Arc<Webhook>>>,
    mutating: BTreeMap<String, Vec<Arc<Webhook>>>,
    snapshot: Arc<Snapshot>,
}

impl Cluster {
    fn rebuild(&mut self) {
        let mut by_policy: HashMap<&str, Vec<Arc<Binding>>> = HashMap::new();
        for binding in self.bindings.values() {
            by_policy
                .entry(binding.policy.as_str())
                .or_default()
                .push(binding.clone());
        }
        let policies = self
            .policies
            .values()
            .filter_map(|policy| {
                let bindings = by_policy.remove(policy.name.as_str())?;
                Some(Hook {
                    policy: policy.clone(),
                    bindings,
                })
            })
            .collect();
        self.snapshot = Arc::new(Snapshot {
            policies,
            validating: self.validating.values().flatten().cloned().collect(),
            mutating: self.mutating.values().flatten().cloned().collect(),
        });
    }

    fn is_empty(&self) -> bool {
        self.policies.is_empty()
            && self.bindings.is_empty()
            && self.validating.is_empty()
            && self.mutating.is_empty()
    }
}

/// Every logical cluster's configurations.
#[derive(Default)]
struct Index(HashMap<Arc<str>, Cluster>);

impl Index {
    /// Applies the object stored at `key` (`None`: deleted); the policy to type-check, if
    /// its generation is not yet observed.
    fn apply(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        services: &ServiceAddresses,
    ) -> Option<(Arc<str>, String)> {
        let resource = keys::resource_of(key)?;
        let kind = Kind::ALL
            .into_iter()
            .find(|k| keys::resource_prefix_of(GROUP, k.plural()) == resource)?;
        let place = keys::place(key, resource)?;
        let object = value.and_then(|v| match serde_json::from_slice::<Value>(v) {
            Ok(object) => Some(object),
            Err(e) => {
                tracing::warn!(key = %String::from_utf8_lossy(key), error = %e,
                    "a stored admission configuration cannot be read; it is left out");
                None
            }
        });
        let name = place.name.to_owned();
        let cluster_name: Arc<str> = match self.0.get_key_value(place.cluster) {
            Some((k, _)) => k.clone(),
            None => Arc::from(place.cluster),
        };
        let cluster = self.0.entry(cluster_name.clone()).or_default();
        let mut check = None;
        match (kind, object) {
            (Kind::Policy, Some(object)) => {
                let policy = match cluster.policies.get(&name) {
                    Some(current) if current.spec == object["spec"] => {
                        let observed = object["status"]["observedGeneration"].as_i64();
                        let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
                        if current.observed == observed && current.generation == generation {
                            current.clone()
                        } else {
                            Arc::new(Policy::compile(&object))
                        }
                    }
                    _ => Arc::new(Policy::compile(&object)),
                };
                if policy.observed != Some(policy.generation) {
                    check = Some((cluster_name.clone(), name.clone()));
                }
                cluster.policies.insert(name, policy);
            }
            (Kind::Binding, Some(object)) => {
                cluster
                    .bindings
                    .insert(name, Arc::new(Binding::compile(&object)));
            }
            (Kind::Validating, Some(object)) => {
                cluster
                    .validating
                    .insert(name, hooks::compile(&object, services));
            }
            (Kind::Mutating, Some(object)) => {
                cluster
                    .mutating
                    .insert(name, hooks::compile(&object, services));
            }
            (Kind::Policy, None) => drop(cluster.policies.remove(&name)),
            (Kind::Binding, None) => drop(cluster.bindings.remove(&name)),
            (Kind::Validating, None) => drop(cluster.validating.remove(&name)),
            (Kind::Mutating, None) => drop(cluster.mutating.remove(&name)),
        }
        if cluster.is_empty() {
            self.0.remove(&cluster_name);
        } else {
            cluster.rebuild();
        }
        check
    }
}

/// Dynamic admission's configurations, kept by a watch of the store.
pub struct Dynamic {
    index: RwLock<Index>,
    /// The store revision whose changes the index has applied.
    applied: tokio::sync::watch::Sender<Revision>,
    /// Where webhooks given as `service` references are reached.
    services: ServiceAddresses,
    /// Policies whose type checking is due, and the controller that writes it.
    unchecked: Mutex<HashSet<(Arc<str>, String)>>,
    wake: tokio::sync::Notify,
    checking: AtomicBool,
}

impl Dynamic {
    /// Reads every configuration of every logical cluster at one revision, then follows
    /// their changes from there in a task of its own. `services`: the addresses of the
    /// services webhooks name.
    pub async fn start(
        store: Arc<dyn Store>,
        services: ServiceAddresses,
    ) -> Result<Arc<Dynamic>, DynamicError> {
        let mut index = Index::default();
        let (revision, unchecked) = load(&*store, &mut index, &services).await?;
        let dynamic = Arc::new(Dynamic {
            index: RwLock::new(index),
            applied: tokio::sync::watch::Sender::new(revision),
            services,
            unchecked: Mutex::new(unchecked),
            wake: tokio::sync::Notify::new(),
            checking: AtomicBool::new(false),
        });
        tracing::info!(%revision, "admission configurations loaded");
        let span = tracing::info_span!("admission_watch");
        tokio::spawn(follow(Arc::downgrade(&dynamic), store, revision).instrument(span));
        Ok(dynamic)
    }

    /// What governs writes to logical cluster `cluster` now (`None`: nothing).
    pub(crate) fn snapshot(&self, cluster: &str) -> Option<Arc<Snapshot>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        index.0.get(cluster).map(|c| c.snapshot.clone())
    }

    /// Waits until every configuration written up to `revision` governs requests, at
    /// most [`SETTLE_LIMIT`].
    pub(crate) async fn settled(&self, revision: Revision) {
        let mut applied = self.applied.subscribe();
        let reached = applied.wait_for(|applied| *applied >= revision);
        if tokio::time::timeout(SETTLE_LIMIT, reached).await.is_err() {
            tracing::warn!(%revision, "dynamic admission has not applied a configuration write yet");
        }
    }

    fn apply(&self, event: &WatchEvent) {
        let value = match event.kind {
            EventKind::Put => Some(&event.kv.value[..]),
            EventKind::Delete => None,
        };
        let check = {
            let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
            index.apply(&event.kv.key, value, &self.services)
        };
        if let Some(check) = check {
            self.due(std::iter::once(check));
        }
    }

    fn replace(&self, index: Index, revision: Revision, unchecked: HashSet<(Arc<str>, String)>) {
        *self.index.write().unwrap_or_else(PoisonError::into_inner) = index;
        self.applied.send_replace(revision);
        self.due(unchecked);
    }

    /// Marks policies for type checking.
    fn due(&self, policies: impl IntoIterator<Item = (Arc<str>, String)>) {
        let mut unchecked = self
            .unchecked
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = unchecked.len();
        unchecked.extend(policies);
        if unchecked.len() > before {
            self.wake.notify_one();
        }
    }

    /// Takes the policies due for type checking, waiting for one if there are none.
    async fn next_unchecked(&self) -> Vec<(Arc<str>, String)> {
        loop {
            let taken: Vec<_> = self
                .unchecked
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

    /// The stored policy `name` of `cluster`, compiled, if the index holds it.
    pub(crate) fn policy(&self, cluster: &str, name: &str) -> Option<Arc<Policy>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        index.0.get(cluster)?.policies.get(name).cloned()
    }

    /// Starts the controller that writes each policy's type checking into its status,
    /// through `api` (the root cluster's), once.
    pub fn check_types_through(self: &Arc<Self>, api: &Api) {
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let span = tracing::info_span!("admission_policy_status");
        tokio::spawn(
            super::policy::typecheck::run(Arc::downgrade(self), api.clone()).instrument(span),
        );
    }

    /// Marks a policy whose status could not be written for another try.
    pub(crate) fn retry_check(&self, policy: (Arc<str>, String)) {
        self.due(std::iter::once(policy));
    }

    /// Waits for the policies due for type checking ([`Weak`] so that the controller does
    /// not keep dynamic admission alive).
    pub(crate) async fn due_for_checking(this: &Weak<Self>) -> Option<Vec<(Arc<str>, String)>> {
        let dynamic = this.upgrade()?;
        Some(dynamic.next_unchecked().await)
    }
}

/// Reads every configuration into `index` at one revision; that revision, and the
/// policies due for type checking.
async fn load(
    store: &dyn Store,
    index: &mut Index,
    services: &ServiceAddresses,
) -> Result<(Revision, HashSet<(Arc<str>, String)>), flotilla_store::Error> {
    let prefix = keys::group_prefix(GROUP);
    let (listed, revision) = store.list_all(&prefix).await?;
    let mut unchecked = HashSet::new();
    for kv in &listed {
        unchecked.extend(index.apply(&kv.key, Some(&kv.value), services));
    }
    Ok((revision, unchecked))
}

/// Follows the changes of configurations after `revision` for as long as dynamic
/// admission lives; when the watch fails, reads everything again and follows from there.
async fn follow(dynamic: Weak<Dynamic>, store: Arc<dyn Store>, mut revision: Revision) {
    let prefix = keys::group_prefix(GROUP);
    loop {
        match store.watch(&prefix, revision).await {
            Ok(mut stream) => {
                while let Some(event) = stream.next().await {
                    let Some(dynamic) = dynamic.upgrade() else {
                        return;
                    };
                    match event {
                        Ok(event) => {
                            dynamic.apply(&event);
                            revision = event.revision();
                            dynamic.applied.send_replace(revision);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the watch of admission configurations failed; reading them again");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch admission configurations; reading them again")
            }
        }
        loop {
            let Some(dynamic) = dynamic.upgrade() else {
                return;
            };
            let mut index = Index::default();
            match load(&*store, &mut index, &dynamic.services).await {
                Ok((read_at, unchecked)) => {
                    dynamic.replace(index, read_at, unchecked);
                    revision = read_at;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read admission configurations; trying again in 1 s");
                    drop(dynamic);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}
