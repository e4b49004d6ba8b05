//! Delivery: brings a member cluster in line with a [`Work`](flotilla_api::Work) and
//! reads back what became of it. The hub's push controller and the pull agent share it,
//! so it knows nothing of the hub: it gets a [`kube::Client`] for the member and the
//! Work's content.
//!
//! ```text
//!   push controller (hub) / pull agent (member)
//!        │ WorkSpec, generation, Provenance, last status
//!        ▼
//!   Member::sync ── each manifest, in order ─────────────────────────────────┐
//!        │  kind → resource and scope (discovery cache; one refresh on a miss)│
//!        │  GET live ─► someone else's? ── conflict: Abort ─► Applied=False   │
//!        │  drift: Report and manifest hash unchanged? ─► compare, no write   │
//!        │  what the member allocates left out (cluster IPs, node ports, a    │
//!        │  Job's generated selector: `allocated`)                            │
//!        │  otherwise server-side apply (manager `flotilla`, force, +labels)  │
//!        │  Available and status feedback from the live object, per kind      │
//!        ◄────────────────────────────────────────────────────────────────────┘
//!        │ objects of the last status no longer listed: deleted | provenance off
//!        ▼
//!   WorkStatus { observedGeneration, conditions: [Applied, Available], manifests }
//!
//!   Member::changes ─► one label-selected watch per kind (backoff) ─► () per change
//!   Member::probe   ─► /version + Σ Nodes' allocatable + ClusterProperties ─► Health
//!                      (probe_within: the last two reused while younger than an age)
//!   Member::remove  ─► every applied object deleted | provenance off
//!   settles_until   ─► a new generation's status held until its rollout reports back
//!                      (at most SETTLING): one status write per change, push and pull
//! ```
//!
//! With `apply.serviceAccountName`, every request about a placement's objects acts as
//! that service account of the member ([`impersonate`]): the member's RBAC decides what
//! the placement may create, and what it refuses is that manifest's `Forbidden` status.
//!
//! Every object delivered carries its [`provenance`]: labels
//! `app.kubernetes.io/managed-by: flotilla` and `flotilla.io/hub`, annotations
//! `flotilla.io/placement`, `flotilla.io/work` and `flotilla.io/manifest-hash`. An object
//! without this placement's provenance is someone else's: delivery neither overwrites
//! (unless `conflict: Overwrite`) nor deletes it.
//!
//! ```no_run
//! # async fn run(client: kube::Client, work: flotilla_api::WorkSpec) -> Result<(), flotilla_delivery::Error> {
//! use flotilla_delivery::{Member, Provenance};
//!
//! let member = Member::new(client);
//! let provenance = Provenance {
//!     hub: "hub".into(),
//!     placement: "shop/web".into(),
//!     work: "web".into(),
//! };
//! let status = member.sync(&work, Some(1), &provenance, &[]).await;
//! // Next time, pass the last status: unchanged objects keep their condition times,
//! // and objects no longer listed are removed.
//! let again = member.sync(&work, Some(1), &provenance, &status.manifests).await;
//! let health = member.probe().await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use flotilla_api::condition::APPLIED;
use flotilla_api::{DeletionPolicy, ManifestStatus, WorkSpec, WorkStatus};
use futures_util::Stream;
use serde_json::Value;
use tracing::{Instrument, info, info_span, warn};

mod allocated;
mod availability;
mod changes;
mod conditions;
mod drift;
mod health;
pub mod impersonate;
mod kinds;
mod live;
pub mod provenance;
mod settle;
mod sync;

pub use changes::Change;
pub use health::Health;
pub use impersonate::ServiceAccount;
pub use provenance::Provenance;
pub use settle::{SETTLING, settles_until};

use crate::conditions::{describe, summary};
use crate::sync::{Context, NAMESPACE_MISSING, same_object};

/// Errors of delivery. A manifest that cannot be applied is not one: it is that
/// manifest's status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The member refused a request or did not answer it.
    #[error("cannot {what} on the member: {source}")]
    Request {
        /// What was asked (`GET /version`, `release ConfigMap shop/web`).
        what: String,
        /// The client's error.
        #[source]
        source: Box<kube::Error>,
    },
    /// `apply.serviceAccountName` names no service account for this placement.
    #[error("{0}")]
    ServiceAccount(String),
}

impl Error {
    pub(crate) fn request(what: impl Into<String>, source: kube::Error) -> Self {
        Error::Request {
            what: what.into(),
            source: Box::new(source),
        }
    }
}

