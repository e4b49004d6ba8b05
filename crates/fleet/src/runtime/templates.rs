//! The detector's caches: one watch per kind that some placement selects (started on
//! first use), whose changes make the placements selecting the changed object look again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
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

    /// The cache of `api_version`/`kind`, started (and filled) if it is new. Fails when
    /// the hub does not serve the kind.
    pub async fn kind(
        &self,
        fleet: Weak<Fleet>,
        api_version: &str,
        kind: &str,
    ) -> Result<Kind, Error> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.kinds.lock().expect("lock").get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                Error::Waiting(format!("the hub does not serve {api_version} {kind}: {e}"))
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
            let mut kinds = self.kinds.lock().expect("lock");
            if let Some(other) = kinds.get(&key) {
                return Ok(other.clone());
            }
            kinds.insert(key, found.clone());
        }
        info!(%api_version, %kind, "watching templates");
        let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
        super::spawn_reflector(format!("{api_version} {kind}"), api, writer, move |event| {
            if let (Some(fleet), watcher::Event::Apply(o) | watcher::Event::Delete(o)) =
                (fleet.upgrade(), event)
            {
                let object = as_value(o, &api_version, &kind);
                for key in selecting(&fleet, &object) {
                    fleet.poke(&key);
                }
            }
        });
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
}

/// A cached object as JSON, with its apiVersion and kind.
pub(super) fn as_value(object: &DynamicObject, api_version: &str, kind: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = api_version.into();
    value["kind"] = kind.into();
    value
}

/// The placements that select `object`.
fn selecting(fleet: &Fleet, object: &Value) -> Vec<PlacementKey> {
    let mut keys = Vec::new();
    for p in fleet.placements.state() {
        let namespace = p.metadata.namespace.as_deref();
        if plan::selects(&p.spec, namespace, object) {
            keys.push(PlacementKey {
                namespace: namespace.map(str::to_owned),
                name: p.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    for p in fleet.cluster_placements.state() {
        if plan::selects(&p.spec.placement, None, object) {
            keys.push(PlacementKey {
                namespace: None,
                name: p.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    keys
}

/// Every object of the selected kinds that a placement in `namespace` selects, once each.
pub(super) async fn selected(
    fleet: &Arc<Fleet>,
    spec: &flotilla_api::PlacementSpec,
    namespace: Option<&str>,
) -> Result<Vec<Value>, Error> {
    let mut objects: Vec<Value> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for selector in &spec.resource_selectors {
        let kind = fleet
            .templates
            .kind(Arc::downgrade(fleet), &selector.api_version, &selector.kind)
            .await?;
        for object in kind.store.state() {
            let value = as_value(&object, &selector.api_version, &selector.kind);
            if plan::selector_matches(selector, namespace, &value)
                && value["metadata"]["deletionTimestamp"].is_null()
                && seen.insert(plan::manifest_id(&value))
            {
                objects.push(value);
            }
        }
    }
    Ok(objects)
}
