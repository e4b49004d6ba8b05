//! One manifest brought in line on the member (conflict check, drift, server-side
//! apply, availability), and objects released when they leave a Work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::condition::{APPLIED, AVAILABLE};
use flotilla_api::{
    ApplyPolicy, ConflictPolicy, DeletionPolicy, Drift, DriftBound, DriftPolicy, Json,
    ManifestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::Value;
use tracing::{Instrument, debug, info, info_span};

use crate::availability::{availability, feedback};
use crate::conditions::{State, condition, describe};
use crate::drift::drift;
use crate::provenance::{
    ANNOTATION_ADOPTED, ANNOTATION_MANIFEST_HASH, FIELD_MANAGER, is_shared, manifest_hash,
};
use crate::{Error, Member, Provenance};

/// Metadata the member sets and a manifest must not carry over from the hub.
const SERVER_METADATA: [&str; 9] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
];

/// What became of one manifest.
/// How long a shared object (a namespace several placements need) seen on the member is
/// taken to exist without asking again. An apply into a namespace found missing forgets it
/// at once, and the sync creates it again (`Member::recreate_namespaces`).
const SHARED_FRESH: Duration = Duration::from_secs(600);

/// The reason of a manifest the member's RBAC refused (as the placement's service
/// account).
pub(crate) const FORBIDDEN: &str = "Forbidden";

/// The reason of every manifest of a Work whose service account cannot be resolved.
pub(crate) const INVALID_SERVICE_ACCOUNT: &str = "InvalidServiceAccount";

/// The reason of a manifest not applied because its namespace is missing on the member.
pub(crate) const NAMESPACE_MISSING: &str = "NamespaceMissing";

/// `(apiVersion, kind, namespace, name)` of an object on the member.
type ObjectKey = (String, String, Option<String>, String);

/// Shared objects recently seen on the member, and when: they carry no provenance, so the
/// change watches do not see them, and every sync of every Work that needs one would ask
/// the member for it again.
#[derive(Clone, Default)]
pub(crate) struct SharedSeen {
    seen: Arc<Mutex<HashMap<ObjectKey, (Instant, Value)>>>,
}

impl SharedSeen {
    fn get(&self, key: &ObjectKey) -> Option<Value> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(key)
            .filter(|(at, _)| at.elapsed() < SHARED_FRESH)
            .map(|(_, object)| object.clone())
    }

    fn put(&self, key: ObjectKey, object: &Value) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|_, (at, _)| at.elapsed() < SHARED_FRESH);
        seen.insert(key, (Instant::now(), object.clone()));
    }

    fn forget_namespace(&self, namespace: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|(api_version, kind, _, name), _| {
            !(api_version == "v1" && kind == "Namespace" && name == namespace)
        });
    }
}

enum Outcome {
    /// The object as the member has it: applied now, or left alone with its drift
    /// reported (`drift: Report`).
    Live { object: Value, drift: Vec<Drift> },
    /// Not applied, and why.
    Failed {
        reason: &'static str,
        message: String,
    },
}

impl Outcome {
    fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            reason,
            message: message.into(),
        }
    }
}

/// Everything one manifest's sync needs besides the manifest.
pub(crate) struct Context<'a> {
    pub policy: &'a ApplyPolicy,
    pub provenance: &'a Provenance,
    pub generation: Option<i64>,
    pub previous: &'a [ManifestStatus],
    pub now: &'a Time,
    /// The client requests about the objects go through (acting as the placement's
    /// service account, if it names one), or why there is none.
    pub client: Result<&'a kube::Client, &'a str>,
}

