//! The detector's caches: one watch per kind that some placement selects (started on
//! first use), whose changes make the placements selecting the changed object look again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::Value;
use tracing::info;

use super::{Error, Fleet};
use crate::plan::{self, PlacementKey};

/// A kind's cache.
#[derive(Clone)]
pub(super) struct Kind {
    /// How to reach the kind.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// Every object of the kind.
    pub store: Store<DynamicObject>,
}

/// The kinds watched so far.
pub(super) struct Templates {
    client: Client,
    kinds: Mutex<HashMap<(String, String), Kind>>,
}

impl Templates {
    pub fn new(client: Client) -> Self {
        Templates {
            client,
            kinds: Mutex::default(),
        }
    }

    /// The cache of `api_version`/`kind`, started if it is new, once it is filled. Fails
    /// when the hub does not serve the kind or the cache is not filled in time.
    ///
    /// Every caller waits for the fill, not only the one that started the cache: a cache
    /// not yet filled reads as "no such templates", and a plan made from it would take
    /// every manifest off its placement's Works (and their objects off the members).
    pub async fn kind(
        &self,
        fleet: Weak<Fleet>,
        api_version: &str,
        kind: &str,
    ) -> Result<Kind, Error> {
        let known = self
            .kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(api_version.to_owned(), kind.to_owned()))
            .cloned();
        let found = match known {
            Some(found) => found,
            None => self.start(fleet, api_version, kind).await?,
        };
        let waited =
            tokio::time::timeout(Duration::from_secs(30), found.store.wait_until_ready()).await;
        if !matches!(waited, Ok(Ok(()))) {
            return Err(Error::Waiting(format!(
                "the cache of {} {} is not filled yet",
                found.resource.api_version, found.resource.kind
            )));
        }
        Ok(found)
    }

    /// Starts the cache of `api_version`/`kind` (or finds the one another caller started
    /// meanwhile); it may not be filled yet.
    async fn start(
        &self,
        fleet: Weak<Fleet>,
        api_version: &str,
        kind: &str,
    ) -> Result<Kind, Error> {
        let key = (api_version.to_owned(), kind.to_owned());
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                let why = format!("the hub does not serve {api_version} {kind}");
                match e {
                    // Asked and answered: no such group, version or kind.
                    kube::Error::Discovery(_) => Error::NotServed(why),
                    kube::Error::Api(status) if status.code == 404 => Error::NotServed(why),
                    e => Error::Waiting(format!("{why}: {e}")),
                }
            })?;
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let store = writer.as_reader();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let found = Kind {
            resource: resource.clone(),
            namespaced: capabilities.scope == Scope::Namespaced,
            store,
        };
        {
            let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(other) = kinds.get(&key) {
                return Ok(other.clone());
            }
            kinds.insert(key, found.clone());
        }
        info!(%api_version, %kind, "watching templates");
        let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
        // What each object was, but for its status and version: a change of status alone
        // (such as the status placements write back) is not a change of the template.
        let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
        super::spawn_reflector(format!("{api_version} {kind}"), api, writer, move |event| {
            let Some(fleet) = fleet.upgrade() else { return };
            let (object, deleted) = match event {
                watcher::Event::Apply(o) => (o, false),
                watcher::Event::Delete(o) => (o, true),
                watcher::Event::InitApply(o) => {
                    seen.insert(identity(o), template_hash(o));
                    return;
                }
                watcher::Event::Init | watcher::Event::InitDone => return,
            };
            let id = identity(object);
            if deleted {
                seen.remove(&id);
            } else {
                let hash = template_hash(object);
                if seen.insert(id, hash) == Some(hash) {
                    return;
                }
            }
            let object = as_value(object, &api_version, &kind);
            for key in selecting(&fleet, &object) {
                fleet.pokes.placement(&key);
            }
        });
        Ok(found)
    }
}