/// A member cluster as delivery sees it: a client, and what kinds it serves (learnt
/// from discovery, and looked up again when a kind is missing, such as after a CRD is
/// applied). Clones share the cache.
#[derive(Clone)]
pub struct Member {
    client: kube::Client,
    kinds: kinds::Kinds,
    live: live::Live,
    shared: sync::SharedSeen,
    facts: health::Facts,
    impersonating: impersonate::Impersonating,
    /// What syncs put back on the member (drift corrected) by Work, until taken.
    corrections: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").finish_non_exhaustive()
    }
}

impl Member {
    /// A member reached through `client`.
    pub fn new(client: kube::Client) -> Self {
        Member {
            client,
            kinds: kinds::Kinds::default(),
            live: live::Live::default(),
            shared: sync::SharedSeen::default(),
            facts: health::Facts::default(),
            impersonating: impersonate::Impersonating::default(),
            corrections: Default::default(),
        }
    }

    /// What the syncs of Work `work` (its provenance's name) put back on the member since
    /// last asked: one entry per object whose drift was corrected, `Kind namespace/name:
    /// fields`. Taken, so that each correction is told once.
    pub fn take_corrections(&self, work: &str) -> Vec<String> {
        self.corrections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(work)
            .unwrap_or_default()
    }

    /// The member's health facts: its Kubernetes version, the exact sum of its Nodes'
    /// allocatable resources, and its ClusterProperties (none when that API is not
    /// served). Fails when the member does not answer.
    pub async fn probe(&self) -> Result<Health, Error> {
        self.probe_health(Duration::ZERO).await
    }

    /// [`Member::probe`], with the Nodes and ClusterProperties listed only when the last
    /// listing is `facts_max_age` old or more: one request (`GET /version`) otherwise.
    /// Capacity and properties change seldom; reachability is what a frequent probe
    /// checks.
    pub async fn probe_within(&self, facts_max_age: Duration) -> Result<Health, Error> {
        self.probe_health(facts_max_age).await
    }

    /// Brings the member in line with `work` and returns the Work's status.
    ///
    /// Each manifest is applied in order (so Namespaces and CRDs go first), its failure
    /// being its own status: per manifest `Applied` (reasons `Conflict`, `KindNotServed`,
    /// `NamespaceMissing`, `ApplyFailed`, `Forbidden`, `InvalidManifest`; `Drifted` when drift is
    /// reported), `Available` as its kind defines it, status feedback and drift. Over all
    /// of them, `Applied` and `Available` with counts; `observedGeneration` is
    /// `generation`. Objects of `previous` (the last status) no longer in the manifests
    /// are deleted, or keep living without provenance under `deletion: Orphan`.
    ///
    /// Transition times are kept from `previous` while a condition's status holds, so a
    /// sync that finds nothing new returns a status equal to `previous`'s Work status.
    ///
    /// With `apply.serviceAccountName`, the objects are read, applied and deleted as that
    /// service account of the member; one the member refuses is `Forbidden`, with its
    /// message, and the others are still applied. A name that cannot be resolved (a bare
    /// name for a ClusterPlacement) fails every manifest with `InvalidServiceAccount`.
    pub async fn sync(
        &self,
        work: &WorkSpec,
        generation: Option<i64>,
        provenance: &Provenance,
        previous: &[ManifestStatus],
    ) -> WorkStatus {
        let policy = work.apply.clone().unwrap_or_default();
        let span = info_span!("sync", cluster = %work.cluster, work = %provenance.work);
        async {
            let now = conditions::now();
            let client = self.acting(policy.service_account_name.as_deref(), provenance);
            let cx = Context {
                policy: &policy,
                provenance,
                generation,
                previous,
                now: &now,
                client: client.as_ref().map_err(String::as_str),
            };
            let mut manifests = Vec::with_capacity(work.manifests.len());
            for manifest in &work.manifests {
                manifests.push(self.sync_manifest(&manifest.value(), &cx).await);
            }
            self.recreate_namespaces(work, &cx, &mut manifests).await;
            // Dependents before what they live in: the reverse of the applying order.
            for gone in previous.iter().rev() {
                if manifests.iter().any(|m| same_object(m, gone)) {
                    continue;
                }
                let Ok(client) = &client else { continue };
                if let Err(e) = self.release(client, gone, policy.deletion, provenance).await {
                    warn!(object = %describe(gone), error = %e, "cannot release an object the Work no longer lists");
                }
            }
            WorkStatus {
                observed_generation: generation,
                conditions: summary(&manifests, generation),
                manifests,
            }
        }
        .instrument(span)
        .await
    }