impl Member {
    /// Syncs one manifest and reports its status; never fails (a failure is a status).
    pub(crate) async fn sync_manifest(&self, manifest: &Value, cx: &Context<'_>) -> ManifestStatus {
        let text = |field: &Value| field.as_str().unwrap_or_default().to_owned();
        let mut status = ManifestStatus {
            api_version: text(&manifest["apiVersion"]),
            kind: text(&manifest["kind"]),
            namespace: manifest["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            name: text(&manifest["metadata"]["name"]),
            ..ManifestStatus::default()
        };
        let span = info_span!("manifest", kind = %status.kind, name = %status.name);
        // What the member allocates itself is neither applied nor compared for drift.
        let manifest = crate::allocated::without_allocated(manifest);
        let outcome = self
            .deliver(&manifest, cx, &mut status)
            .instrument(span)
            .await;
        let prior = cx
            .previous
            .iter()
            .find(|p| same_version_and_object(p, &status))
            .map_or(&[][..], |p| &p.conditions[..]);
        let set = |type_, state, reason: &str, message| {
            condition(type_, state, reason, message, cx.generation, prior, cx.now)
        };
        match outcome {
            Outcome::Live { object, drift } => {
                let applied = if drift.is_empty() {
                    set(APPLIED, State::True, "Applied", "applied".to_owned())
                } else {
                    let fields = match drift.len() {
                        1 => "1 field differs".to_owned(),
                        n => format!("{n} fields differ"),
                    };
                    let message =
                        format!("{fields} on the member; reported, not corrected (drift: Report)");
                    set(APPLIED, State::True, "Drifted", message)
                };
                let up = availability(&status.api_version, &status.kind, &object);
                let available = set(AVAILABLE, up.available.into(), up.reason, up.message);
                status.conditions = vec![applied, available];
                status.status_feedback =
                    feedback(&status.api_version, &status.kind, &object).map(Json::from);
                (status.drift, status.unlisted_drift) = DriftBound::MANIFEST.apply(drift);
            }
            Outcome::Failed { reason, message } => {
                info!(object = %describe(&status), reason, %message, "not applied");
                status.conditions = vec![
                    set(APPLIED, State::False, reason, message),
                    set(
                        AVAILABLE,
                        State::Unknown,
                        "NotApplied",
                        "not applied".to_owned(),
                    ),
                ];
            }
        }
        status
    }

    /// The conflict check, drift and apply of one manifest. Fills in the namespace of
    /// `status` once the kind's scope is known.
    async fn deliver(
        &self,
        manifest: &Value,
        cx: &Context<'_>,
        status: &mut ManifestStatus,
    ) -> Outcome {
        if status.api_version.is_empty() || status.kind.is_empty() || status.name.is_empty() {
            return Outcome::failed(
                "InvalidManifest",
                "a manifest needs apiVersion, kind and metadata.name",
            );
        }
        let client = match cx.client {
            Ok(client) => client,
            Err(why) => return Outcome::failed(INVALID_SERVICE_ACCOUNT, why),
        };
        let kind = match self
            .kinds
            .resolve(&self.client, &status.api_version, &status.kind)
            .await
        {
            Ok(Some(kind)) => kind,
            Ok(None) => {
                return Outcome::failed(
                    "KindNotServed",
                    format!(
                        "the cluster does not serve {} {}",
                        status.api_version, status.kind
                    ),
                );
            }
            Err(e) => {
                return Outcome::failed(
                    "ApplyFailed",
                    format!("cannot discover {}: {}", status.api_version, message(&e)),
                );
            }
        };
        status.namespace = kind
            .namespaced
            .then(|| status.namespace.clone().unwrap_or_else(|| "default".into()));
        let api = kind.api(client, status.namespace.as_deref());
        let shared = is_shared(manifest);
        let key: ObjectKey = (
            status.api_version.clone(),
            status.kind.clone(),
            status.namespace.clone(),
            status.name.clone(),
        );
        if shared && let Some(object) = self.shared.get(&key) {
            return Outcome::Live {
                object,
                drift: Vec::new(),
            };
        }
        // This hub's object as the change watch last saw it; otherwise (not watched, or
        // not this hub's) the member is asked.
        let seen = self.live.get(
            &status.api_version,
            &status.kind,
            status.namespace.as_deref(),
            &status.name,
        );
        let live = match seen {
            Some(object) => Some(object),
            None => match api.get_opt(&status.name).await {
                Ok(live) => live.map(|o| serde_json::to_value(o).unwrap_or_default()),
                Err(e) => return Outcome::failed(failure(&e), message(&e)),
            },
        };
        let provenance = cx.provenance;
        if let Some(live) = &live
            && !shared
            && !provenance.owns(live)
            && cx.policy.conflict == ConflictPolicy::Abort
        {
            return Outcome::failed(
                "Conflict",
                format!(
                    "{} exists on the member and {}",
                    describe(status),
                    provenance.owner_of(live)
                ),
            );
        }
        // A shared object (a namespace several placements need) only has to exist.
        if shared && let Some(live) = live {
            self.shared.put(key, &live);
            return Outcome::Live {
                object: live,
                drift: Vec::new(),
            };
        }
        // Taken over now, or before and still: under `deletion: DeleteCreated` it is given
        // back rather than deleted.
        let adopted = live.as_ref().is_some_and(|live| {
            !provenance.owns(live) || live["metadata"]["annotations"][ANNOTATION_ADOPTED] == "true"
        });
        let hash = manifest_hash(manifest);
        // The fields this sync puts back (drift corrected), told once the apply succeeds.
        let mut corrected = Vec::new();
        // This manifest, applied before and still ours: nothing to write unless a field
        // drifted and drift is corrected.
        if let Some(live) = live
            && provenance.owns(&live)
            && live["metadata"]["annotations"][ANNOTATION_MANIFEST_HASH] == hash.as_str()
        {
            let drift = drift(manifest, &live);
            if drift.is_empty() {
                return Outcome::Live {
                    object: live,
                    drift,
                };
            }
            if cx.policy.drift == DriftPolicy::Report {
                info!(fields = drift.len(), "drift reported");
                return Outcome::Live {
                    object: live,
                    drift,
                };
            }
            info!(fields = drift.len(), "drift corrected");
            corrected = drift.into_iter().map(|d| d.path).collect();
        }
        let mut object = manifest.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            for field in SERVER_METADATA {
                metadata.remove(field);
            }
            match &status.namespace {
                Some(namespace) => metadata.insert("namespace".into(), namespace.clone().into()),
                None => metadata.remove("namespace"),
            };
        }
        if !shared {
            provenance.stamp(&mut object, &hash, adopted);
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api
            .patch(&status.name, &params, &Patch::Apply(&object))
            .await
        {
            Ok(applied) => {
                debug!("applied");
                if !corrected.is_empty() {
                    let what = format!("{}: {}", describe(status), corrected.join(", "));
                    self.corrections
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(provenance.work.clone())
                        .or_default()
                        .push(what);
                }
                let object = serde_json::to_value(applied).unwrap_or_default();
                if shared {
                    self.shared.put(key, &object);
                }
                Outcome::Live {
                    object,
                    drift: Vec::new(),
                }
            }
            Err(kube::Error::Api(s))
                if s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces") =>
            {
                let namespace = status.namespace.as_deref().unwrap_or_default();
                self.shared.forget_namespace(namespace);
                Outcome::failed(
                    NAMESPACE_MISSING,
                    format!("the namespace {namespace} does not exist on the member"),
                )
            }
            Err(e) => {
                if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                    // The kind may be gone since it was discovered: look again next time.
                    self.kinds.forget(&status.api_version, &status.kind);
                }
                Outcome::failed(failure(&e), message(&e))
            }
        }
    }