/// An object's namespace and name.
fn identity(object: &DynamicObject) -> (Option<String>, String) {
    (
        object.metadata.namespace.clone(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// A hash of what a template is to placements: all of it but its status, its version and
/// its managed fields.
fn template_hash(object: &DynamicObject) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut metadata = object.metadata.clone();
    metadata.resource_version = None;
    metadata.managed_fields = None;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&metadata)
        .unwrap_or_default()
        .hash(&mut hasher);
    let mut data = object.data.clone();
    if let Some(fields) = data.as_object_mut() {
        fields.remove("status");
    }
    data.to_string().hash(&mut hasher);
    hasher.finish()
}

/// A cached object as JSON, with its apiVersion and kind.
pub(super) fn as_value(object: &DynamicObject, api_version: &str, kind: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = api_version.into();
    value["kind"] = kind.into();
    value
}

/// The placements that select `object`.
pub(super) fn selecting(fleet: &Fleet, object: &Value) -> Vec<PlacementKey> {
    let mut keys = Vec::new();
    for p in fleet.caches.placements.state() {
        let namespace = p.metadata.namespace.as_deref();
        if plan::selects(&p.spec, namespace, object) {
            keys.push(PlacementKey {
                namespace: namespace.map(str::to_owned),
                name: p.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    for p in fleet.caches.cluster_placements.state() {
        if plan::selects(&p.spec.placement, None, object) {
            keys.push(PlacementKey {
                namespace: None,
                name: p.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    keys
}

/// What a placement's resource selectors select.
#[derive(Debug, Default)]
pub(super) struct Selected {
    /// Every object of the selected kinds that a selector matches, once each.
    pub objects: Vec<Value>,
    /// The selectors that match nothing, described (`apps/v1 Deployment webb`).
    pub unmatched: Vec<String>,
    /// A Placement's selectors of cluster-scoped kinds, described: they select nothing,
    /// since a Placement delivers only what lives in its namespace.
    pub outside: Vec<String>,
}

/// A resource selector in words: its kind, then its name or labels.
fn describe(selector: &flotilla_api::ResourceSelector) -> String {
    let mut text = format!("{} {}", selector.api_version, selector.kind);
    if let Some(namespace) = &selector.namespace {
        text.push_str(&format!(" in {namespace}"));
    }
    match (&selector.name, &selector.label_selector) {
        (Some(name), _) => text.push_str(&format!(" {name}")),
        (None, Some(labels)) => text.push_str(&format!(
            " with labels {}",
            serde_json::to_string(labels).unwrap_or_default()
        )),
        (None, None) => {}
    }
    text
}

/// What the resource selectors of a placement in `namespace` select: for a Placement
/// (`namespace` given) only objects of that namespace, never a cluster-scoped kind. Fails
/// when the hub does not serve a selected kind ([`Error::NotServed`]) or its cache is not
/// filled.
pub(super) async fn selected(
    fleet: &Arc<Fleet>,
    spec: &flotilla_api::PlacementSpec,
    namespace: Option<&str>,
) -> Result<Selected, Error> {
    let mut found = Selected::default();
    let mut seen = std::collections::BTreeSet::new();
    for selector in &spec.resource_selectors {
        let kind = fleet
            .templates
            .kind(Arc::downgrade(fleet), &selector.api_version, &selector.kind)
            .await?;
        if namespace.is_some() && !kind.namespaced {
            found.outside.push(describe(selector));
            continue;
        }
        // One object by name, where its namespace is known: looked up, not searched for.
        let place = match (kind.namespaced, namespace.or(selector.namespace.as_deref())) {
            (false, _) => Some(None),
            (true, Some(ns)) => Some(Some(ns)),
            (true, None) => None,
        };
        let candidates = match (&selector.name, place) {
            (Some(name), Some(ns)) => {
                let mut reference =
                    kube::runtime::reflector::ObjectRef::new_with(name, kind.resource.clone());
                reference.namespace = ns.map(str::to_owned);
                kind.store.get(&reference).into_iter().collect()
            }
            _ => kind.store.state(),
        };
        let mut matched = false;
        for object in candidates {
            let value = as_value(&object, &selector.api_version, &selector.kind);
            if plan::selector_matches(selector, namespace, &value)
                && value["metadata"]["deletionTimestamp"].is_null()
            {
                matched = true;
                if seen.insert(plan::manifest_id(&value)) {
                    found.objects.push(value);
                }
            }
        }
        if !matched {
            found.unmatched.push(describe(selector));
        }
    }
    Ok(found)
}