    /// A namespace the Work holds may be missing though it was taken to exist: a shared one
    /// is not asked for again for a while (see `SHARED_FRESH`), and someone may have
    /// deleted it on the member since. The applies into it failed and forgot it, so its
    /// manifest is synced again now (it is asked for, and created), then each of them,
    /// once: the Work does not wait for its next sync to heal.
    async fn recreate_namespaces(
        &self,
        work: &WorkSpec,
        cx: &Context<'_>,
        manifests: &mut [ManifestStatus],
    ) {
        let namespace_of = |manifest: &Value| {
            (manifest["apiVersion"] == "v1" && manifest["kind"] == "Namespace")
                .then(|| manifest["metadata"]["name"].as_str().map(str::to_owned))
                .flatten()
        };
        let mut recreated = Vec::new();
        for i in 0..manifests.len() {
            let missing = manifests[i]
                .conditions
                .iter()
                .any(|c| c.type_ == APPLIED && c.reason == NAMESPACE_MISSING);
            let Some(namespace) = manifests[i].namespace.clone().filter(|_| missing) else {
                continue;
            };
            let Some(holder) = work
                .manifests
                .iter()
                .position(|m| namespace_of(&m.value()).as_deref() == Some(namespace.as_str()))
            else {
                continue;
            };
            if !recreated.contains(&holder) {
                recreated.push(holder);
                info!(%namespace, "a namespace taken to exist is missing: created again");
                manifests[holder] = self
                    .sync_manifest(&work.manifests[holder].value(), cx)
                    .await;
            }
            manifests[i] = self.sync_manifest(&work.manifests[i].value(), cx).await;
        }
    }

    /// Removes what a Work put on the member (the Work is being deleted): every object
    /// of `applied` deleted (`Delete`) or left without provenance (`Orphan`), in reverse
    /// order. Objects already gone, or not this placement's, are fine. Every object is
    /// tried; the first failure is returned.
    pub async fn remove(
        &self,
        applied: &[ManifestStatus],
        policy: DeletionPolicy,
        provenance: &Provenance,
    ) -> Result<(), Error> {
        self.remove_as(applied, policy, provenance, None).await
    }

    /// [`Member::remove`], acting as the member's service account `service_account` (the
    /// Work's `apply.serviceAccountName`) when one is given, as its syncs did.
    pub async fn remove_as(
        &self,
        applied: &[ManifestStatus],
        policy: DeletionPolicy,
        provenance: &Provenance,
        service_account: Option<&str>,
    ) -> Result<(), Error> {
        let span = info_span!("remove", work = %provenance.work, ?policy);
        async {
            let client = self
                .acting(service_account, provenance)
                .map_err(Error::ServiceAccount)?;
            let mut first = None;
            for object in applied.iter().rev() {
                if let Err(e) = self.release(&client, object, policy, provenance).await {
                    warn!(object = %describe(object), error = %e, "cannot release");
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        }
        .instrument(span)
        .await
    }

    /// The client requests about a placement's objects go through: the member's own, or
    /// one acting as the service account `service_account` names. Why not, when it names
    /// none.
    fn acting(
        &self,
        service_account: Option<&str>,
        provenance: &Provenance,
    ) -> Result<kube::Client, String> {
        match service_account {
            None => Ok(self.client.clone()),
            Some(spec) => {
                let account = ServiceAccount::resolve(spec, provenance)?;
                Ok(self.impersonating.client(&self.client, &account))
            }
        }
    }

    /// A stream that yields whenever an object carrying this provenance's labels (those
    /// of its hub, whatever the placement) changes on the member, for the given
    /// `(apiVersion, kind)`s, naming the Work that delivered it, so the caller syncs that
    /// Work again to correct or report drift and to read status. It also yields
    /// [`Change::Listed`] once each watch has listed (at start, and after a restart that
    /// may hide changes). One watch per kind, label-selected, restarting with backoff
    /// after errors; a kind not served yet is looked for again with backoff. With no
    /// kinds, the stream ends at once.
    ///
    /// While the stream lives, [`Member::sync`] reads the objects of these kinds from what
    /// the watches last saw instead of asking the member, so a sync that finds
    /// everything as wanted sends no request.
    pub fn changes(
        &self,
        kinds: &[(String, String)],
        provenance: &Provenance,
    ) -> impl Stream<Item = Change> + Send + use<> {
        self.watch_changes(kinds, provenance)
    }
}