    /// Takes one object off the member's books: deleted, or left with its provenance
    /// removed (`Orphan`, and `DeleteCreated` for an object taken over). Objects already gone, of kinds no longer served, or not put
    /// there by this placement are left alone.
    pub(crate) async fn release(
        &self,
        client: &kube::Client,
        object: &ManifestStatus,
        policy: DeletionPolicy,
        provenance: &Provenance,
    ) -> Result<(), Error> {
        let what = describe(object);
        if object.name.is_empty() {
            return Ok(());
        }
        let kind = match self
            .kinds
            .resolve(&self.client, &object.api_version, &object.kind)
            .await
        {
            Ok(Some(kind)) => kind,
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(Error::request(
                    format!("discover {}", object.api_version),
                    e,
                ));
            }
        };
        let api = kind.api(client, object.namespace.as_deref());
        let live = match api.get_opt(&object.name).await {
            Ok(Some(live)) => serde_json::to_value(live).unwrap_or_default(),
            Ok(None) => return Ok(()),
            Err(e) => return Err(Error::request(format!("read {what}"), e)),
        };
        if is_shared(&live) || !provenance.owns(&live) {
            debug!(object = %what, "shared or not this placement's: left alone");
            return Ok(());
        }
        // An object taken over from the member is given back under `DeleteCreated`.
        let give_back = match policy {
            DeletionPolicy::Delete => false,
            DeletionPolicy::Orphan => true,
            DeletionPolicy::DeleteCreated => {
                live["metadata"]["annotations"][ANNOTATION_ADOPTED] == "true"
            }
        };
        let outcome = if give_back {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            let patch = Patch::Merge(Provenance::removal_patch());
            api.patch(&object.name, &params, &patch).await.map(drop)
        } else {
            // Only the object looked at: not a namesake created since.
            let uid = live["metadata"]["uid"].as_str().map(str::to_owned);
            let params = DeleteParams::background().preconditions(Preconditions {
                uid,
                resource_version: None,
            });
            api.delete(&object.name, &params).await.map(drop)
        };
        match outcome {
            Ok(()) => {
                info!(object = %what, ?policy, give_back, "released");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(Error::request(format!("release {what}"), e)),
        }
    }
}

/// The same object, whatever its version: same group, kind, namespace and name.
pub(crate) fn same_object(a: &ManifestStatus, b: &ManifestStatus) -> bool {
    let group = |m: &ManifestStatus| {
        m.api_version
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_owned()
    };
    group(a) == group(b) && a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

fn same_version_and_object(a: &ManifestStatus, b: &ManifestStatus) -> bool {
    a.api_version == b.api_version && same_object(a, b)
}

/// The reason of a manifest the member refused to read or write: `Forbidden` when its
/// RBAC said no (the placement's service account may not), `ApplyFailed` otherwise.
fn failure(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(s) if s.code == 403 => FORBIDDEN,
        _ => "ApplyFailed",
    }
}

/// What the member said, without kube's wrapping.
fn message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
